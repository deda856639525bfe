//! Tolerant timers (`TimerBuilder::tolerance`, docs/timers.md "Tolerance"): never early, never
//! later than the tolerance, run together with the timers the loop runs anyway, in due-tick
//! order with strict timers, and at the same ticks whatever `idle_wait` says (T1, T2, T3, T5,
//! T11). On tokio's paused clock, except the `idle_wait = 0` comparison.

#[path = "common/paused.rs"]
mod paused;
use paused::on_paused_clock;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use shardloop::timer;
use shardloop::{EventLoop, LoopContext};
use tokio::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// (label, ms since the epoch by `timer::now()`, ms since the epoch by the clock itself).
#[derive(Clone, Default)]
struct Log(Rc<RefCell<Vec<(String, u128, u128)>>>);

impl Log {
    fn push(&self, label: impl Into<String>) {
        let epoch = timer::epoch();
        let logical = (timer::now() - epoch).as_millis();
        let real = (Instant::now() - epoch).as_millis();
        self.0.borrow_mut().push((label.into(), logical, real));
    }

    /// (label, logical ms) in the order logged.
    fn logical(&self) -> Vec<(String, u128)> {
        self.0
            .borrow()
            .iter()
            .map(|(l, at, _)| (l.clone(), *at))
            .collect()
    }

    fn labels(&self) -> Vec<String> {
        self.0.borrow().iter().map(|(l, _, _)| l.clone()).collect()
    }
}

fn start(log: &Log, label: &'static str, delay: u64, tolerance: u64) -> timer::TimerToken {
    let log = log.clone();
    timer::after(ms(delay))
        .tolerance(ms(tolerance))
        .start(move || log.push(label))
}

#[tokio::test(start_paused = true)]
async fn alone_it_runs_at_the_end_of_its_window_never_before_its_due_tick() {
    let mut el = EventLoop::new();
    let log = Log::default();
    // Due at the 104 ms boundary (T1), 100 ms of tolerance = 12 whole ticks: 200 ms.
    start(&log, "a", 100, 100);
    // A tolerance under one tick is a strict timer.
    start(&log, "strict", 300, 7);
    let ticks_before = el.stats().ticks_fired;
    el.run_until(timer::pause(1000)).await;
    assert_eq!(
        log.0.borrow().clone(),
        vec![("a".into(), 200, 200), ("strict".into(), 304, 304)],
        "now() is the tick that runs it, and the clock agrees"
    );
    // The two timers, and the pause that ends the run.
    assert_eq!(el.stats().ticks_fired - ticks_before, 3);
    assert_eq!(el.stats().panics, 0);
}

#[tokio::test(start_paused = true)]
async fn a_strict_timer_takes_the_tolerant_ones_due_by_its_tick_in_due_then_start_order() {
    let mut el = EventLoop::new();
    let log = Log::default();
    start(&log, "tolerant due 48", 41, 500);
    start(&log, "strict due 56", 50, 0);
    start(&log, "tolerant due 56", 56, 500);
    start(&log, "tolerant due 16", 10, 500);
    start(&log, "tolerant due 64", 60, 500); // not due by 56
    let ticks_before = el.stats().ticks_fired;
    el.run_until(timer::pause(2000)).await;
    assert_eq!(
        log.logical(),
        [
            ("tolerant due 16", 56),
            ("tolerant due 48", 56),
            ("strict due 56", 56),
            ("tolerant due 56", 56),
            // Nothing else runs before its window ends: 64 + 496.
            ("tolerant due 64", 560),
        ]
        .map(|(l, t)| (l.to_owned(), t))
    );
    assert_eq!(
        el.stats().ticks_fired - ticks_before,
        3,
        "56, 560, and the end"
    );
}

#[tokio::test(start_paused = true)]
async fn tolerant_timers_share_one_wake_up() {
    let mut el = EventLoop::new();
    let log = Log::default();
    for (label, delay) in [("a", 100), ("b", 130), ("c", 170), ("d", 190), ("e", 290)] {
        start(&log, label, delay, 100);
    }
    let (ticks, sleeps) = (el.stats().ticks_fired, el.stats().sleeps);
    el.run_until(timer::pause(1000)).await;
    assert_eq!(
        log.logical(),
        [("a", 200), ("b", 200), ("c", 200), ("d", 200), ("e", 392)]
            .map(|(l, t)| (l.to_owned(), t)),
        "a's window ends at 200 and takes b, c, d along; e is due after it"
    );
    let stats = el.stats();
    assert_eq!(stats.ticks_fired - ticks, 3, "200, 392 and the end, not 6");
    assert_eq!(
        stats.sleeps - sleeps,
        3,
        "the loop parked once per fired tick"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_that_fires_no_timer_does_not_run_a_tolerant_one_early() {
    let mut el = EventLoop::new();
    let log = Log::default();
    start(&log, "tolerant", 100, 400);
    let context = LoopContext::current();
    let posted = Arc::new(Mutex::new(Vec::new()));
    let p = posted.clone();
    let l = log.clone();
    el.run_until(async move {
        // A task woken by tokio (not by a timer) at 150 ms, and a post at 250 ms: the loop is
        // awake, but neither is a timer tick, so the tolerant timer waits for its window's end.
        tokio::time::sleep(ms(150)).await;
        l.push("task");
        tokio::time::sleep(ms(100)).await;
        context
            .post(move || {
                let at = (timer::now() - timer::epoch()).as_millis();
                p.lock().unwrap().push(at);
            })
            .unwrap();
        timer::pause(1000).await;
    })
    .await;
    assert_eq!(*posted.lock().unwrap(), [250], "the post ran at 250 ms");
    assert_eq!(log.labels(), ["task", "tolerant"]);
    assert_eq!(log.logical()[1], ("tolerant".to_owned(), 104 + 400));
}

#[tokio::test(start_paused = true)]
async fn repeats_stay_on_their_grid_and_next_is_the_due_boundary() {
    let mut el = EventLoop::new();
    let log = Log::default();
    let l = log.clone();
    let token = timer::every(ms(100))
        .tolerance(ms(50))
        .times(3)
        .start(move || l.push(format!("run {}", timer::current().unwrap().index())));
    assert_eq!(
        token.next(),
        Some(timer::epoch() + ms(104)),
        "the due boundary"
    );
    let t = token;
    let next_seen = Rc::new(RefCell::new(Vec::new()));
    let n = next_seen.clone();
    // A strict timer at 240 ms takes run 1 (due 200) along; runs 0 and 2 end their windows.
    let l = log.clone();
    timer::after(ms(240)).start(move || {
        l.push("strict");
        n.borrow_mut()
            .push(t.next().map(|at| (at - timer::epoch()).as_millis()));
    });
    el.run_until(timer::pause(1000)).await;
    assert_eq!(
        log.logical(),
        [
            ("run 0", 152),
            ("run 1", 240),
            ("strict", 240),
            ("run 2", 304 + 48)
        ]
        .map(|(l, t)| (l.to_owned(), t)),
        "due 104, 200, 304; 48 ms (6 ticks) of tolerance; no drift from the late runs"
    );
    assert_eq!(*next_seen.borrow(), [Some(304)]);
    assert!(!token.running());
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_tolerant_timer_stops_it_and_leaves_no_wake_up() {
    let mut el = EventLoop::new();
    let log = Log::default();
    let token = start(&log, "cancelled", 50, 200);
    start(&log, "kept", 60, 200);
    assert!(token.cancel());
    let ticks = el.stats().ticks_fired;
    el.run_until(timer::pause(1000)).await;
    assert_eq!(log.logical(), [("kept".to_owned(), 64 + 200)]);
    assert_eq!(el.stats().ticks_fired - ticks, 2, "kept, and the end");
    assert_eq!(timer::live(), 0, "nothing stays on the wheel");
}

/// A mix of strict and tolerant timers, repeats, cancels and timers started from callbacks;
/// returns (label, tick) of every run.
async fn tolerant_scenario(idle_wait: Duration) -> Vec<(String, u128)> {
    let mut el = EventLoop::builder().idle_wait(idle_wait).build();
    let log = Log::default();
    let mut seed = 0x7013_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut tokens = Vec::new();
    for i in 0..30 {
        let l = log.clone();
        let (delay, every, tolerance) = (next(200), next(40) + 1, next(3) * next(60));
        tokens.push(
            timer::after(ms(delay))
                .every(ms(every))
                .times(3)
                .tolerance(ms(tolerance))
                .start(move || {
                    l.push(format!("timer {i}"));
                    let l2 = l.clone();
                    timer::after(ms(9))
                        .tolerance(ms(tolerance / 2))
                        .start(move || l2.push(format!("nested {i}")));
                }),
        );
    }
    for t in tokens.iter().step_by(4) {
        t.cancel();
    }
    el.run_until(timer::pause(600)).await;
    assert_eq!(el.stats().panics, 0);
    log.logical()
        .into_iter()
        .map(|(label, at)| (label, at / 8))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_same_ticks_at_every_idle_wait() {
    let reference = tolerant_scenario(ms(2)).await;
    assert!(reference.len() > 100, "{} runs", reference.len());
    assert_eq!(reference, tolerant_scenario(Duration::from_secs(1)).await);
    assert_eq!(
        reference,
        tolerant_scenario(Duration::from_secs(3600)).await
    );
}

/// `idle_wait = 0` never parks, so a paused clock would never move: it runs on the real clock
/// and must give the paused clock's ticks. Lateness cannot change them: a pass that catches up
/// runs each tick's timers with that tick's `now()`. Generous bound: 5 s for a 0.6 s run.
#[tokio::test]
async fn the_same_ticks_when_spinning_on_the_real_clock() {
    let paused = on_paused_clock(|| tolerant_scenario(ms(2)));
    let spinning = tokio::time::timeout(Duration::from_secs(5), tolerant_scenario(Duration::ZERO))
        .await
        .expect("a 0.6 s run ended within 5 s");
    assert_eq!(spinning, paused);
}
