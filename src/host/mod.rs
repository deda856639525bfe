//! What the engine needs from the host operating system outside the loop's own machinery:
//! enough file descriptors for every player, listener and save file ([`fd_limit`]), the
//! process's CPU time ([`process_cpu_time`]), and, to measure how well this host wakes a
//! parked loop, the park's kind of timer ([`ParkTimer`]).
//!
//! This module owns the process-wide settings the shard and its tools adjust at startup, and
//! that measuring aid. It must never be called from the running loop (the limit is set once,
//! before; the timer blocks its thread), and never change a setting beyond what its caller
//! asked for.

mod cpu_time;
pub mod fd_limit;
mod park_timer;

pub use cpu_time::process_cpu_time;
pub use park_timer::ParkTimer;
