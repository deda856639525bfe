//! The `restore` subcommand of every shard binary ([`super::ShardBuilder::main`]): put the
//! save in an archive in place while the shard is stopped, or list the backups and archives.
//!
//! Owns the command's locking, recovery and exit codes; the work is
//! [`crate::persist::archive::restore`]'s. Must never run beside a shard on the same data
//! directory (the lock refuses).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use crate::persist::archive::restore;
use crate::persist::{Layout, lock::ShardLocks};

/// `restore PATH` or `restore --list`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RestoreArgs {
    /// The archive (.tar.zst, .tar.gz/.tgz, .zip or .tar) holding one save, at its root or
    /// in one top folder. The current save moves to Backups/Restored-<time>/, the archive
    /// to Archives/Restored/.
    #[arg(
        value_name = "PATH",
        required_unless_present = "list",
        conflicts_with = "list"
    )]
    pub path: Option<PathBuf>,

    /// List the backups and archives, with size and entity counts.
    #[arg(long)]
    pub list: bool,
}

/// `shardloop restore`: exit 0 when done, 2 when the restore was refused or failed (every
/// file where it was, unless the message says otherwise), 1 for anything else.
pub(super) fn restore_command(config: &Config, args: &RestoreArgs) -> ExitCode {
    const REFUSED: u8 = 2;
    let data_dir = &config.server.data_dir;
    let layout = Layout::new(data_dir, config.save_path());
    let archives = config.archive_path();
    let Some(archive) = args.path.as_deref().filter(|_| !args.list) else {
        // Listing only reads, so it works while the shard runs.
        let limits = config.archive.restore_limits();
        return match restore::list(data_dir, &layout, &archives, limits) {
            Ok(listed) => {
                println!("{}", restore::Table(&listed));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "shardloop restore --list: cannot list {}: {e}",
                    data_dir.display()
                );
                ExitCode::FAILURE
            }
        };
    };
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
    match restore::restore(&layout, &archives, archive, config.archive.restore_limits()) {
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
