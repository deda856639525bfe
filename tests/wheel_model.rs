//! The wheel against a trivial reference model.
//!
//! The model keeps every entry's (due tick, latest tick, sequence) and does everything by
//! scanning: obviously correct, hopelessly slow. An entry with `latest > due` is tolerant
//! (docs/timers.md, "Tolerance"): the model's anchor is the smallest latest tick pending, and
//! there it yields every entry due by then, by (due, sequence). Random sequences of insert /
//! cancel / reschedule / advance, plain and tolerant — including long jumps and inserts made
//! while a tick is being drained — must yield the identical sequence of (tick, entry) from
//! both.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;
use shardloop::timer::wheel::{Key, MAX_DELAY, Wheel};

#[derive(Debug, Clone)]
enum Op {
    Insert {
        delay: u64,
        slack: u64,
    },
    Cancel {
        pick: usize,
    },
    Reschedule {
        pick: usize,
        delay: u64,
        slack: u64,
    },
    /// Advance by `by` ticks; every `every`-th fired entry (0 = none, at most 64 per advance)
    /// starts a new entry with `delay`, as a callback would.
    Advance {
        by: u64,
        every: usize,
        delay: u64,
        slack: u64,
    },
}

/// How many ticks late an entry may come: mostly none (a plain entry).
fn slack() -> impl Strategy<Value = u64> {
    prop_oneof![4 => Just(0u64), 2 => 0u64..300, 1 => 0u64..100_000]
}

/// Delays clustered where wheels go wrong: level boundaries, multiples of each resolution,
/// zero, the maximum and beyond.
fn delay() -> impl Strategy<Value = u64> {
    let boundary = (1u32..7, 1u64..4, -1i64..=1).prop_map(|(level, multiple, delta)| {
        (64u64.pow(level) * multiple).saturating_add_signed(delta)
    });
    prop_oneof![
        4 => 0u64..200,
        3 => boundary,
        2 => 0u64..300_000,
        1 => Just(MAX_DELAY),
        1 => Just(u64::MAX),
        1 => 0u64..(1 << 40),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (delay(), slack()).prop_map(|(delay, slack)| Op::Insert { delay, slack }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => (any::<usize>(), delay(), slack())
            .prop_map(|(pick, delay, slack)| Op::Reschedule { pick, delay, slack }),
        3 => (prop_oneof![4 => 0u64..100, 2 => 0u64..10_000, 1 => 0u64..(1 << 43)], 0usize..4, 0u64..130, slack())
            .prop_map(|(by, every, delay, slack)| Op::Advance { by, every, delay, slack }),
    ]
}

/// The reference: every pending entry with (due, latest, seq), and the anchor being drained.
#[derive(Default)]
struct Model {
    elapsed: u64,
    seq: u64,
    pending: HashMap<u32, (u64, u64, u64)>,
    /// The rest of the current anchor's entries, in order.
    batch: VecDeque<u32>,
}

impl Model {
    fn clamp(&self, tick: u64) -> u64 {
        tick.clamp(
            self.elapsed.saturating_add(1),
            self.elapsed.saturating_add(MAX_DELAY),
        )
    }

    fn schedule(&mut self, id: u32, delay: u64, slack: u64) {
        self.cancel(id);
        let due = self.clamp(self.elapsed.saturating_add(delay));
        let latest = self
            .clamp(self.elapsed.saturating_add(delay).saturating_add(slack))
            .max(due);
        self.pending.insert(id, (due, latest, self.seq));
        self.seq += 1;
    }

    fn cancel(&mut self, id: u32) {
        self.pending.remove(&id);
        self.batch.retain(|&b| b != id);
    }

    fn live(&self) -> usize {
        self.pending.len() + self.batch.len()
    }

    /// The next anchor: the earliest latest tick pending.
    fn anchor(&self) -> Option<u64> {
        self.pending.values().map(|&(_, latest, _)| latest).min()
    }

    /// Pops the next entry due at or before `now`, moving `elapsed` to its anchor.
    fn pop(&mut self, now: u64) -> Option<(u64, u32)> {
        if self.batch.is_empty() {
            let anchor = self.anchor().filter(|&a| a <= now)?;
            let mut due: Vec<(u64, u64, u32)> = self
                .pending
                .iter()
                .filter(|(_, window)| window.0 <= anchor)
                .map(|(&id, &(d, _, seq))| (d, seq, id))
                .collect();
            due.sort_unstable();
            for &(_, _, id) in &due {
                self.pending.remove(&id);
            }
            self.batch = due.into_iter().map(|(_, _, id)| id).collect();
            self.elapsed = anchor;
        }
        self.batch.pop_front().map(|id| (self.elapsed, id))
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut wheel: Wheel<u32> = Wheel::new();
    let mut model = Model::default();
    let mut keys: Vec<(u32, Key)> = Vec::new();
    let mut next_id = 0u32;
    // next_due() is exact until something is cancelled or moved off an upper level.
    let mut exact = true;

    for op in ops {
        match op {
            Op::Insert { delay, slack } => {
                let due = wheel.elapsed().saturating_add(delay);
                let latest = due.saturating_add(slack);
                keys.push((next_id, wheel.insert_tolerant(due, latest, next_id)));
                model.schedule(next_id, delay, slack);
                next_id += 1;
                // Pulling a tolerant entry early orphans its slot placement, like a cancel.
                exact &= slack == 0;
            }
            Op::Cancel { pick } if !keys.is_empty() => {
                let (id, key) = keys.swap_remove(pick % keys.len());
                prop_assert_eq!(wheel.remove(key), Some(id));
                prop_assert_eq!(wheel.remove(key), None, "a cancelled key is stale");
                model.cancel(id);
                exact = false;
            }
            Op::Reschedule { pick, delay, slack } if !keys.is_empty() => {
                let (id, key) = keys[pick % keys.len()];
                let due = wheel.elapsed().saturating_add(delay);
                prop_assert!(wheel.reschedule_tolerant(key, due, due.saturating_add(slack)));
                model.schedule(id, delay, slack);
                exact = false;
            }
            Op::Advance {
                by,
                every,
                delay,
                slack,
            } => {
                let now = wheel.elapsed().saturating_add(by);
                let mut fired = 0usize;
                loop {
                    let got = wheel.poll(now);
                    let want = model.pop(now);
                    let got = got.map(|e| (e.tick, wheel.remove(e.key).expect("live")));
                    prop_assert_eq!(got, want);
                    let Some((_, id)) = got else { break };
                    keys.retain(|&(k, _)| k != id);
                    fired += 1;
                    // Bounded: a callback re-arming every tick across a 2^43-tick jump would
                    // (correctly) catch up 2^43 times.
                    if every != 0 && fired.is_multiple_of(every) && fired <= 64 {
                        // A callback starting a timer: due no earlier than the next tick.
                        let due = wheel.elapsed().saturating_add(delay);
                        let key = wheel.insert_tolerant(due, due.saturating_add(slack), next_id);
                        prop_assert!(wheel.due(key).unwrap() > wheel.elapsed());
                        keys.push((next_id, key));
                        model.schedule(next_id, delay, slack);
                        next_id += 1;
                        exact &= slack == 0;
                    }
                }
                model.elapsed = model.elapsed.max(now);
                prop_assert_eq!(wheel.elapsed(), model.elapsed);
            }
            Op::Cancel { .. } | Op::Reschedule { .. } => {}
        }
        let truth = model.anchor();
        let hint = wheel.next_due();
        prop_assert_eq!(hint.is_some(), truth.is_some());
        if let (Some(hint), Some(truth)) = (hint, truth) {
            prop_assert!(
                hint <= truth,
                "next_due {hint} is later than the first due {truth}"
            );
            if exact {
                prop_assert_eq!(hint, truth);
            }
        }
        prop_assert_eq!(wheel.len(), model.live());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_the_reference_model(ops in prop::collection::vec(op(), 1..120)) {
        run(ops)?;
    }

    #[test]
    fn without_cancels_next_due_is_exact(
        ops in prop::collection::vec(
            prop_oneof![
                3 => delay().prop_map(|delay| Op::Insert { delay, slack: 0 }),
                1 => (0u64..5000, 0usize..3, 0u64..100)
                    .prop_map(|(by, every, delay)| Op::Advance { by, every, delay, slack: 0 }),
            ],
            1..200,
        )
    ) {
        run(ops)?;
    }
}
