//! The HTTP server: `/metrics` (or the configured telemetry path), `/-/healthy`, `/-/ready` and a
//! landing page, on hyper 1.x over tokio.
//!
//! With basic authentication configured every path but `/-/healthy` and `/-/ready` (which
//! orchestrators probe without credentials) needs it; [`crate::basic_auth`] bounds what checking
//! it costs, per client address and overall.
//!
//! Only GET and HEAD are served (405 otherwise, 404 for unknown paths). Each connection must send
//! its request headers within [`HEADER_READ_TIMEOUT`], a request head larger than
//! [`MAX_HEADER_BYTES`] or with more than [`MAX_HEADERS`] header lines gets a 431, and at most
//! `max_connections` connections are held at once ([`connection_slots`]: within the limit all are
//! served; beyond it a newcomer waits in the listen backlog until a connection ends, or one that
//! has had [`connection_slots::GRACE`] to speak, or has been idle that long, is closed for it, or
//! the busy one held longest ends after its next answer). A TLS handshake must complete within
//! [`TLS_HANDSHAKE_TIMEOUT`]; a write that makes no progress for [`WRITE_STALL_TIMEOUT`] and a
//! connection idle for [`IDLE_TIMEOUT`] are dropped ([`Deadlined`]). The metrics endpoint answers
//! in the format and compression that the request's `Accept` and `Accept-Encoding` prefer
//! ([`exposition::Negotiated`]); any header gets an answer. Requests for the same format that
//! arrive while a scrape runs share the next one ([`crate::coalesce`]). [`run`] returns once
//! `shutdown` fires and every in-flight request has finished, or after [`SHUTDOWN_GRACE`].

use crate::basic_auth::verify_off_thread;
use crate::coalesce::Coalescer;
use crate::collectors::Registry;
use crate::exposition::{self, Negotiated};
use crate::web_config::{Auth, Precheck, WebSecurity};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT, ACCEPT_ENCODING, ALLOW, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE,
    HeaderValue, VARY,
};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub mod connection_slots;
pub(crate) use connection_slots::{Conn, ConnectionSlot, ConnectionSlots};

/// How long a TLS client may take to complete its handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head accepted; larger ones get 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most header lines a request may have; more get 431.
pub const MAX_HEADERS: usize = 100;
/// How long a connection's write may make no progress (an answer nobody reads) before the
/// connection is dropped.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may neither send nor take a byte (idle between requests) before it is
/// closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for in-flight requests.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(4);

/// A scrape's answer: the body and how it is compressed.
pub(crate) type Encoded = (Bytes, exposition::ContentCoding);

/// Scrapes of the metrics endpoint, shared by requests that arrive together
/// ([`crate::coalesce`]).
pub(crate) type Scrapes = Coalescer<Negotiated, Encoded>;

/// The scrapes of `registry`: gather, encode as negotiated, compress.
pub(crate) fn scrapes(registry: Arc<Registry>) -> Scrapes {
    Coalescer::new(move |negotiated| {
        let (body, coding) = exposition::encode_for(&registry.gather(), negotiated);
        (Bytes::from(body), coding)
    })
}

/// What the server needs to answer requests.
pub(crate) struct App {
    /// Scrapes of the collectors, shared by requests that arrive together ([`scrapes`]).
    pub scrapes: Scrapes,
    /// Path of the metrics endpoint.
    pub telemetry_path: String,
    /// Maximum simultaneous connections.
    pub max_connections: usize,
    /// Probe series, for the status page.
    pub series: Arc<crate::series::SeriesStore>,
    /// TLS, basic auth and extra headers (`--web.config.file`); replaced on reload.
    pub web: std::sync::RwLock<Arc<WebSecurity>>,
}

impl App {
    fn web(&self) -> Arc<WebSecurity> {
        self.web.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the web configuration (SIGHUP); new connections and requests use it. Verified
    /// credentials of users whose hash did not change stay verified
    /// ([`WebSecurity::keep_verified`]).
    pub(crate) fn set_web(&self, web: WebSecurity) {
        web.keep_verified(&self.web());
        *self.web.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(web);
    }
}

/// Serves `app` on `listener` until `shutdown` completes.
pub(crate) async fn run(listener: TcpListener, app: Arc<App>, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let slots = ConnectionSlots::new(app.max_connections.max(1));
    let mut backoff = Duration::from_millis(5);
    tokio::pin!(shutdown);
    loop {
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(5);
                    (stream, peer.ip())
                }
                Err(err) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::error!(%err, "accept failed; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Admitted at once while a slot is free; otherwise it waits (and the backlog with it)
        // until a held connection that has had the time to speak may be closed for it, or one
        // ends ([`connection_slots`]).
        let slot = tokio::select! {
            slot = slots.admit(connection_slots::duplicate(&stream)) => Arc::new(slot),
            () = &mut shutdown => break,
        };
        let stream = Deadlined::new(stream, slot.conn().clone());
        let web = app.web();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let conn = slot.conn().clone();
            tokio::select! {
                () = conn.closed() => tracing::debug!("connection closed to make room for another"),
                () = serve(stream, web.tls.clone(), Peer { app, slot: &slot, client }, watcher) => {}
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::debug!("all connections closed"),
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
        }
    }
}

/// Serves one connection: the TLS handshake (bounded by [`TLS_HANDSHAKE_TIMEOUT`]) when TLS is
/// configured, then HTTP/1.1.
async fn serve(
    stream: Deadlined<tokio::net::TcpStream>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    Peer { app, slot, client }: Peer<'_>,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let Some(acceptor) = tls else {
        if let Err(err) = watcher
            .watch(connection(stream, app, slot.clone(), client))
            .await
        {
            tracing::debug!(%err, "connection ended with an error");
        }
        return;
    };
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            if let Err(err) = watcher
                .watch(connection(tls, app, slot.clone(), client))
                .await
            {
                tracing::debug!(%err, "TLS connection ended with an error");
            }
        }
        Ok(Err(err)) => tracing::debug!(%err, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

/// What a connection's requests are answered with: the app, the connection's slot and the
/// client's address (for [`crate::basic_auth`]'s per-client bound).
struct Peer<'a> {
    app: Arc<App>,
    slot: &'a Arc<ConnectionSlot>,
    client: std::net::IpAddr,
}

/// One HTTP/1.1 connection over any byte stream, from `client`.
fn connection<IO>(
    io: IO,
    app: Arc<App>,
    slot: Arc<ConnectionSlot>,
    client: std::net::IpAddr,
) -> impl hyper_util::server::graceful::GracefulConnection<Error = hyper::Error> + Send
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let app = app.clone();
        let slot = slot.clone();
        async move {
            let _busy = slot.busy();
            let mut resp = handle(app, req, &slot, client).await;
            if slot.conn().retiring() {
                // Its slot is wanted: the connection ends after this answer.
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS);
    builder.serve_connection(TokioIo::new(io), service)
}

fn respond(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
    head: bool,
) -> Response<Full<Bytes>> {
    let body = body.into();
    let len = body.len();
    let body = if head { Bytes::new() } else { body };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    if let Ok(v) = content_type.parse() {
        headers.insert(CONTENT_TYPE, v);
    }
    headers.insert(CONTENT_LENGTH, len.into());
    resp
}

/// Answers one request from `client` on the connection of `slot`: authentication, then
/// routing; adds the configured extra headers. A request that is allowed makes its connection
/// trusted ([`ConnectionSlot::trust`]).
pub(crate) async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
    slot: &ConnectionSlot,
    client: std::net::IpAddr,
) -> Response<Full<Bytes>> {
    let web = app.web();
    // Orchestrators' liveness and readiness probes carry no credentials, and the answers say
    // nothing but that the agent runs: they are served without authentication, and do not make
    // the connection trusted.
    if web.requires_auth() && is_health_path(req.uri().path()) {
        return with_headers(route(&app, &req).await, &web);
    }
    if web.requires_auth() {
        let authorization = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let head = req.method() == Method::HEAD;
        let busy = || {
            let resp = respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                b"Too many credential checks in progress; retry\n".to_vec(),
                head,
            );
            with_headers(resp, &web)
        };
        // bcrypt is deliberately slow: a pair not seen before is checked on its own thread, away
        // from the worker and from the blocking pool that scrapes use ([`crate::basic_auth`]).
        let verdict = match web.check_cached(authorization.as_deref()) {
            Precheck::Decided(verdict) => verdict,
            Precheck::UnknownUser(pause) => {
                tokio::time::sleep(pause).await;
                Auth::Denied
            }
            Precheck::Unverified(pair) => {
                match verify_off_thread(web.credentials.clone(), pair, client) {
                    Some(answer) => match answer.await {
                        Ok(verdict) => verdict,
                        // Its place in the queue went to a client with fewer wrong passwords.
                        Err(_) => return busy(),
                    },
                    None => return busy(),
                }
            }
        };
        if verdict != Auth::Allowed {
            let mut resp = respond(
                StatusCode::UNAUTHORIZED,
                "text/plain; charset=utf-8",
                b"Unauthorized\n".to_vec(),
                head,
            );
            resp.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Basic realm=\"diskprobe_exporter\""),
            );
            return with_headers(resp, &web);
        }
    }
    slot.trust();
    with_headers(route(&app, &req).await, &web)
}

/// `/-/healthy` and `/-/ready`: served without authentication.
fn is_health_path(path: &str) -> bool {
    path == "/-/healthy" || path == "/-/ready"
}

fn with_headers(mut resp: Response<Full<Bytes>>, web: &WebSecurity) -> Response<Full<Bytes>> {
    for (k, v) in &web.headers {
        resp.headers_mut().insert(k.clone(), v.clone());
    }
    resp
}

/// What a request asks for, decided from its method, path and headers alone (no I/O): the part
/// of request handling that [`route`] answers from, kept pure so that it can be fuzzed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The metrics endpoint, in the negotiated format and compression.
    Metrics(Negotiated),
    /// `/-/healthy`.
    Healthy,
    /// `/-/ready`.
    Ready,
    /// The landing page `/`.
    Status,
    /// Any other path.
    NotFound,
    /// A method other than GET and HEAD.
    MethodNotAllowed,
}

/// Routes a request: `head` is whether the method is HEAD (the answer then has no body).
pub fn plan(
    method: &Method,
    path: &str,
    telemetry_path: &str,
    headers: &hyper::HeaderMap,
) -> (Route, bool) {
    let head = method == Method::HEAD;
    if method != Method::GET && !head {
        return (Route::MethodNotAllowed, false);
    }
    let route = match path {
        p if p == telemetry_path => {
            // A header that is not visible ASCII counts as absent.
            let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
            Route::Metrics(Negotiated::from_headers(
                header(ACCEPT),
                header(ACCEPT_ENCODING),
            ))
        }
        "/-/healthy" => Route::Healthy,
        "/-/ready" => Route::Ready,
        "/" => Route::Status,
        _ => Route::NotFound,
    };
    (route, head)
}

async fn route(app: &App, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (route, head) = plan(
        req.method(),
        req.uri().path(),
        &app.telemetry_path,
        req.headers(),
    );
    let text = "text/plain; charset=utf-8";
    match route {
        Route::MethodNotAllowed => {
            let mut resp = respond(
                StatusCode::METHOD_NOT_ALLOWED,
                text,
                b"Method Not Allowed: only GET and HEAD are served\n".to_vec(),
                false,
            );
            resp.headers_mut()
                .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
            resp
        }
        Route::Metrics(negotiated) => {
            // Collectors read files (/proc, /sys) that can block, and encoding and compressing
            // take CPU; the scrape runs off the runtime's worker threads so signals and other
            // connections are always served. Requests that arrive while another scrape runs
            // share the next one.
            match app.scrapes.share(negotiated).await {
                Some((body, coding)) => {
                    let content_type = negotiated.format.content_type();
                    let mut resp = respond(StatusCode::OK, content_type, body, head);
                    let headers = resp.headers_mut();
                    if let Some(encoding) = coding.header_value() {
                        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(encoding));
                    }
                    headers.insert(VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
                    resp
                }
                None => {
                    tracing::error!(
                        "scrape failed (the collector panicked or the agent is stopping)"
                    );
                    respond(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        text,
                        b"scrape failed\n".to_vec(),
                        head,
                    )
                }
            }
        }
        Route::Healthy => respond(StatusCode::OK, text, b"Healthy\n".to_vec(), head),
        Route::Ready => respond(StatusCode::OK, text, b"Ready\n".to_vec(), head),
        Route::Status => respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            crate::status_page::render(&app.series, &app.telemetry_path).into_bytes(),
            head,
        ),
        Route::NotFound => respond(StatusCode::NOT_FOUND, text, b"Not Found\n".to_vec(), head),
    }
}

/// A connection's byte stream with deadlines: a write that makes no progress for
/// [`WRITE_STALL_TIMEOUT`] and a connection that moves no byte either way for [`IDLE_TIMEOUT`]
/// fail with `TimedOut`, which ends the connection and frees its slot. Every byte moved is also
/// noted on the connection's [`Conn`], what [`connection_slots`] judges activity by.
///
/// Not tokio-io-timeout's `TimeoutStream`: its timeouts run per direction, each from the moment
/// one read or write is pending (a slow answer still moving bytes would be cut off by a pending
/// read's timeout, where here any byte either way counts), and it has no hook for the activity
/// the slots need, so a wrapper would remain all the same.
pub(crate) struct Deadlined<IO> {
    io: IO,
    conn: Arc<Conn>,
    idle: std::pin::Pin<Box<tokio::time::Sleep>>,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<IO> Deadlined<IO> {
    /// `io` with its deadlines starting now; each byte it moves is noted on `conn` (what the
    /// slots judge activity by).
    pub(crate) fn new(io: IO, conn: Arc<Conn>) -> Self {
        Deadlined {
            io,
            conn,
            idle: Box::pin(tokio::time::sleep(IDLE_TIMEOUT)),
            stalled: None,
        }
    }

    fn progressed(&mut self) {
        self.conn.touch();
        self.idle
            .as_mut()
            .reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
        self.stalled = None;
    }

    /// `Pending` unless a deadline has passed (then the error to end the connection with).
    fn check(
        &mut self,
        cx: &mut std::task::Context<'_>,
        writing: bool,
    ) -> std::task::Poll<std::io::Error> {
        use std::task::Poll;
        if writing {
            self.conn.write_blocked();
            let stall = self
                .stalled
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL_TIMEOUT)));
            if stall.as_mut().poll(cx).is_ready() {
                return Poll::Ready(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client took none of the answer in time",
                ));
            }
        }
        if self.idle.as_mut().poll(cx).is_ready() {
            return Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection was idle too long",
            ));
        }
        Poll::Pending
    }
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Deadlined<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.progressed();
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx, false).map(Err),
        }
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Deadlined<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.progressed();
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx, true).map(Err),
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Ready(r) => {
                this.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx, true).map(Err),
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.io).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.check(cx, true).map(Err),
        }
    }
}
