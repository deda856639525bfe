//! Reading an untrusted archive within [`Limits`]: the one way every reader of an archive
//! (restore, `restore --list`, the startup drop-in, a rollup checking an archive it finds)
//! opens one, so that a hostile file costs at most the limits in memory, disk and CPU.
//!
//! - tar streams are read in raw mode (a GNU long-name or PAX header is an entry like any
//!   other, its body never applied to the next entry's name nor read whole into memory), and
//!   the decompressed stream is capped: reading past [`Limits::stream_bytes`] fails, so a
//!   decompression bomb stops at the limit, never after;
//! - zstd frames may not ask for a window above [`ZSTD_WINDOW_LOG_MAX`] (the decoder would
//!   allocate it);
//! - a zip's end-of-central-directory record (and its zip64 record) is read and checked here,
//!   and the central directory walked, *before* the `zip` crate parses it: that crate sizes its
//!   table from the entry count the record claims;
//! - zip entries' decompressed bytes are counted against the same byte limit.
//!
//! Owns the limits and these bounded openers. Must never write anything, and never decide
//! what an entry may be (that is `extract`'s job for a restore).

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::extension::Format;

/// Entries an archive may hold (a save is a handful of files; this leaves room for folders
/// and the odd extra file, not for an entry-count bomb).
pub const DEFAULT_MAX_ENTRIES: usize = 256;
/// Default `archive.max_restore_bytes`: 384 MiB, about 64 times a save of the default world
/// (5.9 MB: 190,728 items, 33,158 mobiles). Room for a world to grow well past the default,
/// while a bomb costs at most this much disk and decompression.
pub const DEFAULT_MAX_RESTORE_BYTES: u64 = 384 << 20;
/// Largest `manifest.toml` read from an archive (a real one is about 600 bytes).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;
/// Largest zstd window accepted, as a power of two (16 MiB). Our archives use 2 MiB (level
/// 3) to 8 MiB (level 19); `zstd --ultra -22` or `--long` archives need more and are refused.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;
/// Bytes of central directory allowed per entry: its fixed 46 bytes and a name, extra fields
/// and comment of ordinary size (the format allows 192 KiB per entry).
const ZIP_DIRECTORY_BYTES_PER_ENTRY: u64 = 1024;
/// A tar entry's cost beyond its data: its 512-byte header and up to 511 bytes of padding.
const TAR_ENTRY_OVERHEAD: u64 = 1024;

/// How much an untrusted archive may hold (the configuration's `[archive]` builds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of extracted files, declared or actual (`archive.max_restore_bytes`).
    pub max_bytes: u64,
    /// Entries of any kind (tar headers of every type count).
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: DEFAULT_MAX_RESTORE_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

impl Limits {
    /// The most a tar stream within these limits decompresses to: the files' bytes, a header
    /// and padding per entry, and the two end blocks.
    pub fn stream_bytes(&self) -> u64 {
        let entries = (self.max_entries as u64).saturating_add(2);
        self.max_bytes
            .saturating_add(entries.saturating_mul(TAR_ENTRY_OVERHEAD))
    }
}

/// Why a bounded read stopped at a limit (inside an `io::Error` of kind `InvalidData`, so it
/// crosses the `tar` and `zip` crates; [`over_limit`] finds it again).
#[derive(Debug)]
pub struct OverLimit(pub String);

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverLimit {}

/// The limit an error reports, if it is a limit being hit.
pub fn over_limit(e: &io::Error) -> Option<&OverLimit> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<OverLimit>())
}

fn limit_error(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, OverLimit(message))
}

/// A reader that fails once more than `cap` bytes have passed through it.
pub struct Capped<R> {
    inner: R,
    left: u64,
    cap: u64,
    what: &'static str,
}

impl<R: Read> Capped<R> {
    /// A reader of `inner` that fails past `cap` bytes, naming `what` it read (`"tar stream"`)
    /// and the cap in the error.
    pub fn new(inner: R, cap: u64, what: &'static str) -> Capped<R> {
        Capped::sharing(inner, cap, cap, what)
    }

    /// A reader that may pass `left` bytes, what remains of a limit of `cap` shared with the
    /// readers before it (the error names `cap`, the limit the operator set).
    pub fn sharing(inner: R, left: u64, cap: u64, what: &'static str) -> Capped<R> {
        Capped {
            inner,
            left,
            cap,
            what,
        }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // One byte past the cap is asked for, so that reaching it exactly is not an error.
        let want = buf
            .len()
            .min(self.left.saturating_add(1).min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            return Err(limit_error(format!(
                "its {} decompresses to more than {} bytes (archive.max_restore_bytes and the \
                 entry limit allow no more)",
                self.what, self.cap
            )));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The decompressed tar stream of a `.tar*` archive, capped at `limits.stream_bytes()`.
pub fn tar_stream<'a, R: io::BufRead + 'a>(
    input: R,
    format: Format,
    limits: Limits,
) -> io::Result<Capped<Box<dyn Read + 'a>>> {
    let stream: Box<dyn Read + 'a> = match format {
        Format::TarZst => {
            let mut decoder = zstd::Decoder::with_buffer(input)?;
            decoder.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
            Box::new(decoder)
        }
        Format::TarGz => Box::new(flate2::bufread::GzDecoder::new(input)),
        Format::Tar => Box::new(input),
        Format::Zip => return Err(io::Error::other("a zip archive has no tar stream")),
    };
    Ok(Capped::new(stream, limits.stream_bytes(), "tar stream"))
}

/// What an entry is, by its own header (raw: never by a header before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else: links, devices, GNU long-name and PAX headers… (its tar type letter,
    /// or `?` for a zip entry of another Unix type).
    Other(char),
}

/// What a visitor of [`each_entry`] wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on to the next entry.
    Next,
    /// End the walk here, successfully.
    Stop,
}

/// Why a bounded walk stopped early: a limit, or an archive that does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    /// A limit of [`Limits`] (the text names it).
    Limit(String),
    /// Not a readable archive of its format (damaged, truncated, another format).
    Unreadable(String),
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::Limit(why) => f.write_str(why),
            WalkError::Unreadable(why) => write!(f, "it is not a readable archive: {why}"),
        }
    }
}

impl std::error::Error for WalkError {}

impl From<io::Error> for WalkError {
    fn from(e: io::Error) -> WalkError {
        match over_limit(&e) {
            Some(limit) => WalkError::Limit(limit.0.clone()),
            None => WalkError::Unreadable(e.to_string()),
        }
    }
}

/// Reads the entries of the archive at `path` in order, within `limits`, handing each to
/// `visit` with its name (as its own header gives it), kind, declared size and data. What
/// `visit` leaves unread is skipped (and still counted). Refused: more than
/// `limits.max_entries` entries, more than `limits.max_bytes` of data (tar: the whole
/// decompressed stream, headers included, as [`Limits::stream_bytes`]), an oversized zstd
/// window, a zip central directory out of bounds.
pub fn each_entry(
    path: &Path,
    format: Format,
    limits: Limits,
    mut visit: impl FnMut(&str, Kind, u64, &mut dyn Read) -> io::Result<Flow>,
) -> Result<(), WalkError> {
    let file = BufReader::new(File::open(path)?);
    match format {
        Format::Zip => each_zip_entry(file, limits, &mut visit),
        _ => each_tar_entry(file, format, limits, &mut visit),
    }
}

type Visit<'v> = dyn FnMut(&str, Kind, u64, &mut dyn Read) -> io::Result<Flow> + 'v;

fn each_tar_entry(
    file: BufReader<File>,
    format: Format,
    limits: Limits,
    visit: &mut Visit<'_>,
) -> Result<(), WalkError> {
    let mut tar = tar::Archive::new(tar_stream(file, format, limits)?);
    let mut count = 0;
    for entry in tar.entries()?.raw(true) {
        let mut entry = entry?;
        count += 1;
        let name = String::from_utf8_lossy(&entry.header().path_bytes()).into_owned();
        if count > limits.max_entries {
            return Err(too_many(&name, limits));
        }
        // The bytes after the header (`size()` reads other fields for sparse files).
        let declared = entry.header().entry_size()?;
        let kind = match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File,
            tar::EntryType::Directory => Kind::Dir,
            other => Kind::Other(other.as_byte() as char),
        };
        if visit(&name, kind, declared, &mut entry)? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

fn too_many(name: &str, limits: Limits) -> WalkError {
    WalkError::Limit(format!(
        "entry `{name}` is past the limit of {} entries an archive may hold",
        limits.max_entries
    ))
}

fn each_zip_entry(
    file: BufReader<File>,
    limits: Limits,
    visit: &mut Visit<'_>,
) -> Result<(), WalkError> {
    let mut zip = zip_archive(file, limits)?;
    let mut left = limits.max_bytes;
    for index in 0..zip.len() {
        let entry = zip
            .by_index(index)
            .map_err(|e| WalkError::Unreadable(e.to_string()))?;
        let name = entry.name().to_owned();
        let kind = match (entry.is_dir(), entry.unix_mode().map(|m| m & 0o170_000)) {
            (_, Some(0o040_000)) | (true, None | Some(0)) => Kind::Dir,
            (false, None | Some(0) | Some(0o100_000)) => Kind::File,
            _ => Kind::Other('?'),
        };
        let declared = entry.size();
        let mut data = Capped::sharing(entry, left, limits.max_bytes, "zip data");
        let flow = visit(&name, kind, declared, &mut data);
        left = data.left;
        if flow? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

/// Opens a zip archive after checking its end records and central directory against
/// `limits` (see [`check_zip_directory`]).
pub fn zip_archive<R: Read + Seek>(
    mut input: R,
    limits: Limits,
) -> Result<zip::ZipArchive<R>, WalkError> {
    check_zip_directory(&mut input, limits)?;
    input.seek(SeekFrom::Start(0))?;
    zip::ZipArchive::new(input).map_err(|e| WalkError::Unreadable(e.to_string()))
}

/// End of central directory: signature, and the fixed 22 bytes it takes.
const EOCD_SIGNATURE: u32 = 0x0605_4b50;
const EOCD_BYTES: u64 = 22;
/// The zip64 locator (20 bytes, right before the EOCD) and the zip64 end record.
const ZIP64_LOCATOR_SIGNATURE: u32 = 0x0706_4b50;
const ZIP64_LOCATOR_BYTES: u64 = 20;
const ZIP64_EOCD_SIGNATURE: u32 = 0x0606_4b50;
const ZIP64_EOCD_BYTES: u64 = 56;
/// A central directory file header: signature and fixed part.
const CD_HEADER_SIGNATURE: u32 = 0x0201_4b50;
const CD_HEADER_BYTES: usize = 46;

/// Where a zip's central directory is and what it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Directory {
    entries: u64,
    bytes: u64,
    offset: u64,
}

/// Reads the end-of-central-directory record (the last one in the file, its comment running
/// exactly to the end of the file, as the `zip` crate finds it first) and, when its fields
/// say so, the zip64 record; refuses more entries than `limits.max_entries`, a central
/// directory larger than 1 KiB per entry or outside the file, then reads the directory
/// (small now) and walks its headers, so that the `zip` crate parses exactly what was checked.
pub fn check_zip_directory<R: Read + Seek>(input: &mut R, limits: Limits) -> Result<(), WalkError> {
    let len = input.seek(SeekFrom::End(0))?;
    let (eocd_at, dir) = find_eocd(input, len)?;
    let dir = match dir.entries == 0xFFFF || dir.bytes == 0xFFFF_FFFF || dir.offset == 0xFFFF_FFFF {
        true => zip64_directory(input, eocd_at).unwrap_or(dir),
        false => dir,
    };
    if dir.entries > limits.max_entries as u64 {
        return Err(WalkError::Limit(format!(
            "its central directory claims {} entries; an archive may hold at most {}",
            dir.entries, limits.max_entries
        )));
    }
    let max_dir = (limits.max_entries as u64 + 1) * ZIP_DIRECTORY_BYTES_PER_ENTRY;
    if dir.bytes > max_dir {
        return Err(WalkError::Limit(format!(
            "its central directory claims {} bytes; {} entries may take at most {max_dir}",
            dir.bytes, limits.max_entries
        )));
    }
    if dir
        .offset
        .checked_add(dir.bytes)
        .is_none_or(|end| end > eocd_at)
    {
        return Err(unreadable_zip(
            "its central directory lies outside the file",
        ));
    }
    input.seek(SeekFrom::Start(dir.offset))?;
    let mut bytes = vec![0; dir.bytes as usize];
    input.read_exact(&mut bytes)?;
    walk_directory(&bytes, dir.entries)
}

fn unreadable_zip(why: &str) -> WalkError {
    WalkError::Unreadable(format!("zip: {why}"))
}

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(
        b[at..at + 4].try_into().expect("4 bytes"),
    ))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The last EOCD signature in the file's tail (22 bytes and a comment of at most 64 KiB),
/// which must be a whole record whose comment ends where the file does.
fn find_eocd<R: Read + Seek>(input: &mut R, len: u64) -> Result<(u64, Directory), WalkError> {
    let tail_len = len.min(EOCD_BYTES + u64::from(u16::MAX));
    let tail_at = len - tail_len;
    input.seek(SeekFrom::Start(tail_at))?;
    let mut tail = vec![0; tail_len as usize];
    input.read_exact(&mut tail)?;
    let signature = EOCD_SIGNATURE.to_le_bytes();
    let Some(at) = tail.windows(4).rposition(|w| w == signature) else {
        return Err(unreadable_zip("no end-of-central-directory record"));
    };
    let record = &tail[at..];
    if (record.len() as u64) < EOCD_BYTES || EOCD_BYTES + u16_at(record, 20) != record.len() as u64
    {
        return Err(unreadable_zip(
            "its end-of-central-directory record is damaged (it does not end the file)",
        ));
    }
    if u16_at(record, 4) != 0 || u16_at(record, 6) != 0 {
        return Err(unreadable_zip("it spans several disks"));
    }
    let dir = Directory {
        entries: u16_at(record, 10).max(u16_at(record, 8)),
        bytes: u32_at(record, 12),
        offset: u32_at(record, 16),
    };
    Ok((tail_at + at as u64, dir))
}

/// The zip64 end record named by the locator right before the EOCD, if there is one.
fn zip64_directory<R: Read + Seek>(input: &mut R, eocd_at: u64) -> Option<Directory> {
    let locator_at = eocd_at.checked_sub(ZIP64_LOCATOR_BYTES)?;
    let mut locator = [0; ZIP64_LOCATOR_BYTES as usize];
    input.seek(SeekFrom::Start(locator_at)).ok()?;
    input.read_exact(&mut locator).ok()?;
    if u32_at(&locator, 0) != u64::from(ZIP64_LOCATOR_SIGNATURE) {
        return None;
    }
    let record_at = u64_at(&locator, 8);
    let mut record = [0; ZIP64_EOCD_BYTES as usize];
    if record_at.checked_add(ZIP64_EOCD_BYTES)? > locator_at {
        return None;
    }
    input.seek(SeekFrom::Start(record_at)).ok()?;
    input.read_exact(&mut record).ok()?;
    if u32_at(&record, 0) != u64::from(ZIP64_EOCD_SIGNATURE) {
        return None;
    }
    Some(Directory {
        entries: u64_at(&record, 32).max(u64_at(&record, 24)),
        bytes: u64_at(&record, 40),
        offset: u64_at(&record, 48),
    })
}

/// Walks `entries` central directory headers in `bytes`: each must have its signature and
/// fit, and together they must fill the directory.
fn walk_directory(bytes: &[u8], entries: u64) -> Result<(), WalkError> {
    let mut at = 0;
    for n in 0..entries {
        let fits = at + CD_HEADER_BYTES <= bytes.len();
        if !fits || u32_at(bytes, at) != u64::from(CD_HEADER_SIGNATURE) {
            return Err(unreadable_zip(&format!(
                "central directory header {n} is damaged or missing"
            )));
        }
        let variable = u16_at(bytes, at + 28) + u16_at(bytes, at + 30) + u16_at(bytes, at + 32);
        at += CD_HEADER_BYTES + variable as usize;
        if at > bytes.len() {
            return Err(unreadable_zip(&format!(
                "central directory header {n} runs past the directory"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    #[test]
    fn a_capped_reader_allows_its_cap_exactly() {
        let data = vec![7u8; 1000];
        let mut exact = Capped::new(&data[..], 1000, "test");
        assert_eq!(io::copy(&mut exact, &mut io::sink()).unwrap(), 1000);
        let mut short = Capped::new(&data[..], 999, "test");
        let e = io::copy(&mut short, &mut io::sink()).unwrap_err();
        assert!(over_limit(&e).is_some(), "{e}");
        assert!(e.to_string().contains("more than 999 bytes"), "{e}");
    }

    #[test]
    fn a_zip_past_its_byte_limit_is_refused_naming_the_limit_not_what_was_left_of_it() {
        use std::io::Write as _;
        let options = zip::write::SimpleFileOptions::default();
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("a", options).unwrap();
        zip.write_all(&[1; 600]).unwrap();
        zip.start_file("b", options).unwrap();
        zip.write_all(&[2; 600]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("two.zip");
        std::fs::write(&path, zip.finish().unwrap().into_inner()).unwrap();
        let limits = Limits {
            max_bytes: 1000,
            max_entries: 8,
        };
        let walked = each_entry(&path, Format::Zip, limits, |_, _, _, data| {
            io::copy(data, &mut io::sink())?;
            Ok(Flow::Next)
        });
        let Err(WalkError::Limit(why)) = walked else {
            panic!("1200 bytes within a limit of 1000: {walked:?}");
        };
        assert!(why.contains("more than 1000 bytes"), "{why}");
    }

    /// An empty zip's end record claiming `entries` entries in a directory of `bytes`.
    fn eocd(entries: u16, bytes: u32, offset: u32) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(EOCD_SIGNATURE.to_le_bytes());
        out.extend([0; 4]);
        out.extend(entries.to_le_bytes());
        out.extend(entries.to_le_bytes());
        out.extend(bytes.to_le_bytes());
        out.extend(offset.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out
    }

    #[test]
    fn zip_end_records_are_checked_before_parsing() {
        let limits = Limits {
            max_bytes: 1 << 20,
            max_entries: 16,
        };
        let check = |bytes: Vec<u8>| check_zip_directory(&mut Cursor::new(bytes), limits);
        assert!(check(eocd(0, 0, 0)).is_ok());
        let many = check(eocd(60_000, 46 * 60_000, 0)).unwrap_err();
        assert!(matches!(many, WalkError::Limit(_)), "{many}");
        assert!(many.to_string().contains("claims 60000 entries"), "{many}");
        let big = check(eocd(2, 1 << 30, 0)).unwrap_err();
        assert!(big.to_string().contains("claims 1073741824 bytes"), "{big}");
        let outside = check(eocd(1, 46, 100)).unwrap_err();
        assert!(matches!(outside, WalkError::Unreadable(_)), "{outside}");
        // A zip64 record claiming ten million entries behind a record that defers to it.
        let mut zip64 = Vec::new();
        zip64.extend(ZIP64_EOCD_SIGNATURE.to_le_bytes());
        zip64.extend(44u64.to_le_bytes());
        zip64.extend([0; 12]);
        zip64.extend(10_000_000u64.to_le_bytes());
        zip64.extend(10_000_000u64.to_le_bytes());
        zip64.extend(460_000_000u64.to_le_bytes());
        zip64.extend(0u64.to_le_bytes());
        zip64.extend(ZIP64_LOCATOR_SIGNATURE.to_le_bytes());
        zip64.extend([0; 4]);
        zip64.extend(0u64.to_le_bytes());
        zip64.extend(1u32.to_le_bytes());
        zip64.extend(eocd(0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF));
        let huge = check(zip64).unwrap_err();
        assert!(
            huge.to_string().contains("claims 10000000 entries"),
            "{huge}"
        );
        assert!(matches!(
            check(b"not a zip".to_vec()),
            Err(WalkError::Unreadable(_))
        ));
    }

    #[test]
    fn the_stream_cap_covers_headers_and_end_blocks() {
        let limits = Limits {
            max_bytes: 1 << 20,
            max_entries: 4,
        };
        assert_eq!(limits.stream_bytes(), (1 << 20) + 6 * 1024);
        let huge = Limits {
            max_bytes: u64::MAX,
            max_entries: usize::MAX,
        };
        assert_eq!(huge.stream_bytes(), u64::MAX);
    }
}
