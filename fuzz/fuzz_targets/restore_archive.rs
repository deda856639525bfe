//! The archive restore (with `restore --list` and the startup drop-in) under libFuzzer.
//!
//! Input: one selector byte choosing the format (`Format::ALL[selector % len]`: the name the
//! archive is given, which decides how it is read), then the archive's bytes. Any answer is
//! fine; a panic, an abort or the entry points disagreeing is the bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardloop::persist::archive::Format;

#[allow(dead_code)]
#[path = "../../tests/common/mutate.rs"]
mod mutate;

#[allow(dead_code)]
#[path = "../../tests/common/attempt.rs"]
mod attempt;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, archive)) = data.split_first() else {
        return;
    };
    let format = Format::ALL[usize::from(selector) % Format::ALL.len()];
    if let attempt::Outcome::Disagreed(why) = attempt::restore_archive(archive, format) {
        panic!("{why}");
    }
});
