//! Seeded mutations of real saves and archives: the engine behind `tests/fuzz_files.rs` (a
//! few hundred cases on every commit) and `examples/mutate_files.rs` (a million, by hand).
//!
//! Blind byte flips mostly test one thing — the CRC-32 check refuses them — so most save
//! mutations *re-seal* what they changed: the data file's trailer CRC is recomputed and the
//! manifest's `bytes`/`crc32` for it rewritten, so the bytes reach the record decoder, the
//! counts and the structural checks. Manifest mutations rewrite its numbers with boundary
//! values (0, `u32::MAX`, `i64::MAX`...) and cut, duplicate or garble its lines. Archive
//! mutations either flip bytes of a packed archive (the decompressors and container parsers),
//! rewrite tar header fields with a valid header checksum (sizes, types, names), or pack a
//! mutated save (the whole restore path down to the load).
//!
//! Deterministic: the same seed gives the same cases, so a failure names a seed that replays.
//! Owns making cases. Must never judge them (the callers decide what a refusal is).

use std::path::{Path, PathBuf};

use shardloop::persist::archive::{Format, format};
use shardloop::persist::{self, Layout, Snapshot};
use shardloop::world;

/// The data files of a save, in the order `load` checks them.
pub const DATA_FILES: [&str; 3] = ["items.bin", "mobiles.bin", "spawners.bin"];
const CREATED: &str = "2026-12-01T08:00:00Z";

/// splitmix64: tiny, seedable, and good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A save as bytes: its manifest and its data files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveFiles {
    pub manifest: String,
    /// `(file name, bytes)`, in [`DATA_FILES`] order.
    pub files: Vec<(String, Vec<u8>)>,
}

impl SaveFiles {
    /// A real save of a generated world (the default world's generator at a chosen size).
    pub fn real(seed: u64, items: u32, mobiles: u32) -> SaveFiles {
        SaveFiles::of(&world::generate(seed, items, mobiles))
    }

    /// A real save of `world`.
    pub fn of(world: &world::World) -> SaveFiles {
        let dir = tempfile::tempdir().expect("temp dir");
        let layout = Layout::new(dir.path(), dir.path().join("Saves"));
        let snapshot = Snapshot::take(world, CREATED.parse().expect("timestamp"), |_| true);
        persist::save::write(&layout, snapshot, 1).expect("write the seed save");
        SaveFiles::read(&layout.saves)
    }

    /// The save in `dir`.
    pub fn read(dir: &Path) -> SaveFiles {
        let manifest = std::fs::read_to_string(dir.join("manifest.toml")).expect("manifest");
        let files = DATA_FILES
            .iter()
            .map(|name| {
                let bytes = std::fs::read(dir.join(name)).expect("data file");
                (name.to_string(), bytes)
            })
            .collect();
        SaveFiles { manifest, files }
    }

    /// Writes the save into `dir` (created if missing).
    pub fn write(&self, dir: &Path) {
        std::fs::create_dir_all(dir).expect("save dir");
        std::fs::write(dir.join("manifest.toml"), &self.manifest).expect("write manifest");
        for (name, bytes) in &self.files {
            std::fs::write(dir.join(name), bytes).expect("write data file");
        }
    }

    /// Packs the save as an archive in `format`; returns its bytes.
    pub fn pack(&self, format: Format) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("temp dir");
        let saves = dir.path().join("Saves");
        self.write(&saves);
        let names = ["manifest.toml", DATA_FILES[0], DATA_FILES[1], DATA_FILES[2]];
        let paths: Vec<PathBuf> = names.iter().map(|n| saves.join(n)).collect();
        let files: Vec<(String, &Path)> = names
            .iter()
            .zip(&paths)
            .map(|(n, p)| (n.to_string(), p.as_path()))
            .collect();
        let archive = dir.path().join(format!("packed{}", format.extension()));
        format::write(&archive, format, 1, &files).expect("pack the seed archive");
        std::fs::read(&archive).expect("read the archive back")
    }

    /// Recomputes `file`'s trailer CRC and writes its size and CRC into the manifest, so a
    /// change to its records passes the checksums and reaches the decoder.
    pub fn reseal(&mut self, file: usize) {
        let (name, bytes) = &mut self.files[file];
        if bytes.len() < 4 {
            return;
        }
        let body = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        let whole = crc32fast::hash(bytes);
        let (size, name) = (bytes.len(), name.clone());
        self.manifest = rewrite_file_entry(&self.manifest, &name, size, whole);
    }
}

/// `manifest` with the `bytes` and `crc32` lines of `[files."name"]` replaced.
fn rewrite_file_entry(manifest: &str, name: &str, size: usize, crc: u32) -> String {
    let header = format!("[files.\"{name}\"]");
    let mut inside = false;
    let mut out = String::with_capacity(manifest.len());
    for line in manifest.lines() {
        if line.starts_with('[') {
            inside = line == header;
        }
        let replaced = match inside {
            true if line.starts_with("bytes = ") => format!("bytes = {size}"),
            true if line.starts_with("crc32 = ") => format!("crc32 = \"{crc:08x}\""),
            _ => line.to_owned(),
        };
        out.push_str(&replaced);
        out.push('\n');
    }
    out
}

/// Values that break careless arithmetic and allocation.
const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7F,
    0xFF,
    0x7FFF,
    0xFFFF,
    0x7FFF_FFFF,
    0xFFFF_FFFF,
    0x4000_0000,
    1 << 53,
    i64::MAX as u64,
    u64::MAX,
];

/// One to four byte-level changes to `bytes`; returns what was done, for the report.
pub fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    let rounds = 1 + rng.below(4);
    let mut did = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        did.push(mutate_once(bytes, rng));
    }
    did.join(", ")
}

fn mutate_once(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    if bytes.is_empty() {
        bytes.push(rng.next() as u8);
        return "grew from empty".into();
    }
    let at = rng.below(bytes.len());
    match rng.below(9) {
        0 => {
            bytes[at] ^= 1 << rng.below(8);
            format!("flipped a bit at {at}")
        }
        1 => {
            bytes[at] = *rng.pick(&INTERESTING) as u8;
            format!("set byte {at}")
        }
        2 | 3 => {
            let width = *rng.pick(&[2usize, 4, 8]);
            let value = rng.pick(&INTERESTING).to_le_bytes();
            let end = (at + width).min(bytes.len());
            bytes[at..end].copy_from_slice(&value[..end - at]);
            format!("wrote a {width}-byte boundary value at {at}")
        }
        4 => {
            let cut = at + rng.below(bytes.len() - at + 1).min(64);
            bytes.drain(at..cut);
            format!("deleted {at}..{cut}")
        }
        5 => {
            let n = 1 + rng.below(16);
            let insert: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            bytes.splice(at..at, insert);
            format!("inserted {n} bytes at {at}")
        }
        6 => {
            let end = (at + 1 + rng.below(256)).min(bytes.len());
            let copy = bytes[at..end].to_vec();
            let to = rng.below(bytes.len());
            bytes.splice(to..to, copy);
            format!("duplicated {at}..{end} at {to}")
        }
        7 => {
            bytes.truncate(at);
            format!("truncated at {at}")
        }
        _ => {
            let n = 1 + rng.below(64);
            bytes.extend((0..n).map(|_| rng.next() as u8));
            format!("appended {n} bytes")
        }
    }
}

/// A mutated copy of `seed` and what was done to it.
pub fn mutate_save(seed: &SaveFiles, rng: &mut Rng) -> (SaveFiles, String) {
    let mut save = seed.clone();
    let what = if rng.chance(25) {
        mutate_manifest(&mut save.manifest, rng)
    } else {
        let file = rng.below(save.files.len());
        let mut what = format!("{}: ", save.files[file].0);
        // Past the 21-byte header most of the time: the records are where decoding lives.
        let bytes = &mut save.files[file].1;
        if rng.chance(80) && bytes.len() > 25 {
            let mut records = bytes.split_off(21);
            what += &mutate_bytes(&mut records, rng);
            bytes.extend(records);
        } else {
            what += &mutate_bytes(bytes, rng);
        }
        if rng.chance(85) {
            save.reseal(file);
            what += " (resealed)";
        }
        what
    };
    (save, what)
}

/// Rewrites a number, cuts or repeats a line, or garbles the text of a manifest.
pub fn mutate_manifest(manifest: &mut String, rng: &mut Rng) -> String {
    let lines: Vec<String> = manifest.lines().map(str::to_owned).collect();
    let at = rng.below(lines.len().max(1));
    let mut lines = lines;
    let what = match rng.below(6) {
        0 | 1 => {
            let value = *rng.pick(&[
                "0",
                "1",
                "4294967295",
                "4294967296",
                "9223372036854775807",
                "-1",
                "1e400",
                "\"\"",
            ]);
            match lines.iter().position(|l| l.contains(" = ")) {
                Some(_) => {
                    let numbered: Vec<usize> = (0..lines.len())
                        .filter(|&i| lines[i].contains(" = "))
                        .collect();
                    let i = *rng.pick(&numbered);
                    let key = lines[i].split(" = ").next().unwrap_or("").to_owned();
                    lines[i] = format!("{key} = {value}");
                    format!("manifest: {key} = {value}")
                }
                None => "manifest: nothing to rewrite".into(),
            }
        }
        2 => {
            let line = lines.get(at).cloned().unwrap_or_default();
            lines.remove(at.min(lines.len().saturating_sub(1)));
            format!("manifest: removed {line:?}")
        }
        3 => {
            let line = lines.get(at).cloned().unwrap_or_default();
            lines.insert(at, line.clone());
            format!("manifest: repeated {line:?}")
        }
        4 => {
            let n = 1 + rng.below(100_000);
            lines.insert(at, format!("writer = \"{}\"", "x".repeat(n)));
            format!("manifest: a {n}-byte string")
        }
        _ => {
            let mut bytes = std::mem::take(manifest).into_bytes();
            let what = mutate_bytes(&mut bytes, rng);
            *manifest = String::from_utf8_lossy(&bytes).into_owned();
            return format!("manifest bytes: {what}");
        }
    };
    *manifest = lines.join("\n") + "\n";
    what
}

/// A mutated archive in `format`, built from `save` (the seed save) and `packed` (that save
/// packed in `format`), and what was done.
pub fn mutate_archive(
    save: &SaveFiles,
    packed: &[u8],
    format: Format,
    rng: &mut Rng,
) -> (Vec<u8>, String) {
    match rng.below(10) {
        0..=3 => {
            let mut bytes = packed.to_vec();
            let what = mutate_bytes(&mut bytes, rng);
            (bytes, format!("archive bytes: {what}"))
        }
        4..=6 if format == Format::Tar => {
            let mut bytes = packed.to_vec();
            let what = mutate_tar_header(&mut bytes, rng);
            (bytes, what)
        }
        _ => {
            let (mutated, what) = mutate_save(save, rng);
            (mutated.pack(format), format!("packed save: {what}"))
        }
    }
}

/// Rewrites one field of one ustar header in an uncompressed tar and fixes its checksum, so
/// the header parses and its lie reaches the extractor.
fn mutate_tar_header(tar: &mut [u8], rng: &mut Rng) -> String {
    let headers = tar_headers(tar);
    if headers.is_empty() {
        return "tar: no header".into();
    }
    let at = *rng.pick(&headers);
    let header = &mut tar[at..at + 512];
    let what = match rng.below(5) {
        0 => {
            let size = *rng.pick(&["77777777777", "00000000000", "10000000000", "00000001000"]);
            header[124..135].copy_from_slice(size.as_bytes());
            format!("tar header at {at}: size {size}")
        }
        1 => {
            let kind = *rng.pick(b"0123456LKxgS\0");
            header[156] = kind;
            format!("tar header at {at}: type {:?}", kind as char)
        }
        2 => {
            let name = *rng.pick(&[
                &b"../../escape"[..],
                b"/etc/passwd",
                b"a/../../b",
                b"",
                b".",
            ]);
            header[..100].fill(0);
            header[..name.len()].copy_from_slice(name);
            format!(
                "tar header at {at}: name {:?}",
                String::from_utf8_lossy(name)
            )
        }
        3 => {
            header[157..257].fill(0);
            header[157..167].copy_from_slice(b"/etc/shado");
            format!("tar header at {at}: link name")
        }
        _ => {
            let mode = *rng.pick(&["0007777", "0000000", "4755\0\0\0"]);
            header[100..107].copy_from_slice(mode.as_bytes());
            format!("tar header at {at}: mode {mode:?}")
        }
    };
    seal_tar_header(header);
    what
}

/// Offsets of the headers of a well-formed uncompressed tar.
fn tar_headers(tar: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at] != 0 {
        found.push(at);
        let size_field = String::from_utf8_lossy(&tar[at + 124..at + 135]).into_owned();
        let Ok(size) = u64::from_str_radix(size_field.trim_matches(['\0', ' ']), 8) else {
            break;
        };
        at += 512 + (size as usize).div_ceil(512) * 512;
    }
    found
}

fn seal_tar_header(header: &mut [u8]) {
    header[148..156].fill(b' ');
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());
}
