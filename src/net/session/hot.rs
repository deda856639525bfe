//! The fan-out's short way onto a connection: one 64-byte line per connection slot
//! ([`Hot`]) with what queuing a broadcast looks at — whether the connection takes output,
//! its unsent bytes, whether it waits for the tick or is in this iteration's Flush list,
//! whether its soft-limit clock runs — and the last few ranges of shared frames queued for
//! it, by group; and the table of those groups ([`Groups`]), which holds one reference to a
//! group's frames however many connections hold ranges of it.
//!
//! Why: a crowd's move goes to every other player in it. Queuing a range on each player's
//! connection state in the session slab touched several cache lines per player, far apart
//! (the slot's generation, the closing flag and unsent bytes, the soft-limit stamp, the
//! output queue's ring), and at a thousand connections most were misses: they were most of
//! the Deltas phase. The lines here are dense and indexed by slot, so a player costs one
//! line. The ranges move into the connection's output queue (`Output`) when the connection
//! is written, or as soon as anything else is queued for it, so the order queued is the
//! order sent.
//!
//! Owns the lines' layout and the group table's references. Must never decide a limit or
//! touch a connection's state or socket: `Sessions` does both, and keeps each line's
//! `pending` equal to what the connection holds unsent (or, after a write the line did not
//! see, above it, never below).

use std::ops::Range;

use super::super::shared::SharedFrames;

/// Ranges a line holds before the next ones go to the connection's output queue.
const INLINE: usize = 4;

/// The line takes output: it belongs to the open connection of its generation.
pub(super) const LIVE: u8 = 1;
/// Listed in the connections written at the next tick.
pub(super) const TICK: u8 = 2;
/// Listed in this iteration's Flush phase.
pub(super) const FLUSH: u8 = 4;
/// Unsent output over the soft limit: its clock runs.
pub(super) const OVER_SOFT: u8 = 8;

/// A group of shared frames in the table ([`Sessions::share`](super::Sessions::share)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupId(u32);

/// A range of one group's frames, queued on a line.
#[derive(Debug, Clone, Copy, Default)]
struct Inline {
    group: u32,
    start: u32,
    end: u32,
}

/// One connection slot's line.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hot {
    /// The generation of the connection the line belongs to while [`LIVE`].
    pub(super) generation: u32,
    pub(super) flags: u8,
    used: u8,
    /// Bytes the connection holds unsent, these ranges included.
    pub(super) pending: usize,
    inline: [Inline; INLINE],
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64, "one cache line");

impl Hot {
    /// A fresh line for the connection of `generation`.
    pub(super) fn live(generation: u32) -> Hot {
        Hot {
            generation,
            flags: LIVE,
            ..Hot::default()
        }
    }

    /// Whether the line is `conn`'s (by slot generation) and takes output.
    pub(super) fn is_live(&self, generation: u32) -> bool {
        self.generation == generation && self.flags & LIVE != 0
    }

    /// Appends `ranges` of group `g` (empty ones skipped, one continuing the last range of
    /// the same group joined to it); the references taken, one per new range. `None`, and
    /// nothing appended, if they do not fit. Written in place: the line is the one thing
    /// this touches.
    pub(super) fn push(&mut self, g: GroupId, ranges: &[Range<usize>]) -> Option<u32> {
        // First whether they fit, then the writes, so that a refusal changes nothing.
        let mut last = usize::from(self.used)
            .checked_sub(1)
            .map(|k| (self.inline[k].group, self.inline[k].end as usize));
        let mut added = 0;
        for range in ranges.iter().filter(|r| !r.is_empty()) {
            u32::try_from(range.end).ok()?;
            if last != Some((g.0, range.start)) {
                added += 1;
            }
            last = Some((g.0, range.end));
        }
        if usize::from(self.used) + added > INLINE {
            return None;
        }
        for range in ranges.iter().filter(|r| !r.is_empty()) {
            // Both ends fit in a u32: checked above, and start <= end.
            let (start, end) = (range.start as u32, range.end as u32);
            let used = usize::from(self.used);
            match used.checked_sub(1).map(|k| &mut self.inline[k]) {
                Some(back) if back.group == g.0 && back.end == start => back.end = end,
                _ => {
                    self.inline[used] = Inline {
                        group: g.0,
                        start,
                        end,
                    };
                    self.used += 1;
                }
            }
        }
        Some(added as u32)
    }

    /// Appends one non-empty range `start..end` of group `g` (joined to the last range when
    /// it continues it): [`Hot::push`] for the fan-out's common case, without its loops.
    /// `None`, and nothing appended, if the line is full; else the references taken (0 or 1).
    #[inline]
    pub(super) fn push_one(&mut self, g: GroupId, start: u32, end: u32) -> Option<u32> {
        let used = usize::from(self.used);
        if let Some(back) = used.checked_sub(1).map(|k| &mut self.inline[k])
            && back.group == g.0
            && back.end == start
        {
            back.end = end;
            return Some(0);
        }
        let free = self.inline.get_mut(used)?;
        *free = Inline {
            group: g.0,
            start,
            end,
        };
        self.used += 1;
        Some(1)
    }

    /// Asks the processor to bring the line into cache: it is queued output soon (the
    /// fan-out hints a few recipients ahead, so their lines' misses overlap).
    pub(super) fn prefetch(&self) {
        crate::slab::prefetch(self);
    }

    /// Whether it holds no range.
    pub(super) fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Bytes in the queued ranges.
    pub(super) fn inline_bytes(&self) -> usize {
        self.inline[..usize::from(self.used)]
            .iter()
            .map(|r| (r.end - r.start) as usize)
            .sum()
    }

    /// Takes the queued ranges out, oldest first: each range's group and bytes.
    pub(super) fn take(&mut self) -> impl Iterator<Item = (GroupId, Range<usize>)> + use<> {
        let (inline, used) = (self.inline, usize::from(self.used));
        self.used = 0;
        (0..used).map(move |k| {
            let r = inline[k];
            (GroupId(r.group), r.start as usize..r.end as usize)
        })
    }
}

/// The fan-out's groups of shared frames: one reference each, and how many queued ranges
/// (and the group's sharer) still use it. A group leaves the table when none does.
#[derive(Default)]
pub(super) struct Groups {
    slots: Vec<(Option<SharedFrames>, u32)>,
    free: Vec<u32>,
}

impl Groups {
    /// Files `frames`, held once by the caller until [`Groups::release`].
    pub(super) fn share(&mut self, frames: SharedFrames) -> GroupId {
        match self.free.pop() {
            Some(g) => {
                self.slots[g as usize] = (Some(frames), 1);
                GroupId(g)
            }
            None => {
                let g = u32::try_from(self.slots.len()).expect("fewer than 2^32 groups");
                self.slots.push((Some(frames), 1));
                GroupId(g)
            }
        }
    }

    /// `n` more ranges use group `g`.
    pub(super) fn hold(&mut self, g: GroupId, n: u32) {
        self.slots[g.0 as usize].1 += n;
    }

    /// One user of group `g` is done with it.
    pub(super) fn release(&mut self, g: GroupId) {
        let slot = &mut self.slots[g.0 as usize];
        slot.1 -= 1;
        if slot.1 == 0 {
            slot.0 = None;
            self.free.push(g.0);
        }
    }

    /// Group `g`'s frames.
    pub(super) fn frames(&self, g: GroupId) -> &SharedFrames {
        self.slots[g.0 as usize]
            .0
            .as_ref()
            .expect("a group in use has its frames")
    }

    /// Groups in the table now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // a slice of one range: what most pushes hand over
mod tests {
    use super::*;

    #[test]
    fn a_line_joins_a_continuing_range_and_refuses_what_does_not_fit() {
        let mut hot = Hot::default();
        let (a, b) = (GroupId(0), GroupId(1));
        assert_eq!(hot.push(a, &[0..10, 20..30]), Some(2));
        assert_eq!(hot.push(a, &[30..40]), Some(0), "continues the last range");
        assert_eq!(
            hot.push(b, &[40..50, 0..0]),
            Some(1),
            "another group; empty skipped"
        );
        assert_eq!(hot.inline_bytes(), 40);
        assert_eq!(hot.push(a, &[0..1, 5..6]), None, "two more do not fit");
        assert_eq!(hot.inline_bytes(), 40, "and nothing was appended");
        assert_eq!(hot.push(a, &[0..1]), Some(1));
        let taken: Vec<_> = hot.take().collect();
        assert_eq!(taken, [(a, 0..10), (a, 20..40), (b, 40..50), (a, 0..1)]);
        assert_eq!(hot.inline_bytes(), 0);
        assert_eq!(hot.push(a, &[0..usize::MAX]), None, "past u32: not here");
    }

    #[test]
    fn one_range_at_a_time_goes_on_a_line_as_a_slice_of_it_would() {
        let (a, b) = (GroupId(0), GroupId(1));
        let pushes = [
            (a, 0..10),
            (a, 10..20),
            (b, 20..30),
            (a, 20..25),
            (a, 0..4),
            (b, 0..1),
        ];
        let (mut one, mut slice) = (Hot::default(), Hot::default());
        for (g, r) in pushes {
            let by_one = one.push_one(g, r.start as u32, r.end as u32);
            assert_eq!(by_one, slice.push(g, &[r]), "the same references taken");
        }
        assert_eq!(one.push_one(b, 4, 9), None, "the line is full");
        assert_eq!(
            one.push_one(a, 4, 9),
            Some(0),
            "but a range continuing its last joins it"
        );
        let taken: Vec<_> = one.take().collect();
        assert_eq!(taken, [(a, 0..20), (b, 20..30), (a, 20..25), (a, 0..9)]);
        assert!(one.is_empty());
    }

    #[test]
    fn a_group_leaves_the_table_when_its_last_user_lets_go() {
        let mut groups = Groups::default();
        let frames = SharedFrames::new(b"abc");
        let g = groups.share(frames.clone());
        groups.hold(g, 2);
        assert_eq!(frames.holders(), 2, "one reference for the table");
        groups.release(g);
        groups.release(g);
        assert_eq!(groups.len(), 1);
        groups.release(g);
        assert_eq!((groups.len(), frames.holders()), (0, 1));
        let again = groups.share(frames.clone());
        assert_eq!(again, g, "its slot is reused");
    }
}
