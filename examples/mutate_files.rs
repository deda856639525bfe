//! A million hostile files: seeded mutations of real saves and archives through the shard's
//! real entry points, counting panics, disagreements and the memory each attempt needed.
//!
//! ```sh
//! cargo run --release --example mutate_files -- --kind saves --cases 700000
//! cargo run --release --example mutate_files -- --kind archives --cases 300000
//! cargo run --release --example mutate_files -- --kind saves --world default --cases 2000
//! ```
//!
//! The cases are those of `tests/fuzz_files.rs` (the same engine, `tests/common/mutate.rs`,
//! the same entry points, `tests/common/attempt.rs`): case `n` of a kind is the same
//! everywhere, so a failure found here replays in the test by its number. `--world small`
//! seeds from small saves of the default world's generator (fast: the bulk of the run);
//! `--world default` from the default world itself (190,728 items, 33,158 mobiles), to
//! measure memory against a real save's size.
//!
//! Memory: a counting allocator records, for every attempt, the peak of live heap bytes above
//! what was live when it began — the most one hostile file made the shard hold at once. The
//! process's peak RSS (`getrusage`) is printed too; it bounds every attempt from above.
//!
//! Exit code 1 when any case panicked or the entry points disagreed; the report lists them.
//!
//! `--write-corpus DIR` writes the seed corpora of the cargo-fuzz targets instead
//! (`DIR/load_save/`, `DIR/restore_archive/`; see `fuzz/README.md`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shardloop::persist::archive::Format;

#[allow(dead_code)]
#[path = "../tests/common/mutate.rs"]
mod mutate;

#[allow(dead_code)]
#[path = "../tests/common/attempt.rs"]
mod attempt;

use attempt::Outcome;
use mutate::{Rng, SaveFiles, mutate_archive, mutate_save};

#[path = "../benches/support/peak_heap.rs"]
mod peak_heap;

#[global_allocator]
static ALLOCATOR: peak_heap::PeakHeap = peak_heap::PeakHeap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Saves,
    Archives,
}

struct Args {
    corpus: Option<std::path::PathBuf>,
    kind: Kind,
    cases: u64,
    first: u64,
    default_world: bool,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        corpus: None,
        kind: Kind::Saves,
        cases: 10_000,
        first: 0,
        default_world: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--kind" => {
                args.kind = match value()?.as_str() {
                    "saves" => Kind::Saves,
                    "archives" => Kind::Archives,
                    other => return Err(format!("--kind {other}: saves or archives")),
                }
            }
            "--write-corpus" => args.corpus = Some(value()?.into()),
            "--cases" => args.cases = value()?.parse().map_err(|e| format!("--cases: {e}"))?,
            "--first" => args.first = value()?.parse().map_err(|e| format!("--first: {e}"))?,
            "--world" => {
                args.default_world = match value()?.as_str() {
                    "small" => false,
                    "default" => true,
                    other => return Err(format!("--world {other}: small or default")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// What the run found.
#[derive(Default)]
struct Findings {
    accepted: u64,
    refused: u64,
    failures: Vec<String>,
    /// The largest per-attempt heap peak, and the case that made it.
    peak_heap: (usize, String),
}

fn main() {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("mutate_files: {e}");
            std::process::exit(2);
        }
    };
    if let Some(dir) = &args.corpus {
        write_corpus(dir);
        return;
    }
    // Panics are counted, not printed: keep the last one's message and site.
    let last_panic = Arc::new(Mutex::new(String::new()));
    let sink = last_panic.clone();
    std::panic::set_hook(Box::new(move |info| {
        *sink.lock().unwrap_or_else(|e| e.into_inner()) = info.to_string();
    }));

    let (save_sizes, seeds) = seeds(args.default_world);
    let seed_bytes: usize = seeds[0].files.iter().map(|(_, b)| b.len()).sum();
    let packed: Vec<(Format, Vec<u8>)> = Format::ALL
        .iter()
        .map(|&format| (format, seeds[0].pack(format)))
        .collect();
    println!(
        "{:?}, cases {}..{}, seed saves {save_sizes} ({} data bytes in the first)",
        args.kind,
        args.first,
        args.first + args.cases,
        seed_bytes
    );

    let began = Instant::now();
    let mut found = Findings::default();
    for case in args.first..args.first + args.cases {
        let (what, run): (String, Box<dyn FnOnce() -> Outcome>) = match args.kind {
            // The case numbering of tests/fuzz_files.rs.
            Kind::Saves => {
                let mut rng = Rng::new(case);
                let seed = rng.pick(&seeds);
                let (save, what) = mutate_save(seed, &mut rng);
                (what, Box::new(move || attempt::load(&save)))
            }
            Kind::Archives => {
                let mut rng = Rng::new(1_000_000 + case);
                let (format, bytes) = rng.pick(&packed);
                let (archive, what) = mutate_archive(&seeds[0], bytes, *format, &mut rng);
                let format = *format;
                (
                    format!("{format:?}, {what}"),
                    Box::new(move || attempt::restore_archive(&archive, format)),
                )
            }
        };
        let base = peak_heap::reset_peak();
        let outcome = catch_unwind(AssertUnwindSafe(run));
        let heap = peak_heap::peak().saturating_sub(base);
        if heap > found.peak_heap.0 {
            found.peak_heap = (heap, format!("case {case} ({what})"));
        }
        match outcome {
            Ok(Outcome::Accepted) => found.accepted += 1,
            Ok(Outcome::Refused(_)) => found.refused += 1,
            Ok(Outcome::Disagreed(why)) => found.failures.push(format!("case {case}: {why}")),
            Err(_) => {
                let panic = last_panic.lock().unwrap_or_else(|e| e.into_inner()).clone();
                found
                    .failures
                    .push(format!("case {case} ({what}): PANIC {panic}"));
            }
        }
        if (case + 1 - args.first) % 50_000 == 0 {
            println!(
                "  {} cases, {:.0} s, {} failures so far",
                case + 1 - args.first,
                began.elapsed().as_secs_f64(),
                found.failures.len()
            );
        }
    }
    report(
        &found,
        args.cases,
        began.elapsed().as_secs_f64(),
        seed_bytes,
    );
    if !found.failures.is_empty() {
        std::process::exit(1);
    }
}

/// The seed saves: two small ones, or the default world.
fn seeds(default_world: bool) -> (&'static str, Vec<SaveFiles>) {
    if default_world {
        let world = shardloop::world::generate_default(1);
        ("the default world", vec![SaveFiles::of(&world)])
    } else {
        (
            "400+60 and 60+10 items+mobiles",
            vec![SaveFiles::real(1, 400, 60), SaveFiles::real(2, 60, 10)],
        )
    }
}

/// The fuzz targets' seeds: each file of a real small save (raw and resealed), the default
/// world's manifest and spawners, and that small save packed in every format.
fn write_corpus(dir: &std::path::Path) {
    let small = SaveFiles::real(1, 400, 60);
    let default = SaveFiles::of(&shardloop::world::generate_default(1));
    let load = dir.join("load_save");
    let restore = dir.join("restore_archive");
    std::fs::create_dir_all(&load).expect("corpus dir");
    std::fs::create_dir_all(&restore).expect("corpus dir");
    let put = |path: std::path::PathBuf, selector: u8, body: &[u8]| {
        let mut bytes = vec![selector];
        bytes.extend_from_slice(body);
        std::fs::write(path, bytes).expect("write corpus file");
    };
    put(load.join("manifest-small"), 0, small.manifest.as_bytes());
    put(
        load.join("manifest-default"),
        0,
        default.manifest.as_bytes(),
    );
    for (i, (name, bytes)) in small.files.iter().enumerate() {
        let selector = i as u8 + 1;
        put(load.join(format!("{name}-small")), selector, bytes);
        put(
            load.join(format!("{name}-small-resealed")),
            selector | 4,
            bytes,
        );
    }
    put(
        load.join("spawners.bin-default"),
        3 | 4,
        &default.files[2].1,
    );
    for (i, format) in Format::ALL.iter().enumerate() {
        let name = format!("small{}", format.extension());
        put(restore.join(name), i as u8, &small.pack(*format));
    }
    println!("wrote the seed corpora under {}", dir.display());
}

fn report(found: &Findings, cases: u64, secs: f64, seed_bytes: usize) {
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!(
        "cases      {cases} in {secs:.0} s ({:.0}/s)",
        cases as f64 / secs
    );
    println!(
        "answers    {} accepted, {} refused",
        found.accepted, found.refused
    );
    println!("failures   {}", found.failures.len());
    for failure in found.failures.iter().take(20) {
        println!("  {failure}");
    }
    println!(
        "heap       largest per-attempt peak {:.1} MiB, {}",
        mib(found.peak_heap.0),
        found.peak_heap.1
    );
    println!(
        "bound      4 x the seed save ({:.1} MiB) + 64 MiB = {:.1} MiB",
        mib(seed_bytes),
        mib(4 * seed_bytes + (64 << 20))
    );
    println!(
        "max RSS    {:.1} MiB (whole process)",
        max_rss_kib() / 1024.0
    );
}

fn max_rss_kib() -> f64 {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to our struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as f64
}
