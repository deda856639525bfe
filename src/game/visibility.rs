//! Who can see a spot: logged-in players filed by the sector they stand in, so that finding
//! everyone within [`VIEW_RANGE`] of a spot reads the few sectors that can hold such a
//! player instead of every player in the world.
//!
//! Owns this index and nothing else. It must never decide who is logged in or where anyone
//! stands — [`Players`](super::players::Players) tells it on login, on every move and on
//! leaving — and it must never answer differently from a scan of every player, in content
//! or in order.
//!
//! Invariant: a filed player is in exactly one list, the list of the sector holding its
//! current location, with that location; every list is sorted by serial and none is empty.
//! Answers are the lists of the sectors around a spot merged by serial, so they come out in
//! serial order: the order the player table (a `BTreeMap`) has always broadcast in.
//!
//! Which sectors: those overlapping the square of side `2·VIEW_RANGE + 1` centred on the
//! spot, computed per spot from [`SECTOR_SIZE`] and [`VIEW_RANGE`]. Along one axis that is
//! at most [`SPAN`] sectors; with 16-tile sectors and an 18-tile range, 3 usually and 4
//! when the spot is near a sector's edge (so a fixed 3 × 3 would miss players).

use std::ops::RangeInclusive;

use crate::world::{IdMap, Location, MapId, SECTOR_SIZE, SectorId, Serial};

/// Players see mobiles and hear speech within this many tiles.
pub const VIEW_RANGE: u16 = 18;

/// The most sectors a view square overlaps along one axis: a stretch of `2·VIEW_RANGE`
/// tiles between its first and last tile crosses at most `⌈2·VIEW_RANGE / SECTOR_SIZE⌉`
/// sector edges.
const SPAN: usize = (2 * VIEW_RANGE).div_ceil(SECTOR_SIZE) as usize + 1;

/// The most sectors one answer reads.
const MAX_SECTORS: usize = SPAN * SPAN;

/// One filed player: who to send to (`T`: a connection in the shard) and where it stands.
#[derive(Clone, Copy, Debug)]
struct Seat<T> {
    serial: Serial,
    who: T,
    at: Location,
}

/// The players of each occupied sector, each list sorted by serial.
#[derive(Debug)]
pub(super) struct Visibility<T> {
    sectors: IdMap<SectorId, Vec<Seat<T>>>,
}

impl<T> Default for Visibility<T> {
    fn default() -> Self {
        Visibility {
            sectors: IdMap::default(),
        }
    }
}

impl<T: Copy> Visibility<T> {
    /// Files `serial` at `at`, reached through `who` (replacing an earlier filing there).
    pub(super) fn insert(&mut self, serial: Serial, who: T, at: Location) {
        let seat = Seat { serial, who, at };
        let list = self.sectors.entry(sector_of(&at)).or_default();
        match position(list, serial) {
            Ok(i) => list[i] = seat,
            Err(i) => list.insert(i, seat),
        }
    }

    /// Unfiles `serial`, filed at `at`; true if it was there.
    pub(super) fn remove(&mut self, serial: Serial, at: Location) -> bool {
        self.take(serial, at).is_some()
    }

    /// `serial` moved from `from` to `to`: a new spot in the same list, or another list
    /// when it crossed into another sector.
    pub(super) fn relocate(&mut self, serial: Serial, from: Location, to: Location) {
        if sector_of(&from) == sector_of(&to) {
            if let Some(seat) = self.seat_mut(serial, from) {
                seat.at = to;
            }
        } else if let Some(seat) = self.take(serial, from) {
            self.insert(serial, seat.who, to);
        }
    }

    /// Everyone filed within [`VIEW_RANGE`] of `at` (the larger of |dx| and |dy|, same
    /// map), by serial.
    pub(super) fn in_range(&self, at: Location) -> impl Iterator<Item = (Serial, T)> + '_ {
        let mut merge = Merge::default();
        for id in sectors_seeing(at) {
            if let Some(list) = self.sectors.get(&id) {
                merge.push(list);
            }
        }
        merge
            .filter(move |seat| sees(&seat.at, &at))
            .map(|seat| (seat.serial, seat.who))
    }

    /// Hands `visit` everyone filed on `map` within `xs` × `ys`, with where they stand, and
    /// who is filed `ahead` places further in the same sector (a hint for what comes next):
    /// sector by sector, each by serial (the same order on every run, not one merged
    /// order). The fan-out asks it once for a group of changes instead of once per change,
    /// and reads each sector's list in place, copying nothing. A sector wholly inside the
    /// area (in a crowd, every sector the crowd stands in) is read without a test per player.
    #[cfg(test)]
    pub(super) fn visit_area(
        &self,
        map: MapId,
        xs: RangeInclusive<u16>,
        ys: RangeInclusive<u16>,
        ahead: usize,
        mut visit: impl FnMut(Serial, T, Location, Option<T>),
    ) {
        self.visit_area_runs(map, xs, ys, ahead, |seen| match seen {
            Visit::One(serial, who, at, next) => visit(serial, who, at, next),
            Visit::Run(run) => {
                for k in 0..run.len() {
                    if let Some((serial, who, at)) = run.get(k) {
                        visit(serial, who, at, run.who(k + ahead));
                    }
                }
            }
        });
    }

    /// `visit_area` (a test's view of this walk), but each sector lying wholly inside the
    /// area handed over in one piece ([`Visit::Run`]: its players by serial), the others
    /// player by player ([`Visit::One`]); the same players in the same order. Why: in a
    /// crowd the fan-out queues most of a sector's players in a loop of its own, with the
    /// per-group work hoisted out of it.
    pub(super) fn visit_area_runs(
        &self,
        map: MapId,
        xs: RangeInclusive<u16>,
        ys: RangeInclusive<u16>,
        ahead: usize,
        mut visit: impl FnMut(Visit<'_, T>),
    ) {
        let ((x0, x1), (y0, y1)) = ((*xs.start(), *xs.end()), (*ys.start(), *ys.end()));
        for x in x0 / SECTOR_SIZE..=x1 / SECTOR_SIZE {
            for y in y0 / SECTOR_SIZE..=y1 / SECTOR_SIZE {
                let Some(list) = self.sectors.get(&SectorId { map, x, y }) else {
                    continue;
                };
                if within(x, x0, x1) && within(y, y0, y1) {
                    visit(Visit::Run(Run(list)));
                    continue;
                }
                for (k, seat) in list.iter().enumerate() {
                    if xs.contains(&seat.at.x) && ys.contains(&seat.at.y) {
                        let next = list.get(k + ahead).map(|s| s.who);
                        visit(Visit::One(seat.serial, seat.who, seat.at, next));
                    }
                }
            }
        }
    }

    fn seat_mut(&mut self, serial: Serial, at: Location) -> Option<&mut Seat<T>> {
        let list = self.sectors.get_mut(&sector_of(&at))?;
        let i = position(list, serial).ok()?;
        Some(&mut list[i])
    }

    /// Takes `serial`'s seat out of the list of `at`'s sector, dropping the list once empty.
    fn take(&mut self, serial: Serial, at: Location) -> Option<Seat<T>> {
        let id = sector_of(&at);
        let list = self.sectors.get_mut(&id)?;
        let seat = list.remove(position(list, serial).ok()?);
        if list.is_empty() {
            self.sectors.remove(&id);
        }
        Some(seat)
    }
}

/// What [`Visibility::visit_area_runs`] hands its visitor.
pub(super) enum Visit<'a, T> {
    /// One player: its serial, who it is reached through, where it stands, and who is filed
    /// a given number of places further in the same sector, if anyone.
    One(Serial, T, Location, Option<T>),
    /// Every player of one sector, by serial.
    Run(Run<'a, T>),
}

/// The players of one sector, by serial, read in place.
#[derive(Clone, Copy)]
pub(super) struct Run<'a, T>(&'a [Seat<T>]);

impl<T: Copy> Run<'_, T> {
    /// How many players.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// The `k`th player: serial, who, where it stands.
    #[inline]
    pub(super) fn get(&self, k: usize) -> Option<(Serial, T, Location)> {
        self.0.get(k).map(|seat| (seat.serial, seat.who, seat.at))
    }

    /// Who the `k`th player is reached through.
    #[inline]
    pub(super) fn who(&self, k: usize) -> Option<T> {
        self.0.get(k).map(|seat| seat.who)
    }

    /// The players from the `k`th on, serial, who and where: what the fan-out's tight loop
    /// reads.
    #[inline]
    pub(super) fn from(&self, k: usize) -> impl Iterator<Item = (Serial, T, Location)> + '_ {
        self.0[k..]
            .iter()
            .map(|seat| (seat.serial, seat.who, seat.at))
    }
}

/// Whether sector index `sector` along an axis lies wholly within tiles `lo..=hi`.
fn within(sector: u16, lo: u16, hi: u16) -> bool {
    let first = u32::from(sector) * u32::from(SECTOR_SIZE);
    u32::from(lo) <= first && first + u32::from(SECTOR_SIZE) - 1 <= u32::from(hi)
}

/// The game's range rule: same map, the larger of |dx| and |dy| at most [`VIEW_RANGE`].
fn sees(a: &Location, b: &Location) -> bool {
    a.distance(b).is_some_and(|d| d <= VIEW_RANGE)
}

fn position<T>(list: &[Seat<T>], serial: Serial) -> Result<usize, usize> {
    list.binary_search_by_key(&serial, |seat| seat.serial)
}

/// The sector of `at`: [`SectorId::of`] on the map, and the same arithmetic off it (the
/// internal map, out of bounds), so that every location has a list and the answer stays the
/// scan's for any location.
fn sector_of(at: &Location) -> SectorId {
    SectorId {
        map: at.map,
        x: at.x / SECTOR_SIZE,
        y: at.y / SECTOR_SIZE,
    }
}

/// The sectors of `at`'s map that overlap its view square.
fn sectors_seeing(at: Location) -> impl Iterator<Item = SectorId> {
    let ys = overlapped(at.y);
    overlapped(at.x).flat_map(move |x| ys.clone().map(move |y| SectorId { map: at.map, x, y }))
}

/// Sector indexes along one axis overlapping `v ± VIEW_RANGE` (clipped to the axis).
fn overlapped(v: u16) -> RangeInclusive<u16> {
    v.saturating_sub(VIEW_RANGE) / SECTOR_SIZE..=v.saturating_add(VIEW_RANGE) / SECTOR_SIZE
}

/// Up to [`MAX_SECTORS`] lists, each sorted by serial, read as one list in serial order:
/// each step takes the smallest head. No allocation.
struct Merge<'a, T> {
    /// `runs[..len]` are the non-empty rests of the lists; `heads[i]` is `runs[i][0]`'s
    /// serial, kept side by side so that finding the smallest reads one short array.
    runs: [&'a [Seat<T>]; MAX_SECTORS],
    heads: [Serial; MAX_SECTORS],
    len: usize,
}

impl<T> Default for Merge<'_, T> {
    fn default() -> Self {
        Merge {
            runs: [&[]; MAX_SECTORS],
            heads: [Serial(0); MAX_SECTORS],
            len: 0,
        }
    }
}

impl<'a, T> Merge<'a, T> {
    fn push(&mut self, run: &'a [Seat<T>]) {
        if let Some(first) = run.first() {
            self.runs[self.len] = run;
            self.heads[self.len] = first.serial;
            self.len += 1;
        }
    }

    /// The run with the smallest head.
    fn smallest(&self) -> Option<usize> {
        let heads = &self.heads[..self.len];
        let mut best = 0;
        for (i, head) in heads.iter().enumerate().skip(1) {
            if *head < heads[best] {
                best = i;
            }
        }
        (!heads.is_empty()).then_some(best)
    }
}

impl<'a, T> Iterator for Merge<'a, T> {
    type Item = &'a Seat<T>;

    fn next(&mut self) -> Option<&'a Seat<T>> {
        let i = self.smallest()?;
        let (seat, rest) = self.runs[i].split_first()?;
        if let Some(next) = rest.first() {
            self.runs[i] = rest;
            self.heads[i] = next.serial;
        } else {
            self.len -= 1;
            self.runs[i] = self.runs[self.len];
            self.heads[i] = self.heads[self.len];
        }
        Some(seat)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::world::MapId;

    /// The linear scan the index replaces: every player, in serial order, filtered by range.
    #[derive(Default)]
    struct Scan(BTreeMap<Serial, (u32, Location)>);

    impl Scan {
        fn in_range(&self, at: Location) -> Vec<(Serial, u32)> {
            let near = self.0.iter().filter(|(_, (_, p))| sees(p, &at));
            near.map(|(s, (who, _))| (*s, *who)).collect()
        }
    }

    /// Both the index and the scan, changed alike.
    #[derive(Default)]
    struct Both {
        index: Visibility<u32>,
        scan: Scan,
    }

    impl Both {
        fn apply(&mut self, op: &Op) {
            match *op {
                Op::Join(n, at) => {
                    let serial = Serial(n);
                    if let Some(&(_, old)) = self.scan.0.get(&serial) {
                        self.index.remove(serial, old);
                    }
                    self.index.insert(serial, n + 7, at);
                    self.scan.0.insert(serial, (n + 7, at));
                }
                Op::Step(n, dx, dy) => self.relocate(n, |at| at.offset_clamped(dx, dy)),
                Op::Jump(n, to) => self.relocate(n, |_| to),
                Op::Leave(n) => {
                    if let Some((_, at)) = self.scan.0.remove(&Serial(n)) {
                        assert!(self.index.remove(Serial(n), at));
                    }
                }
            }
        }

        fn relocate(&mut self, n: u32, to: impl FnOnce(Location) -> Location) {
            if let Some((_, at)) = self.scan.0.get_mut(&Serial(n)) {
                let from = *at;
                *at = to(from);
                self.index.relocate(Serial(n), from, *at);
            }
        }

        fn check(&self, at: Location) {
            let index: Vec<_> = self.index.in_range(at).collect();
            assert_eq!(index, self.scan.in_range(at), "around {at:?}");
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Join(u32, Location),
        Step(u32, i32, i32),
        Jump(u32, Location),
        Leave(u32),
    }

    impl Op {
        fn player(&self) -> u32 {
            match *self {
                Op::Join(n, _) | Op::Step(n, ..) | Op::Jump(n, _) | Op::Leave(n) => n,
            }
        }
    }

    /// Maps with sizes (two of them small, to crowd their edges), the internal map, and an
    /// unknown one.
    fn map() -> impl Strategy<Value = MapId> {
        prop_oneof![
            4 => Just(MapId::TOKUNO),
            2 => Just(MapId::TER_MUR),
            2 => Just(MapId::FELUCCA),
            1 => Just(MapId::INTERNAL),
            1 => Just(MapId(9)),
        ]
    }

    /// An edge coordinate of an axis `size` long, or any coordinate on it, or just past it.
    fn coordinate(size: u16) -> impl Strategy<Value = u16> {
        prop_oneof![
            3 => 0..size,
            2 => 0..40u16,
            2 => size.saturating_sub(40)..size,
            1 => size..size.saturating_add(40),
        ]
    }

    fn location() -> impl Strategy<Value = Location> {
        map().prop_flat_map(|map| {
            let (w, h) = map.size().unwrap_or((600, 600));
            (coordinate(w), coordinate(h)).prop_map(move |(x, y)| Location::new(x, y, 0, map))
        })
    }

    /// A spot in a 64 × 64 corner of Tokuno, where players stand close together.
    fn crowded() -> impl Strategy<Value = Location> {
        (1380..1448u16, 0..64u16).prop_map(|(x, y)| Location::new(x, y, 0, MapId::TOKUNO))
    }

    fn op() -> impl Strategy<Value = Op> {
        let player = 1..40u32;
        let spot = prop_oneof![location(), crowded()];
        prop_oneof![
            3 => (player.clone(), spot.clone()).prop_map(|(n, at)| Op::Join(n, at)),
            6 => (player.clone(), -20..=20i32, -20..=20i32).prop_map(|(n, dx, dy)| Op::Step(n, dx, dy)),
            2 => (player.clone(), spot).prop_map(|(n, at)| Op::Jump(n, at)),
            1 => player.prop_map(Op::Leave),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// After every change, around random spots and the changed player's, the index
        /// answers exactly what the scan answers, in the same order; at the end, around
        /// every player.
        #[test]
        fn the_index_answers_what_the_scan_answers(
            ops in prop::collection::vec(op(), 1..120),
            probes in prop::collection::vec(prop_oneof![location(), crowded()], 1..12),
        ) {
            let mut both = Both::default();
            for op in &ops {
                both.apply(op);
                let moved = both.scan.0.get(&Serial(op.player())).map(|&(_, at)| at);
                for at in probes.iter().copied().chain(moved) {
                    both.check(at);
                }
            }
            for &(_, at) in both.scan.0.values() {
                both.check(at);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// An area answers the players a scan finds standing in it (on its map, within its
        /// box), each once, sector by sector and by serial within a sector; the sectors
        /// wholly inside the box (copied without a test per player) included.
        #[test]
        fn an_area_answers_the_players_standing_in_it(
            ops in prop::collection::vec(op(), 1..120),
            corner in prop_oneof![location(), crowded()],
            width in 0..80u16,
            height in 0..80u16,
        ) {
            let mut both = Both::default();
            for op in &ops {
                both.apply(op);
            }
            let xs = corner.x..=corner.x.saturating_add(width);
            let ys = corner.y..=corner.y.saturating_add(height);
            let mut got = Vec::new();
            both.index.visit_area(corner.map, xs.clone(), ys.clone(), 3, |s, w, at, next| {
                got.push((s, w, at, next));
            });
            // The hint is who stands three places on in the same sector's list, if anyone.
            for (k, &(_, _, at, next)) in got.iter().enumerate() {
                let sector = (at.x / SECTOR_SIZE, at.y / SECTOR_SIZE);
                let list = both.index.sectors.get(&sector_of(&at)).unwrap();
                let here = list.iter().position(|seat| seat.serial == got[k].0).unwrap();
                prop_assert_eq!(next, list.get(here + 3).map(|seat| seat.who), "{:?}", sector);
            }
            let got: Vec<_> = got.into_iter().map(|(s, w, at, _)| (s, w, at)).collect();
            let mut want: Vec<_> = both
                .scan
                .0
                .iter()
                .filter(|(_, (_, at))| {
                    at.map == corner.map && xs.contains(&at.x) && ys.contains(&at.y)
                })
                .map(|(&serial, &(who, at))| (serial, who, at))
                .collect();
            // The scan's serial order, sector by sector (x, then y) as the index walks them.
            want.sort_by_key(|&(serial, _, at)| (at.x / SECTOR_SIZE, at.y / SECTOR_SIZE, serial));
            let key = |v: &[(Serial, u32, Location)]| -> Vec<_> {
                v.iter().map(|&(s, w, at)| (s, w, at.x, at.y)).collect()
            };
            prop_assert_eq!(key(&got), key(&want));
        }
    }

    #[test]
    fn no_view_spans_more_than_span_sectors_and_some_span_exactly_that() {
        let widths = (0..=u16::MAX).map(|v| overlapped(v).count());
        assert_eq!(widths.max(), Some(SPAN));
        // Three sectors a side would not do with these sizes: a spot on a sector's first
        // tile sees two sectors back and one ahead.
        assert_eq!(overlapped(10 * SECTOR_SIZE).count(), 4);
    }

    #[test]
    fn a_view_reaches_exactly_the_tiles_in_range() {
        let at = Location::new(10 * SECTOR_SIZE, 5 * SECTOR_SIZE + 15, 0, MapId::FELUCCA);
        let mut both = Both::default();
        let edge = [-19, -18, 18, 19];
        for (n, (&dx, &dy)) in edge
            .iter()
            .flat_map(|x| edge.iter().map(move |y| (x, y)))
            .enumerate()
        {
            let n = n as u32 + 1;
            both.apply(&Op::Join(n, at.offset_clamped(dx, dy)));
        }
        let seen: Vec<_> = both.index.in_range(at).map(|(s, _)| s.0).collect();
        // Only the four corners at ±18 on both axes.
        assert_eq!(seen, [6, 7, 10, 11]);
        both.check(at);
    }

    #[test]
    fn lists_come_and_go_with_their_players() {
        let mut index = Visibility::default();
        let a = Location::new(100, 100, 0, MapId::FELUCCA);
        let b = Location::new(200, 100, 0, MapId::FELUCCA);
        index.insert(Serial(1), 1u32, a);
        index.relocate(Serial(1), a, b);
        assert_eq!(index.sectors.len(), 1);
        assert!(index.remove(Serial(1), b));
        assert!(!index.remove(Serial(1), b));
        assert!(index.sectors.is_empty());
    }
}
