//! What the loop is doing right now, readable from any thread: the [`Phase`] it is in and the
//! code running in that phase ([`Doing`]: a timer callback by its creation site, a task by its
//! spawn site, a posted closure by its post site, a packet handler by its packet id), so that
//! a watchdog ([`super::watchdog`]) can name the code a stuck loop is stuck in.
//!
//! The loop writes two relaxed atomics — the phase as each starts, the running code before and
//! after each callback, poll, closure or handler — on a line of its own that only a watchdog
//! reads, a few times a second: cheap enough for every build. The two are written and read
//! apart, so a reader may pair a phase with the code of the phase before; a stuck loop stays
//! put, which is when they are read.
//!
//! Owns the encoding. Must never block, allocate, or be read on the loop's hot paths.

use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use super::phase::Phase;

/// The code running in the loop's current phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doing {
    /// Between callbacks: the phase's own work (turning the wheel, reading sockets, ...).
    Nothing,
    /// A timer callback, by the site that created the timer.
    Timer(&'static Location<'static>),
    /// A task poll, by the site that spawned it.
    Task(&'static Location<'static>),
    /// A closure posted from another thread, by the site that posted it.
    Posted(&'static Location<'static>),
    /// A packet handler, by its packet id.
    Handler(u8),
}

/// "a timer callback created at src/x.rs:3:9", for a log line.
impl fmt::Display for Doing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Doing::Nothing => f.write_str("no callback (the phase's own work)"),
            Doing::Timer(site) => write!(f, "a timer callback created at {site}"),
            Doing::Task(site) => write!(f, "a task spawned at {site}"),
            Doing::Posted(site) => write!(f, "a closure posted at {site}"),
            Doing::Handler(id) => write!(f, "the handler of packet 0x{id:02x}"),
        }
    }
}

// `Doing` in one word, so that a reader never pairs a kind with another kind's payload. A
// `Location` is at least 4-aligned (it holds a `&str` and two `u32`s), so a pointer to one has
// its two low bits clear: they carry the kind of site (1 timer, 2 task, 3 posted). A word whose
// low bits are 0 is `Nothing` when zero, else a handler: (id + 1) << 2.
const TAG_BITS: usize = 0b11;
const TIMER: usize = 1;
const TASK: usize = 2;
const POSTED: usize = 3;
const _: () = assert!(std::mem::align_of::<Location<'static>>() > TAG_BITS);

/// No phase: the loop is between iterations (parked, or letting tokio poll its reactor).
const NO_PHASE: u8 = u8::MAX;

fn encode(doing: Doing) -> usize {
    let site =
        |location: &'static Location<'static>, tag| std::ptr::from_ref(location) as usize | tag;
    match doing {
        Doing::Nothing => 0,
        Doing::Timer(location) => site(location, TIMER),
        Doing::Task(location) => site(location, TASK),
        Doing::Posted(location) => site(location, POSTED),
        Doing::Handler(id) => (usize::from(id) + 1) << 2,
    }
}

fn decode(word: usize) -> Doing {
    let tag = word & TAG_BITS;
    if tag == 0 {
        return match word >> 2 {
            0 => Doing::Nothing,
            id => Doing::Handler(u8::try_from(id - 1).unwrap_or(u8::MAX)),
        };
    }
    let pointer = (word & !TAG_BITS) as *const Location<'static>;
    // SAFETY: a word with a non-zero tag is only ever made by `encode` from a
    // `&'static Location<'static>` (the tag bits cleared here are the ones `encode` set in its
    // always-clear low bits), so the pointer is non-null, aligned and valid for 'static.
    let location: &'static Location<'static> = unsafe { &*pointer };
    match tag {
        TIMER => Doing::Timer(location),
        TASK => Doing::Task(location),
        _ => Doing::Posted(location),
    }
}

/// The loop's current phase and code, as two atomics (see the module doc).
pub(crate) struct Now {
    phase: AtomicU8,
    doing: AtomicUsize,
}

impl Default for Now {
    fn default() -> Now {
        Now {
            phase: AtomicU8::new(NO_PHASE),
            doing: AtomicUsize::new(0),
        }
    }
}

impl Now {
    /// The loop entered `phase` (or, `None`, left the iteration).
    pub(crate) fn enter(&self, phase: Option<Phase>) {
        let code = phase.map_or(NO_PHASE, |p| p as u8);
        self.phase.store(code, Ordering::Relaxed);
    }

    /// The loop starts running `doing` (or, [`Doing::Nothing`], finished it).
    pub(crate) fn run(&self, doing: Doing) {
        self.doing.store(encode(doing), Ordering::Relaxed);
    }

    /// The phase and the code, as last written.
    pub(crate) fn read(&self) -> (Option<Phase>, Doing) {
        let phase = Phase::ALL
            .get(usize::from(self.phase.load(Ordering::Relaxed)))
            .copied();
        (phase, decode(self.doing.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_code_survives_the_one_word() {
        let here = Location::caller();
        for doing in [
            Doing::Nothing,
            Doing::Timer(here),
            Doing::Task(here),
            Doing::Posted(here),
            Doing::Handler(0),
            Doing::Handler(0x02),
            Doing::Handler(0xff),
        ] {
            assert_eq!(decode(encode(doing)), doing);
        }
        let now = Now::default();
        assert_eq!(now.read(), (None, Doing::Nothing));
        now.enter(Some(Phase::Deltas));
        now.run(Doing::Handler(7));
        assert_eq!(now.read(), (Some(Phase::Deltas), Doing::Handler(7)));
        assert_eq!(
            Doing::Timer(here).to_string(),
            format!("a timer callback created at {here}")
        );
    }
}
