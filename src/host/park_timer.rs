//! A blocking sleep on the kind of timer the loop's idle park arms: a non-blocking
//! CLOCK_MONOTONIC timerfd. `shardloop probe-host` times it next to std's and tokio's sleeps,
//! so an operator sees how precisely this host can wake a parked loop.
//!
//! This module only lends the park's timer out for measuring. It must never be used on the
//! loop thread (it blocks the calling thread), and the loop never parks through it: the park
//! keeps its own timer, registered with tokio's reactor (`runtime::park`).

use std::io;
use std::time::Duration;

use crate::runtime::park::TimerFd;

/// A timerfd to sleep on, reused from one sleep to the next.
pub struct ParkTimer(TimerFd);

impl ParkTimer {
    /// Creates the timerfd; fails where the kernel has none or no descriptor is left.
    pub fn new() -> io::Result<ParkTimer> {
        TimerFd::new().map(ParkTimer)
    }

    /// Blocks the calling thread for at least `duration`.
    pub fn sleep(&self, duration: Duration) -> io::Result<()> {
        // Arming with zero disarms the timer, and the wait would never end.
        if duration.is_zero() {
            return Ok(());
        }
        self.0.arm(duration)?;
        self.0.wait_blocking()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_sleep_is_never_early_and_a_zero_sleep_returns() {
        let timer = ParkTimer::new().expect("a timerfd on Linux");
        for want in [Duration::from_millis(3), Duration::from_micros(200)] {
            let start = Instant::now();
            timer.sleep(want).expect("sleeps");
            assert!(start.elapsed() >= want, "woke early from {want:?}");
        }
        timer.sleep(Duration::ZERO).expect("returns at once");
    }
}
