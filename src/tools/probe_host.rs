//! `shardloop probe-host`: how good is this host at the few things the loop needs?
//!
//! The loop reads the clock on every iteration, sleeps when idle and is woken by other
//! threads. On a good host each costs nanoseconds to microseconds; on a poor VM (a clock read
//! that traps to the hypervisor, a sleep that comes back a scheduler quantum late) the same
//! design burns CPU or wakes late. Each probe prints its median, p99 and a verdict against
//! reference values stated on the same line, so an operator can compare hosts at a glance.
//!
//! This module runs only on request (a CLI subcommand): never inside a running shard. The
//! shard's own startup check is the runtime's 25-sleep probe (`server.probe_host`).

use std::fmt;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use shardloop::host::ParkTimer;

/// How a measurement compares with its references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grade {
    Normal,
    Slow,
    Trapping,
}

impl fmt::Display for Grade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Grade::Normal => "normal",
            Grade::Slow => "SLOW",
            Grade::Trapping => "TRAPPING",
        })
    }
}

/// One probe's result.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: &'static str,
    pub median: Duration,
    pub p99: Duration,
    /// Below this the median is normal…
    pub normal_below: Duration,
    /// …below this slow, and from it on trapping (the host gets in the way).
    pub slow_below: Duration,
}

impl Probe {
    /// A probe's result from its raw samples (reordered in place).
    fn measured(
        name: &'static str,
        samples: &mut [Duration],
        normal_below: Duration,
        slow_below: Duration,
    ) -> Probe {
        let (median, p99) = summarize(samples);
        Probe {
            name,
            median,
            p99,
            normal_below,
            slow_below,
        }
    }

    #[must_use]
    pub fn grade(&self) -> Grade {
        if self.median < self.normal_below {
            Grade::Normal
        } else if self.median < self.slow_below {
            Grade::Slow
        } else {
            Grade::Trapping
        }
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<28} median {:>10.3?}  p99 {:>10.3?}  {:<8}  (normal < {:?}, SLOW < {:?}, else TRAPPING)",
            self.name,
            self.median,
            self.p99,
            self.grade().to_string(),
            self.normal_below,
            self.slow_below,
        )
    }
}

/// Median and p99 of `samples` (sorted in place).
fn summarize(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Cost of one clock read, timed in batches so the timer's own cost is amortised.
fn clock_read(name: &'static str, read: impl Fn()) -> Probe {
    const BATCH: u32 = 10_000;
    let mut samples: Vec<Duration> = (0..50)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                read();
            }
            start.elapsed() / BATCH
        })
        .collect();
    Probe::measured(
        name,
        &mut samples,
        Duration::from_nanos(100),
        Duration::from_micros(1),
    )
}

/// Overshoot of a `want` sleep done by `sleep`, over `runs` sleeps. `resolution` is the
/// sleep's own granularity (tokio rounds every sleep up to its next 1 ms tick), added to the
/// references so a primitive is judged against what it can do, not against the others.
fn sleep_overshoot(
    name: &'static str,
    want: Duration,
    resolution: Duration,
    runs: usize,
    sleep: impl Fn(Duration),
) -> Probe {
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            sleep(want);
            start.elapsed().saturating_sub(want)
        })
        .collect();
    // SLOW up to one default tick; past it a sleep makes timers late.
    Probe::measured(
        name,
        &mut samples,
        Duration::from_micros(200) + resolution,
        Duration::from_millis(8) + resolution,
    )
}

/// Latency from one thread sending to another, blocked, thread running.
fn cross_thread_wake(runs: usize) -> Probe {
    let (tx, rx) = mpsc::channel::<Instant>();
    let (back_tx, back_rx) = mpsc::channel::<Duration>();
    let waiter = thread::spawn(move || {
        for sent in rx {
            if back_tx.send(sent.elapsed()).is_err() {
                return;
            }
        }
    });
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        thread::sleep(Duration::from_millis(2)); // let the waiter block
        if tx.send(Instant::now()).is_err() {
            break;
        }
        match back_rx.recv() {
            Ok(latency) => samples.push(latency),
            Err(_) => break,
        }
    }
    drop(tx);
    let _ = waiter.join();
    if samples.is_empty() {
        samples.push(Duration::MAX);
    }
    Probe::measured(
        "cross-thread wake",
        &mut samples,
        Duration::from_micros(50),
        Duration::from_micros(500),
    )
}

/// tokio's timer counts whole milliseconds and rounds a deadline up to the next one.
const TOKIO_RESOLUTION: Duration = Duration::from_millis(1);

fn tokio_sleep(want: Duration) {
    thread_local! {
        static RT: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok();
    }
    RT.with(|rt| match rt {
        // The sleep is created inside block_on: creating it needs the runtime entered.
        Some(rt) => rt.block_on(async { tokio::time::sleep(want).await }),
        None => thread::sleep(want),
    });
}

fn timerfd_sleep(fd: &ParkTimer, want: Duration) {
    if fd.sleep(want).is_err() {
        thread::sleep(want);
    }
}

/// Runs every probe (a few seconds in all) and returns the results in print order.
#[must_use]
pub fn run() -> Vec<Probe> {
    let mut probes = vec![
        clock_read("monotonic clock read", || {
            std::hint::black_box(Instant::now());
        }),
        clock_read("wall clock read", || {
            std::hint::black_box(SystemTime::now());
        }),
    ];
    let timerfd = ParkTimer::new().ok();
    for (ms, std_name, tokio_name, fd_name) in [
        (
            1,
            "1 ms sleep, std",
            "1 ms sleep, tokio",
            "1 ms sleep, timerfd",
        ),
        (
            2,
            "2 ms sleep, std",
            "2 ms sleep, tokio",
            "2 ms sleep, timerfd",
        ),
    ] {
        let want = Duration::from_millis(ms);
        let exact = Duration::ZERO;
        probes.push(sleep_overshoot(std_name, want, exact, 50, thread::sleep));
        probes.push(sleep_overshoot(
            tokio_name,
            want,
            TOKIO_RESOLUTION,
            50,
            tokio_sleep,
        ));
        if let Some(fd) = &timerfd {
            probes.push(sleep_overshoot(fd_name, want, exact, 50, |d| {
                timerfd_sleep(fd, d)
            }));
        }
    }
    probes.push(cross_thread_wake(200));
    probes
}

/// The report printed by `shardloop probe-host`.
#[must_use]
pub fn report(probes: &[Probe]) -> String {
    let mut out = String::from(
        "host probe: what the loop needs from this machine (sleep figures are overshoot past \
         the requested time)\n",
    );
    for p in probes {
        out.push_str(&format!("{p}\n"));
    }
    let worst = probes.iter().map(Probe::grade).max_by_key(|g| *g as u8);
    out.push_str(&match worst {
        Some(Grade::Trapping) => {
            "verdict: TRAPPING — this host gets in the loop's way; prefer a dedicated CPU, or \
             set server.idle_wait = 0ms to spin"
                .to_owned()
        }
        Some(Grade::Slow) => {
            "verdict: SLOW — usable; watch the loop: lines for late ticks and backoffs".to_owned()
        }
        _ => "verdict: normal — sleeping when idle is safe here".to_owned(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades_follow_the_references() {
        let probe = |median| Probe {
            name: "x",
            median,
            p99: median,
            normal_below: Duration::from_micros(10),
            slow_below: Duration::from_micros(100),
        };
        assert_eq!(probe(Duration::from_micros(5)).grade(), Grade::Normal);
        assert_eq!(probe(Duration::from_micros(10)).grade(), Grade::Slow);
        assert_eq!(probe(Duration::from_millis(1)).grade(), Grade::Trapping);
        let line = probe(Duration::from_micros(5)).to_string();
        assert!(line.contains("normal") && line.contains("SLOW <"), "{line}");
    }

    #[test]
    fn summarize_takes_median_and_p99() {
        let mut samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        samples.reverse();
        assert_eq!(
            summarize(&mut samples),
            (Duration::from_micros(51), Duration::from_micros(99))
        );
    }

    #[test]
    fn a_timerfd_sleep_is_not_early() {
        let fd = ParkTimer::new().expect("timerfd on Linux");
        let start = Instant::now();
        timerfd_sleep(&fd, Duration::from_millis(3));
        assert!(start.elapsed() >= Duration::from_millis(3));
    }
}
