//! `shardloop chart` as an operator runs it: a CSV written by the history becomes an SVG
//! beside it (or where `-o` says) with the title, the legend and one shape per series; a bad
//! or empty CSV exits 2 naming the file, line and column, and writes nothing.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use shardloop::runtime::Phase;
use shardloop::runtime::history::chart::LAG_LABEL;
use shardloop::runtime::history::{History, LoopSecond, Offender, Site};

mod common;

const PATIENCE: Duration = Duration::from_secs(60);

fn chart(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(common::binary::BIN);
    cmd.current_dir(dir)
        .env_remove("RUST_LOG")
        .arg("chart")
        .args(args);
    common::deadline::run_within(&mut cmd, PATIENCE)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Two minutes of a loop that mostly sleeps, with a ten-second slow-callback episode.
fn history() -> History {
    let mut history = History::new();
    for t in 0..120 {
        let mut s = LoopSecond {
            unix_second: 1_767_282_840 + t,
            uptime_second: 60 + t,
            wall: Duration::from_secs(1),
            ..LoopSecond::default()
        };
        s.counts.max_wheel_lag = Duration::from_micros(200);
        s.add(Phase::Network, Duration::from_millis(8));
        s.add(Phase::Stolen, Duration::from_millis(1));
        if (50..60).contains(&t) {
            let took = Duration::from_millis(250);
            s.add(Phase::Timers, took);
            s.counts.max_wheel_lag = took;
            let site = Site {
                file: "src/game/decay.rs",
                line: 88,
                column: 13,
            };
            Offender::offer(&mut s.worst.timer, took, site);
        }
        let busy: Duration = Phase::ALL.iter().map(|&p| s.spent(p)).sum();
        s.add(Phase::Sleep, s.wall - busy);
        history.push(s);
    }
    history
}

fn write_history(path: &Path) {
    history()
        .write_csv(std::fs::File::create(path).unwrap())
        .unwrap();
}

/// The text of every `<text>` element, trimmed (the SVG backend puts it on its own line).
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|element| element.split_once('>'))
        .filter_map(|(_, rest)| rest.split_once("</text>"))
        .map(|(text, _)| text.trim().to_owned())
        .collect()
}

/// Polylines with more than two points: data series (axes and ticks are two-point lines).
fn series_lines(svg: &str) -> usize {
    svg.split("<polyline")
        .skip(1)
        .filter(|element| {
            let points = element.split("points=\"").nth(1).unwrap_or("");
            let points = points.split('"').next().unwrap_or("");
            points.split_whitespace().count() > 2
        })
        .count()
}

#[test]
fn a_csv_becomes_an_svg_beside_it_with_title_legend_and_one_shape_per_series() {
    let dir = tempfile::tempdir().unwrap();
    write_history(&dir.path().join("episode.csv"));
    let output = chart(dir.path(), &["episode.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("120 seconds drawn to episode.svg"));

    let svg = std::fs::read_to_string(dir.path().join("episode.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    let texts = texts(&svg);
    let has = |wanted: &str| texts.iter().any(|t| t == wanted);
    assert!(
        has("shardloop loop thread: episode.csv"),
        "the title in {texts:?}"
    );
    for label in Phase::ALL.iter().map(|p| p.name()).chain([LAG_LABEL]) {
        assert!(has(label), "legend label {label} in {texts:?}");
    }
    assert!(has("time of day (UTC)"), "{texts:?}");
    assert!(
        has("share of the loop thread&apos;s wall time (%)"),
        "{texts:?}"
    );
    assert!(has("max wheel lag per second (ms)"), "{texts:?}");
    assert!(
        has("15:56:00"),
        "the time axis is labelled on minutes: {texts:?}"
    );
    // One filled band per part, one line for the wheel lag.
    assert_eq!(svg.matches("<polygon").count(), Phase::COUNT);
    assert_eq!(series_lines(&svg), 1);
}

#[test]
fn dash_o_names_the_output() {
    let dir = tempfile::tempdir().unwrap();
    write_history(&dir.path().join("h.csv"));
    let output = chart(dir.path(), &["h.csv", "-o", "out/elsewhere.svg"]);
    assert!(!output.status.success(), "a missing directory is an error");
    assert!(text(&output.stderr).contains("cannot write out/elsewhere.svg"));
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let output = chart(dir.path(), &["h.csv", "-o", "out/elsewhere.svg"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(dir.path().join("out/elsewhere.svg").is_file());
    assert!(!dir.path().join("h.svg").exists());
}

#[test]
fn a_bad_csv_exits_2_naming_file_line_and_column_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    write_history(&path);
    let good = std::fs::read_to_string(&path).unwrap();
    // Spoil the network time of the third second (line 4).
    let mut lines: Vec<String> = good.lines().map(str::to_owned).collect();
    let mut fields: Vec<&str> = lines[3].split(',').collect();
    fields[4] = "8ms";
    lines[3] = fields.join(",");
    std::fs::write(&path, lines.join("\n")).unwrap();

    let output = chart(dir.path(), &["bad.csv"]);
    assert_eq!(output.status.code(), Some(2));
    let err = text(&output.stderr);
    assert!(
        err.contains("bad.csv: line 4, column 5 (network_us): \"8ms\" is not a whole number"),
        "{err}"
    );
    assert!(err.contains("no chart written"), "{err}");
    assert!(!dir.path().join("bad.svg").exists());
}

#[test]
fn an_empty_history_or_a_missing_file_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    History::new()
        .write_csv(std::fs::File::create(dir.path().join("empty.csv")).unwrap())
        .unwrap();
    let output = chart(dir.path(), &["empty.csv"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("empty.csv: no seconds to draw"));
    assert!(!dir.path().join("empty.svg").exists());

    let output = chart(dir.path(), &["absent.csv"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("absent.csv: cannot open"));

    let output = chart(dir.path(), &["empty.csv", "-o", "empty.csv"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("would be overwritten"));
}
