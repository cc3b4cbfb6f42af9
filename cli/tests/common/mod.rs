//! A loopback HTTP server the tests start: pages that succeed, fail, are busy, redirect, are
//! slow or are big.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use rota_cli::http::HttpConfig;

/// The fetcher's default settings but for the proxy: these tests fetch from their own loopback
/// server, which a proxy the machine's environment names (`http_proxy` and the like, which the
/// default honours) would not reach.
pub fn loopback() -> HttpConfig {
    HttpConfig {
        system_proxy: false,
        ..HttpConfig::default()
    }
}

/// The body of `/ok`.
pub const OK_BODY: &str = "hello\nrust is here\nmiddle line\nrusty end\n";

#[derive(Clone, Default)]
struct Hits(Arc<Mutex<HashMap<String, usize>>>);

impl Hits {
    /// Counts a hit on `key`; the count before this one.
    fn hit(&self, key: &str) -> usize {
        let mut m = self.0.lock().unwrap();
        let n = m.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n - 1
    }
}

/// A running server on 127.0.0.1 with a random port.
pub struct Server {
    pub addr: SocketAddr,
    hits: Hits,
}

impl Server {
    /// The URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many times `key` was fetched (for `/busy/{key}/{n}` the key is `busy/{key}`, for
    /// `/sleep/{ms}` it is `sleep/{ms}`, counted as the request arrives).
    pub fn hits(&self, key: &str) -> usize {
        self.hits.0.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

/// Starts the server on the current tokio runtime.
///
/// - `/ok`: 200 text/plain [`OK_BODY`]; `/page/{name}`: 200 `page {name}`;
/// - `/status/{code}`: that status;
/// - `/busy/{key}/{n}`: 503 for the first `n` hits on `key`, then 200 `fine {key}`;
/// - `/always-busy`: 503; `/too-many`: 429;
/// - `/redirect`: 302 to `/ok`; `/loop`: 302 to itself; `/to-ftp`: 302 to an `ftp://` address;
/// - `/slow`: 200 after 5 s; `/sleep/{ms}`: 200 `slept {ms}ms` after that long (its hits
///   counted as `sleep/{ms}`);
/// - `/big/{n}`: `n` bytes with a Content-Length; `/stream/{n}`: `n` bytes chunked, no length.
pub async fn start() -> Server {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/ok",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    OK_BODY,
                )
            }),
        )
        .route(
            "/page/{name}",
            get(|Path(name): Path<String>| async move { format!("page {name}") }),
        )
        .route(
            "/status/{code}",
            get(|Path(code): Path<u16>| async move {
                (StatusCode::from_u16(code).unwrap(), "status page")
            }),
        )
        .route("/busy/{key}/{n}", get(busy))
        .route(
            "/always-busy",
            get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "busy") }),
        )
        .route(
            "/too-many",
            get(|| async { (StatusCode::TOO_MANY_REQUESTS, "slow down") }),
        )
        .route("/redirect", get(|| async { Redirect::to("/ok") }))
        .route("/loop", get(|| async { Redirect::to("/loop") }))
        .route(
            "/to-ftp",
            get(|| async { Redirect::to("ftp://files.example/x") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "finally"
            }),
        )
        .route("/sleep/{ms}", get(sleep))
        .route(
            "/big/{n}",
            get(|Path(n): Path<usize>| async move { "x".repeat(n) }),
        )
        .route("/stream/{n}", get(stream))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { addr, hits }
}

async fn busy(State(hits): State<Hits>, Path((key, n)): Path<(String, usize)>) -> Response {
    if hits.hit(&format!("busy/{key}")) < n {
        (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
    } else {
        format!("fine {key}").into_response()
    }
}

async fn sleep(State(hits): State<Hits>, Path(ms): Path<u64>) -> String {
    hits.hit(&format!("sleep/{ms}"));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    format!("slept {ms}ms")
}

async fn stream(Path(n): Path<usize>) -> Response {
    let chunk = vec![b'y'; 1024];
    let mut chunks: Vec<Result<Vec<u8>, Infallible>> = vec![Ok(chunk); n / 1024];
    chunks.push(Ok(vec![b'y'; n % 1024]));
    Body::from_stream(futures_util::stream::iter(chunks)).into_response()
}
