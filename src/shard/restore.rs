//! The `restore` subcommand of every shard binary ([`super::ShardBuilder::main`]): put the
//! save in an archive in place while the shard is stopped — a file, or an object in the
//! off-site bucket (`s3://bucket/key`, downloaded first) — or list the backups and archives,
//! those off-site included when `[archive.remote]` names a bucket.
//!
//! Owns the command's locking, recovery, download and exit codes; the work is
//! [`crate::persist::archive::restore`]'s (and the download [`remote`]'s). Must never run
//! beside a shard on the same data directory (the lock refuses).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::Config;
use crate::persist::archive::remote::{self, Store};
use crate::persist::archive::restore::{self, Listed};
use crate::persist::{Layout, lock::ShardLocks};

/// `restore PATH` or `restore --list`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RestoreArgs {
    /// The archive (.tar.zst, .tar.gz/.tgz, .zip or .tar) holding one save, at its root or
    /// in one top folder: a file, or an off-site object `s3://bucket/prefix/<Kind>/<name>`
    /// (downloaded through archive.remote's endpoint). The current save moves to
    /// Backups/Restored-<time>/, the archive to Archives/Restored/.
    #[arg(
        value_name = "PATH",
        required_unless_present = "list",
        conflicts_with = "list"
    )]
    pub path: Option<PathBuf>,

    /// List the backups and archives (off-site ones too), with size and entity counts.
    #[arg(long)]
    pub list: bool,
}

/// Exit status of a restore refused or failed (every file where it was, unless the message
/// says otherwise).
const REFUSED: u8 = 2;

/// `shardloop restore`: exit 0 when done, 2 when the restore was refused or failed (every
/// file where it was, unless the message says otherwise), 1 for anything else.
pub(super) fn restore_command(config: &Config, args: &RestoreArgs) -> ExitCode {
    let data_dir = &config.server.data_dir;
    let layout = Layout::new(data_dir, config.save_path());
    let archives = config.archive_path();
    let Some(archive) = args.path.as_deref().filter(|_| !args.list) else {
        return list_command(config, &layout, &archives);
    };
    let remote = archive.to_str().filter(|text| text.starts_with("s3://"));
    if let Some(text) = remote
        && let Err(why) = remote::parse_object_url(text)
    {
        eprintln!("shardloop restore: cannot restore {text}: {why}; nothing was changed");
        return ExitCode::from(REFUSED);
    }
    if let Err(e) = std::fs::create_dir_all(data_dir) {
        eprintln!(
            "shardloop restore: cannot create {}: {e}",
            data_dir.display()
        );
        return ExitCode::FAILURE;
    }
    // Held until the restore is done: the shard must not swap saves underneath it.
    // A restore creates none of the other directories: it locks those that exist.
    let mut dirs = config.written_dirs();
    dirs.retain(|(dir, _)| dir == data_dir || dir.is_dir());
    let _locks = match ShardLocks::acquire(&dirs) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!(
                "shardloop restore: cannot restore {}: {e}; stop the shard first. Nothing was \
                 changed",
                archive.display()
            );
            return ExitCode::from(REFUSED);
        }
    };
    // What a start would do first: finish or clean up after an interrupted save or restore,
    // so the restore starts from a settled data directory.
    match layout.recover() {
        Ok(done) => done
            .iter()
            .for_each(|line| println!("after an interruption: {line}")),
        Err(e) => {
            eprintln!(
                "shardloop restore: cannot recover {}: {e}",
                layout.root().display()
            );
            return ExitCode::FAILURE;
        }
    }
    match remote {
        Some(text) => restore_remote(config, &layout, &archives, text),
        None => restore_file(config, &layout, &archives, archive),
    }
}

fn restore_file(config: &Config, layout: &Layout, archives: &Path, archive: &Path) -> ExitCode {
    match restore::restore(layout, archives, archive, config.archive.restore_limits()) {
        Ok(restored) => {
            println!("{restored}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shardloop restore: {e}");
            ExitCode::from(REFUSED)
        }
    }
}

/// Downloads `s3://bucket/key` into a temp directory beside `Saves/` (within the restore's
/// limits: a larger object is refused before a byte is read, the bytes compared with the
/// checksum the object records), then restores it as a file. The temp directory goes however
/// this ends; startup recovery removes it after a crash.
fn restore_remote(config: &Config, layout: &Layout, archives: &Path, text: &str) -> ExitCode {
    let refused = |why: &str| {
        eprintln!(
            "shardloop restore: cannot restore {text}: {why}; nothing was changed (every file is \
             where it was)"
        );
        ExitCode::from(REFUSED)
    };
    let Ok((url, key)) = remote::parse_object_url(text) else {
        return refused("not an object URL");
    };
    let store = match Store::open(&config.archive.remote.remote_at(url)) {
        Ok(store) => store,
        Err(why) => return refused(&format!("cannot set up the client: {why}")),
    };
    let tmp = match layout.create_temp_dir("restore") {
        Ok(tmp) => TempDir(tmp),
        Err(e) => return refused(&format!("cannot create a temp directory: {e}")),
    };
    let name = key.rsplit('/').next().unwrap_or(&key);
    let dest = tmp.0.join(name);
    let limit = remote::download_limit(&config.archive.restore_limits());
    let downloaded = match block_on(store.download(&key, &dest, limit)) {
        Ok(Ok(downloaded)) => downloaded,
        Ok(Err(failure)) => return refused(&failure.message),
        Err(why) => return refused(&why),
    };
    println!(
        "downloaded {text}: {} bytes, {}",
        downloaded.bytes,
        match downloaded.checksum_verified {
            true => "its SHA-256 as the object records",
            false => "no checksum recorded (not uploaded by a shard): the restore's checks only",
        }
    );
    let limits = config.archive.restore_limits();
    match restore::restore(layout, archives, &dest, limits) {
        Ok(mut restored) => {
            restored.archive = PathBuf::from(text);
            println!("{restored}");
            ExitCode::SUCCESS
        }
        Err(mut e) => {
            e.archive = PathBuf::from(text);
            eprintln!("shardloop restore: {e}");
            ExitCode::from(REFUSED)
        }
    }
}

/// `restore --list`: what is on disk, and what is in the bucket when `[archive.remote]` names
/// one. Only reads, so it works while the shard runs.
fn list_command(config: &Config, layout: &Layout, archives: &Path) -> ExitCode {
    let data_dir = &config.server.data_dir;
    let limits = config.archive.restore_limits();
    let mut listed = match restore::list(data_dir, layout, archives, limits) {
        Ok(listed) => listed,
        Err(e) => {
            eprintln!(
                "shardloop restore --list: cannot list {}: {e}",
                data_dir.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let remote_failed =
        config
            .archive
            .remote
            .remote()
            .and_then(|remote| match list_remote(&remote) {
                Ok(more) => {
                    listed.extend(more);
                    None
                }
                Err(why) => Some(format!(
                    "cannot list the off-site archives in {}: {why}",
                    remote.url
                )),
            });
    println!("{}", restore::Table(&listed));
    match remote_failed {
        Some(why) => {
            eprintln!("shardloop restore --list: {why}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

fn list_remote(remote: &remote::Remote) -> Result<Vec<Listed>, String> {
    let store = Store::open(remote)?;
    block_on(remote::listed(&store))?.map_err(|f| f.message)
}

/// Runs `future` on a runtime of its own (the command runs no loop).
fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|runtime| runtime.block_on(future))
        .map_err(|e| format!("cannot start a runtime: {e}"))
}

/// A temp directory of this command, removed with what is in it when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
