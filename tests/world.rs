//! The world model and its demo game logic, through the public API: serials, the generator,
//! delta queues, sectors and player presence, decay, spawners, barks, and the idle timer load.
//! Everything that runs game logic uses the paused clock, so an hour of game time is instant.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::Duration;

use shardloop::EventLoop;
use shardloop::runtime::Phase;
use shardloop::timer;
use shardloop::world::{
    self, Delta, Item, Location, MapId, Mobile, SECTOR_SIZE, SectorId, Serial, SerialAllocator,
    SpawnKind, World,
};

mod common;
use common::demo as game;
use tokio::time::Instant;

fn minutes(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

fn fel(x: u16, y: u16) -> Location {
    Location::new(x, y, 0, MapId::FELUCCA)
}

fn shared(world: World) -> Rc<RefCell<World>> {
    Rc::new(RefCell::new(world))
}

/// A loop whose Deltas slot drains `world` as the shard does.
fn shard_loop(world: &Rc<RefCell<World>>) -> EventLoop {
    EventLoop::builder()
        .slot(Phase::Deltas, world::deltas_handler(world.clone()))
        .build()
}

async fn run_for(el: &mut EventLoop, d: Duration) {
    el.run_until(timer::pause_for(d)).await;
}

fn npc(world: &mut World, at: Location) -> Serial {
    let mut mobile = Mobile::new(world.new_mobile_serial(), "a townsperson", 0x190);
    mobile.is_npc = true;
    mobile.location = at;
    world.add_mobile(mobile).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Serials

#[test]
fn serial_ranges_follow_the_game() {
    assert!(Serial(1).is_mobile() && !Serial(1).is_item());
    assert!(Serial(0x3FFF_FFFF).is_mobile());
    assert!(Serial(0x4000_0000).is_item() && !Serial(0x4000_0000).is_mobile());
    assert!(Serial(0x7FFF_FFFF).is_item());
    assert!(!Serial(0).is_valid() && !Serial(0x8000_0000).is_valid());
    assert_eq!(Serial(0x4000_0001).to_string(), "0x40000001");
}

#[test]
fn allocators_skip_serials_in_use_and_wrap() {
    let mut items = SerialAllocator::items();
    let in_use: HashSet<Serial> = [Serial(0x4000_0000), Serial(0x4000_0001)].into();
    assert_eq!(
        items.allocate(|s| in_use.contains(&s)),
        Some(Serial(0x4000_0002))
    );
    assert_eq!(items.allocate(|_| false), Some(Serial(0x4000_0003)));

    let mut mobiles = SerialAllocator::mobiles();
    mobiles.resume_after(Serial::MOBILE_MAX);
    assert_eq!(
        mobiles.allocate(|_| false),
        Some(Serial::MOBILE_MIN),
        "wraps to the start"
    );

    let mut world = World::new(1);
    let a = world.new_item_serial();
    let m = world.new_mobile_serial();
    assert!(a.is_item() && m.is_mobile());
    world
        .restore_item(Item::new(Serial(0x4000_0100), 1))
        .unwrap();
    assert_eq!(
        world.new_item_serial(),
        Serial(0x4000_0101),
        "continues after a restored serial"
    );
}

#[test]
fn adding_checks_ranges_duplicates_and_parents() {
    let mut world = World::new(1);
    let mobile = Mobile::new(Serial(0x4000_0000), "wrong", 1);
    assert!(world.add_mobile(mobile).is_err());
    let s = world.new_item_serial();
    world.add_item(Item::new(s, 1)).unwrap();
    assert!(world.add_item(Item::new(s, 1)).is_err());
    let mut orphan = Item::new(world.new_item_serial(), 1);
    orphan.parent = Some(Serial(0x4000_9999));
    assert!(world.add_item(orphan).is_err());
}

// ---------------------------------------------------------------------------------------------
// Structural limits at runtime (the load side is in persist.rs and hostile_saves.rs)

/// A chain of `n` containers, each inside the one before, the first on the ground and
/// decaying. Restored as a save would be (restoring checks no depth: `load` checks the whole
/// world after). Returns the world and the serials, root first.
fn deep_chain(n: u32) -> (World, Vec<Serial>) {
    let mut world = World::new(3);
    let mut chain = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let mut item = Item::new(world.new_item_serial(), 0x0E75);
        item.container = true;
        match chain.last() {
            Some(&parent) => item.parent = Some(parent),
            None => {
                item.location = fel(100, 100);
                item.decays = true;
            }
        }
        chain.push(world.restore_item(item).unwrap());
    }
    (world, chain)
}

#[test]
fn deleting_a_100k_deep_chain_takes_no_stack_depth() {
    // On a thread with a 256 KiB stack: a recursive delete of 100k levels would overflow it
    // (and abort the test process) many times over.
    let left = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let (mut world, chain) = deep_chain(100_000);
            world.remove_item(chain[0]).unwrap();
            assert!(
                world.pending_item_delta(chain[99_999]) == Some(Delta::REMOVED),
                "the deepest is marked removed"
            );
            world.item_count()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test(start_paused = true)]
async fn the_decay_of_a_deep_chain_deletes_it_all() {
    let (world, chain) = deep_chain(100_000);
    let w = shared(world);
    let mut el = shard_loop(&w);
    let logic = game::start_game_logic(w.clone());
    run_for(&mut el, game::DECAY_MAX + minutes(1)).await;
    assert_eq!(logic.stats().decays, 1, "the root decayed");
    assert!(w.borrow().item(chain[99_999]).is_none());
    assert_eq!(w.borrow().item_count(), 0, "with everything inside it");
    assert_eq!(el.stats().panics, 0);
}

#[test]
fn items_cannot_nest_deeper_than_the_limit_nor_inside_themselves() {
    use shardloop::world::limits::MAX_CONTAINER_DEPTH;
    let mut world = World::new(1);
    let bag = |world: &mut World| {
        let mut item = Item::new(world.new_item_serial(), 0x0E75);
        item.container = true;
        item
    };
    let root = bag(&mut world);
    let mut chain = vec![world.add_item(root).unwrap()];
    for _ in 0..MAX_CONTAINER_DEPTH {
        let mut item = bag(&mut world);
        item.parent = chain.last().copied();
        chain.push(world.add_item(item).unwrap());
    }
    let deepest = *chain.last().unwrap();
    assert_eq!(world.container_level(deepest), Ok(MAX_CONTAINER_DEPTH));
    let mut one_more = bag(&mut world);
    one_more.parent = Some(deepest);
    let e = world.add_item(one_more).unwrap_err();
    assert!(e.to_string().contains("containers deep"), "{e}");

    // Putting the root into its own descendant would be a cycle; a loose bag cannot go in
    // at the bottom (too deep) but can one level up.
    let inside = Location::new(50, 50, 0, MapId::INTERNAL);
    assert!(!world.put_item_in(chain[0], chain[5], inside));
    let loose = bag(&mut world);
    let loose = world.add_item(loose).unwrap();
    assert!(!world.put_item_in(loose, deepest, inside));
    assert!(world.put_item_in(loose, chain[chain.len() - 2], inside));
    // A bag holding a bag cannot go where only one level is left.
    let outer = bag(&mut world);
    let outer = world.add_item(outer).unwrap();
    let mut inner = bag(&mut world);
    inner.parent = Some(outer);
    world.add_item(inner).unwrap();
    assert!(!world.put_item_in(outer, chain[chain.len() - 2], inside));
    assert!(world.put_item_in(outer, chain[chain.len() - 3], inside));
    assert_eq!(world.check_limits(), Ok(()));

    // Worn by a mobile, the chain's levels are the same (the wearer is no container level).
    let wearer = npc(&mut world, fel(10, 10));
    let root = chain[0];
    assert!(world.put_item_in(root, wearer, Location::INTERNAL));
    assert_eq!(world.container_level(deepest), Ok(MAX_CONTAINER_DEPTH));
    let last = bag(&mut world);
    let last = world.add_item(last).unwrap();
    assert!(world.put_item_in(last, chain[chain.len() - 2], inside));
    assert_eq!(world.container_level(last), Ok(MAX_CONTAINER_DEPTH));
}

#[test]
fn a_spawner_over_the_limits_is_refused_and_a_changed_one_spawns_no_more_than_the_limit() {
    use shardloop::world::limits::{MAX_SPAWN_COUNT, MAX_SPAWN_RANGE};
    let mut world = World::new(9);
    let home = fel(3000, 2000);
    let item = Item::new(world.new_item_serial(), 0x1F1C);
    let item = world.add_item(item).unwrap();
    let mut spawner = world::Spawner {
        serial: item,
        home,
        range: 4,
        max: 65535,
        interval_minutes: 10,
        kind: SpawnKind::Item(0),
        spawned: Vec::new(),
    };
    let e = world.add_spawner(spawner.clone()).unwrap_err();
    assert!(
        e.to_string()
            .contains("65535 spawns alive; the limit is 256"),
        "{e}"
    );
    spawner.max = 8;
    world.add_spawner(spawner).unwrap();
    // Data changed at runtime past the limits: a run still spawns at most the limit.
    let s = world.spawner_mut(item).unwrap();
    (s.max, s.range) = (u16::MAX, u16::MAX);
    let mut rng = world::rng::Rng::new(1);
    let made = world::top_up(&mut world, item, &mut rng).unwrap();
    assert_eq!(made.items.len(), usize::from(MAX_SPAWN_COUNT));
    assert!(
        made.items.iter().all(|&i| {
            world.item(i).unwrap().location.distance(&home).unwrap() <= MAX_SPAWN_RANGE
        })
    );
}

// ---------------------------------------------------------------------------------------------
// The generator

#[test]
fn generator_is_deterministic_and_exact() {
    let a = world::generate(7, 20_000, 3_000);
    let b = world::generate(7, 20_000, 3_000);
    assert_eq!(a, b, "same seed, same world");
    assert_ne!(
        a,
        world::generate(8, 20_000, 3_000),
        "another seed, another world"
    );
    assert_eq!((a.item_count(), a.mobile_count()), (20_000, 3_000));
    for (items, mobiles) in [(0, 0), (1, 0), (0, 5), (10, 1), (1000, 100), (3, 40)] {
        let w = world::generate(3, items, mobiles);
        assert_eq!(
            (w.item_count(), w.mobile_count()),
            (items as usize, mobiles as usize)
        );
    }
}

#[test]
fn generated_world_is_plausible() {
    let w = world::generate(7, 40_000, 7_000);
    let items = w.item_count() as f64;
    let held = w.items().filter(|i| i.parent.is_some()).count() as f64;
    let decaying = w.items().filter(|i| i.decays && i.is_on_ground()).count() as f64;
    let statics = w.items().filter(|i| i.is_on_ground() && !i.movable).count() as f64;
    assert!(
        held / items > 0.6,
        "most items are worn, carried or in chests"
    );
    assert!(
        held + statics > 0.95 * items,
        "nearly everything else is fixed"
    );
    assert!(
        (0.005..0.02).contains(&(decaying / items)),
        "a minority decays: {decaying}"
    );
    let npcs = w.mobiles().filter(|m| m.is_npc).count() as f64;
    assert!(
        npcs / w.mobile_count() as f64 > 0.9,
        "most mobiles are NPCs"
    );
    assert!(w.spawner_count() > 0);
    for s in w.spawners() {
        assert_eq!(s.spawned.len(), usize::from(s.max), "spawners start full");
        assert!(world::SPAWNER_MINUTES.contains(&s.interval_minutes));
        for &spawned in &s.spawned {
            match s.kind {
                SpawnKind::Creature(_) => {
                    assert_eq!(w.mobile(spawned).unwrap().spawner, Some(s.serial))
                }
                SpawnKind::Item(_) => assert!(w.item(spawned).unwrap().decays),
            }
        }
    }
    assert_eq!(w.pending_deltas(), (0, 0), "generation is not a change");
}

// ---------------------------------------------------------------------------------------------
// Entities, indexes, deltas

#[test]
fn removing_a_mobile_removes_what_it_carries() {
    let mut w = world::generate(5, 2_000, 200);
    let npc = w
        .mobiles()
        .find(|m| m.is_npc && !w.contents(m.serial).is_empty())
        .unwrap()
        .serial;
    let worn: Vec<Serial> = w.contents(npc).to_vec();
    let before = w.item_count();
    w.remove_mobile(npc).unwrap();
    assert!(worn.iter().all(|&s| w.item(s).is_none()));
    assert!(w.item_count() < before);
    assert_eq!(w.pending_mobile_delta(npc), Some(Delta::REMOVED));
    assert!(
        worn.iter()
            .all(|&s| w.pending_item_delta(s) == Some(Delta::REMOVED))
    );
}

#[test]
fn guards_refile_moved_entities_and_mark_one_delta() {
    let mut w = World::new(1);
    let m = npc(&mut w, fel(100, 100));
    w.drain_deltas(usize::MAX);
    let from = SectorId::of(&fel(100, 100)).unwrap();
    let to = SectorId::of(&fel(100 + SECTOR_SIZE, 100)).unwrap();
    {
        let mut guard = w.mobile_mut(m).unwrap();
        guard.location.x += SECTOR_SIZE;
        guard.hits = 0;
    }
    assert!(w.mobiles_in(from).is_empty());
    assert_eq!(w.mobiles_in(to), &[m]);
    assert_eq!(
        w.pending_mobile_delta(m),
        Some(Delta::MOVED | Delta::PROPERTIES)
    );
    let _read_only = w.mobile_mut(m).unwrap().hits;
    assert_eq!(
        w.pending_deltas(),
        (1, 0),
        "reading through a guard marks nothing new"
    );
}

#[test]
fn changes_merge_until_drained_and_draining_is_bounded() {
    let mut w = World::new(1);
    let mobiles: Vec<Serial> = (0..5).map(|i| npc(&mut w, fel(10 * i, 10))).collect();
    w.drain_deltas(usize::MAX);
    let before = w.delta_stats();

    let m = mobiles[0];
    w.move_mobile(m, fel(1, 1));
    w.move_mobile(m, fel(2, 2));
    w.set_mobile_hue(m, 33);
    assert_eq!(w.pending_deltas(), (1, 0), "queued once");
    assert_eq!(
        w.pending_mobile_delta(m),
        Some(Delta::MOVED | Delta::APPEARANCE)
    );
    for &other in &mobiles[1..] {
        w.say(other, "hi");
    }
    let item = w.new_item_serial();
    w.add_item(Item::new(item, 7)).unwrap();
    w.set_item_hue(item, 5);

    let mut seen = Vec::new();
    assert!(
        w.drain_deltas_with(2, |s, d| seen.push((s, d))),
        "work left"
    );
    assert_eq!(
        seen,
        [
            (m, Delta::MOVED | Delta::APPEARANCE),
            (mobiles[1], Delta::SPEECH),
            (item, Delta::ADDED | Delta::APPEARANCE)
        ]
    );
    assert_eq!(w.pending_deltas(), (3, 0));
    assert!(!w.drain_deltas(3), "all drained");
    let after = w.delta_stats();
    assert_eq!(after.mobile_marks - before.mobile_marks, 7);
    assert_eq!(after.mobiles_queued - before.mobiles_queued, 5);
    assert_eq!(after.mobiles_sent - before.mobiles_sent, 5);
    assert_eq!(after.speech_sent - before.speech_sent, 4);
    assert_eq!(after.items_sent - before.items_sent, 1);
}

#[tokio::test(start_paused = true)]
async fn the_deltas_slot_sends_an_entity_once_per_iteration() {
    let w = shared(World::new(1));
    let m = npc(&mut w.borrow_mut(), fel(5, 5));
    let mut el = shard_loop(&w);
    run_for(&mut el, Duration::from_millis(8)).await;
    let start = w.borrow().delta_stats();
    let world = w.clone();
    timer::every(Duration::from_millis(100))
        .times(3)
        .start(move || {
            let mut w = world.borrow_mut();
            for x in 0..10 {
                w.move_mobile(m, fel(x, 5));
            }
        });
    run_for(&mut el, Duration::from_secs(1)).await;
    let stats = w.borrow().delta_stats();
    assert_eq!(stats.mobile_marks - start.mobile_marks, 30);
    assert_eq!(
        stats.mobiles_sent - start.mobiles_sent,
        3,
        "one send per iteration that moved it"
    );
    assert_eq!(w.borrow().pending_deltas(), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// Decay

#[tokio::test(start_paused = true)]
async fn decay_deletes_exactly_the_items_due() {
    let w = shared(world::generate(11, 10_000, 1_000));
    let mut el = shard_loop(&w);
    let logic = game::start_game_logic(w.clone());
    let due: Vec<(Serial, Instant)> = {
        let world = w.borrow();
        world
            .items()
            .filter(|i| i.decays && i.is_on_ground())
            .map(|i| {
                (
                    i.serial,
                    logic.decay_timer(i.serial).unwrap().next().unwrap(),
                )
            })
            .collect()
    };
    assert!(due.len() > 50);
    let seed = w.borrow().seed();
    let start = Instant::now();
    for &(s, at) in &due {
        let delay = game::decay_delay(seed, s);
        assert!((game::DECAY_MIN..=game::DECAY_MAX).contains(&delay));
        assert!(
            at >= start + delay && at < start + delay + Duration::from_millis(8),
            "never early"
        );
    }

    let first = due.iter().map(|&(_, at)| at).min().unwrap();
    run_for(&mut el, first - Instant::now() - Duration::from_millis(8)).await;
    assert!(
        due.iter().all(|&(s, _)| w.borrow().item(s).is_some()),
        "nothing before the first is due"
    );

    run_for(&mut el, minutes(30)).await;
    let end = Instant::now();
    // Due by the end, tolerance included: gone. Not due yet: kept. Due in the last
    // DECAY_TOLERANCE: either (the loop may run them with a later tick).
    let gone: Vec<_> = due
        .iter()
        .filter(|&&(_, at)| at + game::DECAY_TOLERANCE <= end)
        .collect();
    let kept: Vec<_> = due.iter().filter(|&&(_, at)| at > end).collect();
    assert!(!gone.is_empty() && !kept.is_empty());
    assert!(
        gone.iter().all(|&&(s, _)| w.borrow().item(s).is_none()),
        "every item due is gone"
    );
    assert!(
        kept.iter().all(|&&(s, _)| w.borrow().item(s).is_some()),
        "every other item is still there"
    );
    assert!(logic.stats().decays >= gone.len() as u64);
    assert!(
        w.borrow().delta_stats().removals_sent >= gone.len() as u64,
        "deletions were sent"
    );
}

// ---------------------------------------------------------------------------------------------
// Spawners

#[tokio::test(start_paused = true)]
async fn spawners_run_on_their_cadence() {
    let w = shared(world::generate(21, 10_000, 2_000));
    let mut el = shard_loop(&w);
    let logic = game::start_game_logic(w.clone());
    let start = Instant::now();
    let spawners: Vec<(Serial, Duration, Instant)> = w
        .borrow()
        .spawners()
        .map(|s| {
            (
                s.serial,
                minutes(u64::from(s.interval_minutes)),
                logic.spawner_timer(s.serial).unwrap().next().unwrap(),
            )
        })
        .collect();
    for &(_, interval, first) in &spawners {
        assert!(
            first > start && first <= start + interval,
            "first run within the first interval"
        );
    }

    // One creature spawner, emptied: it refills exactly at its runs, not before.
    let (s, interval, first) = *spawners
        .iter()
        .find(|(s, _, _)| matches!(w.borrow().spawner(*s).unwrap().kind, SpawnKind::Creature(_)))
        .unwrap();
    let empty = |w: &Rc<RefCell<World>>| {
        let spawned = w.borrow().spawner(s).unwrap().spawned.clone();
        for m in spawned {
            w.borrow_mut().remove_mobile(m);
        }
    };
    let alive = |w: &Rc<RefCell<World>>| {
        let world = w.borrow();
        world
            .spawner(s)
            .unwrap()
            .spawned
            .iter()
            .filter(|&&m| world.mobile(m).is_some())
            .count()
    };
    let max = usize::from(w.borrow().spawner(s).unwrap().max);
    empty(&w);
    run_for(&mut el, first - Instant::now() - Duration::from_millis(8)).await;
    assert_eq!(alive(&w), 0, "not before its run");
    run_for(&mut el, Duration::from_millis(8) + game::SPAWNER_TOLERANCE).await;
    assert_eq!(
        alive(&w),
        max,
        "topped up at its run (within its tolerance)"
    );
    assert_eq!(
        logic.spawner_timer(s).unwrap().next(),
        Some(first + interval),
        "no drift"
    );
    empty(&w);
    run_for(
        &mut el,
        first + interval + game::SPAWNER_TOLERANCE - Instant::now(),
    )
    .await;
    assert_eq!(alive(&w), max, "and again one interval later");

    // Every spawner ran exactly as often as its cadence says.
    run_for(&mut el, start + minutes(40) - Instant::now()).await;
    let end = Instant::now();
    // Runs due by `until`, counted on each spawner's grid (no drift).
    let due_by = |until: Instant| -> u64 {
        spawners
            .iter()
            .filter(|&&(_, _, first)| first <= until)
            .map(|&(_, interval, first)| {
                1 + ((until - first).as_millis() / interval.as_millis()) as u64
            })
            .sum()
    };
    // Every run due a tolerance before the end has run; none due after the end has.
    let runs = logic.stats().spawner_runs;
    assert!(
        (due_by(end - game::SPAWNER_TOLERANCE)..=due_by(end)).contains(&runs),
        "{runs} runs, expected {}..={}",
        due_by(end - game::SPAWNER_TOLERANCE),
        due_by(end)
    );
    assert!(
        logic.stats().spawned_items > 0,
        "decayed resources come back"
    );
}

// ---------------------------------------------------------------------------------------------
// Barks and sectors

/// Three NPCs in one town, one far away, one player character: no timers of their own.
fn town() -> (Rc<RefCell<World>>, Vec<Serial>, Serial) {
    let mut w = World::new(99);
    let near: Vec<Serial> = [(1000, 1000), (1010, 1004), (1030, 990)]
        .into_iter()
        .map(|(x, y)| npc(&mut w, fel(x, y)))
        .collect();
    let far = npc(&mut w, fel(3000, 3000));
    let player = Mobile::new(w.new_mobile_serial(), "Lord British", 0x190);
    w.add_mobile(player).unwrap();
    (shared(w), near, far)
}

/// A Deltas handler that records who spoke.
fn speech_log(el_world: &Rc<RefCell<World>>) -> (EventLoop, Rc<RefCell<Vec<Serial>>>) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let (w, l) = (el_world.clone(), log.clone());
    let el = EventLoop::builder()
        .slot(Phase::Deltas, move || {
            w.borrow_mut()
                .drain_deltas_with(world::DELTAS_PER_ITERATION, |s, d| {
                    if d.contains(Delta::SPEECH) {
                        l.borrow_mut().push(s);
                    }
                })
        })
        .build();
    (el, log)
}

#[tokio::test(start_paused = true)]
async fn barks_run_only_while_their_sector_is_active() {
    let (w, near, far) = town();
    let (mut el, said) = speech_log(&w);
    let logic = game::start_game_logic(w.clone());
    run_for(&mut el, minutes(2)).await;
    assert!(
        said.borrow().is_empty(),
        "nobody barks with no player around"
    );
    assert_eq!(timer::dump().live, 0, "and nothing is scheduled");

    let player_at = fel(1005, 1005);
    w.borrow_mut().activate_around(player_at);
    assert!(w.borrow().is_active(&fel(1030, 990)) && !w.borrow().is_active(&fel(3000, 3000)));
    assert_eq!(logic.barking(), 3);
    run_for(&mut el, Duration::from_millis(5000 - 8)).await;
    assert!(said.borrow().is_empty(), "the first line comes after 5 s");
    run_for(&mut el, Duration::from_millis(3000 + 8)).await;
    let mut first: Vec<Serial> = said.borrow().clone();
    first.sort();
    assert_eq!(
        first, near,
        "each NPC near the player said one line within 8 s"
    );
    run_for(&mut el, minutes(2)).await;
    let lines = said.borrow().len();
    assert!(
        (3 * 4..=3 * 8).contains(&lines),
        "a line every 17-33 s: {lines}"
    );
    assert!(!said.borrow().contains(&far));

    w.borrow_mut().deactivate_around(player_at);
    assert_eq!(w.borrow().active_sectors(), 0);
    assert_eq!(logic.barking(), 0);
    run_for(&mut el, Duration::from_millis(8)).await;
    assert_eq!(
        timer::dump().live,
        0,
        "aborted barks leave no pauses behind"
    );
    run_for(&mut el, minutes(5)).await;
    assert_eq!(said.borrow().len(), lines, "silence after the player left");
    let stats = logic.stats();
    assert_eq!((stats.barks_started, stats.barks_stopped), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn npcs_wake_and_sleep_as_they_move_or_appear() {
    let (w, near, far) = town();
    let (mut el, said) = speech_log(&w);
    let logic = game::start_game_logic(w.clone());
    w.borrow_mut().activate_around(fel(1005, 1005));
    w.borrow_mut().activate_around(fel(1006, 1006));
    w.borrow_mut().deactivate_around(fel(1006, 1006));
    assert_eq!(
        logic.barking(),
        3,
        "a second player in the same place changes nothing"
    );

    w.borrow_mut().move_mobile(far, fel(1001, 1001));
    assert_eq!(logic.barking(), 4, "walking into an active sector wakes it");
    w.borrow_mut().move_mobile(near[0], fel(4000, 100));
    assert_eq!(logic.barking(), 3, "walking out puts it to sleep");
    let newcomer = npc(&mut w.borrow_mut(), fel(1002, 1002));
    assert_eq!(logic.barking(), 4, "appearing in an active sector wakes it");
    w.borrow_mut().remove_mobile(near[1]);
    assert_eq!(logic.barking(), 3, "removal stops it");

    run_for(&mut el, Duration::from_secs(8)).await;
    let mut spoke = said.borrow().clone();
    spoke.sort();
    let mut expected = vec![near[2], far, newcomer];
    expected.sort();
    assert_eq!(spoke, expected);
}

#[tokio::test(start_paused = true)]
async fn barks_start_for_npcs_already_active_when_logic_starts_and_stop_on_stop() {
    let (w, near, _) = town();
    let (mut el, said) = speech_log(&w);
    w.borrow_mut().activate_around(fel(1000, 1000));
    let logic = game::start_game_logic(w.clone());
    assert_eq!(logic.barking(), near.len());
    logic.stop();
    run_for(&mut el, minutes(1)).await;
    assert!(said.borrow().is_empty());
    assert_eq!(timer::dump().live, 0);
}

// ---------------------------------------------------------------------------------------------
// Idle load

/// The idle load of the default world (190 728 items, 33 158 mobiles, 1 795 spawners): the
/// fire rates the loop really produces match what [`game::idle_load`] computes from the
/// world (spawner cadences; ground items decaying uniformly over 10–60 minutes), with one
/// loop wake-up per fire at most. docs/world.md quotes the computed figures (3.3 fires/s
/// over the first ten minutes, 4.1 fires/s over minutes 10–60).
#[tokio::test(start_paused = true)]
async fn idle_load_of_the_default_world_is_what_idle_load_computes() {
    let w = shared(world::generate_default(world::DEFAULT_SEED));
    assert_eq!(
        (w.borrow().item_count(), w.borrow().mobile_count()),
        (190_728, 33_158)
    );
    let expected = game::idle_load(&w.borrow());
    assert!(
        expected.spawners > 0 && expected.decaying_items > 0,
        "{expected:?}"
    );
    // Within 5 %: spawners start at their own phase, so a window sees a few runs more or less.
    let near = |measured: f64, computed: f64| (measured / computed - 1.0).abs() <= 0.05;

    let mut el = shard_loop(&w);
    let logic = game::start_game_logic(w.clone());
    assert_eq!(
        timer::dump().live,
        logic.world_timers(),
        "idle: only world timers are scheduled"
    );

    let first = game::DECAY_MIN;
    run_for(&mut el, first).await;
    let (stats, loop_stats) = (logic.stats(), el.stats());
    let rate = stats.world_fires() as f64 / first.as_secs_f64();
    assert_eq!(stats.decays, 0, "nothing decays before DECAY_MIN");
    assert!(
        near(rate, expected.spawner_fires_per_sec),
        "computed {:.3} fires/s; measured {rate:.3}",
        expected.spawner_fires_per_sec
    );
    let wakes = loop_stats.ticks_fired as f64 / first.as_secs_f64();
    assert!(
        wakes <= rate,
        "at most one loop wake-up per fire: {wakes:.2}/s"
    );

    let rest = game::DECAY_MAX - game::DECAY_MIN;
    run_for(&mut el, rest).await;
    let fires = logic.stats().world_fires() - stats.world_fires();
    let rate = fires as f64 / rest.as_secs_f64();
    assert!(
        near(rate, expected.peak_fires_per_sec()),
        "computed {:.3} fires/s; measured {rate:.3}",
        expected.peak_fires_per_sec()
    );
    assert!(
        logic.stats().decays as usize >= expected.decaying_items * 9 / 10,
        "the first items went"
    );
    assert_eq!(logic.barking(), 0, "no player, no barks");
    assert_eq!(el.stats().panics, 0);
}
