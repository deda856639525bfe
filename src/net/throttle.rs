//! `Throttle`: a log line that may repeat at packet rate, written at most once a second.
//!
//! Accept errors and a failing io_uring submit can each happen thousands
//! of times a second; the operator needs the first line and a count, not a flooded log.

use tokio::time::{Duration, Instant};

/// Lines are written at most this often; the rest are counted.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// Logs at most once per [`LOG_EVERY`], counting what it suppressed in between.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// Calls `emit` with the number of lines suppressed since the last one, unless a line was
    /// written less than [`LOG_EVERY`] ago.
    pub(crate) fn log(&mut self, emit: impl FnOnce(u64)) {
        let now = Instant::now();
        if self.last.is_some_and(|last| now - last < LOG_EVERY) {
            self.suppressed += 1;
            return;
        }
        self.last = Some(now);
        emit(std::mem::take(&mut self.suppressed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_a_second_with_the_count_of_the_rest() {
        let mut throttle = Throttle::default();
        let mut written = Vec::new();
        for _ in 0..5 {
            throttle.log(|suppressed| written.push(suppressed));
        }
        tokio::time::advance(LOG_EVERY).await;
        throttle.log(|suppressed| written.push(suppressed));
        assert_eq!(written, [0, 4]);
    }
}
