//! Networking: players' TCP connections, handled inline on the loop thread.
//!
//! A [`Net`] server owns the listeners (`listener.rs`, built with socket2) and the open
//! connections ([`Sessions`]); a [`backend`] moves the bytes — tokio's epoll reactor, or
//! io_uring where compiled in and allowed. Packets are framed as described in
//! `docs/protocol.md` ([`frame`]) and handed to the handlers game code registered
//! ([`Net::handle`]) in the loop's Network phase; what they send goes out in the Flush phase.
//!
//! Why inline: a packet handler is game logic, and game logic runs on one thread in one
//! order. Handing packets to other tasks would put tokio's scheduler in charge of that order.
//!
//! Networking must never read the configuration: it takes plain settings ([`Limits`],
//! [`BackendKind`]), which the config builds from `[network]`.

mod admission;
pub mod backend;
mod churn;
mod conn_id;
mod epoll;
pub mod frame;
mod handlers;
mod kind;
mod listener;
pub mod rate;
pub(crate) mod reason;
mod server;
mod session;
mod throttle;
#[cfg(all(target_os = "linux", feature = "io-uring"))]
pub mod uring;

pub use backend::{Backend, Token};
pub(crate) use churn::log_at;
pub use churn::{Churn, ONE_BY_ONE};
pub use conn_id::ConnId;
pub use epoll::Epoll;
pub use handlers::{Access, BadPacket, Handler};
pub use kind::{BackendKind, IoUringUnavailable, io_uring_available};
pub use listener::{BACKLOG, bind};
pub use rate::Rate;
pub use server::{Limits, Net, NetStats, bind_all};
pub use session::{Disconnect, Sessions};
