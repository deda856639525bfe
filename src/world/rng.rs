//! Deterministic random numbers for world generation and game logic: SplitMix64.
//!
//! Owns nothing but a 64-bit state. Must never read the clock, the OS or any global: the same
//! seed always gives the same sequence, which is what makes a generated world and its game
//! logic reproducible.

use std::ops::Range;

/// The SplitMix64 increment (the golden ratio in 64-bit fixed point).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Scrambles a 64-bit value (the SplitMix64 finalizer): a cheap, good hash of a number.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small, fast, seeded generator (SplitMix64). Not for cryptography.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// An independent stream for one purpose and one subject (say, the decay delay of one
    /// item): the same `(seed, stream)` always gives the same sequence, whatever else ran.
    pub fn derive(seed: u64, stream: u64) -> Rng {
        Rng::new(mix(seed ^ mix(stream.wrapping_add(GAMMA))))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// A number in `0..n` (0 when `n` is 0). Multiply-shift: no division, negligible bias.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `range` (its start when the range is empty).
    pub fn range(&mut self, range: Range<u64>) -> u64 {
        range.start + self.below(range.end.saturating_sub(range.start))
    }

    /// `true` with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of a non-empty slice.
    ///
    /// # Panics
    /// If `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A signed offset in `-radius..=radius`.
    pub fn offset(&mut self, radius: u16) -> i32 {
        self.below(2 * u64::from(radius) + 1) as i32 - i32::from(radius)
    }
}
