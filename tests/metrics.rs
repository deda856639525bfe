//! The metrics endpoint (`[metrics] listen`) with real components: the shard binary checked
//! by `promtool` and scraped by a real Prometheus server (through a bearer token), the status
//! page loaded in headless Chromium, `/healthz` against a loop blocked on purpose, the
//! connection bound against many idle clients (and a flood from one IPv6 /64, in a network
//! namespace of the test's own), the token on every path, the warning when bound beyond
//! loopback, and a bad or busy address.
//!
//! `promtool`, `prometheus` (Debian's `prometheus`) and `chromium` are installed by
//! `scripts/test`; a test that cannot find them fails naming them (`common::tools`), unless
//! `SHARDLOOP_ALLOW_SKIP=1`.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::binary::{shardloop, spawn_logged};
use common::deadline::{run_within, watchdog};
use shardloop::metrics::server::MAX_CONNECTIONS;
use shardloop::metrics::{
    BearerToken, MetricsServer, PersistFacts, Settings, Sources, WorldCounts,
};
use shardloop::runtime::Phase;
use shardloop::runtime::history::LoopSecond;
use shardloop::runtime::telemetry::SecondCounts;
use shardloop::runtime::{EventLoop, LoopContext};

/// A GET with `Connection: close`: the status and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_get(addr, path).unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
}

fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let (status, _, body) = request(TcpStream::connect(addr)?, path, &[])?;
    Ok((status, body))
}

/// A GET with `Authorization: Bearer <token>`: the status and the body.
fn get_with_token(addr: SocketAddr, path: &str, token: &str) -> (u16, String) {
    let auth = format!("Authorization: Bearer {token}");
    let (status, _, body) = request(TcpStream::connect(addr).unwrap(), path, &[&auth])
        .unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"));
    (status, body)
}

/// A GET on `stream` with `Connection: close` and the `headers` given: the status, the
/// response's headers and its body.
fn request(
    mut stream: TcpStream,
    path: &str,
    headers: &[&str],
) -> std::io::Result<(u16, String, String)> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: shard\r\nConnection: close\r\n");
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    write!(stream, "{head}\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok((status, head.to_owned(), body.to_owned()))
}

/// Polls `check` every 100 ms until it gives a value or `limit` passes.
fn poll<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let began = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(began.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free loopback port (bound and released: Prometheus takes a fixed address).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The shard binary with the endpoint on `listen` (port 0: a free one) and the variables
/// `env`: the child, the endpoint's address from the log (on loopback when it listens on
/// every address), and its log, every line so far and on as it comes.
fn start_shard(
    dir: &Path,
    listen: &str,
    env: &[(&str, &str)],
) -> (Child, SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let mut cmd = shardloop(dir, (2_000, 200));
    cmd.env("SHARD_METRICS__LISTEN", listen)
        .envs(env.iter().copied());
    let (child, lines) = spawn_logged(&mut cmd);
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut addr: Option<SocketAddr> = None;
    let limit = Instant::now() + Duration::from_secs(30);
    while let Ok(line) = lines.recv_timeout(limit.saturating_duration_since(Instant::now())) {
        if line.contains("metrics endpoint:") {
            let at = line
                .split("addr=")
                .nth(1)
                .expect("the line names the address");
            addr = Some(at.split_whitespace().next().unwrap().parse().unwrap());
        }
        let ready = line.contains("shard ready");
        log.lock().unwrap().push(line);
        if ready {
            break;
        }
    }
    let mut addr = addr.expect("the shard logged its metrics endpoint before ready");
    if addr.ip().is_unspecified() {
        addr.set_ip(IpAddr::from([127, 0, 0, 1]));
    }
    // Keep reading the log so the child never blocks on a full pipe.
    let kept = log.clone();
    std::thread::spawn(move || {
        while let Ok(line) = lines.recv() {
            kept.lock().unwrap().push(line);
        }
    });
    (child, addr, log)
}

/// The bearer token the Prometheus test's shard requires.
const SCRAPE_TOKEN: &str = "scrape-token-0123456789abcdef";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_shard_s_metrics_pass_promtool_and_a_real_prometheus_scrapes_them() {
    let _watchdog = watchdog(Duration::from_secs(90), "promtool and prometheus");
    if !common::tools::need(&["promtool", "prometheus"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // With a token, scraped as docs/monitoring.md says (Prometheus's `authorization`).
    let (shard, addr, _) = start_shard(
        dir.path(),
        "127.0.0.1:0",
        &[("SHARD_METRICS__TOKEN", SCRAPE_TOKEN)],
    );
    let _shard = Killed(shard);

    let (status, text) = get_with_token(addr, "/metrics", SCRAPE_TOKEN);
    assert_eq!(status, 200, "{text}");
    for family in [
        "shardloop_loop_iterations_total",
        "shardloop_loop_verdict{verdict=\"healthy\"} 1",
        "shardloop_loop_wheel_lag_seconds_bucket{le=\"+Inf\"}",
        "shardloop_process_open_fds",
        "shardloop_net_disconnects_total{reason=\"idle_timeout\"}",
        "shardloop_world_items 2000",
        "shardloop_saves_total{outcome=\"failed\"} 0",
        "shardloop_disk_bytes{dir=\"saves\"}",
    ] {
        assert!(text.contains(family), "{family} missing from:\n{text}");
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = common::deadline::output_within(promtool, Duration::from_secs(20));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        checked.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );

    // A real Prometheus scraping the shard every second.
    let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: shardloop\n    authorization:\n      credentials: '{SCRAPE_TOKEN}'\n    \
             static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _prometheus = Killed(prometheus);
    let query = "/api/v1/query?query=shardloop_loop_iterations_total";
    let answer = poll(Duration::from_secs(30), "Prometheus has the series", || {
        let (status, body) = try_get(web, query).ok()?;
        (status == 200 && body.contains("\"job\":\"shardloop\"")).then_some(body)
    });
    assert!(answer.contains("\"status\":\"success\""), "{answer}");
    let (_, names) = get(web, "/api/v1/label/__name__/values");
    let ours = names.matches("\"shardloop_").count();
    assert!(
        ours >= 30,
        "only {ours} shardloop_ series in Prometheus: {names}"
    );
    let (_, up) = get(web, "/api/v1/query?query=up");
    assert!(up.contains("\"1\"]"), "the scrape target is not up: {up}");
}

#[test]
fn a_bad_or_busy_metrics_listen_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    for (value, says) in [
        ("not an address", "not an address"),
        (busy_addr.as_str(), "cannot listen"),
    ] {
        let out = run_within(
            shardloop(dir.path(), (100, 10)).env("SHARD_METRICS__LISTEN", value),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains("metrics.listen") && stderr.contains(says),
            "{value}: {stderr}"
        );
    }
}

/// A loop on its own thread serving the endpoint with `sources()`; the test drives it through
/// the context and stops it by dropping the returned sender.
struct Endpoint {
    addr: SocketAddr,
    /// Copies of the whole history the loop handed out (the page's asks, and the first
    /// publish).
    whole_history_copies: Arc<AtomicUsize>,
    context: LoopContext,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        drop(self.stop.take());
        // The loop may be blocked by the test: do not wait for it then.
        if let Some(thread) = self.thread.take()
            && !std::thread::panicking()
        {
            thread.join().unwrap();
        }
    }
}

fn endpoint(settings: Settings, history: Vec<LoopSecond>) -> Endpoint {
    endpoint_on("127.0.0.1:0", settings, history)
}

/// [`endpoint`], listening on `listen`.
fn endpoint_on(listen: &str, settings: Settings, history: Vec<LoopSecond>) -> Endpoint {
    let listen: SocketAddr = listen.parse().unwrap();
    let (ready_tx, ready) = mpsc::channel();
    let (stop, stopped) = mpsc::channel::<()>();
    let whole_history_copies = Arc::new(AtomicUsize::new(0));
    let copies = whole_history_copies.clone();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut event_loop = EventLoop::builder().probe_host(false).build();
            let context = event_loop.context();
            event_loop
                .run_until(async move {
                    let sources = Sources {
                        net: Box::new(Default::default),
                        world: Box::new(|| WorldCounts {
                            players: 3,
                            ..WorldCounts::default()
                        }),
                        history: Box::new(move |since| {
                            if since.is_none() {
                                copies.fetch_add(1, Ordering::Relaxed);
                            }
                            history.clone()
                        }),
                        persist: Box::new(PersistFacts::default),
                    };
                    let listener = shardloop::metrics::bind(listen).unwrap();
                    let server =
                        MetricsServer::start(listener, sources, Default::default(), settings)
                            .unwrap();
                    ready_tx.send((server.local_addr(), context)).unwrap();
                    // Wait for the test to end without blocking the loop.
                    while stopped.try_recv() == Err(mpsc::TryRecvError::Empty) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    server.stop();
                })
                .await;
        });
    });
    let (addr, context) = ready.recv_timeout(Duration::from_secs(10)).unwrap();
    Endpoint {
        addr,
        whole_history_copies,
        context,
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// Two minutes of a loop that mostly sleeps, with some timers, network and a lag spike.
fn history() -> Vec<LoopSecond> {
    (0..120u64)
        .map(|i| {
            let mut s = LoopSecond {
                unix_second: 1_780_000_000 + i,
                uptime_second: i,
                wall: Duration::from_secs(1),
                counts: SecondCounts {
                    max_wheel_lag: Duration::from_micros(if i == 60 { 9_000 } else { 200 }),
                    ..SecondCounts::default()
                },
                ..LoopSecond::default()
            };
            s.add(Phase::Timers, Duration::from_millis(20 + i % 7));
            s.add(Phase::Network, Duration::from_millis(40));
            s.add(Phase::Stolen, Duration::from_millis(10));
            s.add(Phase::Sleep, Duration::from_millis(930 - i % 7));
            s
        })
        .collect()
}

#[test]
fn the_status_page_renders_the_chart_and_the_verdict_in_headless_chromium() {
    let _watchdog = watchdog(Duration::from_secs(90), "chromium");
    if !common::tools::need(&["chromium"]) {
        return;
    }
    let endpoint = endpoint(Settings::default(), history());
    let profile = tempfile::tempdir().unwrap();
    let out = run_within(
        Command::new("chromium").args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.path().display()),
            "--dump-dom",
            &format!("http://{}/", endpoint.addr),
        ]),
        Duration::from_secs(60),
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = &dom[..dom.len().min(3000)];
    let verdict = dom
        .split("id=\"verdict\"")
        .nth(1)
        .and_then(|rest| rest.split_once('>'))
        .and_then(|(attributes, rest)| Some((attributes, rest.split('<').next()?)))
        .unwrap_or_else(|| panic!("no verdict in the DOM:\n{head}"));
    assert!(verdict.0.contains("data-verdict=\"healthy\""), "{head}");
    assert!(verdict.1.starts_with("healthy: "), "{head}");
    assert!(dom.contains("id=\"players\">3 "), "{head}");
    let chart = dom
        .split("id=\"chart\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no chart section:\n{head}"));
    assert!(chart.trim_start().starts_with("<svg"), "{head}");
    // One band per part of the loop's time, the lag line, the legend's names.
    assert_eq!(chart.matches("<polygon").count(), Phase::COUNT);
    assert!(chart.contains("<polyline"));
    for name in [
        "timers",
        "network",
        "sleep",
        "stolen",
        shardloop::runtime::history::chart::LAG_LABEL,
    ] {
        assert!(chart.contains(name), "legend {name} missing");
    }
    assert!(chart.contains(shardloop::metrics::page::CHART_TITLE));
}

#[test]
fn healthz_answers_503_while_the_loop_is_blocked_and_metrics_serves_its_last_copy_with_its_age() {
    let _watchdog = watchdog(Duration::from_secs(60), "healthz");
    let settings = Settings {
        stale_after: Duration::from_secs(1),
        ..Settings::default()
    };
    let endpoint = endpoint(settings, Vec::new());
    let (status, body) = get(endpoint.addr, "/healthz");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ok"), "{body}");

    // Block the loop until released.
    let (release, blocked) = mpsc::channel::<()>();
    endpoint
        .context
        .post(move || {
            let _ = blocked.recv_timeout(Duration::from_secs(30));
        })
        .unwrap();
    let body = poll(Duration::from_secs(10), "/healthz turns 503", || {
        let (status, body) = get(endpoint.addr, "/healthz");
        (status == 503).then_some(body)
    });
    assert!(body.starts_with("stalled"), "{body}");
    // The HTTP thread still answers everything else while the loop is stuck.
    assert_eq!(get(endpoint.addr, "/nowhere").0, 404);
    // /metrics still answers at once, from the loop's last copy, and shows how old it is.
    let stale = poll(Duration::from_secs(10), "the copy ages past 1 s", || {
        let (status, body) = get(endpoint.addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("shardloop_loop_iterations_total"), "{body}");
        let age = snapshot_age(&body);
        (age > 1.0).then_some(age)
    });

    release.send(()).unwrap();
    poll(Duration::from_secs(10), "/healthz is 200 again", || {
        (get(endpoint.addr, "/healthz").0 == 200).then_some(())
    });
    // The loop publishes again: the copy is fresh (published at most a second ago, with a
    // generous margin for a loaded host).
    let fresh = poll(Duration::from_secs(10), "a fresh copy", || {
        let age = snapshot_age(&get(endpoint.addr, "/metrics").1);
        (age < stale && age < 3.0).then_some(age)
    });
    assert!(fresh >= 0.0);
}

/// `shardloop_metrics_snapshot_age_seconds` in a `/metrics` body.
fn snapshot_age(body: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix("shardloop_metrics_snapshot_age_seconds "))
        .unwrap_or_else(|| panic!("no snapshot age in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn many_idle_clients_do_not_stop_a_scrape_and_hold_a_bounded_number_of_connections() {
    let _watchdog = watchdog(Duration::from_secs(60), "idle clients");
    let endpoint = endpoint(Settings::default(), Vec::new());
    let idle = 3 * MAX_CONNECTIONS;
    let mut clients: Vec<TcpStream> = (0..idle)
        .map(|i| {
            let mut c = TcpStream::connect(endpoint.addr).unwrap();
            if i % 2 == 0 {
                // Half of them start a request and never finish its headers.
                c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
            }
            c
        })
        .collect();
    let began = Instant::now();
    let (status, body) = get(endpoint.addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("shardloop_loop_iterations_total"));
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "the scrape waited {:?} behind idle clients",
        began.elapsed()
    );
    // The server keeps at most MAX_CONNECTIONS: all but that many idle clients were closed.
    for c in &clients {
        c.set_nonblocking(true).unwrap();
    }
    let is_closed = |c: &mut TcpStream| match c.read(&mut [0u8; 1]) {
        Ok(0) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        Ok(_) => false,
    };
    let mut closed = vec![false; idle];
    poll(Duration::from_secs(5), "idle clients closed", || {
        for (c, done) in clients.iter_mut().zip(&mut closed) {
            *done = *done || is_closed(c);
        }
        let n = closed.iter().filter(|d| **d).count();
        (n >= idle - MAX_CONNECTIONS).then_some(())
    });
    assert_eq!(get(endpoint.addr, "/healthz").0, 200);
}

#[test]
fn the_example_alert_rules_pass_promtool_check_and_their_unit_tests() {
    if !common::tools::need(&["promtool"]) {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/monitoring");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = run_within(
            Command::new("promtool").args(args).current_dir(&dir),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A TCP connection to `to` from the local address `from` (any of 127.0.0.0/8 on Linux, or
/// an address the test's network namespace has).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let from: IpAddr = from.parse().unwrap();
    let from = SocketAddr::new(from, 0);
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(from),
        socket2::Type::STREAM,
        None,
    )
    .unwrap();
    socket.bind(&from.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

/// Waits until the server has closed at least `at_least` of `streams` (set non-blocking).
fn wait_closed(streams: &mut [TcpStream], at_least: usize, what: &str) {
    for c in streams.iter() {
        c.set_nonblocking(true).unwrap();
    }
    let mut closed = vec![false; streams.len()];
    poll(Duration::from_secs(5), what, || {
        for (c, done) in streams.iter_mut().zip(&mut closed) {
            *done = *done
                || match c.read(&mut [0u8; 1]) {
                    Ok(0) => true,
                    Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    Ok(_) => false,
                };
        }
        let n = closed.iter().filter(|d| **d).count();
        (n >= at_least).then_some(())
    });
}

#[test]
fn a_flood_from_one_ipv6_64_or_one_56_evicts_its_own_connections_not_the_scraper_s() {
    // Twice the bound's worth of flooders, one connection from each address: all of one /64,
    // or each from its own /64 of one /56 (the game port's default `ipv6_prefix`); and a
    // scraper from another /56.
    let n = 2 * MAX_CONNECTIONS as u16;
    let one_64: Vec<Ipv6Addr> = (1..=n)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, i))
        .collect();
    let one_56: Vec<Ipv6Addr> = (1..=n)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0, 0x100 + i, 0, 0, 0, 1))
        .collect();
    let scraper = Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 1);
    let mut addresses = one_64.clone();
    addresses.extend(&one_56);
    addresses.push(scraper);
    if !common::netns::with_addresses(&addresses) {
        return;
    }
    let _watchdog = watchdog(Duration::from_secs(120), "an IPv6 flood");
    for (shape, flooders) in [("one /64", &one_64), ("one /56", &one_56)] {
        let endpoint = endpoint_on("[::1]:0", Settings::default(), Vec::new());
        // The scraper holds two connections before the flood: the oldest idle ones, and,
        // counted by address or by /64, the holder of the most.
        let scraper_conns: Vec<TcpStream> = (0..2)
            .map(|_| connect_from(&scraper.to_string(), endpoint.addr))
            .collect();
        let mut flood: Vec<TcpStream> = flooders
            .iter()
            .map(|a| connect_from(&a.to_string(), endpoint.addr))
            .collect();
        let over = flood.len() + scraper_conns.len() - MAX_CONNECTIONS;
        wait_closed(&mut flood, over, "flood connections closed");
        // Counted by host (the /64) or prefix (the /56), the flood held the most: the
        // scraper's connections stayed.
        for stream in scraper_conns {
            match request(stream, "/healthz", &[]) {
                Ok((status, _, body)) => assert_eq!(status, 200, "{shape}: {body}"),
                Err(e) => panic!("{shape}: a scraper's connection was closed for the flood: {e}"),
            }
        }
        let (_, metrics) = get(endpoint.addr, "/metrics");
        assert!(
            metrics.contains(&format!(
                "shardloop_metrics_http_closed_total{{reason=\"evicted\"}} {over}"
            )),
            "{shape}: {metrics}"
        );
    }
}

#[test]
fn with_a_token_every_path_but_healthz_needs_it() {
    const TOKEN: &str = "t0ken-for-the-test-0123456789";
    let _watchdog = watchdog(Duration::from_secs(60), "the token");
    let settings = Settings {
        token: Some(BearerToken::new(TOKEN)),
        ..Settings::default()
    };
    let endpoint = endpoint(settings, history());
    let addr = endpoint.addr;
    let auth = |value: &str| format!("Authorization: {value}");
    for (path, headers) in [
        ("/metrics", vec![]),
        (
            "/metrics",
            vec![auth("Bearer t0ken-for-the-test-012345678X")],
        ),
        ("/metrics", vec![auth("Bearer t0ken")]),
        ("/metrics", vec![auth(&format!("Basic {TOKEN}"))]),
        ("/metrics", vec![auth(TOKEN)]),
        ("/", vec![]),
        ("/nothing-here", vec![]),
    ] {
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let (status, head, body) =
            request(TcpStream::connect(addr).unwrap(), path, &headers).unwrap();
        assert_eq!(status, 401, "{path} {headers:?}: {body}");
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: bearer realm=\"shardloop\""),
            "{head}"
        );
        assert!(!body.contains(TOKEN), "{body}");
    }
    // /healthz is open; with the token everything answers, the scheme in any case.
    assert_eq!(get(addr, "/healthz").0, 200);
    assert_eq!(get_with_token(addr, "/", TOKEN).0, 200);
    assert_eq!(get_with_token(addr, "/nothing-here", TOKEN).0, 404);
    let lower = auth(&format!("bearer {TOKEN}"));
    let (status, _, _) = request(TcpStream::connect(addr).unwrap(), "/healthz", &[&lower]).unwrap();
    assert_eq!(status, 200);
    let (status, metrics) = get_with_token(addr, "/metrics", TOKEN);
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("shardloop_metrics_http_unauthorized_total 7"),
        "{metrics}"
    );
}

#[test]
fn bound_beyond_loopback_the_shard_warns_and_never_shows_its_token() {
    const TOKEN: &str = "never-shown-0123456789abcdef";
    let _watchdog = watchdog(Duration::from_secs(90), "beyond loopback");
    let beyond = |log: &[String]| -> Vec<String> {
        log.iter()
            .filter(|l| l.contains("bound beyond loopback"))
            .cloned()
            .collect()
    };
    // On loopback: no warning.
    let dir = tempfile::tempdir().unwrap();
    let (shard, _, log) = start_shard(dir.path(), "127.0.0.1:0", &[]);
    drop(Killed(shard));
    assert_eq!(beyond(&log.lock().unwrap()), Vec::<String>::new());
    // On every address, without a token: it says there is no authentication.
    let dir = tempfile::tempdir().unwrap();
    let (shard, addr, log) = start_shard(dir.path(), "0.0.0.0:0", &[]);
    assert_eq!(get(addr, "/metrics").0, 200);
    drop(Killed(shard));
    let warned = beyond(&log.lock().unwrap());
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("has no authentication"),
        "{warned:?}"
    );
    // With a token from the environment: requests need it, the warning says so, and
    // neither the log nor check-config shows it.
    let dir = tempfile::tempdir().unwrap();
    let env = [("SHARD_METRICS__TOKEN", TOKEN)];
    let (shard, addr, log) = start_shard(dir.path(), "0.0.0.0:0", &env);
    assert_eq!(get(addr, "/metrics").0, 401);
    assert_eq!(get(addr, "/healthz").0, 200);
    assert_eq!(get_with_token(addr, "/metrics", TOKEN).0, 200);
    poll(Duration::from_secs(10), "the 401 logged", || {
        let log = log.lock().unwrap();
        log.iter().any(|l| l.contains("answered 401")).then_some(())
    });
    drop(Killed(shard));
    let log = log.lock().unwrap();
    let warned = beyond(&log);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("requests need the bearer token"),
        "{warned:?}"
    );
    assert!(
        log.iter().all(|l| !l.contains(TOKEN)),
        "the token is in the log:\n{}",
        log.join("\n")
    );
    let out = run_within(
        shardloop(dir.path(), (100, 10))
            .envs(env)
            .arg("check-config"),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("metrics.token = \"(redacted)\""),
        "{stdout}"
    );
    assert!(!stdout.contains(TOKEN), "{stdout}");
}

#[test]
fn a_connection_flood_from_one_address_evicts_its_own_connections_not_another_peer_s() {
    let _watchdog = watchdog(Duration::from_secs(60), "connection flood");
    let endpoint = endpoint(Settings::default(), Vec::new());
    // The scraper connects first: at the cap it is the oldest idle connection.
    let mut scraper = connect_from("127.0.0.2", endpoint.addr);
    scraper
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let flood = 3 * MAX_CONNECTIONS;
    let mut flooders: Vec<TcpStream> = (0..flood)
        .map(|_| connect_from("127.0.0.1", endpoint.addr))
        .collect();
    // Wait until the server has taken the whole flood (it closed all but the cap's worth).
    wait_closed(
        &mut flooders,
        flood - MAX_CONNECTIONS,
        "flood connections closed",
    );
    write!(
        scraper,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let read = scraper.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "the scraper's connection was closed for the flood: {read:?} {response:?}"
    );
}

#[test]
fn status_page_reloads_within_a_second_reuse_one_copy_of_the_loop_s_history() {
    let _watchdog = watchdog(Duration::from_secs(60), "page reloads");
    let endpoint = endpoint(Settings::default(), history());
    let began = Instant::now();
    let reloads = 20;
    for _ in 0..reloads {
        let (status, body) = get(endpoint.addr, "/");
        assert_eq!(status, 200, "{body}");
    }
    // One copy for the first publish, then at most one per started second of reloads.
    let copies = endpoint.whole_history_copies.load(Ordering::Relaxed);
    let allowed = 2 + began.elapsed().as_secs() as usize;
    assert!(
        copies <= allowed,
        "{reloads} page loads in {:?} made the loop copy its history {copies} times",
        began.elapsed()
    );
}
