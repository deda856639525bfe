//! Bans enforced by the kernel: a classic BPF socket filter on each listening socket drops
//! the connection requests (SYN segments) of banned sources, so a banned source's connects
//! never become connections and cost the loop nothing at all. Without it, each of them is
//! accepted and closed: two system calls and a wake-up of the loop, thousands of times a
//! second in a flood.
//!
//! The program (see [`program`]) lets every segment but a SYN through at once, so the
//! connections accepted while it is attached (Linux copies the listener's filter to them)
//! pay three instructions a packet. A SYN's source address is compared with each banned
//! IPv4 address (an IPv4 listener) or each banned IPv6 prefix (an IPv6 listener); a match
//! drops it, unanswered, and the client's connect times out. At most [`MAX_FILTERED`] bans
//! per family go in (the newest); the rest, and sources banned by an address the filter does
//! not see (an IPv4 address behind 6to4 or Teredo on an IPv6 listener), are refused at accept.
//!
//! Owns the program and its attaching; what is banned is `admission.rs`'s business. Must
//! never fail the server: a filter the kernel refuses leaves the bans to the accept path.

use std::io;
use std::os::fd::RawFd;

use super::admission::Prefix;

/// Bans per address family in one filter. Each is 2 instructions (IPv4) or 7 (IPv6), well
/// under the kernel's 4096, and the filter's memory (charged against `net.core.optmem_max`,
/// 20 KiB on older kernels) stays under 16 KiB.
pub(crate) const MAX_FILTERED: usize = 256;

// Classic BPF (linux/filter.h), as the `code` of a `sock_filter`.
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Where the network header is for a load (the data starts at the TCP header).
const NET: u32 = libc::SKF_NET_OFF as u32;
/// The TCP header's flags byte, and its SYN bit.
const TCP_FLAGS: u32 = 13;
const SYN: u32 = 0x02;
/// The source address in an IPv4 header; the first and second words of it in an IPv6 one.
const IPV4_SOURCE: u32 = 12;
const IPV6_SOURCE_HIGH: u32 = 8;
const IPV6_SOURCE_LOW: u32 = 12;
/// A return value that keeps the whole segment, and one that drops it.
const KEEP: u32 = u32::MAX;
const DROP: u32 = 0;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter for a listener of one family: drops SYNs from the first [`MAX_FILTERED`] of
/// `banned` of its family (IPv4 addresses for an IPv4 listener; for an IPv6 one, the first 64
/// bits of prefixes, compared under `v6_mask`), keeps everything else. Empty when nothing of
/// that family is banned (no filter at all).
#[must_use]
pub(crate) fn program(v6: bool, banned: &[Prefix], v6_mask: u64) -> Vec<libc::sock_filter> {
    let mut body = Vec::new();
    let mut filtered = 0;
    for prefix in banned {
        if filtered == MAX_FILTERED {
            break;
        }
        match (*prefix, v6) {
            (Prefix::V4(address), false) => {
                // A holds the source address.
                body.push(op(JEQ_K, 0, 1, address));
                body.push(op(RET_K, 0, 0, DROP));
                filtered += 1;
            }
            (Prefix::V6(net), true) => {
                let (high, low) = ((net >> 32) as u32, net as u32);
                let (high_mask, low_mask) = ((v6_mask >> 32) as u32, v6_mask as u32);
                body.push(op(LD_W_ABS, 0, 0, NET.wrapping_add(IPV6_SOURCE_HIGH)));
                body.push(op(AND_K, 0, 0, high_mask));
                body.push(op(JEQ_K, 0, 4, high & high_mask)); // no: the next ban
                body.push(op(LD_W_ABS, 0, 0, NET.wrapping_add(IPV6_SOURCE_LOW)));
                body.push(op(AND_K, 0, 0, low_mask));
                body.push(op(JEQ_K, 0, 1, low & low_mask));
                body.push(op(RET_K, 0, 0, DROP));
                filtered += 1;
            }
            _ => {} // the other family's listener never sees it
        }
    }
    if body.is_empty() {
        return body;
    }
    let mut program = vec![
        op(LD_B_ABS, 0, 0, TCP_FLAGS),
        op(JSET_K, 1, 0, SYN), // a SYN: go on to the bans
        op(RET_K, 0, 0, KEEP),
    ];
    if !v6 {
        program.push(op(LD_W_ABS, 0, 0, NET.wrapping_add(IPV4_SOURCE)));
    }
    program.append(&mut body);
    program.push(op(RET_K, 0, 0, KEEP));
    program
}

/// Puts `program` on the listening socket `listener` in place of its filter; an empty one
/// takes the filter off.
pub(crate) fn attach(listener: RawFd, program: &[libc::sock_filter]) -> io::Result<()> {
    if program.is_empty() {
        // SO_DETACH_FILTER reads no value; one int is passed for form's sake.
        return match set_option(listener, libc::SO_DETACH_FILTER, &0 as &libc::c_int) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()), // there was none
            other => other,
        };
    }
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    // The kernel copies the instructions `filter` points to, and never writes through it.
    let fprog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    match set_option(listener, libc::SO_ATTACH_FILTER, &fprog) {
        // The old filter and the new one together are over `net.core.optmem_max` (20 KiB
        // before Linux 6.8): without the old one for a moment, the new one fits.
        Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
            attach(listener, &[])?;
            set_option(listener, libc::SO_ATTACH_FILTER, &fprog)
        }
        other => other,
    }
}

/// `setsockopt(socket, SOL_SOCKET, option, value)`.
fn set_option<T>(socket: RawFd, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live `T` of the size passed; the kernel only reads it (and what
    // it points to, which the caller keeps alive through this call).
    let result = unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            option,
            std::ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use super::*;

    fn connect(from: &str, to: SocketAddr) -> io::Result<TcpStream> {
        let from: SocketAddr = from.parse().unwrap();
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(from),
            socket2::Type::STREAM,
            None,
        )?;
        socket.bind(&from.into())?;
        socket.connect_timeout(&to.into(), Duration::from_millis(300))?;
        Ok(socket.into())
    }

    #[test]
    fn a_banned_ipv4_source_gets_no_connection_and_others_and_earlier_ones_go_on() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut before = connect("127.0.0.2:0", addr).unwrap();
        let (mut before_accepted, _) = listener.accept().unwrap();
        let banned = [Prefix::V4(u32::from_be_bytes([127, 0, 0, 2]))];
        attach(listener.as_raw_fd(), &program(false, &banned, 0)).unwrap();

        let refused = connect("127.0.0.2:0", addr).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::TimedOut, "{refused}");
        let mut other = connect("127.0.0.3:0", addr).unwrap();
        let (mut other_accepted, _) = listener.accept().unwrap();
        other.write_all(b"hi").unwrap();
        let mut got = [0; 2];
        other_accepted.read_exact(&mut got).unwrap();
        assert_eq!(
            &got, b"hi",
            "an accepted connection's data passes the copied filter"
        );
        before.write_all(b"on").unwrap();
        before_accepted.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"on", "a connection made before the ban goes on");

        attach(listener.as_raw_fd(), &[]).unwrap();
        connect("127.0.0.2:0", addr).expect("the ban lifted");
        attach(listener.as_raw_fd(), &[]).expect("no filter to take off is fine");
    }

    #[test]
    fn a_banned_ipv6_prefix_gets_no_connection() {
        let Ok(listener) = TcpListener::bind("[::1]:0") else {
            // The loud skip is tests/net.rs's; here IPv6 loopback is only an extra check.
            return;
        };
        let addr = listener.local_addr().unwrap();
        // ::1's /56 is ::/56: its first 64 bits are zero.
        let mask = u64::MAX << 8;
        let other = [Prefix::V6(0x2001_0db8_0000_0100)];
        attach(listener.as_raw_fd(), &program(true, &other, mask)).unwrap();
        connect("[::1]:0", addr).expect("another /56 banned: this one passes");
        attach(listener.as_raw_fd(), &program(true, &[Prefix::V6(0)], mask)).unwrap();
        let refused = connect("[::1]:0", addr).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::TimedOut, "{refused}");
    }

    #[test]
    fn a_family_with_nothing_banned_gets_no_filter_and_the_length_is_bounded() {
        let v4 = [Prefix::V4(1)];
        assert!(program(true, &v4, u64::MAX).is_empty());
        assert!(program(false, &[Prefix::V6(1)], u64::MAX).is_empty());
        let many: Vec<Prefix> = (0..10_000).map(Prefix::V4).collect();
        assert_eq!(program(false, &many, 0).len(), MAX_FILTERED * 2 + 5);
        let many: Vec<Prefix> = (0..10_000).map(Prefix::V6).collect();
        assert_eq!(program(true, &many, u64::MAX).len(), MAX_FILTERED * 7 + 4);
    }
}
