//! The operator tools behind `shardloop loadgen` and `shardloop probe-host`: programs that
//! measure a shard, or the host under it, from the outside.
//!
//! They are modules of the binary, not of the library, by choice:
//! - The library is the engine, and its public API is a contract that shards build on. A
//!   tool there is API to keep stable that no shard calls.
//! - A cargo feature (say `tools`) would keep them in the library, only switched off. But the
//!   binary needs them for its subcommands, so the feature would have to be on whenever the
//!   binary is built — on by default, which puts them back into the API — and CI would have
//!   one more build to check. Binary modules need neither: one build, the same subcommands.
//! - From here the tools see only the library's public API, as any client of the engine does,
//!   so they cannot come to depend on its internals by accident. What they use is public on
//!   its own merits: the framing (`net::frame`), the open-file limit (`host::fd_limit`), the
//!   park's timer (`host::ParkTimer`), the process CPU time (`host::process_cpu_time`).
//! - Their tests are the binary's unit tests, which `cargo test` runs like any other.
//!
//! This module must never be needed by the shard: nothing here runs inside a running shard,
//! and the engine must never depend on a tool.

pub mod loadgen;
pub mod probe_host;
