//! A reference run on tokio's paused clock, for a test whose own runtime is real.
//!
//! A paused clock is a property of a whole runtime, so the reference runs on a thread of its
//! own with a current-thread runtime started paused; the test then compares its real-time
//! runs with what this returns.

use std::future::Future;

/// Runs the future `make` builds on a paused-clock runtime on a thread of its own, and
/// returns its output. Panics (failing the test) if that run panics.
pub fn on_paused_clock<F, T>(make: impl FnOnce() -> F + Send + 'static) -> T
where
    F: Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("paused runtime")
            .block_on(make())
    })
    .join()
    .expect("the paused reference run")
}
