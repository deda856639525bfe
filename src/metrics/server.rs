//! The HTTP thread: its own current-thread tokio runtime, an HTTP/1 server (hyper, routed by
//! axum) on the `metrics.listen` socket, and the routes `/metrics`, `/healthz` and `/`.
//!
//! Bounds, so that slow or many clients cannot exhaust the shard's descriptors or reach the
//! loop: at most [`MAX_CONNECTIONS`] connections are kept; when a new one arrives at the cap,
//! a connection with no request in flight (an idle keep-alive, a client still dribbling its
//! headers) is closed for it — the oldest of those from the host or prefix holding the most
//! connections, hosts grouped as the game port's admission groups them (an IPv4 address or
//! an IPv6 /64, and their prefix: the IPv6 /56 by default, the IPv4 /24 while that cap is on;
//! from the same `[network]` settings, [`Settings::hosts`]), so that a flood from one host or
//! one prefix closes its own connections, not the scraper's — and if every one is
//! mid-request the newcomer is closed instead (both counted, and logged at most once a
//! minute). Headers must arrive within [`HEADER_TIMEOUT`]; a connection lives at most
//! [`CONNECTION_LIFETIME`] (then it is closed after its current request). `/metrics` never
//! waits for the loop: it reads the copy the loop published last ([`super::publish`]) and
//! reports its age. Only the status page asks the loop, at most once per [`PAGE_REUSE`] (a page
//! rendered within that is served again, and concurrent reloads wait for the one being
//! rendered); it waits at most [`PROBE_TIMEOUT`] for the answer.
//!
//! With a token set ([`Settings::token`], `metrics.token`), every request but `/healthz` must
//! carry `Authorization: Bearer <token>`, else it is answered `401` (counted, logged at most
//! once a minute, the token never). `/healthz` stays open: orchestrators probe it, and it tells
//! only whether the loop iterates. Bound beyond loopback, the endpoint warns at startup.
//!
//! This module must never touch loop state: everything it knows about the loop comes from the
//! published copy, a probe's answer or the heartbeat.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::net::{HostKey, HostKeys, Limits};
use crate::runtime::LoopContext;

use super::disk::DiskCache;
use super::families::{self, HttpCounts, Readings};
use super::health::{self, Watch};
use super::page;
use super::probe::{self, Request, Snapshot, Sources};
use super::process;
use super::publish::{Published, Publisher, Slot};
use super::saves::SaveMetrics;

/// Connections kept open at most.
pub const MAX_CONNECTIONS: usize = 32;
/// A request's headers must be in within this long of the connection (or the previous
/// response).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed after this long (after its current request, or [`GRACE`] later).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// How long a connection closing at the end of its life may finish its request.
pub const GRACE: Duration = Duration::from_secs(5);
/// How long a request waits for the loop's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// A status page rendered less than this long ago is served again instead of asking the loop:
/// reloads, however many and from however many clients, cost the loop at most one copy of its
/// history (and this thread one drawing of the chart) per this long.
pub const PAGE_REUSE: Duration = Duration::from_secs(1);
/// Directories are walked for their size at most this often.
pub const DISK_EVERY: Duration = Duration::from_secs(30);
/// The endpoint logs its evictions, refusals and unauthorized requests at most this often.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// The bearer token requests must carry (`metrics.token`). Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(Arc<str>);

impl BearerToken {
    /// A token; the caller has checked it is a valid bearer token (the configuration does).
    #[must_use]
    pub fn new(token: &str) -> BearerToken {
        BearerToken(token.into())
    }

    /// Whether the `Authorization` header value `value` carries this token: the scheme
    /// `Bearer` (any case), then the token, compared in constant time for its length.
    fn accepts(&self, value: &[u8]) -> bool {
        let Some(at) = value.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, rest) = value.split_at(at);
        let given = rest.trim_ascii();
        scheme.eq_ignore_ascii_case(b"bearer") && same_bytes(given, self.0.as_bytes())
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(redacted)")
    }
}

/// `a == b`, in a time that depends on their length only, not on where they differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// [`HttpCounts`] as the HTTP thread bumps them, with when each was last logged.
#[derive(Debug, Default)]
struct HttpCounters {
    evicted: AtomicU64,
    refused: AtomicU64,
    unauthorized: AtomicU64,
    /// What was last logged of each, and when (the thread's tasks share it).
    logged: std::sync::Mutex<Logged>,
}

#[derive(Debug, Default)]
struct Logged {
    bound_at: Option<Instant>,
    bound_counts: (u64, u64),
    unauthorized_at: Option<Instant>,
    unauthorized: u64,
}

impl HttpCounters {
    fn read(&self) -> HttpCounts {
        HttpCounts {
            evicted: self.evicted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            unauthorized: self.unauthorized.load(Ordering::Relaxed),
        }
    }

    fn logged(&self) -> std::sync::MutexGuard<'_, Logged> {
        self.logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a connection closed at the bound (`evicted`: an idle one for a newcomer; else
    /// the newcomer), and logs the counts since the last line, at most once a [`LOG_EVERY`].
    fn closed_at_bound(&self, evicted: bool, peer: IpAddr) {
        match evicted {
            true => self.evicted.fetch_add(1, Ordering::Relaxed),
            false => self.refused.fetch_add(1, Ordering::Relaxed),
        };
        let now = Instant::now();
        let mut logged = self.logged();
        if logged.bound_at.is_some_and(|at| now - at < LOG_EVERY) {
            return;
        }
        let counts = (
            self.evicted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        );
        let (evicted, refused) = (
            counts.0 - logged.bound_counts.0,
            counts.1 - logged.bound_counts.1,
        );
        logged.bound_at = Some(now);
        logged.bound_counts = counts;
        tracing::warn!(
            last = %peer,
            evicted,
            refused,
            "metrics endpoint at its {MAX_CONNECTIONS} connections: idle ones closed for \
             newcomers (the oldest of the host holding the most), newcomers closed while all \
             were busy (the next such line comes a minute later at the soonest)"
        );
    }

    /// Counts a request answered `401`, and logs the count since the last line, at most once
    /// a [`LOG_EVERY`] (never the header it carried).
    fn unauthorized(&self, peer: IpAddr) {
        let total = self.unauthorized.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let mut logged = self.logged();
        if logged
            .unauthorized_at
            .is_some_and(|at| now - at < LOG_EVERY)
        {
            return;
        }
        let refused = total - logged.unauthorized;
        logged.unauthorized_at = Some(now);
        logged.unauthorized = total;
        tracing::warn!(
            last = %peer,
            refused,
            "metrics endpoint: requests without the bearer token (metrics.token) answered 401 \
             (the next such line comes a minute later at the soonest)"
        );
    }
}

/// How the endpoint behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `/healthz` reports the loop stalled after this long without an iteration.
    pub stale_after: Duration,
    /// Directories whose size `/metrics` reports, with their label.
    pub disk_dirs: Vec<(&'static str, PathBuf)>,
    /// The directories are walked at most this often.
    pub disk_every: Duration,
    /// Every request but `/healthz` must carry `Authorization: Bearer <token>`; `None`: no
    /// authentication.
    pub token: Option<BearerToken>,
    /// The game port's limits, whose grouping of addresses into hosts and prefixes
    /// (`ipv6_prefix`, `ipv4_prefix`, and whether `max_per_ipv4_prefix` is set) the eviction
    /// uses; nothing else of them is read.
    pub hosts: Limits,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            stale_after: health::DEFAULT_STALE_AFTER,
            disk_dirs: Vec::new(),
            disk_every: DISK_EVERY,
            token: None,
            hosts: Limits::default(),
        }
    }
}

/// Binds the endpoint's socket (at startup, so that a bad or busy address stops the shard
/// before it is ready). The error names the key.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} (metrics.listen): {e}"),
        )
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The running endpoint. Dropping it stops the thread (and waits for it, briefly).
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Starts the publishing timer and the status page's probe task on this thread's loop, and
    /// the HTTP thread serving `listener`.
    ///
    /// # Panics
    /// Off the loop thread.
    pub fn start(
        listener: std::net::TcpListener,
        sources: Sources,
        saves: SaveMetrics,
        settings: Settings,
    ) -> io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        let context = LoopContext::current();
        let sources = Rc::new(sources);
        let (publisher, slot) = Publisher::new(sources.clone());
        // The timer cancels itself once the HTTP thread has dropped the slot.
        let _publishing = publisher.start();
        let probe = probe::start(sources);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let token_set = settings.token.is_some();
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let app = App::new(probe, slot, context, saves, &settings);
                    let token = settings.token.clone();
                    let hosts = HostKeys::new(&settings.hosts);
                    if let Err(e) = serve(listener, app, token, hosts, stopped).await {
                        tracing::error!("the metrics endpoint stopped: {e}");
                    }
                });
                // A disk walk still running is not waited for.
                runtime.shutdown_timeout(Duration::from_millis(200));
            })?;
        tracing::info!(%addr, "metrics endpoint: /metrics, /healthz and a status page at /");
        if !addr.ip().is_loopback() {
            warn_beyond_loopback(addr, token_set);
        }
        Ok(MetricsServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the metrics thread panicked");
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The startup warning of an endpoint other hosts may reach (`addr` is not loopback): what
/// protects it, and that it should sit behind a firewall.
fn warn_beyond_loopback(addr: SocketAddr, token: bool) {
    match token {
        false => tracing::warn!(
            %addr,
            "the metrics endpoint is bound beyond loopback and has no authentication: anyone \
             who reaches it reads the shard's figures and status page; set metrics.token (or \
             SHARD_METRICS__TOKEN) to require a bearer token, and keep it behind a firewall"
        ),
        true => tracing::warn!(
            %addr,
            "the metrics endpoint is bound beyond loopback: requests need the bearer token \
             (metrics.token), which plain HTTP carries unencrypted; keep it behind a firewall \
             (or a TLS proxy)"
        ),
    }
}

/// What the handlers share.
struct App {
    probe: mpsc::Sender<Request>,
    slot: Slot,
    watch: Arc<Watch>,
    disk: DiskCache,
    saves: SaveMetrics,
    /// What the endpoint refused (bumped by the accept loop and the connections).
    http: Arc<HttpCounters>,
    started: Instant,
    start_time: f64,
    /// The last status page and when it was rendered; locked while a request renders a new
    /// one, so concurrent reloads wait for that one instead of asking the loop too.
    page: tokio::sync::Mutex<Option<(Instant, Arc<str>)>>,
}

impl App {
    fn new(
        probe: mpsc::Sender<Request>,
        slot: Slot,
        context: LoopContext,
        saves: SaveMetrics,
        settings: &Settings,
    ) -> Arc<App> {
        Arc::new(App {
            probe,
            slot,
            watch: Arc::new(Watch::new(context, settings.stale_after)),
            disk: DiskCache::new(settings.disk_dirs.clone(), settings.disk_every),
            saves,
            http: Arc::new(HttpCounters::default()),
            started: Instant::now(),
            start_time: jiff::Timestamp::now().as_millisecond() as f64 / 1e3,
            page: tokio::sync::Mutex::new(None),
        })
    }

    /// The loop's latest published figures, without waiting for the loop; `None` once the
    /// loop has shut down (its publisher is gone).
    fn published(&self) -> Option<Arc<Published>> {
        if self.slot.has_changed().is_err() {
            return None;
        }
        // The read lock is held for one reference-count increment.
        Some(self.slot.borrow().clone())
    }

    /// The status page: the one rendered within [`PAGE_REUSE`], or a new one from the loop's
    /// answer. 503 with the reason when the loop is busy, gone or silent, or another request
    /// has been asking it for longer than [`PROBE_TIMEOUT`].
    async fn page(&self) -> Result<Arc<str>, Response> {
        let Ok(mut last) = tokio::time::timeout(PROBE_TIMEOUT, self.page.lock()).await else {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                format!("busy: another request has waited {PROBE_TIMEOUT:?} for the loop\n"),
            )
                .into_response());
        };
        if let Some((at, html)) = &*last
            && at.elapsed() < PAGE_REUSE
        {
            return Ok(html.clone());
        }
        let snapshot = self.ask().await?;
        let html: Arc<str> = page::render(&snapshot, self.started.elapsed()).into();
        *last = Some((Instant::now(), html.clone()));
        Ok(html)
    }

    /// Asks the loop for a snapshot with the whole history (the status page): 503 with the
    /// reason when it is busy, gone or silent.
    async fn ask(&self) -> Result<Snapshot, Response> {
        let unavailable = |why: String| (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
        let (reply, answer) = oneshot::channel();
        self.probe
            .try_send(Request { reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => unavailable(format!(
                    "busy: {} requests already wait for the loop\n",
                    probe::QUEUE
                )),
                mpsc::error::TrySendError::Closed(_) => {
                    unavailable("the loop has shut down\n".into())
                }
            })?;
        match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
            Ok(Ok(snapshot)) => Ok(snapshot),
            Ok(Err(_)) => Err(unavailable("the loop has shut down\n".into())),
            Err(_) => Err(unavailable(format!(
                "the loop did not answer within {PROBE_TIMEOUT:?} (see /healthz)\n"
            ))),
        }
    }
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/", get(status_page))
        .fallback(not_found)
        .with_state(app)
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(published) = app.published() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the loop has shut down\n").into_response();
    };
    let disk = app.disk.sizes().await;
    let readings = Readings {
        process: process::read(),
        disk: &disk,
        saves: &app.saves,
        phases: &published.phases,
        heartbeat_still: app.watch.still_for(),
        watchdog_stalls: app.watch.watchdog_stalls(),
        snapshot_age: published.age(),
        start_time: app.start_time,
        http: app.http.read(),
    };
    let text = families::encode(&published.snapshot, &readings);
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    match openmetrics {
        true => (
            [(header::CONTENT_TYPE, families::OPENMETRICS_CONTENT_TYPE)],
            text,
        )
            .into_response(),
        false => (
            [(header::CONTENT_TYPE, families::CLASSIC_CONTENT_TYPE)],
            families::classic_text(&text),
        )
            .into_response(),
    }
}

async fn healthz(State(app): State<Arc<App>>) -> Response {
    match app.watch.verdict() {
        health::Verdict::Alive(ago) => (
            StatusCode::OK,
            format!("ok: the loop iterated {} ms ago\n", ago.as_millis()),
        ),
        health::Verdict::Stalled(still) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stalled: the loop has not iterated for {:.1} s\n",
                still.as_secs_f64()
            ),
        ),
        health::Verdict::Stopped => (
            StatusCode::SERVICE_UNAVAILABLE,
            "stopped: the loop has shut down\n".to_owned(),
        ),
    }
    .into_response()
}

async fn status_page(State(app): State<Arc<App>>) -> Response {
    match app.page().await {
        Ok(html) => Html(html.to_string()).into_response(),
        Err(response) => response,
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found: this endpoint serves /, /metrics and /healthz\n",
    )
        .into_response()
}

/// One connection's state, shared by the accept loop and the connection's task.
#[derive(Debug)]
struct Conn {
    /// The peer's address.
    peer: IpAddr,
    /// The peer's host and prefix, as the game port counts them: what eviction counts
    /// connections by.
    host: HostKey,
    /// Requests being answered (0: idle, may be evicted).
    in_flight: AtomicUsize,
    /// The task has finished.
    done: AtomicBool,
    /// Told to close (evicted).
    close: Notify,
}

/// Counts a request in flight on a connection while it lives.
struct InFlight(Arc<Conn>);

impl InFlight {
    fn new(conn: &Arc<Conn>) -> InFlight {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(conn.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts and serves until `stopped` fires.
async fn serve(
    listener: std::net::TcpListener,
    app: Arc<App>,
    token: Option<BearerToken>,
    hosts: HostKeys,
    stopped: oneshot::Receiver<()>,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let watcher = tokio::spawn(app.watch.clone().run());
    let http = app.http.clone();
    let router = routes(app);
    let mut live: VecDeque<Arc<Conn>> = VecDeque::new();
    let mut stopped = pin!(stopped);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    tracing::warn!("metrics endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        live.retain(|c| !c.done.load(Ordering::Acquire));
        let host = hosts.of(peer.ip());
        if live.len() >= MAX_CONNECTIONS {
            match evictable(&live, host).and_then(|i| live.remove(i)) {
                Some(evicted) => {
                    evicted.close.notify_one();
                    http.closed_at_bound(true, evicted.peer);
                }
                None => {
                    // Every one is mid-request: the newcomer is closed.
                    http.closed_at_bound(false, peer.ip());
                    continue;
                }
            }
        }
        let conn = Arc::new(Conn {
            peer: peer.ip(),
            host,
            in_flight: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            close: Notify::new(),
        });
        live.push_back(conn.clone());
        let guard = Guard {
            token: token.clone(),
            http: http.clone(),
        };
        tokio::spawn(serve_connection(stream, router.clone(), conn, guard));
    }
    watcher.abort();
    Ok(())
}

/// Which of `live` (oldest first, at the cap) to close for a newcomer `newcomer`: the oldest
/// with no request in flight among the connections of the host or prefix that holds the most
/// (the newcomer counted with its own; a connection weighs as the larger of its host's and its
/// prefix's count), so that one host flooding connections — from one address, from many in
/// its /64, or from many /64s of its /56 — only closes its own. `None` if every one is
/// mid-request.
fn evictable(live: &VecDeque<Arc<Conn>>, newcomer: HostKey) -> Option<usize> {
    let held = |key: &HostKey, same: fn(&HostKey, &HostKey) -> bool| {
        live.iter().filter(|c| same(&c.host, key)).count() + usize::from(same(&newcomer, key))
    };
    let weight = |key: &HostKey| held(key, HostKey::same_host).max(held(key, HostKey::same_prefix));
    live.iter()
        .enumerate()
        .filter(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0)
        // `max_by_key` keeps the last of equals: reversed, that is the oldest.
        .rev()
        .max_by_key(|(_, c)| weight(&c.host))
        .map(|(i, _)| i)
}

/// What a connection checks before it routes a request: the token, if one is set.
struct Guard {
    token: Option<BearerToken>,
    http: Arc<HttpCounters>,
}

impl Guard {
    /// `None` if `request` may go on; else the `401` to answer it with. `/healthz` is open.
    fn check<B>(&self, request: &hyper::Request<B>, peer: IpAddr) -> Option<Response> {
        let token = self.token.as_ref()?;
        if request.uri().path() == "/healthz" {
            return None;
        }
        let carried = request
            .headers()
            .get(header::AUTHORIZATION)
            .is_some_and(|value| token.accepts(value.as_bytes()));
        if carried {
            return None;
        }
        self.http.unauthorized(peer);
        Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"shardloop\"")],
                "unauthorized: this endpoint needs `Authorization: Bearer <metrics.token>` \
                 (only /healthz is open)\n",
            )
                .into_response(),
        )
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    router: Router,
    conn: Arc<Conn>,
    guard: Guard,
) {
    let inner = TowerToHyperService::new(router);
    let counted = conn.clone();
    let service = hyper::service::service_fn(move |request| {
        let in_flight = InFlight::new(&counted);
        let answer = match guard.check(&request, counted.peer) {
            Some(refused) => futures::future::Either::Left(std::future::ready(Ok(refused))),
            None => futures::future::Either::Right(hyper::service::Service::call(&inner, request)),
        };
        async move {
            let response = answer.await;
            drop(in_flight);
            response.map_err(|e: Infallible| match e {})
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        () = conn.close.notified() => {}
        () = tokio::time::sleep(CONNECTION_LIFETIME) => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(GRACE, connection).await;
        }
    }
    conn.done.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection from `ip` as `hosts` key it, idle (`busy`: with a request in flight).
    fn conn(hosts: &HostKeys, ip: &str, busy: bool) -> Arc<Conn> {
        let peer: IpAddr = ip.parse().expect("an address");
        Arc::new(Conn {
            peer,
            host: hosts.of(peer),
            in_flight: AtomicUsize::new(usize::from(busy)),
            done: AtomicBool::new(false),
            close: Notify::new(),
        })
    }

    /// The endpoint at its bound: `scraper` first with two idle connections, then
    /// `MAX_CONNECTIONS - 2` flood connections, the `i`th from `flood(i)`; a newcomer from
    /// `flood(MAX_CONNECTIONS)`. Whose connection is evicted for it.
    fn evicted(limits: &Limits, scraper: &str, flood: impl Fn(usize) -> String) -> IpAddr {
        let hosts = HostKeys::new(limits);
        let mut live: VecDeque<_> = (0..2).map(|_| conn(&hosts, scraper, false)).collect();
        live.extend((0..MAX_CONNECTIONS - 2).map(|i| conn(&hosts, &flood(i), false)));
        let newcomer = hosts.of(flood(MAX_CONNECTIONS).parse().expect("an address"));
        let i = evictable(&live, newcomer).expect("an idle connection");
        live[i].peer
    }

    /// A case: its name, the limits, the flood's `i`th address, and whether the flood pays.
    type Case<'a> = (&'a str, &'a Limits, &'a dyn Fn(usize) -> String, bool);

    #[test]
    fn a_prefix_flooding_from_many_hosts_evicts_its_own_scrapes_not_another_host_s() {
        let v6_64 = Limits {
            ipv6_prefix: 64,
            ..Limits::default()
        };
        let v4_24 = Limits {
            max_per_ipv4_prefix: Some(64),
            ..Limits::default()
        };
        let one_56 = |i: usize| format!("2001:db8:0:{i:x}::1");
        let one_24 = |i: usize| format!("10.0.0.{}", i + 1);
        let one_64 = |i: usize| format!("2001:db8::{:x}", i + 1);
        // (limits, flood, whose connection goes: the flood's oldest or the scraper's)
        let cases: [Case<'_>; 6] = [
            // One /56, every connection from its own /64: by host each holds one, by prefix
            // (the default /56, as the game port counts) the flood holds the most.
            ("default /56", &Limits::default(), &one_56, true),
            // Configured as /64, those /64s are unrelated hosts: the scraper, holding two,
            // is the largest holder (what the endpoint did before it counted prefixes).
            ("ipv6_prefix = 64", &v6_64, &one_56, false),
            ("one /64, many addresses", &Limits::default(), &one_64, true),
            // IPv4: one /24 counts as one only while the game port caps the /24.
            ("/24 cap on", &v4_24, &one_24, true),
            ("/24 cap off", &Limits::default(), &one_24, false),
            (
                "6to4 addresses of one IPv4 address",
                &Limits::default(),
                &|i| format!("2002:a00:1:{i:x}::1"),
                true,
            ),
        ];
        for (name, limits, flood, flood_pays) in cases {
            let scraper = match flood(0).contains(':') {
                true => "2001:db8:1::1",
                false => "10.0.1.1",
            };
            let gone = evicted(limits, scraper, flood);
            let expected: IpAddr = match flood_pays {
                true => flood(0).parse().expect("an address"),
                false => scraper.parse().expect("an address"),
            };
            assert_eq!(gone, expected, "{name}");
        }
    }

    #[test]
    fn only_idle_connections_are_evicted() {
        let hosts = HostKeys::new(&Limits::default());
        let live: VecDeque<_> = (0..MAX_CONNECTIONS)
            .map(|i| conn(&hosts, &format!("2001:db8:0:{i:x}::1"), i != 3))
            .collect();
        let newcomer = hosts.of("2001:db8:0:ff::1".parse().expect("an address"));
        assert_eq!(evictable(&live, newcomer), Some(3));
        live[3].in_flight.store(1, Ordering::Release);
        assert_eq!(evictable(&live, newcomer), None, "every one mid-request");
    }
}
