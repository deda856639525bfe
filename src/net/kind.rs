//! Which backend the shard runs, and on which runtime.
//!
//! This module owns the choice between the backends this process can run ([`BackendKind`])
//! and the runtime under them. io_uring needs the `io-uring` cargo feature, Linux, and a kernel
//! that lets this process create a ring (a sysctl, a seccomp profile or an old kernel may
//! refuse). When it is asked for and refused, [`BackendKind::io_uring_or_epoll`] logs one
//! warning and picks epoll: a shard that starts beats one that stops over a transport. Both
//! backends run on the same current-thread tokio runtime ([`BackendKind::block_on`]); epoll's
//! sockets are in the loop thread's own reactor, io_uring's ring is driven by that reactor on
//! a loop's thread (by a local task elsewhere).
//!
//! It must never read the configuration: `network.backend` is mapped to a [`BackendKind`] by
//! the config (`NetworkConfig::backend_kind`), which calls in here, never the reverse.

use std::fmt;
use std::future::Future;
use std::io;

use super::backend::Backend;
use super::epoll::Epoll;

/// A backend that is available here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// Readiness through epoll (the loop thread's own reactor): every Linux kernel.
    Epoll,
    /// Completions through an io_uring ring: Linux 5.19+, where the kernel allows it.
    IoUring,
}

impl BackendKind {
    /// What `auto` means: epoll. See `docs/configuration.md` for the measurements behind it.
    pub const AUTO: BackendKind = BackendKind::Epoll;

    /// io_uring when this process can use it; otherwise epoll, after a warning that says why
    /// io_uring was refused. For a shard whose `network.backend` asks for io_uring.
    pub fn io_uring_or_epoll() -> BackendKind {
        match io_uring_available() {
            Ok(()) => BackendKind::IoUring,
            Err(why) => {
                tracing::warn!(
                    "network.backend = \"io_uring\" is unavailable ({why}); using epoll"
                );
                BackendKind::Epoll
            }
        }
    }

    /// `"epoll"` or `"io_uring"`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Epoll => "epoll",
            BackendKind::IoUring => "io_uring",
        }
    }

    /// The backend, for [`super::Net::start`]. Call it on the runtime [`Self::block_on`]
    /// runs.
    pub fn backend(self) -> Box<dyn Backend> {
        match self {
            BackendKind::Epoll => Box::new(Epoll),
            #[cfg(all(target_os = "linux", feature = "io-uring"))]
            BackendKind::IoUring => Box::new(super::uring::Uring),
            #[cfg(not(all(target_os = "linux", feature = "io-uring")))]
            BackendKind::IoUring => unreachable!("resolve() never picks io_uring without it"),
        }
    }

    /// Runs `future` to completion on a current-thread runtime with time and I/O drivers and
    /// `spawn_local`. Both backends run on it; on an event loop's thread neither needs its
    /// drivers (epoll's sockets and io_uring's ring are the loop thread's reactor's), and off
    /// one io_uring's ring is driven by a local task. Fails, instead of panicking, when the
    /// runtime (or, for io_uring, a ring) cannot be created.
    pub fn block_on<F: Future>(self, future: F) -> io::Result<F::Output> {
        if self == BackendKind::IoUring {
            io_uring_available().map_err(io::Error::other)?;
        }
        Ok(tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build_local(tokio::runtime::LocalOptions::default())?
            .block_on(future))
    }
}

/// Can this process use io_uring? The error says why not.
pub fn io_uring_available() -> Result<(), IoUringUnavailable> {
    #[cfg(all(target_os = "linux", feature = "io-uring"))]
    return super::uring::probe().map_err(IoUringUnavailable::Refused);
    #[cfg(not(all(target_os = "linux", feature = "io-uring")))]
    return Err(IoUringUnavailable::NotBuilt);
}

/// Why this process cannot use io_uring.
#[derive(Debug)]
pub enum IoUringUnavailable {
    /// The build has no `io-uring` feature, or the target is not Linux.
    NotBuilt,
    /// The kernel refused to create a ring (an old kernel, seccomp, `io_uring_disabled`).
    Refused(io::Error),
}

impl fmt::Display for IoUringUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoUringUnavailable::NotBuilt => {
                f.write_str("this build has no io-uring feature (Linux only)")
            }
            IoUringUnavailable::Refused(e) => write!(f, "the kernel refused an io_uring: {e}"),
        }
    }
}

impl std::error::Error for IoUringUnavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IoUringUnavailable::NotBuilt => None,
            IoUringUnavailable::Refused(e) => Some(e),
        }
    }
}
