//! `/`: the status page — verdict, uptime, players, the last 15 minutes of the loop as a
//! chart, the last save and archive run — as one self-contained HTML document.
//!
//! The chart is the loopstats SVG ([`crate::runtime::history::chart`]) inlined; styles are inline; the
//! page reloads itself with a `<meta http-equiv="refresh">`. No script, no build step, nothing
//! fetched from elsewhere: it works from a host with no internet. Every text that comes from
//! the shard is escaped.
//!
//! Rendered on the HTTP thread only (drawing the chart takes milliseconds).

use std::fmt::Write as _;
use std::time::Duration;

use crate::runtime::history::chart;

use super::families::verdict_label;
use super::probe::Snapshot;

/// Seconds between reloads.
pub const REFRESH_SECONDS: u32 = 5;
/// The chart's title.
pub const CHART_TITLE: &str = "Loop thread, last 15 minutes";

/// The page for `snapshot`, the endpoint having run for `uptime`.
pub fn render(snapshot: &Snapshot, uptime: Duration) -> String {
    let s = &snapshot.stats;
    let mut html = String::with_capacity(64 * 1024);
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>shardloop status</title><style>{STYLE}</style></head><body>\
         <h1>shardloop</h1><dl id=\"summary\">"
    );
    // The sentence starts with the verdict's word; the label is there for scripts.
    let _ = write!(
        html,
        "<dt>Loop verdict</dt><dd id=\"verdict\" data-verdict=\"{}\">{}</dd>",
        verdict_label(s.verdict),
        escape(&s.verdict.to_string())
    );
    row(
        &mut html,
        "uptime",
        "Uptime",
        &humantime::format_duration(Duration::from_secs(uptime.as_secs())).to_string(),
    );
    row(
        &mut html,
        "players",
        "Players",
        &format!(
            "{} ({} connections)",
            snapshot.world.players, snapshot.net.connections
        ),
    );
    row(
        &mut html,
        "world",
        "World",
        &format!(
            "{} items, {} mobiles, {} timers",
            snapshot.world.items, snapshot.world.mobiles, snapshot.world.live_timers
        ),
    );
    row(
        &mut html,
        "ticks",
        "Ticks",
        &format!(
            "{} fired, {} late; peak wheel lag {:.3?}",
            s.ticks_fired, s.late_ticks, s.max_wheel_lag
        ),
    );
    row(&mut html, "last-save", "Last save", &last_save(snapshot));
    row(&mut html, "archive", "Archive", &archive(snapshot));
    html.push_str("</dl><section id=\"chart\">");
    match chart::svg(&snapshot.history, CHART_TITLE) {
        Ok(svg) => html.push_str(&svg),
        Err(e) => {
            let _ = write!(
                html,
                "<p id=\"no-history\">No chart: {}.</p>",
                escape(&e.to_string())
            );
        }
    }
    let _ = writeln!(
        html,
        "</section><footer>Reloads every {REFRESH_SECONDS} s · \
         <a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a></footer>\
         </body></html>"
    );
    html
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
    dl{display:grid;grid-template-columns:max-content auto;gap:.3em 1.2em}\
    dt{font-weight:bold}dd{margin:0}#chart svg{max-width:100%;height:auto}\
    footer{margin-top:1em;color:#666;font-size:.9em}";

fn row(html: &mut String, id: &str, name: &str, value: &str) {
    let _ = write!(
        html,
        "<dt>{name}</dt><dd id=\"{id}\">{}</dd>",
        escape(value)
    );
}

fn last_save(snapshot: &Snapshot) -> String {
    let p = &snapshot.persist;
    let now = if p.saving {
        " (a save is writing now)"
    } else {
        ""
    };
    match &p.last_save {
        None => format!("none since start{now}"),
        Some(save) => match &save.outcome {
            Ok(took) => format!("{} — ok, took {took:.2} s{now}", save.at),
            Err(why) => format!("{} — FAILED: {why}{now}", save.at),
        },
    }
}

fn archive(snapshot: &Snapshot) -> String {
    let Some(archive) = &snapshot.persist.archive else {
        return "off".into();
    };
    let running = if archive.running {
        " (running now)"
    } else {
        ""
    };
    match &archive.last {
        None => format!("no run yet{running}"),
        Some(last) => match &last.outcome {
            Ok(report) => format!(
                "{} — ok, {} archive(s) written, {} run(s) since start{running}",
                last.at,
                report.written.len(),
                archive.runs
            ),
            Err(e) => format!("{} — FAILED: {e}{running}", last.at),
        },
    }
}

/// `text` safe inside an element or a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
