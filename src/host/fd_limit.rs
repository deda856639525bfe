//! The process's open-file limit (`RLIMIT_NOFILE`).
//!
//! Every connection is a file descriptor, and the usual soft limit (1024) is far below what a
//! crowded shard, a load test or the network tests hold at once. The hard limit is the
//! ceiling the operator set (`ulimit -Hn`, systemd's `LimitNOFILE=`); an unprivileged process
//! may raise its soft limit up to it, and that is all this module does.
//!
//! It owns reading the limit and raising the soft one. It must never touch the hard limit
//! (that is the operator's decision, and needs privilege) and never lower either.

use std::fmt;
use std::io;

/// The open-file limits, in descriptors. A hard limit of "unlimited" reads as `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// What the process may open now.
    pub soft: u64,
    /// How far the soft limit may be raised.
    pub hard: u64,
}

/// Why the soft limit is not at least what was asked for.
#[derive(Debug)]
pub enum FdLimitError {
    /// `getrlimit` failed.
    Read(io::Error),
    /// The hard limit is below `want`. The soft limit was raised as far as it goes, to
    /// `limit.soft == limit.hard`.
    BelowWanted {
        /// The soft limit asked for, in descriptors.
        want: u64,
        /// The limits now: the soft one raised to the hard one.
        limit: FdLimit,
    },
    /// `setrlimit` refused (say, `want` is above the kernel's `fs.nr_open`); `limit` is
    /// unchanged.
    Raise {
        /// The soft limit asked for, in descriptors.
        want: u64,
        /// The limits as they were, and still are.
        limit: FdLimit,
        /// The error `setrlimit` returned.
        source: io::Error,
    },
}

impl fmt::Display for FdLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FdLimitError::Read(e) => write!(f, "cannot read RLIMIT_NOFILE: {e}"),
            FdLimitError::BelowWanted { want, limit } => write!(
                f,
                "{want} file descriptors wanted but the RLIMIT_NOFILE hard limit is {}: raise \
                 it (ulimit -Hn, LimitNOFILE=)",
                limit.hard
            ),
            FdLimitError::Raise {
                want,
                limit,
                source,
            } => write!(
                f,
                "cannot raise RLIMIT_NOFILE from {} to {want}: {source}",
                limit.soft
            ),
        }
    }
}

impl std::error::Error for FdLimitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FdLimitError::Read(e) | FdLimitError::Raise { source: e, .. } => Some(e),
            FdLimitError::BelowWanted { .. } => None,
        }
    }
}

/// The limits as they are now.
pub fn current() -> Result<FdLimit, FdLimitError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through the pointer, which points at a live,
    // writable `rlimit` on this frame; the resource number is a valid constant.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(FdLimitError::Read(io::Error::last_os_error()));
    }
    Ok(FdLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// Makes sure at least `want` descriptors may be open: raises the soft limit to `want` when
/// it is lower, or as far as the hard limit allows when even that is lower (and then says
/// so). Returns the limits in force afterwards.
pub fn raise(want: u64) -> Result<FdLimit, FdLimitError> {
    let limit = current()?;
    if limit.soft >= want {
        return Ok(limit);
    }
    let raised = FdLimit {
        soft: want.min(limit.hard),
        ..limit
    };
    if raised.soft > limit.soft {
        set(raised).map_err(|source| FdLimitError::Raise {
            want,
            limit,
            source,
        })?;
    }
    if raised.soft < want {
        return Err(FdLimitError::BelowWanted {
            want,
            limit: raised,
        });
    }
    Ok(raised)
}

fn set(limit: FdLimit) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: limit.soft,
        rlim_max: limit.hard,
    };
    // SAFETY: setrlimit only reads the `rlimit` behind the pointer, a live value on this
    // frame; the resource number is a valid constant. Bad values are refused with an error
    // (checked), never undefined behaviour.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the limit is the whole process's, and tests run on parallel threads.
    #[test]
    fn raises_up_to_the_hard_limit_and_names_it_when_short() {
        let before = current().expect("getrlimit");
        assert_eq!(raise(before.soft.min(64)).expect("already allowed"), before);
        assert_eq!(current().expect("getrlimit"), before, "nothing to change");

        // Linux caps the hard limit at fs.nr_open, so it is never "unlimited" here.
        let error = raise(before.hard.saturating_add(1)).expect_err("above the hard limit");
        let FdLimitError::BelowWanted { limit, .. } = error else {
            panic!("{error:?}");
        };
        assert_eq!((limit.soft, limit.hard), (before.hard, before.hard));
        assert_eq!(
            current().expect("getrlimit"),
            limit,
            "raised as far as it goes"
        );
        assert!(error.to_string().contains("hard limit"), "{error}");
    }
}
