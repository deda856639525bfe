//! The wheel against a trivial reference model.
//!
//! The model is a `BTreeMap` keyed by (due tick, sequence): obviously correct, hopelessly slow.
//! Random sequences of insert / cancel / reschedule / advance — including long jumps and
//! inserts made while a tick is being drained — must yield the identical sequence of
//! (tick, entry) from both.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use shardloop::timer::wheel::{Key, MAX_DELAY, Wheel};

#[derive(Debug, Clone)]
enum Op {
    Insert {
        delay: u64,
    },
    Cancel {
        pick: usize,
    },
    Reschedule {
        pick: usize,
        delay: u64,
    },
    /// Advance by `by` ticks; every `every`-th fired entry (0 = none, at most 64 per advance)
    /// starts a new entry with `delay`, as a callback would.
    Advance {
        by: u64,
        every: usize,
        delay: u64,
    },
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
        5 => delay().prop_map(|delay| Op::Insert { delay }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        2 => (any::<usize>(), delay()).prop_map(|(pick, delay)| Op::Reschedule { pick, delay }),
        3 => (prop_oneof![4 => 0u64..100, 2 => 0u64..10_000, 1 => 0u64..(1 << 43)], 0usize..4, 0u64..130)
            .prop_map(|(by, every, delay)| Op::Advance { by, every, delay }),
    ]
}

/// The reference: every live entry by (due, seq).
#[derive(Default)]
struct Model {
    elapsed: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), u32>,
    position: HashMap<u32, (u64, u64)>,
}

impl Model {
    fn due_for(&self, delay: u64) -> u64 {
        self.elapsed.saturating_add(delay).clamp(
            self.elapsed.saturating_add(1),
            self.elapsed.saturating_add(MAX_DELAY),
        )
    }

    fn schedule(&mut self, id: u32, delay: u64) {
        let at = (self.due_for(delay), self.seq);
        self.seq += 1;
        if let Some(old) = self.position.insert(id, at) {
            self.queue.remove(&old);
        }
        self.queue.insert(at, id);
    }

    fn cancel(&mut self, id: u32) {
        if let Some(at) = self.position.remove(&id) {
            self.queue.remove(&at);
        }
    }

    /// Pops the next entry due at or before `now`, moving `elapsed` to its tick.
    fn pop(&mut self, now: u64) -> Option<(u64, u32)> {
        let (&(due, seq), &id) = self.queue.first_key_value()?;
        if due > now {
            return None;
        }
        self.queue.remove(&(due, seq));
        self.position.remove(&id);
        self.elapsed = due;
        Some((due, id))
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
            Op::Insert { delay } => {
                let due = wheel.elapsed().saturating_add(delay);
                keys.push((next_id, wheel.insert(due, next_id)));
                model.schedule(next_id, delay);
                next_id += 1;
            }
            Op::Cancel { pick } if !keys.is_empty() => {
                let (id, key) = keys.swap_remove(pick % keys.len());
                prop_assert_eq!(wheel.remove(key), Some(id));
                prop_assert_eq!(wheel.remove(key), None, "a cancelled key is stale");
                model.cancel(id);
                exact = false;
            }
            Op::Reschedule { pick, delay } if !keys.is_empty() => {
                let (id, key) = keys[pick % keys.len()];
                prop_assert!(wheel.reschedule(key, wheel.elapsed().saturating_add(delay)));
                model.schedule(id, delay);
                exact = false;
            }
            Op::Advance { by, every, delay } => {
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
                        let key = wheel.insert(due, next_id);
                        prop_assert!(wheel.due(key).unwrap() > wheel.elapsed());
                        keys.push((next_id, key));
                        model.schedule(next_id, delay);
                        next_id += 1;
                    }
                }
                model.elapsed = model.elapsed.max(now);
                prop_assert_eq!(wheel.elapsed(), model.elapsed);
            }
            Op::Cancel { .. } | Op::Reschedule { .. } => {}
        }
        let truth = model.queue.first_key_value().map(|(&(due, _), _)| due);
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
        prop_assert_eq!(wheel.len(), model.position.len());
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
                3 => delay().prop_map(|delay| Op::Insert { delay }),
                1 => (0u64..5000, 0usize..3, 0u64..100)
                    .prop_map(|(by, every, delay)| Op::Advance { by, every, delay }),
            ],
            1..200,
        )
    ) {
        run(ops)?;
    }
}
