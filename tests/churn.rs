//! Connection churn in the log (`shardloop::net::Churn`), on the paused clock: a few events a
//! second keep their own lines, a burst becomes one summary line a second with the right
//! counts, and no timer stays armed once there is nothing left to report.
//!
//! The server writes each event's line at the level `Churn` returns; these tests read those
//! levels, and the summary lines from a captured log.

use shardloop::net::{Churn, Disconnect, ONE_BY_ONE};
use shardloop::{EventLoop, timer};
use tracing::Level;

mod common;
use common::capture::Capture;

const IDLE: &str = "idle timeout: no complete packet for 2m (network.idle_timeout)";

/// Runs `body` with a new `Churn` on a loop, the log captured at `info`; the captured lines.
async fn logged<F: Future<Output = ()>>(body: impl FnOnce(Churn) -> F) -> Vec<String> {
    let logs = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(Level::INFO)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let mut event_loop = EventLoop::new();
    event_loop
        .run_until(async { body(Churn::new()).await })
        .await;
    assert_eq!(event_loop.stats().panics, 0);
    logs.lines()
}

/// The ONE_BY_ONE first levels are `first`, the rest `DEBUG`.
fn assert_levels(levels: &[Level], first: Level) {
    let budget = ONE_BY_ONE as usize;
    assert!(levels[..budget].iter().all(|l| *l == first), "{levels:?}");
    assert!(
        levels[budget..].iter().all(|l| *l == Level::DEBUG),
        "{levels:?}"
    );
}

/// No timer is live on the loop: the churn armed none, or its summary's has fired.
#[track_caller]
fn assert_nothing_armed() {
    assert_eq!(timer::live(), 0, "{}", timer::dump());
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_300_disconnects_in_one_second_is_one_summary_line() {
    let lines = logged(|churn| async move {
        let mut levels = Vec::new();
        for i in 0..300 {
            let why = if i % 50 == 49 {
                Disconnect::fault(format!("bad packet 0x02 (move): direction {i}"))
            } else {
                Disconnect::fault(IDLE)
            };
            levels.push(churn.closed(&why));
            if i % 30 == 0 {
                timer::pause(50).await; // ten pauses: the burst spans half a second
            }
        }
        assert_levels(&levels, Level::WARN);
        timer::pause(5_000).await;
        assert_nothing_armed();
    })
    .await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains(
            "connections in the last second: 300 closed (294 idle timeout, 6 bad packet); the \
             first 10 were logged one by one, the rest only at debug"
        ),
        "{line}"
    );
    assert!(
        line.contains("closed=300 refused=0 opened=0 logged_in=0"),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_single_disconnect_keeps_its_own_line_and_arms_nothing() {
    let lines = logged(|churn| async move {
        assert_eq!(churn.closed(&Disconnect::fault(IDLE)), Level::WARN);
        assert_nothing_armed();
        timer::pause(5_000).await;
        // A second later it is a new second: its one event keeps its line too.
        assert_eq!(churn.closed(&Disconnect::normal("logged out")), Level::INFO);
        assert_nothing_armed();
    })
    .await;
    assert!(lines.is_empty(), "no summary: {lines:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_few_events_a_second_never_make_a_summary() {
    let lines = logged(|churn| async move {
        for _ in 0..30 {
            churn.opened();
            assert_eq!(churn.logged_in(), Level::INFO);
            assert_eq!(churn.closed(&Disconnect::normal("logged out")), Level::INFO);
            timer::pause(400).await; // 7 or 8 events a second
            assert_nothing_armed();
        }
    })
    .await;
    assert!(lines.is_empty(), "{lines:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_flood_gives_one_summary_a_second_then_stops_when_it_does() {
    let lines = logged(|churn| async move {
        // Three seconds, each with a burst of 100 refused connects.
        for _ in 0..3 {
            let levels: Vec<Level> = (0..100)
                .map(|_| churn.refused("too many connections"))
                .collect();
            assert_levels(&levels, Level::WARN);
            timer::pause(1_000).await;
        }
        timer::pause(10_000).await;
        assert_nothing_armed();
    })
    .await;
    assert_eq!(lines.len(), 3, "{lines:#?}");
    for line in &lines {
        assert!(line.contains("WARN"), "{line}");
        assert!(
            line.contains("last second: 100 refused (100 too many connections);"),
            "{line}"
        );
        assert!(line.contains("refused=100"), "{line}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_summary_counts_every_kind_of_event_and_names_few_kinds() {
    let lines = logged(|churn| async move {
        for _ in 0..5 {
            churn.opened();
            let _ = churn.logged_in();
            let _ = churn.refused("too many connections");
        }
        for kind in 'a'..='t' {
            let _ = churn.closed(&Disconnect::normal(format!("ended {kind}")));
        }
        let _ = churn.closed(&Disconnect::fault("anything: at all").with_kind("login timeout"));
        timer::pause(2_000).await;
    })
    .await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert!(line.contains("WARN"), "refusals and a fault: {line}");
    // Eight kinds by name, the rest as "other".
    assert!(
        line.contains(
            "21 closed (13 other, 1 ended a, 1 ended b, 1 ended c, 1 ended d, 1 ended e, \
             1 ended f, 1 ended g, 1 ended h), 5 refused (5 too many connections), 5 opened, \
             5 logged in"
        ),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_summary_still_due_is_written_when_the_churn_goes_away() {
    let lines = logged(|churn| async move {
        for _ in 0..20 {
            let _ = churn.closed(&Disconnect::normal("server shutting down"));
        }
        drop(churn);
        timer::pause(2_000).await; // its timer fires into nothing
        assert_nothing_armed();
    })
    .await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("INFO"), "no fault: {}", lines[0]);
    assert!(
        lines[0].contains("20 closed (20 server shutting down)"),
        "{}",
        lines[0]
    );
}

#[test]
fn a_disconnect_counts_as_the_kind_given_or_the_start_of_its_reason() {
    assert_eq!(Disconnect::fault(IDLE).kind(), "idle timeout");
    assert_eq!(
        Disconnect::fault("bad packet 0x01 (login): name of 31 bytes").kind(),
        "bad packet"
    );
    assert_eq!(
        Disconnect::normal("whatever: 3")
            .with_kind("login timeout")
            .kind(),
        "login timeout"
    );
}
