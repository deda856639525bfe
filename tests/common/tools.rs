//! The programs outside Rust that some tests drive, checked up front.
//!
//! Our archives must open with the tools an operator has (tar, zstd, gzip, zip, unzip), our
//! `/metrics` must pass promtool and a real Prometheus scrape, the status page must render in
//! a real browser. A test that needs one calls [`need`] first, so a missing tool fails the test
//! with one line that names it and the command that installs it, not with a panic from
//! inside a helper halfway through. `scripts/test` installs them all (the same list lives
//! there, in `TOOLS`).

use std::path::Path;

use super::skip;

/// The Debian package that provides `tool`.
fn package(tool: &str) -> &str {
    match tool {
        "promtool" | "prometheus" => "prometheus",
        "mount" | "umount" => "mount",
        "unshare" => "util-linux",
        "ip" => "iproute2",
        other => other,
    }
}

/// True if `tool` is an executable file on `PATH`.
pub fn installed(tool: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| is_executable(&dir.join(tool)))
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
    let mut packages: Vec<&str> = missing.iter().map(|t| package(t)).collect();
    packages.sort_unstable();
    packages.dedup();
    skip::cannot_run(format!(
        "{} not installed (Debian: {}); `scripts/test` installs what the suite needs",
        missing.join(", "),
        packages.join(" ")
    ));
    false
}
