//! The text of a caught panic: the one helper every `catch_unwind` site on the loop uses to
//! log what it caught (a timer callback, a task, a packet handler, a behaviour, a hook).
//!
//! Owns nothing; imports nothing from the crate, so any module may use it.

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
