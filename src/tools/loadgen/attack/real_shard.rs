//! Hostile modes against the real shard (the demo game on `Shard::run`, in-process on a thread and runtime of
//! its own, small world, no autosave): what the attack client reports is what the server did.
//! Only limits the shard already has are used (`network.idle_timeout`,
//! `network.send_buffer_size`); the limits still to come are their own tests' to prove.
//!
//! (The binary's unit tests cannot run the binary itself: cargo builds it, and sets
//! `CARGO_BIN_EXE_shardloop`, for integration tests only. `Shard::run` with the demo game is
//! the same shard the binary runs.)

use std::io::{self, Cursor, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use shardloop::config::Config;
use shardloop::shard::{Console, Shard};
use tokio::sync::oneshot;

use super::AttackReport;
use super::end_to_end::{self, assert_closed, ms};

/// Longest the shard may take to start, or to stop once asked.
const LIMIT: Duration = Duration::from_secs(60);

/// A shard running on its own thread until dropped (then stopped and joined).
struct RealShard {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl RealShard {
    /// A small shard on a free loopback port, with `tune` applied to its configuration.
    fn start(tune: impl FnOnce(&mut Config)) -> RealShard {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut config = Config::default();
        config.server.data_dir = dir.path().join("data");
        config.server.probe_host = false;
        config.world.generate.items = 3_000;
        config.world.generate.mobiles = 400;
        config.network.listen = vec![SocketAddr::from(([127, 0, 0, 1], 0))];
        config.autosave.enabled = false;
        tune(&mut config);
        let screen = Screen::default();
        // One `status`, then the input ends: a headless shard, stopped through `stop`.
        let console = Console::new(Cursor::new("status\n"), screen.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the shard's runtime");
            let stop = async {
                let _ = stopped.await;
            };
            let shard = Shard::builder()
                .game(crate::demo::demo_game)
                .build(&config)
                .expect("the demo game builds");
            runtime
                .block_on(shard.run(console, stop))
                .expect("the shard runs");
        });
        RealShard {
            addr: screen.listening(),
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Runs a hostile mode against the shard with `flags` (split at spaces, no ramp).
    fn attack(&self, mode: &str, flags: &str) -> AttackReport {
        end_to_end::run(self.addr, mode, flags)
    }
}

impl Drop for RealShard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(thread) = self.thread.take() else {
            return;
        };
        let give_up = std::time::Instant::now() + LIMIT;
        while !thread.is_finished() {
            // Not while unwinding: a second panic would abort and hide the first failure.
            if std::time::Instant::now() > give_up && !thread::panicking() {
                panic!("the shard did not stop within {LIMIT:?}");
            }
            thread::sleep(Duration::from_millis(10));
        }
        if thread.join().is_err() && !thread::panicking() {
            panic!("the shard's thread panicked");
        }
    }
}

/// The console's output, shared with the test.
#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl Screen {
    /// The address in the `listening` line of `status`, once it is there.
    fn listening(&self) -> SocketAddr {
        let give_up = std::time::Instant::now() + LIMIT;
        loop {
            let text =
                String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
                    .into_owned();
            let found = text
                .lines()
                .find_map(|l| l.strip_prefix("listening "))
                .and_then(|rest| rest.split([',', ' ']).next())
                .and_then(|addr| addr.parse().ok());
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "no listening line in `status`:\n{text}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Write for Screen {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut screen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        screen.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_shard_closes_idle_connections_after_its_idle_timeout() {
    let shard = RealShard::start(|config| config.network.idle_timeout = ms(500));

    let report = shard.attack("idle", "--connections 3 --duration 10s --no-reconnect");

    // Swept once a second: long before the run's end.
    assert_closed(&report, (3, 0), ms(500)..ms(10_000));
}

#[test]
fn the_shard_drops_a_slow_reader_whose_output_backs_up() {
    let shard = RealShard::start(|config| config.network.send_buffer_size = 4096);

    let report = shard.attack(
        "slow-reader",
        "--connections 2 --duration 20s --payload 64 --no-reconnect",
    );

    // Closed with the pings unread on its side: the client sees a reset at its next ping.
    assert_closed(&report, (0, 2), ms(0)..ms(20_000));
    assert_eq!(report.bytes_received, 0, "{report}");
}
