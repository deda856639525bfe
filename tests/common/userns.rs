//! Running the calling test again in a child process inside namespaces of its own
//! (`unshare --user --map-root-user ...`), where it is root of what those namespaces hold —
//! mounts nobody else sees ([`super::tmpfs`]), a network stack of its own
//! ([`super::netns`]) — without root on the host and without touching the host's.
//!
//! The child is the same test binary filtered to the one test, with `marker` set in its
//! environment so the test knows it is the child. A process cannot enter a new user namespace
//! itself once it has threads, which a test binary always has: hence the child.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::{deadline, skip};

/// How long the child may take: the slowest of these tests runs in seconds.
const CHILD_LIMIT: Duration = Duration::from_secs(240);

/// Runs the calling test (named by its thread, as libtest names them) in a child inside new
/// user namespace and the namespaces `unshare_flags` ask for (`--mount`, `--net`), with
/// `marker=1` in its environment, and fails this test if it failed there. Where the kernel
/// refuses the namespaces, the test cannot run ([`skip::cannot_run`], saying `what` it needed).
#[track_caller]
pub fn rerun(unshare_flags: &[&str], marker: &str, what: &str) {
    let thread = std::thread::current();
    let test = thread
        .name()
        .filter(|name| *name != "main")
        .expect("the test runs on libtest's thread named after it");
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--map-root-user"])
        .args(unshare_flags)
        .arg("--")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(marker, "1");
    let spawned = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let out = match spawned {
        Ok(child) => deadline::output_within(child, CHILD_LIMIT),
        Err(e) => {
            skip::cannot_run(format!(
                "{what}: cannot run unshare for a user namespace: {e}"
            ));
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What the child printed belongs to this test's output (shown when it fails).
    print!("{stdout}");
    eprint!("{stderr}");
    if !stdout.contains("running 1 test") {
        // The namespace was refused before the test binary started.
        skip::cannot_run(format!(
            "{what}: this kernel refuses an unprivileged user namespace ({})",
            stderr.trim()
        ));
        return;
    }
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} failed in its namespace ({}); its output is above",
        out.status
    );
}
