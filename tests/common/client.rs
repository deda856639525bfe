//! A raw protocol client on a blocking socket: frames packets by hand, so the tests check the
//! server's bytes, not a client library's idea of them. Every read has a timeout.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::demo::packets::{client, server};
use shardloop::net::frame;

/// How long a read waits before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(5);

pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

pub fn send(stream: &mut TcpStream, id: u8, payload: &[u8]) {
    stream.write_all(&frame::packet(id, &[payload])).unwrap();
}

/// The next packet: (id, payload).
pub fn recv(stream: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut header = [0; 3];
    stream.read_exact(&mut header).expect("a packet header");
    let len = usize::from(u16::from_be_bytes([header[1], header[2]]));
    let mut payload = vec![0; len - 3];
    stream.read_exact(&mut payload).expect("a packet payload");
    (header[0], payload)
}

/// The next packet with id `id`, skipping others (moves and speech of other mobiles).
pub fn recv_id(stream: &mut TcpStream, id: u8) -> Vec<u8> {
    loop {
        let (got, payload) = recv(stream);
        if got == id {
            return payload;
        }
    }
}

/// True once the server has closed the connection (EOF or reset), within the read timeout.
pub fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false, // timed out
        }
    }
}

pub fn ping(stream: &mut TcpStream, payload: &[u8]) -> Duration {
    let began = Instant::now();
    send(stream, client::PING, payload);
    let (id, echoed) = recv(stream);
    assert_eq!((id, echoed.as_slice()), (client::PING, payload));
    began.elapsed()
}

pub fn login(stream: &mut TcpStream, name: &str) -> (u32, u16, u16) {
    send(stream, client::LOGIN, name.as_bytes());
    let p = recv_id(stream, server::LOGIN_OK);
    assert_eq!(p.len(), 8);
    let serial = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    (
        serial,
        u16::from_be_bytes([p[4], p[5]]),
        u16::from_be_bytes([p[6], p[7]]),
    )
}

/// A client connected from the loopback address `from` (127.0.0.2, 127.0.0.3, ...: one
/// machine acting as several hosts).
pub fn connect_from(addr: SocketAddr, from: [u8; 4]) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from((from, 0)).into())
        .expect("bind a loopback source address");
    socket.connect(&addr.into()).expect("connects");
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}
