//! `Pages`: the world's entity storage, a map from serial to entity kept in shared pages, so
//! that a save can hold the world as it was at one instant without copying it.
//!
//! Serials are cut into pages of `N` consecutive serials; each page is an `Arc` holding the
//! `N` slots. [`Pages::clone`] copies only the page table (one `Arc` count per page, about
//! 1,500 for the default world's items), and afterwards both copies share every page. A
//! change goes through [`Pages::get_mut`], `insert` or `remove`, which take the page with
//! `Arc::make_mut`: a page nobody else holds is changed in place, a shared one is copied
//! first (copy-on-write). So a clone never sees a later change, and the loop pays for a save
//! only in the pages it changes while the save is being written, one page at a time.
//!
//! Owns the storage and the sharing. Must never know what a serial means (ranges, kinds) nor
//! what the entities are: it is a map, with the map's operations.

use std::sync::Arc;

use super::entity::{Item, Mobile, Spawner};
use super::serial::{IdMap, Serial};

/// The world's items: 128 to a page (about 4 KB of slots), so that a save of the default
/// world shares about 1,500 pages and a change during a save copies 4 KB at most.
pub(crate) type ItemPages = Pages<Item, 128>;
/// The world's mobiles, 128 to a page as items.
pub(crate) type MobilePages = Pages<Mobile, 128>;
/// Spawning data: spawners are a few items scattered over the item serials, so they are
/// packed 64 to a page by slot rather than paged by serial (about 30 pages for the default
/// world's 1,795, where pages by serial would be one each).
pub(crate) type SpawnerPages = Packed<Spawner, 64>;

/// A map from serial to `T` in pages of `N` consecutive serials (`N` a power of two), shared
/// between clones until one of them changes a page.
#[derive(Clone)]
pub(crate) struct Pages<T, const N: usize> {
    pages: IdMap<u32, Arc<Page<T, N>>>,
    len: usize,
}

#[derive(Clone)]
struct Page<T, const N: usize> {
    /// Slots in use: a page that empties is dropped.
    live: usize,
    slots: [Option<T>; N],
}

impl<T, const N: usize> Page<T, N> {
    fn empty() -> Page<T, N> {
        Page {
            live: 0,
            slots: std::array::from_fn(|_| None),
        }
    }
}

/// Which page a serial is on, and where on it.
fn split<const N: usize>(serial: Serial) -> (u32, usize) {
    const { assert!(N.is_power_of_two() && N <= 1 << 16) };
    let n = N as u32;
    (serial.0 / n, (serial.0 % n) as usize)
}

impl<T, const N: usize> Default for Pages<T, N> {
    fn default() -> Self {
        Pages {
            pages: IdMap::default(),
            len: 0,
        }
    }
}

impl<T, const N: usize> Pages<T, N> {
    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Pages in use.
    pub(crate) fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Room for `more` entries without growing the page table (when they are consecutive).
    pub(crate) fn reserve(&mut self, more: usize) {
        self.pages.reserve(more.div_ceil(N));
    }

    /// The entry of `serial`.
    pub(crate) fn get(&self, serial: &Serial) -> Option<&T> {
        let (page, slot) = split::<N>(*serial);
        self.pages.get(&page)?.slots[slot].as_ref()
    }

    /// An entry for `serial` exists.
    pub(crate) fn contains_key(&self, serial: &Serial) -> bool {
        self.get(serial).is_some()
    }

    /// Every entry with its serial, in an order that depends only on what was inserted and
    /// removed (page by page, each page in serial order).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Serial, &T)> {
        self.pages.iter().flat_map(|(&page, p)| {
            let base = page * N as u32;
            (p.slots.iter().enumerate())
                .filter_map(move |(i, slot)| Some((Serial(base + i as u32), slot.as_ref()?)))
        })
    }

    /// Every entry, in [`iter`](Self::iter)'s order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.pages.values().flat_map(|p| p.slots.iter().flatten())
    }

    /// Every serial, in [`iter`](Self::iter)'s order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = Serial> + '_ {
        self.iter().map(|(serial, _)| serial)
    }
}

impl<T: Clone, const N: usize> Pages<T, N> {
    /// The entry of `serial`, to change. Copies its page first if a clone shares it.
    pub(crate) fn get_mut(&mut self, serial: &Serial) -> Option<&mut T> {
        let (page, slot) = split::<N>(*serial);
        let page = self.pages.get_mut(&page)?;
        // Checked before `make_mut`, so that looking for a missing entry copies nothing.
        page.slots[slot].as_ref()?;
        Arc::make_mut(page).slots[slot].as_mut()
    }

    /// Sets the entry of `serial`; the one it replaces, if any.
    pub(crate) fn insert(&mut self, serial: Serial, value: T) -> Option<T> {
        let (page, slot) = split::<N>(serial);
        let page = self
            .pages
            .entry(page)
            .or_insert_with(|| Arc::new(Page::empty()));
        let page = Arc::make_mut(page);
        let old = page.slots[slot].replace(value);
        if old.is_none() {
            page.live += 1;
            self.len += 1;
        }
        old
    }

    /// Takes the entry of `serial` out.
    pub(crate) fn remove(&mut self, serial: &Serial) -> Option<T> {
        let (key, slot) = split::<N>(*serial);
        let page = self.pages.get_mut(&key)?;
        page.slots[slot].as_ref()?;
        let page = Arc::make_mut(page);
        let old = page.slots[slot].take();
        page.live -= 1;
        self.len -= 1;
        if page.live == 0 {
            self.pages.remove(&key);
        }
        old
    }
}

/// A map from serial to `T` for entries scattered thinly over the serials: each entry takes
/// a free slot in [`Pages`] of its own, found through an index from serial to slot. Clones
/// share the pages as `Pages` clones do (the index is plain numbers, copied).
#[derive(Clone)]
pub(crate) struct Packed<T, const N: usize> {
    slots: Pages<T, N>,
    index: IdMap<Serial, u32>,
    /// Slots given back by `remove`, taken again before new ones.
    free: Vec<u32>,
    next: u32,
}

impl<T, const N: usize> Default for Packed<T, N> {
    fn default() -> Self {
        Packed {
            slots: Pages::default(),
            index: IdMap::default(),
            free: Vec::new(),
            next: 0,
        }
    }
}

impl<T, const N: usize> Packed<T, N> {
    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Pages in use.
    pub(crate) fn page_count(&self) -> usize {
        self.slots.page_count()
    }

    /// The entry of `serial`.
    pub(crate) fn get(&self, serial: &Serial) -> Option<&T> {
        self.slots.get(&Serial(*self.index.get(serial)?))
    }

    /// An entry for `serial` exists.
    pub(crate) fn contains_key(&self, serial: &Serial) -> bool {
        self.index.contains_key(serial)
    }

    /// Every entry, in an order that depends only on what was inserted and removed.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.values()
    }
}

impl<T: Clone, const N: usize> Packed<T, N> {
    /// The entry of `serial`, to change. Copies its page first if a clone shares it.
    pub(crate) fn get_mut(&mut self, serial: &Serial) -> Option<&mut T> {
        self.slots.get_mut(&Serial(*self.index.get(serial)?))
    }

    /// Sets the entry of `serial`; the one it replaces, if any.
    pub(crate) fn insert(&mut self, serial: Serial, value: T) -> Option<T> {
        let slot = match self.index.get(&serial) {
            Some(&slot) => slot,
            None => {
                let slot = self.free.pop().unwrap_or_else(|| {
                    self.next += 1;
                    self.next - 1
                });
                self.index.insert(serial, slot);
                slot
            }
        };
        self.slots.insert(Serial(slot), value)
    }

    /// Takes the entry of `serial` out.
    pub(crate) fn remove(&mut self, serial: &Serial) -> Option<T> {
        let slot = self.index.remove(serial)?;
        self.free.push(slot);
        self.slots.remove(&Serial(slot))
    }
}

impl<T: PartialEq, const N: usize> PartialEq for Packed<T, N> {
    /// The same entries under the same serials (whatever slots they sit in).
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.index.keys().all(|s| self.get(s) == other.get(s))
    }
}

impl<T: PartialEq, const N: usize> PartialEq for Pages<T, N> {
    /// The same entries under the same serials (however the pages are shared).
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|(s, v)| other.get(&s) == Some(v))
    }
}

impl<T, const N: usize> std::ops::Index<&Serial> for Pages<T, N> {
    type Output = T;

    /// # Panics
    /// If there is no entry for `serial`.
    fn index(&self, serial: &Serial) -> &T {
        self.get(serial).expect("no entry for this serial")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Small = Pages<u32, 4>;

    fn filled(serials: impl IntoIterator<Item = u32>) -> Small {
        let mut pages = Small::default();
        for s in serials {
            pages.insert(Serial(s), s * 10);
        }
        pages
    }

    #[test]
    fn behaves_as_a_map() {
        let mut pages = filled([1, 2, 9, 1000]);
        assert_eq!(pages.len(), 4);
        assert_eq!(pages.page_count(), 3);
        assert_eq!(pages.get(&Serial(9)), Some(&90));
        assert_eq!(pages.get(&Serial(10)), None);
        assert_eq!(pages.insert(Serial(9), 91), Some(90));
        assert_eq!(pages.len(), 4);
        *pages.get_mut(&Serial(2)).unwrap() = 21;
        assert_eq!(pages.remove(&Serial(1000)), Some(10000));
        assert_eq!(pages.remove(&Serial(1000)), None);
        assert_eq!(pages.page_count(), 2, "an emptied page is dropped");
        let mut all: Vec<_> = pages.iter().map(|(s, &v)| (s.0, v)).collect();
        all.sort();
        assert_eq!(all, [(1, 10), (2, 21), (9, 91)]);
    }

    #[test]
    fn a_clone_keeps_what_it_saw_while_the_original_changes() {
        let mut live = filled(0..64);
        let frozen = live.clone();
        *live.get_mut(&Serial(5)).unwrap() = 7;
        live.remove(&Serial(6));
        live.insert(Serial(100), 1);
        assert_eq!(frozen.get(&Serial(5)), Some(&50));
        assert_eq!(frozen.get(&Serial(6)), Some(&60));
        assert_eq!(frozen.get(&Serial(100)), None);
        assert_eq!(frozen.len(), 64);
        assert!(frozen == filled(0..64));
        assert_eq!(live.get(&Serial(5)), Some(&7));
    }

    #[test]
    fn packed_entries_reuse_freed_slots_and_clones_keep_what_they_saw() {
        let mut packed: Packed<u32, 4> = Packed::default();
        for s in [1_000, 50_000, 7, 900_000, 3] {
            packed.insert(Serial(s), s);
        }
        assert_eq!(packed.page_count(), 2, "five entries, four to a page");
        let frozen = packed.clone();
        assert_eq!(packed.remove(&Serial(50_000)), Some(50_000));
        assert_eq!(packed.insert(Serial(11), 11), None);
        assert_eq!(packed.page_count(), 2, "the freed slot was taken again");
        *packed.get_mut(&Serial(7)).unwrap() = 8;
        assert_eq!(packed.insert(Serial(7), 9), Some(8));
        assert_eq!(packed.get(&Serial(7)), Some(&9));
        assert!(!packed.contains_key(&Serial(50_000)));
        assert_eq!(frozen.get(&Serial(50_000)), Some(&50_000));
        assert_eq!(frozen.get(&Serial(7)), Some(&7));
        assert_eq!(frozen.get(&Serial(11)), None);
        let mut seen: Vec<u32> = frozen.values().copied().collect();
        seen.sort();
        assert_eq!(seen, [3, 7, 1_000, 50_000, 900_000]);
        let mut again: Packed<u32, 4> = Packed::default();
        for s in [3, 7, 1_000, 11, 900_000] {
            again.insert(Serial(s), s);
        }
        *again.get_mut(&Serial(7)).unwrap() = 9;
        assert!(again == packed, "equal by serial, whatever the slots");
    }

    #[test]
    fn only_the_changed_pages_stop_being_shared() {
        let mut live = filled((0..64).filter(|s| s % 2 == 0));
        let frozen = live.clone();
        live.get_mut(&Serial(4)).unwrap();
        let shared = live
            .pages
            .iter()
            .filter(|(k, p)| Arc::ptr_eq(p, &frozen.pages[k]))
            .count();
        assert_eq!(shared, live.page_count() - 1);
        // Looking up a missing entry copies nothing.
        assert!(live.get_mut(&Serial(7)).is_none());
        assert!(live.remove(&Serial(9)).is_none());
        let shared_after = live
            .pages
            .iter()
            .filter(|(k, p)| Arc::ptr_eq(p, &frozen.pages[k]))
            .count();
        assert_eq!(shared_after, shared);
    }
}
