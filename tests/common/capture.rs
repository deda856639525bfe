//! Text written by the code under test, kept for the test to read: a console's screen, or a
//! log (as a `tracing` writer).

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

/// Everything written to it (or to any of its clones).
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// The address in the `listening` line of a console `status` answer on this screen (the
    /// configured port 0 resolved), waiting up to `patience` for it.
    pub fn listening_address(&self, patience: std::time::Duration) -> std::net::SocketAddr {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let text = self.text();
            let found = text
                .lines()
                .find_map(|l| l.strip_prefix("listening "))
                .and_then(|rest| rest.split([',', ' ']).next())
                .map(|addr| addr.parse().expect("an address in the listening line"));
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no listening line in `status`:\n{text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}
