//! The save loader under libFuzzer.
//!
//! Input: one selector byte, then the bytes of one file of a save. The selector's low two
//! bits say which file they replace in a real save (0 the manifest, 1 items, 2 mobiles,
//! 3 spawners); bit 2 asks for the file to be *resealed* (its CRC and the manifest's entry
//! for it rewritten) so the mutation gets past the checksums to the decoder and the
//! structural checks. Any answer is fine; a panic or an abort is the bug.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../tests/common/mutate.rs"]
mod mutate;

#[allow(dead_code)]
#[path = "../../tests/common/attempt.rs"]
mod attempt;

fn seed() -> &'static mutate::SaveFiles {
    static SEED: OnceLock<mutate::SaveFiles> = OnceLock::new();
    SEED.get_or_init(|| mutate::SaveFiles::real(1, 400, 60))
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let mut save = seed().clone();
    match selector & 3 {
        0 => save.manifest = String::from_utf8_lossy(body).into_owned(),
        n => {
            let file = usize::from(n - 1);
            save.files[file].1 = body.to_vec();
            if selector & 4 != 0 {
                save.reseal(file);
            }
        }
    }
    let _ = attempt::load(&save);
});
