//! What the `pause`, `post` and `net` benches share: how the binary was started, and the
//! median their summary tables report.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkFilter, BenchmarkGroup, Criterion, SamplingMode, Throughput};

/// How a bench binary was started, and so what it should run.
pub struct Invocation {
    /// `cargo bench` (full-size workloads) rather than `cargo test --bench` (one small pass).
    pub full_size: bool,
    /// Print the summary table after the criterion groups: under `cargo bench` with no
    /// filter, or alone with `-- summary`.
    pub summary: bool,
}

/// Reads the command line: criterion's own flags, plus `summary` as the first positional
/// argument (criterion groups off, summary only); any other positional argument is a
/// criterion filter and skips the summary.
pub fn invocation() -> (Criterion, Invocation) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let full_size = has("--bench") && !has("--test") && !has("--list");
    let first_positional = args.iter().find(|a| !a.starts_with('-'));
    let mut criterion = Criterion::default().configure_from_args();
    let summary = match first_positional.map(String::as_str) {
        None => full_size,
        Some("summary") => {
            criterion = criterion.with_benchmark_filter(BenchmarkFilter::RejectAll);
            full_size
        }
        Some(_) => false,
    };
    (criterion, Invocation { full_size, summary })
}

/// The median of a sample (the mean of the middle two for an even count).
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A criterion group whose one iteration is a whole run of `elements` operations: 10 flat
/// samples, a short warm-up, 3 s of measurement — the shape every summary bench uses.
#[allow(dead_code)] // the benches whose iterations are single operations do not use it
pub fn whole_run_group<'a>(
    c: &'a mut Criterion,
    name: &str,
    elements: u64,
) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(elements));
    group
}

/// A current-thread tokio runtime on the paused clock, for benches that time CPU work only.
#[allow(dead_code)] // the benches that run on the real clock do not use it
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}
