//! The fan-out's short way onto a connection, in three dense tables indexed by connection
//! slot or group:
//!
//! - [`Gate`], 16 bytes per connection slot: what queuing a broadcast checks — the slot's
//!   generation, whether the connection takes output, its unsent bytes, whether it waits for
//!   the tick or is in this iteration's Flush list, whether its soft-limit clock runs — and
//!   which deferred ranges ([`Deferrals`]) it is owed;
//! - [`Hot`], one 64-byte line per connection slot: the last few ranges of shared frames
//!   queued for it, by group;
//! - [`Deferrals`]: a group's whole range, recorded once for everyone who sees the whole
//!   group, and [`Groups`], which holds one reference to a group's frames however many
//!   connections hold ranges of it.
//!
//! Why: a crowd's move goes to every other player in it. Queuing a range on each player's
//! connection state in the session slab touched several cache lines per player, far apart,
//! and at a thousand connections most were misses. A line per connection made that one
//! miss; but a thousand lines are 64 KB, pushed out of cache between two Deltas phases by
//! the Flush phase's writes and the clients' reads, so a recipient still cost its line's
//! miss. A gate is a quarter of a line: a thousand fit in 16 KB, and a recipient who sees
//! the whole group costs its gate and one bit, its line is not touched. The deferred ranges
//! move onto the line (or into the connection's output queue, `Output`) when anything
//! touches the connection next — the Flush phase writing it, or anything else queued for it
//! — oldest first, so the order queued is the order sent.
//!
//! Owns the gates', lines' and deferrals' layout and the group table's references. Must
//! never decide a limit or touch a connection's state or socket: `Sessions` does both, and
//! keeps each gate's `pending` equal to what the connection holds unsent, its line and its
//! deferred ranges included (or, after a write the gate did not see, above it, never below).

use std::ops::Range;

use super::super::shared::SharedFrames;

/// Ranges a line holds before the next ones go to the connection's output queue.
const INLINE: usize = 4;

/// Deferrals open at once, at most: one bit each in a gate.
const DEFERRALS: usize = 16;

/// The gate takes output: it belongs to the open connection of its generation.
pub(super) const LIVE: u8 = 1;
/// Listed in the connections written at the next tick.
pub(super) const TICK: u8 = 2;
/// Listed in this iteration's Flush phase.
pub(super) const FLUSH: u8 = 4;
/// Unsent output over the soft limit: its clock runs.
pub(super) const OVER_SOFT: u8 = 8;
/// The connection's line holds ranges.
pub(super) const LINED: u8 = 16;

/// What queuing output for one connection slot checks, and the deferred ranges it is owed.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Gate {
    /// Bytes the connection holds unsent: its output queue, its line's ranges and its
    /// deferred ranges.
    pub(super) pending: usize,
    /// The generation of the connection the gate belongs to while [`LIVE`].
    pub(super) generation: u32,
    /// A bit per deferral ([`Deferrals`]) holding a range for this connection.
    pub(super) deferred: u16,
    pub(super) flags: u8,
}

const _: () = assert!(std::mem::size_of::<Gate>() == 16, "four gates a cache line");

impl Gate {
    /// A fresh gate for the connection of `generation`.
    pub(super) fn live(generation: u32) -> Gate {
        Gate {
            generation,
            flags: LIVE,
            ..Gate::default()
        }
    }

    /// Whether the gate is `conn`'s (by slot generation) and takes output.
    #[inline]
    pub(super) fn is_live(&self, generation: u32) -> bool {
        self.generation == generation && self.flags & LIVE != 0
    }

    /// Asks the processor to bring the gate into cache (the fan-out hints a few recipients
    /// ahead, so their misses overlap).
    #[inline(always)]
    pub(super) fn prefetch(&self) {
        crate::slab::prefetch(self);
    }
}

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

/// One connection slot's line: the last ranges queued for it.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hot {
    used: u8,
    inline: [Inline; INLINE],
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64, "one cache line");

impl Hot {
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

/// A deferral's place in [`Deferrals`], and its bit in a [`Gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DeferralId(u8);

impl DeferralId {
    /// Its bit in a gate's `deferred`.
    #[inline(always)]
    pub(super) fn bit(self) -> u16 {
        1 << self.0
    }
}

/// A range of one group's frames owed to every connection whose gate has its bit, recorded
/// once.
#[derive(Debug, Clone, Copy, Default)]
struct Deferral {
    group: u32,
    start: u32,
    end: u32,
    /// Connections owed the range, plus one while it is open (the fan-out may add more).
    members: u32,
    /// Whether the fan-out may still add connections: until its group is let go.
    open: bool,
    /// When it was opened: a connection owed several takes them oldest first.
    seq: u64,
}

/// The open deferrals: the fan-out's range for everyone who sees a whole group, kept here
/// instead of on each recipient's line until something touches that connection. Each holds
/// one reference to its group while any connection is owed its range or it is open.
#[derive(Debug, Default)]
pub(super) struct Deferrals {
    slots: [Deferral; DEFERRALS],
    /// A bit per slot in use.
    used: u16,
    next_seq: u64,
}

impl Deferrals {
    /// Opens a deferral of `start..end` of group `g`, taking a reference to the group;
    /// `None` when all are in use (the fan-out then queues on the lines, as without them).
    pub(super) fn open(
        &mut self,
        groups: &mut Groups,
        g: GroupId,
        start: u32,
        end: u32,
    ) -> Option<DeferralId> {
        let free = (!self.used).trailing_zeros() as usize;
        if free >= DEFERRALS {
            return None;
        }
        self.used |= 1 << free;
        self.slots[free] = Deferral {
            group: g.0,
            start,
            end,
            members: 1,
            open: true,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        groups.hold(g, 1);
        Some(DeferralId(free as u8))
    }

    /// One more connection is owed `d`'s range, which `d` must still hold for group `g`: a
    /// deferral id kept past its group's `unshare` could name a slot reopened for another
    /// group, so a debug build checks both.
    #[inline(always)]
    pub(super) fn join(&mut self, d: DeferralId, g: GroupId) {
        let slot = &mut self.slots[usize::from(d.0)];
        debug_assert!(
            slot.open && slot.group == g.0,
            "a deferral joined after its group was let go"
        );
        slot.members += 1;
    }

    /// `n` more connections are owed `d`'s range: [`Deferrals::join`] for a run of them
    /// (the fan-out's tight loop counts its joins and files them once).
    #[inline]
    pub(super) fn join_many(&mut self, d: DeferralId, g: GroupId, n: u32) {
        let slot = &mut self.slots[usize::from(d.0)];
        debug_assert!(
            n == 0 || (slot.open && slot.group == g.0),
            "a deferral joined after its group was let go"
        );
        slot.members += n;
    }

    /// The deferrals a connection may hold and still join `d`: every other slot opened no
    /// later than `d`. A gate's `deferred & !mask == 0` is then [`Deferrals::newer_than_all`]
    /// and "not already joined" in one test, worked out once for a run of connections.
    pub(super) fn joinable_with(&self, d: DeferralId) -> u16 {
        let seq = self.slots[usize::from(d.0)].seq;
        let mut mask = 0;
        for (k, slot) in self.slots.iter().enumerate() {
            if k != usize::from(d.0) && slot.seq <= seq {
                mask |= 1 << k;
            }
        }
        mask
    }

    /// One connection is done with `d` (it took the range, or dropped it); the last one
    /// out, once `d` is closed, frees it and lets go of its group.
    pub(super) fn leave(&mut self, d: DeferralId, groups: &mut Groups) {
        let slot = &mut self.slots[usize::from(d.0)];
        slot.members -= 1;
        if slot.members == 0 {
            self.used &= !d.bit();
            groups.release(GroupId(slot.group));
        }
    }

    /// The fan-out is done with group `g`: its open deferrals take no more connections.
    pub(super) fn close_group(&mut self, g: GroupId, groups: &mut Groups) {
        // Only the places in use: most groups (one mover seen by nobody) opened none.
        let mut in_use = self.used;
        while in_use != 0 {
            let d = DeferralId(in_use.trailing_zeros() as u8);
            in_use &= in_use - 1;
            let slot = &mut self.slots[usize::from(d.0)];
            if slot.open && slot.group == g.0 {
                slot.open = false;
                self.leave(d, groups);
            }
        }
    }

    /// `d`'s group and bytes.
    #[inline]
    pub(super) fn range(&self, d: DeferralId) -> (GroupId, Range<usize>) {
        let slot = &self.slots[usize::from(d.0)];
        (GroupId(slot.group), slot.start as usize..slot.end as usize)
    }

    /// The oldest of the deferrals in `mask`, if any.
    #[inline]
    pub(super) fn oldest(&self, mask: u16) -> Option<DeferralId> {
        if mask == 0 {
            return None;
        }
        if mask.is_power_of_two() {
            return Some(DeferralId(mask.trailing_zeros() as u8));
        }
        (0..DEFERRALS as u8)
            .filter(|&k| mask & (1 << k) != 0)
            .min_by_key(|&k| self.slots[usize::from(k)].seq)
            .map(DeferralId)
    }

    /// Whether `d` was opened after every deferral in `mask` (joining it then keeps the
    /// connection's ranges in the order queued).
    #[inline]
    pub(super) fn newer_than_all(&self, d: DeferralId, mask: u16) -> bool {
        let seq = self.slots[usize::from(d.0)].seq;
        let mut left = mask;
        while left != 0 {
            if self.slots[left.trailing_zeros() as usize].seq > seq {
                return false;
            }
            left &= left - 1;
        }
        true
    }

    /// Bytes in the ranges of the deferrals in `mask`.
    #[inline]
    pub(super) fn bytes(&self, mask: u16) -> usize {
        let (mut left, mut bytes) = (mask, 0);
        while left != 0 {
            // Most often none (every send the long way asks), else one or two.
            let slot = &self.slots[left.trailing_zeros() as usize];
            left &= left - 1;
            bytes += (slot.end - slot.start) as usize;
        }
        bytes
    }

    /// Deferrals in use now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.used.count_ones() as usize
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

    /// A deferral id kept past its group's `unshare` names a slot that may be reopened for
    /// another group; a debug build refuses to join it rather than owe someone the wrong bytes.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a deferral joined after its group was let go")]
    fn joining_a_deferral_its_group_let_go_of_is_caught_in_a_debug_build() {
        let mut groups = Groups::default();
        let mut deferrals = Deferrals::default();
        let frames = SharedFrames::new(&[0; 100]);
        let (a, b) = (groups.share(frames.clone()), groups.share(frames));
        let stale = deferrals.open(&mut groups, a, 0, 10).unwrap();
        deferrals.close_group(a, &mut groups);
        let reopened = deferrals.open(&mut groups, b, 0, 20).unwrap();
        assert_eq!(reopened, stale, "the same place, now b's");
        deferrals.join(stale, a);
    }

    #[test]
    fn a_deferral_is_taken_oldest_first_and_lets_go_of_its_group_when_closed_and_left() {
        let mut groups = Groups::default();
        let mut deferrals = Deferrals::default();
        let frames = SharedFrames::new(&[0; 100]);
        let (a, b) = (groups.share(frames.clone()), groups.share(frames.clone()));
        let first = deferrals.open(&mut groups, a, 0, 10).unwrap();
        let second = deferrals.open(&mut groups, b, 10, 30).unwrap();
        deferrals.join(first, a);
        deferrals.join(second, b);
        assert_eq!(deferrals.bytes(first.bit() | second.bit()), 30);
        // The first one freed and its place reused: the newer deferral in the lower place
        // still comes after the older one.
        deferrals.close_group(a, &mut groups);
        deferrals.leave(first, &mut groups);
        assert_eq!(deferrals.len(), 1);
        let third = deferrals.open(&mut groups, a, 30, 40).unwrap();
        assert_eq!(third, first, "the freed place");
        deferrals.join(third, a);
        let both = second.bit() | third.bit();
        assert_eq!(deferrals.oldest(both), Some(second));
        assert_eq!(deferrals.oldest(third.bit()), Some(third));
        assert_eq!(deferrals.oldest(0), None);
        assert_eq!(deferrals.range(third), (a, 30..40));
        // Left by its last connection but still open: it keeps its group.
        deferrals.leave(second, &mut groups);
        assert_eq!(deferrals.len(), 2);
        groups.release(b);
        assert_eq!(groups.len(), 2, "the open deferral holds group b");
        deferrals.close_group(b, &mut groups);
        assert_eq!((deferrals.len(), groups.len()), (1, 1));
        deferrals.close_group(a, &mut groups);
        deferrals.leave(third, &mut groups);
        groups.release(a);
        assert_eq!((deferrals.len(), groups.len()), (0, 0));
        assert_eq!(frames.holders(), 1);
    }

    #[test]
    fn deferrals_run_out_rather_than_grow() {
        let mut groups = Groups::default();
        let mut deferrals = Deferrals::default();
        let g = groups.share(SharedFrames::new(&[0; 10]));
        for _ in 0..DEFERRALS {
            assert!(deferrals.open(&mut groups, g, 0, 10).is_some());
        }
        assert_eq!(deferrals.open(&mut groups, g, 0, 10), None, "all in use");
        deferrals.close_group(g, &mut groups);
        assert_eq!(deferrals.len(), 0, "no connection joined: all freed");
        assert!(deferrals.open(&mut groups, g, 0, 10).is_some());
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
