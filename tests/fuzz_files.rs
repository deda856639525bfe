//! Hostile files on every commit: a few hundred seeded mutations of real saves and archives
//! (see `common::mutate`) through the real entry points (`common::attempt`). Every case must
//! end in an answer — loaded, or refused with a message — never a panic, and the entry points
//! must agree. `examples/mutate_files.rs` runs the same engine a million times; a case that
//! ever fails there is added here by its seed.
//!
//! The seeds are real saves of the default world's generator (small, so a case costs about a
//! millisecond) and those saves packed in every archive format.

use std::panic::{AssertUnwindSafe, catch_unwind};

use shardloop::persist::archive::Format;

mod common;

use common::attempt::{self, Outcome};
use common::mutate::{Rng, SaveFiles, mutate_archive, mutate_save};

/// Cases per test: enough to reach every mutation kind many times, cheap enough for CI.
const SAVE_CASES: u64 = 400;
const ARCHIVE_CASES: u64 = 240;

/// Tally of outcomes; panics and disagreements are kept with the case that caused them.
#[derive(Default, Debug)]
struct Tally {
    accepted: u64,
    refused: u64,
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, case: String, run: impl FnOnce() -> Outcome) {
        match catch_unwind(AssertUnwindSafe(run)) {
            Ok(Outcome::Accepted) => self.accepted += 1,
            Ok(Outcome::Refused(why)) => {
                assert!(!why.trim().is_empty(), "{case}: a refusal with no reason");
                self.refused += 1;
            }
            Ok(Outcome::Disagreed(why)) => self.failures.push(format!("{case}: {why}")),
            Err(_) => self.failures.push(format!("{case}: PANICKED")),
        }
    }

    fn check(&self, what: &str) {
        assert!(
            self.failures.is_empty(),
            "{what}: {} of the cases failed:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        // Both kinds of answer must occur, or the mutations are not reaching the checks.
        assert!(self.refused > 0, "{what}: nothing was refused: {self:?}");
    }
}

#[test]
fn mutated_saves_are_loaded_or_refused_never_a_panic() {
    let seeds = [SaveFiles::real(1, 400, 60), SaveFiles::real(2, 60, 10)];
    let mut tally = Tally::default();
    for case in 0..SAVE_CASES {
        let mut rng = Rng::new(case);
        let seed = rng.pick(&seeds);
        let (save, what) = mutate_save(seed, &mut rng);
        tally.record(format!("save case {case} ({what})"), || {
            attempt::load(&save)
        });
    }
    tally.check("saves");
    // Resealed changes to names and positions leave valid saves: some must load.
    assert!(tally.accepted > 0, "no mutated save loaded: {tally:?}");
}

#[test]
fn mutated_archives_are_restored_or_refused_never_a_panic() {
    let save = SaveFiles::real(3, 300, 40);
    let packed: Vec<(Format, Vec<u8>)> = Format::ALL
        .iter()
        .map(|&format| (format, save.pack(format)))
        .collect();
    let mut tally = Tally::default();
    for case in 0..ARCHIVE_CASES {
        let mut rng = Rng::new(1_000_000 + case);
        let (format, bytes) = rng.pick(&packed);
        let (archive, what) = mutate_archive(&save, bytes, *format, &mut rng);
        tally.record(format!("archive case {case} ({format:?}, {what})"), || {
            attempt::restore_archive(&archive, *format)
        });
    }
    tally.check("archives");
}

#[test]
fn the_unmutated_seeds_are_accepted() {
    // The harness itself: an untouched save loads and every untouched archive restores, so
    // a refusal above is the mutation's doing.
    let save = SaveFiles::real(3, 300, 40);
    assert_eq!(attempt::load(&save), Outcome::Accepted);
    for format in Format::ALL {
        assert_eq!(
            attempt::restore_archive(&save.pack(format), format),
            Outcome::Accepted,
            "{format:?}"
        );
    }
}
