//! The test kit: a game developer's integration tests of behaviours and packets, on the
//! paused clock, in a few lines.
//!
//! **Behind the `testkit` cargo feature**, for tests only (tokio gates its `test-util` the
//! same way), so no release build carries it. In your game's `Cargo.toml`:
//!
//! ```toml
//! [dev-dependencies]
//! shardloop = { path = "../shardloop", features = ["testkit"] }  # beside [dependencies]' line
//! ```
//!
//! ```no_run
//! use std::time::Duration;
//! use shardloop::game::{Game, Packet};
//! use shardloop::net::{Access, BadPacket};
//! use shardloop::shard::Shard;
//! use shardloop::testkit::{Login, TestShard};
//! use shardloop::world::{Location, MapId, Mobile, Serial};
//!
//! const HERE: Location = Location::new(500, 500, 0, MapId::FELUCCA);
//!
//! fn hello(p: &mut Packet<'_>, name: &[u8]) -> Result<(), BadPacket> {
//!     let name = shardloop::game::text(name, 16, "name")?;
//!     let mut mobile = Mobile::new(p.world.new_mobile_serial(), name, 0x190);
//!     mobile.location = HERE;
//!     let serial = p.log_in(mobile)?;
//!     p.answer(0xA0, &[&serial.0.to_be_bytes()]);
//!     Ok(())
//! }
//!
//! const HELLO: Login = Login {
//!     request: |name| (0x20, name.as_bytes().to_vec()),
//!     accepted: 0xA0,
//!     read: |ok| Some((Serial(u32::from_be_bytes(ok.try_into().ok()?)), HERE)),
//! };
//!
//! #[tokio::test(start_paused = true)]
//! async fn a_player_logs_in_and_an_hour_passes() {
//!     let game = || Game::new("hello").packet(0x20, "login", Access::Always, hello);
//!     TestShard::new(Shard::builder().game(move |_| game()))
//!         .with_login(HELLO)
//!         .run(|shard| async move {
//!             let anna = shard.login("Anna").await;
//!             assert_eq!(shard.context().players().borrow().len(), 1);
//!             assert_eq!(anna.location(), HERE);
//!             shard.advance(Duration::from_secs(3600)).await;
//!         })
//!         .await;
//! }
//! ```
//!
//! [`TestShard`] runs a whole shard — the same startup, loop, network and shutdown as
//! `cargo run` — on the test's own runtime: an empty world unless a game generates one
//! (size the demo's with [`TestShard::configure`]), a temporary data directory, a loopback
//! listener, no console, no autosave, no archives. The test body runs beside it; players
//! are real TCP clients ([`TestPlayer`]) of the engine's framing that log in with the
//! game's own packets ([`Login`], given by [`TestShard::with_login`]).
//! Under `#[tokio::test(start_paused = true)]` game time passes only when
//! everything waits — [`Running::advance`], or a [`TestPlayer::expect`] whose packet is not
//! there yet — so a 5-minute behaviour is tested in milliseconds, at exactly the same
//! logical times on every run.
//!
//! Below the whole shard: [`Harness`] calls one game's packet handlers on a world with
//! socketless connections, and [`npc`] makes the `Npc` a behaviour gets — unit tests with no
//! shard, no listener and no loop.
//!
//! Besides, the engine's fault-injection hooks for tests ([`inject_uring_enter_failure`]),
//! which only builds with this feature have, and one benchmark hook: [`ReadPath`], the
//! network server's read path for one connection with the socket replaced by memory
//! (`benches/net.rs`, `read_path`).
//!
//! Owns the test shard's setup and its players; must never be needed by the shard itself.

mod harness;
mod player;

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::config::Config;
use crate::game::{Game, GameContext};
use crate::net;
use crate::shard::{Console, Shard, ShardBuilder, Stopped};
use crate::world::World;

pub use crate::net::read_path::ReadPath;
pub use harness::{Harness, npc};
pub use player::{EXPECT_WITHIN, Login, TestPlayer};

/// FAULT INJECTION: the next `io_uring_enter` of the io_uring ring on this thread fails with
/// `errno` instead of entering the kernel — EBADF or EIO kill the ring (the shard then stops
/// on the fault, with a final save), EAGAIN, EBUSY and EINTR are retried. Call it on the loop
/// thread of a shard running the io_uring backend. Nothing a client sends and no
/// configuration key reaches this hook; only test builds have it.
#[cfg(all(target_os = "linux", feature = "io-uring"))]
pub fn inject_uring_enter_failure(errno: i32) {
    net::uring::inject_enter_failure(errno);
}

/// A shard for one test. Build it, adjust it, [`run`](Self::run) it.
#[must_use = "a test shard does nothing until it runs"]
pub struct TestShard {
    builder: ShardBuilder,
    login: Option<Login>,
    config: Config,
    dir: tempfile::TempDir,
}

impl TestShard {
    /// A test shard with the games of `builder` (`Shard::builder().game(..)`), an empty world
    /// (seed 7), its data in a new temporary directory (removed afterwards), and a listener
    /// on 127.0.0.1 with a port the system picks.
    ///
    /// # Panics
    /// When no temporary directory can be made.
    pub fn new(builder: ShardBuilder) -> TestShard {
        let dir = tempfile::tempdir().expect("a temporary data directory for the test shard");
        let mut config = Config::default();
        config.server.data_dir = dir.path().join("data");
        config.server.probe_host = false;
        config.server.loop_stats_interval = Duration::ZERO;
        config.world.generate.seed = 7;
        config.world.generate.items = 0;
        config.world.generate.mobiles = 0;
        config.autosave.enabled = false;
        config.archive.enabled = false;
        // No 64 MiB disk reserve in every test's temporary directory.
        config.world.disk_reserve = 0;
        TestShard {
            builder,
            login: None,
            config,
            dir,
        }
    }

    /// Changes the configuration before the shard starts (a generated world's size, a limit
    /// of `[network]`, a game's section with `config.set_section(..)`). The data directory
    /// and listener are the kit's: leave them.
    pub fn configure(mut self, change: impl FnOnce(&mut Config)) -> TestShard {
        change(&mut self.config);
        self
    }

    /// How players log in to this shard's game: [`Running::login`] and
    /// [`TestPlayer::login`] send `login`'s packet and read its answer.
    pub fn with_login(mut self, login: Login) -> TestShard {
        self.login = Some(login);
        self
    }

    /// Runs the shard and `body` beside it; once `body` returns, stops the shard (final save
    /// included) and returns what `body` returned.
    ///
    /// # Panics
    /// When the games do not build, the shard cannot start, or it stops on an error — with
    /// the error — and when `body` panics.
    pub async fn run<F, Fut, T>(self, body: F) -> T
    where
        F: FnOnce(Running) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_to_end(body).await.0
    }

    /// [`run`](Self::run), also returning how the shard stopped (its loop counters, its
    /// final save).
    pub async fn run_to_end<F, Fut, T>(self, body: F) -> (T, Stopped)
    where
        F: FnOnce(Running) -> Fut,
        Fut: Future<Output = T>,
    {
        let listener = net::bind_all(&["127.0.0.1:0".parse().expect("an address")], 0)
            .expect("a loopback listener for the test shard")
            .remove(0);
        let addr = listener.local_addr().expect("the listener's address");
        let login = self.login;
        let (ready_tx, ready_rx) = oneshot::channel();
        let shard = self
            .builder
            .game(move |_| watch_start(ready_tx))
            .listeners(vec![listener])
            .build(&self.config)
            .unwrap_or_else(|e| panic!("the test shard's games do not build: {e}"));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let serving = run_shard(shard, stop_rx);
        let testing = async move {
            let context = ready_rx
                .await
                .expect("the test shard stopped before it was ready");
            let value = body(Running {
                addr,
                context,
                login,
            })
            .await;
            let _ = stop_tx.send(());
            value
        };
        let (stopped, value) = tokio::join!(serving, testing);
        drop(self.dir);
        (value, stopped)
    }
}

/// The kit's own game: it hands the test body the shard's game state once every other game
/// has started.
fn watch_start(ready: oneshot::Sender<GameContext>) -> Game {
    Game::new("testkit").on_start(move |context| {
        let _ = ready.send(context.clone());
    })
}

async fn run_shard(shard: Shard, stop: oneshot::Receiver<()>) -> Stopped {
    let stop = async move {
        let _ = stop.await;
    };
    match shard.run(Console::none(), stop).await {
        Ok(stopped) => stopped,
        Err(e) => panic!("the test shard stopped on an error: {e}"),
    }
}

/// The running shard, as the test body sees it.
pub struct Running {
    addr: SocketAddr,
    context: GameContext,
    login: Option<Login>,
}

impl Running {
    /// Where players connect.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The world: borrow it briefly, never across an `.await`.
    #[must_use]
    pub fn world(&self) -> &Rc<RefCell<World>> {
        self.context.world()
    }

    /// The shard's game state (world, players, network), as games' start hooks see it.
    #[must_use]
    pub fn context(&self) -> &GameContext {
        &self.context
    }

    /// Each per-NPC behaviour's counters: started, stopped, panicked, running now.
    #[must_use]
    pub fn behaviour_stats(&self) -> Vec<crate::game::BehaviourStats> {
        self.context.behaviour_stats()
    }

    /// A new connection, not logged in.
    pub async fn connect(&self) -> TestPlayer {
        TestPlayer::connect(self.addr, self.login).await
    }

    /// A new connection logged in as `name` with the game's login
    /// ([`TestShard::with_login`]), where the game placed it.
    pub async fn login(&self, name: &str) -> TestPlayer {
        let mut player = self.connect().await;
        player.login(name).await;
        player
    }

    /// Lets `duration` of game time pass (everything due in it runs).
    pub async fn advance(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}
