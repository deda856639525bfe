//! Per-NPC behaviours at run time: one task per (behaviour, NPC) while the NPC's sector is
//! awake, started from the world's activity hook and stopped from it.
//!
//! Owns the running tasks (a [`Keyed`] set per behaviour), their counters, and the
//! containment of a behaviour that panics: it is logged with the line that registered the
//! behaviour and the NPC, counted (here and in the loop's `panics`), and stops for that NPC;
//! nothing else notices. Must never touch the world from the activity hook (it runs inside a
//! world borrow): it only spawns and aborts tasks.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::hash::BuildHasherDefault;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};

use crate::runtime::{self, AbortHandle, Keyed};
use crate::world::rng::Rng;
use crate::world::{Activity, IdHasher, Mobile, Serial, World};

use super::npc::Npc;

/// A per-NPC behaviour's body, boxed.
pub(crate) type BehaviourFuture = Pin<Box<dyn Future<Output = ()>>>;

/// One registered per-NPC behaviour: which NPCs it applies to and how to start it.
pub(crate) struct NpcSpec {
    pub(crate) name: &'static str,
    pub(crate) applies: Box<dyn Fn(&Mobile) -> bool>,
    pub(crate) start: Box<dyn Fn(Npc) -> BehaviourFuture>,
    /// The line that registered it (logs of a panic name it).
    pub(crate) site: &'static std::panic::Location<'static>,
}

/// The random streams of behaviours: one per behaviour, NPC and start.
const BEHAVIOUR_STREAM: u64 = 5 << 56;

/// Counters of one per-NPC behaviour since the shard started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BehaviourStats {
    /// The behaviour's name, as the game registered it (`Game::npc_behaviour`).
    pub name: &'static str,
    /// Tasks started (an NPC it applies to woke up or appeared in an awake sector).
    pub started: u64,
    /// Tasks stopped because their NPC fell asleep or was removed, or the shard stopped.
    pub stopped: u64,
    /// Tasks that panicked (each logged with the site and the NPC).
    pub panicked: u64,
    /// Running now.
    pub running: usize,
}

/// The per-NPC behaviours of every game, running on one world.
pub struct Behaviours {
    inner: Rc<Inner>,
}

struct Inner {
    world: Rc<RefCell<World>>,
    seed: u64,
    kinds: Vec<Rc<Kind>>,
}

struct Kind {
    index: u64,
    spec: NpcSpec,
    running: Keyed<Serial, AbortHandle, BuildHasherDefault<IdHasher>>,
    stats: Cell<BehaviourStats>,
}

impl Behaviours {
    /// Starts `specs` on `world`: for every NPC awake now, and from now on whenever one wakes
    /// (the world's activity hook is this engine's).
    ///
    /// # Panics
    /// Off the loop thread, or while the world is borrowed.
    pub(crate) fn start(world: Rc<RefCell<World>>, specs: Vec<NpcSpec>) -> Behaviours {
        let seed = world.borrow().seed();
        let kinds = specs
            .into_iter()
            .zip(0..)
            .map(|(spec, index)| {
                let stats = BehaviourStats {
                    name: spec.name,
                    ..BehaviourStats::default()
                };
                Rc::new(Kind {
                    index,
                    spec,
                    running: Keyed::new(),
                    stats: Cell::new(stats),
                })
            })
            .collect();
        let inner = Rc::new(Inner { world, seed, kinds });
        if !inner.kinds.is_empty() {
            inner.install_hook();
            let awake = inner.world.borrow().active_mobiles();
            for serial in awake {
                let world = inner.world.borrow();
                if let Some(mobile) = world.mobile(serial) {
                    let mobile = mobile.clone();
                    drop(world);
                    inner.woke(&mobile);
                }
            }
        }
        Behaviours { inner }
    }

    /// Each behaviour's counters, in registration order.
    #[must_use]
    pub fn stats(&self) -> Vec<BehaviourStats> {
        self.inner.kinds.iter().map(|k| k.stats()).collect()
    }

    /// Tasks running now, over every behaviour.
    #[must_use]
    pub fn running(&self) -> usize {
        self.inner.kinds.iter().map(|k| k.running.len()).sum()
    }

    /// Stops every behaviour of every NPC and removes the activity hook.
    ///
    /// # Panics
    /// Off the loop thread, or while the world is borrowed.
    pub fn stop(&self) {
        if self.inner.kinds.is_empty() {
            return;
        }
        self.inner.world.borrow_mut().clear_activity_hook();
        for kind in &self.inner.kinds {
            let stopping = kind.running.len() as u64;
            kind.running.cancel_all();
            kind.count(|s| s.stopped += stopping);
        }
    }
}

impl Inner {
    fn install_hook(self: &Rc<Self>) {
        let inner: Weak<Inner> = Rc::downgrade(self);
        self.world
            .borrow_mut()
            .set_activity_hook(move |activity, mobile| {
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                match activity {
                    Activity::Woke => inner.woke(mobile),
                    Activity::Slept => inner.slept(mobile.serial),
                }
            });
    }

    /// Starts every behaviour that applies to `mobile` and is not running for it.
    fn woke(&self, mobile: &Mobile) {
        for kind in &self.kinds {
            if !(kind.spec.applies)(mobile) || kind.running.contains(&mobile.serial) {
                continue;
            }
            let started = kind.stats.get().started;
            let stream = BEHAVIOUR_STREAM | kind.index << 48 | started << 32;
            let rng = Rng::derive(self.seed, stream | u64::from(mobile.serial.0));
            let npc = Npc::new(mobile.serial, self.world.clone(), rng);
            let body = Contained {
                future: (kind.spec.start)(npc),
                kind: Rc::downgrade(kind),
                npc: mobile.serial,
            };
            let task = crate::spawn(body);
            kind.running.insert(mobile.serial, task.abort_handle());
            kind.count(|s| s.started += 1);
        }
    }

    fn slept(&self, npc: Serial) {
        for kind in &self.kinds {
            if kind.running.cancel(&npc) {
                kind.count(|s| s.stopped += 1);
            }
        }
    }
}

impl Kind {
    fn count(&self, f: impl FnOnce(&mut BehaviourStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }

    fn stats(&self) -> BehaviourStats {
        BehaviourStats {
            running: self.running.len(),
            ..self.stats.get()
        }
    }
}

/// A behaviour's body with its panics caught: a panic ends this task only.
struct Contained {
    future: BehaviourFuture,
    kind: Weak<Kind>,
    npc: Serial,
}

impl Future for Contained {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let panic = match runtime::catch(|| self.future.as_mut().poll(cx)) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(())) => None,
            Err(why) => Some(why),
        };
        // Over: the NPC runs this behaviour again only when it next wakes.
        if let Some(kind) = self.kind.upgrade() {
            kind.running.remove(&self.npc);
            if let Some(why) = panic {
                kind.count(|s| s.panicked += 1);
                runtime::count_panic();
                tracing::error!(
                    behaviour = kind.spec.name,
                    registered_at = %kind.spec.site,
                    npc = %self.npc,
                    "an NPC behaviour panicked: {why}; it stops for this NPC until the NPC next \
                     wakes, the loop goes on"
                );
            }
        }
        Poll::Ready(())
    }
}
