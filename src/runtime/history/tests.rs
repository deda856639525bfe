use std::time::Duration;

use super::*;
use crate::runtime::telemetry::Value;

const MS: Duration = Duration::from_millis(1);

/// A second numbered `n`: its uptime and wall clock follow `n`, and its counts are `n` so a
/// test can tell seconds apart.
fn second(n: u64) -> LoopSecond {
    let mut s = LoopSecond {
        unix_second: 1_700_000_000 + n,
        uptime_second: n,
        wall: Duration::from_secs(1),
        counts: SecondCounts {
            iterations: n,
            ..SecondCounts::default()
        },
        ..LoopSecond::default()
    };
    s.add(Phase::Timers, 10 * MS);
    s.add(Phase::Sleep, 985 * MS);
    s.add(Phase::Stolen, 5 * MS);
    s
}

fn uptimes<'a>(seconds: impl Iterator<Item = &'a LoopSecond>) -> Vec<u64> {
    seconds.map(|s| s.uptime_second).collect()
}

#[test]
fn the_ring_keeps_the_newest_900_oldest_first() {
    let mut h = History::new();
    assert!(h.is_empty());
    assert_eq!(h.iter().len(), 0);
    for n in 0..3 {
        h.push(second(n));
    }
    assert_eq!(uptimes(h.iter()), [0, 1, 2]);
    for n in 3..2_000 {
        h.push(second(n));
    }
    assert_eq!(h.len(), History::CAPACITY);
    let kept = uptimes(h.iter());
    assert_eq!(kept.len(), 900);
    assert_eq!(kept, (1_100..2_000).collect::<Vec<_>>());
    assert_eq!(h.iter().next_back().unwrap().uptime_second, 1_999);
}

#[test]
fn wrapping_exactly_at_capacity_and_one_past() {
    let mut h = History::new();
    for n in 0..900 {
        h.push(second(n));
    }
    assert_eq!(uptimes(h.iter()), (0..900).collect::<Vec<_>>());
    h.push(second(900));
    assert_eq!(uptimes(h.iter()), (1..901).collect::<Vec<_>>());
}

#[test]
fn last_n_is_the_newest_n_in_order_across_the_wrap() {
    let mut h = History::new();
    for n in 0..1_000 {
        h.push(second(n));
    }
    // The ring's split point is at 100: ask for windows on both sides of it.
    assert_eq!(uptimes(h.last(3)), [997, 998, 999]);
    assert_eq!(uptimes(h.last(150)), (850..1_000).collect::<Vec<_>>());
    assert_eq!(uptimes(h.last(850)), (150..1_000).collect::<Vec<_>>());
    assert_eq!(uptimes(h.last(5_000)).len(), 900);
    assert_eq!(h.last(0).len(), 0);
    assert_eq!(h.last(60).len(), 60);

    let mut short = History::new();
    short.push(second(7));
    short.push(second(8));
    assert_eq!(uptimes(short.last(60)), [7, 8]);
    assert_eq!(uptimes(short.last(1)), [8]);
}

#[test]
fn an_offender_keeps_the_longest_and_the_first_on_a_tie() {
    let mut slot = None;
    Offender::offer(&mut slot, 3 * MS, 1u8);
    Offender::offer(&mut slot, 2 * MS, 2u8);
    Offender::offer(&mut slot, 3 * MS, 3u8);
    assert_eq!(
        slot,
        Some(Offender {
            took: 3 * MS,
            site: 1
        })
    );
    Offender::offer(&mut slot, 4 * MS, 4u8);
    assert_eq!(slot.unwrap().site, 4);
}

#[test]
fn a_site_is_the_callers_location() {
    let site = Site::from(std::panic::Location::caller());
    assert!(site.file.ends_with(".rs"), "{site}");
    assert_eq!(
        site.to_string(),
        format!("{}:{}:{}", site.file, site.line, site.column)
    );
}

#[test]
fn the_summary_adds_up_shares_counts_and_finds_the_worst_second() {
    let mut h = History::new();
    for n in 0..100 {
        h.push(second(n));
    }
    // Second 95: a 400 ms callback and a stall, with less sleep.
    let mut bad = second(95);
    bad.parts = [Duration::ZERO; Phase::COUNT];
    bad.add(Phase::Timers, 400 * MS);
    bad.add(Phase::Sleep, 500 * MS);
    bad.add(Phase::Stolen, 100 * MS);
    bad.counts.max_wheel_lag = 380 * MS;
    let site = Site {
        file: "src/game/decay.rs",
        line: 42,
        column: 9,
    };
    Offender::offer(&mut bad.worst.timer, 400 * MS, site);
    Offender::offer(&mut bad.worst.handler, MS, 0x02);
    h.push(bad);

    let s = h.summary(10); // seconds 91..=100 with 95's replacement pushed as the newest
    assert_eq!(s.seconds, 10);
    assert_eq!(s.wall, Duration::from_secs(10));
    // 9 seconds at 10 ms of timers + 400 ms: 490 ms of 10 s.
    assert!(
        (s.share(Phase::Timers) - 0.049).abs() < 1e-9,
        "{}",
        s.share(Phase::Timers)
    );
    assert!((s.share(Phase::Sleep) - (9.0 * 0.985 + 0.5) / 10.0).abs() < 1e-9);
    let timers = s.parts[Phase::Timers as usize].worst.unwrap();
    assert!((timers.value - 0.4).abs() < 1e-9);
    assert_eq!(timers.uptime_second, 95);
    let sleep = s.parts[Phase::Sleep as usize].worst.unwrap();
    assert!(
        (sleep.value - 0.5).abs() < 1e-9,
        "sleep's worst is its lowest"
    );
    assert_eq!(s.counts.iterations, (91..100).sum::<u64>() + 95);
    let lag = s.peak("max_wheel_lag").unwrap();
    assert_eq!((lag.value, lag.uptime_second), (Value::Time(380 * MS), 95));
    assert_eq!(s.worst_timer.unwrap().value.site, site);
    assert_eq!(s.worst_handler.unwrap().value.site, 0x02);
    assert!(s.worst_task.is_none());

    let screen = s.to_string();
    assert!(screen.contains("src/game/decay.rs:42:9"), "{screen}");
    assert!(screen.contains("packet 0x02"), "{screen}");
    assert!(screen.contains("highest 40.0 %"), "{screen}");
    assert!(screen.contains("max wheel lag 380.0 ms"), "{screen}");
    assert!(screen.contains("worst task poll       none"), "{screen}");
    let posted = screen.lines().find(|l| l.starts_with("posted")).unwrap();
    assert_eq!(
        posted.trim_end(),
        "posted           0.00 %",
        "never ran: no worst second"
    );
    let timers = screen.lines().find(|l| l.starts_with("timers")).unwrap();
    assert!(timers.contains("highest 40.0 % at"), "{timers}");
}

#[test]
fn an_empty_summary_says_so() {
    assert_eq!(
        History::new().summary(60).to_string(),
        "no seconds recorded yet"
    );
}

/// A record with every field set, durations in whole microseconds (what CSV keeps).
fn full_second(n: u64) -> LoopSecond {
    let mut s = second(n);
    for (i, part) in Phase::ALL.into_iter().enumerate() {
        s.parts[part as usize] = Duration::from_micros(1_000 * i as u64 + n);
    }
    s.run_queue_wait = Duration::from_micros(17);
    s.counts.sleeps = 2;
    s.counts.max_sleep_overshoot = Duration::from_micros(123);
    s.counts.late_wakes = 3;
    s.counts.ticks_fired = 125;
    s.counts.max_wheel_lag = Duration::from_micros(456);
    s.counts.posts = 4;
    s.counts.wakes_issued = 5;
    s.counts.wakes_elided = 6;
    s.counts.packets_in = 7;
    s.counts.packets_out = 8;
    s.counts.players = 9;
    let here = Site::from(std::panic::Location::caller());
    Offender::offer(&mut s.worst.timer, Duration::from_micros(11), here);
    let odd = Site {
        file: "C:\\odd, \"quoted\" dir/x.rs",
        line: 1,
        column: 2,
    };
    Offender::offer(&mut s.worst.posted, Duration::from_micros(12), odd);
    Offender::offer(&mut s.worst.handler, Duration::from_micros(13), 0xfe);
    s
}

#[test]
fn csv_round_trips_every_field() {
    let mut h = History::new();
    for n in 0..1_000 {
        h.push(full_second(n));
    }
    h.push(second(1_000)); // no offenders at all
    let mut out = Vec::new();
    h.write_csv(&mut out).unwrap();
    let text = String::from_utf8(out.clone()).unwrap();
    assert_eq!(text.lines().count(), 901, "a header and one row per second");
    // The newest row has no offenders, so no quoted field: its commas count its columns.
    let newest = text.lines().last().unwrap();
    assert_eq!(newest.split(',').count(), COLUMNS.len(), "{newest}");
    let read = read_csv(out.as_slice()).unwrap();
    let expected: Vec<LoopSecond> = h.iter().copied().collect();
    assert_eq!(read, expected);
}

#[test]
fn the_header_is_the_column_list() {
    let mut out = Vec::new();
    write_csv([], &mut out).unwrap();
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{}\n", names.join(","))
    );
}

#[test]
fn the_csv_doc_lists_every_column_in_order_as_the_tables_say_it() {
    let doc = include_str!("../../../docs/loopstats-csv.md");
    // `| `name` | what it holds |`
    let documented: Vec<(&str, &str)> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` | "))
        .map(|(name, rest)| (name, rest.trim_end().trim_end_matches('|').trim_end()))
        .collect();
    let columns: Vec<(&str, &str)> = COLUMNS.iter().map(|c| (c.name, c.doc)).collect();
    assert_eq!(documented, columns);
}

fn csv_of(rows: &[&str]) -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    let mut text = names.join(",");
    for row in rows {
        text.push('\n');
        text.push_str(row);
    }
    text
}

fn refusal(text: &str) -> String {
    match read_csv(text.as_bytes()) {
        Ok(rows) => panic!("accepted {} rows of {text:?}", rows.len()),
        Err(e) => e.to_string(),
    }
}

/// A valid row written by the writer, as text.
fn good_row(n: u64) -> String {
    let mut out = Vec::new();
    write_csv([&full_second(n)], &mut out).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_owned()
}

#[test]
fn bad_csv_is_refused_naming_line_and_column() {
    let good = good_row(1);
    assert_eq!(read_csv(csv_of(&[&good]).as_bytes()).unwrap().len(), 1);
    assert_eq!(refusal(""), "line 1: empty: expected the header row");
    let wrong_header = refusal("unix_s,uptime,wall_us\n");
    assert!(
        wrong_header.starts_with("line 1: header column 2 should be \"uptime_s\""),
        "{wrong_header}"
    );

    let bad_number = good.replacen(",1000000,1,", ",1000000,10x1,", 1);
    assert_ne!(bad_number, good, "the row has a field to spoil");
    let e = refusal(&csv_of(&[&good, &bad_number]));
    assert!(
        e.starts_with("line 3, column 4 (timers_us): \"10x1\" is not a whole number"),
        "{e}"
    );

    let negative = good.replacen("1700000001", "-5", 1);
    let e = refusal(&csv_of(&[&negative]));
    assert!(e.starts_with("line 2, column 1 (unix_s)"), "{e}");

    let short = good.rsplitn(3, ',').nth(2).unwrap();
    let e = refusal(&csv_of(&[short]));
    let fields = COLUMNS.len();
    assert_eq!(
        e,
        format!("line 2: {} fields, expected {fields}", fields - 2)
    );
    let e = refusal(&csv_of(&[&format!("{good},1")]));
    assert_eq!(e, format!("line 2: more than {} fields", COLUMNS.len()));

    let bad_packet = good.replace("0xfe", "0x1ff");
    let e = refusal(&csv_of(&[&bad_packet]));
    assert!(
        e.starts_with(&format!("line 2, column {fields} (worst_handler_packet)")),
        "{e}"
    );
    let half = format!("{},", good.strip_suffix(",0xfe").unwrap());
    let e = refusal(&csv_of(&[&half]));
    assert!(
        e.contains("(worst_handler_packet): empty, but the duration is not"),
        "{e}"
    );
    let no_line = good.replacen(".rs:", ".rs:x", 1);
    let e = refusal(&csv_of(&[&no_line]));
    let site = 1 + COLUMNS
        .iter()
        .position(|c| c.name == "worst_timer_site")
        .unwrap();
    assert!(
        e.starts_with(&format!("line 2, column {site} (worst_timer_site)")),
        "{e}"
    );
}

#[test]
fn rows_must_go_oldest_first() {
    let e = refusal(&csv_of(&[&good_row(5), &good_row(4)]));
    assert_eq!(
        e,
        "line 3: uptime_s 4 is before the previous row's 5: rows go oldest first"
    );
}

#[test]
fn lines_and_rows_are_bounded_before_they_are_kept() {
    let long = "9".repeat(MAX_LINE_BYTES + 1);
    assert_eq!(
        refusal(&csv_of(&[&good_row(1), &long])),
        format!("line 3: longer than {MAX_LINE_BYTES} bytes")
    );
    // A line of exactly the limit is read (and then refused for what it says).
    let at_limit = "9".repeat(MAX_LINE_BYTES);
    assert!(refusal(&csv_of(&[&at_limit])).starts_with("line 2: 1 fields"));
    let not_utf8 = [csv_of(&[]).as_bytes(), b"\n\xff\xfe"].concat();
    assert!(
        read_csv(not_utf8.as_slice())
            .unwrap_err()
            .to_string()
            .starts_with("line 2: not UTF-8")
    );

    // The row limit, shown with a small one (the real one is the same code).
    let rows = [good_row(1), good_row(2), good_row(3), good_row(4)];
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    assert_eq!(
        csv::read_rows(csv_of(&rows[..3]).as_bytes(), 3)
            .unwrap()
            .len(),
        3
    );
    let e = csv::read_rows(csv_of(&rows).as_bytes(), 3)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "line 5: more than 3 rows");
    assert_eq!(MAX_ROWS, 100_000);
}

#[test]
fn crlf_line_ends_are_read() {
    let text = csv_of(&[&good_row(1), &good_row(2)]).replace('\n', "\r\n");
    assert_eq!(read_csv(text.as_bytes()).unwrap().len(), 2);
}
