//! The four archive formats: `.tar.zst`, `.tar.gz`, `.zip` and `.tar`, written and read back
//! with the sync `tar`, `zstd`, `flate2` and `zip` crates.
//!
//! An archive holds one save: its files at the archive root, regular files only, so that
//! `tar -I zstd -xf`, `tar -xzf`, `unzip` and `tar -xf` give back a directory the shard can
//! load. Writing returns each entry's size and CRC-32, and [`list`] computes the same from
//! the archive, which is how a rollup verifies an archive before it gets its final name.
//!
//! Owns the encodings. Must never decide what goes into an archive, where it lives or which
//! format the configuration asks for, and never extract (unpacking untrusted archives is
//! `extract`'s job, with its checks).

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use super::bounded::{self, Flow, Limits};
pub use super::extension::Format;
use crate::persist::fsio;

/// One file in an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path inside the archive, `/`-separated.
    pub name: String,
    /// Its size, bytes, as written or read back (uncompressed).
    pub bytes: u64,
    /// The CRC-32 (IEEE) of its bytes: what a read-back is checked against.
    pub crc32: u32,
}

/// Writes `files` (name in the archive, source path) into a new archive at `path` and
/// fsyncs it. `level` is the compression level (ignored by `.tar`).
pub fn write(
    path: &Path,
    format: Format,
    level: i32,
    files: &[(String, &Path)],
) -> io::Result<Vec<Entry>> {
    fsio::create(path, |file| write_to(file, format, level, files))
}

/// [`write()`] into `out` (buffered here), without the fsync: the caller owns the file's
/// durability (a rollup writes through `fsio::Replacement`).
pub fn write_to<W: Write + io::Seek>(
    out: W,
    format: Format,
    level: i32,
    files: &[(String, &Path)],
) -> io::Result<Vec<Entry>> {
    let out = BufWriter::new(out);
    let (entries, buffered) = match format {
        Format::Tar => {
            let (entries, out) = write_tar(out, files)?;
            (entries, out)
        }
        Format::TarZst => {
            let mut encoder = zstd::Encoder::new(out, level)?;
            // Levels 20 to 22 would use a window restore refuses (it bounds the decoder's).
            if level > 19 {
                encoder.window_log(bounded::ZSTD_WINDOW_LOG_MAX)?;
            }
            let (entries, encoder) = write_tar(encoder, files)?;
            (entries, encoder.finish()?)
        }
        Format::TarGz => {
            let gz = flate2::write::GzEncoder::new(out, flate2::Compression::new(level as u32));
            let (entries, gz) = write_tar(gz, files)?;
            (entries, gz.finish()?)
        }
        Format::Zip => write_zip(out, level, files)?,
    };
    // Flushes the buffer (the file itself is synced by the caller).
    buffered
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    Ok(entries)
}

fn write_tar<W: Write>(out: W, files: &[(String, &Path)]) -> io::Result<(Vec<Entry>, W)> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Deterministic);
    let mut entries = Vec::with_capacity(files.len());
    for (name, source) in files {
        let mut file = Checksummed::new(File::open(source)?);
        let mut header = tar::Header::new_gnu();
        header.set_size(file.inner.metadata()?.len());
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, &mut file)?;
        entries.push(file.entry(name));
    }
    Ok((entries, tar.into_inner()?))
}

fn write_zip<W: Write + io::Seek>(
    out: W,
    level: i32,
    files: &[(String, &Path)],
) -> io::Result<(Vec<Entry>, W)> {
    let mut zip = zip::ZipWriter::new(out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(i64::from(level)))
        .unix_permissions(0o644)
        .large_file(false);
    let mut entries = Vec::with_capacity(files.len());
    for (name, source) in files {
        let mut file = Checksummed::new(File::open(source)?);
        let large = file.inner.metadata()?.len() >= u64::from(u32::MAX);
        zip.start_file(name.as_str(), options.large_file(large))
            .map_err(io::Error::other)?;
        io::copy(&mut file, &mut zip)?;
        entries.push(file.entry(name));
    }
    let out = zip.finish().map_err(io::Error::other)?;
    Ok((entries, out))
}

/// Reads every entry of the archive at `path`, with its size and CRC-32 as stored (to check
/// against what was written). Names are as in the archive's own headers (raw tar: a GNU
/// long-name or PAX header is an entry of its own). Bounded by `limits`
/// ([`bounded::each_entry`]), as any read of an archive is.
pub fn list(path: &Path, format: Format, limits: Limits) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    bounded::each_entry(path, format, limits, |name, _, _, data| {
        let mut data = Checksummed::new(data);
        io::copy(&mut data, &mut io::sink())?;
        entries.push(data.entry(name));
        Ok(Flow::Next)
    })
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    Ok(entries)
}

/// A reader that counts and checksums what passes through it.
struct Checksummed<R> {
    inner: R,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<R> Checksummed<R> {
    fn new(inner: R) -> Checksummed<R> {
        Checksummed {
            inner,
            crc: crc32fast::Hasher::new(),
            bytes: 0,
        }
    }

    fn entry(&self, name: &str) -> Entry {
        Entry {
            name: name.to_owned(),
            bytes: self.bytes,
            crc32: self.crc.clone().finalize(),
        }
    }
}

impl<R: Read> Read for Checksummed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_lists_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.bin");
        let b = dir.path().join("manifest.toml");
        std::fs::write(
            &a,
            (0..100_000u32)
                .flat_map(|i| i.to_le_bytes())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        std::fs::write(&b, "format = 1\n").unwrap();
        let files = vec![
            ("manifest.toml".to_owned(), b.as_path()),
            ("a.bin".to_owned(), a.as_path()),
        ];
        for format in Format::ALL {
            let path = dir.path().join(format!("out{}", format.extension()));
            let written = write(&path, format, 3, &files).unwrap();
            assert_eq!(written.len(), 2);
            assert_eq!(written[1].bytes, 400_000);
            let listed = list(&path, format, Limits::default()).unwrap();
            assert_eq!(listed, written, "{format:?}");
            assert_eq!(Format::from_name(&path.to_string_lossy()), Some(format));
        }
        assert_eq!(Format::from_name("x.TGZ"), Some(Format::TarGz));
        assert_eq!(
            Format::TarZst.stem("2026-12-03-10.tar.zst"),
            "2026-12-03-10"
        );
        assert_eq!(Format::from_name("x.rar"), None);
    }
}
