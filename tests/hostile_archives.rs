//! Hostile archives against the real binary: `shardloop restore` refuses each with exit 2 and
//! a message naming the limit, leaving the data directory exactly as it was (no temp copy
//! either); `restore --list` shows each as unreadable, within the same limits; the startup
//! drop-in refuses them too. The limit is set to its minimum (1 MiB) so that every bomb here
//! is cheap to make: a few MiB of zeros, compressed to a few KiB.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use shardloop::persist::{self, Layout, Snapshot};

mod common;
use common::binary::temp_dirs;

/// `archive.max_restore_bytes` for these tests.
const LIMIT: u64 = 1 << 20;
/// Comfortably past the limit, still cheap to compress.
const BOMB: u64 = 8 << 20;

/// A data directory with a small save in `Saves/`.
fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = shardloop::world::generate(42, 300, 40);
    let snapshot = Snapshot::take(&world, "2026-12-03T10:00:00Z".parse().unwrap(), |_| true);
    persist::save::write(&layout, snapshot, 2).unwrap();
    dir
}

/// The save's files (name, bytes), manifest first.
fn save_files(data: &Path) -> Vec<(String, Vec<u8>)> {
    ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                std::fs::read(data.join("Saves").join(n)).unwrap(),
            )
        })
        .collect()
}

/// Every path under `dir` with its file's size and CRC-32 (the lock file aside: any run of
/// the binary that takes it leaves it): "nothing changed" is equality.
fn tree(dir: &Path) -> Vec<common::tree::Entry> {
    common::tree::data(dir)
}

fn shardloop(data: &Path) -> Command {
    let mut cmd = common::binary::shardloop(data, (300, 40));
    cmd.arg("--data-dir")
        .arg(data)
        .env("SHARD_ARCHIVE__MAX_RESTORE_BYTES", LIMIT.to_string());
    cmd
}

fn run(cmd: &mut Command) -> (Output, String) {
    let out = common::deadline::run_within(cmd, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// `shardloop restore <archive>` is refused: exit 2, the message holds each of `expect`,
/// and nothing in the data directory changed (no temp copy left either).
fn refused(data: &Path, archive: &Path, expect: &[&str]) {
    let before = tree(data);
    let (out, text) = run(shardloop(data).arg("restore").arg(archive));
    assert_eq!(out.status.code(), Some(2), "{text}");
    for part in expect {
        assert!(text.contains(part), "expected {part:?} in: {text}");
    }
    assert!(text.contains("nothing was changed"), "{text}");
    assert_eq!(tree(data), before, "the data directory changed");
    assert!(temp_dirs(data).is_empty(), "{:?}", temp_dirs(data));
}

/// The `restore --list` line of `name` (exit 0: listing a bad archive is not an error).
fn listed(data: &Path, name: &str) -> String {
    let before = tree(data);
    let (out, text) = run(shardloop(data).args(["restore", "--list"]));
    assert!(out.status.success(), "{text}");
    assert_eq!(tree(data), before, "listing changed the data directory");
    text.lines()
        .find(|l| l.contains(name))
        .unwrap_or_else(|| panic!("{name} not listed: {text}"))
        .to_owned()
}

/// A `.tar.zst` of `entries`: (header, data), each written with the header as given.
fn tar_zst(path: &Path, entries: Vec<(tar::Header, Box<dyn Read>)>) {
    let encoder = zstd::Encoder::new(File::create(path).unwrap(), 3).unwrap();
    let mut tar = tar::Builder::new(encoder);
    for (mut header, data) in entries {
        header.set_cksum();
        tar.append(&header, data).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

fn file(name: &str, bytes: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_path(name).unwrap();
    header.set_size(bytes);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header
}

fn zeros(bytes: u64) -> Box<dyn Read> {
    Box::new(io::repeat(0).take(bytes))
}

/// The save's files as tar entries, then `extra` zero bytes in `pad.bin` (before the save
/// when `pad_first`, so that a reader looking for the manifest has to get past it).
fn save_with_padding(
    data: &Path,
    extra: u64,
    pad_first: bool,
) -> Vec<(tar::Header, Box<dyn Read>)> {
    let mut entries: Vec<(tar::Header, Box<dyn Read>)> = save_files(data)
        .into_iter()
        .map(|(name, bytes)| {
            let header = file(&name, bytes.len() as u64);
            (header, Box::new(io::Cursor::new(bytes)) as Box<dyn Read>)
        })
        .collect();
    let pad = (file("pad.bin", extra), zeros(extra));
    match pad_first {
        true => entries.insert(0, pad),
        false => entries.push(pad),
    }
    entries
}

fn save_bytes(data: &Path) -> u64 {
    save_files(data).iter().map(|(_, b)| b.len() as u64).sum()
}

#[test]
fn a_tar_bomb_just_under_the_limit_restores_and_one_byte_over_is_refused() {
    let data = data_dir();
    let src = tempfile::tempdir().unwrap();
    let under = src.path().join("under.tar.zst");
    let over = src.path().join("over.tar.zst");
    let room = LIMIT - save_bytes(data.path());
    tar_zst(&over, save_with_padding(data.path(), room + 1, false));
    refused(
        data.path(),
        &over,
        &["entry `pad.bin`", "archive.max_restore_bytes = 1048576"],
    );

    tar_zst(&under, save_with_padding(data.path(), room, false));
    let (out, text) = run(shardloop(data.path()).arg("restore").arg(&under));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("restored the save"), "{text}");
    assert!(temp_dirs(data.path()).is_empty());
    assert_eq!(
        std::fs::metadata(data.path().join("Saves/pad.bin"))
            .unwrap()
            .len(),
        room
    );
}

#[test]
fn restore_list_stops_at_the_limit_when_a_bomb_comes_before_the_manifest() {
    let data = data_dir();
    let daily = data.path().join("Archives/Daily");
    std::fs::create_dir_all(&daily).unwrap();
    tar_zst(
        &daily.join("2026-12-01.tar.zst"),
        save_with_padding(data.path(), BOMB, true),
    );
    // The same save with its padding after the manifest lists fine: the manifest is found
    // first and nothing past it is read.
    tar_zst(
        &daily.join("2026-12-02.tar.zst"),
        save_with_padding(data.path(), BOMB, false),
    );
    let line = listed(data.path(), "2026-12-01.tar.zst");
    assert!(line.contains("unreadable"), "{line}");
    assert!(line.contains("more than"), "{line}");
    let line = listed(data.path(), "2026-12-02.tar.zst");
    assert!(line.contains("   300  "), "{line}");
}

#[test]
fn pax_and_long_name_headers_with_huge_bodies_are_refused_and_listed_as_unreadable() {
    let data = data_dir();
    let src = tempfile::tempdir().unwrap();
    let daily = data.path().join("Archives/Daily");
    std::fs::create_dir_all(&daily).unwrap();
    for (kind, name, expect) in [
        (
            tar::EntryType::XHeader,
            "pax",
            "PAX header of 8388608 bytes",
        ),
        (
            tar::EntryType::GNULongName,
            "longname",
            "GNU long-name header",
        ),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_path("././@LongLink").unwrap();
        header.set_size(BOMB);
        header.set_entry_type(kind);
        let mut entries = vec![(header, zeros(BOMB))];
        entries.extend(save_with_padding(data.path(), 0, false));
        let archive = src.path().join(format!("{name}.tar.zst"));
        tar_zst(&archive, entries);
        refused(data.path(), &archive, &[expect]);

        let listed_as = daily.join(format!("2026-11-0{}.tar.zst", name.len() % 9));
        std::fs::copy(&archive, &listed_as).unwrap();
        let line = listed(
            data.path(),
            &listed_as.file_name().unwrap().to_string_lossy(),
        );
        assert!(
            line.contains("unreadable") && line.contains("more than"),
            "{line}"
        );
    }
}

/// A zip whose end records (zip64) claim ten million entries in a 460 MB directory: the
/// file is 98 bytes.
fn zip_claiming_ten_million_entries() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0x0606_4b50u32.to_le_bytes()); // zip64 end of central directory
    out.extend(44u64.to_le_bytes());
    out.extend([0; 12]);
    out.extend(10_000_000u64.to_le_bytes());
    out.extend(10_000_000u64.to_le_bytes());
    out.extend(460_000_000u64.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend(0x0706_4b50u32.to_le_bytes()); // its locator
    out.extend([0; 4]);
    out.extend(0u64.to_le_bytes());
    out.extend(1u32.to_le_bytes());
    out.extend(0x0605_4b50u32.to_le_bytes()); // end of central directory: "see zip64"
    out.extend([0; 4]);
    out.extend([0xff; 4]);
    out.extend([0xff; 8]);
    out.extend(0u16.to_le_bytes());
    out
}

#[test]
fn a_zip_claiming_ten_million_entries_is_refused_before_it_is_parsed() {
    let data = data_dir();
    let src = tempfile::tempdir().unwrap();
    let zip = src.path().join("huge.zip");
    std::fs::write(&zip, zip_claiming_ten_million_entries()).unwrap();
    refused(
        data.path(),
        &zip,
        &["claims 10000000 entries", "at most 256"],
    );

    let monthly = data.path().join("Archives/Monthly");
    std::fs::create_dir_all(&monthly).unwrap();
    std::fs::copy(&zip, monthly.join("2026-11.zip")).unwrap();
    let line = listed(data.path(), "2026-11.zip");
    assert!(line.contains("claims 10000000 entries"), "{line}");
}

#[test]
fn an_empty_file_named_like_an_archive_is_refused_and_listed_as_unreadable() {
    let data = data_dir();
    let hourly = data.path().join("Archives/Hourly");
    std::fs::create_dir_all(&hourly).unwrap();
    let empty = hourly.join("2026-12-03-09.tar.zst");
    std::fs::write(&empty, b"").unwrap();
    refused(data.path(), &empty, &["not a readable archive"]);
    let line = listed(data.path(), "2026-12-03-09.tar.zst");
    assert!(line.contains("unreadable"), "{line}");
}

#[test]
fn a_bomb_dropped_into_saves_stops_the_start_and_changes_nothing() {
    let data = data_dir();
    tar_zst(
        &data.path().join("Saves/dropped.tar.zst"),
        save_with_padding(data.path(), BOMB, true),
    );
    let before = tree(data.path());
    let (out, text) = run(&mut shardloop(data.path()));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("archive.max_restore_bytes = 1048576"),
        "{text}"
    );
    assert_eq!(tree(data.path()), before);
    assert!(temp_dirs(data.path()).is_empty());
}

#[test]
fn limits_are_the_configured_ones() {
    // The same bomb, a limit high enough for it: restored (so the refusals above are the
    // limit's doing, not something else about these archives).
    let data = data_dir();
    let src = tempfile::tempdir().unwrap();
    let archive = src.path().join("big.tar.zst");
    tar_zst(&archive, save_with_padding(data.path(), 2 * LIMIT, true));
    let mut cmd = shardloop(data.path());
    cmd.env("SHARD_ARCHIVE__MAX_RESTORE_BYTES", (4 * LIMIT).to_string());
    let (out, text) = run(cmd.arg("restore").arg(&archive));
    assert!(out.status.success(), "{text}");
    let mut written = File::open(data.path().join("Saves/pad.bin")).unwrap();
    let mut buf = Vec::new();
    written.read_to_end(&mut buf).unwrap();
    assert_eq!(buf.len() as u64, 2 * LIMIT);
    assert!(buf.iter().all(|b| *b == 0));
}
