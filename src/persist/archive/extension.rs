//! [`Format`]: the four archive formats by name, and the file extensions that say which one a
//! file is. The vocabulary that the encoders (`format`) and the bounded readers (`bounded`)
//! both speak, so it takes nothing from either.
//!
//! Owns the names and extensions. Must never read or write an archive.

/// An archive format (the file's extension says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// A tar stream compressed with zstd (`.tar.zst`): the default, small and fast.
    TarZst,
    /// A tar stream compressed with gzip (`.tar.gz`).
    TarGz,
    /// A zip file with deflate (`.zip`).
    Zip,
    /// A plain tar file (`.tar`), not compressed.
    Tar,
}

impl Format {
    /// Every format, in the order an archive's name is tried against their extensions.
    pub const ALL: [Format; 4] = [Format::TarZst, Format::TarGz, Format::Zip, Format::Tar];

    /// The extension, with its leading dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::TarZst => ".tar.zst",
            Format::TarGz => ".tar.gz",
            Format::Zip => ".zip",
            Format::Tar => ".tar",
        }
    }

    /// The format a file name says it has (`.tgz` too), if any.
    pub fn from_name(name: &str) -> Option<Format> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".tgz") {
            return Some(Format::TarGz);
        }
        Format::ALL
            .into_iter()
            .find(|f| lower.ends_with(f.extension()))
    }

    /// The file name without this format's extension.
    pub fn stem(self, name: &str) -> &str {
        let cut = if name.to_ascii_lowercase().ends_with(".tgz") {
            4
        } else {
            self.extension().len()
        };
        &name[..name.len().saturating_sub(cut)]
    }
}
