//! The loop rules L1–L3 and the wake contract, through the public API. Timing rules run on
//! the paused clock; the few real-time wake tests use bounds of seconds, never speed.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use shardloop::runtime::Phase;
use shardloop::timer;
use shardloop::{EventLoop, LoopClosed, LoopContext, spawn};
use tokio::time::{Duration, Instant};

mod common;
use common::deadline::within;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn l1_posts_run_on_the_loop_thread_fifo_per_sender() {
    let mut el = EventLoop::new();
    let ctx = el.context();
    let loop_thread = thread::current().id();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let senders: Vec<_> = (0..3)
        .map(|s| {
            let ctx = ctx.clone();
            let seen = seen.clone();
            thread::spawn(move || {
                for i in 0..200 {
                    let seen = seen.clone();
                    ctx.post(move || {
                        assert_eq!(thread::current().id(), loop_thread);
                        seen.lock().unwrap().push((s, i));
                    })
                    .expect("loop is open");
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    // Posted before the loop ever ran: none is lost.
    el.run_until(timer::pause(8)).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 600);
    for s in 0..3 {
        let order: Vec<_> = seen.iter().filter(|x| x.0 == s).map(|x| x.1).collect();
        assert_eq!(order, (0..200).collect::<Vec<_>>(), "sender {s} in order");
    }
}

#[tokio::test(start_paused = true)]
async fn l1_posts_from_the_loop_thread_issue_no_wake() {
    let mut el = EventLoop::new();
    let ctx = el.context();
    let ran = Rc::new(Cell::new(0));
    let r = ran.clone();
    el.run_until(async move {
        let count = Arc::new(AtomicUsize::new(0));
        for _ in 0..10 {
            let c = count.clone();
            ctx.post(move || {
                c.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        timer::pause(8).await;
        r.set(count.load(Ordering::Relaxed));
    })
    .await;
    assert_eq!(ran.get(), 10);
    let stats = el.stats();
    assert_eq!(stats.wakes_issued, 0, "{stats:?}");
    assert!(stats.wakes_elided >= 10, "{stats:?}");
}

#[tokio::test]
async fn l1_a_post_wakes_a_parked_loop_at_once_real_time() {
    // idle_wait of a minute and no timers: only the post can end the park.
    let mut el = EventLoop::builder()
        .idle_wait(Duration::from_secs(60))
        .build();
    let ctx = el.context();
    let (tx, rx) = mpsc::channel();
    let poster = thread::spawn(move || {
        let mut latencies = Vec::new();
        for _ in 0..5 {
            thread::sleep(std::time::Duration::from_millis(50));
            let sent = std::time::Instant::now();
            let tx = tx.clone();
            ctx.post(move || tx.send(sent.elapsed()).unwrap()).unwrap();
            latencies.push(rx.recv_timeout(std::time::Duration::from_secs(5)));
        }
        ctx.shutdown();
        latencies
    });
    within(Duration::from_secs(60), "the loop's run", el.run()).await;
    let latencies = poster.join().unwrap();
    for l in latencies {
        let l = l.expect("the post ran within 5 s");
        assert!(l < std::time::Duration::from_secs(2), "woken late: {l:?}");
    }
    let stats = el.stats();
    assert!(
        stats.sleeps >= 5,
        "the loop was parked between posts: {stats:?}"
    );
    assert!(stats.wakes_issued >= 5, "{stats:?}");
}

/// The lost-wake race, hammered (L1: a post to a parked loop wakes it at once). Rounds of
/// four producers, released together: each spins a varying while, posts, and waits for its
/// post to run, so the four posts land at every point of the loop's way out of and back into
/// the park (before it clears the signal, between its last look at the queue and the park,
/// while it blocks). Nothing else can end the park (an hour's `idle_wait`, no timers, no spin
/// before parking) and the next round waits for every post of this one, so a lost wake is not
/// rescued by a later post: it leaves its post waiting past the 10 s bound. Checked by hand
/// against a park that does not read the signal after registering its waker (step (2) of the
/// argument in `src/runtime/park.rs`): this test then fails.
#[tokio::test]
async fn l1_no_post_is_lost_to_a_loop_parking_at_the_same_moment_real_time() {
    let (el, ctx, start, lost) = race(false);
    let producers = post_producers(&ctx, &start, &lost);
    finish_race(el, ctx, producers, &lost, "post").await;
}

/// The same race against a loop that parks in its own `epoll_wait`
/// (`EventLoopBuilder::park_outside_tokio`: it has a runtime of its own here, on a thread
/// of its own), whose wake is the doorbell the waker slot rings instead of tokio's unpark.
/// The bound is the thread's: a lost wake would leave that loop blocked outside tokio, where
/// no tokio timeout can end it.
#[test]
fn l1_no_post_is_lost_to_a_loop_parking_outside_tokio_real_time() {
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (el, ctx, start, lost) = race(true);
        let producers = post_producers(&ctx, &start, &lost);
        rt.block_on(finish_race(el, ctx, producers, &lost, "post"));
        done.send(()).expect("the test waits");
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(150))
        .expect("the race ended (and passed) within 150 s");
}

/// The producers of a post race: each posts once a round and waits for its post to run.
fn post_producers(
    ctx: &LoopContext,
    start: &Arc<std::sync::Barrier>,
    lost: &Arc<Mutex<Option<String>>>,
) -> Vec<thread::JoinHandle<()>> {
    (0..PRODUCERS)
        .map(|seed| {
            let (ctx, start, lost) = (ctx.clone(), start.clone(), lost.clone());
            thread::spawn(move || {
                let (tx, rx) = mpsc::channel();
                let mut jitter = Jitter(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                for round in 0..ROUNDS {
                    start.wait();
                    if lost.lock().expect("lost").is_some() {
                        continue;
                    }
                    jitter.spin();
                    let tx = tx.clone();
                    ctx.post(move || tx.send(()).expect("the producer waits"))
                        .expect("the loop runs");
                    if rx.recv_timeout(std::time::Duration::from_secs(10)).is_err() {
                        let why = format!("producer {seed}, round {round}: not run in 10 s");
                        lost.lock().expect("lost").get_or_insert(why);
                    }
                }
            })
        })
        .collect()
}

/// The same race with both cross-thread queues at once: of the four producers, two post and
/// two wake a task of their own on the loop (through a tokio channel, whose waker is the
/// task's: the wake goes through the remote-wake queue). Each queue has its bit in the signal
/// word, so a loop that took one queue's bit must not erase the other's raised meanwhile. A
/// lost wake leaves a post or a task waiting, and its producer's reply missing past the 10 s
/// bound. Checked by hand (the argument in `src/runtime/park.rs`): against a loop that lowers
/// the signal with a load and a plain store instead of one `swap`, with ~1 µs of spin between
/// the two, this test failed in each of two runs (without the spin the window is a few
/// nanoseconds, and three runs passed; a post-only race cannot show it at all: the drain
/// that follows the store finds the post whose bit it erased); against a park that does not
/// read the signal after registering its waker it failed as `l1_no_post_is_lost_…` does.
#[tokio::test]
async fn l1_no_post_or_task_wake_is_lost_when_both_queues_race_a_parking_loop_real_time() {
    let (el, ctx, start, lost) = race(false);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|seed| {
            let (ctx, start, lost) = (ctx.clone(), start.clone(), lost.clone());
            let (reply, replies) = mpsc::channel::<()>();
            // Odd producers wake a task; even ones post.
            let wake_task = (seed % 2 == 1).then(|| {
                let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel::<()>();
                let reply = reply.clone();
                ctx.spawn(async move {
                    while woken.recv().await.is_some() {
                        reply.send(()).expect("the producer waits");
                    }
                })
                .expect("the loop runs");
                wake
            });
            thread::spawn(move || {
                let mut jitter = Jitter(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                for round in 0..ROUNDS {
                    start.wait();
                    if lost.lock().expect("lost").is_some() {
                        continue;
                    }
                    jitter.spin();
                    match &wake_task {
                        Some(wake) => wake.send(()).expect("the task runs"),
                        None => {
                            let reply = reply.clone();
                            ctx.post(move || reply.send(()).expect("the producer waits"))
                                .expect("the loop runs");
                        }
                    }
                    if replies
                        .recv_timeout(std::time::Duration::from_secs(10))
                        .is_err()
                    {
                        let what = if wake_task.is_some() {
                            "task wake"
                        } else {
                            "post"
                        };
                        let why =
                            format!("producer {seed} ({what}), round {round}: not run in 10 s");
                        lost.lock().expect("lost").get_or_insert(why);
                    }
                }
                // Dropping the channel's sender ends the task.
            })
        })
        .collect();
    finish_race(el, ctx, producers, &lost, "wake").await;
}

/// Producers in a lost-wake race.
const PRODUCERS: u64 = 4;
/// Rounds of a lost-wake race: in each, every producer posts (or wakes) once and waits.
const ROUNDS: u64 = 2_000;

/// The start of a lost-wake race: a loop that nothing but a wake can end a park of (an
/// hour's `idle_wait`, no spin before parking; parking outside tokio when it can with
/// `outside_tokio`), its context, the producers' barrier, and the slot for the first
/// producer's complaint (the others then stop posting, but keep meeting at the barrier, so
/// none waits there forever).
fn race(
    outside_tokio: bool,
) -> (
    EventLoop,
    LoopContext,
    Arc<std::sync::Barrier>,
    Arc<Mutex<Option<String>>>,
) {
    let el = EventLoop::builder()
        .idle_wait(Duration::from_secs(3_600))
        .spin_before_park(Duration::ZERO)
        .park_outside_tokio(outside_tokio)
        .build();
    let ctx = el.context();
    let start = Arc::new(std::sync::Barrier::new(PRODUCERS as usize));
    (el, ctx, start, Arc::new(Mutex::new(None)))
}

/// The end of a lost-wake race: runs the loop until every producer is done, then fails with
/// the first producer's complaint, or if the loop hardly parked (the race was dodged, not
/// run: the loop should park, and be woken, in a good share of the rounds).
async fn finish_race(
    mut el: EventLoop,
    ctx: LoopContext,
    producers: Vec<thread::JoinHandle<()>>,
    lost: &Mutex<Option<String>>,
    what: &str,
) {
    let stopper = thread::spawn(move || {
        for producer in producers {
            producer.join().expect("producer");
        }
        ctx.shutdown();
    });
    within(Duration::from_secs(120), "the loop's run", el.run()).await;
    stopper.join().expect("stopper");
    let stats = el.stats();
    if let Some(why) = lost.lock().expect("lost").take() {
        panic!("a {what} was lost ({why}); {stats:?}");
    }
    // A loose bound: how often the loop catches the next round still awake depends on the
    // host's load (833 parks in 2,000 rounds were seen beside the rest of the suite); a tenth
    // is still hundreds of races run.
    assert!(
        stats.sleeps >= ROUNDS / 10 && stats.wakes_issued >= ROUNDS / 10,
        "the loop hardly parked: {stats:?}"
    );
    assert_eq!(stats.panics, 0, "{stats:?}");
}

/// A small xorshift generator: producers wait different, varying while between posts.
struct Jitter(u64);

impl Jitter {
    /// Spins 0–4095 rounds, or (one time in eight) yields the CPU.
    fn spin(&mut self) {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if self.0.is_multiple_of(8) {
            thread::yield_now();
            return;
        }
        for _ in 0..self.0 % 4096 {
            std::hint::spin_loop();
        }
    }
}

#[tokio::test]
async fn l1_repeated_posts_do_not_accumulate_wakes_and_the_loop_parks_again() {
    let mut el = EventLoop::builder()
        .idle_wait(Duration::from_secs(60))
        .build();
    let ctx = el.context();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let ctx2 = ctx.clone();
    let poster = thread::spawn(move || {
        for _ in 0..10_000 {
            let c = c.clone();
            ctx2.post(move || {
                c.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
    });
    poster.join().unwrap();
    let checker = thread::spawn(move || {
        thread::sleep(std::time::Duration::from_millis(300));
        ctx.shutdown();
    });
    within(Duration::from_secs(60), "the loop's run", el.run()).await;
    checker.join().unwrap();
    assert_eq!(count.load(Ordering::Relaxed), 10_000);
    let stats = el.stats();
    // One wake for the burst (posted before the loop ran: none needed at all), then one for
    // shutdown. An idle loop that stayed signalled would spin: thousands of iterations.
    assert!(stats.wakes_issued <= 3, "{stats:?}");
    assert!(stats.iterations < 50, "the loop spun: {stats:?}");
}

#[tokio::test(start_paused = true)]
async fn l2_the_loop_sleeps_only_until_due_ticks_not_every_tick() {
    let mut el = EventLoop::builder()
        .idle_wait(Duration::from_secs(10))
        .build();
    let fired = Rc::new(Cell::new(0));
    let f = fired.clone();
    timer::every(Duration::from_secs(1))
        .times(5)
        .start(move || f.set(f.get() + 1));
    el.run_until(timer::pause(5_500)).await;
    assert_eq!(fired.get(), 5);
    let stats = el.stats();
    // 6 due ticks (5 repeats + the pause): about one sleep and one iteration each, where a
    // loop waking every 8 ms tick would have needed ~690.
    assert!(stats.sleeps <= 8, "{stats:?}");
    assert!(stats.iterations <= 10, "{stats:?}");
    assert_eq!(stats.ticks_fired, 6);
}

/// `voluntary_ctxt_switches` of this thread, from the kernel's own report: the same count
/// `LoopStats::thread_wakeups` reads, through another door.
fn voluntary_switches_in_proc() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a voluntary_ctxt_switches line")
}

/// Issue 23: at idle the loop thread wakes once per loop wake, not two or three times (a
/// second timer still armed in tokio's wheel woke it for nothing). Counts over 10 s of real
/// time, a quiet loop with one 1 s timer: it counts, it does not time.
#[tokio::test]
async fn l2_an_idle_loop_thread_wakes_once_per_loop_wake_real_time() {
    let mut el = EventLoop::new();
    let fired = Rc::new(Cell::new(0u32));
    let f = fired.clone();
    timer::every(Duration::from_secs(1)).start(move || f.set(f.get() + 1));
    // Warm up: the first fire, so start-up (the timerfd's creation, first polls) is outside.
    within(
        Duration::from_secs(60),
        "warm-up",
        el.run_until(timer::pause(1_100)),
    )
    .await;
    let proc_before = voluntary_switches_in_proc();
    let before = el.stats();
    within(
        Duration::from_secs(60),
        "10 s idle",
        el.run_until(timer::pause(10_000)),
    )
    .await;
    let after = el.stats();
    let proc_after = voluntary_switches_in_proc();

    let loop_wakes = after.sleeps - before.sleeps;
    let thread_wakes = after.thread_wakeups - before.thread_wakeups;
    let proc_wakes = proc_after - proc_before;
    let report = format!(
        "loop wakes {loop_wakes}, thread wake-ups {thread_wakes} (procfs {proc_wakes}), \
         fires {}, {after:?}",
        fired.get()
    );
    // The timer fired every second and each fire was a park that ended: the counts are real.
    assert!((10..=12).contains(&fired.get()), "{report}");
    assert!((9..=13).contains(&loop_wakes), "{report}");
    // The counter agrees with the kernel's report (read just outside its window).
    assert!(
        thread_wakes <= proc_wakes && proc_wakes <= thread_wakes + 2,
        "{report}"
    );
    // Ten 1 s parks cannot end without blocking; and no more than 10 % on top of them.
    assert!(thread_wakes >= 9, "{report}");
    assert!(thread_wakes * 10 <= loop_wakes * 11, "{report}");
}

/// The `idle_wait` cap is a bound, not a heartbeat: what a loop task awaits outside the loop
/// (here a tokio timer, whose waker is the task's) wakes a loop parked for an hour at once. So
/// the cap can be long (the default is 5 s) without anything waiting for it.
#[tokio::test]
async fn l2_a_task_awaiting_a_tokio_timer_wakes_a_loop_parked_for_an_hour_real_time() {
    let mut el = EventLoop::builder()
        .idle_wait(Duration::from_secs(3_600))
        .build();
    let started = std::time::Instant::now();
    let answer = within(
        Duration::from_secs(30),
        "a task awaiting a 100 ms tokio sleep",
        el.run_until(async {
            spawn(async {
                tokio::time::sleep(ms(100)).await;
                7
            })
            .await
        }),
    )
    .await;
    assert_eq!(answer.expect("the task ran to its end"), 7);
    assert!(started.elapsed() >= std::time::Duration::from_millis(100));
    assert!(el.stats().sleeps >= 1, "the loop parked: {:?}", el.stats());
}

#[tokio::test(start_paused = true)]
async fn l2_idle_wait_caps_a_block() {
    let mut el = EventLoop::builder().idle_wait(ms(100)).build();
    el.run_until(timer::pause(1000)).await;
    let stats = el.stats();
    assert!((10..=12).contains(&stats.sleeps), "{stats:?}");
}

#[tokio::test]
async fn l2_idle_wait_zero_never_blocks() {
    let mut el = EventLoop::builder().idle_wait(Duration::ZERO).build();
    let start = Instant::now();
    el.run_until(timer::pause(50)).await;
    assert!(start.elapsed() >= ms(48));
    let stats = el.stats();
    assert_eq!(stats.sleeps, 0, "{stats:?}");
    assert!(stats.iterations > 10, "{stats:?}");
    assert_eq!(stats.verdict, shardloop::Verdict::SpinningConfigured);
}

#[tokio::test(start_paused = true)]
async fn l3_run_until_returns_at_the_end_of_that_iteration_and_the_rest_stays() {
    let mut el = EventLoop::new();
    let epoch = Instant::now();
    let log = Rc::new(RefCell::new(Vec::new()));
    // The task and the callback due in the same tick as the run_until future still run in
    // that iteration (before it returns); the later ones wait for the next run_until.
    let l = log.clone();
    drop(spawn(async move {
        timer::pause(16).await;
        l.borrow_mut().push("task 16");
        timer::pause(16).await;
        l.borrow_mut().push("task 32");
    }));
    let l = log.clone();
    timer::every(ms(16)).start(move || l.borrow_mut().push("every 16"));
    let l = log.clone();
    el.run_until(async move {
        timer::pause(16).await;
        l.borrow_mut().push("root");
    })
    .await;
    assert_eq!(Instant::now() - epoch, ms(16));
    assert_eq!(*log.borrow(), vec!["every 16", "task 16", "root"]);
    log.borrow_mut().clear();
    el.run_until(timer::pause(16)).await;
    assert_eq!(*log.borrow(), vec!["every 16", "task 32"]);
}

#[tokio::test(start_paused = true)]
async fn run_until_accepts_a_non_send_future_and_returns_its_output() {
    let mut el = EventLoop::new();
    let rc = Rc::new(5);
    let out = el
        .run_until(async move {
            timer::pause(8).await;
            *rc + 1
        })
        .await;
    assert_eq!(out, 6);
}

#[tokio::test(start_paused = true)]
async fn spawn_and_spawn_with_from_other_threads() {
    let mut el = EventLoop::new();
    let ctx = el.context();
    let done = Arc::new(AtomicUsize::new(0));
    let (d1, d2) = (done.clone(), done.clone());
    let c = ctx.clone();
    thread::spawn(move || {
        c.spawn(async move {
            timer::pause(8).await;
            d1.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        c.spawn_with(move || {
            let local = Rc::new(d2); // !Send state lives on the loop thread
            async move {
                timer::pause(16).await;
                local.fetch_add(10, Ordering::Relaxed);
            }
        })
        .unwrap();
    })
    .join()
    .unwrap();
    el.run_until(timer::pause(40)).await;
    assert_eq!(done.load(Ordering::Relaxed), 11);
}

#[tokio::test(start_paused = true)]
async fn a_task_woken_from_another_thread_runs_on_the_loop() {
    let mut el = EventLoop::new();
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let handle = spawn(async move { rx.await.unwrap() * 2 });
    thread::spawn(move || tx.send(21).unwrap()).join().unwrap();
    assert_eq!(el.run_until(handle).await, Ok(42));
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_run_delivers_accepted_posts_and_refuses_later_ones() {
    let mut el = EventLoop::new();
    let ctx = el.context();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let c = ctx.clone();
    timer::after(ms(100)).start(move || {
        let r = r.clone();
        c.post(move || {
            r.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        c.shutdown();
    });
    within(Duration::from_secs(60), "the loop's run", el.run()).await;
    assert_eq!(
        ran.load(Ordering::Relaxed),
        1,
        "accepted before shutdown: delivered"
    );
    assert!(ctx.is_shut_down());
    assert_eq!(ctx.post(|| {}), Err(LoopClosed));
    assert_eq!(ctx.spawn(async {}), Err(LoopClosed));
    // Waking after shutdown is harmless, and so is waking a dropped loop.
    ctx.shutdown();
    drop(el);
    ctx.shutdown();
    assert_eq!(ctx.post(|| {}), Err(LoopClosed));
}

#[tokio::test(start_paused = true)]
async fn context_current_on_and_off_the_loop_thread() {
    assert!(LoopContext::try_current().is_none());
    let el = EventLoop::new();
    let ctx = LoopContext::current();
    assert!(!ctx.is_shut_down());
    let off = thread::spawn(LoopContext::try_current).join().unwrap();
    assert!(off.is_none());
    let panic = thread::spawn(|| {
        let _ = LoopContext::current();
    })
    .join()
    .expect_err("current() off the loop thread panics");
    let msg = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(msg.contains("EventLoop::context"), "{msg}");
    drop(el);
    assert!(LoopContext::try_current().is_none());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_loop_cancels_its_tasks() {
    let el = EventLoop::new();
    let handle = spawn(async { timer::pause(1000).await });
    drop(el);
    let err = handle.await.expect_err("cancelled");
    assert!(err.is_cancelled());
    assert!(!err.to_string().is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_loop_whose_timers_own_pauses_and_handles_is_clean() {
    let el = EventLoop::new();
    let pause = timer::pause(100);
    let handle = spawn(async { timer::pause(5).await });
    timer::after(ms(50)).start(move || {
        let _ = (&pause, &handle);
    });
    drop(el);
    assert!(LoopContext::try_current().is_none());
}

/// Spins on the real clock for `d` (the work of a slow callback).
fn busy(d: std::time::Duration) {
    let began = std::time::Instant::now();
    while began.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The loop profile, in real time: a slow timer callback (20 ms every 50 ms), a slow task
/// poll and a slow posted closure, with sleeps between them. Every closed second must add up
/// to its wall time within 2 %, the timer callback must show as time in the Timers part, and
/// each kind of work must be named with its site. Bounds are seconds, not speed.
#[tokio::test]
#[cfg_attr(
    not(feature = "loop-profiling"),
    ignore = "the loop profile is compiled out of this build (--no-default-features)"
)]
async fn the_profile_adds_up_and_names_the_slow_callback_with_its_line() {
    let mut el = EventLoop::new();
    let ctx = el.context();
    let timer_line = line!() + 1;
    let slow = timer::every(ms(50)).start(|| busy(std::time::Duration::from_millis(20)));
    let post_line = line!() + 1;
    ctx.post(|| busy(std::time::Duration::from_millis(15)))
        .unwrap();
    let spawn_line = line!() + 1;
    drop(spawn(async {
        timer::pause(100).await;
        busy(std::time::Duration::from_millis(10));
    }));
    let began = std::time::Instant::now();
    el.run_until(async {
        while shardloop::runtime::with_history(|h| h.len()) < 2 {
            assert!(
                began.elapsed() < std::time::Duration::from_secs(30),
                "no two seconds recorded in 30 s"
            );
            timer::pause(50).await;
        }
    })
    .await;
    slow.cancel();
    let seconds: Vec<_> = el
        .run_until(async { shardloop::runtime::with_history(|h| h.iter().copied().collect()) })
        .await;
    for s in &seconds {
        let sum: Duration = Phase::ALL.iter().map(|&p| s.spent(p)).sum();
        let wall = s.wall.as_secs_f64();
        assert!((1.0..10.0).contains(&wall), "{s:?}");
        assert!(
            (sum.as_secs_f64() - wall).abs() <= 0.02 * wall,
            "parts add up to {sum:?} of a {:?} second: {s:?}",
            s.wall
        );
        assert!(s.counts.iterations > 0 && s.counts.ticks_fired > 0, "{s:?}");
    }
    let file = file!();
    let first = &seconds[0];
    let worst = first.worst.timer.expect("a timer callback ran");
    assert!(worst.site.file.ends_with(file), "{worst:?}");
    assert_eq!(worst.site.line, timer_line, "{worst:?}");
    assert!(worst.took >= ms(5), "a 20 ms callback measured {worst:?}");
    assert!(
        first.spent(Phase::Timers) + first.spent(Phase::Stolen) >= ms(100),
        "{first:?}"
    );
    let summary = shardloop::runtime::history::Summary::of(&seconds);
    let posted = summary.worst_posted.expect("a posted closure ran").value;
    assert_eq!((posted.site.file, posted.site.line), (file, post_line));
    let task = summary.worst_task.expect("a task ran").value;
    assert_eq!((task.site.file, task.site.line), (file, spawn_line));
    let text = summary.to_string();
    assert!(
        text.contains(&format!("{file}:{timer_line}:")),
        "the summary names the callback's line:\n{text}"
    );
}

/// A post ends a park early and leaves the park's timer armed; the park after it, for the
/// same deadline, must still end at that deadline (not at `idle_wait`, a minute here).
#[tokio::test]
async fn l2_a_post_keeps_the_parked_deadline_real_time() {
    let mut el = EventLoop::builder()
        .idle_wait(Duration::from_secs(60))
        .spin_before_park(Duration::ZERO)
        .build();
    let ctx = el.context();
    let posted = Arc::new(AtomicUsize::new(0));
    let p = posted.clone();
    let poster = thread::spawn(move || {
        for _ in 0..3 {
            thread::sleep(std::time::Duration::from_millis(30));
            let p = p.clone();
            ctx.post(move || {
                p.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
    });
    let start = std::time::Instant::now();
    within(
        Duration::from_secs(30),
        "a 300 ms pause after three posts",
        el.run_until(timer::pause(300)),
    )
    .await;
    poster.join().unwrap();
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "the pause ended at idle_wait, not at its deadline: {:?}",
        start.elapsed()
    );
    assert_eq!(posted.load(Ordering::Relaxed), 3);
    let stats = el.stats();
    // The posts ended parks early (the pause's park was entered again after each).
    assert!(stats.wakes_issued >= 3 && stats.sleeps >= 4, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn the_longest_iteration_is_the_most_work_one_iteration_did_parks_excluded() {
    let mut lp = EventLoop::builder().idle_wait(ms(1_000)).build();
    // Under the paused clock an iteration takes no time, and the 50 ms are parked.
    lp.run_until(timer::pause(50)).await;
    assert_eq!(
        lp.stats().longest_iteration,
        Duration::ZERO,
        "a park is no work"
    );
    // The clock moves 20 ms while the root future runs: inside one iteration's Tasks phase.
    lp.run_until(async {
        tokio::time::advance(ms(20)).await;
    })
    .await;
    assert_eq!(lp.stats().longest_iteration, ms(20));
    // The status line's window takes the peak and starts again; the total keeps it.
    let (window, next) = lp
        .run_until(async {
            let window = shardloop::runtime::take_longest_iteration();
            (window, shardloop::runtime::take_longest_iteration())
        })
        .await;
    assert_eq!((window, next), (ms(20), Duration::ZERO));
    lp.run_until(async {
        tokio::time::advance(ms(5)).await;
    })
    .await;
    assert_eq!(
        lp.stats().longest_iteration,
        ms(20),
        "a peak, not the latest"
    );
    let window = lp
        .run_until(async { shardloop::runtime::take_longest_iteration() })
        .await;
    assert_eq!(window, ms(5));
}
