//! Autosave under paused time: warnings and saves land on the clock-aligned times, a stall
//! gives one save and then the aligned schedule again, and console changes apply at once.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use shardloop::EventLoop;
use shardloop::persist::{Autosave, Cadence, Clock, Layout, Notice, Saver, SaverConfig};
use shardloop::world::{self, World};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// What was heard, and when (on the test's wall clock).
type Heard = Rc<RefCell<Vec<(Timestamp, String)>>>;

struct Rig {
    autosave: Autosave,
    saver: Saver,
    heard: Heard,
}

fn rig(root: &std::path::Path, start: &str, cadence: Cadence, zone: TimeZone) -> Rig {
    let clock = Clock::following_tokio(start.parse().unwrap());
    let heard: Heard = Rc::default();
    let world: Rc<RefCell<World>> = Rc::new(RefCell::new(world::generate(1, 200, 30)));
    let record = |heard: &Heard| {
        let heard = heard.clone();
        Box::new(move |n: &Notice| {
            let kind = match n {
                Notice::Warning(d) => format!("warning {}", humantime::format_duration(*d)),
                Notice::Saving => "saving".into(),
                Notice::Saved(_) => "saved".into(),
                Notice::Failed(e) => format!("failed {e}"),
            };
            heard.borrow_mut().push((clock.now(), kind));
        })
    };
    let saver = Saver::new(
        world,
        SaverConfig {
            layout: Layout::new(root, root.join("Saves")),
            threads: 1,
            clock,
            keep: Box::new(|_| true),
            notices: record(&heard),
        },
    );
    let autosave = Autosave::start(saver.clone(), clock, zone, true, cadence, record(&heard));
    Rig {
        autosave,
        saver,
        heard,
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// The (time, kind) pairs, with each time cut to whole seconds (the loop's 8 ms tick puts
/// a notice up to one tick after its instant, never before).
fn heard(rig: &Rig) -> Vec<(String, String)> {
    rig.heard
        .borrow()
        .iter()
        .map(|(t, k)| (t.strftime("%H:%M:%S").to_string(), k.clone()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(t, k)| ((*t).to_owned(), (*k).to_owned()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn saves_land_on_the_hour_with_a_warning_a_minute_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut event_loop = EventLoop::new();
    let root = dir.path().to_path_buf();
    let rig = event_loop
        .run_until(async move {
            let cadence = Cadence::new(HOUR, MINUTE).unwrap();
            let rig = rig(&root, "2026-12-03T10:17:42Z", cadence, TimeZone::UTC);
            tokio::time::sleep(2 * HOUR).await;
            rig
        })
        .await;
    assert_eq!(
        heard(&rig),
        pairs(&[
            ("10:59:00", "warning 1m"),
            ("11:00:00", "saving"),
            ("11:00:00", "saved"),
            ("11:59:00", "warning 1m"),
            ("12:00:00", "saving"),
            ("12:00:00", "saved"),
        ])
    );
    let first = rig.heard.borrow()[1].0;
    assert!(first >= at("2026-12-03T11:00:00Z"), "never early: {first}");
    assert!(
        first < at("2026-12-03T11:00:00.020Z"),
        "at most a couple of ticks late: {first}"
    );
    assert_eq!(rig.saver.finished(), 2);
    drop(rig.autosave);
}

#[tokio::test(start_paused = true)]
async fn alignment_follows_the_configured_zone() {
    let dir = tempfile::tempdir().unwrap();
    let mut event_loop = EventLoop::new();
    let root = dir.path().to_path_buf();
    let rig = event_loop
        .run_until(async move {
            // Kolkata is UTC+5:30: a 6 h cadence saves at 00:00, 06:00, ... local, :30 in UTC.
            let cadence = Cadence::new(6 * HOUR, Duration::ZERO).unwrap();
            let zone = TimeZone::get("Asia/Kolkata").unwrap();
            let rig = rig(&root, "2026-12-03T01:00:00Z", cadence, zone);
            tokio::time::sleep(6 * HOUR).await;
            rig
        })
        .await;
    assert_eq!(
        heard(&rig),
        pairs(&[("06:30:00", "saving"), ("06:30:00", "saved")])
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_stall_it_saves_once_then_resumes_the_aligned_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let mut event_loop = EventLoop::new();
    let root = dir.path().to_path_buf();
    let rig = event_loop
        .run_until(async move {
            let cadence = Cadence::new(10 * MINUTE, Duration::ZERO).unwrap();
            let rig = rig(&root, "2026-12-03T10:01:00Z", cadence, TimeZone::UTC);
            tokio::time::sleep(MINUTE).await; // 10:02, waiting for 10:10
            // The loop thread is stuck for 35 minutes (tokio's clock jumps; nothing runs).
            tokio::time::advance(35 * MINUTE).await;
            tokio::time::sleep(12 * MINUTE).await; // to 10:49
            rig
        })
        .await;
    let got = heard(&rig);
    // One save for the missed 10:10, 10:20 and 10:30 when the loop comes back (10:37), then
    // 10:40 as scheduled; not four saves back to back.
    assert_eq!(
        got,
        pairs(&[
            ("10:37:00", "saving"),
            ("10:37:00", "saved"),
            ("10:40:00", "saving"),
            ("10:40:00", "saved"),
        ]),
    );
}

#[tokio::test(start_paused = true)]
async fn console_changes_apply_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut event_loop = EventLoop::new();
    let root = dir.path().to_path_buf();
    let rig = event_loop
        .run_until(async move {
            let rig = rig(
                &root,
                "2026-12-03T10:01:00Z",
                Cadence::new(HOUR, MINUTE).unwrap(),
                TimeZone::UTC,
            );
            tokio::time::sleep(MINUTE).await; // 10:02, next save 11:00
            assert_eq!(rig.autosave.next(), Some(at("2026-12-03T11:00:00Z")));
            rig.autosave
                .set_cadence(Cadence::new(5 * MINUTE, Duration::from_secs(30)).unwrap());
            tokio::time::sleep(4 * MINUTE).await; // 10:06
            rig.autosave.set_enabled(false);
            tokio::time::sleep(20 * MINUTE).await; // 10:26: nothing while off
            assert_eq!(rig.autosave.next(), None);
            rig.autosave.set_enabled(true);
            tokio::time::sleep(5 * MINUTE).await; // 10:31
            rig
        })
        .await;
    assert_eq!(
        heard(&rig),
        pairs(&[
            ("10:04:30", "warning 30s"),
            ("10:05:00", "saving"),
            ("10:05:00", "saved"),
            ("10:29:30", "warning 30s"),
            ("10:30:00", "saving"),
            ("10:30:00", "saved"),
        ])
    );
}
