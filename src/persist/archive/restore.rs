//! Restoring a save from an archive, and listing what could be restored.
//!
//! An archive (any of the four formats, made by a rollup or by hand with `tar` or `zip`) is
//! unpacked into a fresh temp directory, checked as a loadable save (manifest, checksums,
//! every record: [`load`](crate::persist::load)), and only then put in place as `Saves/`.
//! The save it replaces moves to `Backups/Restored-<UTC time>/` and the archive to
//! `Archives/Restored/`: nothing is deleted. A restore refused before the moves leaves every
//! file where it was and removes its temp directory.
//!
//! Archives are untrusted input. Extraction never uses the `tar` or `zip` crates' unpack
//! functions: each entry is checked first, and anything that could write outside the temp
//! directory or make something other than a plain file is refused with the entry named —
//! absolute paths, `..`, symbolic and hard links, devices and fifos, sparse files, PAX or
//! GNU long-name headers that replace an entry's name, and more bytes or entries than
//! [`Limits`] allow (declared sizes are checked before writing, actual bytes while copying).
//!
//! Owns extraction and the moves of a restore. Must never write outside its temp directory
//! before the archive has been validated, never create a link, and never delete the
//! operator's save or archive.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use jiff::Timestamp;

use super::format::{self, Format};
use crate::persist::layout::{self, Layout, TEMP_PREFIX, sync_dir};
use crate::persist::load;
use crate::persist::manifest::{self, Manifest};

/// Entries a restored archive may hold (a save is a handful of files; this leaves room for
/// folders and the odd extra file, not for an entry-count bomb).
pub const DEFAULT_MAX_ENTRIES: usize = 256;
/// The folder under the archives directory that restored archives move to.
pub const RESTORED_ARCHIVES: &str = "Restored";
/// Prefix of the backup a restore makes of the save it replaces (under `Backups/`).
pub const RESTORED_BACKUP_PREFIX: &str = "Restored-";
/// Inside the restore's temp directory: a save unpacked here is not at the temp directory's
/// top, so crash recovery sees an unfinished extraction as unfinished and deletes it.
const UNPACKED: &str = "unpacked";
/// Largest PAX header read (they hold a few keys; anything bigger is not a real archive).
const MAX_PAX_BYTES: u64 = 64 * 1024;
/// Largest manifest read when listing an archive.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// How much an archive may unpack to (the configuration's `[archive]` builds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of extracted files, declared or actual.
    pub max_bytes: u64,
    /// Entries of any kind.
    pub max_entries: usize,
}

/// A restore that happened: what moved where.
#[derive(Debug, Clone)]
pub struct Restored {
    /// Where the archive was.
    pub archive: PathBuf,
    /// Where the archive is now (in `Archives/Restored/`).
    pub archive_now: PathBuf,
    /// Where the save it replaced went (`Backups/Restored-<time>/`), if there was one.
    pub previous: Option<PathBuf>,
    /// The save directory, now holding the restored save.
    pub save: PathBuf,
    /// The restored save's manifest.
    pub manifest: Manifest,
}

impl fmt::Display for Restored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.manifest;
        writeln!(
            f,
            "restored the save of {} ({} items, {} mobiles, {} spawners) from {} into {}",
            m.created,
            m.items,
            m.mobiles,
            m.spawners,
            self.archive.display(),
            self.save.display()
        )?;
        match &self.previous {
            Some(previous) => writeln!(f, "the previous save is in {}", previous.display())?,
            None => writeln!(f, "there was no previous save")?,
        }
        write!(f, "the archive is now {}", self.archive_now.display())
    }
}

/// A restore that did not happen: the archive, the entry at fault (if one is), the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreError {
    pub archive: PathBuf,
    /// The archive entry refused, as named in the archive.
    pub entry: Option<String>,
    pub reason: String,
    /// `None`: nothing was changed. Otherwise where things were left, when a failure part-way
    /// through the moves could not put everything back.
    pub left: Option<String>,
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot restore {}: ", self.archive.display())?;
        if let Some(entry) = &self.entry {
            write!(f, "entry `{entry}` ")?;
        }
        write!(f, "{}; ", self.reason)?;
        match &self.left {
            None => write!(f, "nothing was changed (every file is where it was)"),
            Some(left) => write!(f, "{left}"),
        }
    }
}

impl std::error::Error for RestoreError {}

/// Why unpacking or checking failed, before the archive's path is attached.
#[derive(Debug)]
struct Refusal {
    entry: Option<String>,
    reason: String,
}

impl Refusal {
    fn entry(name: &str, reason: impl Into<String>) -> Refusal {
        Refusal {
            entry: Some(name.to_owned()),
            reason: reason.into(),
        }
    }

    fn whole(reason: impl Into<String>) -> Refusal {
        Refusal {
            entry: None,
            reason: reason.into(),
        }
    }

    fn of(self, archive: &Path) -> RestoreError {
        RestoreError {
            archive: archive.to_owned(),
            entry: self.entry,
            reason: self.reason,
            left: None,
        }
    }
}

/// Restores the save in `archive`: unpack, check, then put it in place as `Saves/`, the
/// current save (if any) moving to `Backups/Restored-<time>/` and the archive to
/// `<archives_dir>/Restored/`. The caller holds the data directory's lock.
pub fn restore(
    layout: &Layout,
    archives_dir: &Path,
    archive: &Path,
    limits: Limits,
) -> Result<Restored, RestoreError> {
    let format = archive_format(archive).map_err(|r| r.of(archive))?;
    let tmp = layout
        .create_temp_dir("restore")
        .map_err(|e| Refusal::whole(format!("cannot create a temp directory: {e}")).of(archive))?;
    let (root, manifest) = match unpack_and_check(archive, format, &tmp, limits) {
        Ok(checked) => checked,
        Err(refusal) => {
            // Only our own temp directory is removed; if even that fails, startup recovery
            // deletes it (it has no manifest at its top).
            let _ = fs::remove_dir_all(&tmp);
            return Err(refusal.of(archive));
        }
    };
    let mut moves = Moves::new(layout, archive);
    match moves.run(archives_dir, &root, &tmp) {
        Ok(()) => Ok(Restored {
            archive: archive.to_owned(),
            archive_now: moves.archive_now.unwrap_or_else(|| archive.to_owned()),
            previous: moves.previous,
            save: layout.saves.clone(),
            manifest,
        }),
        Err(reason) => {
            let left = moves.undo().err();
            let _ = fs::remove_dir_all(&tmp);
            Err(RestoreError {
                archive: archive.to_owned(),
                entry: None,
                reason,
                left,
            })
        }
    }
}

/// Startup: restores the archive dropped directly into `Saves/`, if there is one. Several
/// are refused (which one was meant is the operator's call), naming them.
pub fn restore_dropped(
    layout: &Layout,
    archives_dir: &Path,
    limits: Limits,
) -> Result<Option<Restored>, RestoreError> {
    let found = dropped_archives(&layout.saves).map_err(|e| RestoreError {
        archive: layout.saves.clone(),
        entry: None,
        reason: format!("cannot look for archives in it: {e}"),
        left: None,
    })?;
    match found.as_slice() {
        [] => Ok(None),
        [one] => restore(layout, archives_dir, one, limits).map(Some),
        several => Err(RestoreError {
            archive: layout.saves.clone(),
            entry: None,
            reason: format!(
                "it holds {} archives ({}); leave exactly one there to restore it",
                several.len(),
                names(several)
            ),
            left: None,
        }),
    }
}

/// Archive files (by extension) directly inside `saves`, sorted; none if it does not exist.
fn dropped_archives(saves: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = layout::entries(saves)?;
    let mut found = Vec::new();
    for entry in entries {
        let is_archive = Format::from_name(&entry.file_name().to_string_lossy()).is_some();
        if is_archive && entry.file_type()?.is_file() {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

fn names(paths: &[PathBuf]) -> String {
    let names: Vec<_> = paths
        .iter()
        .map(|p| p.file_name().unwrap_or(p.as_os_str()).to_string_lossy())
        .collect();
    names.join(", ")
}

fn archive_format(archive: &Path) -> Result<Format, Refusal> {
    let name = archive.file_name().unwrap_or_default().to_string_lossy();
    let format = Format::from_name(&name).ok_or_else(|| {
        Refusal::whole(
            "its name does not say its format: it must end in .tar.zst, .tar.gz, .tgz, .zip or \
             .tar",
        )
    })?;
    match fs::metadata(archive) {
        Ok(meta) if meta.is_file() => Ok(format),
        Ok(_) => Err(Refusal::whole("it is not a file")),
        Err(e) => Err(Refusal::whole(format!("cannot read it: {e}"))),
    }
}

/// Unpacks into `<tmp>/unpacked/` and loads the save found there in full. Returns the save's
/// directory (the archive's root or its single top folder) and its manifest.
fn unpack_and_check(
    archive: &Path,
    format: Format,
    tmp: &Path,
    limits: Limits,
) -> Result<(PathBuf, Manifest), Refusal> {
    let dest = tmp.join(UNPACKED);
    fs::create_dir(&dest).map_err(|e| cannot_unpack(&dest, &e))?;
    let file = File::open(archive).map_err(|e| Refusal::whole(format!("cannot read it: {e}")))?;
    let mut unpacker = Unpacker::new(&dest, limits);
    match format {
        Format::Zip => unpack_zip(file, &mut unpacker)?,
        _ => {
            let stream = format::decoder(BufReader::new(file), format).map_err(unreadable)?;
            unpack_tar(stream, &mut unpacker)?;
        }
    }
    sync_tree(&dest).map_err(|e| cannot_unpack(&dest, &e))?;
    let root = save_root(&dest)?;
    let loaded = load::load(&root).map_err(|e| {
        let file = e.file.strip_prefix(&dest).unwrap_or(&e.file);
        Refusal::whole(format!(
            "it does not hold a loadable save: {}: {}",
            file.display(),
            e.reason
        ))
    })?;
    Ok((root, loaded.manifest))
}

fn unreadable(e: impl fmt::Display) -> Refusal {
    Refusal::whole(format!("it is not a readable archive: {e}"))
}

fn cannot_unpack(path: &Path, e: &io::Error) -> Refusal {
    Refusal::whole(format!("cannot unpack into {}: {e}", path.display()))
}

/// The save's directory: the archive's root if `manifest.toml` is there, else its single
/// top folder (how `tar -cf x.tar Saves` packs it).
fn save_root(dest: &Path) -> Result<PathBuf, Refusal> {
    if dest.join(manifest::FILE_NAME).is_file() {
        return Ok(dest.to_owned());
    }
    let mut top = fs::read_dir(dest)
        .and_then(|entries| {
            entries
                .map(|e| e.map(|e| e.path()))
                .collect::<io::Result<Vec<_>>>()
        })
        .map_err(|e| cannot_unpack(dest, &e))?;
    top.sort();
    match top.as_slice() {
        [folder] if folder.is_dir() => Ok(folder.clone()),
        [] => Err(Refusal::whole("it is empty")),
        _ => Err(Refusal::whole(format!(
            "it does not hold a save: no {} at its root, and more than one top-level entry \
             ({})",
            manifest::FILE_NAME,
            names(&top)
        ))),
    }
}

/// Writes checked entries under one directory, within the limits.
struct Unpacker<'a> {
    dest: &'a Path,
    limits: Limits,
    entries: usize,
    bytes: u64,
}

impl<'a> Unpacker<'a> {
    fn new(dest: &'a Path, limits: Limits) -> Unpacker<'a> {
        Unpacker {
            dest,
            limits,
            entries: 0,
            bytes: 0,
        }
    }

    /// Counts one more entry of any kind (links and headers too: they cost work to read).
    fn count(&mut self, name: &str) -> Result<(), Refusal> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(Refusal::entry(
                name,
                format!(
                    "is past the limit of {} entries an archive may hold",
                    self.limits.max_entries
                ),
            ));
        }
        Ok(())
    }

    fn dir(&mut self, name: &str) -> Result<(), Refusal> {
        let path = self.dest.join(safe_path(name)?);
        fs::create_dir_all(&path).map_err(|e| Refusal::entry(name, format!("cannot create: {e}")))
    }

    /// Writes a regular file: the declared size is checked before anything is written, and
    /// the bytes actually read are counted (a zip entry's declared size can lie).
    fn file(&mut self, name: &str, declared: u64, data: &mut dyn Read) -> Result<(), Refusal> {
        let path = self.dest.join(safe_path(name)?);
        let left = self.limits.max_bytes - self.bytes;
        if declared > left {
            return Err(self.too_big(name, &format!("declares {declared} bytes")));
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| Refusal::entry(name, format!("cannot create its folder: {e}")))?;
        }
        let mut out = File::create_new(&path).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Refusal::entry(name, "appears twice in the archive"),
            _ => Refusal::entry(name, format!("cannot create: {e}")),
        })?;
        let copied = io::copy(&mut data.take(left + 1), &mut out)
            .map_err(|e| Refusal::entry(name, format!("cannot be read: {e}")))?;
        if copied > left {
            return Err(self.too_big(name, "holds more bytes than it declares"));
        }
        self.bytes += copied;
        out.sync_all()
            .map_err(|e| Refusal::entry(name, format!("cannot be written: {e}")))
    }

    fn too_big(&self, name: &str, what: &str) -> Refusal {
        Refusal::entry(
            name,
            format!(
                "{what}: the archive would unpack to more than archive.max_restore_bytes = {} \
                 bytes",
                self.limits.max_bytes
            ),
        )
    }
}

/// The entry's path relative to the unpack directory, if it stays inside it: only plain
/// names (and `.`), never `..`, a root or a prefix, and no backslash (a separator to the
/// tools of another system, so `a\..\..\x` could escape there).
fn safe_path(name: &str) -> Result<PathBuf, Refusal> {
    if name.contains('\\') {
        return Err(Refusal::entry(name, "has a backslash in its path"));
    }
    let mut rel = PathBuf::new();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(Refusal::entry(
                    name,
                    "has a `..` component (path traversal)",
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(Refusal::entry(name, "has an absolute path"));
            }
        }
    }
    Ok(rel)
}

/// Unpacks a tar stream, entry by entry, in raw mode: the `tar` crate would otherwise apply
/// GNU long-name and PAX headers to the next entry's name itself, reading them into memory
/// whatever their size. Here they are seen, bounded and refused if they rename anything.
fn unpack_tar(stream: Box<dyn Read + '_>, unpacker: &mut Unpacker<'_>) -> Result<(), Refusal> {
    let mut tar = tar::Archive::new(stream);
    let entries = tar.entries().map_err(unreadable)?.raw(true);
    for entry in entries {
        let mut entry = entry.map_err(unreadable)?;
        let name = String::from_utf8_lossy(&entry.header().path_bytes()).into_owned();
        unpacker.count(&name)?;
        // The bytes that follow the header in the archive (`size()` would read a sparse
        // file's expanded size from fields other entry types do not have).
        let declared = entry
            .header()
            .entry_size()
            .map_err(|e| Refusal::entry(&name, format!("has a damaged header: {e}")))?;
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                unpacker.file(&name, declared, &mut entry)?;
            }
            tar::EntryType::Directory if declared == 0 => unpacker.dir(&name)?,
            tar::EntryType::Directory => {
                return Err(Refusal::entry(
                    &name,
                    "is a directory that claims to hold data",
                ));
            }
            tar::EntryType::XHeader | tar::EntryType::XGlobalHeader => {
                check_pax(&name, declared, &mut entry)?;
            }
            kind => return Err(refuse_kind(&name, kind, &mut entry)),
        }
    }
    Ok(())
}

/// A PAX header may carry timestamps and the like; one that sets a path or link (renaming
/// the entry that follows, so that what was checked is not what would be written) or a
/// size (so that the entry would be read differently from how its header reads) is refused.
fn check_pax(name: &str, declared: u64, data: &mut dyn Read) -> Result<(), Refusal> {
    if declared > MAX_PAX_BYTES {
        return Err(Refusal::entry(
            name,
            format!("is a PAX header of {declared} bytes (more than {MAX_PAX_BYTES})"),
        ));
    }
    let mut bytes = Vec::new();
    data.take(declared)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    for extension in tar::PaxExtensions::new(&bytes) {
        let extension =
            extension.map_err(|e| Refusal::entry(name, format!("is a damaged PAX header: {e}")))?;
        let value = String::from_utf8_lossy(extension.value_bytes());
        match extension.key_bytes() {
            b"path" | b"linkpath" => {
                return Err(Refusal::entry(
                    &value,
                    format!(
                        "is named by a PAX header ({name}) that replaces the name in the \
                         entry's own header"
                    ),
                ));
            }
            b"size" => {
                return Err(Refusal::entry(
                    name,
                    format!("is a PAX header that overrides the next entry's size ({value})"),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The refusal of an entry that is neither a regular file nor a directory.
fn refuse_kind(name: &str, kind: tar::EntryType, entry: &mut tar::Entry<'_, impl Read>) -> Refusal {
    let target = || {
        let bytes = entry.header().link_name_bytes().unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let what = match kind {
        tar::EntryType::Symlink => format!("is a symbolic link (to `{}`)", target()),
        tar::EntryType::Link => format!("is a hard link (to `{}`)", target()),
        tar::EntryType::Char => "is a character device".to_owned(),
        tar::EntryType::Block => "is a block device".to_owned(),
        tar::EntryType::Fifo => "is a fifo".to_owned(),
        tar::EntryType::GNUSparse => "is a GNU sparse file".to_owned(),
        tar::EntryType::GNULongName | tar::EntryType::GNULongLink => {
            let mut long = Vec::new();
            let _ = entry.take(4096).read_to_end(&mut long);
            let long = String::from_utf8_lossy(&long);
            let long = long.trim_end_matches('\0');
            return Refusal::entry(
                long,
                format!(
                    "is named by a GNU long-name header ({name}) that replaces the name in the \
                     entry's own header"
                ),
            );
        }
        other => format!("has the tar entry type {:?}", other.as_byte() as char),
    };
    Refusal::entry(
        name,
        format!("{what}: only regular files and directories are restored"),
    )
}

/// Unpacks a zip archive, checking each entry's name and kind first.
fn unpack_zip(file: File, unpacker: &mut Unpacker<'_>) -> Result<(), Refusal> {
    let mut zip = zip::ZipArchive::new(BufReader::new(file)).map_err(unreadable)?;
    if zip.len() > unpacker.limits.max_entries {
        return Err(Refusal::whole(format!(
            "it holds {} entries; an archive may hold at most {}",
            zip.len(),
            unpacker.limits.max_entries
        )));
    }
    for index in 0..zip.len() {
        let listed = zip.name_for_index(index).unwrap_or("?").to_owned();
        let mut entry = zip
            .by_index(index)
            .map_err(|e| Refusal::entry(&listed, format!("cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        unpacker.count(&name)?;
        safe_path(&name)?;
        // Belt and braces: the zip crate's own view of whether the name stays inside.
        if entry.enclosed_name().is_none() {
            return Err(Refusal::entry(
                &name,
                "escapes the folder it is unpacked into",
            ));
        }
        match zip_kind(entry.unix_mode()) {
            ZipKind::Dir => unpacker.dir(&name)?,
            ZipKind::File if entry.is_dir() => unpacker.dir(&name)?,
            ZipKind::File => {
                let declared = entry.size();
                unpacker.file(&name, declared, &mut entry)?;
            }
            ZipKind::Other(what) => {
                return Err(Refusal::entry(
                    &name,
                    format!("is a {what}: only regular files and directories are restored"),
                ));
            }
        }
    }
    Ok(())
}

enum ZipKind {
    File,
    Dir,
    Other(&'static str),
}

/// What a zip entry's Unix mode says it is (no mode: a file, or a folder by its name).
fn zip_kind(mode: Option<u32>) -> ZipKind {
    const S_IFMT: u32 = 0o170_000;
    match mode.map(|m| m & S_IFMT) {
        None | Some(0) | Some(0o100_000) => ZipKind::File,
        Some(0o040_000) => ZipKind::Dir,
        Some(0o120_000) => ZipKind::Other("symbolic link"),
        Some(0o020_000) => ZipKind::Other("character device"),
        Some(0o060_000) => ZipKind::Other("block device"),
        Some(0o010_000) => ZipKind::Other("fifo"),
        Some(0o140_000) => ZipKind::Other("socket"),
        Some(_) => ZipKind::Other("file of unknown type"),
    }
}

/// fsyncs every directory under `dir` (files were synced as written), so that the save is
/// durable before it is renamed into place.
fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    sync_dir(dir)
}

/// The moves of a restore, recorded as they happen so that a failure part-way can put
/// everything back.
///
/// The order, and why (a crash may stop it after any step; startup's `Layout::recover` then
/// runs before anything loads):
///
/// 1. The archive moves to `Archives/Restored/`. First, because it may be inside `Saves/`,
///    which is about to move whole: it must not travel into a backup (that a rollup might
///    archive and retention later delete). A crash here leaves `Saves/` as it was (without
///    the archive) and the unfinished extraction, which recovery deletes.
/// 2. The checked save moves from inside the restore's temp directory to a top-level temp
///    directory: until now it was not at a temp directory's top, so recovery deleted it as
///    unfinished; from now on recovery sees a complete save and never deletes it (if `Saves/`
///    still holds an older save, recovery files this one under `Backups/Automatic/`, if a
///    newer one, it swaps this one in: both leave a loadable save).
/// 3. `Saves/` moves to `Backups/Restored-<time>/` (or, holding nothing now that the
///    archive left, is removed as an empty directory). A crash here leaves no `Saves/`, and
///    recovery puts the complete temp save from step 2 in place: the restore completes.
/// 4. The temp save is renamed to `Saves/`.
///
/// Not `renameat2(RENAME_EXCHANGE)` as a save's swap does: the old save would come out under
/// a temp name, and recovery, ordering saves by creation time, would swap an old save that
/// is newer than the restored one straight back in.
struct Moves<'a> {
    layout: &'a Layout,
    archive: &'a Path,
    archive_now: Option<PathBuf>,
    staged: Option<PathBuf>,
    /// `Saves/` was an empty directory (after the archive left it) and was removed.
    saves_removed: bool,
    previous: Option<PathBuf>,
    in_place: bool,
}

impl<'a> Moves<'a> {
    fn new(layout: &'a Layout, archive: &'a Path) -> Moves<'a> {
        Moves {
            layout,
            archive,
            archive_now: None,
            staged: None,
            saves_removed: false,
            previous: None,
            in_place: false,
        }
    }

    /// Steps 1–4 above. The error says which step failed; [`undo`](Self::undo) reverses
    /// what was done.
    fn run(&mut self, archives_dir: &Path, root: &Path, tmp: &Path) -> Result<(), String> {
        self.move_archive(&archives_dir.join(RESTORED_ARCHIVES))?;
        self.stage(root)?;
        // The extraction's leftovers (empty folders); recovery removes them if this fails.
        let _ = fs::remove_dir_all(tmp);
        self.move_previous()?;
        let staged = self.staged.as_ref().expect("staged in step 2");
        let saves = &self.layout.saves;
        fs::rename(staged, saves).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                staged.display(),
                saves.display()
            )
        })?;
        self.in_place = true;
        sync_dir(self.layout.root())
            .map_err(|e| format!("cannot sync {}: {e}", self.layout.root().display()))
    }

    fn move_archive(&mut self, restored: &Path) -> Result<(), String> {
        fs::create_dir_all(restored)
            .map_err(|e| format!("cannot create {}: {e}", restored.display()))?;
        let name = self.archive.file_name().unwrap_or_default();
        if same_dir(self.archive.parent(), restored) {
            // Restoring an archive restored before: it is where it belongs.
            self.archive_now = Some(self.archive.to_owned());
            return Ok(());
        }
        let target = free_archive_name(restored, name);
        move_file(self.archive, &target)?;
        self.archive_now = Some(target);
        Ok(())
    }

    fn stage(&mut self, root: &Path) -> Result<(), String> {
        let staged = self
            .layout
            .create_temp_dir("restored")
            .and_then(|dir| fs::remove_dir(&dir).map(|()| dir))
            .map_err(|e| format!("cannot create a temp directory: {e}"))?;
        fs::rename(root, &staged).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                root.display(),
                staged.display()
            )
        })?;
        self.staged = Some(staged);
        sync_dir(self.layout.root())
            .map_err(|e| format!("cannot sync {}: {e}", self.layout.root().display()))
    }

    /// `Saves/` to `Backups/Restored-<time>/`, whatever it holds (it is the operator's, so it
    /// is kept even if it is not a loadable save); removed only when it is an empty directory.
    fn move_previous(&mut self) -> Result<(), String> {
        let saves = &self.layout.saves;
        let empty = match fs::read_dir(saves) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("cannot read {}: {e}", saves.display())),
            Ok(mut entries) => entries.next().is_none(),
        };
        if empty {
            fs::remove_dir(saves)
                .map_err(|e| format!("cannot remove the empty {}: {e}", saves.display()))?;
            self.saves_removed = true;
            return Ok(());
        }
        let backups = restored_backups_dir(self.layout);
        fs::create_dir_all(&backups)
            .map_err(|e| format!("cannot create {}: {e}", backups.display()))?;
        let target = free_backup_name(&backups, Timestamp::now());
        fs::rename(saves, &target).map_err(|e| {
            format!(
                "cannot move the current save {} to {}: {e}",
                saves.display(),
                target.display()
            )
        })?;
        self.previous = Some(target);
        sync_dir(&backups).map_err(|e| format!("cannot sync {}: {e}", backups.display()))
    }

    /// Puts back what [`run`](Self::run) moved, newest first. The error says where things
    /// were left (for the operator) if some of it could not be put back.
    fn undo(&self) -> Result<(), String> {
        let saves = &self.layout.saves;
        let mut stuck = Vec::new();
        if self.in_place {
            // Only the final sync failed: the restore is done, the moves are not undone.
            return Err(format!(
                "the restored save is in {}, the previous one in {}, the archive in {}",
                saves.display(),
                self.previous
                    .as_ref()
                    .map_or("(none)".into(), |p| p.display().to_string()),
                self.archive_now
                    .as_ref()
                    .map_or("(unknown)".into(), |p| p.display().to_string())
            ));
        }
        if let Some(previous) = &self.previous
            && let Err(e) = fs::rename(previous, saves)
        {
            stuck.push(format!(
                "the previous save is in {} ({e})",
                previous.display()
            ));
        }
        if self.saves_removed
            && let Err(e) = fs::create_dir(saves)
        {
            stuck.push(format!("{} was not recreated ({e})", saves.display()));
        }
        if let Some(staged) = &self.staged {
            if stuck.is_empty() {
                // Our own copy of the restored save; the archive still holds it.
                let _ = fs::remove_dir_all(staged);
            } else {
                stuck.push(format!(
                    "the restored save is complete in {} (the next start puts it in place)",
                    staged.display()
                ));
            }
        }
        if let Some(now) = &self.archive_now
            && now != self.archive
            && let Err(e) = move_file(now, self.archive)
        {
            stuck.push(format!("the archive is in {} ({e})", now.display()));
        }
        let _ = sync_dir(self.layout.root());
        match stuck.is_empty() {
            true => Ok(()),
            false => Err(format!("nothing was deleted, but {}", stuck.join("; "))),
        }
    }
}

/// `Backups/`, where `Restored-<time>/` backups go (next to `Backups/Automatic/`).
fn restored_backups_dir(layout: &Layout) -> PathBuf {
    layout
        .backups
        .parent()
        .map_or_else(|| layout.backups.clone(), Path::to_path_buf)
}

fn same_dir(a: Option<&Path>, b: &Path) -> bool {
    let a = a
        .filter(|a| !a.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `Restored-<UTC yyyy-MM-dd-HH-mm-ss>`, with `-2`, `-3`… if taken.
fn free_backup_name(backups: &Path, now: Timestamp) -> PathBuf {
    let base = format!(
        "{RESTORED_BACKUP_PREFIX}{}",
        now.strftime(layout::BACKUP_TIME_FORMAT)
    );
    free_name(backups, &base, "")
}

/// The archive's own file name, with `-2`, `-3`… before its extension if taken.
fn free_archive_name(dir: &Path, name: &OsStr) -> PathBuf {
    let name = name.to_string_lossy();
    let stem = Format::from_name(&name).map_or(&*name, |f| f.stem(&name));
    free_name(dir, stem, &name[stem.len()..])
}

fn free_name(dir: &Path, stem: &str, extension: &str) -> PathBuf {
    let mut path = dir.join(format!("{stem}{extension}"));
    let mut n = 1;
    while fs::symlink_metadata(&path).is_ok() {
        n += 1;
        path = dir.join(format!("{stem}-{n}{extension}"));
    }
    path
}

/// Moves a file: a rename, or across filesystems (an archive named on the command line may
/// be anywhere) a copy that is synced and in place before the original is removed.
fn move_file(from: &Path, to: &Path) -> Result<(), String> {
    let failed = |e: io::Error| format!("cannot move {} to {}: {e}", from.display(), to.display());
    match fs::rename(from, to) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_then_remove(from, to).map_err(failed)?
        }
        Err(e) => return Err(failed(e)),
    }
    for dir in [from.parent(), to.parent()].into_iter().flatten() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        sync_dir(dir).map_err(failed)?;
    }
    Ok(())
}

fn copy_then_remove(from: &Path, to: &Path) -> io::Result<()> {
    // A hidden temp name: never listed, and never mistaken for the archive if this stops
    // half-way (the original is still in place then).
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let partial = to.with_file_name(format!(
        "{TEMP_PREFIX}restore-{}-{name}",
        std::process::id()
    ));
    let copied = (|| {
        let mut out = File::create_new(&partial)?;
        io::copy(&mut File::open(from)?, &mut out)?;
        out.sync_all()?;
        fs::rename(&partial, to)
    })();
    if let Err(e) = copied {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    fs::remove_file(from)
}

/// A backup or archive that `restore --list` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub kind: ListedKind,
    /// `Automatic` or `Restored` for backups; `Hourly`, `Daily`, `Monthly` or `Restored`
    /// for archives.
    pub group: String,
    pub path: PathBuf,
    /// `path` relative to the data directory, for display.
    pub name: String,
    /// Bytes on disk (every file of a backup).
    pub bytes: u64,
    /// Its manifest, or why it cannot be read.
    pub manifest: Result<Manifest, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ListedKind {
    Backup,
    Archive,
}

/// Every backup (`Backups/Automatic/*`, `Backups/Restored-*`) and archive
/// (`<archives_dir>/{Hourly,Daily,Monthly,Restored}/*`), with the counts in its manifest.
/// Reads only: archives are not unpacked, only their `manifest.toml` entry is read.
pub fn list(data_dir: &Path, layout: &Layout, archives_dir: &Path) -> io::Result<Vec<Listed>> {
    let mut listed = Vec::new();
    for dir in sorted_entries(&layout.backups, |p| p.is_dir())? {
        listed.push(backup(data_dir, "Automatic", dir));
    }
    let restored = sorted_entries(&restored_backups_dir(layout), |p| {
        p.is_dir() && file_name(p).starts_with(RESTORED_BACKUP_PREFIX)
    })?;
    for dir in restored {
        listed.push(backup(data_dir, "Restored", dir));
    }
    for group in ["Hourly", "Daily", "Monthly", RESTORED_ARCHIVES] {
        let files = sorted_entries(&archives_dir.join(group), |p| {
            p.is_file() && Format::from_name(&file_name(p)).is_some()
        })?;
        for path in files {
            listed.push(archive(data_dir, group, path));
        }
    }
    Ok(listed)
}

fn backup(data_dir: &Path, group: &str, path: PathBuf) -> Listed {
    Listed {
        kind: ListedKind::Backup,
        group: group.to_owned(),
        name: relative_name(data_dir, &path),
        bytes: tree_bytes(&path),
        manifest: Manifest::read(&path),
        path,
    }
}

fn archive(data_dir: &Path, group: &str, path: PathBuf) -> Listed {
    let format = Format::from_name(&file_name(&path)).expect("listed by extension");
    Listed {
        kind: ListedKind::Archive,
        group: group.to_owned(),
        name: relative_name(data_dir, &path),
        bytes: fs::metadata(&path).map_or(0, |m| m.len()),
        manifest: archive_manifest(&path, format)
            .and_then(|text| Manifest::parse(&text).map_err(|e| format!("manifest.toml: {e}"))),
        path,
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn relative_name(data_dir: &Path, path: &Path) -> String {
    path.strip_prefix(data_dir)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The entries of `dir` that `keep` accepts, sorted; none if `dir` does not exist. Hidden
/// entries are work in progress (`.tmp-*` archives being written, `.deleting-*` backups) and
/// are never listed.
fn sorted_entries(dir: &Path, keep: impl Fn(&Path) -> bool) -> io::Result<Vec<PathBuf>> {
    let entries = layout::entries(dir)?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.path();
        if !file_name(&path).starts_with('.') && keep(&path) {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Bytes of every file under `dir` (links are not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// The text of the archive's `manifest.toml`, at its root or inside one top folder.
fn archive_manifest(path: &Path, format: Format) -> Result<String, String> {
    let file = BufReader::new(File::open(path).map_err(|e| format!("cannot read it: {e}"))?);
    let found = match format {
        Format::Zip => zip_manifest(file),
        _ => tar_manifest(file, format),
    };
    found
        .map_err(|e| format!("not a readable archive: {e}"))?
        .ok_or_else(|| format!("no {} at its root or in a top folder", manifest::FILE_NAME))
}

/// `manifest.toml` or `<folder>/manifest.toml`.
fn is_manifest_name(name: &[u8]) -> bool {
    let path = Path::new(OsStr::from_bytes(name));
    let parts: Vec<_> = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    match parts.as_slice() {
        [Component::Normal(file)] | [Component::Normal(_), Component::Normal(file)] => {
            *file == manifest::FILE_NAME
        }
        _ => false,
    }
}

fn tar_manifest(file: BufReader<File>, format: Format) -> io::Result<Option<String>> {
    let mut tar = tar::Archive::new(format::decoder(file, format)?);
    for entry in tar.entries()? {
        let entry = entry?;
        let regular = entry.header().entry_type().is_file();
        if regular && is_manifest_name(&entry.path_bytes()) {
            return read_manifest(entry).map(Some);
        }
    }
    Ok(None)
}

fn zip_manifest(file: BufReader<File>) -> io::Result<Option<String>> {
    let mut zip = zip::ZipArchive::new(file).map_err(io::Error::other)?;
    let index = (0..zip.len()).find(|&i| {
        zip.name_for_index(i)
            .is_some_and(|n| is_manifest_name(n.as_bytes()))
    });
    match index {
        None => Ok(None),
        Some(i) => read_manifest(zip.by_index(i).map_err(io::Error::other)?).map(Some),
    }
}

fn read_manifest(entry: impl Read) -> io::Result<String> {
    let mut text = String::new();
    entry.take(MAX_MANIFEST_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// The `restore --list` table.
pub struct Table<'a>(pub &'a [Listed]);

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no backups or archives");
        }
        let width = self
            .0
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(0)
            .max(4);
        writeln!(
            f,
            "{:<7}  {:<9}  {:<width$}  {:>10}  {:>8}  {:>8}  {:>8}  CREATED (UTC)",
            "KIND", "GROUP", "PATH", "SIZE", "ITEMS", "MOBILES", "SPAWNERS"
        )?;
        let mut groups: BTreeMap<ListedKind, usize> = BTreeMap::new();
        for listed in self.0 {
            *groups.entry(listed.kind).or_default() += 1;
            let kind = match listed.kind {
                ListedKind::Backup => "backup",
                ListedKind::Archive => "archive",
            };
            write!(
                f,
                "{kind:<7}  {:<9}  {:<width$}  {:>10}  ",
                listed.group,
                listed.name,
                human_bytes(listed.bytes)
            )?;
            match &listed.manifest {
                Ok(m) => writeln!(
                    f,
                    "{:>8}  {:>8}  {:>8}  {}",
                    m.items,
                    m.mobiles,
                    m.spawners,
                    m.created.strftime("%Y-%m-%d %H:%M:%S")
                )?,
                Err(why) => writeln!(f, "unreadable: {why}")?,
            }
        }
        write!(
            f,
            "{} backups, {} archives",
            groups.get(&ListedKind::Backup).unwrap_or(&0),
            groups.get(&ListedKind::Archive).unwrap_or(&0)
        )
    }
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_safe() {
        for good in ["manifest.toml", "./Saves/items.bin", "Saves/", "a/./b"] {
            assert!(safe_path(good).is_ok(), "{good}");
        }
        for bad in ["/etc/passwd", "../x", "a/../../x", "a\\..\\x", "a/.."] {
            let refusal = safe_path(bad).unwrap_err();
            assert_eq!(refusal.entry.as_deref(), Some(bad));
        }
    }

    #[test]
    fn manifest_names_at_the_root_or_one_folder_down() {
        assert!(is_manifest_name(b"manifest.toml"));
        assert!(is_manifest_name(b"./Saves/manifest.toml"));
        assert!(!is_manifest_name(b"a/b/manifest.toml"));
        assert!(!is_manifest_name(b"../manifest.toml"));
        assert!(!is_manifest_name(b"items.bin"));
    }

    #[test]
    fn free_names_get_a_number_before_the_extension() {
        let dir = tempfile::tempdir().unwrap();
        let first = free_archive_name(dir.path(), OsStr::new("w.tar.zst"));
        assert_eq!(first, dir.path().join("w.tar.zst"));
        fs::write(&first, "").unwrap();
        let second = free_archive_name(dir.path(), OsStr::new("w.tar.zst"));
        assert_eq!(second, dir.path().join("w-2.tar.zst"));
        let now: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let backup = free_backup_name(dir.path(), now);
        assert_eq!(backup, dir.path().join("Restored-2026-12-03-10-00-00"));
    }

    #[test]
    fn sizes_read_like_ls_h() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
