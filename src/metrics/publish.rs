//! The loop side of `/metrics`: a loop timer that copies the loop's figures once every
//! [`EVERY`] into a slot the HTTP thread reads whenever a scrape comes, so that a scrape never
//! waits for the loop.
//!
//! The slot is a `tokio::sync::watch` channel holding an `Arc<Published>`. Publishing swaps the
//! `Arc` in (a write lock held for a pointer swap); reading clones the `Arc` out (a read lock
//! held for a reference-count increment). Neither side holds the lock while doing anything
//! else, so the loop never waits on the HTTP thread for longer than that increment, and the
//! old snapshot is freed by whichever side drops the last `Arc`.
//!
//! Each publish copies the counters and only the history seconds new since the previous
//! publish, which it adds to per-phase totals it keeps here (so a scrape sees totals since the
//! endpoint started, whatever seconds it missed between its reads). The timer cancels itself
//! once the HTTP thread has dropped its end.
//!
//! Owns the publishing and the [`Published`] type. It must never do more on the loop than
//! copy: formatting and `/proc` reads happen on the HTTP thread.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::timer;

use super::families::PhaseTotals;
use super::probe::{self, Snapshot, Sources};

/// How often the loop publishes: Prometheus scrapes at most this often in practice, so a
/// scrape's figures are at most this old (plus one wheel tick) while the loop runs.
pub const EVERY: Duration = Duration::from_secs(1);

/// One published copy of the loop's figures (plain data: it crosses to the HTTP thread).
#[derive(Debug, Clone)]
pub struct Published {
    /// The counters; its `history` is always empty (the seconds went into `phases`).
    pub snapshot: Snapshot,
    /// Loop wall time by part, summed over every history second published so far.
    pub phases: PhaseTotals,
    /// When the loop took it.
    pub taken: Instant,
    /// 1 for the copy taken at start, one more for each publish after.
    pub number: u64,
}

impl Published {
    /// How old the figures are now.
    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }
}

/// The reading end, for the HTTP thread.
pub type Slot = watch::Receiver<Arc<Published>>;

/// The loop's end: takes copies and sends them.
pub struct Publisher {
    sources: Rc<Sources>,
    phases: PhaseTotals,
    number: u64,
    slot: watch::Sender<Arc<Published>>,
}

impl Publisher {
    /// Takes the first copy at once (so the slot is never empty) and returns the publisher with
    /// the slot's reading end.
    ///
    /// # Panics
    /// Off the loop thread.
    pub fn new(sources: Rc<Sources>) -> (Publisher, Slot) {
        let mut phases = PhaseTotals::default();
        let first = take(&sources, &mut phases, 1);
        let (slot, reader) = watch::channel(Arc::new(first));
        let publisher = Publisher {
            sources,
            phases,
            number: 1,
            slot,
        };
        (publisher, reader)
    }

    /// Takes a copy and publishes it. False once nobody reads the slot any more.
    pub fn publish(&mut self) -> bool {
        if self.slot.is_closed() {
            return false;
        }
        self.number += 1;
        let copy = take(&self.sources, &mut self.phases, self.number);
        // `send_replace` stores the value whether or not anybody waits for a change.
        drop(self.slot.send_replace(Arc::new(copy)));
        true
    }

    /// Publishes every [`EVERY`] on this thread's loop until nobody reads the slot.
    ///
    /// # Panics
    /// Off the loop thread.
    pub fn start(mut self) -> timer::TimerToken {
        timer::every(EVERY).start(move || {
            if !self.publish()
                && let Some(me) = timer::current()
            {
                me.cancel();
            }
        })
    }
}

/// Copies the counters and adds the history seconds after `phases.seen` to `phases`.
fn take(sources: &Sources, phases: &mut PhaseTotals, number: u64) -> Published {
    let history = (sources.history)(phases.seen);
    phases.add(&history);
    let mut snapshot = probe::counters(sources);
    snapshot.history = Vec::new();
    Published {
        snapshot,
        phases: phases.clone(),
        taken: Instant::now(),
        number,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::metrics::{PersistFacts, WorldCounts};
    use crate::runtime::EventLoop;
    use crate::runtime::Phase;
    use crate::runtime::history::LoopSecond;

    /// A history that grows by one second each time `grow` is called, and counts the seconds
    /// the history source hands out.
    #[derive(Default)]
    struct FakeHistory {
        seconds: RefCell<Vec<LoopSecond>>,
        copied: Cell<usize>,
    }

    impl FakeHistory {
        fn grow(&self) {
            let mut seconds = self.seconds.borrow_mut();
            let mut s = LoopSecond {
                uptime_second: seconds.len() as u64,
                ..LoopSecond::default()
            };
            s.add(Phase::Timers, Duration::from_millis(10));
            seconds.push(s);
        }
    }

    /// Sources whose world counts how often it was read, and whose history is `history`.
    fn sources(history: Rc<FakeHistory>, reads: Rc<Cell<u64>>) -> Rc<Sources> {
        Rc::new(Sources {
            net: Box::new(Default::default),
            world: Box::new(move || {
                reads.set(reads.get() + 1);
                WorldCounts {
                    players: reads.get(),
                    ..WorldCounts::default()
                }
            }),
            history: Box::new(move |after| {
                let new: Vec<LoopSecond> = history
                    .seconds
                    .borrow()
                    .iter()
                    .filter(|s| after.is_none_or(|a| s.uptime_second > a))
                    .copied()
                    .collect();
                history.copied.set(history.copied.get() + new.len());
                new
            }),
            persist: Box::new(PersistFacts::default),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_publishes_every_second_copying_only_the_new_history_seconds() {
        let history = Rc::new(FakeHistory::default());
        let reads = Rc::new(Cell::new(0));
        let mut el = EventLoop::builder().build();
        let (history2, reads2) = (history.clone(), reads.clone());
        let slot = el
            .run_until(async move {
                history2.grow();
                let (publisher, slot) = Publisher::new(sources(history2.clone(), reads2));
                // The first copy is there before any timer ran.
                assert_eq!(slot.borrow().number, 1);
                assert_eq!(slot.borrow().snapshot.world.players, 1);
                let _timer = publisher.start();
                // The history grows by two seconds between publishes (never on the same
                // tick as one).
                let grower = timer::after(EVERY / 4)
                    .every(EVERY / 2)
                    .start(move || history2.grow());
                tokio::time::sleep(EVERY * 3 + EVERY / 10).await;
                grower.cancel();
                slot
            })
            .await;
        let last = slot.borrow().clone();
        assert_eq!(
            last.number, 4,
            "one publish at start, one each second after"
        );
        assert_eq!(
            last.snapshot.world.players, 4,
            "each publish read the world once"
        );
        assert!(last.snapshot.history.is_empty());
        let seconds = history.seconds.borrow().len();
        assert_eq!(seconds, 7);
        assert_eq!(
            history.copied.get(),
            seconds,
            "every history second was copied once, never again"
        );
        assert_eq!(last.phases.seen, Some(seconds as u64 - 1));
        assert_eq!(
            last.phases.spent[Phase::Timers as usize],
            Duration::from_millis(10) * seconds as u32
        );
    }

    #[tokio::test(start_paused = true)]
    async fn publishing_stops_once_the_reader_is_gone_and_the_last_copy_stays_readable() {
        let history = Rc::new(FakeHistory::default());
        let reads = Rc::new(Cell::new(0));
        let mut el = EventLoop::builder().build();
        let reads2 = reads.clone();
        el.run_until(async move {
            let (publisher, slot) = Publisher::new(sources(history, reads2.clone()));
            let timer = publisher.start();
            tokio::time::sleep(EVERY * 2 + EVERY / 4).await;
            let kept = slot.borrow().clone();
            assert_eq!(kept.number, 3);
            drop(slot);
            tokio::time::sleep(EVERY * 3).await;
            assert!(!timer.running(), "the timer cancelled itself");
            // One read at start and one per publish; none after the reader left.
            assert_eq!(reads2.get(), 3);
            // A copy the HTTP side still holds outlives the slot.
            assert_eq!(kept.snapshot.world.players, 3);
        })
        .await;
        assert_eq!(reads.get(), 3);
    }

    #[test]
    fn a_copy_s_age_counts_from_when_the_loop_took_it() {
        let (stats, lag) = (Default::default(), Default::default());
        let published = Published {
            snapshot: Snapshot {
                stats,
                lag,
                loop_cpu: Duration::ZERO,
                net: Default::default(),
                world: WorldCounts::default(),
                persist: PersistFacts::default(),
                history: Vec::new(),
            },
            phases: PhaseTotals::default(),
            taken: Instant::now() - Duration::from_secs(7),
            number: 1,
        };
        assert!(published.age() >= Duration::from_secs(7));
    }
}
