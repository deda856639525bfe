//! A save's snapshot while the world keeps changing: the loop only freezes the world (its
//! pages shared, copied when next changed), and the entities are copied out later on another
//! thread. Whatever the game does in between — entities created, deleted, moved between
//! containers, in and out of a left-out player's pack — the snapshot must equal the world at
//! the instant it was taken, which is checked against a stop-the-world copy of the same world
//! at the same tick, on the paused clock.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use jiff::Timestamp;
use shardloop::persist::{self, Capture, Clock, Layout, Notice, Saver, SaverConfig, Snapshot};
use shardloop::world::{self, Item, Location, MapId, Mobile, Serial, World};
use shardloop::{EventLoop, timer};

const CREATED: &str = "2026-12-05T08:00:00Z";

fn created() -> Timestamp {
    CREATED.parse().unwrap()
}

/// The shard's filter: players are left out of saves, with what they wear and carry.
fn keep(m: &Mobile) -> bool {
    m.is_npc
}

/// Asserts two snapshots hold the same world, whatever order they were copied in.
fn assert_same(mut got: Snapshot, mut want: Snapshot) {
    got.sort();
    want.sort();
    assert_eq!(got.seed, want.seed);
    assert_eq!(got.next_item_serial, want.next_item_serial);
    assert_eq!(got.next_mobile_serial, want.next_mobile_serial);
    assert_eq!(got.items.len(), want.items.len(), "item count");
    assert_eq!(got.mobiles.len(), want.mobiles.len(), "mobile count");
    for (g, w) in got.items.iter().zip(&want.items) {
        assert_eq!(g, w);
    }
    for (g, w) in got.mobiles.iter().zip(&want.mobiles) {
        assert_eq!(g, w);
    }
    assert_eq!(got.spawners, want.spawners);
}

/// A snapshot's entities differ from the world's now (so a test that finds them equal to
/// the instant's copy has seen the world change after it).
fn differs(now: &World, then: &Snapshot) -> bool {
    let mut now = Snapshot::take(now, created(), keep);
    let mut then = then.clone();
    now.sort();
    then.sort();
    now.items != then.items || now.mobiles != then.mobiles || now.spawners != then.spawners
}

/// Game activity of every kind a save must not see half of: each tick creates, deletes and
/// moves entities (between containers, onto the ground, into and out of a player's pack),
/// recolours them and changes spawners. Deterministic: a fixed random stream.
struct Churn {
    state: u64,
    /// A player's backpack: items move in and out of it.
    pack: Serial,
    /// Containers that are not the player's.
    chests: Vec<Serial>,
}

impl Churn {
    fn new(world: &World) -> Churn {
        let pack = world
            .items()
            .find(|i| {
                i.container
                    && i.parent
                        .is_some_and(|p| world.mobile(p).is_some_and(|m| !keep(m)))
            })
            .expect("a player with a backpack")
            .serial;
        let mut chests: Vec<Serial> = world
            .items()
            .filter(|i| i.container && i.serial != pack)
            .map(|i| i.serial)
            .take(8)
            .collect();
        chests.sort();
        assert!(chests.len() >= 2, "containers to move items between");
        Churn {
            state: 0x5EED,
            pack,
            chests,
        }
    }

    fn next(&mut self, below: usize) -> usize {
        self.state = self
            .state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.state >> 33) as usize) % below.max(1)
    }

    fn some_item(&mut self, world: &World) -> Serial {
        let n = world.item_count();
        let skip = self.next(n);
        world.items().nth(skip).unwrap().serial
    }

    fn some_mobile(&mut self, world: &World) -> Serial {
        let n = world.mobile_count();
        let skip = self.next(n);
        world.mobiles().nth(skip).unwrap().serial
    }

    fn some_chest(&mut self) -> Serial {
        let i = self.next(self.chests.len());
        self.chests[i]
    }

    fn ground(&mut self) -> Location {
        Location {
            map: MapId::FELUCCA,
            x: 1000 + self.next(200) as u16,
            y: 1000 + self.next(200) as u16,
            z: 0,
        }
    }

    /// One tick's worth of changes.
    fn tick(&mut self, world: &mut World) {
        // Created: on the ground and inside a container.
        for parent in [None, Some(self.some_chest())] {
            let mut item = Item::new(world.new_item_serial(), 0x0EED);
            item.location = self.ground();
            item.parent = parent;
            world.add_item(item).unwrap();
        }
        let serial = world.new_mobile_serial();
        let mut npc = Mobile::new(serial, "newcomer", 0x190);
        npc.is_npc = true;
        npc.location = self.ground();
        world.add_mobile(npc).unwrap();
        // Moved between containers, onto the ground, into and out of the player's pack.
        let (a, b) = (self.some_item(world), self.some_item(world));
        let chest = self.some_chest();
        world.put_item_in(a, chest, Location::INTERNAL);
        world.put_item_in(b, self.pack, Location::INTERNAL);
        if let Some(&held) = world.contents(self.pack).first() {
            let to = self.ground();
            world.move_item(held, to);
        }
        // Changed in place.
        let c = self.some_item(world);
        world.set_item_hue(c, self.next(1000) as u16);
        if let Some(mut item) = world.item_mut(self.some_item(world)) {
            item.amount = item.amount.wrapping_add(1).max(1);
        }
        let m = self.some_mobile(world);
        let to = self.ground();
        world.move_mobile(m, to);
        world.set_mobile_hue(m, self.next(1000) as u16);
        let spawner = world.spawners().next().map(|s| s.serial);
        if let Some(spawner) = spawner {
            world.spawner_mut(spawner).unwrap().spawned.push(serial);
        }
        // Deleted: an item (with whatever it holds) and a mobile (with what it carries).
        let gone = self.some_item(world);
        if !self.chests.contains(&gone) && gone != self.pack {
            world.remove_item(gone);
        }
        let gone = self.some_mobile(world);
        if world.mobile(gone).is_some_and(keep) {
            world.remove_mobile(gone);
        }
    }
}

/// A world with players (left out of saves) and containers; every tick from the first, the
/// churn timer changes it.
fn churning_world() -> (Rc<RefCell<World>>, Rc<RefCell<Churn>>) {
    let world = world::generate(35, 4_000, 300);
    let churn = Churn::new(&world);
    (Rc::new(RefCell::new(world)), Rc::new(RefCell::new(churn)))
}

#[tokio::test(start_paused = true)]
async fn a_capture_kept_while_the_world_changes_equals_the_world_at_its_instant() {
    let (world, churn) = churning_world();
    let mut event_loop = EventLoop::new();
    // (the stop-the-world copy, the capture), both taken in tick 10 after its changes.
    let taken: Rc<RefCell<Option<(Snapshot, Capture)>>> = Rc::default();
    let (w, c, t) = (world.clone(), churn.clone(), taken.clone());
    let mut ticks = 0;
    let _churn = timer::every(Duration::from_millis(8)).start(move || {
        c.borrow_mut().tick(&mut w.borrow_mut());
        ticks += 1;
        if ticks == 10 {
            let world = w.borrow();
            let copy = Snapshot::take(&world, created(), keep);
            *t.borrow_mut() = Some((copy, Capture::take(&world, created(), keep)));
        }
    });
    // Copied out on another thread while the loop goes on changing the world...
    let (send, receive) = std::sync::mpsc::channel::<Capture>();
    let copier = std::thread::spawn(move || receive.recv().unwrap().into_snapshot());
    let t = taken.clone();
    event_loop
        .run_until(async move {
            while t.borrow().is_none() {
                timer::pause(8).await;
            }
            send.send(t.borrow().as_ref().unwrap().1.clone()).unwrap();
            timer::pause(50 * 8).await;
        })
        .await;
    let (copy, capture) = taken.borrow_mut().take().unwrap();
    assert!(
        differs(&world.borrow(), &copy),
        "the world changed after the capture"
    );
    // ... and here, after 50 more ticks of changes.
    assert_same(copier.join().unwrap(), copy.clone());
    assert_same(capture.into_snapshot(), copy);
}

#[tokio::test(start_paused = true)]
async fn the_capture_leaves_out_players_and_what_they_held_at_its_instant() {
    let (world, churn) = churning_world();
    let mut world = Rc::try_unwrap(world).ok().unwrap().into_inner();
    let mut churn = Rc::try_unwrap(churn).ok().unwrap().into_inner();
    churn.tick(&mut world);
    let pack = churn.pack;
    let held: Vec<Serial> = world.contents(pack).to_vec();
    assert!(!held.is_empty(), "the player's pack holds something");
    let capture = Capture::take(&world, created(), keep);
    // After the instant: what the pack held goes to the ground, a ground item goes in.
    let to = churn.ground();
    for &item in &held {
        world.move_item(item, to);
    }
    let ground = world.items().find(|i| i.is_on_ground()).unwrap().serial;
    world.put_item_in(ground, pack, Location::INTERNAL);
    let snapshot = capture.into_snapshot();
    let saved: Vec<Serial> = snapshot.items.iter().map(|i| i.serial).collect();
    for item in &held {
        assert!(!saved.contains(item), "{item} was in the player's pack");
    }
    assert!(!saved.contains(&pack));
    assert!(saved.contains(&ground), "{ground} was on the ground");
    assert!(snapshot.mobiles.iter().all(keep));
}

#[tokio::test(start_paused = true)]
async fn a_save_while_the_world_changes_every_tick_loads_as_the_world_at_its_instant() {
    saves_while_the_world_changes(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_save_leaving_out_listed_mobiles_loads_as_the_world_at_its_instant() {
    saves_while_the_world_changes(true).await;
}

/// Two saves through the `Saver` while the world changes every tick; with `listed`, the
/// players are listed (`Saver::leave_out`) rather than found by `keep`.
async fn saves_while_the_world_changes(listed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let (world, churn) = churning_world();
    let saver = Saver::new(
        world.clone(),
        SaverConfig {
            layout: layout.clone(),
            threads: 2,
            clock: Clock::System,
            // Listed, the players are left out by the list alone: `keep` would keep them.
            keep: match listed {
                true => Box::new(|_: &Mobile| true),
                false => Box::new(keep),
            },
            notices: Box::new(|_: &Notice| {}),
        },
    );
    if listed {
        let w = world.clone();
        saver.leave_out(move || {
            let world = w.borrow();
            let players = world.mobiles().filter(|m| !keep(m)).map(|m| m.serial);
            players.collect()
        });
    }
    let mut event_loop = EventLoop::new();
    let copies: Rc<RefCell<Vec<Snapshot>>> = Rc::default();
    let (w, c, s, copied) = (world.clone(), churn.clone(), saver.clone(), copies.clone());
    let mut ticks = 0;
    let _churn = timer::every(Duration::from_millis(8)).start(move || {
        c.borrow_mut().tick(&mut w.borrow_mut());
        ticks += 1;
        // Two saves, each requested right after this tick's changes, with the copy of the
        // world as it is at that instant.
        if ticks == 5 || ticks == 40 {
            copied
                .borrow_mut()
                .push(Snapshot::take(&w.borrow(), created(), keep));
            s.request();
        }
    });
    let (s, copied) = (saver.clone(), copies.clone());
    let mut loaded = Vec::new();
    event_loop
        .run_until(async move {
            for n in 1..=2 {
                while copied.borrow().len() < n {
                    timer::pause(8).await;
                }
                s.idle().await;
                loaded.push(persist::load(&dir.path().join("Saves")).unwrap());
                timer::pause(80).await; // the world goes on changing
            }
            loaded
        })
        .await
        .into_iter()
        .zip(copies.take())
        .for_each(|(save, copy)| {
            assert!(differs(&world.borrow(), &copy));
            assert_same(Snapshot::take(&save.world, created(), keep), copy);
        });
    assert_eq!(saver.finished(), 2);
}
