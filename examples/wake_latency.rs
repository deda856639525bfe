//! Wake latency of the event loop, in real time, against plain tokio on the same schedule.
//!
//! ```sh
//! cargo run --release --example wake_latency             # everything, ~80 s
//! cargo run --release --example wake_latency -- post     # the post → run rows only, ~15 s
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
//! What the kernel adds to (a), each measured on its own in the same run: the resolution of
//! CLOCK_MONOTONIC (`clock_getres`), the timer slack of the loop thread (`PR_GET_TIMERSLACK`:
//! 50 µs for a normal thread), the same `timerfd` floor on a thread whose slack is 1 ns (a
//! `timerfd` is armed with no slack range, so the two should agree), a `clock_nanosleep`
//! floor at both slacks (the slack does apply to a sleep), and the `timerfd` read through
//! `epoll_wait` as the loop's park does it (the wake path without tokio or the loop).
//!
//! (b) **post → run.** The loop is idle (no timers; default `idle_wait` of 5 s), so it is
//! parked when a post arrives. Another thread posts a closure every ~10 ms carrying the
//! `std::time::Instant` at which it was posted; the closure records `now − then` when the
//! loop runs it. The peer is a tokio unbounded `mpsc` channel carrying the same closures to
//! a `spawn_local` consumer on a parked current-thread runtime.
//!
//! A second row of ours runs the same loop with `EventLoopBuilder::park_outside_tokio`: it has
//! the runtime to itself here, so it parks in its own `epoll_wait` (a timerfd and a doorbell
//! `eventfd`), and a post wakes it the way the `eventfd` floor below is woken. A third parks
//! as the shard binary's loop does: `EventLoopBuilder::owns_its_thread` with a Network slot
//! (a slot alone would keep `park_outside_tokio` in tokio's park).
//!
//! Two floors put (b) in context, on the same schedule: `tokio::sync::Notify` from the other
//! thread to a `block_on` future (the cheapest cross-thread wake tokio has: what any design
//! on tokio pays), and a raw `eventfd` write to a thread blocked in `epoll_wait` (the OS
//! mechanism under tokio's park, no tokio at all). The six take turns, 30 posts each, ten
//! times over (`POST_ROUNDS`), so that each draws the same mix of the host's wake-up modes.
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
/// The scheduler slice the loop thread asks for in the short-slice run.
const SHORT_SLICE: Duration = Duration::from_micros(100);
/// Posts per peer in the post→run runs, in all.
const POSTS: usize = 300;
/// The post→run runs go round the peers this many times, `POSTS / POST_ROUNDS` posts each
/// time. On a quiet VM a wake-up comes in one of two modes (its p50 about 2–3 µs, or 8–13 µs,
/// for whichever peer), and a mode can hold for seconds: a peer measured in one block of its
/// own would draw one mode and the others another. Taking turns gives every peer the same mix.
const POST_ROUNDS: usize = 10;
/// Posts per peer per round.
const POSTS_PER_ROUND: usize = POSTS / POST_ROUNDS;
/// Gap between posts.
const POST_GAP: std::time::Duration = std::time::Duration::from_millis(10);
/// post → run p50 over the eventfd floor's p50 that issue 36 asks for.
const FLOOR_RATIO_TARGET: f64 = 1.3;

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

/// (a) ours: every(8 ms) for `WHEEL_RUN`, lag of each callback behind its boundary. With
/// `default_slack`, the first callback (after the loop's first park, which set the thread's
/// timer slack to 1 ns) puts the thread's default slack back, for the before/after row.
async fn wheel_lag_ours(default_slack: bool) -> (Vec<Duration>, LoopStats) {
    let mut el = EventLoop::builder().tick(TICK).build();
    let lags = Rc::new(RefCell::new(Vec::with_capacity(1024)));
    let sink = lags.clone();
    el.run_until(async move {
        let token = timer::every(TICK).start(move || {
            if default_slack && sink.borrow().is_empty() {
                set_timer_slack(0);
            }
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

/// How the loop of a post row parks.
#[derive(Clone, Copy)]
enum ParkAs {
    /// The default: through tokio's park.
    Tokio,
    /// `EventLoopBuilder::park_outside_tokio`: this loop has the runtime to itself.
    Outside,
    /// As the shard binary's loop: `EventLoopBuilder::owns_its_thread`, with a Network slot
    /// (which would keep `park_outside_tokio` in tokio).
    Shard,
}

/// (b) ours: posts to a parked loop, parked as `park` says.
async fn post_latency_ours(park: ParkAs) -> (Vec<Duration>, LoopStats) {
    let builder = EventLoop::builder().tick(TICK);
    let mut el = match park {
        ParkAs::Tokio => builder,
        ParkAs::Outside => builder.park_outside_tokio(true),
        ParkAs::Shard => builder
            .owns_its_thread(true)
            .slot(shardloop::runtime::Phase::Network, || false),
    }
    .build();
    let ctx = el.context();
    let producer = thread::spawn(move || {
        for _ in 0..POSTS_PER_ROUND {
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
        for _ in 0..POSTS_PER_ROUND {
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

/// `struct sched_attr` as the kernel reads it (`SCHED_ATTR_SIZE_VER0`, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Asks the scheduler for a time slice of `slice` on the calling (normal) thread: on a kernel
/// with EEVDF custom slices (6.12 and later) a shorter slice gives the thread an earlier
/// virtual deadline, so when it wakes it can preempt a CPU-bound neighbour instead of waiting
/// for that one's slice to end. `Duration::ZERO` restores the default slice. Returns the
/// error where the kernel refuses.
fn set_sched_slice(slice: Duration) -> std::io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: slice.as_nanos() as u64,
        deadline: 0,
        period: 0,
    };
    // SAFETY: `attr` is a valid, initialised sched_attr of the size it states; pid 0 = this
    // thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's timer slack, in ns (`PR_GET_TIMERSLACK`).
fn timer_slack() -> u64 {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer; it returns the slack or -1.
    let slack = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    u64::try_from(slack).unwrap_or(0)
}

/// Sets the calling thread's timer slack (`0` restores the thread's default, 50 µs for a
/// normal thread).
fn set_timer_slack(nanos: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a value, no pointer.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos as libc::c_ulong, 0, 0, 0) };
    assert_eq!(rc, 0, "PR_SET_TIMERSLACK");
}

/// CLOCK_MONOTONIC's resolution as the kernel reports it (1 ns with high-resolution timers).
fn clock_resolution() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_getres");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `floor` on a fresh thread whose timer slack is `slack_ns` (`None`: the default).
fn on_thread_with_slack(slack_ns: Option<u64>, floor: fn() -> Vec<Duration>) -> Vec<Duration> {
    thread::spawn(move || {
        if let Some(nanos) = slack_ns {
            set_timer_slack(nanos);
        }
        floor()
    })
    .join()
    .expect("floor thread")
}

/// (a) floor: absolute `clock_nanosleep` to each 8 ms boundary, lateness of each wake.
fn wheel_lag_nanosleep() -> Vec<Duration> {
    let tick = TICK.as_nanos() as u64;
    let runs = (WHEEL_RUN.as_nanos() as u64 / tick) as usize;
    let mut due = monotonic_nanos() + tick;
    let mut lags = Vec::with_capacity(runs);
    while lags.len() < runs {
        let at = timespec(due);
        // SAFETY: `at` is a valid timespec; the remainder pointer may be null (absolute).
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &at,
                std::ptr::null_mut(),
            )
        };
        if rc == libc::EINTR {
            continue;
        }
        lags.push(Duration::from_nanos(monotonic_nanos().saturating_sub(due)));
        due += tick;
    }
    lags
}

/// (a) floor: the absolute 8 ms `timerfd` read after `epoll_wait(-1)` returns, as the loop's
/// park blocks (the kernel's wake path without tokio or the loop).
fn wheel_lag_timerfd_epoll() -> Vec<Duration> {
    let tick = TICK.as_nanos() as u64;
    let runs = (WHEEL_RUN.as_nanos() as u64 / tick) as usize;
    // SAFETY: timerfd_create / epoll_create1 have no memory-safety preconditions; checked.
    let (fd, epfd) = unsafe {
        (
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            ),
            libc::epoll_create1(libc::EPOLL_CLOEXEC),
        )
    };
    assert!(
        fd >= 0 && epfd >= 0,
        "timerfd_create / epoll_create1 failed"
    );
    let mut event = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: 0,
    };
    // SAFETY: both descriptors are live; `event` is a valid epoll_event.
    let rc = unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut event) };
    assert_eq!(rc, 0, "epoll_ctl");
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
    let mut ready = [libc::epoll_event { events: 0, u64: 0 }];
    while lags.len() < runs {
        // SAFETY: `ready` has room for the one event asked for.
        let n = unsafe { libc::epoll_wait(epfd, ready.as_mut_ptr(), 1, -1) };
        if n <= 0 {
            continue;
        }
        let mut expirations: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64, from a descriptor owned here.
        let n = unsafe { libc::read(fd, (&mut expirations as *mut u64).cast(), 8) };
        if n != 8 {
            continue;
        }
        let now = monotonic_nanos();
        for _ in 0..expirations {
            lags.push(Duration::from_nanos(now.saturating_sub(due)));
            due += tick;
        }
    }
    lags.truncate(runs);
    // SAFETY: both descriptors are owned here and not used afterwards.
    unsafe {
        libc::close(epfd);
        libc::close(fd);
    }
    lags
}

/// Floor 1: `Notify::notify_one` from another thread to a `block_on` future.
///
/// Two notifies that land before the consumer looks leave one permit (and one stamp, the
/// later): a loaded machine yields fewer samples than posts, so the producer says when it is
/// done instead of the consumer counting them.
fn floor_tokio_notify(rt: &tokio::runtime::Runtime) -> Vec<Duration> {
    let notify = Arc::new(tokio::sync::Notify::new());
    let sent: Arc<Mutex<Stamp>> = Arc::default();
    let producer = {
        let (notify, sent) = (notify.clone(), sent.clone());
        thread::spawn(move || {
            for _ in 0..POSTS_PER_ROUND {
                thread::sleep(POST_GAP);
                sent.lock().expect("stamp").sent = Some(std::time::Instant::now());
                notify.notify_one();
            }
            sent.lock().expect("stamp").done = true;
            notify.notify_one();
        })
    };
    let lags = rt.block_on(async {
        let mut lags = Vec::with_capacity(POSTS_PER_ROUND);
        loop {
            notify.notified().await;
            let mut stamp = sent.lock().expect("stamp");
            if let Some(then) = stamp.sent.take() {
                lags.push(then.elapsed());
            }
            if stamp.done {
                break lags;
            }
        }
    });
    producer.join().expect("producer");
    lags
}

/// The last wake's send time, and whether the producer has finished.
#[derive(Default)]
struct Stamp {
    sent: Option<std::time::Instant>,
    done: bool,
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
    let sent: Arc<Mutex<Stamp>> = Arc::default();
    let producer = {
        let sent = sent.clone();
        let signal = move || {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the eventfd, which outlives this
            // thread (it is joined before the descriptor is closed).
            let n = unsafe { libc::write(efd, (&one as *const u64).cast(), 8) };
            assert_eq!(n, 8, "eventfd write");
        };
        thread::spawn(move || {
            for _ in 0..POSTS_PER_ROUND {
                thread::sleep(POST_GAP);
                sent.lock().expect("stamp").sent = Some(std::time::Instant::now());
                signal();
            }
            sent.lock().expect("stamp").done = true;
            signal();
        })
    };
    // As in floor 1, coalesced writes give one sample: the producer says when it is done.
    let mut lags = Vec::with_capacity(POSTS_PER_ROUND);
    let mut ready = [libc::epoll_event { events: 0, u64: 0 }];
    loop {
        // SAFETY: `ready` has room for the one event asked for.
        let n = unsafe { libc::epoll_wait(epfd, ready.as_mut_ptr(), 1, -1) };
        if n <= 0 {
            continue;
        }
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a live descriptor.
        unsafe { libc::read(efd, (&mut count as *mut u64).cast(), 8) };
        let mut stamp = sent.lock().expect("stamp");
        if let Some(then) = stamp.sent.take() {
            lags.push(then.elapsed());
        }
        if stamp.done {
            break;
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
    let post_only = std::env::args().skip(1).any(|arg| arg == "post");

    println!(
        "wake_latency: tick {TICK:?}; wheel runs {WHEEL_RUN:?} each; {POSTS} posts per peer every {POST_GAP:?}, the peers taking turns {POST_ROUNDS} times"
    );
    let wheel = (!post_only).then(|| wheel_runs(&rt));
    let post = post_runs(&rt);

    println!();
    println!(
        "| measurement | peer | samples | p50 µs | p99 µs | max µs | tokio p50 / this p50 | target |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    if let Some(wheel) = &wheel {
        wheel.rows();
    }
    post.rows();
    println!();
    if let Some(wheel) = &wheel {
        wheel.notes();
    }
    post.notes();
}

/// The wheel-lag runs (a) and what the kernel adds to them.
struct WheelRuns {
    ours: Vec<Duration>,
    ours_default_slack: Vec<Duration>,
    ours_short_slice: Option<Vec<Duration>>,
    short_slice: std::io::Result<()>,
    stats: LoopStats,
    tokio: Vec<Duration>,
    floor_timerfd: Vec<Duration>,
    floor_timerfd_slack1: Vec<Duration>,
    floor_timerfd_epoll: Vec<Duration>,
    floor_sleep: Vec<Duration>,
    floor_sleep_slack1: Vec<Duration>,
    /// The loop thread's slack before the loop ran, in the default-slack run, and after.
    slacks: [u64; 3],
}

fn wheel_runs(rt: &tokio::runtime::Runtime) -> WheelRuns {
    let default_slack = timer_slack();
    let (ours_default_slack, _) = rt.block_on(wheel_lag_ours(true));
    let default_after_reset = timer_slack();
    let (ours, stats) = rt.block_on(wheel_lag_ours(false));
    let loop_slack = timer_slack();
    let short_slice = set_sched_slice(SHORT_SLICE);
    let ours_short_slice = short_slice
        .as_ref()
        .ok()
        .map(|()| rt.block_on(wheel_lag_ours(false)).0);
    let _ = set_sched_slice(Duration::ZERO);
    WheelRuns {
        ours,
        ours_default_slack,
        ours_short_slice,
        short_slice,
        stats,
        tokio: rt.block_on(wheel_lag_tokio()),
        floor_timerfd: wheel_lag_timerfd(),
        floor_timerfd_slack1: on_thread_with_slack(Some(1), wheel_lag_timerfd),
        floor_timerfd_epoll: on_thread_with_slack(None, wheel_lag_timerfd_epoll),
        floor_sleep: on_thread_with_slack(None, wheel_lag_nanosleep),
        floor_sleep_slack1: on_thread_with_slack(Some(1), wheel_lag_nanosleep),
        slacks: [default_slack, default_after_reset, loop_slack],
    }
}

impl WheelRuns {
    fn rows(&self) {
        let tokio_p50 = percentiles(&self.tokio)[0];
        let what = "wheel lag, every(8 ms)";
        let ours = |peer: &str, samples: &[Duration]| {
            let target = verdict(percentiles(samples)[0], 100.0);
            row(what, peer, samples, tokio_p50, &target);
        };
        ours("ours", &self.ours);
        ours(
            "ours, loop thread back at its default timer slack",
            &self.ours_default_slack,
        );
        if let Some(samples) = &self.ours_short_slice {
            ours("ours, loop thread's scheduler slice 100 µs", samples);
        }
        let peers: [(&str, &[Duration]); 6] = [
            ("tokio sleep_until", &self.tokio),
            ("floor: timerfd read (no tokio)", &self.floor_timerfd),
            (
                "floor: timerfd read, thread slack 1 ns",
                &self.floor_timerfd_slack1,
            ),
            (
                "floor: timerfd via epoll_wait (the park's path, no tokio)",
                &self.floor_timerfd_epoll,
            ),
            ("floor: clock_nanosleep, default slack", &self.floor_sleep),
            (
                "floor: clock_nanosleep, thread slack 1 ns",
                &self.floor_sleep_slack1,
            ),
        ];
        for (peer, samples) in peers {
            row(what, peer, samples, tokio_p50, "");
        }
    }

    fn notes(&self) {
        let stats = &self.stats;
        println!(
            "loop stats, wheel run: iterations {}, sleeps {}, late wakes {}, ticks fired {}, late \
             ticks {}, max wheel lag {:?}, verdict: {}",
            stats.iterations,
            stats.sleeps,
            stats.late_wakes,
            stats.ticks_fired,
            stats.late_ticks,
            stats.max_wheel_lag,
            stats.verdict
        );
        let [before, default, after] = self.slacks;
        println!(
            "kernel: CLOCK_MONOTONIC resolution {:?}; timer slack of the loop thread: {before} ns \
             before the loop ran, {default} ns in the default-slack run, {after} ns after the \
             loop's park set it",
            clock_resolution(),
        );
        if let Err(why) = &self.short_slice {
            println!("short-slice run skipped: sched_setattr refused ({why})");
        }
    }
}

/// The post → run runs (b), their peer and floors.
struct PostRuns {
    ours: Vec<Duration>,
    stats: LoopStats,
    ours_outside_tokio: Vec<Duration>,
    ours_shard: Vec<Duration>,
    tokio: Vec<Duration>,
    floor_notify: Vec<Duration>,
    floor_eventfd: Vec<Duration>,
}

/// The peers take turns, `POST_ROUNDS` rounds of `POSTS_PER_ROUND` posts each (see
/// `POST_ROUNDS`); each peer's samples are pooled.
fn post_runs(rt: &tokio::runtime::Runtime) -> PostRuns {
    let (mut ours, mut tokio) = (Vec::new(), Vec::new());
    let (mut ours_outside_tokio, mut ours_shard) = (Vec::new(), Vec::new());
    let (mut floor_notify, mut floor_eventfd) = (Vec::new(), Vec::new());
    let mut stats = None;
    for _ in 0..POST_ROUNDS {
        let (round, round_stats) = rt.block_on(post_latency_ours(ParkAs::Tokio));
        ours.extend(round);
        stats = Some(round_stats);
        ours_outside_tokio.extend(rt.block_on(post_latency_ours(ParkAs::Outside)).0);
        ours_shard.extend(rt.block_on(post_latency_ours(ParkAs::Shard)).0);
        tokio.extend(post_latency_tokio(rt));
        floor_notify.extend(floor_tokio_notify(rt));
        floor_eventfd.extend(floor_eventfd_epoll());
    }
    assert_eq!(ours.len(), POSTS, "every post ran");
    assert_eq!(ours_outside_tokio.len(), POSTS, "every post ran");
    assert_eq!(ours_shard.len(), POSTS, "every post ran");
    assert_eq!(tokio.len(), POSTS, "every message ran");
    PostRuns {
        ours,
        stats: stats.expect("at least one round"),
        ours_outside_tokio,
        ours_shard,
        tokio,
        floor_notify,
        floor_eventfd,
    }
}

impl PostRuns {
    fn rows(&self) {
        let what = "post → run, parked loop";
        let tokio_p50 = percentiles(&self.tokio)[0];
        let ours_p50 = percentiles(&self.ours)[0];
        let floor_p50 = percentiles(&self.floor_eventfd)[0];
        let target = |p50: f64| {
            format!(
                "{}; {:.2}× the eventfd floor (≤ {FLOOR_RATIO_TARGET}×: {})",
                verdict(p50, 30.0),
                p50 / floor_p50,
                if p50 <= FLOOR_RATIO_TARGET * floor_p50 {
                    "met"
                } else {
                    "NOT met"
                }
            )
        };
        row(what, "ours", &self.ours, tokio_p50, &target(ours_p50));
        let outside = &self.ours_outside_tokio;
        let outside_p50 = percentiles(outside)[0];
        row(
            what,
            "ours, park_outside_tokio",
            outside,
            tokio_p50,
            &target(outside_p50),
        );
        let shard = &self.ours_shard;
        row(
            what,
            "ours, owns_its_thread + a slot (the shard's park)",
            shard,
            tokio_p50,
            &target(percentiles(shard)[0]),
        );
        let peers: [(&str, &[Duration]); 3] = [
            ("tokio mpsc + spawn_local", &self.tokio),
            ("floor: tokio Notify → block_on", &self.floor_notify),
            (
                "floor: eventfd → epoll_wait (no tokio)",
                &self.floor_eventfd,
            ),
        ];
        for (peer, samples) in peers {
            row(what, peer, samples, tokio_p50, "");
        }
    }

    fn notes(&self) {
        let stats = &self.stats;
        println!(
            "loop stats, last post round: iterations {}, sleeps {}, wakes issued {}, wakes elided {}",
            stats.iterations, stats.sleeps, stats.wakes_issued, stats.wakes_elided
        );
    }
}
