//! The programs outside Rust that some tests drive, checked up front.
//!
//! Our archives must open with the tools an operator has (tar, zstd, gzip, zip, unzip), our
//! `/metrics` must pass promtool and a real Prometheus scrape, the status page must render in
//! a real browser, off-site archives must go to a real S3-compatible server (moto's). A test
//! that needs one calls [`need`] first, so a missing tool fails the test with one line that
//! names it and the command that installs it, not with a panic from inside a helper halfway
//! through. `scripts/test` installs them all (the same list lives there, in `TOOLS` and
//! `PYTHON_TOOLS`).

use std::path::{Path, PathBuf};

use super::skip;

/// Where `tool` comes from: a Debian package, or (for the Python tools `scripts/test` puts in
/// a virtual environment of its own) a PyPI requirement.
fn package(tool: &str) -> (&'static str, &str) {
    match tool {
        "promtool" | "prometheus" => ("Debian", "prometheus"),
        "mount" | "umount" => ("Debian", "mount"),
        "unshare" => ("Debian", "util-linux"),
        "ip" => ("Debian", "iproute2"),
        "moto_server" => ("PyPI", "moto[server]"),
        other => ("Debian", other),
    }
}

/// The virtual environment `scripts/test` installs the Python tools into (when they are not
/// on `PATH` already): `$SHARDLOOP_VENV`, else `$XDG_CACHE_HOME/shardloop/venv`, else
/// `~/.cache/shardloop/venv`.
pub fn venv() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SHARDLOOP_VENV") {
        return Some(PathBuf::from(dir));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(cache.join("shardloop/venv"))
}

/// Where `tool` is: an executable file on `PATH`, or in the [`venv`]'s `bin/`.
pub fn find(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(venv().map(|v| v.join("bin")))
        .map(|dir| dir.join(tool))
        .find(|candidate| is_executable(candidate))
}

/// True if `tool` is installed ([`find`]).
pub fn installed(tool: &str) -> bool {
    find(tool).is_some()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True if every tool in `tools` is installed. Otherwise the calling test cannot run here
/// ([`skip::cannot_run`]: a failure naming the missing tools, or a skip when allowed) and the
/// caller returns.
#[track_caller]
pub fn need(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !installed(t)).collect();
    if missing.is_empty() {
        return true;
    }
    let mut sources: Vec<String> = Vec::new();
    for from in ["Debian", "PyPI"] {
        let mut packages: Vec<&str> = missing
            .iter()
            .map(|t| package(t))
            .filter(|(source, _)| *source == from)
            .map(|(_, name)| name)
            .collect();
        packages.sort_unstable();
        packages.dedup();
        if !packages.is_empty() {
            sources.push(format!("{from}: {}", packages.join(" ")));
        }
    }
    skip::cannot_run(format!(
        "{} not installed ({}); `scripts/test` installs what the suite needs",
        missing.join(", "),
        sources.join("; ")
    ));
    false
}
