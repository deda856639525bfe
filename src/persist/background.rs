//! Background threads: where saves and archive rollups do their work.
//!
//! Both are heavy (encoding, compression, checksums, fsync) and can wait, while the loop
//! cannot. On 2 cores the loop would compete with them for a CPU, so they run on a dedicated
//! thread at nice 10 (threads it starts inherit that), and the scheduler runs the loop first
//! whenever both want a core. They still use every idle cycle there is.
//!
//! Owns thread priority. Must never be called from the loop thread (it blocks until the work
//! is done: call it from `spawn_blocking`).

use std::io;

/// Niceness of background threads (0 normal, 19 lowest).
const NICE: libc::c_int = 10;

/// Runs `work` on a new thread named `name` at low priority and waits for it.
///
/// # Panics
/// If `work` panics (the panic is carried over).
pub(crate) fn run<T: Send>(name: &str, work: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn_scoped(scope, move || {
                lower_priority();
                work()
            })?;
        Ok(thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// Lowers the calling thread's priority to nice 10 (threads it starts inherit it): for a
/// background thread of its own (the off-site uploader's) rather than one [`run`] starts.
pub(crate) fn lower_priority() {
    // SAFETY: plain syscalls on the calling thread's own id. On Linux the nice value is per
    // thread, and threads this one starts inherit it.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE) };
    if rc != 0 {
        tracing::debug!(
            "cannot lower a background thread's priority: {}",
            io::Error::last_os_error()
        );
    }
}
