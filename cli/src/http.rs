//! The built-in HTTP fetcher: a plain GET with reqwest and rustls (ring).
//!
//! Every failure becomes a [`TargetError`] whose `hint` tells an agent what to do next, except
//! 429 and 503, which are only busy ([`FetchError::RetryLater`]). Nothing here logs a URL or a
//! host: the messages it builds name statuses, sizes and durations only.

use std::sync::{Arc, Once};
use std::time::Duration;

use async_trait::async_trait;
use regex::{Regex, RegexBuilder};
use reqwest::{StatusCode, Url, redirect};
use rota::{
    Caller, CancellationToken, Fetch, FetchError, Options, Target, TargetError, TargetResult,
};
use serde_json::{Map, Value};

/// The most redirects one fetch follows.
pub const MAX_REDIRECTS: usize = 10;
/// The default per-request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default body cap, in bytes.
pub const DEFAULT_MAX_BODY: u64 = 8 * 1024 * 1024;
/// The largest compiled `grep` pattern, in bytes: a guard against patterns that explode.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// How the built-in fetcher fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// The whole request's time limit: connect, headers and body.
    pub timeout: Duration,
    /// The largest body kept, in bytes; a larger one fails the target.
    pub max_body: u64,
    /// Whether requests go through the proxy the environment names (`http_proxy`,
    /// `https_proxy`, `all_proxy`, upper case too; hosts in `no_proxy` bypass it), as reqwest
    /// does by default: an HTTP(S) or a SOCKS one (`socks5://`, `socks5h://`, `socks4://`).
    /// The demo turns it off: its server is on loopback, which a proxy elsewhere cannot reach.
    pub system_proxy: bool,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
            system_proxy: true,
        }
    }
}

/// The built-in fetcher: GET the target's URL, follow up to [`MAX_REDIRECTS`] redirects, keep
/// the body (at most `max_body` bytes) as lossy UTF-8 text.
///
/// A done target's `meta` holds `status`, `content_type`, `bytes` (the body's size before any
/// `grep`) and `final_url` (after redirects). The only option it supports is `grep`: a regex
/// whose matching lines are kept. Any other option set fails the target with status 400, so
/// that an option is never silently ignored.
#[derive(Debug, Clone)]
pub struct HttpFetch {
    client: reqwest::Client,
    cfg: HttpConfig,
    /// Whether the environment names a proxy for http:// targets (read once, as reqwest reads
    /// it when the client is built), for the hint of a failed connection.
    http_proxy_named: bool,
}

/// The proxy variables as the HTTP client reads them (hyper-util's `Matcher::from_env`, through
/// reqwest's system proxy): of each pair (upper case first) the first one set, by name and
/// value. http:// targets go through `http` if it is usable, else `all`; https:// through
/// `https`, else `all`; under CGI (`REQUEST_METHOD` set) through none.
#[derive(Debug, Default)]
struct ProxyEnv {
    cgi: bool,
    all: Option<(&'static str, String)>,
    http: Option<(&'static str, String)>,
    https: Option<(&'static str, String)>,
}

impl ProxyEnv {
    fn read() -> ProxyEnv {
        // The first of `pair` set (to valid Unicode), as the client picks it.
        let var = |pair: [&'static str; 2]| {
            pair.into_iter()
                .find_map(|n| std::env::var(n).ok().map(|v| (n, v)))
        };
        ProxyEnv {
            cgi: std::env::var_os("REQUEST_METHOD").is_some(),
            all: var(["ALL_PROXY", "all_proxy"]),
            http: var(["HTTP_PROXY", "http_proxy"]),
            https: var(["HTTPS_PROXY", "https_proxy"]),
        }
    }

    /// Whether `var` holds a proxy the client can use.
    fn usable(var: &Option<(&'static str, String)>) -> bool {
        var.as_ref().is_some_and(|(_, val)| usable_proxy(val))
    }

    /// Whether http:// targets go through a proxy (`no_proxy` may still exempt a host).
    fn for_http(&self) -> bool {
        !self.cgi && (Self::usable(&self.http) || Self::usable(&self.all))
    }

    /// Whether https:// targets go through a proxy (`no_proxy` may still exempt a host).
    fn for_https(&self) -> bool {
        !self.cgi && (Self::usable(&self.https) || Self::usable(&self.all))
    }

    /// A warning for each variable set to something the client cannot use as a proxy, which
    /// it ignores without a word: by name only (a value may hold credentials), and which
    /// fetches then go direct, if any do.
    fn warnings(&self) -> Vec<String> {
        if self.cgi {
            return Vec::new();
        }
        let direct = match (self.for_http(), self.for_https()) {
            (false, false) => ", and fetches go direct",
            (false, true) => ", and http:// fetches go direct",
            (true, false) => ", and https:// fetches go direct",
            (true, true) => "",
        };
        [&self.all, &self.http, &self.https]
            .into_iter()
            .flatten()
            .filter(|(_, val)| !val.is_empty() && !usable_proxy(val))
            .map(|(name, _)| {
                format!(
                    "{name} is set, but not to a proxy URL (scheme http, https, socks4, \
                     socks4a, socks5 or socks5h, and a host): it is ignored{direct}"
                )
            })
            .collect()
    }
}

/// Whether the HTTP client takes `val` as a proxy: hyper-util's `parse_env_uri` restated (a URI
/// with a host, of scheme http, https, socks4, socks4a, socks5 or socks5h, or none, which is
/// http; credentials before an `@`).
fn usable_proxy(val: &str) -> bool {
    use axum::http::Uri;
    use axum::http::uri::Scheme;
    let Ok(uri) = val.parse::<Uri>() else {
        return false;
    };
    let scheme = match uri.scheme() {
        Some(s) if s == &Scheme::HTTP || s == &Scheme::HTTPS => s.clone(),
        Some(s) if matches!(s.as_str(), "socks4" | "socks4a" | "socks5" | "socks5h") => s.clone(),
        Some(_) => return false,
        None => Scheme::HTTP,
    };
    let Some(authority) = uri.authority() else {
        return false;
    };
    let host_port = authority
        .as_str()
        .split_once('@')
        .map_or(authority.as_str(), |(_, host_port)| host_port);
    Uri::builder()
        .scheme(scheme)
        .authority(host_port)
        .path_and_query("/")
        .build()
        .is_ok()
}

/// Makes ring the process's rustls crypto provider (reqwest is built without one, to keep
/// aws-lc and its C toolchain out of the build). A provider installed earlier is kept.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // `Err` means a provider is already installed, which is all we need.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl HttpFetch {
    /// A fetcher with `cfg`. Fails only if the TLS setup cannot be built.
    ///
    /// TLS trusts the system's CA certificates. A machine without any (a bare container) would
    /// make the client fail to build, and with it every command, the offline demo included; it
    /// gets the bundled Mozilla roots instead.
    pub fn new(cfg: HttpConfig) -> Result<HttpFetch, String> {
        install_crypto_provider();
        let builder = || {
            let b = reqwest::Client::builder()
                .redirect(redirect::Policy::limited(MAX_REDIRECTS))
                .timeout(cfg.timeout)
                .user_agent(concat!("rota/", env!("CARGO_PKG_VERSION")));
            if cfg.system_proxy { b } else { b.no_proxy() }
        };
        let client = match builder().build() {
            Ok(c) => c,
            Err(system) => {
                // (reqwest's own words are only "builder error": the cause is at the root.)
                tracing::warn!(
                    error = %root_cause(&system),
                    "no usable system CA certificates: trusting the bundled Mozilla roots"
                );
                let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
                    .iter()
                    .filter_map(|der| reqwest::Certificate::from_der(der).ok());
                builder()
                    .tls_certs_only(roots)
                    .build()
                    .map_err(|e| format!("building the HTTP client: {}", e.without_url()))?
            }
        };
        let proxies = ProxyEnv::read();
        if cfg.system_proxy {
            for warning in proxies.warnings() {
                tracing::warn!("{warning}");
            }
        }
        Ok(HttpFetch {
            client,
            cfg,
            http_proxy_named: cfg.system_proxy && proxies.for_http(),
        })
    }

    /// The fetcher's configuration.
    pub fn config(&self) -> HttpConfig {
        self.cfg
    }

    /// Fetches `target`, returning soon after `cancel` is cancelled.
    pub async fn get(
        &self,
        target: &Target,
        cancel: &CancellationToken,
    ) -> Result<TargetResult, FetchError> {
        let grep = check_options(&target.options)?;
        let url = parse_url(&target.url)?;
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(FetchError::Other("fetch cancelled".into())),
            r = self.fetch_url(url, grep.as_ref()) => r,
        }
    }

    async fn fetch_url(&self, url: Url, grep: Option<&Regex>) -> Result<TargetResult, FetchError> {
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = resp.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            return Err(FetchError::RetryLater(status_msg(status)));
        }
        if !status.is_success() {
            return Err(FetchError::Target(TargetError {
                status: status.as_u16(),
                msg: status_msg(status),
                hint: status_hint(status).into(),
            }));
        }
        // As lossy text, as the body is: a byte that is not ASCII (a server's charset name
        // in Latin-1, say) must not cost the whole header.
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let final_url = resp.url().to_string();
        if resp.content_length().is_some_and(|n| n > self.cfg.max_body) {
            return Err(self.too_big());
        }
        let mut body: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport_error(&e))? {
            if (body.len() + chunk.len()) as u64 > self.cfg.max_body {
                return Err(self.too_big());
            }
            body.extend_from_slice(&chunk);
        }
        let bytes = body.len();
        let text = String::from_utf8_lossy(&body);
        let content = match grep {
            None => text.into_owned(),
            Some(re) => keep_matching_lines(&text, re),
        };
        let mut meta = Map::new();
        meta.insert("status".into(), Value::from(status.as_u16()));
        meta.insert("content_type".into(), Value::from(content_type));
        meta.insert("bytes".into(), Value::from(bytes));
        meta.insert("final_url".into(), Value::from(final_url));
        Ok(TargetResult { content, meta })
    }

    fn too_big(&self) -> FetchError {
        let cap = human_bytes(self.cfg.max_body);
        FetchError::Target(TargetError {
            status: 413,
            msg: format!("body larger than the {cap} cap"),
            hint: format!(
                "the page is bigger than the built-in fetcher keeps ({cap}); fetch a smaller \
                 resource (a specific page or a range), or raise the cap with --max-body"
            ),
        })
    }

    /// Maps a failure to get an answer (or to read its body) to a target error. reqwest's own
    /// text names the URL, so the message is built from its kind and root cause only.
    fn transport_error(&self, e: &reqwest::Error) -> FetchError {
        let (status, msg, hint) = if e.is_timeout() {
            (
                504,
                format!(
                    "timed out after {}",
                    humantime::format_duration(self.cfg.timeout)
                ),
                "the server did not answer in time; try again later, fetch a lighter page, or \
                 raise the limit with --timeout"
                    .to_owned(),
            )
        } else if e.is_redirect() {
            (
                502,
                format!("too many redirects (more than {MAX_REDIRECTS})"),
                "the page redirects in a loop or too many times; open the address it should end \
                 at directly"
                    .to_owned(),
            )
        } else if e.is_builder() {
            // Here: a redirect to an address reqwest cannot request (another scheme than
            // http(s), or one it cannot parse); the target's own address was checked on input.
            (
                502,
                format!(
                    "a redirect to an address rota cannot fetch: {}",
                    root_cause(e)
                ),
                "the page redirects to an address that is not http or https; rota fetches \
                 only http and https addresses, so fetch that one another way"
                    .to_owned(),
            )
        } else if e.is_connect() {
            let hint = match proxy_error(e) {
                Some(ProxyFailed::AuthRequired) => PROXY_AUTH_HINT,
                Some(ProxyFailed::Unreachable) => {
                    "the proxy the environment names (http_proxy, https_proxy or all_proxy) \
                     could not be reached; check its address and that it is running, or list \
                     the target's host in no_proxy to fetch it directly"
                }
                Some(ProxyFailed::Other) => {
                    "the proxy the environment names (http_proxy, https_proxy or all_proxy) \
                     would not open a connection to the host; check the proxy and whether it \
                     lets you reach that host, or list the target's host in no_proxy to fetch \
                     it directly"
                }
                // An http:// target's request goes to the proxy as it is, not through a
                // tunnel: a proxy that cannot be reached fails as the host would. (A host the
                // proxy cannot reach is its 502, not a failed connection.)
                None if self.http_proxy_named && e.url().is_some_and(|u| u.scheme() == "http") => {
                    "the proxy the environment names for http:// targets (http_proxy or \
                     all_proxy) could not be reached (or the host, if no_proxy lists it); check \
                     the proxy's address and that it is running, or list the host in no_proxy \
                     to fetch it directly"
                }
                None if refused_certificate(e).is_some() => {
                    "the host's TLS certificate is not one rota trusts (it trusts the system's \
                     CA certificates, or the bundled Mozilla roots on a system without any); \
                     check that the URL names the site you mean; a site with a self-signed or \
                     private certificate cannot be fetched over https here"
                }
                None => {
                    "the host could not be reached (DNS lookup, refused connection or TLS \
                     handshake failed); check the host name and the http/https scheme, or try \
                     again later"
                }
            };
            let why = match refused_certificate(e) {
                Some(what) => format!("the host's TLS certificate {what}"),
                None => root_cause(e),
            };
            (502, format!("could not connect: {why}"), hint.to_owned())
        } else {
            (
                502,
                format!("the connection failed: {}", root_cause(e)),
                "the server broke off the answer; try again later".to_owned(),
            )
        };
        FetchError::Target(TargetError { status, msg, hint })
    }
}

#[async_trait]
impl Fetch for HttpFetch {
    async fn fetch(
        &self,
        _caller: Arc<Caller>,
        target: Target,
        cancel: CancellationToken,
    ) -> Result<TargetResult, FetchError> {
        self.get(&target, &cancel).await
    }
}

/// Why the built-in fetcher fails any target with options `o` before fetching it (an option it
/// does not support, an invalid `grep` pattern): the message and hint it would store; `None`
/// if it takes them. For `rota run`, to refuse such a target before submitting its job.
pub fn options_refused(o: &Options) -> Option<(String, String)> {
    match check_options(o) {
        Ok(_) => None,
        Err(FetchError::Target(t)) => Some((t.msg, t.hint)),
        Err(e) => Some((e.to_string(), String::new())),
    }
}

/// The compiled `grep` pattern, if any; an error for an invalid one or any unsupported option.
fn check_options(o: &Options) -> Result<Option<Regex>, FetchError> {
    let set: Vec<&str> = [
        ("mode", !o.mode.is_empty()),
        ("question", !o.question.is_empty()),
        ("pages", !o.pages.is_empty()),
        ("jq", !o.jq.is_empty()),
        ("context", o.context.is_some()),
        ("recover", o.recover),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if !set.is_empty() {
        let names = set.join(", ");
        let msg = if set.len() == 1 {
            format!("option {names} is not supported by the built-in fetcher")
        } else {
            format!("options {names} are not supported by the built-in fetcher")
        };
        return Err(bad_request(
            msg,
            format!(
                "the built-in fetcher does a plain GET and supports only the grep option; \
                 remove {names} from the target's options, or use a fetcher that supports it"
            ),
        ));
    }
    if o.grep.is_empty() {
        return Ok(None);
    }
    RegexBuilder::new(&o.grep)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(Some)
        .map_err(|e| {
            bad_request(
                format!("invalid grep pattern: {}", regex_error(&e)),
                "grep is a regular expression (Rust regex syntax) matched against each line; \
                 fix it, or escape special characters with a backslash (\\. \\( \\[)"
                    .into(),
            )
        })
}

fn parse_url(s: &str) -> Result<Url, FetchError> {
    let url = Url::parse(s).map_err(|e| {
        bad_request(
            format!("invalid URL: {e}"),
            "give an absolute URL with its scheme, like https://example.com/page".into(),
        )
    })?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(bad_request(
            format!("unsupported URL scheme {other}"),
            "the built-in fetcher fetches only http:// and https:// URLs".into(),
        )),
    }
}

fn bad_request(msg: String, hint: String) -> FetchError {
    FetchError::Target(TargetError {
        status: 400,
        msg,
        hint,
    })
}

/// `HTTP 404 Not Found`, or `HTTP 599` for a status without a reason phrase.
fn status_msg(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("HTTP {} {reason}", status.as_u16()),
        None => format!("HTTP {}", status.as_u16()),
    }
}

fn status_hint(status: StatusCode) -> &'static str {
    match status.as_u16() {
        300..=399 => {
            "the server answered with a redirect that could not be followed; open the address \
             it points to directly"
        }
        401 => "the page needs a login; use a public source or one you can authenticate to",
        // Only a proxy asks for proxy credentials: the one the environment names.
        407 => PROXY_AUTH_HINT,
        403 => {
            "the server refuses this client (login needed or automated access blocked); try \
             another source for the same content"
        }
        404 | 410 => {
            "the page does not exist (any more); check the URL for typos, or find its current \
             address from the site's index or a search"
        }
        405 | 406 | 415 => {
            "the server will not serve this resource to a plain GET; try another URL"
        }
        // The server gave up waiting for the request to arrive: the network, not the page.
        408 => "the server timed out waiting for the request; try again later",
        414 => "the URL is too long for this server; shorten its query string",
        451 => "the page is blocked for legal reasons; use another source",
        400..=499 => "the server rejected the request; check the URL and its query string",
        _ => "the server failed to answer; try again later or use another source",
    }
}

/// The hint of a proxy that wants credentials: its 407 to an http:// target's request, or its
/// refusal to open a tunnel to an https:// target's host.
const PROXY_AUTH_HINT: &str = "the proxy the environment names (http_proxy, https_proxy or \
     all_proxy) wants credentials; give them in its URL (http://USER:PASSWORD@HOST:PORT), or \
     list the target's host in no_proxy to fetch it directly";

/// How the proxy the environment names failed to connect a target: an HTTP proxy asked to open
/// a tunnel (`CONNECT`, for an https:// target), or a SOCKS proxy (for any target).
#[derive(Debug, PartialEq, Eq)]
enum ProxyFailed {
    /// It answered 407: it wants credentials.
    AuthRequired,
    /// No connection to it could be made.
    Unreachable,
    /// It answered another status or SOCKS error, or broke off.
    Other,
}

/// How the proxy failed, if that is what `e` is. The error types are private to hyper-util, so
/// they are told by their text (`tunnel error: …`, `SOCKS error: …`); should that text change,
/// the hint is the one for any failed connection.
fn proxy_error(e: &reqwest::Error) -> Option<ProxyFailed> {
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if let Some(what) = text
            .strip_prefix("tunnel error: ")
            .or_else(|| text.strip_prefix("SOCKS error: "))
        {
            return Some(match what {
                "proxy authorization required" => ProxyFailed::AuthRequired,
                "failed to create underlying connection" => ProxyFailed::Unreachable,
                _ => ProxyFailed::Other,
            });
        }
        cur = err.source();
    }
    None
}

/// What is wrong with the server's certificate, if TLS refused it (`is expired`, `was issued
/// by no authority trusted here`): rustls's own words for some of these are its types' debug
/// forms (`invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))`).
fn refused_certificate(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    use rustls::CertificateError as C;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        // An `io::Error`'s `source` is its inner error's source, and the TLS stack wraps its
        // error in two of them: the inner ones are looked at through `get_ref`.
        let mut layer = err;
        let tls = loop {
            if let Some(t) = layer.downcast_ref::<rustls::Error>() {
                break Some(t);
            }
            match layer
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
            {
                Some(inner) => layer = inner,
                None => break None,
            }
        };
        if let Some(rustls::Error::InvalidCertificate(c)) = tls {
            return Some(match c {
                C::Expired | C::ExpiredContext { .. } => "has expired",
                C::NotValidYet | C::NotValidYetContext { .. } => "is not valid yet",
                C::NotValidForName | C::NotValidForNameContext { .. } => "is for another host name",
                C::UnknownIssuer => "was issued by no authority trusted here (self-signed?)",
                C::Revoked => "is revoked",
                C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                    "is not one made for a server"
                }
                // webpki's error, which rustls carries as an opaque one: a certificate
                // authority's own certificate, as a self-signed one often is.
                C::Other(o) if o.to_string().contains("CaUsedAsEndEntity") => {
                    "is a certificate authority's, not a server's (self-signed?)"
                }
                _ => "was refused",
            });
        }
        cur = err.source();
    }
    None
}

/// The innermost error in `e`'s source chain, on one line (never the URL, which only the
/// outermost reqwest error carries).
fn root_cause(e: &reqwest::Error) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    one_line(&cur.to_string())
}

/// A regex's error on one line: the reason, and where in the pattern (`unclosed group at
/// column 2`). The regex crate draws the place under the pattern with carets, which a line of
/// their own's words joined up would no longer point at.
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let Some(reason) = lines.iter().rev().find_map(|l| l.strip_prefix("error: ")) else {
        return one_line(&text);
    };
    // A pattern of one line is shown indented by four spaces; one of several lines between
    // rules of `~`, each line numbered (`2: b(`, the numbers padded to one width).
    let numbered = lines.iter().any(|l| l.starts_with('~'));
    let carets = |l: &str| {
        let l = l.trim();
        !l.is_empty() && l.chars().all(|c| c == '^' || c == ' ')
    };
    let mut places = Vec::new();
    for (under, above) in lines.iter().skip(1).zip(&lines) {
        if !carets(under) {
            continue;
        }
        let (line_no, start) = match above.split_once(": ") {
            Some((n, _)) if numbered && n.trim().chars().all(|c| c.is_ascii_digit()) => {
                (Some(n.trim()), n.len() + 2)
            }
            _ => (None, 4),
        };
        let marks: Vec<char> = under.chars().collect();
        for (i, &c) in marks.iter().enumerate() {
            if c == '^' && (i == 0 || marks[i - 1] != '^') {
                places.push((line_no, i.saturating_sub(start) + 1));
            }
        }
    }
    let place = match places.as_slice() {
        [] => None,
        [(None, c)] => Some(format!("at column {c}")),
        _ if places.iter().all(|(n, _)| n.is_none()) => {
            let cs: Vec<String> = places.iter().map(|(_, c)| c.to_string()).collect();
            Some(format!("at columns {}", cs.join(" and ")))
        }
        _ => Some(format!(
            "at {}",
            places
                .iter()
                .map(|(n, c)| format!("line {} column {c}", n.unwrap_or("?")))
                .collect::<Vec<_>>()
                .join(" and ")
        )),
    };
    // A place over several lines has no carets: the regex crate says it in words of its own
    // (`on line 1 (column 2) through line 2 (column 2)`), on a line of its own, unindented.
    let wheres: Vec<String> = place
        .into_iter()
        .chain(
            lines
                .iter()
                .filter(|l| l.starts_with("on line "))
                .map(|l| l.trim_end().to_owned()),
        )
        .collect();
    if wheres.is_empty() {
        return one_line(&text);
    }
    format!("{reason} {}", wheres.join(" and "))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn keep_matching_lines(text: &str, re: &Regex) -> String {
    text.lines()
        .filter(|line| re.is_match(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `8 MiB`, `512 KiB` or `1000 bytes`.
pub fn human_bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * 1024 * 1024;
    match n {
        0 => "0 bytes".into(),
        n if n % GIB == 0 => format!("{} GiB", n / GIB),
        n if n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which fetches an unusable proxy variable leaves going direct: none where another
    /// variable's proxy takes its place (`all_proxy` for either scheme), and nothing under CGI,
    /// where the client reads no proxy variable at all.
    #[test]
    fn an_unusable_proxy_variable_is_warned_of_with_what_goes_direct() {
        let set = |name: &'static str, val: &str| Some((name, val.to_owned()));
        let ok = "http://proxy.example:3128";
        let bad = "bogus://proxy.example";
        let says = |env: &ProxyEnv| env.warnings();
        let warning = |name: &str, tail: &str| {
            vec![format!(
                "{name} is set, but not to a proxy URL (scheme http, https, socks4, socks4a, \
                 socks5 or socks5h, and a host): it is ignored{tail}"
            )]
        };
        let only_http = ProxyEnv {
            http: set("http_proxy", bad),
            ..ProxyEnv::default()
        };
        assert_eq!(
            says(&only_http),
            warning("http_proxy", ", and fetches go direct")
        );
        assert!(!only_http.for_http());
        let with_all = ProxyEnv {
            all: set("ALL_PROXY", ok),
            http: set("http_proxy", bad),
            ..ProxyEnv::default()
        };
        assert_eq!(says(&with_all), warning("http_proxy", ""));
        assert!(with_all.for_http() && with_all.for_https());
        let bad_all = ProxyEnv {
            all: set("all_proxy", bad),
            http: set("HTTP_PROXY", ok),
            ..ProxyEnv::default()
        };
        assert_eq!(
            says(&bad_all),
            warning("all_proxy", ", and https:// fetches go direct")
        );
        let bad_https = ProxyEnv {
            https: set("https_proxy", bad),
            ..ProxyEnv::default()
        };
        assert_eq!(
            says(&bad_https),
            warning("https_proxy", ", and fetches go direct")
        );
        let bad_https_good_http = ProxyEnv {
            http: set("http_proxy", ok),
            https: set("https_proxy", bad),
            ..ProxyEnv::default()
        };
        assert_eq!(
            says(&bad_https_good_http),
            warning("https_proxy", ", and https:// fetches go direct")
        );
        let good_https_bad_http = ProxyEnv {
            http: set("http_proxy", bad),
            https: set("https_proxy", ok),
            ..ProxyEnv::default()
        };
        assert_eq!(
            says(&good_https_bad_http),
            warning("http_proxy", ", and http:// fetches go direct")
        );
        // Set but empty: no proxy, and nothing to warn of.
        let empty = ProxyEnv {
            http: set("http_proxy", ""),
            ..ProxyEnv::default()
        };
        assert!(says(&empty).is_empty() && !empty.for_http());
        let cgi = ProxyEnv {
            cgi: true,
            http: set("http_proxy", bad),
            all: set("ALL_PROXY", ok),
            ..ProxyEnv::default()
        };
        assert!(says(&cgi).is_empty());
        assert!(!cgi.for_http() && !cgi.for_https());
    }

    /// [`usable_proxy`] agrees with the HTTP client's own reading of a proxy variable
    /// (hyper-util's matcher, which reqwest's system proxy is) on each of these values.
    #[test]
    fn usable_proxy_agrees_with_the_clients_reading() {
        let dst: axum::http::Uri = "http://example.com/".parse().unwrap();
        let values = [
            ("http://proxy.example:3128", true),
            ("https://proxy.example", true),
            ("HTTP://proxy.example:3128/some/path", true),
            ("proxy.example:3128", true),
            ("socks5h://user:pass@proxy.example:1080", true),
            ("socks5://proxy.example:1080", true),
            ("socks4://proxy.example:1080", true),
            ("socks4a://proxy.example:1080", true),
            ("http://user@proxy.example:3128", true),
            ("bogus://proxy.example", false),
            ("ftp://proxy.example", false),
            ("::::", false),
            ("", false),
            ("http://", false),
            ("/just/a/path", false),
            ("proxy example", false),
        ];
        for (val, want) in values {
            let client = hyper_util::client::proxy::matcher::Matcher::builder()
                .http(val.to_owned())
                .build()
                .intercept(&dst)
                .is_some();
            assert_eq!(client, want, "the client on {val:?}");
            assert_eq!(usable_proxy(val), want, "usable_proxy on {val:?}");
        }
    }

    /// A pattern's error says where in the pattern, as the regex crate's carets do.
    #[test]
    fn a_regex_error_says_its_reason_and_its_place() {
        for (pattern, says) in [
            ("(", "unclosed group at column 1"),
            ("a(b", "unclosed group at column 2"),
            ("abc)", "unopened group at column 4"),
            (
                "x{2,1}",
                "invalid repetition count range, the start must be <= the end at column 2",
            ),
            (
                "(?P<n>a)(?P<n>b)",
                "duplicate capture group name at columns 5 and 13",
            ),
            ("a\nb(", "unclosed group at line 2 column 2"),
            // Ten lines and more: the numbers are padded.
            (
                "a\nb(\nc\nd\ne\nf\ng\nh\ni\nj",
                "unclosed group at line 2 column 2",
            ),
            (
                "(?P<n>a)\n(?P<n>b)",
                "duplicate capture group name at line 1 column 5 and line 2 column 5",
            ),
            // A pattern of one line that looks like a numbered one.
            ("1: (", "unclosed group at column 4"),
            // A caret of the pattern's own is no mark of a place.
            ("^a(", "unclosed group at column 3"),
            // A place over two lines, which the regex crate says in words.
            (
                "a{2,\n1}",
                "invalid repetition count range, the start must be <= the end on line 1 \
                 (column 2) through line 2 (column 2)",
            ),
            // A pattern line that reads like those words is not taken for them.
            ("on line (", "unclosed group at column 9"),
        ] {
            let e = Regex::new(pattern).unwrap_err();
            assert_eq!(regex_error(&e), says, "{pattern:?}");
        }
    }

    #[test]
    fn every_unsupported_option_is_named() {
        let cases: Vec<(Options, &str)> = vec![
            (
                Options {
                    mode: "text".into(),
                    ..Options::default()
                },
                "mode",
            ),
            (
                Options {
                    question: "q".into(),
                    ..Options::default()
                },
                "question",
            ),
            (
                Options {
                    pages: "1-2".into(),
                    ..Options::default()
                },
                "pages",
            ),
            (
                Options {
                    jq: ".a".into(),
                    ..Options::default()
                },
                "jq",
            ),
            (
                Options {
                    context: Some(false),
                    ..Options::default()
                },
                "context",
            ),
            (
                Options {
                    recover: true,
                    ..Options::default()
                },
                "recover",
            ),
        ];
        for (o, name) in cases {
            let Err(FetchError::Target(e)) = check_options(&o) else {
                panic!("{name} was accepted");
            };
            assert_eq!(e.status, 400);
            assert_eq!(
                e.msg,
                format!("option {name} is not supported by the built-in fetcher")
            );
            assert!(e.hint.contains(name), "{}", e.hint);
        }
    }

    #[test]
    fn several_unsupported_options_are_all_named() {
        let o = Options {
            mode: "text".into(),
            jq: ".a".into(),
            grep: "x".into(),
            ..Options::default()
        };
        let Err(FetchError::Target(e)) = check_options(&o) else {
            panic!("accepted");
        };
        assert_eq!(
            e.msg,
            "options mode, jq are not supported by the built-in fetcher"
        );
    }

    #[test]
    fn only_grep_and_no_options_are_accepted() {
        assert!(check_options(&Options::default()).unwrap().is_none());
        let o = Options {
            grep: "^a".into(),
            ..Options::default()
        };
        assert!(check_options(&o).unwrap().unwrap().is_match("abc"));
    }

    #[test]
    fn a_url_must_be_absolute_http_or_https() {
        for bad in [
            "example.com/a",
            "",
            "ftp://example.com/a",
            "file:///etc/passwd",
        ] {
            let Err(FetchError::Target(e)) = parse_url(bad) else {
                panic!("{bad:?} was accepted");
            };
            assert_eq!(e.status, 400, "{bad:?}");
            assert!(!e.hint.is_empty());
        }
        assert!(parse_url("https://example.com/a?b=c").is_ok());
    }

    #[test]
    fn status_messages_carry_the_reason_phrase() {
        assert_eq!(status_msg(StatusCode::NOT_FOUND), "HTTP 404 Not Found");
        assert_eq!(status_msg(StatusCode::from_u16(599).unwrap()), "HTTP 599");
    }

    #[test]
    fn grep_keeps_only_matching_lines() {
        let re = Regex::new("rust").unwrap();
        assert_eq!(
            keep_matching_lines("rust one\nno\r\nrusty two\n", &re),
            "rust one\nrusty two"
        );
    }

    /// An error whose `source` is the one it wraps, as reqwest's and hyper's are.
    #[derive(Debug)]
    struct Wrapping(std::io::Error);

    impl std::fmt::Display for Wrapping {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// webpki's error as rustls carries it: an opaque one that only says its name.
    #[derive(Debug)]
    struct Named(&'static str);

    impl std::fmt::Display for Named {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Named {}

    /// Each way TLS refuses a certificate has its own words, found however deep the TLS error
    /// lies: under an error's `source`, inside an `io::Error` inside another (as the TLS stack
    /// wraps it).
    #[test]
    fn a_refused_certificate_is_told_by_its_kind() {
        use rustls::CertificateError as C;
        let refused = |c: C| {
            let tls = rustls::Error::InvalidCertificate(c);
            let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
            let outer = std::io::Error::other(inner);
            refused_certificate(&Wrapping(outer))
        };
        let ca = rustls::OtherError(Arc::new(Named("CaUsedAsEndEntity")));
        let other = rustls::OtherError(Arc::new(Named("UnsupportedCertVersion")));
        for (c, says) in [
            (C::Expired, "has expired"),
            (C::NotValidYet, "is not valid yet"),
            (C::NotValidForName, "is for another host name"),
            (
                C::UnknownIssuer,
                "was issued by no authority trusted here (self-signed?)",
            ),
            (C::Revoked, "is revoked"),
            (C::InvalidPurpose, "is not one made for a server"),
            (
                C::Other(ca),
                "is a certificate authority's, not a server's (self-signed?)",
            ),
            (C::Other(other), "was refused"),
            (C::BadSignature, "was refused"),
        ] {
            assert_eq!(refused(c.clone()), Some(says), "{c:?}");
        }
        // Another TLS error, or none at all, is no refused certificate.
        let alert = std::io::Error::other(rustls::Error::DecryptError);
        assert_eq!(refused_certificate(&Wrapping(alert)), None);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(refused_certificate(&Wrapping(reset)), None);
    }

    #[test]
    fn sizes_are_shown_in_binary_units() {
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(512 << 10), "512 KiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
        assert_eq!(human_bytes(2 << 30), "2 GiB");
        assert_eq!(human_bytes((1 << 30) + (1 << 20)), "1025 MiB");
        assert_eq!(human_bytes(0), "0 bytes");
    }
}
