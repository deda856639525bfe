//! `loopstats csv [PATH]`: the loop's 15-minute history to a CSV file and its chart beside it.
//!
//! The loop only copies the ring (a fixed ~400 KB memcpy, timed and reported); the CSV and
//! the SVG are written on a blocking-pool thread, which prints the answer — both paths, or
//! the error — when it is done. One write at a time: a second request while one runs is
//! answered "busy". Files are created new, never overwritten.
//!
//! This module must never write a file on the loop thread.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::runtime::history::chart;
use crate::runtime::history::{History, LoopSecond};

use super::Printer;

/// One `loopstats csv` at a time; clones share the flag.
#[derive(Debug, Clone, Default)]
pub(in crate::shard) struct CsvWriter {
    busy: Arc<AtomicBool>,
    /// Tests: how long the writing thread lingers after showing its answer (a thread the
    /// host preempts right there), so the flag's order against the answer can be seen.
    #[cfg(test)]
    linger: Duration,
}

/// Clears the busy flag when the write ends, however it ends.
struct Done(Arc<AtomicBool>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl CsvWriter {
    /// Copies `history` (on the loop, now) and writes it to `csv` and the chart beside it on
    /// a blocking thread, which answers through `printer`. Returns the immediate answer.
    pub(in crate::shard) fn start(
        &self,
        copy: impl FnOnce() -> History,
        csv: PathBuf,
        printer: Printer,
    ) -> Result<String, String> {
        let svg = svg_path(&csv)?;
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err("busy: a loopstats csv is being written; ask again when it is done".into());
        }
        let done = Done(self.busy.clone());
        let began = Instant::now();
        let history = copy();
        let took = began.elapsed();
        let rows = history.len();
        let (csv_shown, svg_shown) = (csv.display().to_string(), svg.display().to_string());
        #[cfg(test)]
        let linger = self.linger;
        tokio::task::spawn_blocking(move || {
            let done = done;
            let answer = match write_both(&history, &csv, &svg) {
                Ok(()) => format!(
                    "loopstats csv: wrote {rows} seconds to {} and the chart to {}",
                    csv.display(),
                    svg.display()
                ),
                Err(e) => format!("error: loopstats csv: {e}"),
            };
            // Free before the answer is shown: an operator who acts on it at once must not
            // be told "busy" by the write it reports as done.
            drop(done);
            tracing::info!("{answer}");
            printer.say(answer);
            #[cfg(test)]
            std::thread::sleep(linger);
        });
        Ok(format!(
            "loopstats csv: copied {rows} seconds on the loop in {}; writing {csv_shown} and \
             {svg_shown} off the loop",
            micros(took)
        ))
    }
}

/// The default path: `<data_dir>/loopstats-<UTC time>.csv`.
pub(in crate::shard) fn default_path(data_dir: &Path) -> PathBuf {
    let now = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
    data_dir.join(format!("loopstats-{now}.csv"))
}

/// `PATH` with `.svg` for `.csv`; a path that does not end in `.csv` is refused, so that the
/// chart can never land on the CSV (or on anything else the operator did not name).
fn svg_path(csv: &Path) -> Result<PathBuf, String> {
    match csv.extension() {
        Some(ext) if ext == "csv" && csv.file_stem().is_some() => Ok(csv.with_extension("svg")),
        _ => Err(format!(
            "{} does not end in .csv (the chart is written beside it, with .svg)",
            csv.display()
        )),
    }
}

fn micros(d: Duration) -> String {
    format!("{} µs", d.as_micros())
}

/// Writes the CSV, then the chart; an error names the file.
fn write_both(history: &History, csv: &Path, svg: &Path) -> Result<(), String> {
    let file = create_new(csv).map_err(named(csv))?;
    let mut out = BufWriter::new(file);
    history
        .write_csv(&mut out)
        .and_then(|()| out.flush())
        .map_err(named(csv))?;
    let seconds: Vec<LoopSecond> = history.iter().copied().collect();
    let name = csv.file_name().unwrap_or(csv.as_os_str()).to_string_lossy();
    let drawn = chart::svg(&seconds, &format!("shardloop loop thread: {name}"))
        .map_err(|e| format!("{}: {e}; no chart written", csv.display()))?;
    let mut file = create_new(svg).map_err(named(svg))?;
    file.write_all(drawn.as_bytes()).map_err(named(svg))
}

/// An I/O error, as "path: error".
fn named(path: &Path) -> impl Fn(io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_goes_beside_a_csv_path_and_nothing_else_is_accepted() {
        assert_eq!(
            svg_path(Path::new("/d/loop.csv")),
            Ok(PathBuf::from("/d/loop.svg"))
        );
        for bad in ["/d/loop.svg", "/d/loop", "/d/.csv", "/d/loop.csv/.."] {
            let err = svg_path(Path::new(bad)).unwrap_err();
            assert!(err.contains("does not end in .csv"), "{bad}: {err}");
        }
        let default = default_path(Path::new("/data"));
        assert!(default.starts_with("/data"), "{default:?}");
        assert!(svg_path(&default).is_ok(), "{default:?}");
    }

    #[test]
    fn a_second_request_while_one_writes_is_busy_and_copies_nothing() {
        let writer = CsvWriter::default();
        writer.busy.store(true, Ordering::Release); // a write in progress
        let (tx, _rx) = std::sync::mpsc::channel();
        let copied = std::cell::Cell::new(false);
        let answer = writer.start(
            || {
                copied.set(true);
                History::new()
            },
            PathBuf::from("/nowhere/x.csv"),
            Printer { tx },
        );
        assert!(answer.unwrap_err().starts_with("busy"));
        assert!(!copied.get(), "the ring is not copied for a busy answer");
        assert!(
            writer.busy.load(Ordering::Acquire),
            "the running write keeps the flag"
        );
    }

    /// An operator who acts on the answer at once is not told "busy" by the write it
    /// reports (it was, in a race the shard's console test met on a loaded host).
    #[tokio::test]
    async fn the_writer_is_free_before_its_answer_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let writer = CsvWriter {
            linger: Duration::from_millis(300),
            ..CsvWriter::default()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let csv = dir.path().join("episode.csv");
        writer
            .start(
                || {
                    let mut history = History::new();
                    history.push(LoopSecond {
                        unix_second: 1_700_000_000,
                        wall: Duration::from_secs(1),
                        ..LoopSecond::default()
                    });
                    history
                },
                csv.clone(),
                Printer { tx },
            )
            .expect("the write starts");
        let answer = tokio::task::spawn_blocking(move || {
            rx.recv_timeout(Duration::from_secs(30)).expect("an answer")
        })
        .await
        .unwrap();
        let busy = writer.busy.load(Ordering::Acquire);
        assert!(
            matches!(&answer, super::super::Print::Answer(text) if text.contains("wrote")),
            "{answer:?}"
        );
        assert!(!busy, "the flag is down once the answer is out");
        assert!(csv.exists());
    }
}
