//! Faults: what makes a loop stop serving, and how the shard hears of it.
//!
//! Two kinds. A **panic that escapes a phase** (anywhere outside the guarded timer callbacks,
//! tasks and posted closures, rule T10) stops the loop at once: the phase it left may hold
//! half-changed state, so the loop never runs another iteration, and
//! [`EventLoop::try_run_until`](super::EventLoop::try_run_until) returns the [`Fault`] with
//! the panic's message and its site (file:line:column). A **reported fault**
//! ([`report_fault`]) comes from code on the loop that finds the shard can no longer do its
//! job — a dead io_uring ring — while the loop itself is sound: it keeps running, and
//! whoever awaits [`faulted`] (the shard) stops in its usual order, final save included.
//!
//! The site of a panic comes from a panic hook installed once per process, in front of the
//! hook that was there (the default one still prints its message); it records the location
//! in a thread-local that the loop reads right after catching the panic.
//!
//! Owns the fault record, the site hook and the fault-injection switch for tests. Must never
//! decide what the shard does about a fault, and never swallow one: the first fault is kept,
//! and every later one is logged.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Once;

use tokio::sync::Notify;

use super::context::{core, try_core};
use super::phase::Phase;

/// Why a loop cannot go on serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// A panic escaped `phase`; the loop stopped at once.
    Panic {
        /// The phase the panic escaped.
        phase: Phase,
        /// The panic's message (its payload as text).
        message: String,
        /// `file:line:column`, when the site hook saw the panic.
        site: Option<String>,
    },
    /// Code on the loop reported that the shard cannot go on; the loop itself is sound.
    Reported {
        /// What cannot go on, and why, as the reporter put it.
        message: String,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Panic {
                phase,
                message,
                site,
            } => write!(
                f,
                "a panic escaped the loop's {phase} phase at {}: {message}",
                site.as_deref().unwrap_or("an unknown site")
            ),
            Fault::Reported { message } => f.write_str(message),
        }
    }
}

/// A loop's fault state (one per [`super::context::Core`]).
#[derive(Default)]
pub(crate) struct FaultState {
    /// The first reported fault.
    reported: RefCell<Option<Fault>>,
    reported_signal: Notify,
    /// Fault injection: the next Deltas phase panics.
    inject_panic: Cell<bool>,
}

impl FaultState {
    /// Records `fault` if it is the first; true if it was.
    fn report(&self, fault: Fault) -> bool {
        let mut reported = self.reported.borrow_mut();
        if reported.is_some() {
            return false;
        }
        *reported = Some(fault);
        drop(reported);
        self.reported_signal.notify_waiters();
        true
    }

    fn reported(&self) -> Option<Fault> {
        self.reported.borrow().clone()
    }

    /// Whether a panic is armed for the next Deltas phase (which then runs even with no
    /// handlers).
    pub(crate) fn panic_injected(&self) -> bool {
        self.inject_panic.get()
    }

    /// Takes the armed injected panic, if any.
    pub(crate) fn take_injected_panic(&self) -> bool {
        self.inject_panic.replace(false)
    }
}

/// Tells this thread's loop that the shard cannot go on: the first report wakes the shard,
/// which stops in its usual order with a final save (exit code 70); later ones are only
/// logged. Off a loop thread (a backend used without a loop, in a test)
/// it only logs. Returns whether this was the loop's first fault.
pub fn report_fault(message: impl Into<String>) -> bool {
    let message = message.into();
    let first = try_core().is_some_and(|core| {
        core.faults.report(Fault::Reported {
            message: message.clone(),
        })
    });
    if first {
        tracing::error!("{message}; stopping the shard with a final save");
    } else {
        tracing::error!("{message} (the shard is already stopping on an earlier fault)");
    }
    first
}

/// Completes with the first fault reported on this thread's loop ([`report_fault`]).
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub(crate) fn faulted() -> impl Future<Output = Fault> + use<> {
    let core = core("runtime::faulted");
    async move {
        loop {
            // Registered before the check: a report between the two still wakes it.
            let signal = core.faults.reported_signal.notified();
            if let Some(fault) = core.faults.reported() {
                return fault;
            }
            signal.await;
        }
    }
}

/// FAULT INJECTION, for tests only: the next iteration's Deltas phase panics, outside every
/// guard, as a bug in a phase would. The shard arms it only from the hidden
/// `--fault-inject-phase-panic` flag, which only a build with the `testkit` feature has;
/// nothing a client sends and no configuration key reaches it.
///
/// # Panics
/// Off the loop thread.
#[cfg(any(test, feature = "testkit"))]
#[track_caller]
pub(crate) fn inject_phase_panic() {
    core("runtime::inject_phase_panic")
        .faults
        .inject_panic
        .set(true);
}

/// The panic message an injected phase panic carries.
pub(crate) const INJECTED_PANIC: &str = "injected fault: a loop phase panics (fault injection)";

thread_local! {
    /// Where this thread's last panic happened, as the site hook saw it.
    static LAST_SITE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the site hook once per process, in front of whatever hook is set now (which
/// still runs, so the usual panic message is printed as before).
pub(crate) fn install_site_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let site = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            // `try_with`: a panic while the thread's locals are being torn down.
            let _ = LAST_SITE.try_with(|s| *s.borrow_mut() = site);
            previous(info);
        }));
    });
}

/// The site of the panic just caught on this thread, if the hook saw it. (The last panic on
/// a thread is the one that escaped: a panic caught inside the phase came before it.)
pub(crate) fn take_site() -> Option<String> {
    LAST_SITE.try_with(|s| s.borrow_mut().take()).ok().flatten()
}

#[cfg(test)]
mod tests;
