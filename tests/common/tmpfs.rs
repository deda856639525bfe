//! A small tmpfs to fill up, run out of inodes on or remount read-only. Unmounted on drop.
//!
//! Mounting needs root (CAP_SYS_ADMIN). A test run by another user gets it the way
//! containers do: [`Tmpfs::mount_or_skip`] runs the calling test again in a child process
//! inside a new user and mount namespace (`unshare --user --map-root-user --mount`), where
//! the test is root of mounts no one else sees, and passes on the child's verdict. Where the
//! kernel refuses unprivileged user namespaces (`kernel.unprivileged_userns_clone = 0`, or an
//! AppArmor policy restricting them) the test cannot run, and says so.
//!
//! The child is the same test binary filtered to the one test, so everything the test does —
//! the shard binary it starts, the `mount` and `umount` it runs — happens inside the
//! namespace. A process cannot enter a new user namespace itself once it has threads, which
//! a test binary always has: hence the child.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::skip;

/// Set in the child, so a mount that fails there too is final instead of another child.
const IN_NAMESPACE: &str = "SHARDLOOP_TEST_IN_USERNS";

pub struct Tmpfs {
    /// The mount point.
    pub mnt: PathBuf,
    /// Holds the mount point; outside the mount, so a process running there never keeps the
    /// mount busy.
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs with `options` (`"size=8m"`, `"size=4m,nr_inodes=64"`).
    pub fn mount(options: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&mnt)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs -o {options}: {} {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs { mnt, dir })
    }

    /// [`Tmpfs::mount`] for the calling test. `None` means the test is over in this process
    /// and the caller returns: either it ran, whole, in a user-namespace child (which
    /// passed; a failure there fails this test with the child's output), or it cannot run
    /// here at all ([`skip::cannot_run`]).
    #[track_caller]
    pub fn mount_or_skip(options: &str) -> Option<Tmpfs> {
        match Tmpfs::mount(options) {
            Ok(fs) => Some(fs),
            Err(e) if is_root() || std::env::var_os(IN_NAMESPACE).is_some() => {
                skip::cannot_run(format!("cannot mount a tmpfs: {e}"));
                None
            }
            Err(_) => {
                rerun_in_user_namespace();
                None
            }
        }
    }

    /// A directory outside the mount, for a process's working directory.
    pub fn cwd(&self) -> &Path {
        self.dir.path()
    }

    pub fn remount(&self, options: &str) {
        // The type and source named: inside a user namespace, util-linux's `mount -o
        // remount` without them fails ("mount point not mounted or bad option").
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("remount,{options}"), "tmpfs"])
            .arg(&self.mnt)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount -o remount,{options}: {status}");
    }

    /// Removes everything on the filesystem.
    pub fn clear(&self) {
        for entry in std::fs::read_dir(&self.mnt).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs the calling test in a user and mount namespace of its own, and fails this test if it
/// failed there.
#[track_caller]
fn rerun_in_user_namespace() {
    super::userns::rerun(
        &["--mount"],
        IN_NAMESPACE,
        "cannot mount a tmpfs without root",
    );
}
