//! Restoring a save from an archive: archives packed by the standard tools and by the
//! format module restore to the same world, with the previous save and the archive kept;
//! hand-built malicious archives are refused with the entry named and nothing changed; the
//! binary's `restore` exits 2 naming the archive, and `restore --list` shows the counts.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use shardloop::persist::archive::Format;
use shardloop::persist::archive::format;
use shardloop::persist::archive::restore::{self, Limits, ListedKind, RestoreError};
use shardloop::persist::{self, Layout, Snapshot};
use shardloop::world::{self, World};

mod common;
use common::binary::temp_dirs;

const CREATED: &str = "2026-12-03T10:00:00Z";
const EARLIER: &str = "2026-12-01T08:00:00Z";
const LIMITS: Limits = Limits {
    max_bytes: 64 << 20,
    max_entries: 64,
};

fn archived_world() -> World {
    world::generate(42, 3000, 400)
}

fn current_world() -> World {
    world::generate(7, 500, 60)
}

fn layout(data: &Path) -> Layout {
    Layout::new(data, data.join("Saves"))
}

fn save(layout: &Layout, world: &World, created: &str) {
    let snapshot = Snapshot::take(world, created.parse().unwrap(), |_| true);
    persist::save::write(layout, snapshot, 2).unwrap();
}

/// A scratch directory holding `Saves/` with the archived world (what gets packed).
fn source() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    save(&layout(dir.path()), &archived_world(), EARLIER);
    dir
}

/// A data directory whose current save is another world.
fn data_with_a_save() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    save(&layout(dir.path()), &current_world(), CREATED);
    dir
}

fn archives(data: &Path) -> PathBuf {
    data.join("Archives")
}

/// Every path under `dir` (directories too), with each file's size and CRC-32: "nothing
/// changed" is equality (lock files are not data; see `common::tree`).
fn tree(dir: &Path) -> Vec<common::tree::Entry> {
    common::tree::data(dir)
}

fn restored_backups(data: &Path) -> Vec<PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(data.join("Backups"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("Restored-")
        })
        .collect();
    found.sort();
    found
}

/// Runs a packing command in `dir` (tar, zip and zstd are installed by `scripts/test`; a
/// missing one fails the test naming it, unless `SHARDLOOP_ALLOW_SKIP=1`, when it returns
/// false).
#[track_caller]
fn pack(dir: &Path, tool: &str, args: &[&str]) -> bool {
    // `tar -I zstd` runs zstd too.
    let also = args.contains(&"zstd").then_some("zstd");
    if !common::tools::need(&[Some(tool), also].into_iter().flatten().collect::<Vec<_>>()) {
        return false;
    }
    let out = Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(out.status.success(), "{tool} {args:?}: {out:?}");
    true
}

/// Restores `archive` into a data directory that has a save, and checks the outcome: the
/// archived world in `Saves/`, the previous world in `Backups/Restored-*`, the archive in
/// `Archives/Restored/`, no temp directory left.
fn restore_and_check(archive: &Path) {
    let data = data_with_a_save();
    let layout = layout(data.path());
    let name = archive.file_name().unwrap();
    let restored = restore::restore(&layout, &archives(data.path()), archive, LIMITS)
        .unwrap_or_else(|e| panic!("{e}"));
    let loaded = persist::load(&layout.saves).unwrap();
    assert!(loaded.world == archived_world(), "{}", archive.display());
    assert_eq!(restored.manifest, loaded.manifest);

    let backups = restored_backups(data.path());
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(restored.previous.as_deref(), Some(backups[0].as_path()));
    assert!(persist::load(&backups[0]).unwrap().world == current_world());

    let moved = archives(data.path()).join("Restored").join(name);
    assert_eq!(restored.archive_now, moved);
    assert!(
        moved.is_file() && !archive.exists(),
        "the archive moved, not copied"
    );
    assert_eq!(temp_dirs(data.path()), Vec::<PathBuf>::new());
}

#[test]
fn archives_packed_by_the_standard_tools_restore_at_the_root_or_in_one_folder() {
    let src = source();
    let dir = src.path();
    let files = ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"];
    let mut packed = Vec::new();
    if pack(
        dir,
        "tar",
        &["-I", "zstd", "-cf", "folder.tar.zst", "Saves"],
    ) {
        packed.push("folder.tar.zst");
    }
    if pack(dir, "tar", &["-czf", "root.tar.gz", "-C", "Saves", "."]) {
        packed.push("root.tar.gz");
    }
    if pack(dir, "zip", &["-qr", "folder.zip", "Saves"]) {
        packed.push("folder.zip");
    }
    let mut zip_j = vec!["-qj", "root.zip"];
    let paths: Vec<_> = files.iter().map(|f| format!("Saves/{f}")).collect();
    zip_j.extend(paths.iter().map(String::as_str));
    if pack(dir, "zip", &zip_j) {
        packed.push("root.zip");
    }
    let mut tar_root = vec!["-cf", "root.tar", "-C", "Saves"];
    tar_root.extend(files);
    if pack(dir, "tar", &tar_root) {
        packed.push("root.tar");
    }
    if pack(
        dir,
        "tar",
        &["-cf", "folder.tgz", "--format=posix", "-z", "Saves"],
    ) {
        packed.push("folder.tgz");
    }
    if packed.len() < 6 {
        return; // a tool is missing and skipping was allowed (said above)
    }
    for name in packed {
        restore_and_check(&dir.join(name));
    }
}

#[test]
fn archives_written_by_the_format_module_restore_in_every_format() {
    let src = source();
    let saves = src.path().join("Saves");
    let names = ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"];
    let paths: Vec<_> = names.iter().map(|n| saves.join(n)).collect();
    let files: Vec<_> = names
        .iter()
        .zip(&paths)
        .map(|(n, p)| (n.to_string(), p.as_path()))
        .collect();
    for format in Format::ALL {
        let archive = src
            .path()
            .join(format!("2026-12-01-08{}", format.extension()));
        format::write(&archive, format, 3, &files).unwrap();
        restore_and_check(&archive);
    }
}

#[test]
fn with_no_save_in_place_the_archive_becomes_the_save_and_names_never_clash() {
    let src = source();
    let data = tempfile::tempdir().unwrap();
    let layout = layout(data.path());
    let archives = archives(data.path());
    let archive = src.path().join("w.tar");
    let again = src.path().join("again");
    std::fs::create_dir(&again).unwrap();
    if !pack(src.path(), "tar", &["-cf", "w.tar", "Saves"]) {
        return;
    }
    std::fs::copy(&archive, again.join("w.tar")).unwrap();

    let first = restore::restore(&layout, &archives, &archive, LIMITS).unwrap();
    assert_eq!(first.previous, None);
    assert!(persist::load(&layout.saves).unwrap().world == archived_world());
    // The same archive again, at once: the save it replaces and the archive both get a
    // free name rather than overwriting anything.
    let second = restore::restore(&layout, &archives, &again.join("w.tar"), LIMITS).unwrap();
    let restored = archives.join("Restored");
    assert_eq!(second.archive_now, restored.join("w-2.tar"));
    assert!(restored.join("w.tar").is_file());
    let third = restore::restore(&layout, &archives, &second.archive_now, LIMITS).unwrap();
    assert_eq!(
        third.archive_now, second.archive_now,
        "already in Restored/: stays"
    );
    assert_eq!(restored_backups(data.path()).len(), 2);
    for backup in restored_backups(data.path()) {
        assert!(persist::load(&backup).unwrap().world == archived_world());
    }
}

#[test]
fn an_archive_dropped_into_saves_is_restored_and_leaves_saves_first() {
    let src = source();
    if !pack(src.path(), "tar", &["-czf", "dropped.tar.gz", "Saves"]) {
        return;
    }
    let data = data_with_a_save();
    let layout = layout(data.path());
    let archives = archives(data.path());
    assert!(
        restore::restore_dropped(&layout, &archives, LIMITS)
            .unwrap()
            .is_none(),
        "no archive, nothing to do"
    );
    std::fs::rename(
        src.path().join("dropped.tar.gz"),
        layout.saves.join("dropped.tar.gz"),
    )
    .unwrap();

    let restored = restore::restore_dropped(&layout, &archives, LIMITS)
        .unwrap()
        .expect("restored");
    assert!(persist::load(&layout.saves).unwrap().world == archived_world());
    assert!(!layout.saves.join("dropped.tar.gz").exists());
    assert!(archives.join("Restored/dropped.tar.gz").is_file());
    let previous = restored.previous.unwrap();
    assert!(
        !previous.join("dropped.tar.gz").exists(),
        "the archive did not travel into the backup"
    );
    assert!(persist::load(&previous).unwrap().world == current_world());
}

#[test]
fn an_archive_dropped_into_an_otherwise_empty_saves_is_restored() {
    let src = source();
    if !pack(src.path(), "zip", &["-qr", "dropped.zip", "Saves"]) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let layout = layout(data.path());
    std::fs::create_dir(&layout.saves).unwrap();
    std::fs::rename(
        src.path().join("dropped.zip"),
        layout.saves.join("dropped.zip"),
    )
    .unwrap();
    let restored = restore::restore_dropped(&layout, &archives(data.path()), LIMITS)
        .unwrap()
        .unwrap();
    assert_eq!(restored.previous, None);
    assert!(persist::load(&layout.saves).unwrap().world == archived_world());
    assert!(!data.path().join("Backups").exists());
}

#[test]
fn two_archives_dropped_into_saves_are_refused_naming_both() {
    let data = data_with_a_save();
    let layout = layout(data.path());
    std::fs::write(layout.saves.join("a.tar.zst"), b"x").unwrap();
    std::fs::write(layout.saves.join("b.zip"), b"x").unwrap();
    let before = tree(data.path());
    let e = restore::restore_dropped(&layout, &archives(data.path()), LIMITS).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("a.tar.zst") && text.contains("b.zip"),
        "{text}"
    );
    assert_eq!(tree(data.path()), before);
}

/// Restores `bytes` as an archive named `name` into a data directory with a save, expects a
/// refusal naming `entry`, and checks that nothing changed.
fn refused(name: &str, bytes: &[u8], limits: Limits, entry: &str) -> RestoreError {
    let data = data_with_a_save();
    let layout = layout(data.path());
    let archive = data.path().join(name);
    std::fs::write(&archive, bytes).unwrap();
    let before = tree(data.path());
    let e = restore::restore(&layout, &archives(data.path()), &archive, limits).unwrap_err();
    assert_eq!(e.entry.as_deref(), Some(entry), "{e}");
    assert!(
        e.source.is_none(),
        "refused for what it holds, not a disk error: {e}"
    );
    let text = e.to_string();
    assert!(text.contains(entry) && text.contains(name), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");
    assert_eq!(tree(data.path()), before, "nothing changed: {e}");
    assert_eq!(temp_dirs(data.path()), Vec::<PathBuf>::new());
    e
}

/// A tar header with exactly these name bytes (the `tar` crate's `set_path` refuses `..`).
fn header(name: &[u8], kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    h
}

/// A tar with a harmless first file, then `entries` (header, data).
fn tar_with(entries: &[(tar::Header, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let readme = header(b"readme.txt", tar::EntryType::Regular, 6);
    builder.append(&readme, &b"hello\n"[..]).unwrap();
    for (h, data) in entries {
        builder.append(h, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn link(name: &[u8], kind: tar::EntryType, target: &[u8]) -> tar::Header {
    let mut h = header(name, kind, 0);
    h.as_old_mut().linkname[..target.len()].copy_from_slice(target);
    h.set_cksum();
    h
}

#[test]
fn tar_entries_that_escape_or_are_not_plain_files_are_refused_by_name() {
    use tar::EntryType::*;
    let cases: Vec<(tar::Header, &str, &str)> = vec![
        (header(b"/etc/evil", Regular, 4), "/etc/evil", "absolute"),
        (header(b"a/../../evil", Regular, 4), "a/../../evil", ".."),
        (
            link(b"link", Symlink, b"/etc/passwd"),
            "link",
            "symbolic link",
        ),
        (link(b"hard", Link, b"/etc/passwd"), "hard", "hard link"),
        (header(b"tty", Char, 0), "tty", "character device"),
        (header(b"disk", Block, 0), "disk", "block device"),
        (header(b"pipe", Fifo, 0), "pipe", "fifo"),
        (header(b"holes", GNUSparse, 0), "holes", "sparse"),
        (
            header(b"a\\..\\evil", Regular, 4),
            "a\\..\\evil",
            "backslash",
        ),
    ];
    for (h, entry, why) in cases {
        let data: &[u8] = if h.entry_size().unwrap() == 4 {
            b"evil"
        } else {
            b""
        };
        let e = refused("evil.tar", &tar_with(&[(h, data)]), LIMITS, entry);
        assert!(e.reason.contains(why), "{e}");
    }
}

#[test]
fn a_compressed_tar_is_checked_the_same_way() {
    // The zstd crate compresses: no zstd binary is needed.
    let tar = tar_with(&[(link(b"link", tar::EntryType::Symlink, b"../../x"), b"")]);
    let zst = zstd::encode_all(Cursor::new(tar), 3).unwrap();
    refused("evil.tar.zst", &zst, LIMITS, "link");
}

/// A PAX extended header record: "<len> <key>=<value>\n", the length counting itself.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}{body}").len() != len {
        len += 1;
    }
    format!("{len}{body}").into_bytes()
}

#[test]
fn pax_and_gnu_long_name_headers_that_rename_an_entry_are_refused() {
    let record = pax_record("path", "../../evil");
    let pax = header(
        b"PaxHeaders/innocent",
        tar::EntryType::XHeader,
        record.len() as u64,
    );
    let innocent = header(b"innocent", tar::EntryType::Regular, 4);
    let bytes = tar_with(&[(pax, &record), (innocent.clone(), b"evil")]);
    let e = refused("pax.tar", &bytes, LIMITS, "../../evil");
    assert!(e.reason.contains("PAX"), "{e}");

    let long = b"../../evil\0";
    let gnu = header(
        b"././@LongLink",
        tar::EntryType::GNULongName,
        long.len() as u64,
    );
    let bytes = tar_with(&[(gnu, long), (innocent, b"evil")]);
    let e = refused("long.tar", &bytes, LIMITS, "../../evil");
    assert!(e.reason.contains("long-name"), "{e}");

    // A PAX header with harmless keys (GNU tar's --format=posix writes times) is fine: the
    // standard-tools test restores such an archive.
}

#[test]
fn zip_slip_absolute_names_and_zip_symlinks_are_refused_by_name() {
    let options = zip::write::SimpleFileOptions::default();
    for name in ["../evil", "a/../../evil", "/etc/evil"] {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("readme.txt", options).unwrap();
        zip.write_all(b"hello\n").unwrap();
        zip.start_file(name, options).unwrap();
        zip.write_all(b"evil").unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        refused("slip.zip", &bytes, LIMITS, name);
    }
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.add_symlink("link", "/etc/passwd", options).unwrap();
    let bytes = zip.finish().unwrap().into_inner();
    let e = refused("link.zip", &bytes, LIMITS, "link");
    assert!(e.reason.contains("symbolic link"), "{e}");
}

#[test]
fn too_many_entries_or_bytes_are_refused_declared_or_actual() {
    let few = Limits {
        max_bytes: 1 << 20,
        max_entries: 3,
    };
    let dirs: Vec<_> = (0..4)
        .map(|i| header(format!("d{i}/").as_bytes(), tar::EntryType::Directory, 0))
        .collect();
    let entries: Vec<_> = dirs.into_iter().map(|h| (h, &b""[..])).collect();
    let e = refused("many.tar", &tar_with(&entries), few, "d2/");
    assert!(e.reason.contains("3 entries"), "{e}");

    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for i in 0..4 {
        zip.add_directory(format!("d{i}/"), zip::write::SimpleFileOptions::default())
            .unwrap();
    }
    let bytes = zip.finish().unwrap().into_inner();
    let data = data_with_a_save();
    let archive = data.path().join("many.zip");
    std::fs::write(&archive, bytes).unwrap();
    let e =
        restore::restore(&layout(data.path()), &archives(data.path()), &archive, few).unwrap_err();
    assert!(e.reason.contains("4 entries"), "{e}");

    // Declared: a header claiming far more than the limit is refused before any byte.
    let small = Limits {
        max_bytes: 1000,
        max_entries: 64,
    };
    let huge = header(b"huge.bin", tar::EntryType::Regular, 1 << 40);
    let mut bytes = tar_with(&[]);
    bytes.truncate(bytes.len() - 1024); // drop the end-of-archive blocks
    bytes.extend_from_slice(huge.as_bytes());
    let e = refused("huge.tar", &bytes, small, "huge.bin");
    assert!(e.reason.contains("max_restore_bytes"), "{e}");

    // Actual: a zip entry whose declared size lies (stored, 2000 bytes, says 10).
    let bytes = lying_zip(b"liar.bin", &[7u8; 2000], 10);
    let e = refused("liar.zip", &bytes, small, "liar.bin");
    assert!(e.reason.contains("more bytes than it declares"), "{e}");

    // A real save over the limit: the budget is for the whole archive.
    let src = source();
    assert!(pack(
        src.path(),
        "tar",
        &["-cf", "save.tar", "-C", "Saves", "."]
    ));
    let bytes = std::fs::read(src.path().join("save.tar")).unwrap();
    let e = restore_err(&bytes, "save.tar", small);
    assert!(e.reason.contains("max_restore_bytes"), "{e}");
}

fn restore_err(bytes: &[u8], name: &str, limits: Limits) -> RestoreError {
    let data = data_with_a_save();
    let archive = data.path().join(name);
    std::fs::write(&archive, bytes).unwrap();
    let before = tree(data.path());
    let e = restore::restore(
        &layout(data.path()),
        &archives(data.path()),
        &archive,
        limits,
    )
    .unwrap_err();
    assert_eq!(tree(data.path()), before, "{e}");
    assert_eq!(temp_dirs(data.path()), Vec::<PathBuf>::new());
    e
}

/// A stored zip of one file whose local and central headers declare `declared` bytes.
fn lying_zip(name: &[u8], data: &[u8], declared: u32) -> Vec<u8> {
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file(std::str::from_utf8(name).unwrap(), options)
        .unwrap();
    zip.write_all(data).unwrap();
    let mut bytes = zip.finish().unwrap().into_inner();
    let real = (data.len() as u32).to_le_bytes();
    // Local header: uncompressed size at offset 22; central header: at offset 24.
    let local = find(&bytes, b"PK\x03\x04");
    assert_eq!(bytes[local + 22..local + 26], real);
    bytes[local + 22..local + 26].copy_from_slice(&declared.to_le_bytes());
    let central = find(&bytes, b"PK\x01\x02");
    assert_eq!(bytes[central + 24..central + 28], real);
    bytes[central + 24..central + 28].copy_from_slice(&declared.to_le_bytes());
    bytes
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

#[test]
fn a_truncated_archive_and_a_damaged_save_are_refused() {
    let src = source();
    assert!(pack(src.path(), "tar", &["-czf", "save.tar.gz", "Saves"]));
    assert!(pack(src.path(), "zip", &["-qr", "save.zip", "Saves"]));
    for name in ["save.tar.gz", "save.zip"] {
        let bytes = std::fs::read(src.path().join(name)).unwrap();
        let e = restore_err(&bytes[..bytes.len() / 2], name, LIMITS);
        assert!(e.reason.contains("read"), "{e}");
    }

    let items = src.path().join("Saves/items.bin");
    let mut bytes = std::fs::read(&items).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&items, bytes).unwrap();
    assert!(pack(src.path(), "tar", &["-cf", "damaged.tar", "Saves"]));
    let bytes = std::fs::read(src.path().join("damaged.tar")).unwrap();
    let e = restore_err(&bytes, "damaged.tar", LIMITS);
    assert!(
        e.reason.contains("Saves/items.bin") && e.reason.contains("loadable save"),
        "{e}"
    );

    let e = restore_err(b"not an archive", "notes.txt", LIMITS);
    assert!(e.reason.contains("format"), "{e}");
}

#[test]
fn an_extraction_cut_short_by_a_crash_is_deleted_by_recovery_not_put_in_place() {
    // restore unpacks into `<temp>/unpacked/`: even a complete save there is not at the top
    // of a temp directory, so recovery must not take it for a finished save.
    let src = source();
    let data = data_with_a_save();
    let layout = layout(data.path());
    let tmp = layout.create_temp_dir("restore").unwrap();
    let unpacked = tmp.join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    for entry in std::fs::read_dir(src.path().join("Saves")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, unpacked.join(path.file_name().unwrap())).unwrap();
    }
    let before = tree(&layout.saves);
    layout.recover().unwrap();
    assert!(!tmp.exists());
    assert_eq!(tree(&layout.saves), before);
}

#[test]
fn list_shows_backups_and_archives_with_their_counts() {
    let src = source();
    let data = data_with_a_save();
    let layout = layout(data.path());
    save(&layout, &current_world(), "2026-12-03T11:00:00Z"); // a backup in Automatic/
    assert!(pack(src.path(), "tar", &["-czf", "w.tar.gz", "Saves"]));
    let archives = archives(data.path());
    restore::restore(&layout, &archives, &src.path().join("w.tar.gz"), LIMITS).unwrap();
    std::fs::create_dir_all(archives.join("Daily")).unwrap();
    std::fs::write(archives.join("Daily/2026-12-02.tar.zst"), b"garbage").unwrap();
    // Work in progress of a rollup: not listed.
    std::fs::write(archives.join("Daily/.tmp-1-2026-12-03.tar.zst"), b"").unwrap();
    std::fs::create_dir(layout.backups.join(".deleting-2026-12-01-00-00-00")).unwrap();

    let listed = restore::list(data.path(), &layout, &archives, LIMITS).unwrap();
    let summary: Vec<_> = listed
        .iter()
        .map(|l| {
            let items = l.manifest.as_ref().map(|m| m.items).ok();
            (l.kind, l.group.as_str(), items)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (ListedKind::Backup, "Automatic", Some(500)),
            (ListedKind::Backup, "Restored", Some(500)),
            (ListedKind::Archive, "Daily", None),
            (ListedKind::Archive, "Restored", Some(3000)),
        ]
    );
    let table = restore::Table(&listed).to_string();
    assert!(table.contains("Archives/Restored/w.tar.gz"), "{table}");
    assert!(table.contains("unreadable"), "{table}");
    assert!(listed.iter().all(|l| l.bytes > 0));
}

fn shardloop(data: &Path) -> Command {
    let mut cmd = common::binary::shardloop(data, (3_000, 500));
    cmd.arg("--data-dir").arg(data);
    cmd
}

#[test]
fn the_binary_restores_refuses_with_exit_2_and_lists() {
    let src = source();
    assert!(pack(src.path(), "tar", &["-cf", "good.tar", "Saves"]));
    let data = data_with_a_save();
    let evil = data.path().join("evil.tar");
    let symlink = link(b"link", tar::EntryType::Symlink, b"/etc/passwd");
    std::fs::write(&evil, tar_with(&[(symlink, b"")])).unwrap();

    let before = tree(data.path());
    let out = common::deadline::run_within(
        shardloop(data.path()).arg("restore").arg(&evil),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("evil.tar") && stderr.contains("link"),
        "{stderr}"
    );
    let after = tree(data.path());
    assert_eq!(after, before);

    let lock = persist::lock::DataLock::acquire(data.path()).unwrap();
    let out = common::deadline::run_within(
        shardloop(data.path())
            .arg("restore")
            .arg(src.path().join("good.tar")),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("stop the shard first"), "{stderr}");
    drop(lock);

    let out = common::deadline::run_within(
        shardloop(data.path())
            .arg("restore")
            .arg(src.path().join("good.tar")),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains("3000 items"), "{stdout}");
    let layout = layout(data.path());
    assert!(persist::load(&layout.saves).unwrap().world == archived_world());

    let out = common::deadline::run_within(
        shardloop(data.path()).args(["restore", "--list"]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains("Backups/Restored-"), "{stdout}");
    assert!(stdout.contains("Archives/Restored/good.tar"), "{stdout}");
    assert!(
        stdout.contains("3000") && stdout.contains("500"),
        "{stdout}"
    );
}

#[test]
fn a_failure_during_the_moves_puts_everything_back() {
    let src = source();
    if !pack(src.path(), "tar", &["-cf", "w.tar", "Saves"]) {
        return;
    }
    let data = data_with_a_save();
    let layout = layout(data.path());
    let archive = layout.saves.join("w.tar");
    std::fs::rename(src.path().join("w.tar"), &archive).unwrap();
    // `Backups` as a file: the current save cannot move there, after the archive has already
    // moved to Archives/Restored/ and the checked save to a temp directory.
    std::fs::write(data.path().join("Backups"), b"in the way").unwrap();
    let before = tree(data.path());
    let e = restore::restore(&layout, &archives(data.path()), &archive, LIMITS).unwrap_err();
    assert!(e.reason.contains("Backups"), "{e}");
    // The filesystem's error, not the archive's: `Backups` is a file, not a directory.
    let os = e.source.as_ref().and_then(|s| s.raw_os_error());
    assert!(
        matches!(os, Some(libc::EEXIST | libc::ENOTDIR)),
        "{os:?}: {e}"
    );
    assert_eq!(e.left, None, "{e}");
    let after: Vec<_> = tree(data.path())
        .into_iter()
        .filter(|(p, _)| !p.starts_with("Archives"))
        .collect();
    assert_eq!(after, before, "the archive is back in Saves/: {e}");
    assert_eq!(temp_dirs(data.path()), Vec::<PathBuf>::new());
}
