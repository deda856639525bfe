//! [`Verdict`]: how the loop is treating idle time, the one word health decides and every
//! output (the `loop:` line, `loopstats`, `/metrics`, `/healthz`) reports. Owns the words only;
//! health (`health.rs`) decides which one applies.

use std::fmt;

/// How the loop is treating idle time, in one word for dashboards and one sentence for
/// operators (its `Display`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Verdict {
    /// Sleeping when idle, and the host returns from sleeps on time.
    #[default]
    Healthy,
    /// The host kept returning idle waits late, so sleeping is suspended for a while.
    SleepSuspended,
    /// `idle_wait = 0`: the loop never sleeps, by configuration.
    SpinningConfigured,
    /// The startup probe found this host cannot sleep precisely; the loop never sleeps.
    SpinningUnsupported,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Healthy => "healthy: sleeping when idle, waking on time",
            Verdict::SleepSuspended => {
                "sleep suspended (host): idle waits came back late, so the loop spins for now; \
                 a dedicated CPU or idle_wait = 0 avoids this"
            }
            Verdict::SpinningConfigured => "spinning (configured): idle_wait = 0, never sleeps",
            Verdict::SpinningUnsupported => {
                "spinning (host unsupported): the startup probe found sleeps overshoot a tick"
            }
        })
    }
}
