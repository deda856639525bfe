//! The HTTP thread: its own current-thread tokio runtime, an HTTP/1 server (hyper, routed by
//! axum) on the `metrics.listen` socket, and the routes `/metrics`, `/healthz` and `/`.
//!
//! Bounds, so that slow or many clients cannot exhaust the shard's descriptors or reach the
//! loop: at most [`MAX_CONNECTIONS`] connections are kept; when a new one arrives at the cap,
//! a connection with no request in flight (an idle keep-alive, a client still dribbling its
//! headers) is closed for it — the oldest of those from the peer address holding the most
//! connections, so that a flood from one address closes its own connections, not the
//! scraper's — and if every one is mid-request the newcomer is closed instead. Headers must arrive within [`HEADER_TIMEOUT`]; a connection lives at most
//! [`CONNECTION_LIFETIME`] (then it is closed after its current request). `/metrics` never
//! waits for the loop: it reads the copy the loop published last ([`super::publish`]) and
//! reports its age. Only the status page asks the loop, at most once per [`PAGE_REUSE`] (a page
//! rendered within that is served again, and concurrent reloads wait for the one being
//! rendered); it waits at most [`PROBE_TIMEOUT`] for the answer.
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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

use crate::runtime::LoopContext;

use super::disk::DiskCache;
use super::families::{self, Readings};
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

/// How the endpoint behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `/healthz` reports the loop stalled after this long without an iteration.
    pub stale_after: Duration,
    /// Directories whose size `/metrics` reports, with their label.
    pub disk_dirs: Vec<(&'static str, PathBuf)>,
    /// The directories are walked at most this often.
    pub disk_every: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            stale_after: health::DEFAULT_STALE_AFTER,
            disk_dirs: Vec::new(),
            disk_every: DISK_EVERY,
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
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let app = App::new(probe, slot, context, saves, &settings);
                    if let Err(e) = serve(listener, app, stopped).await {
                        tracing::error!("the metrics endpoint stopped: {e}");
                    }
                });
                // A disk walk still running is not waited for.
                runtime.shutdown_timeout(Duration::from_millis(200));
            })?;
        tracing::info!(%addr, "metrics endpoint: /metrics, /healthz and a status page at /");
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

/// What the handlers share.
struct App {
    probe: mpsc::Sender<Request>,
    slot: Slot,
    watch: Arc<Watch>,
    disk: DiskCache,
    saves: SaveMetrics,
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
    /// The peer's address (what eviction counts connections by).
    peer: IpAddr,
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
    stopped: oneshot::Receiver<()>,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let watcher = tokio::spawn(app.watch.clone().run());
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
        if live.len() >= MAX_CONNECTIONS {
            match evictable(&live, peer.ip()).and_then(|i| live.remove(i)) {
                Some(evicted) => evicted.close.notify_one(),
                None => continue, // every one is mid-request: the newcomer is closed
            }
        }
        let conn = Arc::new(Conn {
            peer: peer.ip(),
            in_flight: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            close: Notify::new(),
        });
        live.push_back(conn.clone());
        tokio::spawn(serve_connection(stream, router.clone(), conn));
    }
    watcher.abort();
    Ok(())
}

/// Which of `live` (oldest first, at the cap) to close for a newcomer from `newcomer`: the
/// oldest with no request in flight among the connections of the address that holds the most
/// (the newcomer counted with its own), so that one address flooding connections only closes
/// its own. `None` if every one is mid-request.
fn evictable(live: &VecDeque<Arc<Conn>>, newcomer: IpAddr) -> Option<usize> {
    let held =
        |ip: IpAddr| live.iter().filter(|c| c.peer == ip).count() + usize::from(ip == newcomer);
    live.iter()
        .enumerate()
        .filter(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0)
        // `max_by_key` keeps the last of equals: reversed, that is the oldest.
        .rev()
        .max_by_key(|(_, c)| held(c.peer))
        .map(|(i, _)| i)
}

async fn serve_connection(stream: tokio::net::TcpStream, router: Router, conn: Arc<Conn>) {
    let inner = TowerToHyperService::new(router);
    let counted = conn.clone();
    let service = hyper::service::service_fn(move |request| {
        let guard = InFlight::new(&counted);
        let answer = hyper::service::Service::call(&inner, request);
        async move {
            let response = answer.await;
            drop(guard);
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
