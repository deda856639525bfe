//! Writing a save: everything after the snapshot, on a blocking thread.
//!
//! In order: sort the snapshot; encode each entity type with `threads` workers, streaming
//! the encoded chunks into the type's file in a fresh temp directory; fsync every file; write
//! and fsync the manifest (last: it is what makes the directory a save); fsync the directory;
//! swap it in as `Saves/` (`layout`). Until that swap the previous save is untouched, and a
//! failure at any step removes the temp directory and leaves everything else as it was.
//!
//! Workers take chunks round-robin and each hands its chunks over a channel two deep, which
//! the writing thread reads in chunk order: the bytes do not depend on the number of
//! workers, and at most `2 × threads` encoded chunks exist at once, whatever the world's size.
//!
//! The new save's sequence number is one more than the one in `Saves/` when the write starts
//! (the save it replaces): so the loaded save's sequence is carried forward through every
//! save, read from the disk that holds the truth rather than from a counter kept aside.
//! Writers of one save directory in this process take turns ([`Layout::lock_writes`]), from
//! that read to the swap.
//!
//! With a disk reserve (`write_with_reserve`, see `persist/reserve.rs`), a save that finds the
//! disk full gives the reserve up and is written again from the same snapshot.
//!
//! Owns the write. Must never run on the loop thread, and never touch the world (it only has
//! the snapshot).

use std::io;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::codec;
use super::error::{Operation, PersistError};
use super::file::{self, Kind, Written};
use super::fsio;
use super::layout::{Layout, Replaced};
use super::manifest::{self, Manifest};
use super::reserve::Reserve;
use super::snapshot::{Capture, Snapshot};

/// Records encoded per chunk (items are 22 bytes: about 180 KB per chunk).
const CHUNK: usize = 8192;

/// A save that is on disk and in place.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The new save's manifest, as written (last) into `Saves/`.
    pub manifest: Manifest,
    /// What became of the save it replaced.
    pub replaced: Replaced,
    /// Sorting, encoding, writing, syncing and swapping.
    pub took: Duration,
}

/// [`write()`] on a dedicated low-priority thread (named `shardloop-save`, at nice 10 so the
/// loop wins any contention for a core); blocks until it is done. Call it from
/// `spawn_blocking`.
pub fn write_in_background(
    layout: &Layout,
    snapshot: Snapshot,
    threads: usize,
) -> Result<Saved, PersistError> {
    write_in_background_with(layout, snapshot, threads, None)
}

/// [`write_in_background`], giving up the disk `reserve` (if any) when the disk is full
/// ([`write_with_reserve`]).
pub(crate) fn write_in_background_with(
    layout: &Layout,
    snapshot: Snapshot,
    threads: usize,
    reserve: Option<&Reserve>,
) -> Result<Saved, PersistError> {
    super::background::run("shardloop-save", move || match reserve {
        Some(reserve) => write_with_reserve(layout, snapshot, threads, reserve),
        None => write(layout, snapshot, threads),
    })
    .map_err(|source| fail("starting the save thread for", &layout.saves, source))?
}

/// A save taken on the loop as a [`Capture`]: copied out into a [`Snapshot`] on the
/// save's low-priority thread (where the frozen pages are released as soon as the copy is
/// made), then written as [`write_in_background_with`] does. Call it from `spawn_blocking`.
pub(crate) fn write_capture_in_background(
    layout: &Layout,
    capture: Capture,
    threads: usize,
    reserve: Option<&Reserve>,
) -> Result<Saved, PersistError> {
    super::background::run("shardloop-save", move || {
        let snapshot = capture.into_snapshot();
        match reserve {
            Some(reserve) => write_with_reserve(layout, snapshot, threads, reserve),
            None => write(layout, snapshot, threads),
        }
    })
    .map_err(|source| fail("starting the save thread for", &layout.saves, source))?
}

/// Writes `snapshot` as the new current save. Blocking: call it from `spawn_blocking`.
pub fn write(
    layout: &Layout,
    mut snapshot: Snapshot,
    threads: usize,
) -> Result<Saved, PersistError> {
    let began = Instant::now();
    snapshot.sort();
    write_sorted(layout, &snapshot, threads, began)
}

/// [`write()`] with a disk reserve: when the disk (or the quota) is full, the reserve is
/// deleted and the same snapshot written again at once, so the save fits; after a save that
/// succeeds, the reserve is made again if the disk has room for it. Each step that the
/// operator must hear of is logged (a full disk, the reserve given up, no room to make it
/// again). The error is the last attempt's. Blocking.
pub(crate) fn write_with_reserve(
    layout: &Layout,
    mut snapshot: Snapshot,
    threads: usize,
    reserve: &Reserve,
) -> Result<Saved, PersistError> {
    let began = Instant::now();
    snapshot.sort();
    let saved = match write_sorted(layout, &snapshot, threads, began) {
        Err(e) if e.is_out_of_space() => {
            if !reserve.give_up_for(&e) {
                return Err(e);
            }
            write_sorted(layout, &snapshot, threads, began)?
        }
        other => other?,
    };
    drop(snapshot);
    reserve.keep();
    Ok(saved)
}

/// The save itself, from a sorted snapshot: staged in a temp directory, swapped in.
fn write_sorted(
    layout: &Layout,
    snapshot: &Snapshot,
    threads: usize,
    began: Instant,
) -> Result<Saved, PersistError> {
    // Held until the save is in place: the sequence read below must still be the one in
    // `Saves/` when this save replaces it.
    let _writing = layout.lock_writes();
    let staged = layout
        .create_temp_dir("save")
        .map_err(|source| fail("creating", layout.root(), source))?;
    // One more than the save this one replaces: recovery orders saves by it, not by the clock.
    let sequence = layout.current_sequence() + 1;
    match stage(&staged, snapshot, sequence, threads.max(1)) {
        Ok(manifest) => {
            let replaced = layout.swap_in(&staged).map_err(|failed| {
                if let Some(on_disk) = failed.on_disk(&layout.saves) {
                    // In place but not durable: a failed save all the same. Both saves stay
                    // where they are (the new one in `Saves/`), and the error says so.
                    let source = failed.into_source();
                    return fail("syncing", layout.root(), source).with_on_disk(on_disk);
                }
                // Not in place. Drop it, unless it is the only complete save left (a failed
                // fallback swap with no `Saves/`): startup recovery promotes it.
                if layout.saves.exists() {
                    let _ = std::fs::remove_dir_all(&staged);
                }
                fail("putting in place", &layout.saves, failed.into_source())
            })?;
            Ok(Saved {
                manifest,
                replaced,
                took: began.elapsed(),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staged);
            Err(e)
        }
    }
}

/// Writes every file of the save into `dir`, the manifest last.
fn stage(
    dir: &Path,
    snap: &Snapshot,
    sequence: u64,
    threads: usize,
) -> Result<Manifest, PersistError> {
    let files = vec![
        (
            Kind::Items,
            write_kind(dir, Kind::Items, &snap.items, threads, codec::encode_item)?,
        ),
        (
            Kind::Mobiles,
            write_kind(
                dir,
                Kind::Mobiles,
                &snap.mobiles,
                threads,
                codec::encode_mobile,
            )?,
        ),
        (
            Kind::Spawners,
            write_kind(
                dir,
                Kind::Spawners,
                &snap.spawners,
                threads,
                codec::encode_spawner,
            )?,
        ),
    ];
    let manifest = Manifest {
        format: manifest::SAVE_FORMAT,
        created: snap.created,
        sequence,
        writer: env!("CARGO_PKG_VERSION").to_owned(),
        seed: snap.seed,
        next_item_serial: snap.next_item_serial,
        next_mobile_serial: snap.next_mobile_serial,
        items: snap.items.len() as u64,
        mobiles: snap.mobiles.len() as u64,
        spawners: snap.spawners.len() as u64,
        files,
    };
    let path = dir.join(manifest::FILE_NAME);
    fsio::write_new(&path, manifest.to_toml().as_bytes())
        .map_err(|source| fail("writing", &path, source))?;
    fsio::sync_dir(dir).map_err(|source| fail("syncing", dir, source))?;
    Ok(manifest)
}

fn write_kind<T: Sync>(
    dir: &Path,
    kind: Kind,
    records: &[T],
    threads: usize,
    encode: fn(&T, &mut Vec<u8>),
) -> Result<Written, PersistError> {
    let path = dir.join(kind.file_name());
    let chunks: Vec<&[T]> = records.chunks(CHUNK).collect();
    let threads = threads.min(chunks.len()).max(1);
    std::thread::scope(|scope| {
        let mut outputs = Vec::with_capacity(threads);
        for worker in 0..threads {
            let (send, receive) = mpsc::sync_channel::<Vec<u8>>(2);
            let mine: Vec<&[T]> = chunks
                .iter()
                .copied()
                .skip(worker)
                .step_by(threads)
                .collect();
            scope.spawn(move || {
                for chunk in mine {
                    let mut bytes = Vec::with_capacity(chunk.len() * 32);
                    chunk.iter().for_each(|r| encode(r, &mut bytes));
                    if send.send(bytes).is_err() {
                        return; // the writer gave up (I/O error): stop encoding
                    }
                }
            });
            outputs.push(receive);
        }
        // Chunk i comes from worker i % threads; a worker that stopped early means a bug, not
        // a short file, so it is an error rather than silently fewer records.
        let in_order = (0..chunks.len()).map(|i| {
            outputs[i % threads]
                .recv()
                .map_err(|_| io::Error::other("a serialization worker stopped early"))
        });
        file::write(&path, kind, records.len() as u64, in_order)
            .map_err(|source| fail("writing", &path, source))
    })
}

/// Why a save failed (every failure leaves the previous save intact, as its text says).
fn fail(step: &'static str, path: &Path, source: io::Error) -> PersistError {
    PersistError::new(Operation::Save, step, path, source)
}

/// The default number of serialization workers: one per core but the loop's, at least one.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}
