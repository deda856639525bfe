//! The game developer's API, as a game uses it: per-NPC behaviours that start when a player
//! comes near and stop (their futures dropped) when it leaves, a behaviour that panics,
//! registrations that clash, and a game's console command.

use std::cell::Cell;
use std::io::Cursor;
use std::rc::Rc;
use std::time::Duration;

use shardloop::config::Config;
use shardloop::game::{Game, Npc};
use shardloop::net::Access;
use shardloop::shard::{Console, Shard};
use shardloop::timer;
use shardloop::world::{Mobile, World};

mod common;
use common::capture::Capture;
use common::demo::demo_game;
use common::demo::packets::{START, client, server};
use common::demo::testing::{name_near, test_shard};

/// Puts NPCs called `name` at `START`, `count` of them.
fn npcs(name: &'static str, count: usize) -> impl FnOnce(&mut World) {
    move |world| {
        for _ in 0..count {
            let serial = world.new_mobile_serial();
            let mut npc = Mobile::new(serial, name, 0x190);
            npc.is_npc = true;
            npc.location = START;
            world.add_mobile(npc).unwrap();
        }
    }
}

/// Counts itself in `alive` while its future exists.
struct Alive(Rc<Cell<i32>>);
impl Drop for Alive {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_behaviour_runs_while_a_player_is_near_and_is_dropped_when_it_leaves() {
    let alive = Rc::new(Cell::new(0));
    let counter = alive.clone();
    let game = Game::new("guards")
        .setup_world(npcs("guard", 3))
        .npc_behaviour(
            "watch",
            |m| &*m.name == "guard",
            move |npc: Npc| {
                counter.set(counter.get() + 1);
                let alive = Alive(counter.clone());
                async move {
                    let _alive = alive;
                    loop {
                        timer::pause(1000).await;
                        npc.say("all quiet");
                    }
                }
            },
        );
    test_shard(Shard::builder().game(demo_game).game(move |_| game))
        .run(|shard| async move {
            shard.advance(Duration::from_secs(10)).await;
            assert_eq!(alive.get(), 0, "nobody near: no behaviour runs");
            let mut anna = shard.login(&name_near(START, 5)).await;
            assert_eq!(alive.get(), 3);
            anna.expect(server::SPEECH).await;
            anna.send(client::LOGOUT, &[]).await;
            assert!(anna.closed_within(Duration::from_secs(5)).await);
            shard.advance(Duration::from_millis(100)).await;
            assert_eq!(alive.get(), 0, "the sector slept: every future was dropped");
            let watch = shard.behaviour_stats()[1]; // after the demo's bark
            assert_eq!((watch.name, watch.started, watch.stopped), ("watch", 3, 3));
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_behaviour_that_panics_stops_its_npc_only_and_is_counted() {
    let logs = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let game = Game::new("fragile")
        .setup_world(npcs("fragile", 2))
        .npc_behaviour(
            "unlucky",
            |m| m.is_npc,
            |npc: Npc| async move {
                timer::pause(1000).await;
                assert!(
                    npc.serial().0.is_multiple_of(2),
                    "an odd NPC trips over its own feet"
                );
                loop {
                    npc.say("still standing");
                    timer::pause(1000).await;
                }
            },
        );
    let ((), stopped) = test_shard(Shard::builder().game(demo_game).game(move |_| game))
        .run_to_end(|shard| async move {
            let mut anna = shard.login(&name_near(START, 5)).await;
            for _ in 0..3 {
                assert_eq!(&anna.expect(server::SPEECH).await[4..], b"still standing");
            }
            let unlucky = shard.behaviour_stats()[1];
            assert_eq!((unlucky.panicked, unlucky.running), (1, 1));
        })
        .await;
    assert_eq!(stopped.stats.panics, 1);
    let text = logs.text();
    assert!(text.contains("an NPC behaviour panicked"), "{text}");
    assert!(text.contains("behaviour=\"unlucky\""), "{text}");
    assert!(text.contains("registered_at=tests/game_api.rs:"), "{text}");
    assert!(text.contains("trips over its own feet"), "{text}");
}

#[test]
fn a_packet_id_or_a_command_name_taken_twice_fails_the_build_naming_both() {
    let config = Config::default();
    let say_again = Game::new("echo").packet(client::SAY, "echo", Access::LoggedIn, |_, _| Ok(()));
    let err = Shard::builder()
        .game(demo_game)
        .game(move |_| say_again)
        .build(&config)
        .err()
        .expect("two handlers for 0x03");
    let text = err.to_string();
    assert!(
        text.contains("packet 0x03 has two handlers: 'say' of demo (")
            && text.contains("src/demo/mod.rs:"),
        "{text}"
    );
    assert!(
        text.contains("'echo' of echo (tests/game_api.rs:"),
        "{text}"
    );

    let cmd = |game| Game::new(game).command("Cry", "", "", |_, _| Ok(String::new()));
    let err = Shard::builder()
        .game(move |_| cmd("a"))
        .game(move |_| cmd("b"))
        .build(&config)
        .err()
        .expect("two `cry` commands");
    assert!(
        err.to_string()
            .starts_with("console command 'Cry' is registered twice"),
        "{err}"
    );
    let save = Game::new("c").command("save", "", "", |_, _| Ok(String::new()));
    let err = Shard::builder()
        .game(move |_| save)
        .build(&config)
        .err()
        .expect("taken");
    assert!(
        err.to_string().contains("'save' of shard (built in)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_game_command_answers_on_the_console_and_help_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.data_dir = dir.path().join("data");
    config.server.probe_host = false;
    config.network.listen = vec![];
    config.autosave.enabled = false;
    let game = Game::new("greeter").command("greet", "<name>", "greets NAME", |game, words| {
        let [name] = words else {
            return Err("needs one name".into());
        };
        Ok(format!(
            "hello {name}; {} mobiles",
            game.world().borrow().mobile_count()
        ))
    });
    let game = game.command("boom", "", "a bug", |_, _| panic!("off by one"));
    let screen = Capture::default();
    let input = "help\ngreet Zoe\ngreet\nboom\nshutdown\n";
    let console = Console::new(Cursor::new(input), screen.clone());
    let shard = Shard::builder().game(move |_| game).build(&config).unwrap();
    let stopped = common::deadline::within(Duration::from_secs(120), "the shard", async {
        shard.run(console, std::future::pending()).await
    })
    .await
    .expect("runs");
    assert_eq!(
        stopped.stats.panics, 1,
        "the command's panic, caught and counted"
    );
    let text = screen.text();
    assert!(
        text.contains("error: boom: the command panicked (off by one)"),
        "{text}"
    );
    assert!(text.contains("shutting down"), "the shard went on: {text}");
    assert!(text.contains("greet <name>"), "{text}");
    assert!(text.contains("hello Zoe; "), "{text}");
    assert!(
        text.contains("error: greet: needs one name; nothing changed"),
        "{text}"
    );
}
