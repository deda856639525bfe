//! One running behaviour per entity: the timers or tasks a behaviour keeps, keyed by the
//! entity they act for, so that "start it for this NPC", "stop it for this NPC" and "stop
//! everything" are one call each and nothing is left behind.
//!
//! Owns the handles only. Must never start anything itself, and never call into game code
//! while its map is borrowed (cancelling a timer or aborting a task runs no game code, and
//! `stop_all` cancels after letting go of the map anyway).

use std::cell::RefCell;

use futures::future::AbortHandle;

use crate::timer::TimerToken;
use crate::world::{IdMap, Serial};

/// A handle on something running on the loop that can be stopped: a timer or a task.
pub trait Cancel {
    /// Stops it: a timer runs no more, a task is not polled again. Harmless when it has
    /// already ended.
    fn cancel(&self);
}

impl Cancel for TimerToken {
    fn cancel(&self) {
        TimerToken::cancel(self);
    }
}

impl Cancel for AbortHandle {
    fn cancel(&self) {
        self.abort();
    }
}

/// At most one running `H` per entity.
pub struct Keyed<H: Cancel> {
    running: RefCell<IdMap<Serial, H>>,
}

impl<H: Cancel> Default for Keyed<H> {
    fn default() -> Self {
        Keyed {
            running: RefCell::default(),
        }
    }
}

impl<H: Cancel> Keyed<H> {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `handle` as what runs for `entity`; one already running for it is stopped.
    pub fn insert(&self, entity: Serial, handle: H) {
        let replaced = self.running.borrow_mut().insert(entity, handle);
        if let Some(old) = replaced {
            old.cancel();
        }
    }

    /// Whether something runs for `entity`.
    #[must_use]
    pub fn contains(&self, entity: Serial) -> bool {
        self.running.borrow().contains_key(&entity)
    }

    /// What runs for `entity`, for handles that are plain values (timer tokens).
    #[must_use]
    pub fn get(&self, entity: Serial) -> Option<H>
    where
        H: Copy,
    {
        self.running.borrow().get(&entity).copied()
    }

    /// Stops what runs for `entity`; false if nothing did.
    pub fn stop(&self, entity: Serial) -> bool {
        let removed = self.running.borrow_mut().remove(&entity);
        removed.map(|handle| handle.cancel()).is_some()
    }

    /// Forgets what ran for `entity` without stopping it: it ended by itself (a one-shot
    /// timer fired). Returns whether there was one.
    pub fn finished(&self, entity: Serial) -> bool {
        self.running.borrow_mut().remove(&entity).is_some()
    }

    /// How many entities have something running.
    #[must_use]
    pub fn len(&self) -> usize {
        self.running.borrow().len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.running.borrow().is_empty()
    }

    /// Stops everything (a behaviour's shutdown).
    pub fn stop_all(&self) {
        let all: Vec<H> = self.running.borrow_mut().drain().map(|(_, h)| h).collect();
        for handle in all {
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
        let keyed = Keyed::new();
        let (a, b) = (Probe(Rc::default()), Probe(Rc::default()));
        keyed.insert(Serial(1), a.clone());
        keyed.insert(Serial(1), b.clone());
        assert_eq!((a.0.get(), b.0.get()), (1, 0));
        assert_eq!(keyed.len(), 1);
        assert!(keyed.stop(Serial(1)));
        assert!(!keyed.stop(Serial(1)));
        assert_eq!(b.0.get(), 1);
        assert!(keyed.is_empty());
    }

    #[test]
    fn finished_forgets_without_cancelling_and_stop_all_cancels_the_rest() {
        let keyed = Keyed::new();
        let probes: Vec<Probe> = (0..3).map(|_| Probe(Rc::default())).collect();
        for (i, p) in probes.iter().enumerate() {
            keyed.insert(Serial(i as u32 + 1), p.clone());
        }
        assert!(keyed.finished(Serial(1)));
        assert!(keyed.contains(Serial(2)));
        keyed.stop_all();
        let cancelled: Vec<u32> = probes.iter().map(|p| p.0.get()).collect();
        assert_eq!(cancelled, [0, 1, 1]);
        assert!(keyed.is_empty());
    }
}
