//! Memory benchmark: loop bookkeeping bytes per paused task, against tokio's `spawn_local` +
//! `sleep`.
//!
//! A counting global allocator (wrapping `System`) tracks the bytes requested and not yet
//! freed ("live bytes") and the number of live allocations. For each peer:
//!
//! 1. build the runtime and the loop, and run it once empty (so lazy set-up is not counted);
//! 2. read the live bytes (`before`);
//! 3. spawn `TASKS` tasks, each `async { loop { pause(1_000_000).await } }` (1000 s, so
//!    nothing fires during the measurement); read the live bytes (`spawned`);
//! 4. run the loop until every task has been polled once and is parked on its pause; read
//!    the live bytes (`parked`);
//! 5. report (`parked` − `before`) / `TASKS` as the total per task, and that minus
//!    `size_of_val` of the task's own future (the async block, which holds its `Pause` /
//!    `Sleep`) as the loop's bookkeeping per paused task.
//!
//! Peers: `ours` (`shardloop::spawn` + `timer::pause`, driven by `EventLoop::run_until`) and
//! `tokio_local` (`tokio::task::spawn_local` on a `LocalSet` + `tokio::time::sleep`), each
//! with the join handles dropped and with the join handles kept (in a `Vec` allocated before
//! `before`, so the `Vec` itself is not counted). Counted bytes are what the code asked the
//! allocator for; the RSS growth over the same span (from `/proc/self/statm`, so including
//! malloc's headers and rounding) is printed beside it as a cross-check. Each of the four
//! measurements runs in its own child process (this executable, `--child ...`), so that
//! pages freed by one cannot hide the RSS growth of the next.
//!
//! The allocator also counts live allocations per exact size (below 1 KiB), so the report
//! lists the objects each task allocates on its own (e.g. "40 B × 1.00") and, by difference,
//! what goes into the large shared buffers (slabs, queues, slot lists).
//!
//! Note on fairness: tokio's timer entry lives *inside* the future (`Sleep` is large and
//! intrusive), while ours keeps its entry in the wheel (`Pause` is a 12-byte handle). The
//! "future" column therefore holds tokio's timer state but not ours, so the table also shows
//! the total per task, which compares the two without that ambiguity.
//!
//! Running: `cargo bench --bench memory` (plain `main`, no criterion; ~10 s). Under
//! `cargo test --bench memory` it runs with 10k tasks as a smoke test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shardloop::EventLoop;
use shardloop::timer::pause;

/// Tasks per measurement.
const TASKS: usize = 1_000_000;
/// Tasks under `cargo test --bench memory`.
const TEST_TASKS: usize = 10_000;
/// Each task's pause: long enough that nothing fires while we measure.
const PAUSE_MS: u64 = 1_000_000;

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Allocations below this size are also counted per exact size (the per-task objects);
/// larger ones (the growing `Vec`s and slabs) only in the totals.
const SMALL: usize = 1024;
/// Live allocations per exact size, for sizes below [`SMALL`].
static LIVE_BY_SIZE: [AtomicUsize; SMALL] = [const { AtomicUsize::new(0) }; SMALL];

fn count_alloc(size: usize) {
    LIVE_BYTES.fetch_add(size, Ordering::Relaxed);
    LIVE_ALLOCS.fetch_add(1, Ordering::Relaxed);
    if let Some(n) = LIVE_BY_SIZE.get(size) {
        n.fetch_add(1, Ordering::Relaxed);
    }
}

fn count_dealloc(size: usize) {
    LIVE_BYTES.fetch_sub(size, Ordering::Relaxed);
    LIVE_ALLOCS.fetch_sub(1, Ordering::Relaxed);
    if let Some(n) = LIVE_BY_SIZE.get(size) {
        n.fetch_sub(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and only
// adds bookkeeping on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        count_dealloc(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count_dealloc(layout.size());
            count_alloc(new_size);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live bytes, live allocations and resident bytes, read together.
#[derive(Clone, Copy)]
struct Snapshot {
    bytes: usize,
    allocs: usize,
    rss: usize,
}

fn snapshot() -> Snapshot {
    Snapshot {
        bytes: LIVE_BYTES.load(Ordering::Relaxed),
        allocs: LIVE_ALLOCS.load(Ordering::Relaxed),
        rss: resident_bytes(),
    }
}

/// Resident set size from `/proc/self/statm` (0 where unavailable).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * usize::try_from(page).unwrap_or(4096)
}

thread_local! {
    /// Tasks that have been polled at least once (no allocation: a `Cell` in TLS).
    static POLLED: Cell<usize> = const { Cell::new(0) };
}

fn mark_polled() {
    POLLED.with(|p| p.set(p.get() + 1));
}

fn polled() -> usize {
    POLLED.with(Cell::get)
}

/// The task of `ours`: parks forever on `pause`.
async fn ours_task() {
    mark_polled();
    loop {
        pause(PAUSE_MS).await;
    }
}

/// The task of `tokio_local`: parks forever on `sleep`.
async fn tokio_task() {
    mark_polled();
    loop {
        tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await;
    }
}

/// Live allocations per exact size (below [`SMALL`]).
fn by_size() -> Vec<usize> {
    LIVE_BY_SIZE
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect()
}

/// The sizes whose live count grew by at least half an allocation per task between two
/// [`by_size`] readings: (size, allocations per task × 1000, rounded).
fn per_task_sizes(before: &[usize], after: &[usize], tasks: usize) -> Vec<(usize, usize)> {
    before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|&(_, (&b, &a))| a >= b + tasks / 2)
        .map(|(size, (&b, &a))| (size, ((a - b) * 1000).div_ceil(tasks)))
        .collect()
}

struct Measurement {
    peer: String,
    handles: String,
    tasks: usize,
    future: usize,
    before: Snapshot,
    spawned: Snapshot,
    parked: Snapshot,
    /// Small allocations made per task: (size in bytes, count per task × 1000).
    sizes: Vec<(usize, usize)>,
}

impl Measurement {
    /// One line: peer, handles, then the numbers, space-separated (child → parent).
    fn encode(&self) -> String {
        let [b, s, p] = [self.before, self.spawned, self.parked];
        format!(
            "MEASUREMENT {} {} {} {} {} {} {} {} {} {} {} {} {}",
            self.peer,
            self.handles,
            self.tasks,
            self.future,
            b.bytes,
            b.allocs,
            b.rss,
            s.bytes,
            s.allocs,
            s.rss,
            p.bytes,
            p.allocs,
            p.rss
        ) + &self
            .sizes
            .iter()
            .map(|(size, milli)| format!(" {size}x{milli}"))
            .collect::<String>()
    }

    fn parse(text: &str) -> Option<Measurement> {
        let line = text.lines().find(|l| l.starts_with("MEASUREMENT "))?;
        let mut words = line.split_whitespace().skip(1);
        let peer = words.next()?.to_string();
        let handles = words.next()?.to_string();
        let words: Vec<&str> = words.collect();
        let (nums, sizes) = words.split_at_checked(11)?;
        let nums: Vec<usize> = nums
            .iter()
            .map(|w| w.parse())
            .collect::<Result<_, _>>()
            .ok()?;
        let [tasks, future, b0, b1, b2, s0, s1, s2, p0, p1, p2] = nums[..] else {
            return None;
        };
        let sizes = sizes
            .iter()
            .map(|w| {
                let (size, milli) = w.split_once('x')?;
                Some((size.parse().ok()?, milli.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        let snap = |bytes, allocs, rss| Snapshot { bytes, allocs, rss };
        Some(Measurement {
            peer,
            handles,
            tasks,
            future,
            before: snap(b0, b1, b2),
            spawned: snap(s0, s1, s2),
            parked: snap(p0, p1, p2),
            sizes,
        })
    }

    /// "40 B × 1.00 + 56 B × 1.00 + …" and what that leaves for the large allocations.
    fn breakdown(&self) -> String {
        let small: f64 = self
            .sizes
            .iter()
            .map(|&(size, milli)| size as f64 * milli as f64 / 1000.0)
            .sum();
        let list: Vec<String> = self
            .sizes
            .iter()
            .map(|&(size, milli)| format!("{size} B × {:.2}", milli as f64 / 1000.0))
            .collect();
        format!(
            "{}/{} handles: per-task allocations {} = {small:.1} B; in large buffers (slabs, \
             queues, slot lists) {:.1} B",
            self.peer,
            self.handles,
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(" + ")
            },
            self.total() - small
        )
    }

    fn per_task(&self, a: usize, b: usize) -> f64 {
        (b as f64 - a as f64) / self.tasks as f64
    }

    fn total(&self) -> f64 {
        self.per_task(self.before.bytes, self.parked.bytes)
    }

    fn bookkeeping(&self) -> f64 {
        self.total() - self.future as f64
    }

    fn row(&self) -> String {
        format!(
            "| {} | {} | {:.1} | {} | **{:.1}** | {:.1} | {:.1} | {:.2} | {:.1} |",
            self.peer,
            self.handles,
            self.total(),
            self.future,
            self.bookkeeping(),
            self.per_task(self.before.bytes, self.spawned.bytes),
            self.per_task(self.spawned.bytes, self.parked.bytes),
            self.per_task(self.before.allocs, self.parked.allocs),
            self.per_task(self.before.rss, self.parked.rss),
        )
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn measure_ours(tasks: usize, keep_handles: bool) -> Measurement {
    POLLED.with(|p| p.set(0));
    runtime().block_on(async {
        let mut el = EventLoop::builder().build();
        // One empty run first: lazily built parts of the loop are not per-task costs.
        el.run_until(tokio::task::yield_now()).await;
        let future = std::mem::size_of_val(&ours_task());
        let mut handles = Vec::with_capacity(if keep_handles { tasks } else { 0 });

        let sizes_before = by_size();
        let before = snapshot();
        for _ in 0..tasks {
            let handle = shardloop::spawn(ours_task());
            if keep_handles {
                handles.push(handle);
            }
        }
        let spawned = snapshot();
        el.run_until(tokio::task::yield_now()).await;
        let parked = snapshot();
        let sizes = per_task_sizes(&sizes_before, &by_size(), tasks);

        assert_eq!(polled(), tasks, "ours: every task was polled");
        assert_eq!(
            shardloop::timer::dump().live,
            tasks,
            "ours: every task paused"
        );
        drop(handles);
        drop(el);
        Measurement {
            peer: "ours".into(),
            handles: if keep_handles { "kept" } else { "dropped" }.into(),
            tasks,
            future,
            before,
            spawned,
            parked,
            sizes,
        }
    })
}

fn measure_tokio(tasks: usize, keep_handles: bool) -> Measurement {
    POLLED.with(|p| p.set(0));
    let rt = runtime();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        // One task run to the end first, for the same reason as ours.
        tokio::task::spawn_local(async {}).await.expect("warm-up");
        let future = std::mem::size_of_val(&tokio_task());
        let mut handles = Vec::with_capacity(if keep_handles { tasks } else { 0 });

        let sizes_before = by_size();
        let before = snapshot();
        for _ in 0..tasks {
            let handle = tokio::task::spawn_local(tokio_task());
            if keep_handles {
                handles.push(handle);
            }
        }
        let spawned = snapshot();
        while polled() < tasks {
            tokio::task::yield_now().await;
        }
        let parked = snapshot();
        let sizes = per_task_sizes(&sizes_before, &by_size(), tasks);

        for handle in &handles {
            handle.abort();
        }
        drop(handles);
        Measurement {
            peer: "tokio_local".into(),
            handles: if keep_handles { "kept" } else { "dropped" }.into(),
            tasks,
            future,
            before,
            spawned,
            parked,
            sizes,
        }
    })
}

/// Runs one measurement in a fresh child process (so that its RSS growth is not hidden by
/// memory an earlier measurement freed) and parses the numbers it prints.
fn measure_in_child(peer: &str, keep_handles: bool, tasks: usize) -> Measurement {
    let exe = std::env::current_exe().expect("own executable");
    let handles = if keep_handles { "kept" } else { "dropped" };
    let output = std::process::Command::new(exe)
        .args(["--child", peer, handles, &tasks.to_string()])
        .output()
        .expect("run the measurement child");
    assert!(
        output.status.success(),
        "measurement child {peer}/{handles} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    Measurement::parse(&stdout).unwrap_or_else(|| panic!("unexpected child output: {stdout}"))
}

fn child(args: &[String]) {
    let [peer, handles, tasks] = args else {
        panic!("usage: --child <ours|tokio_local> <kept|dropped> <tasks>");
    };
    let tasks: usize = tasks.parse().expect("task count");
    let keep = handles == "kept";
    let m = match peer.as_str() {
        "ours" => measure_ours(tasks, keep),
        "tokio_local" => measure_tokio(tasks, keep),
        other => panic!("unknown peer {other}"),
    };
    println!("{}", m.encode());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        child(&args[at + 1..]);
        return;
    }
    let has = |flag: &str| args.iter().any(|a| a == flag);
    if has("--list") {
        return;
    }
    let tasks = if has("--bench") { TASKS } else { TEST_TASKS };

    let rows = [
        measure_in_child("ours", false, tasks),
        measure_in_child("tokio_local", false, tasks),
        measure_in_child("ours", true, tasks),
        measure_in_child("tokio_local", true, tasks),
    ];

    println!(
        "memory: {tasks} tasks parked on a {PAUSE_MS} ms pause; bytes per task, counted by the \
         global allocator (RSS growth as a cross-check; one child process per row)"
    );
    println!(
        "sizes: Pause = {} B, tokio Sleep = {} B, ours JoinHandle<()> = {} B, tokio \
         JoinHandle<()> = {} B",
        std::mem::size_of::<shardloop::timer::Pause>(),
        std::mem::size_of::<tokio::time::Sleep>(),
        std::mem::size_of::<shardloop::JoinHandle<()>>(),
        std::mem::size_of::<tokio::task::JoinHandle<()>>(),
    );
    println!();
    println!(
        "| peer | handles | total B/task | future B (size_of_val) | bookkeeping B/task | \
         at spawn B/task | at first poll B/task | allocations/task | RSS B/task |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        println!("{}", row.row());
    }
    println!();
    for row in &rows[..2] {
        println!("{}", row.breakdown());
    }
    let (ours, tokio) = (&rows[0], &rows[1]);
    println!();
    println!(
        "total per task: ours / tokio_local = {:.2}; bookkeeping: ours / tokio_local = {:.2}",
        ours.total() / tokio.total(),
        ours.bookkeeping() / tokio.bookkeeping()
    );
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!(
        "target (issue 36): ours total <= 0.5 x tokio_local's, same run: {:.1} B vs {:.1} B \
         ({:.2} x) -> {}",
        ours.total(),
        tokio.total(),
        ours.total() / tokio.total(),
        verdict(ours.total() <= 0.5 * tokio.total())
    );
    println!(
        "target (issue 22): ours bookkeeping <= 64 B per paused task: {:.1} B -> {}",
        ours.bookkeeping(),
        verdict(ours.bookkeeping() <= 64.0)
    );
}
