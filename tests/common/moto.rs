//! A real S3-compatible server for the off-site tests: moto in server mode
//! (`moto_server -H 127.0.0.1 -p PORT`, installed by `scripts/test`), on a free loopback port,
//! started by the test and stopped when it drops. The shard talks to it with the same client
//! code as to AWS: only the endpoint differs.
//!
//! moto keeps its buckets in memory: a server stopped and started again (the store "down for
//! a while") comes back empty, and the test creates its bucket again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;

use super::tools;

/// How long moto may take to answer after it is started.
const STARTUP: Duration = Duration::from_secs(30);

/// The credentials and region the tests give the shard and their own client (moto accepts
/// any).
pub const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "testing-key-id"),
    ("AWS_SECRET_ACCESS_KEY", "testing-secret"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
];

/// A moto server this test started.
pub struct Moto {
    program: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Moto {
    /// Starts moto on a free loopback port and waits until it answers; `None` when moto is
    /// not installed (the test then fails naming it, or skips when allowed).
    #[track_caller]
    pub fn start() -> Option<Moto> {
        if !tools::need(&["moto_server"]) {
            return None;
        }
        let program = tools::find("moto_server").expect("found just now");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut moto = Moto {
            program,
            port,
            child: None,
        };
        moto.run();
        Some(moto)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL): the store is down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty: moto keeps nothing across a restart).
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    fn run(&mut self) {
        let child = Command::new(&self.program)
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        self.child = Some(child);
        let began = Instant::now();
        while self.request("GET", "/").is_err() {
            assert!(
                began.elapsed() < STARTUP,
                "moto did not answer on port {} within {STARTUP:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates `bucket` (moto takes requests unsigned).
    pub fn create_bucket(&self, bucket: &str) {
        let answer = self
            .request("PUT", &format!("/{bucket}"))
            .expect("moto answers");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// One HTTP/1.1 request with no body; the whole answer.
    fn request(&self, method: &str, path: &str) -> std::io::Result<String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
            self.port
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    }

    /// A client of `bucket` on this server, for the test's own looks and puts (not the one
    /// the shard builds from its environment: the test's environment stays as it is).
    pub fn client(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_access_key_id(AWS_ENV[0].1)
            .with_secret_access_key(AWS_ENV[1].1)
            .with_region(AWS_ENV[2].1)
            .build()
            .expect("a client of the test server");
        Arc::new(store)
    }

    /// The shard's environment for this server: `[archive.remote]` at `url` through this
    /// endpoint, quick retries (100 ms doubling to 400 ms: the tests' outages last seconds),
    /// the test credentials, and no other `AWS_*` variable of the test's own environment.
    pub fn shard_env(&self, cmd: &mut Command, url: &str) {
        for (name, _) in std::env::vars() {
            if name.starts_with("AWS_") {
                cmd.env_remove(name);
            }
        }
        cmd.envs(AWS_ENV)
            .env("SHARD_ARCHIVE__REMOTE__URL", url)
            .env("SHARD_ARCHIVE__REMOTE__ENDPOINT", self.endpoint())
            .env("SHARD_ARCHIVE__REMOTE__ALLOW_HTTP", "true")
            .env("SHARD_ARCHIVE__REMOTE__RETRY_INITIAL", "100ms")
            .env("SHARD_ARCHIVE__REMOTE__RETRY_MAX", "400ms");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}
