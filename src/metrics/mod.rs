//! The operators' window: an HTTP endpoint (`[metrics] listen`, off by default) serving
//! `/metrics` in the Prometheus exposition format, `/healthz` for orchestrators, and `/`, a
//! status page that refreshes itself.
//!
//! It runs on its own thread with its own current-thread tokio runtime ([`server`]) and never
//! waits for the loop to answer a scrape: once a second a loop timer copies the figures the
//! [`Sources`] give into a slot ([`publish`]), and `/metrics` formats the latest copy, saying
//! how old it is. Only the status page asks the loop (a request to a small task on the loop,
//! [`probe`], answered through a oneshot), for the whole history it draws. The loop never waits
//! on this thread and this thread never touches loop state. `/healthz` reads one atomic the
//! loop bumps every iteration ([`crate::runtime::LoopContext::heartbeat`]), so a hung loop is
//! caught while this thread still answers.
//!
//! Files: [`server`] (the thread, the connection bound, the routes), [`publish`] (the copy
//! published every second), [`probe`] (the sources, and the loop side of the page's request),
//! [`families`] (the Prometheus families), [`saves`] (save outcomes as they happen),
//! [`process`] (CPU, memory, descriptors from `/proc/self`), [`disk`] (bytes per directory,
//! cached), [`page`] (the status page), [`health`] (`/healthz`).
//!
//! This module must never run anything slow on the loop thread (a publish copies counters and
//! the history seconds new since the last one; a page request at most the 900-second history)
//! and never let HTTP clients hold more than [`server::MAX_CONNECTIONS`] descriptors.

pub mod disk;
pub mod families;
pub mod health;
pub mod page;
pub mod probe;
pub mod process;
pub mod publish;
pub mod saves;
pub mod server;

pub use families::HttpCounts;
pub use probe::{PersistFacts, Snapshot, Sources, WorldCounts};
pub use saves::SaveLog;
pub use server::{BearerToken, MetricsServer, Settings, bind};
