//! [`Phase`]: the one name for a part of the loop thread's time — the six phases of an
//! iteration, in the order they run, then the save snapshot, the park and stolen time — and
//! the one table ([`Phase::info`]) every output reads its names from: the fault message, the
//! console, the CSV column, the Prometheus label, the chart's colour and stacking.
//!
//! Adding a phase is one variant and one row of [`INFO`]; every output follows. This module
//! owns the names only: it must never measure, nor know who prints them.

use std::fmt;

/// A part of the loop thread's wall time. The first six are the phases of an iteration, in
/// order; [`Phase::Save`] is timed inside whichever phase ran the snapshot and taken out of it;
/// with [`Phase::Sleep`] and [`Phase::Stolen`] they add up to the wall time of a second.
///
/// Three of them hold the shard's handlers ([`Phase::has_slot`]): the runtime owns the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Running due timer callbacks (and waking pauses).
    Timers,
    /// Accepting connections and handling received packets (slot handlers).
    Network,
    /// Polling woken tasks.
    Tasks,
    /// Running closures posted from other threads.
    Posted,
    /// Draining the world's delta queues into packets (slot handlers).
    Deltas,
    /// Handing outgoing buffers to the socket writers (slot handlers).
    Flush,
    /// Copying the world for a save (the files are written off the loop).
    Save,
    /// The end of an iteration — health sampling and the decision to park — and the park
    /// itself, with every queue empty.
    Sleep,
    /// Wall time the thread was not on a CPU though it could run: run-queue wait and host
    /// steal.
    Stolen,
}

/// What a part of the wall time is, for whoever adds parts up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Account {
    /// The loop doing work: the phases and the save snapshot.
    Work,
    /// The host's doing: runnable but off the CPU.
    Stolen,
    /// Parked: nothing to do.
    Sleep,
}

/// Everything the outputs say about one [`Phase`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseInfo {
    /// In a fault message: "a panic escaped the loop's `Deltas` phase".
    pub title: &'static str,
    /// For people: the console's `loopstats`, the chart's legend.
    pub name: &'static str,
    /// The Prometheus label value of `shardloop_loop_phase_seconds_total{phase}`.
    pub label: &'static str,
    /// Its CSV column (whole microseconds).
    pub column: &'static str,
    /// What the column holds, as `docs/loopstats-csv.md` says it.
    pub doc: &'static str,
    /// Work, stolen or sleep: the chart stacks them in that order.
    pub account: Account,
    /// Whether the shard can add handlers to it (`EventLoopBuilder::slot`).
    pub slot: bool,
    /// The chart's fill, RGB.
    pub colour: (u8, u8, u8),
}

const fn work(
    title: &'static str,
    name: &'static str,
    column: &'static str,
    doc: &'static str,
    slot: bool,
    colour: (u8, u8, u8),
) -> PhaseInfo {
    PhaseInfo {
        title,
        name,
        label: name,
        column,
        doc,
        account: Account::Work,
        slot,
        colour,
    }
}

/// One row per [`Phase`], in declaration order. Colours: distinct hues for work, yellow for
/// stolen (the host's doing), pale grey for sleep so the rest stands out against it.
const INFO: [PhaseInfo; Phase::COUNT] = [
    work(
        "Timers",
        "timers",
        "timers_us",
        "running due timer callbacks",
        false,
        (0xf2, 0x8e, 0x2b),
    ),
    work(
        "Network",
        "network",
        "network_us",
        "the Network phase: accepting connections, handling packets",
        true,
        (0x4e, 0x79, 0xa7),
    ),
    work(
        "Tasks",
        "tasks",
        "tasks_us",
        "polling woken tasks",
        false,
        (0x59, 0xa1, 0x4f),
    ),
    work(
        "Posted",
        "posted",
        "posted_us",
        "running closures posted from other threads",
        false,
        (0xb0, 0x7a, 0xa1),
    ),
    work(
        "Deltas",
        "deltas",
        "deltas_us",
        "the Deltas phase: world changes into packets",
        true,
        (0x76, 0xb7, 0xb2),
    ),
    work(
        "Flush",
        "flush",
        "flush_us",
        "the Flush phase: buffers to the socket writers",
        true,
        (0x9c, 0x75, 0x5f),
    ),
    PhaseInfo {
        label: "save_snapshot",
        ..work(
            "Save",
            "save snapshot",
            "save_us",
            "copying the world for a save (the snapshot; files are written off the loop)",
            false,
            (0xe1, 0x57, 0x59),
        )
    },
    PhaseInfo {
        account: Account::Sleep,
        ..work(
            "Sleep",
            "sleep",
            "sleep_us",
            "parked with every queue empty",
            false,
            (0xe4, 0xe4, 0xe4),
        )
    },
    PhaseInfo {
        account: Account::Stolen,
        ..work(
            "Stolen",
            "stolen",
            "stolen_us",
            "runnable but off the CPU: run-queue wait plus host steal",
            false,
            (0xed, 0xc9, 0x48),
        )
    },
];

impl Phase {
    /// How many there are.
    pub const COUNT: usize = 9;

    /// Every phase, in the order of the loop and of the CSV columns.
    pub const ALL: [Phase; Phase::COUNT] = [
        Phase::Timers,
        Phase::Network,
        Phase::Tasks,
        Phase::Posted,
        Phase::Deltas,
        Phase::Flush,
        Phase::Save,
        Phase::Sleep,
        Phase::Stolen,
    ];

    /// Its row of the table.
    #[must_use]
    pub const fn info(self) -> &'static PhaseInfo {
        &INFO[self as usize]
    }

    /// Its name for people: the console, the chart's legend.
    #[must_use]
    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// Its Prometheus label value (snake case, no spaces).
    #[must_use]
    pub const fn label(self) -> &'static str {
        self.info().label
    }

    /// Whether the loop thread was doing work (not sleeping, not kept off the CPU).
    #[must_use]
    pub fn is_work(self) -> bool {
        self.info().account == Account::Work
    }

    /// Whether the shard can add handlers to it: Network, Deltas and Flush.
    #[must_use]
    pub const fn has_slot(self) -> bool {
        self.info().slot
    }

    /// Every phase in the order the chart stacks them, bottom to top: work first (what a
    /// reader looks for), then stolen, then sleep.
    #[must_use]
    pub fn stacked() -> [Phase; Phase::COUNT] {
        let mut all = Phase::ALL;
        all.sort_by_key(|p| p.info().account); // stable: work keeps the loop's order
        all
    }
}

/// Its title, as a fault message names it ("Deltas").
impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.info().title)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_one_row_per_phase_in_order_with_distinct_names() {
        for (i, phase) in Phase::ALL.into_iter().enumerate() {
            assert_eq!(phase as usize, i, "ALL is in declaration order");
        }
        let names = |f: fn(&PhaseInfo) -> &str| {
            let mut all: Vec<&str> = INFO.iter().map(f).collect();
            all.sort_unstable();
            all.dedup();
            all.len()
        };
        assert_eq!(names(|i| i.name), Phase::COUNT);
        assert_eq!(names(|i| i.label), Phase::COUNT);
        assert_eq!(names(|i| i.column), Phase::COUNT);
        assert!(INFO.iter().all(|i| !i.label.contains(' ')));
    }

    #[test]
    fn the_chart_stacks_work_then_stolen_then_sleep() {
        let stacked = Phase::stacked();
        assert_eq!(&stacked[..7], &Phase::ALL[..7]);
        assert_eq!(&stacked[7..], &[Phase::Stolen, Phase::Sleep]);
        let slots: Vec<Phase> = Phase::ALL.into_iter().filter(|p| p.has_slot()).collect();
        assert_eq!(slots, [Phase::Network, Phase::Deltas, Phase::Flush]);
    }
}
