//! A small tmpfs to fill up, run out of inodes on or remount read-only (root or
//! CAP_SYS_ADMIN). Unmounted on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::skip;

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

    /// [`Tmpfs::mount`], or "cannot run here" (see [`skip::cannot_run`]) and `None`.
    #[track_caller]
    pub fn mount_or_skip(options: &str) -> Option<Tmpfs> {
        skip::or_skip(
            Tmpfs::mount(options),
            "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN)",
        )
    }

    /// A directory outside the mount, for a process's working directory.
    pub fn cwd(&self) -> &Path {
        self.dir.path()
    }

    pub fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
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
