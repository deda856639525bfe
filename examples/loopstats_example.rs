//! Draws the example loopstats chart in the docs (`docs/images/loopstats-example.svg`) from a
//! synthetic but realistic 15-minute history: two idle minutes before players arrive, a
//! steady shard of 40 players, a noisy neighbour stealing CPU, a minute where one timer
//! callback takes 150–300 ms every second, and a save whose snapshot stalls the loop.
//!
//! `cargo run --example loopstats_example -- OUT.svg [OUT.csv]`
//!
//! The history is made up (seeded, so the picture is the same every run); the figures are of
//! the size the loop shows on the development machine, so the chart looks like a real one.

use std::time::Duration;

use shardloop::runtime::Phase;
use shardloop::runtime::history::chart;
use shardloop::runtime::history::{History, LoopSecond, Offender, Site};

/// A small deterministic generator (xorshift): jitter, not statistics.
struct Jitter(u64);

impl Jitter {
    /// A value in `[lo, hi)`.
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * (self.0 % 10_000) as f64 / 10_000.0
    }

    fn ms(&mut self, lo: f64, hi: f64) -> Duration {
        Duration::from_secs_f64(self.between(lo, hi) / 1e3).max(Duration::from_micros(1))
    }
}

const START: u64 = 1_767_282_840; // 2026-01-01 15:54:00 UTC
/// The second the save stalls the loop (it covers the next one too).
const STALL: u64 = 720;
const SLOW_CALLBACK: Site = Site {
    file: "src/game/decay.rs",
    line: 88,
    column: 13,
};

/// One second at uptime `t`, as the loop would have recorded it.
fn second(t: u64, j: &mut Jitter) -> LoopSecond {
    let mut s = LoopSecond {
        unix_second: START + t,
        uptime_second: 3_600 + t,
        wall: Duration::from_secs(1),
        ..LoopSecond::default()
    };
    let players = match t {
        0..120 => 0,
        120..180 => (t - 120) * 40 / 60,
        _ => 40,
    };
    s.counts.players = players;
    let load = players as f64 / 40.0;
    s.add(Phase::Timers, j.ms(0.3, 0.6) + j.ms(0.0, 4.0).mul_f64(load));
    s.add(Phase::Network, j.ms(7.0, 12.0).mul_f64(load));
    s.add(Phase::Tasks, j.ms(0.5, 1.5).mul_f64(load));
    s.add(Phase::Posted, j.ms(0.05, 0.3));
    s.add(Phase::Deltas, j.ms(3.0, 5.0).mul_f64(load));
    s.add(Phase::Flush, j.ms(1.5, 2.5).mul_f64(load));
    s.add(Phase::Stolen, j.ms(0.2, 1.5));
    s.counts.max_wheel_lag = j.ms(0.05, 0.4);
    s.counts.iterations = 125 + (500.0 * load) as u64;
    s.counts.sleeps = s.counts.iterations - 5;
    s.counts.ticks_fired = 125;
    s.counts.packets_in = players * 12;
    s.counts.packets_out = players * 30;
    s.counts.posts = 3;
    s.counts.wakes_issued = 2;
    s.counts.wakes_elided = 1;
    s.counts.max_sleep_overshoot = j.ms(0.05, 0.2);
    episodes(t, &mut s, j);
    let busy: Duration = Phase::ALL.iter().map(|&p| s.spent(p)).sum();
    s.add(Phase::Sleep, s.wall.saturating_sub(busy));
    s
}

/// The three episodes the chart is there to show.
fn episodes(t: u64, s: &mut LoopSecond, j: &mut Jitter) {
    if (300..360).contains(&t) {
        // A noisy neighbour: the host runs something else on our core.
        let stolen = j.ms(80.0, 220.0);
        s.add(Phase::Stolen, stolen);
        s.counts.late_wakes = 4;
        s.counts.max_wheel_lag = stolen / 3;
    }
    if (480..540).contains(&t) {
        // One decay callback walks far too many items every second.
        let took = j.ms(150.0, 300.0);
        s.add(Phase::Timers, took);
        s.counts.max_wheel_lag = took + j.ms(0.0, 2.0);
        Offender::offer(&mut s.worst.timer, took, SLOW_CALLBACK);
    }
    if t == STALL {
        // The autosave's snapshot of a large world, in one go on the loop: 1.6 s, so this
        // record closes 1.7 s after it opened and the next one starts two seconds on.
        s.wall = Duration::from_millis(1_700);
        s.add(Phase::Save, Duration::from_millis(1_600));
        s.counts.max_wheel_lag = Duration::from_millis(1_640);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let svg_path = args
        .next()
        .ok_or("usage: loopstats_example OUT.svg [OUT.csv]")?;
    let mut jitter = Jitter(0x5eed_1234_abcd_0001);
    let mut history = History::new();
    for t in (0..=History::CAPACITY as u64).filter(|&t| t != STALL + 1) {
        history.push(second(t, &mut jitter));
    }
    let seconds: Vec<LoopSecond> = history.iter().copied().collect();
    let svg = chart::svg(
        &seconds,
        "shardloop loop thread, one second per column (example)",
    )?;
    std::fs::write(&svg_path, svg)?;
    if let Some(csv_path) = args.next() {
        history.write_csv(std::fs::File::create(&csv_path)?)?;
    }
    println!("{}", history.summary(60 * 15));
    Ok(())
}
