//! The spin before parking, and the rule that says when it is worth its CPU.
//!
//! After an outside event (a packet, a connection, a post) the loop may keep polling for up to
//! `server.spin_before_park` instead of parking, so that a client in a conversation with the
//! shard — whose next packet comes a few microseconds after the answer — finds it awake and is
//! spared the host's wake-up latency. Spinning costs the whole window whenever nothing comes,
//! and with many clients whose packets come at random tens of microseconds apart, most of the
//! window is paid for events that a park would have caught almost as soon: at 1,000 ping
//! clients the spin was a tenth of the shard's CPU per round trip (docs/performance.md, issue
//! 35 item 2).
//!
//! **The rule.** Every spin ends in one of two ways: an outside event came within half the
//! window (*quick*: the spin saved a park and a wake), or it came later or not at all (*slow*:
//! the spin cost more than it saved). The loop keeps a running share of quick spins (an
//! exponentially weighted average, each new spin weighing an eighth) and spins only while
//! that share is at least a half. A loop that stopped spinning tries one spin again after
//! every [`PROBE_EVERY`] events it parked on instead; one quick probe turns spinning back on
//! (at the threshold, so that one slow spin after it turns it off again). A park's own length
//! is not used to decide: it includes the host's wake-up latency (tens of microseconds on a
//! VM), so a quick client and a slow one look alike through it.
//!
//! `server.spin_before_park` stays the operator's bound: a window is never longer, and zero
//! turns the spin (and this rule) off. The rule reads no clock of its own: the loop hands it
//! the real time it read anyway, so the tests drive it with instants of their own.
//!
//! Owns: the spin window and the share of quick spins. Must never decide whether the loop
//! has work (the loop does) or read a clock.

use std::time::{Duration, Instant};

/// Fixed-point scale of the quick share: `SCALE` means every recent spin was quick.
const SCALE: u32 = 1024;
/// The share at and above which the loop spins: a half.
const THRESHOLD: u32 = SCALE / 2;
/// Each spin moves the share by an eighth of the way to 0 or to `SCALE`.
const WEIGHT_SHIFT: u32 = 3;
/// Events a loop that stopped spinning parks on before it tries one spin again.
pub(crate) const PROBE_EVERY: u32 = 32;

/// The spin window and whether spinning pays (see the module docs).
#[derive(Debug)]
pub(crate) struct Spin {
    /// The operator's bound on a window (`server.spin_before_park`); zero: never spin.
    limit: Duration,
    /// When the open window began (the outside event that opened it was seen), if one is open.
    opened: Option<Instant>,
    /// Share of recent spins that were quick, out of [`SCALE`].
    quick_share: u32,
    /// Events parked on, without a spin, since spinning stopped or the last probe.
    declined: u32,
}

impl Spin {
    /// A rule for windows of at most `limit`; it starts out spinning.
    pub(crate) fn new(limit: Duration) -> Spin {
        Spin {
            limit,
            opened: None,
            quick_share: SCALE,
            declined: 0,
        }
    }

    /// False when the operator turned the spin off: the loop then need not read the clock.
    pub(crate) fn configured(&self) -> bool {
        !self.limit.is_zero()
    }

    /// Whether the loop spins (true) or parks (false), asked at `now` at the end of an
    /// iteration that left nothing pending; `event`: an outside event woke the loop since the
    /// last time it asked.
    pub(crate) fn keep_polling(&mut self, now: Instant, event: bool) -> bool {
        if !self.configured() {
            return false;
        }
        if !event {
            return match self.opened {
                Some(opened) if now < opened + self.limit => true,
                Some(_) => {
                    // The window ran out with nothing in it.
                    self.opened = None;
                    self.record(false);
                    false
                }
                None => false,
            };
        }
        if let Some(opened) = self.opened.take() {
            self.record(now.saturating_duration_since(opened) <= self.quick());
        }
        if self.spinning() || self.probe_due() {
            self.opened = Some(now);
            return true;
        }
        false
    }

    /// True while recent spins paid (the share of quick ones is at least a half).
    pub(crate) fn spinning(&self) -> bool {
        self.quick_share >= THRESHOLD
    }

    /// An event that finds the loop spinning within this is a quick one: half the window.
    fn quick(&self) -> Duration {
        self.limit / 2
    }

    /// Not spinning: counts one more event parked on; true when it is time to try a spin.
    fn probe_due(&mut self) -> bool {
        self.declined += 1;
        if self.declined < PROBE_EVERY {
            return false;
        }
        self.declined = 0;
        true
    }

    /// One spin ended, quick or not.
    fn record(&mut self, quick: bool) {
        if quick && !self.spinning() {
            // A probe that paid: spin again, at the threshold.
            self.quick_share = THRESHOLD;
            self.declined = 0;
            return;
        }
        let target = if quick { SCALE } else { 0 };
        // Moves an eighth of the way (rounding away from the share, so it reaches both ends).
        let gap = self.quick_share.abs_diff(target);
        let step = gap.div_ceil(1 << WEIGHT_SHIFT);
        self.quick_share = if quick {
            self.quick_share + step
        } else {
            self.quick_share - step
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_micros(50);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A stand-in for the loop: outside events every `gap`, each handled at once, the loop
    /// asking after each event and again every microsecond while it spins. Returns, for each
    /// event, whether the loop was spinning when it came (its window still open).
    fn events_every(spin: &mut Spin, start: &mut Instant, gap: Duration, n: usize) -> Vec<bool> {
        let mut caught = Vec::with_capacity(n);
        for _ in 0..n {
            let mut polling = spin.opened.is_some();
            let mut t = *start;
            while polling && t + us(1) < *start + gap {
                t += us(1);
                polling = spin.keep_polling(t, false);
            }
            *start += gap;
            caught.push(polling);
            spin.keep_polling(*start, true);
        }
        caught
    }

    #[test]
    fn a_client_answering_within_microseconds_keeps_the_spin_on() {
        let mut spin = Spin::new(LIMIT);
        let mut t = Instant::now();
        let caught = events_every(&mut spin, &mut t, us(7), 1_000);
        assert!(
            caught[1..].iter().all(|&c| c),
            "every event after the first found the loop spinning"
        );
        assert!(spin.spinning());
    }

    #[test]
    fn events_slower_than_half_the_window_stop_the_spin_and_it_stays_stopped() {
        let mut spin = Spin::new(LIMIT);
        let mut t = Instant::now();
        // 40 µs apart: inside the 50 µs window (each spin catches its event), but later than
        // half of it, so each spin costs more than the park it saves.
        let caught = events_every(&mut spin, &mut t, us(40), 1_000);
        let first_park = caught[1..].iter().position(|&c| !c).map(|i| i + 1);
        assert_eq!(
            first_park,
            Some(7),
            "six slow spins take the share from 1 to under a half"
        );
        // From then on only the probes spin: one event in PROBE_EVERY, each probe slow.
        let spun = caught[first_park.unwrap()..].iter().filter(|&&c| c).count();
        let events = caught.len() - first_park.unwrap();
        assert!(
            spun <= events / PROBE_EVERY as usize + 1,
            "{spun} spins in {events} events after the spin stopped"
        );
        assert!(!spin.spinning());
    }

    #[test]
    fn windows_that_run_out_empty_stop_the_spin() {
        let mut spin = Spin::new(LIMIT);
        let mut t = Instant::now();
        // 200 µs apart: every window runs out with nothing in it.
        let caught = events_every(&mut spin, &mut t, us(200), 20);
        assert!(caught.iter().all(|&c| !c), "no event came during a window");
        assert!(!spin.spinning(), "six empty windows stop the spin");
        // Stopped: an event opens no window (until the next probe).
        let spun = (0..PROBE_EVERY - 1)
            .filter(|_| {
                t += us(200);
                spin.keep_polling(t, true)
            })
            .count();
        assert!(spun <= 1, "at most one probe in {} events", PROBE_EVERY - 1);
    }

    #[test]
    fn a_quick_probe_turns_the_spin_back_on() {
        let mut spin = Spin::new(LIMIT);
        let mut t = Instant::now();
        events_every(&mut spin, &mut t, us(200), 20);
        assert!(!spin.spinning());
        // The client turns chatty: its events come 5 µs apart. The loop parks on them until
        // a probe's window catches one, then spins for all of them again.
        let caught = events_every(&mut spin, &mut t, us(5), 200);
        let resumed = caught
            .iter()
            .position(|&c| c)
            .expect("a probe caught an event");
        assert!(
            resumed <= PROBE_EVERY as usize + 1,
            "resumed after {resumed} events"
        );
        assert!(
            caught[resumed..].iter().all(|&c| c),
            "spinning from then on"
        );
        assert!(spin.spinning());
    }

    #[test]
    fn a_window_is_never_longer_than_the_operators_bound() {
        let mut spin = Spin::new(LIMIT);
        let t = Instant::now();
        assert!(spin.keep_polling(t, true), "an event opens a window");
        assert!(spin.keep_polling(t + LIMIT - us(1), false));
        assert!(!spin.keep_polling(t + LIMIT, false), "closed at the bound");
        assert!(!spin.keep_polling(t + LIMIT + us(1), false));
    }

    #[test]
    fn zero_never_spins() {
        let mut spin = Spin::new(Duration::ZERO);
        let t = Instant::now();
        assert!(!spin.configured());
        assert!((0..100).all(|i| !spin.keep_polling(t + us(i), true)));
    }

    #[test]
    fn no_event_opens_no_window() {
        let mut spin = Spin::new(LIMIT);
        let t = Instant::now();
        // A timer's wake-up, or a park's deadline: the loop parks at once.
        assert!(!spin.keep_polling(t, false));
        assert!(spin.spinning(), "and nothing was learnt from it");
    }
}
