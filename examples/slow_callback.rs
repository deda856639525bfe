//! A slow-callback episode, made on purpose, and what the loop profile says about it.
//!
//! ```sh
//! cargo run --release --example slow_callback
//! ```
//!
//! An event loop with the default 8 ms tick runs for ~15 s with two repeating timers: an
//! ordinary one (every 100 ms, next to no work: a game's decay or spawner sweep on a quiet
//! shard) and a slow one, which every 3 s busy-waits ~150 ms on the loop thread, as a
//! callback that does blocking I/O or scans too much would. Then the example prints the
//! summary of the last minute that the console's `loopstats` prints on a shard
//! (`runtime::with_history(|h| h.summary(60))`) and checks that it names the slow
//! callback's site: this file and the line of its `timer::every(...)` call.
//!
//! What to look for in the output (docs/debugging.md walks through it): the Timers part's
//! worst second at 10–15 % (stolen time takes the rest on a busy host), the Sleep part's
//! lowest second down by as much, a max wheel lag of tens of ms (the ordinary timer's next
//! boundary waits for the stall to end), and `worst timer callback` at ~150 ms with
//! `examples/slow_callback.rs:LINE`. Built without `loop-profiling` (a default feature) there is no
//! profile: the example says so and exits with status 2.

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;

use shardloop::{EventLoop, runtime, timer};
use tokio::time::Duration;

/// How long the loop runs before the summary is taken.
const RUN: Duration = Duration::from_secs(15);
/// The slow callback's period and how long it holds the loop each time.
const SLOW_EVERY: Duration = Duration::from_secs(3);
const SLOW_FOR: std::time::Duration = std::time::Duration::from_millis(150);
/// The ordinary timer's period.
const IDLE_EVERY: Duration = Duration::from_millis(100);

/// Spins on the real clock for `d`: the stand-in for work that should not be on the loop.
fn busy_wait(d: std::time::Duration) {
    let began = std::time::Instant::now();
    while began.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Runs the two timers for `RUN` and returns the summary's text and the slow timer's line.
async fn episode(el: &mut EventLoop) -> (String, u32, u64) {
    let sweeps = Rc::new(Cell::new(0_u64));
    let counted = sweeps.clone();
    el.run_until(async move {
        let sweep = timer::every(IDLE_EVERY).start(move || counted.set(counted.get() + 1));
        let slow_line = line!() + 1; // the slow timer's site: `start` records its caller's line
        let slow = timer::every(SLOW_EVERY).start(|| busy_wait(SLOW_FOR));
        timer::pause_for(RUN).await;
        slow.cancel();
        sweep.cancel();
        let text = runtime::with_history(|h| h.summary(60)).to_string();
        (text, slow_line, sweeps.get())
    })
    .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    if !runtime::profiling() {
        eprintln!(
            "slow_callback: this build has no loop profile (it was built without the \
             default feature loop-profiling); run it with \
             cargo run --release --example slow_callback"
        );
        return ExitCode::from(2);
    }
    println!(
        "slow_callback: {RUN:?} of an 8 ms-tick loop; a timer every {IDLE_EVERY:?} that does \
         nothing much, and one every {SLOW_EVERY:?} that busy-waits {SLOW_FOR:?}"
    );
    let mut el = EventLoop::builder().tick(Duration::from_millis(8)).build();
    let (summary, slow_line, sweeps) = episode(&mut el).await;
    let stats = el.stats();
    println!();
    println!("{summary}");
    println!();
    println!(
        "loop totals: ticks fired {}, late ticks {} (>=2 ticks {}), max wheel lag {:?}, \
         ordinary sweeps run {sweeps}",
        stats.ticks_fired, stats.late_ticks, stats.very_late_ticks, stats.max_wheel_lag
    );
    let site = format!("{}:{slow_line}:", file!());
    if summary.contains(&site) {
        println!(
            "the summary names the slow callback: {}:{slow_line}",
            file!()
        );
        ExitCode::SUCCESS
    } else {
        eprintln!("the summary does not name {site} — the profile missed the slow callback");
        ExitCode::FAILURE
    }
}
