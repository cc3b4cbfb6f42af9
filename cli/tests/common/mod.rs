//! A loopback HTTP server the tests start: pages that succeed, fail, are busy, redirect, are
//! slow or are big; and, in [`child`], the guard of the processes the tests spawn.
#![allow(dead_code)]

pub mod child;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// A loopback address that refuses every connection, and the socket that holds it: bound but
/// not listening, so a connection gets a reset, and no other socket (a parallel test's server)
/// can be given the port while it is held. (A listener bound and dropped frees its port for
/// anyone.) Keep the socket until the test is over.
pub fn refusing() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
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
/// - `/big/{n}`: `n` bytes with a Content-Length; `/stream/{n}`: `n` bytes chunked, no length;
/// - `/latin1-type`: 200 whose Content-Type holds a byte that is not ASCII (Latin-1 `é`).
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
        .route(
            "/latin1-type",
            get(|| async {
                let latin1 = header::HeaderValue::from_bytes(b"text/plain; charset=caf\xe9");
                ([(header::CONTENT_TYPE, latin1.unwrap())], "caf\u{e9}")
            }),
        )
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

/// A SOCKS5 proxy on 127.0.0.1 (no authentication, CONNECT only, an IPv4 address or a domain
/// name) that relays each connection to the address asked for.
pub struct Socks5 {
    pub addr: SocketAddr,
    relayed: Arc<AtomicUsize>,
}

impl Socks5 {
    /// `socks5://ADDR`, or with another scheme (`socks5h`).
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// How many connections it relayed.
    pub fn relayed(&self) -> usize {
        self.relayed.load(Ordering::SeqCst)
    }
}

/// Starts a [`Socks5`] proxy on the current tokio runtime.
pub async fn socks5() -> Socks5 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let relayed = Arc::new(AtomicUsize::new(0));
    let count = relayed.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                // Greeting: VER NMETHODS METHODS…; choose "no authentication".
                let mut head = [0u8; 2];
                c.read_exact(&mut head).await?;
                let mut methods = vec![0u8; usize::from(head[1])];
                c.read_exact(&mut methods).await?;
                c.write_all(&[5, 0]).await?;
                // Request: VER CMD RSV ATYP DST.ADDR DST.PORT.
                let mut req = [0u8; 4];
                c.read_exact(&mut req).await?;
                let host = match req[3] {
                    1 => {
                        let mut ip = [0u8; 4];
                        c.read_exact(&mut ip).await?;
                        std::net::Ipv4Addr::from(ip).to_string()
                    }
                    3 => {
                        let mut len = [0u8; 1];
                        c.read_exact(&mut len).await?;
                        let mut name = vec![0u8; usize::from(len[0])];
                        c.read_exact(&mut name).await?;
                        String::from_utf8_lossy(&name).into_owned()
                    }
                    _ => return Ok::<(), std::io::Error>(()),
                };
                let mut port = [0u8; 2];
                c.read_exact(&mut port).await?;
                let mut up =
                    tokio::net::TcpStream::connect((host.as_str(), u16::from_be_bytes(port)))
                        .await?;
                c.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
                count.fetch_add(1, Ordering::SeqCst);
                tokio::io::copy_bidirectional(&mut c, &mut up).await?;
                Ok(())
            });
        }
    });
    Socks5 { addr, relayed }
}

/// An HTTP proxy on 127.0.0.1 that opens no tunnel: it reads each request's head (a `CONNECT`,
/// for an https:// target) and answers it with `status_line` (`407 Proxy Authentication
/// Required`, say), then closes the connection.
pub struct Refusing {
    pub addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Refusing {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request line of each request it was sent (`CONNECT host:443 HTTP/1.1`).
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// Starts a [`Refusing`] proxy on the current tokio runtime.
pub async fn refusing_proxy(status_line: &'static str) -> Refusing {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    let n = c.read(&mut buf).await?;
                    if n == 0 {
                        return Ok::<(), std::io::Error>(());
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&head);
                seen.lock()
                    .unwrap()
                    .push(text.lines().next().unwrap_or("").to_owned());
                c.write_all(
                    format!("HTTP/1.1 {status_line}\r\ncontent-length: 0\r\n\r\n").as_bytes(),
                )
                .await?;
                c.shutdown().await
            });
        }
    });
    Refusing { addr, asked }
}
