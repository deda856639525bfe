//! A network namespace of the test's own, for tests that need source addresses the host does
//! not have — several IPv6 addresses in one /64, in another — without touching the host's
//! network: the test runs again in a child inside a new user and network namespace
//! ([`super::userns`]), where it brings the loopback interface up and adds the addresses to
//! it. Needs `unshare` (util-linux) and `ip` (iproute2).

use std::io::Write;
use std::net::Ipv6Addr;
use std::process::{Command, Stdio};

use super::{skip, tools, userns};

/// Set in the child: the namespace is there, configure it and run the body.
const IN_NETNS: &str = "SHARDLOOP_TEST_IN_NETNS";

/// `true` when the calling test is in its own network namespace with `lo` up and `addresses`
/// on it: run the body. `false` when it is over in this process — it ran, whole, in a child
/// (a failure there fails this test), or it cannot run here — and the caller returns.
#[track_caller]
pub fn with_addresses(addresses: &[Ipv6Addr]) -> bool {
    if std::env::var_os(IN_NETNS).is_none() {
        if tools::need(&["unshare", "ip"]) {
            userns::rerun(&["--net"], IN_NETNS, "needs a network namespace of its own");
        }
        return false;
    }
    // `nodad`: usable at once, without duplicate address detection's wait.
    let mut batch = String::from("link set lo up\n");
    for address in addresses {
        batch.push_str(&format!("addr add {address}/128 dev lo nodad\n"));
    }
    let mut ip = Command::new("ip")
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ip");
    ip.stdin
        .take()
        .unwrap()
        .write_all(batch.as_bytes())
        .unwrap();
    let out = ip.wait_with_output().unwrap();
    if !out.status.success() {
        skip::cannot_run(format!(
            "cannot configure the namespace's loopback: ip -batch: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        return false;
    }
    true
}
