//! Unit tests of the wheel: level boundaries, offsets, range, cancel and stale keys.
//! The randomised comparison with a reference model lives in `tests/wheel_model.rs`.

use super::*;

/// Polls up to `now` and returns every (tick, value) yielded, removing fired entries.
fn drain<T: Copy>(wheel: &mut Wheel<T>, now: u64) -> Vec<(u64, T)> {
    let mut out = Vec::new();
    while let Some(e) = wheel.poll(now) {
        let value = wheel.remove(e.key).expect("a yielded key is live");
        out.push((e.tick, value));
    }
    out
}

/// Inserts one entry `delay` ticks after `offset` and checks it fires exactly at its tick,
/// neither a tick early nor a tick late, whether the wheel is polled tick by tick or jumps.
fn fires_exactly(offset: u64, delay: u64) {
    // Polling tick by tick is what the loop does; beyond a few thousand ticks the jump
    // variant (and the model test) cover it at a fraction of the cost.
    for step_by_step in [delay <= 20_000, false] {
        let mut wheel = Wheel::new();
        assert!(drain(&mut wheel, offset).is_empty());
        let due = offset + delay;
        wheel.insert(due, ());
        if step_by_step {
            for tick in offset + 1..due {
                assert!(
                    drain(&mut wheel, tick).is_empty(),
                    "offset {offset} delay {delay}: fired early at {tick}"
                );
            }
        } else {
            assert!(drain(&mut wheel, due - 1).is_empty(), "early (jump)");
        }
        assert_eq!(
            drain(&mut wheel, due),
            vec![(due, ())],
            "offset {offset} delay {delay}"
        );
        assert!(wheel.is_empty());
    }
}

#[test]
fn level_boundaries_fire_exactly_from_several_offsets() {
    // One ring of each level, exact multiples of each upper resolution, and one either side —
    // the C# wheel fired exact multiples one upper resolution early from non-zero offsets.
    let offsets = [0, 1, 5, 63, 64, 65, 100, 4095, 4096, 4097, 262_143, 262_145];
    for level in 1..=3u32 {
        let resolution = 64u64.pow(level);
        for multiple in [1, 2, 3, 63, 64] {
            for delta in [-1i64, 0, 1] {
                let delay = (resolution * multiple).saturating_add_signed(delta);
                for &offset in &offsets {
                    fires_exactly(offset, delay);
                }
            }
        }
    }
}

#[test]
fn upper_levels_fire_exactly_when_jumping() {
    for level in 4..NUM_LEVELS as u32 {
        let resolution = 64u64.pow(level);
        for offset in [0, 7, 64 * 64 + 3, resolution - 1, resolution + 9] {
            for delay in [resolution - 1, resolution, resolution + 1, resolution * 2] {
                let mut wheel = Wheel::new();
                drain(&mut wheel, offset);
                let due = offset + delay;
                wheel.insert(due, 1u8);
                assert!(
                    drain(&mut wheel, due - 1).is_empty(),
                    "early at level {level}"
                );
                assert_eq!(drain(&mut wheel, due), vec![(due, 1)]);
            }
        }
    }
}

#[test]
fn zero_delay_goes_to_the_next_tick() {
    let mut wheel = Wheel::new();
    wheel.insert(0, 'a');
    assert_eq!(wheel.next_due(), Some(1));
    assert_eq!(drain(&mut wheel, 1), vec![(1, 'a')]);
    drain(&mut wheel, 50);
    wheel.insert(50, 'b');
    wheel.insert(3, 'c');
    assert_eq!(drain(&mut wheel, 51), vec![(51, 'b'), (51, 'c')]);
}

#[test]
fn maximum_delay_is_exact_and_larger_saturates() {
    let mut wheel = Wheel::new();
    drain(&mut wheel, 1000);
    let exact = wheel.insert(1000 + MAX_DELAY, "max");
    let saturated = wheel.insert(u64::MAX, "beyond");
    assert_eq!(wheel.due(exact), Some(1000 + MAX_DELAY));
    assert_eq!(wheel.due(saturated), Some(1000 + MAX_DELAY));
    // 2^38 ms at an 8 ms tick.
    let eight_years = wheel.insert(1000 + (1 << 35), "2^38 ms");
    assert!(drain(&mut wheel, 1000 + (1 << 35) - 1).is_empty());
    assert_eq!(
        drain(&mut wheel, 1000 + (1 << 35)),
        vec![(1000 + (1 << 35), "2^38 ms")]
    );
    assert_eq!(wheel.due(eight_years), None);
    assert!(drain(&mut wheel, 1000 + MAX_DELAY - 1).is_empty());
    assert_eq!(
        drain(&mut wheel, 1000 + MAX_DELAY),
        vec![(1000 + MAX_DELAY, "max"), (1000 + MAX_DELAY, "beyond")]
    );
}

#[test]
fn wraps_across_the_top_level() {
    // A delay that crosses a 2^42 boundary folds into the top level's ring.
    let mut wheel = Wheel::new();
    let start = (1u64 << 42) - 10;
    drain(&mut wheel, start);
    wheel.insert(start + 100, 'a');
    wheel.insert(start + MAX_DELAY, 'z');
    wheel.insert(start + 5, 'b');
    assert_eq!(wheel.next_due(), Some(start + 5));
    assert_eq!(drain(&mut wheel, start + 5), vec![(start + 5, 'b')]);
    assert!(drain(&mut wheel, start + 99).is_empty());
    assert_eq!(drain(&mut wheel, start + 100), vec![(start + 100, 'a')]);
    assert_eq!(wheel.next_due(), Some(start + MAX_DELAY));
    assert!(drain(&mut wheel, start + MAX_DELAY - 1).is_empty());
    assert_eq!(
        drain(&mut wheel, start + MAX_DELAY),
        vec![(start + MAX_DELAY, 'z')]
    );
}

#[test]
fn near_the_end_of_u64_nothing_panics() {
    let mut wheel = Wheel::new();
    drain(&mut wheel, u64::MAX - 3);
    wheel.insert(u64::MAX, 1);
    wheel.insert(5, 2);
    assert_eq!(
        drain(&mut wheel, u64::MAX),
        vec![(u64::MAX - 2, 2), (u64::MAX, 1)]
    );
}

#[test]
fn same_tick_is_fifo_including_cascaded_entries() {
    let mut wheel = Wheel::new();
    // 'a' goes to level 2, 'b' to level 1, 'c' lands on level 0 once the wheel is close.
    wheel.insert(5000, 'a');
    wheel.insert(5000, 'b');
    drain(&mut wheel, 4990);
    wheel.insert(5000, 'c');
    let mid = wheel.insert(4999, 'x');
    wheel.reschedule(mid, 5000);
    assert_eq!(
        drain(&mut wheel, 6000),
        vec![(5000, 'a'), (5000, 'b'), (5000, 'c'), (5000, 'x')]
    );
}

#[test]
fn cancel_of_an_entry_due_in_the_tick_being_drained() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(10, 'a');
    let b = wheel.insert(10, 'b');
    let c = wheel.insert(10, 'c');
    let first = wheel.poll(10).expect("a is due");
    assert_eq!(first.key, a);
    // "a's callback" cancels c, which is already in this tick's batch.
    assert_eq!(wheel.remove(c), Some('c'));
    assert_eq!(wheel.poll(10).map(|e| e.key), Some(b));
    assert_eq!(wheel.poll(10), None);
    assert_eq!(wheel.remove(c), None, "c stays cancelled");
}

#[test]
fn inserts_during_a_drain_wait_for_a_later_tick() {
    let mut wheel = Wheel::new();
    wheel.insert(10, 0u32);
    let first = wheel.poll(20).expect("due");
    assert_eq!(first.tick, 10);
    // Inserted while tick 10 is drained, due "now" or earlier: tick 11 at the soonest.
    let late = wheel.insert(10, 1);
    let earlier = wheel.insert(2, 2);
    assert_eq!(wheel.due(late), Some(11));
    assert_eq!(wheel.due(earlier), Some(11));
    wheel.remove(first.key);
    assert_eq!(drain(&mut wheel, 20), vec![(11, 1), (11, 2)]);
}

#[test]
fn a_fired_entry_can_be_rescheduled_with_the_same_key() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(3, "repeat");
    let mut fired = Vec::new();
    while fired.len() < 4 {
        let tick = wheel.next_due().expect("scheduled");
        while let Some(e) = wheel.poll(tick) {
            assert_eq!(e.key, key);
            assert!(!wheel.is_pending(key));
            fired.push(e.tick);
            wheel.reschedule(key, e.tick + 3);
        }
    }
    assert_eq!(fired, vec![3, 6, 9, 12]);
}

#[test]
fn stale_keys_are_inert_after_slot_reuse() {
    let mut wheel = Wheel::new();
    let old = wheel.insert(100, 'o');
    assert_eq!(wheel.remove(old), Some('o'));
    let new = wheel.insert(100, 'n');
    assert_eq!(old.index(), new.index(), "the slab slot is reused");
    assert_eq!(wheel.remove(old), None);
    assert!(!wheel.reschedule(old, 5));
    assert_eq!(wheel.get(old), None);
    assert_eq!(wheel.due(old), None);
    assert_eq!(drain(&mut wheel, 100), vec![(100, 'n')]);

    let mut other: Wheel<char> = Wheel::new();
    assert_eq!(other.remove(new), None, "foreign key");
}

#[test]
fn cancelling_every_entry_empties_the_slot_at_once() {
    let mut wheel = Wheel::new();
    let keys: Vec<_> = (0..10).map(|i| wheel.insert(1000, i)).collect();
    let lone = wheel.insert(3000, 99);
    for k in keys {
        wheel.remove(k);
    }
    assert_eq!(
        wheel.next_due(),
        Some(3000),
        "no wake for a slot of cancelled entries"
    );
    wheel.remove(lone);
    assert_eq!(wheel.next_due(), None);
}

#[test]
fn repeated_reschedules_do_not_grow_garbage_without_bound() {
    let mut wheel = Wheel::new();
    let anchor = wheel.insert(70_000, 0u32);
    let moving = wheel.insert(70_001, 1);
    let level = level_for(0, 70_000);
    let slot = wheel.levels[level].slot_for(70_000);
    for i in 0..10_000 {
        wheel.reschedule(moving, 70_001 + (i % 7));
    }
    assert!(wheel.garbage_in(level, slot) <= 2 * 2 + 16 + 1);
    assert_eq!(drain(&mut wheel, 80_000).len(), 2);
    assert!(wheel.get(anchor).is_none());
}

#[test]
fn next_due_skips_empty_ranges() {
    let mut wheel = Wheel::new();
    assert_eq!(wheel.next_due(), None);
    wheel.insert(1 << 30, ());
    wheel.insert(70, ());
    assert_eq!(wheel.next_due(), Some(70));
    drain(&mut wheel, 70);
    assert_eq!(wheel.next_due(), Some(1 << 30));
    // A long jump lands exactly: one cascade per level, no empty tick visited.
    assert_eq!(drain(&mut wheel, u64::MAX / 2), vec![(1 << 30, ())]);
}

#[test]
fn level_for_picks_the_highest_differing_digit() {
    assert_eq!(level_for(0, 0), 0);
    assert_eq!(level_for(0, 63), 0);
    assert_eq!(level_for(0, 64), 0);
    assert_eq!(level_for(0, 4095), 0);
    assert_eq!(level_for(0, 4096), 1);
    assert_eq!(level_for(4095, 4096), 1);
    assert_eq!(level_for(4096, 8191), 0);
    assert_eq!(level_for(0, (1 << 18) - 1), 1);
    assert_eq!(level_for(0, 1 << 18), 2);
    assert_eq!(level_for(0, 1 << 36), NUM_LEVELS - 1);
    assert_eq!(level_for(0, MAX_DELAY), NUM_LEVELS - 1);
    assert_eq!(level_for(0, u64::MAX), NUM_LEVELS - 1);
}

#[test]
fn levels_cover_the_whole_range_without_gaps() {
    // Each level's ring is exactly one slot of the level above, and the top spans MAX_DELAY.
    for level in 0..NUM_LEVELS - 1 {
        let lower = Level::new(level);
        let upper = Level::new(level + 1);
        let turn = (lower.slot_for(u64::MAX) as u64 + 1) << level_shift(level);
        assert_eq!(turn, 1 << level_shift(level + 1));
        assert_eq!(upper.slot_for(turn), 1);
        assert_eq!(upper.slot_for(turn - 1), 0);
    }
    let top = NUM_LEVELS - 1;
    let span = (Level::new(top).slot_for(u64::MAX) as u64 + 1) << level_shift(top);
    assert_eq!(span - 1, MAX_DELAY);
}

/// log2 of the ticks one slot of `level` covers.
fn level_shift(level: usize) -> u32 {
    match level {
        0 => 0,
        _ => LEVEL0_BITS + UPPER_BITS * (level as u32 - 1),
    }
}

#[test]
fn occupancy_is_found_across_bitmap_words() {
    // Level 0 has 64 bitmap words: entries in distant words, and one in `now`'s word.
    let mut wheel = Wheel::new();
    for due in [4000, 65, 1000, 128, 70] {
        wheel.insert(due, due);
    }
    let mut fired = Vec::new();
    while let Some(next) = wheel.next_due() {
        fired.extend(drain(&mut wheel, next).into_iter().map(|(tick, _)| tick));
    }
    assert_eq!(fired, vec![65, 70, 128, 1000, 4000]);
}

#[test]
fn cancel_finds_the_slot_from_the_due_tick() {
    // An entry's slot is recomputed from (elapsed, due) on cancel: check the live counts
    // after the wheel moved on without cascading the entry's slot.
    let mut wheel = Wheel::new();
    let far = wheel.insert(300_000, 'f');
    let near = wheel.insert(5_000, 'n');
    let keep = wheel.insert(300_001, 'k');
    assert_eq!(drain(&mut wheel, 4_999), vec![]);
    let (level, slot) = (level_for(4_999, 300_000), wheel.levels[2].slot_for(300_000));
    assert_eq!(level, 2);
    assert_eq!(wheel.levels[level].live(slot), 2);
    assert_eq!(wheel.remove(far), Some('f'));
    assert_eq!(wheel.levels[level].live(slot), 1);
    assert_eq!(drain(&mut wheel, 5_000), vec![(5_000, 'n')]);
    assert!(wheel.reschedule(keep, 6_000));
    assert_eq!(wheel.levels[level].live(slot), 0);
    assert_eq!(wheel.next_due(), Some(6_000));
    assert_eq!(wheel.remove(near), None);
}

#[test]
fn cascades_rebuild_due_ticks_across_32_bit_boundaries() {
    // Placements keep 32 bits of the due tick; slots narrower than 2^32 rebuild the rest.
    for offset in [0, (1u64 << 32) - 5, (3u64 << 32) + 17] {
        let mut wheel = Wheel::new();
        drain(&mut wheel, offset);
        let dues = [
            (1u64 << 32) - 1,
            1 << 32,
            (1 << 32) + 1,
            (5 << 32) + 3,
            offset + (1 << 36) + 7,
            offset + MAX_DELAY,
        ];
        for &due in &dues {
            if due > offset {
                wheel.insert(due, due);
            }
        }
        let mut fired = Vec::new();
        while let Some(next) = wheel.next_due() {
            for (tick, value) in drain(&mut wheel, next) {
                assert_eq!(tick, value, "fired at the wrong tick");
                fired.push(tick);
            }
        }
        let mut want: Vec<u64> = dues.iter().copied().filter(|&d| d > offset).collect();
        want.sort_unstable();
        assert_eq!(fired, want, "offset {offset}");
    }
}

// ---------------------------------------------------------------------------------------------
// Tolerant entries

#[test]
fn a_tolerant_entry_alone_comes_at_its_latest_tick() {
    let mut wheel = Wheel::new();
    wheel.insert_tolerant(10, 25, 'a');
    assert_eq!(
        wheel.next_due(),
        Some(25),
        "the wheel needs waking only at the latest tick"
    );
    assert!(drain(&mut wheel, 24).is_empty(), "no anchor before 25");
    assert_eq!(drain(&mut wheel, 25), vec![(25, 'a')]);
    assert!(wheel.is_empty());
}

#[test]
fn a_plain_entry_pulls_tolerant_ones_due_by_its_tick_in_due_then_start_order() {
    let mut wheel = Wheel::new();
    wheel.insert_tolerant(12, 40, 'c'); // due 12
    wheel.insert(20, 's'); // the anchor
    wheel.insert_tolerant(20, 30, 'd'); // due 20, started after 's'
    wheel.insert_tolerant(5, 50, 'b'); // due 5
    wheel.insert_tolerant(21, 22, 'e'); // not due by 20: waits for its own latest tick
    assert_eq!(wheel.next_due(), Some(20));
    assert!(drain(&mut wheel, 19).is_empty());
    assert_eq!(
        drain(&mut wheel, 20),
        vec![(20, 'b'), (20, 'c'), (20, 's'), (20, 'd')],
        "due 5, due 12, then due 20 in start order"
    );
    assert_eq!(
        wheel.next_due(),
        Some(22),
        "the pulled ones left their slots"
    );
    assert_eq!(drain(&mut wheel, 1000), vec![(22, 'e')]);
    assert!(wheel.is_empty());
}

#[test]
fn tolerant_entries_reaching_their_latest_tick_together_with_others_come_in_due_order() {
    let mut wheel = Wheel::new();
    wheel.insert_tolerant(8, 30, 'x'); // latest 30: the anchor
    wheel.insert_tolerant(3, 31, 'y'); // due earlier, pulled at 30
    wheel.insert(30, 'z');
    assert_eq!(drain(&mut wheel, 30), vec![(30, 'y'), (30, 'x'), (30, 'z')]);
}

#[test]
fn removing_or_moving_a_tolerant_entry_takes_it_out_of_both_places() {
    let mut wheel = Wheel::new();
    let a = wheel.insert_tolerant(5, 15, 'a');
    let b = wheel.insert_tolerant(6, 16, 'b');
    assert_eq!(wheel.remove(a), Some('a'));
    assert!(wheel.reschedule_tolerant(b, 40, 60));
    assert_eq!(wheel.due(b), Some(40));
    assert_eq!(wheel.latest(b), Some(60));
    wheel.insert(20, 's');
    assert_eq!(
        drain(&mut wheel, 20),
        vec![(20, 's')],
        "neither pulled at 20"
    );
    assert_eq!(wheel.next_due(), Some(60));
    assert!(wheel.reschedule(b, 45), "back to a plain entry");
    assert_eq!(drain(&mut wheel, 100), vec![(45, 'b')]);
    assert!(wheel.is_empty());
}

#[test]
fn an_entry_cancelled_after_being_pulled_is_not_yielded() {
    let mut wheel = Wheel::new();
    wheel.insert(10, 's');
    let first = wheel.insert_tolerant(5, 50, 'f');
    let pulled = wheel.insert_tolerant(9, 60, 'p');
    assert_eq!(
        wheel.poll(10).map(|e| e.key),
        Some(first),
        "due 5 comes first"
    );
    assert_eq!(wheel.latest(pulled), None, "pulled into the batch");
    assert_eq!(wheel.remove(pulled), Some('p'));
    let strict = wheel.poll(10).expect("the anchor's own entry");
    assert_eq!(wheel.get(strict.key), Some(&'s'));
    assert_eq!(wheel.poll(10), None);
    wheel.remove(first);
    wheel.remove(strict.key);
    assert_eq!(wheel.next_due(), None, "the slot placements were orphaned");
    assert!(wheel.is_empty());
}

#[test]
fn a_tolerant_window_that_crosses_upper_levels_comes_at_its_latest_tick() {
    let mut wheel = Wheel::new();
    wheel.insert_tolerant(4000, 300_000, 'a');
    wheel.insert(299_999, 's');
    assert_eq!(
        drain(&mut wheel, 299_999),
        vec![(299_999, 'a'), (299_999, 's')]
    );
    wheel.insert_tolerant(300_100, 5_000_000, 'b');
    assert!(drain(&mut wheel, 4_999_999).is_empty());
    assert_eq!(drain(&mut wheel, 5_000_000), vec![(5_000_000, 'b')]);
}

/// A fixed mix of plain and tolerant entries over ~3 000 ticks.
fn tolerant_mix() -> Vec<(u64, u64, u32)> {
    let mut seed = 0x5EED_u64;
    let mut next = move |bound: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % bound
    };
    (0..400)
        .map(|i| {
            let due = 1 + next(3000);
            let slack = if i % 3 == 0 { 0 } else { next(200) };
            (due, due + slack, i)
        })
        .collect()
}

#[test]
fn tolerant_entries_come_at_the_same_ticks_however_the_wheel_is_polled() {
    let run = |steps: &mut dyn FnMut(u64) -> u64| {
        let mut wheel = Wheel::new();
        for (due, latest, id) in tolerant_mix() {
            wheel.insert_tolerant(due, latest, id);
        }
        let mut out = Vec::new();
        let mut now = 0;
        while now < 4000 {
            now = steps(now);
            out.extend(drain(&mut wheel, now));
        }
        assert!(wheel.is_empty());
        out
    };
    let tick_by_tick = run(&mut |now| now + 1);
    let mut jump = 0u64;
    let jumps = run(&mut |now| {
        jump = (jump * 7 + 13) % 97;
        now + 1 + jump
    });
    let at_once = run(&mut |_| 4000);
    assert_eq!(tick_by_tick, jumps);
    assert_eq!(tick_by_tick, at_once);

    let mix = tolerant_mix();
    // Each came inside its window, at an anchor: a tick some entry's window ends at.
    let ends: std::collections::HashSet<u64> = tick_by_tick.iter().map(|&(t, _)| t).collect();
    for &(tick, id) in &tick_by_tick {
        let (due, latest, _) = mix[id as usize];
        assert!(
            (due..=latest).contains(&tick),
            "{id}: {due}..={latest}, came at {tick}"
        );
    }
    for &tick in &ends {
        assert!(
            mix.iter().any(|&(_, latest, _)| latest == tick),
            "tick {tick} is no entry's latest tick"
        );
    }
    assert!(
        ends.len() < mix.len() / 2,
        "tolerant entries shared ticks: {}",
        ends.len()
    );
}

#[test]
fn tolerance_costs_plain_entries_no_bytes() {
    // Value, due tick, stamp: a tolerant entry's due tick lives beside the wheel, not in it.
    assert_eq!(size_of::<Entry<u64>>(), 24);
}

/// A poll that finds nothing due remembers when the next slot expires and skips the levels'
/// scan until then. An entry placed after it, in an earlier slot of any level, must still
/// fire at its own tick, and the entry that set the mark at its own.
#[test]
fn an_entry_placed_after_a_quiet_poll_fires_at_its_tick() {
    let cases = [
        (40u64, 39u64),
        (9_000, 100),
        (1 << 30, 5_000),
        (1 << 30, 1 << 20),
        (1 << 40, (1 << 36) + 3),
    ];
    for (later, earlier) in cases {
        let mut wheel = Wheel::new();
        wheel.insert(later, 'L');
        assert!(drain(&mut wheel, 10).is_empty(), "{later}");
        wheel.insert(earlier, 'E');
        assert!(
            drain(&mut wheel, earlier - 1).is_empty(),
            "{later}, {earlier}"
        );
        assert_eq!(drain(&mut wheel, earlier), vec![(earlier, 'E')], "{later}");
        assert!(
            drain(&mut wheel, later - 1).is_empty(),
            "{later}, {earlier}"
        );
        assert_eq!(drain(&mut wheel, later), vec![(later, 'L')], "{earlier}");
        assert!(wheel.is_empty());
    }
}
