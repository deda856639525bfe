//! Wake latency of the event loop, in real time, against plain tokio on the same schedule.
//!
//! ```sh
//! cargo run --release --example wake_latency
//! ```
//!
//! (a) **Wheel lag.** A repeating timer `timer::every(8 ms)` runs for ~5 s on an otherwise
//! idle loop (which therefore parks between ticks, until the next due boundary). Each
//! callback records `Instant::now() − timer::now()`, where `timer::now()` is the tick boundary
//! being processed. The peer is a plain tokio loop `sleep_until(next); next += 8 ms` on the
//! same runtime, which records `Instant::now() − next`. The floor is the OS itself: a
//! blocking `read` on a `timerfd` (CLOCK_MONOTONIC, absolute, 8 ms interval) in a plain
//! thread, recording how late each expiry is read.
//!
//! (b) **post → run.** The loop is idle (no timers; default `idle_wait` of 1 s), so it is
//! parked when a post arrives. Another thread posts a closure every ~10 ms carrying the
//! `std::time::Instant` at which it was posted; the closure records `now − then` when the
//! loop runs it. The peer is a tokio unbounded `mpsc` channel carrying the same closures to
//! a `spawn_local` consumer on a parked current-thread runtime.
//!
//! Two floors put (b) in context, on the same schedule: `tokio::sync::Notify` from the other
//! thread to a `block_on` future (the cheapest cross-thread wake tokio has: what any design
//! on tokio pays), and a raw `eventfd` write to a thread blocked in `epoll_wait` (the OS
//! mechanism under tokio's park, no tokio at all).
//!
//! Everything runs one measurement at a time on one current-thread runtime (`enable_all`).
//! All samples are kept (no warm-up discarded). Percentiles are nearest-rank.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::thread;

use shardloop::{EventLoop, LoopStats, timer};
use tokio::time::{Duration, Instant};

/// The loop's tick and the timers' interval.
const TICK: Duration = Duration::from_millis(8);
/// How long each wheel-lag run lasts.
const WHEEL_RUN: Duration = Duration::from_secs(5);
/// Posts per post→run run.
const POSTS: usize = 300;
/// Gap between posts.
const POST_GAP: std::time::Duration = std::time::Duration::from_millis(10);

type Job = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// post→run samples, recorded on the consumer thread by the posted closures.
    static POST_LAGS: RefCell<Vec<Duration>> = const { RefCell::new(Vec::new()) };
}

/// A closure that records how long ago it was made, on whichever thread runs it.
fn stamped_job() -> impl FnOnce() + Send + 'static {
    let sent = std::time::Instant::now();
    move || {
        let lag = sent.elapsed();
        POST_LAGS.with(|lags| lags.borrow_mut().push(lag));
    }
}

fn take_post_lags() -> Vec<Duration> {
    POST_LAGS.with(|lags| std::mem::take(&mut *lags.borrow_mut()))
}

/// (a) ours: every(8 ms) for `WHEEL_RUN`, lag of each callback behind its boundary.
async fn wheel_lag_ours() -> (Vec<Duration>, LoopStats) {
    let mut el = EventLoop::builder().tick(TICK).build();
    let lags = Rc::new(RefCell::new(Vec::with_capacity(1024)));
    let sink = lags.clone();
    el.run_until(async move {
        let token = timer::every(TICK).start(move || {
            let lag = Instant::now().saturating_duration_since(timer::now());
            sink.borrow_mut().push(lag);
        });
        timer::pause_for(WHEEL_RUN).await;
        token.cancel();
    })
    .await;
    let stats = el.stats();
    drop(el);
    let lags = lags.take();
    (lags, stats)
}

/// (a) tokio: `sleep_until` on the same 8 ms schedule, lateness of each wake.
async fn wheel_lag_tokio() -> Vec<Duration> {
    let start = Instant::now();
    let end = start + WHEEL_RUN;
    let mut next = start + TICK;
    let mut lags = Vec::with_capacity(1024);
    while next <= end {
        tokio::time::sleep_until(next).await;
        lags.push(Instant::now().saturating_duration_since(next));
        next += TICK;
    }
    lags
}

/// (b) ours: posts to a parked loop.
async fn post_latency_ours() -> (Vec<Duration>, LoopStats) {
    let mut el = EventLoop::builder().tick(TICK).build();
    let ctx = el.context();
    let producer = thread::spawn(move || {
        for _ in 0..POSTS {
            thread::sleep(POST_GAP);
            ctx.post(stamped_job()).expect("the loop is running");
        }
        ctx.shutdown();
    });
    take_post_lags();
    el.run().await;
    producer.join().expect("producer");
    let stats = el.stats();
    drop(el);
    (take_post_lags(), stats)
}

/// (b) tokio: the same closures over an unbounded channel to a `spawn_local` consumer.
fn post_latency_tokio(rt: &tokio::runtime::Runtime) -> Vec<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
    let producer = thread::spawn(move || {
        for _ in 0..POSTS {
            thread::sleep(POST_GAP);
            tx.send(Box::new(stamped_job()))
                .unwrap_or_else(|_| panic!("the consumer is running"));
        }
    });
    take_post_lags();
    let local = tokio::task::LocalSet::new();
    local.block_on(rt, async {
        tokio::task::spawn_local(async move {
            while let Some(job) = rx.recv().await {
                job();
            }
        })
        .await
        .expect("consumer");
    });
    producer.join().expect("producer");
    take_post_lags()
}

/// CLOCK_MONOTONIC in nanoseconds.
fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn timespec(nanos: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    }
}

/// (a) floor: blocking reads of an absolute 8 ms `timerfd`, lateness of each read.
fn wheel_lag_timerfd() -> Vec<Duration> {
    let tick = TICK.as_nanos() as u64;
    let runs = (WHEEL_RUN.as_nanos() as u64 / tick) as usize;
    // SAFETY: timerfd_create has no memory-safety preconditions; the result is checked.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
    assert!(fd >= 0, "timerfd_create failed");
    let first = monotonic_nanos() + tick;
    let spec = libc::itimerspec {
        it_interval: timespec(tick),
        it_value: timespec(first),
    };
    // SAFETY: `spec` is a valid itimerspec; the old-value pointer may be null.
    let rc =
        unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "timerfd_settime");
    let mut lags = Vec::with_capacity(runs);
    let mut due = first;
    while lags.len() < runs {
        let mut expirations: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64, from a descriptor owned here.
        let n = unsafe { libc::read(fd, (&mut expirations as *mut u64).cast(), 8) };
        assert_eq!(n, 8, "timerfd read");
        let now = monotonic_nanos();
        // With several expirations at once, the earlier ones were even later.
        for _ in 0..expirations {
            lags.push(Duration::from_nanos(now.saturating_sub(due)));
            due += tick;
        }
    }
    lags.truncate(runs);
    // SAFETY: `fd` is owned here and not used afterwards.
    unsafe { libc::close(fd) };
    lags
}

/// Floor 1: `Notify::notify_one` from another thread to a `block_on` future.
fn floor_tokio_notify(rt: &tokio::runtime::Runtime) -> Vec<Duration> {
    let notify = Arc::new(tokio::sync::Notify::new());
    let sent: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let producer = {
        let (notify, sent) = (notify.clone(), sent.clone());
        thread::spawn(move || {
            for _ in 0..POSTS {
                thread::sleep(POST_GAP);
                *sent.lock().expect("stamp") = Some(std::time::Instant::now());
                notify.notify_one();
            }
        })
    };
    let lags = rt.block_on(async {
        let mut lags = Vec::with_capacity(POSTS);
        while lags.len() < POSTS {
            notify.notified().await;
            if let Some(then) = sent.lock().expect("stamp").take() {
                lags.push(then.elapsed());
            }
        }
        lags
    });
    producer.join().expect("producer");
    lags
}

/// Floor 2: an `eventfd` write to a thread blocked in `epoll_wait`, no tokio.
fn floor_eventfd_epoll() -> Vec<Duration> {
    // SAFETY: eventfd / epoll_create1 have no memory-safety preconditions; checked below.
    let (efd, epfd) = unsafe {
        (
            libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC),
            libc::epoll_create1(libc::EPOLL_CLOEXEC),
        )
    };
    assert!(efd >= 0 && epfd >= 0, "eventfd / epoll_create1 failed");
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: both descriptors are live; `event` is a valid epoll_event.
    let rc = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, efd, &mut event) };
    assert_eq!(rc, 0, "epoll_ctl failed");
    let sent: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let producer = {
        let sent = sent.clone();
        thread::spawn(move || {
            for _ in 0..POSTS {
                thread::sleep(POST_GAP);
                *sent.lock().expect("stamp") = Some(std::time::Instant::now());
                let one: u64 = 1;
                // SAFETY: writes 8 bytes from a live u64 to the eventfd, which outlives
                // this thread (it is joined before the descriptor is closed).
                let n = unsafe { libc::write(efd, (&one as *const u64).cast(), 8) };
                assert_eq!(n, 8, "eventfd write");
            }
        })
    };
    let mut lags = Vec::with_capacity(POSTS);
    let mut ready = [libc::epoll_event { events: 0, u64: 0 }];
    while lags.len() < POSTS {
        // SAFETY: `ready` has room for the one event asked for.
        let n = unsafe { libc::epoll_wait(epfd, ready.as_mut_ptr(), 1, -1) };
        if n <= 0 {
            continue;
        }
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a live descriptor.
        unsafe { libc::read(efd, (&mut count as *mut u64).cast(), 8) };
        if let Some(then) = sent.lock().expect("stamp").take() {
            lags.push(then.elapsed());
        }
    }
    producer.join().expect("producer");
    // SAFETY: both descriptors are owned here and not used afterwards.
    unsafe {
        libc::close(epfd);
        libc::close(efd);
    }
    lags
}

/// p50, p99 and max (nearest rank), in µs.
fn percentiles(samples: &[Duration]) -> [f64; 3] {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = |p: f64| {
        let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[i].as_secs_f64() * 1e6
    };
    [
        rank(0.50),
        rank(0.99),
        sorted[sorted.len() - 1].as_secs_f64() * 1e6,
    ]
}

fn row(what: &str, peer: &str, samples: &[Duration], peer_p50: f64, target: &str) {
    let [p50, p99, max] = percentiles(samples);
    println!(
        "| {what} | {peer} | {} | {p50:.1} | {p99:.1} | {max:.1} | {:.2}× | {target} |",
        samples.len(),
        peer_p50 / p50
    );
}

fn verdict(p50: f64, limit_us: f64) -> String {
    let met = if p50 <= limit_us { "met" } else { "NOT met" };
    format!("p50 ≤ {limit_us:.0} µs: {met}")
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    println!(
        "wake_latency: tick {TICK:?}; wheel runs {WHEEL_RUN:?} each; {POSTS} posts every {POST_GAP:?}"
    );
    let (ours_wheel, wheel_stats) = rt.block_on(wheel_lag_ours());
    let tokio_wheel = rt.block_on(wheel_lag_tokio());
    let floor_wheel = wheel_lag_timerfd();
    let (ours_post, post_stats) = rt.block_on(post_latency_ours());
    let tokio_post = post_latency_tokio(&rt);
    let floor_notify = floor_tokio_notify(&rt);
    let floor_epoll = floor_eventfd_epoll();
    assert_eq!(ours_post.len(), POSTS, "every post ran");
    assert_eq!(tokio_post.len(), POSTS, "every message ran");

    let tokio_wheel_p50 = percentiles(&tokio_wheel)[0];
    let ours_wheel_p50 = percentiles(&ours_wheel)[0];
    let tokio_post_p50 = percentiles(&tokio_post)[0];
    let ours_post_p50 = percentiles(&ours_post)[0];

    println!();
    println!(
        "| measurement | peer | samples | p50 µs | p99 µs | max µs | tokio p50 / this p50 | target |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    row(
        "wheel lag, every(8 ms)",
        "ours",
        &ours_wheel,
        tokio_wheel_p50,
        &verdict(ours_wheel_p50, 200.0),
    );
    row(
        "wheel lag, every(8 ms)",
        "tokio sleep_until",
        &tokio_wheel,
        tokio_wheel_p50,
        "",
    );
    row(
        "wheel lag, every(8 ms)",
        "floor: timerfd read (no tokio)",
        &floor_wheel,
        tokio_wheel_p50,
        "",
    );
    row(
        "post → run, parked loop",
        "ours",
        &ours_post,
        tokio_post_p50,
        &verdict(ours_post_p50, 30.0),
    );
    row(
        "post → run, parked loop",
        "tokio mpsc + spawn_local",
        &tokio_post,
        tokio_post_p50,
        "",
    );
    row(
        "post → run, parked loop",
        "floor: tokio Notify → block_on",
        &floor_notify,
        tokio_post_p50,
        "",
    );
    row(
        "post → run, parked loop",
        "floor: eventfd → epoll_wait (no tokio)",
        &floor_epoll,
        tokio_post_p50,
        "",
    );
    println!();
    println!(
        "loop stats, wheel run: iterations {}, sleeps {}, late wakes {}, ticks fired {}, late \
         ticks {}, max wheel lag {:?}, verdict: {}",
        wheel_stats.iterations,
        wheel_stats.sleeps,
        wheel_stats.late_wakes,
        wheel_stats.ticks_fired,
        wheel_stats.late_ticks,
        wheel_stats.max_wheel_lag,
        wheel_stats.verdict
    );
    println!(
        "loop stats, post run: iterations {}, sleeps {}, wakes issued {}, wakes elided {}",
        post_stats.iterations, post_stats.sleeps, post_stats.wakes_issued, post_stats.wakes_elided
    );
}
