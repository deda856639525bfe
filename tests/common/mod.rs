//! Helpers shared by the integration tests. A test file that needs them says `mod common;`.
//!
//! What lives here is what more than one test file needs and must behave the same in all of
//! them: how a test that cannot run on this host fails (or, when allowed, skips), a tmpfs to
//! fill or make read-only, the open-file limit, and deadlines for child processes and threads
//! so a stuck test fails instead of eating the CI budget.

// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

pub mod attempt;
pub mod backups;
pub mod binary;
pub mod capture;
pub mod client;
pub mod deadline;
/// The demo game, compiled here as in the binary: through the library's public API only.
#[path = "../../src/demo/mod.rs"]
pub mod demo;
pub mod fd_limit;
pub mod moto;
pub mod mutate;
pub mod netns;
pub mod paused;
pub mod skip;
pub mod tmpfs;
pub mod tools;
pub mod tree;
pub mod userns;
