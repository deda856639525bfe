//! The text of a caught panic: the one helper every `catch_unwind` site on the loop uses to
//! log what it caught (a timer callback, a task, a packet handler, a behaviour, a hook).
//!
//! Owns nothing; imports nothing from the crate, so any module may use it. [`catch`] is the
//! one way the crate catches a panic.

use std::any::Any;

/// The text of a caught panic's payload (`&str` or `String`; anything else is named so).
#[must_use]
pub(crate) fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(non-string panic payload)"
    }
}

/// Runs `f` with a panic caught: `Err` holds its text ([`panic_text`]). Every place that must
/// survive the code it runs — a timer callback, a task poll, a posted closure, a packet
/// handler, a hook, a console command — runs it through here, then says in its own log line
/// what panicked, where, and what happens now (and counts it in `LoopStats::panics` when the
/// loop goes on past it).
///
/// # Errors
/// The panic's text, when `f` panicked.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|payload| panic_text(&*payload).to_owned())
}
