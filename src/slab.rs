//! A generational slab: the storage behind every timer-wheel entry, every local task, every
//! network session and the io_uring backend's sockets.
//!
//! Entries live in one `Vec` and are addressed by a [`Key`] = (index, generation). Freeing a
//! slot bumps its generation, so a key kept after its entry was removed no longer matches the
//! slot even once the index is reused: it is *stale*, and every operation on a stale key is a
//! no-op that reports `None`. That is what makes a timer token safe to keep forever.
//!
//! Invariants:
//! - `free_head` chains every vacant slot exactly once (through `Vacant::next_free`).
//! - `len` is the number of occupied slots.
//! - A key is live iff `entries[key.index]` is occupied *and* has generation `key.generation`.
//!
//! This module must never hand out a reference to a vacant slot or reuse an index without
//! bumping its generation.

/// Marks the end of the free list.
const NIL: u32 = u32::MAX;

/// The address of one slab entry. Cheap to copy, inert once stale.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Key {
    index: u32,
    generation: u32,
}

impl Key {
    /// The key with these parts, as [`Key::index`] and [`Key::generation`] gave them (the
    /// io_uring backend carries a key through the kernel inside an operation's user_data).
    /// Like any key it addresses an entry only while that slot holds that generation.
    #[must_use]
    #[cfg_attr(not(all(target_os = "linux", feature = "io-uring")), allow(dead_code))]
    pub(crate) const fn from_parts(index: u32, generation: u32) -> Key {
        Key { index, generation }
    }

    /// The slot index (stable for the entry's lifetime, reused afterwards).
    #[must_use]
    pub fn index(self) -> u32 {
        self.index
    }

    /// The generation the slot had when this key was issued.
    #[must_use]
    pub fn generation(self) -> u32 {
        self.generation
    }
}

/// One slab slot. The generation sits in each variant, next to the enum's tag, so a slot
/// costs `max(8, size_of::<T>()) + 8` bytes for an 8-aligned `T` (24 for a 16-byte wheel
/// entry) instead of a separate generation word plus a tagged state.
enum Slot<T> {
    Vacant { generation: u32, next_free: u32 },
    Occupied { generation: u32, value: T },
}

impl<T> Slot<T> {
    #[inline]
    fn generation(&self) -> u32 {
        match *self {
            Slot::Vacant { generation, .. } | Slot::Occupied { generation, .. } => generation,
        }
    }
}

pub(crate) struct Slab<T> {
    entries: Vec<Slot<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty slab with room for `capacity` entries before it reallocates.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The key the next [`Slab::insert`] will return.
    pub(crate) fn next_key(&self) -> Key {
        if self.free_head != NIL {
            let generation = self.entries[self.free_head as usize].generation();
            Key {
                index: self.free_head,
                generation,
            }
        } else {
            Key {
                index: self.entries.len() as u32,
                generation: 0,
            }
        }
    }

    /// Stores `value` and returns its key. Reuses the most recently freed slot first, which
    /// keeps the working set small and warm.
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let slot = &mut self.entries[index as usize];
            let (generation, next_free) = match *slot {
                Slot::Vacant {
                    generation,
                    next_free,
                } => (generation, next_free),
                Slot::Occupied { .. } => unreachable!("the free list holds only vacant slots"),
            };
            self.free_head = next_free;
            *slot = Slot::Occupied { generation, value };
            return Key { index, generation };
        }
        self.push(value)
    }

    /// Appends a new slot: the cold half of [`Slab::insert`].
    fn push(&mut self, value: T) -> Key {
        // u32::MAX is reserved for NIL; 4 billion live timers is far beyond memory anyway.
        let index = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("timer slab is full: more than 4 294 967 294 live entries");
        self.entries.push(Slot::Occupied {
            generation: 0,
            value,
        });
        Key {
            index,
            generation: 0,
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        match self.entries.get(key.index as usize) {
            Some(Slot::Occupied { generation, value }) if *generation == key.generation => {
                Some(value)
            }
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.entries.get_mut(key.index as usize) {
            Some(Slot::Occupied { generation, value }) if *generation == key.generation => {
                Some(value)
            }
            _ => None,
        }
    }

    /// The entry at `index` whatever its generation, with the key that currently addresses it.
    /// Used by the wheel's slot lists, which identify an entry by index plus its own stamp.
    #[inline]
    pub(crate) fn get_by_index(&self, index: u32) -> Option<(Key, &T)> {
        match self.entries.get(index as usize) {
            Some(Slot::Occupied { generation, value }) => Some((
                Key {
                    index,
                    generation: *generation,
                },
                value,
            )),
            _ => None,
        }
    }

    /// [`Slab::get_by_index`], mutably.
    #[inline]
    pub(crate) fn get_by_index_mut(&mut self, index: u32) -> Option<(Key, &mut T)> {
        match self.entries.get_mut(index as usize) {
            Some(Slot::Occupied { generation, value }) => Some((
                Key {
                    index,
                    generation: *generation,
                },
                value,
            )),
            _ => None,
        }
    }

    /// Every occupied entry with its current key, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| match slot {
                Slot::Occupied { generation, value } => Some((
                    Key {
                        index: index as u32,
                        generation: *generation,
                    },
                    value,
                )),
                Slot::Vacant { .. } => None,
            })
    }

    /// Every occupied entry, mutably, in index order.
    #[cfg_attr(not(all(target_os = "linux", feature = "io-uring")), allow(dead_code))]
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().filter_map(|slot| match slot {
            Slot::Occupied { value, .. } => Some(value),
            Slot::Vacant { .. } => None,
        })
    }

    /// Asks the CPU to start loading the entry at `index` into cache. A pure hint: it changes
    /// nothing and cannot fault. Loops over entries in random slab order issue it a few
    /// iterations ahead, so that several cache misses overlap instead of queueing.
    #[inline]
    pub(crate) fn prefetch(&self, index: u32) {
        if let Some(slot) = self.entries.get(index as usize) {
            prefetch(slot);
        }
    }

    /// Removes the entry and makes `key` (and every copy of it) stale.
    #[inline]
    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.entries.get_mut(key.index as usize)?;
        match slot {
            Slot::Occupied { generation, .. } if *generation == key.generation => {}
            _ => return None,
        }
        let vacant = Slot::Vacant {
            generation: key.generation.wrapping_add(1),
            next_free: self.free_head,
        };
        self.free_head = key.index;
        self.len -= 1;
        match std::mem::replace(slot, vacant) {
            Slot::Occupied { value, .. } => Some(value),
            Slot::Vacant { .. } => None,
        }
    }
}

/// Asks the CPU to start loading the cache line holding `*item`. A pure hint with no
/// architectural effect; a no-op off x86-64.
#[inline]
pub(crate) fn prefetch<U>(item: &U) {
    prefetch_address(std::ptr::from_ref(item).cast());
}

/// [`prefetch`] for a raw address, which need not point at anything: prefetching never
/// faults and has no architectural effect. A no-op off x86-64.
#[inline]
pub(crate) fn prefetch_address(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
        // whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_key_is_inert_after_reuse() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(a.index(), b.index(), "the freed slot is reused");
        assert_ne!(a, b);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn a_slot_costs_one_word_over_its_value() {
        // The generation shares the enum tag's word (the wheel's entry is 3 words).
        assert_eq!(std::mem::size_of::<Slot<[u64; 3]>>(), 32);
        assert_eq!(std::mem::size_of::<Slot<[u64; 2]>>(), 24);
    }

    #[test]
    fn by_index_access_sees_the_current_key() {
        let mut slab = Slab::new();
        let a = slab.insert(1u8);
        slab.remove(a);
        let b = slab.insert(2u8);
        let (key, value) = slab.get_by_index_mut(b.index()).expect("occupied");
        assert_eq!(key, b);
        *value = 3;
        assert_eq!(
            slab.get_by_index(a.index()).map(|(k, v)| (k, *v)),
            Some((b, 3))
        );
        slab.remove(b);
        assert!(slab.get_by_index(b.index()).is_none());
        assert_eq!(slab.next_key().index(), b.index());
    }

    #[test]
    fn a_key_rebuilt_from_its_parts_is_the_same_key() {
        let mut slab = Slab::new();
        let keys = [slab.insert(1u8), slab.insert(2), slab.insert(3)];
        slab.remove(keys[1]);
        for key in keys {
            assert_eq!(Key::from_parts(key.index(), key.generation()), key);
        }
        let gone = Key::from_parts(keys[1].index(), keys[1].generation());
        assert_eq!(slab.get(gone), None, "a rebuilt stale key is as inert");
        slab.values_mut().for_each(|value| *value *= 10);
        let values: Vec<u8> = slab.iter().map(|(_, value)| *value).collect();
        assert_eq!(values, [10, 30]);
    }

    #[test]
    fn foreign_key_is_inert() {
        let mut slab: Slab<u8> = Slab::new();
        let mut other = Slab::new();
        let k = other.insert(1u8);
        assert_eq!(slab.get(k), None);
        assert_eq!(slab.remove(k), None);
        assert_eq!(slab.get_mut(k), None);
    }
}
