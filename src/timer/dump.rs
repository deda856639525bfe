//! `timer::dump()`: what is waiting on the wheel, grouped by the line that started it —
//! the first thing to look at when timers leak or pile up.

use std::collections::HashMap;
use std::fmt;
use std::panic::Location;

use tokio::time::Instant;

use crate::runtime::context::Core;

/// Live timers and pauses, grouped by creation site. `Display` starts with a header line
/// holding the live count, even when it is 0.
#[derive(Debug, Clone)]
pub struct TimerDump {
    /// Live entries in all.
    pub live: usize,
    /// One row per creation site, most entries first.
    pub sites: Vec<SiteSummary>,
    now: Instant,
}

/// The entries started from one source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSummary {
    /// `file:line:column` of the `pause`/`start` call.
    pub site: String,
    pub count: usize,
    /// The soonest of their due boundaries, a `tokio::time::Instant` on the loop's clock
    /// (see `timer::now`).
    pub next_due: Instant,
}

impl TimerDump {
    pub(crate) fn collect(core: &Core) -> Self {
        let wheel = core.wheel.borrow();
        // Keyed by the site itself, not its text: a million live entries from a handful of
        // lines cost a hash each, and only the rows are turned into strings.
        let mut by_site: HashMap<&'static Location<'static>, (usize, u64)> = HashMap::new();
        for (_, due, job) in wheel.iter() {
            let row = by_site.entry(job.site()).or_insert((0, u64::MAX));
            row.0 += 1;
            row.1 = row.1.min(due);
        }
        let mut sites: Vec<SiteSummary> = by_site
            .into_iter()
            .map(|(site, (count, due))| SiteSummary {
                site: site.to_string(),
                count,
                next_due: core.clock.boundary(due),
            })
            .collect();
        sites.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.site.cmp(&b.site)));
        TimerDump {
            live: wheel.len(),
            sites,
            now: core.logical_now.get(),
        }
    }
}

impl fmt::Display for TimerDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} live timers in {} places",
            self.live,
            self.sites.len()
        )?;
        for row in &self.sites {
            let due_in = row.next_due.saturating_duration_since(self.now);
            writeln!(
                f,
                "{:>8}  next in {:>10.3?}  {}",
                row.count, due_in, row.site
            )?;
        }
        Ok(())
    }
}
