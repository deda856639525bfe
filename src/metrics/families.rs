//! The Prometheus families of `/metrics`: names, help texts, units and labels, filled from
//! one [`Snapshot`] and the HTTP thread's own readings, and encoded by `prometheus-client`.
//!
//! Names follow Prometheus conventions: the `shardloop_` prefix, base units (seconds, bytes),
//! `_total` on counters, a unit suffix on everything that has one. `docs/monitoring.md` lists
//! every family; keep the two in step.
//!
//! A scrape builds a fresh registry of constant values (the loop's counters are copies), plus
//! the save families the loop updates as saves end ([`super::saves::SaveMetrics`]). The text is
//! OpenMetrics, as `prometheus-client` writes it; [`classic_text`] turns it into the older
//! Prometheus text format for clients that do not ask for OpenMetrics (`curl`, `promtool`).
//!
//! Runs on the HTTP thread only.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use crate::persist::archive::remote::Cause;
use crate::persist::archive::upload::Status as OffsiteStatus;
use crate::runtime::history::LoopSecond;
use crate::runtime::telemetry::{Kind, Metric, TOTALS, Total, Value};
use crate::runtime::{LagHistogram, LoopStats, Phase, Verdict};

use super::disk::DirSize;
use super::probe::Snapshot;
use super::process::ProcessFacts;

/// What the endpoint refused since it started, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpCounts {
    /// Idle connections closed at the connection bound to make room for a newcomer.
    pub evicted: u64,
    /// Newcomers closed at the connection bound because every connection was mid-request.
    pub refused: u64,
    /// Requests answered `401`: no `Authorization: Bearer` with the token.
    pub unauthorized: u64,
}
use super::saves::SaveMetrics;

/// The content type of [`classic_text`]'s output.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The content type of OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every verdict with its label value, for the labelled verdict gauge.
pub const VERDICTS: [(Verdict, &str); 4] = [
    (Verdict::Healthy, "healthy"),
    (Verdict::SleepSuspended, "sleep_suspended"),
    (Verdict::SpinningConfigured, "spinning_configured"),
    (Verdict::SpinningUnsupported, "spinning_unsupported"),
];

/// The label value of `verdict`.
pub fn verdict_label(verdict: Verdict) -> &'static str {
    VERDICTS
        .iter()
        .find(|(v, _)| *v == verdict)
        .map_or("unknown", |(_, name)| name)
}

/// Per-phase loop seconds accumulated from the per-second history across scrapes (the
/// history keeps 15 minutes; a counter must keep everything since start).
#[derive(Debug, Clone, Default)]
pub struct PhaseTotals {
    /// The newest uptime second added.
    pub seen: Option<u64>,
    /// Time per phase, indexed by `Phase as usize`.
    pub spent: [Duration; Phase::COUNT],
}

impl PhaseTotals {
    /// Adds the seconds newer than the newest one added (`history` oldest first).
    pub fn add(&mut self, history: &[LoopSecond]) {
        for second in history {
            if self.seen.is_some_and(|seen| second.uptime_second <= seen) {
                continue;
            }
            for phase in Phase::ALL {
                self.spent[phase as usize] += second.spent(phase);
            }
            self.seen = Some(second.uptime_second);
        }
    }
}

/// What a scrape reads besides the loop's snapshot.
#[derive(Debug, Clone)]
pub struct Readings<'a> {
    /// The process's CPU, memory and descriptors, read for this scrape.
    pub process: ProcessFacts,
    /// Bytes per data directory, from the last walk.
    pub disk: &'a [DirSize],
    /// The save families, which the loop updates as saves end.
    pub saves: &'a SaveMetrics,
    /// Loop time per phase since the endpoint started.
    pub phases: &'a PhaseTotals,
    /// How long the loop's heartbeat has been still.
    pub heartbeat_still: Duration,
    /// Times the loop's watchdog found it stuck (`server.watchdog`).
    pub watchdog_stalls: u64,
    /// How old the loop's published copy (the snapshot) is.
    pub snapshot_age: Duration,
    /// When the endpoint started, Unix seconds.
    pub start_time: f64,
    /// What the endpoint itself refused: connections at its bound, unauthorized requests.
    pub http: HttpCounts,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabel {
    dir: &'static str,
}

/// Encodes every family as OpenMetrics text.
pub fn encode(snapshot: &Snapshot, readings: &Readings<'_>) -> String {
    let mut registry = Registry::with_prefix("shardloop");
    register_loop(&mut registry, snapshot, readings);
    register_process(&mut registry, &readings.process, readings.start_time);
    register_net(&mut registry, snapshot);
    register_world(&mut registry, snapshot);
    register_persist(&mut registry, snapshot, readings);
    register_http(&mut registry, &readings.http);
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    registry.register(name, help, ConstCounter::new(value));
}

fn seconds_counter(registry: &mut Registry, name: &str, help: &str, value: Duration) {
    registry.register_with_unit(
        name,
        help,
        Unit::Seconds,
        ConstCounter::new(value.as_secs_f64()),
    );
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    registry.register(
        name,
        help,
        ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)),
    );
}

fn unit_gauge(registry: &mut Registry, name: &str, help: &str, unit: Unit, value: f64) {
    registry.register_with_unit(name, help, unit, ConstGauge::new(value));
}

fn register_loop(registry: &mut Registry, snapshot: &Snapshot, readings: &Readings<'_>) {
    let s = &snapshot.stats;
    // The table's families: counts and times first, then (after the verdict and the lag
    // histogram) peaks and levels.
    for total in TOTALS
        .iter()
        .filter(|t| matches!(t.kind, Kind::Count | Kind::Time))
    {
        register_total(registry, total, s);
    }
    let verdicts = Family::<VerdictLabel, Gauge>::default();
    for (verdict, name) in VERDICTS {
        verdicts
            .get_or_create(&VerdictLabel { verdict: name })
            .set(i64::from(verdict == s.verdict));
    }
    registry.register(
        "loop_verdict",
        "How the loop treats idle time: 1 for the current verdict, 0 for the others",
        verdicts,
    );
    registry.register_with_unit(
        "loop_wheel_lag",
        "Wheel lag of fired ticks (processing time minus the tick's boundary), power-of-two buckets",
        Unit::Seconds,
        LagFamily(snapshot.lag),
    );
    for total in TOTALS
        .iter()
        .filter(|t| matches!(t.kind, Kind::Peak | Kind::Level))
    {
        register_total(registry, total, s);
    }
    seconds_counter(
        registry,
        "loop_cpu",
        "CPU time of the loop thread (user + system)",
        snapshot.loop_cpu,
    );
    unit_gauge(
        registry,
        "loop_heartbeat_age",
        "Time since the loop last started an iteration, as /healthz sees it",
        Unit::Seconds,
        readings.heartbeat_still.as_secs_f64(),
    );
    counter(
        registry,
        "loop_watchdog_stalls",
        "Times the watchdog found the loop stuck in one iteration for server.watchdog or longer (read live, not from the snapshot)",
        readings.watchdog_stalls,
    );
    unit_gauge(
        registry,
        "metrics_snapshot_age",
        "Age of the loop's copy these loop, network, world and save figures come from (the loop publishes one every second; more means the loop is behind or hung)",
        Unit::Seconds,
        readings.snapshot_age.as_secs_f64(),
    );
    if readings.phases.seen.is_some() {
        let phases = Family::<
            PhaseLabel,
            prometheus_client::metrics::counter::Counter<f64, AtomicU64>,
        >::default();
        for phase in Phase::ALL {
            phases
                .get_or_create(&PhaseLabel {
                    phase: phase.label(),
                })
                .inc_by(readings.phases.spent[phase as usize].as_secs_f64());
        }
        registry.register_with_unit(
            "loop_phase",
            "Loop thread wall time by part, from the per-second history (since the endpoint started)",
            Unit::Seconds,
            phases,
        );
    }
}

/// One total of the table as its family, if it has one: a count as a counter, a time as a
/// counter in seconds, a peak as a gauge in seconds, a level as a gauge.
fn register_total(registry: &mut Registry, total: &Total, stats: &LoopStats) {
    let Some(Metric { name, help }) = total.metric else {
        return;
    };
    match ((total.get)(stats), total.kind) {
        (Value::Number(n), Kind::Count) => counter(registry, name, help, n),
        (Value::Number(n), _) => gauge(registry, name, help, n),
        (Value::Time(d), Kind::Time) => seconds_counter(registry, name, help, d),
        (Value::Time(d), _) => unit_gauge(registry, name, help, Unit::Seconds, d.as_secs_f64()),
    }
}

fn register_process(registry: &mut Registry, p: &ProcessFacts, start_time: f64) {
    seconds_counter(
        registry,
        "process_cpu",
        "CPU time of the whole process, every thread (user + system)",
        p.cpu,
    );
    if let Some(rss) = p.resident_bytes {
        unit_gauge(
            registry,
            "process_resident_memory",
            "Resident memory",
            Unit::Bytes,
            rss as f64,
        );
    }
    if let Some(open) = p.open_fds {
        gauge(registry, "process_open_fds", "Open file descriptors", open);
    }
    if let Some(max) = p.max_fds {
        gauge(
            registry,
            "process_max_fds",
            "The open-file limit (soft)",
            max,
        );
    }
    unit_gauge(
        registry,
        "start_time",
        "When the metrics endpoint started (just before the shard was ready), Unix time",
        Unit::Seconds,
        start_time,
    );
}

fn register_net(registry: &mut Registry, snapshot: &Snapshot) {
    let n = &snapshot.net;
    gauge(
        registry,
        "net_connections",
        "Client connections open",
        n.connections as u64,
    );
    gauge(
        registry,
        "net_prelogin_connections",
        "Client connections open that have not logged in yet",
        n.prelogin as u64,
    );
    gauge(
        registry,
        "net_hosts",
        "Hosts (IPv4 addresses, IPv6 /64s) with a connection open",
        n.hosts as u64,
    );
    counter(registry, "net_accepted", "Connections accepted", n.accepted);
    let refused = Family::<ReasonLabel, prometheus_client::metrics::counter::Counter>::default();
    for (reason, value) in [
        ("max_connections", n.refused),
        ("max_per_ip", n.refused_per_ip),
        ("max_per_ipv6_prefix", n.refused_per_ipv6_prefix),
        ("max_per_ipv4_prefix", n.refused_per_ipv4_prefix),
        ("max_prelogin", n.refused_prelogin),
        ("connect_rate", n.refused_rate),
        ("banned", n.refused_banned),
        ("out_of_descriptors", n.shed),
    ] {
        refused.get_or_create(&ReasonLabel { reason }).inc_by(value);
    }
    registry.register(
        "net_refused",
        "Connections accepted and closed at once, by reason",
        refused,
    );
    counter(
        registry,
        "net_connect_bans",
        "Sources banned for connecting far faster than network.connect_rate",
        n.bans,
    );
    gauge(
        registry,
        "net_banned_sources",
        "Sources (IPv4 addresses, IPv6 prefixes) banned right now",
        n.banned as u64,
    );
    counter(
        registry,
        "net_connect_rate_untracked",
        "Connects let through without a connect rate: the table of sources was full",
        n.rate_untracked,
    );
    let disconnects =
        Family::<ReasonLabel, prometheus_client::metrics::counter::Counter>::default();
    for (reason, value) in disconnect_reasons(n) {
        disconnects
            .get_or_create(&ReasonLabel { reason })
            .inc_by(value);
    }
    registry.register(
        "net_disconnects",
        "Connections closed, by reason (each close counts under one reason)",
        disconnects,
    );
    counter(
        registry,
        "net_flood_dropped_packets",
        "Packets dropped for coming faster than their kind's rate",
        n.flood_dropped,
    );
    counter(
        registry,
        "net_received_packets",
        "Packets received and handled",
        n.packets_in,
    );
    registry.register_with_unit(
        "net_received",
        "Bytes received from clients",
        Unit::Bytes,
        ConstCounter::new(n.bytes_in),
    );
    registry.register_with_unit(
        "net_sent",
        "Bytes sent to clients",
        Unit::Bytes,
        ConstCounter::new(n.bytes_out),
    );
    registry.register(
        "net_flushes_deferred",
        "Connections whose output a Flush phase left for the next iteration, past its cap or budget",
        ConstCounter::new(n.flushes_deferred),
    );
    registry.register(
        "net_flush_budget_stops",
        "Flush phases that stopped at their time budget with connections still to write",
        ConstCounter::new(n.flush_budget_stops),
    );
}

/// Disconnects split into reasons that do not overlap: the server counts every close, the
/// closes for a fault (a limit or the protocol broken), and some faults by name.
pub fn disconnect_reasons(n: &crate::net::NetStats) -> [(&'static str, u64); 8] {
    let named = [
        ("login_timeout", n.login_timeouts),
        ("evicted_before_login", n.prelogin_evictions),
        ("idle_timeout", n.idle_timeouts),
        ("flood", n.flood_disconnects),
        ("send_buffer_overflow", n.send_overflows),
        ("send_soft_limit", n.send_soft_overflows),
        ("outbound_budget", n.outbound_evictions),
    ];
    let named_sum: u64 = named.iter().map(|(_, v)| v).sum();
    [
        named[0],
        named[1],
        named[2],
        named[3],
        named[4],
        named[5],
        ("protocol", n.faults.saturating_sub(named_sum)),
        ("closed", n.disconnects.saturating_sub(n.faults)),
    ]
}

fn register_world(registry: &mut Registry, snapshot: &Snapshot) {
    let w = &snapshot.world;
    gauge(registry, "world_items", "Items in the world", w.items);
    gauge(
        registry,
        "world_mobiles",
        "Mobiles in the world, players' included",
        w.mobiles,
    );
    gauge(registry, "world_players", "Players logged in", w.players);
    gauge(
        registry,
        "loop_timers",
        "Timers armed on the loop's wheel",
        w.live_timers,
    );
}

fn register_persist(registry: &mut Registry, snapshot: &Snapshot, readings: &Readings<'_>) {
    readings.saves.register(registry);
    let p = &snapshot.persist;
    gauge(
        registry,
        "save_in_progress",
        "1 while a world save is writing",
        u64::from(p.saving),
    );
    if let Some(archive) = &p.archive {
        counter(
            registry,
            "archive_runs",
            "Archive rollup and prune runs finished",
            archive.runs,
        );
        if let Some(last) = &archive.last {
            unit_gauge(
                registry,
                "archive_last_run_timestamp",
                "When the last archive run ended, Unix time",
                Unit::Seconds,
                last.at.as_millisecond() as f64 / 1e3,
            );
            gauge(
                registry,
                "archive_last_run_ok",
                "1 if the last archive run succeeded, 0 if it failed",
                u64::from(last.outcome.is_ok()),
            );
        }
    }
    if let Some(offsite) = &p.offsite {
        register_offsite(registry, offsite);
    }
    let disk = Family::<DirLabel, Gauge>::default();
    let truncated = Family::<DirLabel, Gauge>::default();
    for dir in readings.disk {
        let label = DirLabel { dir: dir.name };
        disk.get_or_create(&label)
            .set(i64::try_from(dir.bytes).unwrap_or(i64::MAX));
        truncated
            .get_or_create(&label)
            .set(i64::from(dir.truncated));
    }
    registry.register_with_unit(
        "disk",
        "Bytes of files under each directory the shard writes (walked at most every 30 s)",
        Unit::Bytes,
        disk,
    );
    registry.register(
        "disk_walk_truncated",
        "1 when a directory's walk stopped at its bound (the bytes are then a lower bound)",
        truncated,
    );
}

fn register_http(registry: &mut Registry, http: &HttpCounts) {
    let closed = Family::<ReasonLabel, prometheus_client::metrics::counter::Counter>::default();
    for (reason, value) in [("evicted", http.evicted), ("refused", http.refused)] {
        closed.get_or_create(&ReasonLabel { reason }).inc_by(value);
    }
    registry.register(
        "metrics_http_closed",
        "Connections to this endpoint closed at its connection bound: an idle one evicted for \
         a newcomer, or the newcomer refused while every one was busy",
        closed,
    );
    counter(
        registry,
        "metrics_http_unauthorized",
        "Requests to this endpoint answered 401: without the bearer token (metrics.token)",
        http.unauthorized,
    );
}

/// The off-site uploader's families (`[archive.remote]` on).
fn register_offsite(registry: &mut Registry, s: &OffsiteStatus) {
    counter(
        registry,
        "offsite_uploads",
        "Archives uploaded off-site and verified (size and checksum) since start",
        s.uploaded,
    );
    registry.register_with_unit(
        "offsite_uploaded",
        "Bytes of the archives uploaded off-site and verified since start",
        Unit::Bytes,
        ConstCounter::new(s.uploaded_bytes),
    );
    gauge(
        registry,
        "offsite_queue",
        "Archives waiting for a verified off-site copy (the one uploading included); retention keeps them on disk",
        s.queue as u64,
    );
    if let Some(at) = s.last_success {
        unit_gauge(
            registry,
            "offsite_last_success_timestamp",
            "When an archive was last verified off-site, Unix time",
            Unit::Seconds,
            at.as_millisecond() as f64 / 1e3,
        );
    }
    let failures = Family::<CauseLabel, prometheus_client::metrics::counter::Counter>::default();
    for cause in Cause::ALL {
        failures
            .get_or_create(&CauseLabel {
                cause: cause.label(),
            })
            .inc_by(s.failures(cause));
    }
    registry.register(
        "offsite_failures",
        "Off-site failures since start, by cause (unreachable, denied, conflict, mismatch, local, store)",
        failures,
    );
    gauge(
        registry,
        "offsite_failing",
        "Failed off-site passes in a row: 0 once a pass goes through",
        u64::from(s.failing),
    );
    gauge(
        registry,
        "offsite_conflicts",
        "Archives kept on disk because their name in the bucket holds another object (never overwritten)",
        s.conflicts.len() as u64,
    );
    counter(
        registry,
        "offsite_deleted",
        "Off-site archives deleted by retention since start",
        s.remote_deleted,
    );
}

/// The wheel lag histogram: the loop's power-of-two buckets, cumulative as Prometheus wants.
#[derive(Debug)]
struct LagFamily(LagHistogram);

impl TypedMetric for LagFamily {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LagFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .0
            .buckets()
            .map(|(bound, count)| (bound.map_or(f64::INFINITY, |b| b.as_secs_f64()), count))
            .collect();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.0.sum().as_secs_f64(),
            self.0.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// OpenMetrics text as the older Prometheus text format: counters' `# HELP`/`# TYPE` take the
/// `_total` name their samples have, `# UNIT` and `# EOF` go (that format has neither).
pub fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| line.strip_prefix(prefix).map(|rest| (prefix, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_renames_counter_metadata_and_drops_openmetrics_only_lines() {
        let om = "# HELP a_things Things.\n# TYPE a_things counter\na_things_total 3\n\
                  # HELP b_lag_seconds Lag.\n# TYPE b_lag_seconds gauge\n# UNIT b_lag_seconds seconds\n\
                  b_lag_seconds 0.5\n# EOF\n";
        assert_eq!(
            classic_text(om),
            "# HELP a_things_total Things.\n# TYPE a_things_total counter\na_things_total 3\n\
             # HELP b_lag_seconds Lag.\n# TYPE b_lag_seconds gauge\nb_lag_seconds 0.5\n"
        );
    }

    /// `docs/monitoring.md`'s metrics table: each family's name as `# TYPE` gives it (no
    /// `_total`, no labels) and its type.
    fn documented() -> Vec<(String, String)> {
        let doc = include_str!("../../docs/monitoring.md");
        let mut families = Vec::new();
        for line in doc.lines().filter(|l| l.starts_with("| `shardloop_")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            let kind = cells[1].trim().to_owned();
            for name in cells[0].trim_start_matches("| ").split(", ") {
                let name = name.trim_matches('`');
                let name = name.split('{').next().unwrap_or(name);
                let name = if kind == "counter" {
                    name.strip_suffix("_total").unwrap_or(name)
                } else {
                    name
                };
                families.push((name.to_owned(), kind.clone()));
            }
        }
        families
    }

    /// What one scrape holds: every family with its type, from `# TYPE` lines.
    fn scraped() -> Vec<(String, String)> {
        let snapshot = Snapshot {
            stats: LoopStats::default(),
            lag: LagHistogram::default(),
            loop_cpu: Duration::ZERO,
            net: crate::net::NetStats::default(),
            world: super::super::WorldCounts::default(),
            // Archives and off-site uploads on, each with a last run: every family they add.
            persist: super::super::PersistFacts {
                archive: Some(super::super::probe::ArchiveFacts {
                    runs: 1,
                    running: false,
                    last: Some(crate::persist::archive::archiver::LastRun {
                        at: jiff::Timestamp::UNIX_EPOCH,
                        outcome: Ok(Default::default()),
                    }),
                }),
                offsite: Some(OffsiteStatus {
                    last_success: Some(jiff::Timestamp::UNIX_EPOCH),
                    ..OffsiteStatus::default()
                }),
                ..Default::default()
            },
            history: Vec::new(),
        };
        let phases = PhaseTotals {
            seen: Some(0),
            ..PhaseTotals::default()
        };
        let readings = Readings {
            process: ProcessFacts {
                resident_bytes: Some(1),
                open_fds: Some(1),
                max_fds: Some(1),
                ..ProcessFacts::default()
            },
            disk: &[],
            saves: &SaveMetrics::default(),
            phases: &phases,
            heartbeat_still: Duration::ZERO,
            watchdog_stalls: 0,
            snapshot_age: Duration::ZERO,
            start_time: 0.0,
            http: HttpCounts::default(),
        };
        encode(&snapshot, &readings)
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
            .collect()
    }

    #[test]
    fn the_metrics_doc_lists_every_family_of_the_table_and_of_a_scrape_with_its_type() {
        let documented = documented();
        let scraped = scraped();
        for total in TOTALS.iter() {
            let Some(metric) = total.metric else { continue };
            let unit = if total.kind.is_time() { "_seconds" } else { "" };
            let kind = match total.kind {
                Kind::Count | Kind::Time => "counter",
                Kind::Peak | Kind::Level => "gauge",
            };
            let family = (format!("shardloop_{}{unit}", metric.name), kind.to_owned());
            assert!(
                documented.contains(&family),
                "{family:?} is not in docs/monitoring.md"
            );
            assert!(scraped.contains(&family), "{family:?} is not in a scrape");
        }
        for family in &scraped {
            assert!(
                documented.contains(family),
                "{family:?} is not in docs/monitoring.md"
            );
        }
        // The loop's families are always there: none documented that a scrape lacks.
        for family in documented
            .iter()
            .filter(|(n, _)| n.starts_with("shardloop_loop_"))
        {
            assert!(
                scraped.contains(family),
                "docs/monitoring.md lists {family:?}, gone"
            );
        }
    }

    #[test]
    fn disconnect_reasons_do_not_overlap_and_add_up() {
        let n = crate::net::NetStats {
            disconnects: 20,
            faults: 12,
            login_timeouts: 2,
            idle_timeouts: 3,
            flood_disconnects: 1,
            ..Default::default()
        };
        let reasons = disconnect_reasons(&n);
        assert_eq!(reasons.iter().map(|(_, v)| v).sum::<u64>(), 20);
        assert!(reasons.contains(&("protocol", 6)));
        assert!(reasons.contains(&("closed", 8)));
    }
}
