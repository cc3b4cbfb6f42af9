//! The built-in HTTP fetcher against a real loopback server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use rota::{CancellationToken, FetchError, Options, Target, TargetError, TargetResult};
use rota_cli::http::{HttpConfig, HttpFetch};

fn target(url: String) -> Target {
    Target {
        url,
        options: Options::default(),
    }
}

fn with(url: String, options: Options) -> Target {
    Target { url, options }
}

async fn get_with(cfg: HttpConfig, t: Target) -> Result<TargetResult, FetchError> {
    let f = HttpFetch::new(cfg).unwrap();
    f.get(&t, &CancellationToken::new()).await
}

async fn get(t: Target) -> Result<TargetResult, FetchError> {
    get_with(common::loopback(), t).await
}

fn target_error(r: Result<TargetResult, FetchError>) -> TargetError {
    match r {
        Err(FetchError::Target(e)) => e,
        other => panic!("expected a target error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_2xx_page_is_done_with_its_body_and_meta() {
    let s = common::start().await;
    let r = get(target(s.url("/ok"))).await.unwrap();
    assert_eq!(r.content, common::OK_BODY);
    assert_eq!(r.meta["status"], 200);
    assert_eq!(r.meta["content_type"], "text/plain; charset=utf-8");
    assert_eq!(r.meta["bytes"], common::OK_BODY.len());
    assert_eq!(r.meta["final_url"], s.url("/ok"));
}

/// A Content-Type holding a byte that is not ASCII (a charset name in Latin-1) is kept as lossy
/// text, as the body is, not dropped whole.
#[tokio::test]
async fn a_content_type_that_is_not_ascii_is_kept_as_lossy_text() {
    let s = common::start().await;
    let r = get(target(s.url("/latin1-type"))).await.unwrap();
    assert_eq!(r.meta["content_type"], "text/plain; charset=caf\u{fffd}");
}

#[tokio::test]
async fn a_404_is_a_target_error_with_status_reason_and_hint() {
    let s = common::start().await;
    let e = target_error(get(target(s.url("/status/404"))).await);
    assert_eq!(e.status, 404);
    assert_eq!(e.msg, "HTTP 404 Not Found");
    assert!(e.hint.contains("check the URL"), "{}", e.hint);
}

/// Any other status than 2xx, 429 and 503 fails the target with that status, and a hint of its
/// kind: what an agent should do next differs between a login page, a page gone, a page
/// blocked and a server in trouble.
#[tokio::test]
async fn any_other_non_2xx_status_is_a_target_error_with_that_status() {
    let s = common::start().await;
    for (code, msg, hint) in [
        // A redirect without a Location: reqwest has nowhere to follow it.
        (
            300,
            "HTTP 300 Multiple Choices",
            "redirect that could not be followed",
        ),
        (
            400,
            "HTTP 400 Bad Request",
            "rejected the request; check the URL",
        ),
        (401, "HTTP 401 Unauthorized", "needs a login"),
        (403, "HTTP 403 Forbidden", "refuses this client"),
        (404, "HTTP 404 Not Found", "does not exist"),
        (405, "HTTP 405 Method Not Allowed", "plain GET"),
        (406, "HTTP 406 Not Acceptable", "plain GET"),
        (410, "HTTP 410 Gone", "does not exist"),
        (415, "HTTP 415 Unsupported Media Type", "plain GET"),
        (
            418,
            "HTTP 418 I'm a teapot",
            "rejected the request; check the URL",
        ),
        (
            451,
            "HTTP 451 Unavailable For Legal Reasons",
            "legal reasons",
        ),
        (
            500,
            "HTTP 500 Internal Server Error",
            "server failed to answer",
        ),
        (502, "HTTP 502 Bad Gateway", "server failed to answer"),
    ] {
        let e = target_error(get(target(s.url(&format!("/status/{code}")))).await);
        assert_eq!((e.status, e.msg.as_str()), (code, msg));
        assert!(e.hint.contains(hint), "{code}: {}", e.hint);
    }
}

/// A 407 comes from the proxy the environment names (an http:// target's request goes to it),
/// not from the page: the hint says to give the proxy credentials, not that the page needs a
/// login (which sent the agent off to look for another source of a page that is public).
#[tokio::test]
async fn a_407_hint_is_about_the_proxy_not_the_page() {
    let s = common::start().await;
    let e = target_error(get(target(s.url("/status/407"))).await);
    assert_eq!(e.status, 407);
    assert_eq!(e.msg, "HTTP 407 Proxy Authentication Required");
    assert!(e.hint.contains("proxy"), "{}", e.hint);
    assert!(e.hint.contains("no_proxy"), "{}", e.hint);
    assert!(!e.hint.contains("page needs a login"), "{}", e.hint);
}

/// A 408 (the server gave up waiting for the request) and a 414 (the URL too long) are not
/// about the URL's query in general: each hint says what to do about it.
#[tokio::test]
async fn a_408_and_a_414_have_hints_of_their_own() {
    let s = common::start().await;
    for (code, msg, hint) in [
        (408, "HTTP 408 Request Timeout", "try again later"),
        (414, "HTTP 414 URI Too Long", "shorten"),
    ] {
        let e = target_error(get(target(s.url(&format!("/status/{code}")))).await);
        assert_eq!((e.status, e.msg.as_str()), (code, msg));
        assert!(e.hint.contains(hint), "{code}: {}", e.hint);
        assert!(!e.hint.contains("check the URL"), "{code}: {}", e.hint);
    }
}

#[tokio::test]
async fn a_503_or_429_is_only_busy() {
    let s = common::start().await;
    assert_eq!(
        get(target(s.url("/always-busy"))).await,
        Err(FetchError::RetryLater(
            "HTTP 503 Service Unavailable".into()
        ))
    );
    assert_eq!(
        get(target(s.url("/too-many"))).await,
        Err(FetchError::RetryLater("HTTP 429 Too Many Requests".into()))
    );
}

#[tokio::test]
async fn a_busy_page_that_recovers_is_busy_then_done() {
    let s = common::start().await;
    let t = target(s.url("/busy/a/2"));
    assert!(matches!(
        get(t.clone()).await,
        Err(FetchError::RetryLater(_))
    ));
    assert!(matches!(
        get(t.clone()).await,
        Err(FetchError::RetryLater(_))
    ));
    assert_eq!(get(t).await.unwrap().content, "fine a");
    assert_eq!(s.hits("busy/a"), 3);
}

#[tokio::test]
async fn redirects_are_followed_and_the_final_url_reported() {
    let s = common::start().await;
    let r = get(target(s.url("/redirect"))).await.unwrap();
    assert_eq!(r.content, common::OK_BODY);
    assert_eq!(r.meta["final_url"], s.url("/ok"));
}

#[tokio::test]
async fn a_redirect_loop_fails_after_ten_redirects() {
    let s = common::start().await;
    let e = target_error(get(target(s.url("/loop"))).await);
    assert_eq!(e.msg, "too many redirects (more than 10)");
    assert!(e.hint.contains("redirects"), "{}", e.hint);
}

/// A redirect to an address that is not http(s) fails the target as such, with a hint that
/// says so, not as a broken connection worth trying again.
#[tokio::test]
async fn a_redirect_to_another_scheme_fails_with_a_hint_that_says_so() {
    let s = common::start().await;
    let e = target_error(get(target(s.url("/to-ftp"))).await);
    assert_eq!(e.status, 502);
    assert!(
        e.msg
            .starts_with("a redirect to an address rota cannot fetch"),
        "{}",
        e.msg
    );
    assert!(e.hint.contains("http and https"), "{}", e.hint);
    assert!(!e.hint.contains("try again"), "{}", e.hint);
    assert!(!format!("{}{}", e.msg, e.hint).contains("ftp://"), "{e:?}");
}

#[tokio::test]
async fn a_slow_page_fails_at_the_timeout_with_a_hint() {
    let s = common::start().await;
    let cfg = HttpConfig {
        timeout: Duration::from_millis(200),
        ..common::loopback()
    };
    let e = target_error(get_with(cfg, target(s.url("/slow"))).await);
    assert_eq!(e.status, 504);
    assert_eq!(e.msg, "timed out after 200ms");
    assert!(e.hint.contains("--timeout"), "{}", e.hint);
}

#[tokio::test]
async fn a_body_over_the_cap_fails_with_a_hint_whether_or_not_its_length_is_announced() {
    let s = common::start().await;
    let cfg = HttpConfig {
        max_body: 4096,
        ..common::loopback()
    };
    for path in ["/big/4097", "/stream/10000"] {
        let e = target_error(get_with(cfg, target(s.url(path))).await);
        assert_eq!(e.status, 413, "{path}");
        assert_eq!(e.msg, "body larger than the 4 KiB cap", "{path}");
        assert!(e.hint.contains("--max-body"), "{}", e.hint);
    }
}

#[tokio::test]
async fn a_body_at_the_cap_is_kept_whole() {
    let s = common::start().await;
    let cfg = HttpConfig {
        max_body: 4096,
        ..common::loopback()
    };
    for path in ["/big/4096", "/stream/4096"] {
        let r = get_with(cfg, target(s.url(path))).await.unwrap();
        assert_eq!(r.content.len(), 4096, "{path}");
        assert_eq!(r.meta["bytes"], 4096, "{path}");
    }
}

#[tokio::test]
async fn grep_keeps_only_the_matching_lines() {
    let s = common::start().await;
    let o = Options {
        grep: "^rust".into(),
        ..Options::default()
    };
    let r = get(with(s.url("/ok"), o)).await.unwrap();
    assert_eq!(r.content, "rust is here\nrusty end");
    assert_eq!(r.meta["bytes"], common::OK_BODY.len());
}

#[tokio::test]
async fn an_invalid_grep_regex_fails_with_a_hint_before_any_request() {
    let s = common::start().await;
    let o = Options {
        grep: "(unclosed".into(),
        ..Options::default()
    };
    let e = target_error(get(with(s.url("/busy/never/0"), o)).await);
    assert_eq!(e.status, 400);
    assert!(e.msg.starts_with("invalid grep pattern: "), "{}", e.msg);
    assert!(e.hint.contains("regular expression"), "{}", e.hint);
    assert_eq!(s.hits("busy/never"), 0);
}

#[tokio::test]
async fn an_unsupported_option_fails_naming_it_and_is_never_ignored() {
    let s = common::start().await;
    let o = Options {
        jq: ".items".into(),
        ..Options::default()
    };
    let e = target_error(get(with(s.url("/busy/jq/0"), o)).await);
    assert_eq!(e.status, 400);
    assert_eq!(e.msg, "option jq is not supported by the built-in fetcher");
    assert!(e.hint.contains("jq"), "{}", e.hint);
    assert_eq!(s.hits("busy/jq"), 0);
}

#[tokio::test]
async fn a_refused_connection_is_a_502_with_a_hint() {
    // A port bound but not listening: held, and nothing answers there.
    let (_held, addr) = common::refusing();
    let e = target_error(get(target(format!("http://{addr}/x"))).await);
    assert_eq!(e.status, 502);
    // The cause, in the system's words (the innermost error: not reqwest's, which names the
    // URL).
    assert!(
        e.msg.starts_with("could not connect: Connection refused"),
        "{}",
        e.msg
    );
    assert!(!e.msg.contains("127.0.0.1"), "{}", e.msg);
    assert!(e.hint.contains("host"), "{}", e.hint);
}

#[tokio::test]
async fn a_tls_handshake_failure_is_a_502_with_a_hint() {
    // The server speaks plain HTTP: an https:// fetch of it fails its TLS handshake.
    let s = common::start().await;
    let e = target_error(get(target(format!("https://{}/ok", s.addr))).await);
    assert_eq!(e.status, 502);
    assert!(e.msg.starts_with("could not connect"), "{}", e.msg);
    assert!(!e.hint.is_empty());
}

/// A server whose certificate no authority here vouches for (a self-signed one, as `openssl
/// req -x509` makes it, a certificate authority's own, made for this test alone:
/// `tests/fixtures/self-signed.*.pem`) fails the fetch saying so, with a hint about the
/// certificate, not about reaching the host. (rustls's own words were
/// `invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))`.)
#[tokio::test]
async fn a_self_signed_certificate_is_refused_saying_so() {
    use std::sync::Arc;

    use tokio_rustls::rustls::{self, pki_types::pem::PemObject};
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let cert =
        rustls::pki_types::CertificateDer::from_pem_file(fixtures.join("self-signed.cert.pem"))
            .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(fixtures.join("self-signed.key.pem"))
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // The client gives up during the handshake: nothing to serve.
            let _ = acceptor.accept(tcp).await;
        }
    });
    let e = target_error(get(target(format!("https://localhost:{}/x", addr.port()))).await);
    assert_eq!(e.status, 502);
    assert_eq!(
        e.msg,
        "could not connect: the host's TLS certificate is a certificate authority's, not a \
         server's (self-signed?)"
    );
    assert!(e.hint.contains("TLS certificate"), "{}", e.hint);
}

#[tokio::test]
async fn a_cancelled_fetch_returns_without_waiting_for_the_page() {
    let s = common::start().await;
    let f = HttpFetch::new(common::loopback()).unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.cancel();
    });
    let r = f.get(&target(s.url("/slow")), &cancel).await;
    assert_eq!(r, Err(FetchError::Other("fetch cancelled".into())));
}
