//! One running behaviour per key: the timers or tasks a behaviour keeps, keyed by the entity
//! they act for, so that "start it for this NPC", "stop it for this NPC" and "stop everything"
//! are one call each and nothing is left behind.
//!
//! ```no_run
//! use std::time::Duration;
//! use shardloop::runtime::{AbortHandle, Keyed};
//! use shardloop::{EventLoop, spawn, timer};
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     EventLoop::new()
//!         .run_until(async {
//!             let chatter: Keyed<u32, AbortHandle> = Keyed::new();
//!             for npc in 1..=3u32 {
//!                 let task = spawn(async move {
//!                     loop {
//!                         timer::pause(5000).await;
//!                         println!("npc {npc}: fresh bread!");
//!                     }
//!                 });
//!                 chatter.insert(npc, task.abort_handle());
//!             }
//!             timer::pause(12_000).await;
//!             chatter.cancel(&2); // npc 2 fell asleep: its task and its pause are gone
//!             chatter.cancel_all(); // the game stops
//!         })
//!         .await;
//! }
//! ```
//!
//! Owns the handles only. Must never start anything itself, and never cancel while its map is
//! borrowed: cancelling drops a task's future or a timer's callback, whose drop may run game
//! code that comes back here (it is always done after letting go of the map).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

use super::context;
use super::task::{AbortHandle, JoinHandle};

/// A handle on something running on the loop that can be stopped: a timer or a task.
pub trait Cancel {
    /// Stops it: a timer runs no more, a task's future is dropped. Harmless when it has
    /// already ended.
    ///
    /// # Panics
    /// Off the loop thread (the handles' own rule).
    fn cancel(&self);
}

impl Cancel for AbortHandle {
    fn cancel(&self) {
        self.abort();
    }
}

impl<T> Cancel for JoinHandle<T> {
    fn cancel(&self) {
        self.abort();
    }
}

/// A set may hold timers and tasks together as `Box<dyn Cancel>`.
impl<C: Cancel + ?Sized> Cancel for Box<C> {
    fn cancel(&self) {
        (**self).cancel();
    }
}

/// At most one running `H` (a [`TimerToken`](crate::timer::TimerToken), an [`AbortHandle`], a [`JoinHandle`]) per key
/// `K`. Inserting for a key that has one cancels the old one; dropping the set cancels all.
///
/// It takes `&self` (it lives in shared game state, `Rc<Game>`), so it is `!Sync`: a
/// loop-thread value. `S` picks the hasher (e.g. a cheap one for integer ids).
pub struct Keyed<K, H: Cancel, S = RandomState> {
    running: RefCell<HashMap<K, H, S>>,
}

impl<K, H: Cancel, S: Default> Default for Keyed<K, H, S> {
    fn default() -> Self {
        Keyed {
            running: RefCell::new(HashMap::with_hasher(S::default())),
        }
    }
}

impl<K: Eq + Hash, H: Cancel, S: BuildHasher + Default> Keyed<K, H, S> {
    /// An empty set: nothing runs for any key.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `handle` as what runs for `key`; one already running for it is cancelled.
    pub fn insert(&self, key: K, handle: H) {
        let replaced = self.running.borrow_mut().insert(key, handle);
        if let Some(old) = replaced {
            old.cancel();
        }
    }

    /// Whether something runs for `key`.
    #[must_use]
    pub fn contains(&self, key: &K) -> bool {
        self.running.borrow().contains_key(key)
    }

    /// A copy of what runs for `key` (a timer token, an abort handle).
    #[must_use]
    pub fn get(&self, key: &K) -> Option<H>
    where
        H: Clone,
    {
        self.running.borrow().get(key).cloned()
    }

    /// Cancels what runs for `key` and forgets it; false if nothing did.
    pub fn cancel(&self, key: &K) -> bool {
        let removed = self.running.borrow_mut().remove(key);
        removed.map(|handle| handle.cancel()).is_some()
    }

    /// Forgets what ran for `key` without cancelling it, and returns it: it ended by itself
    /// (a one-shot timer fired), or the caller takes it over.
    pub fn remove(&self, key: &K) -> Option<H> {
        self.running.borrow_mut().remove(key)
    }

    /// How many keys have something running.
    #[must_use]
    pub fn len(&self) -> usize {
        self.running.borrow().len()
    }

    /// No key has a handle kept ([`len`](Self::len) is 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.running.borrow().is_empty()
    }

    /// Cancels everything (a behaviour's shutdown).
    pub fn cancel_all(&self) {
        let all: Vec<H> = self.running.borrow_mut().drain().map(|(_, h)| h).collect();
        for handle in all {
            handle.cancel();
        }
    }
}

impl<K, H: Cancel, S> Drop for Keyed<K, H, S> {
    /// Cancels everything still held — on the loop thread. Elsewhere (the loop is gone, and
    /// its timers and tasks with it) and while unwinding a panic, it only lets go.
    fn drop(&mut self) {
        if std::thread::panicking() || context::try_core().is_none() {
            return;
        }
        for (_, handle) in self.running.get_mut().drain() {
            handle.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    #[derive(Clone)]
    struct Probe(Rc<Cell<u32>>);

    impl Cancel for Probe {
        fn cancel(&self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn one_per_entity_replacing_stops_the_old_one() {
        let keyed: Keyed<u32, Probe> = Keyed::new();
        let (a, b) = (Probe(Rc::default()), Probe(Rc::default()));
        keyed.insert(1, a.clone());
        keyed.insert(1, b.clone());
        assert_eq!((a.0.get(), b.0.get()), (1, 0));
        assert_eq!(keyed.len(), 1);
        assert!(keyed.cancel(&1));
        assert!(!keyed.cancel(&1));
        assert_eq!(b.0.get(), 1);
        assert!(keyed.is_empty());
    }

    #[test]
    fn remove_forgets_without_cancelling_and_cancel_all_cancels_the_rest() {
        let keyed: Keyed<u32, Probe> = Keyed::new();
        let probes: Vec<Probe> = (0..3).map(|_| Probe(Rc::default())).collect();
        for (i, p) in probes.iter().enumerate() {
            keyed.insert(i as u32 + 1, p.clone());
        }
        assert!(keyed.remove(&1).is_some());
        assert!(keyed.contains(&2));
        keyed.cancel_all();
        let cancelled: Vec<u32> = probes.iter().map(|p| p.0.get()).collect();
        assert_eq!(cancelled, [0, 1, 1]);
        assert!(keyed.is_empty());
    }
}
