//! What the engine needs from the host operating system outside the loop's own machinery:
//! enough file descriptors for every player, listener and save file ([`fd_limit`]).
//!
//! This module owns process-wide settings the shard and its tools adjust at startup. It must
//! never run on the loop thread once the loop runs (these are system calls made once, before),
//! and never change a setting beyond what its caller asked for.

pub mod fd_limit;
