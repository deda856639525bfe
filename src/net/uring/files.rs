//! The ring's registered file table: each connection's socket, registered once when it is
//! attached, so the operations on it name a table slot (`IOSQE_FIXED_FILE`) instead of a
//! descriptor.
//!
//! A receive, send or accept on a plain descriptor makes the kernel look the descriptor up in
//! the process's file table and take a reference on the file (`fget`), and drop it when the
//! operation ends, once per operation: a send per round trip. A registered file is looked up
//! in the ring's own table, whose reference was taken once, at registration. The table is
//! sparse (`IORING_RSRC_REGISTER_SPARSE`, Linux 5.19) and a connection's slot in it is the
//! connection's slot index in the ring (`Ring::conns`), so nothing allocates slots twice and a
//! slot's next tenant replaces the last one's entry.
//!
//! Owns: the table's registration and which of its slots hold a socket. The connection keeps
//! its own descriptor as well (shutdown, `SO_LINGER` and the accept screen work on it).
//!
//! Must never leave a closed connection's socket in the table: the table's reference keeps
//! the socket open after its descriptor is closed, so the peer would never see the close. A
//! slot is emptied before the connection's descriptor is, and if the kernel refuses that, the
//! socket is shut down so the peer sees the end all the same.

use std::io;
use std::os::fd::RawFd;

use io_uring::IoUring;

/// The table's largest size: a slot costs the kernel 8 bytes, so 512 KiB at most. Connections
/// whose slot index is past the table (more than this many at once) use their descriptor.
const MAX_SLOTS: u32 = 1 << 16;

/// A sparse registered file table, or where a connection's socket is in it.
pub(super) struct Files {
    slots: u32,
    /// Connections whose socket was put in the table and not cleared yet.
    used: u32,
    /// A registration was refused and that was said (the next refusals are not).
    warned: bool,
}

impl Files {
    /// Registers an empty table of `slots` entries with `uring`. The error is the kernel's
    /// refusal: EINVAL before Linux 5.19 (no sparse tables), EMFILE past `RLIMIT_NOFILE`.
    pub(super) fn register(uring: &IoUring, slots: u32) -> io::Result<Files> {
        uring.submitter().register_files_sparse(slots)?;
        Ok(Files {
            slots,
            used: 0,
            warned: false,
        })
    }

    /// Puts `fd` in slot `index`. False, and the caller uses the descriptor: the table has no
    /// such slot, or the kernel refused (said once per table).
    pub(super) fn put(&mut self, uring: &IoUring, index: u32, fd: RawFd) -> bool {
        if index >= self.slots {
            return false;
        }
        match uring.submitter().register_files_update(index, &[fd]) {
            Ok(1) => {
                self.used += 1;
                true
            }
            Ok(_) => self.refused(io::Error::other("no entry updated")),
            Err(e) => self.refused(e),
        }
    }

    fn refused(&mut self, e: io::Error) -> bool {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(
                "io_uring: the kernel refused to put a socket in the registered file table \
                 ({e}): that connection, and any other it refuses, is used by its descriptor"
            );
        }
        false
    }

    /// Empties slot `index` (a connection that was in it is going). The error is the
    /// kernel's refusal: the socket is then still referenced by the table.
    pub(super) fn clear(&mut self, uring: &IoUring, index: u32) -> io::Result<()> {
        // Its connection is gone either way; a slot left holding the socket is replaced by
        // the slot's next tenant.
        self.used -= 1;
        match uring.submitter().register_files_update(index, &[-1])? {
            1 => Ok(()),
            _ => Err(io::Error::other("no entry updated")),
        }
    }

    /// Connections in the table.
    #[cfg(test)]
    pub(super) fn used(&self) -> u32 {
        self.used
    }

    /// The table's size.
    #[cfg(test)]
    pub(super) fn slots(&self) -> u32 {
        self.slots
    }
}

/// The size of table to register: as many slots as the process may have descriptors (the
/// kernel refuses more, and there cannot be more connections), at most [`MAX_SLOTS`].
pub(super) fn table_size() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through the pointer, which points at a live,
    // writable `rlimit` on this frame; the resource number is a valid constant.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    u32::try_from(limit.rlim_cur).map_or(MAX_SLOTS, |soft| soft.min(MAX_SLOTS))
}
