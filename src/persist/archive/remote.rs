//! Off-site archives: the S3-compatible bucket `[archive.remote]` names, and what is done
//! there — an archive uploaded (never over an existing object) and checked, the archives
//! listed, an archive deleted, an archive downloaded for a restore within limits.
//!
//! The client is Apache Arrow's `object_store` (signing, retries, multipart uploads,
//! conditional puts), built from the settings here and the standard `AWS_*` environment
//! variables (credentials, region): the configuration never holds a secret, and nothing here
//! logs one. The same code talks to AWS S3, MinIO, Cloudflare R2, Garage, Ceph or a test
//! server: only the endpoint differs.
//!
//! Objects are named `<prefix>/<Kind>/<archive file name>` (`shard-1/Daily/2026-12-03.tar.zst`),
//! as the archives are on disk. Each carries, in its metadata, the SHA-256 of its bytes
//! (`x-amz-meta-shardloop-sha256`) and the manifest of the save inside
//! (`x-amz-meta-shardloop-manifest`, so that `restore --list` can show it without a
//! download). The checksum is what an upload is verified against, and what a download is
//! compared with; an object without it was not written by a shard and is never deleted.
//!
//! Owns the object names, the client, the checksums objects carry. Must never run on the loop
//! thread (every call is network I/O: the uploader's thread and the `restore` command run
//! them), never overwrite an object, never delete one that does not carry the checksum a shard
//! writes, and never log or print a credential.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::tz::TimeZone;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, BackoffConfig, ClientConfigKey, GetOptions, ObjectStore, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use sha2::{Digest, Sha256};

use super::bounded::Limits;
use super::format::Format;
use super::list::{Listed, ListedKind, UnreadableManifest};
use super::period::Period;
use crate::persist::manifest::Manifest;

/// The metadata key (`x-amz-meta-…`) of an object's SHA-256, in lowercase hex.
pub const SHA256_KEY: &str = "shardloop-sha256";
/// The metadata key of the manifest of the save an object holds (percent-escaped text).
pub const MANIFEST_KEY: &str = "shardloop-manifest";
/// Files this large or larger go up as multipart uploads (below it, one `PUT`).
pub const DEFAULT_MULTIPART_BYTES: u64 = 16 << 20;
/// The part size of a multipart upload (S3 needs at least 5 MiB for every part but the last).
pub const DEFAULT_PART_BYTES: usize = 8 << 20;
/// Parts of one multipart upload in flight at once.
const PARTS_IN_FLIGHT: usize = 2;
/// S3 allows 2 KiB of user metadata per object; a manifest escaped longer than this is left
/// out (the listing then shows no counts for the object).
const MAX_MANIFEST_METADATA: usize = 1536;
/// How long one request may take (a part of 8 MiB on a slow link).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where off-site archives go: a bucket and a prefix inside it (`s3://bucket/prefix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    bucket: String,
    prefix: String,
}

impl RemoteUrl {
    /// Parses `s3://bucket` or `s3://bucket/prefix` (a trailing `/` is dropped). The error
    /// says what is wrong, in operator words.
    pub fn parse(text: &str) -> Result<RemoteUrl, String> {
        let (bucket, prefix) = split_s3(text)?;
        if !prefix.is_empty() {
            ObjectPath::parse(prefix)
                .map_err(|_| format!("its prefix {prefix:?} has an empty, `.` or `..` part"))?;
        }
        Ok(RemoteUrl {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix inside the bucket, without a trailing `/` (empty: the bucket's root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object name of the archive `name` of kind `period`: `<prefix>/<Kind>/<name>`.
    pub fn key(&self, period: Period, name: &str) -> String {
        let tail = format!("{}/{name}", period.dir_name());
        match self.prefix.is_empty() {
            true => tail,
            false => format!("{}/{tail}", self.prefix),
        }
    }

    /// `s3://bucket/key`: how the operator names an object to restore.
    pub fn object_url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// The archive an object name under this prefix stands for: its kind and file name, if
    /// it is `<prefix>/<Kind>/<period><extension>` exactly (anything else is not ours).
    pub fn archive_of(&self, key: &str) -> Option<(Period, String)> {
        let rest = match self.prefix.is_empty() {
            true => key,
            false => key.strip_prefix(&self.prefix)?.strip_prefix('/')?,
        };
        let (kind, name) = rest.split_once('/')?;
        let period = Period::ALL.into_iter().find(|p| p.dir_name() == kind)?;
        let format = Format::from_name(name)?;
        let stem = format.stem(name);
        let canonical = format!("{stem}{}", format.extension());
        let utc = TimeZone::UTC;
        let exact = period
            .start(stem, &utc)
            .is_some_and(|start| period.key(start, &utc) == stem);
        (canonical == name && exact).then(|| (period, name.to_owned()))
    }
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix.is_empty() {
            true => write!(f, "s3://{}", self.bucket),
            false => write!(f, "s3://{}/{}", self.bucket, self.prefix),
        }
    }
}

/// `s3://bucket/rest` → (bucket, rest without a trailing `/`), with the bucket checked.
fn split_s3(text: &str) -> Result<(&str, &str), String> {
    let rest = text
        .strip_prefix("s3://")
        .ok_or("must start with s3:// (s3://bucket or s3://bucket/prefix)")?;
    if rest.contains(['?', '#']) {
        return Err("must not have a query or fragment (`?`, `#`)".to_owned());
    }
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.contains('@') {
        return Err(
            "holds credentials: never put them in the configuration; set \
             AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
                .to_owned(),
        );
    }
    check_bucket(bucket)?;
    Ok((bucket, path.trim_end_matches('/')))
}

/// S3's bucket naming rules: 3–63 of `a-z 0-9 . -`, starting and ending with a letter or digit.
fn check_bucket(bucket: &str) -> Result<(), String> {
    let allowed = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let ends = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if (3..=63).contains(&bucket.len())
        && allowed
        && ends(bucket.bytes().next())
        && ends(bucket.bytes().last())
    {
        return Ok(());
    }
    Err(format!(
        "the bucket {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, dots \
         and hyphens, starting and ending with a letter or digit)"
    ))
}

/// Checks `archive.remote.endpoint`: empty, or an `https://` (or, with `allow_http`,
/// `http://`) address without credentials, query or fragment.
pub fn check_endpoint(endpoint: &str, allow_http: bool) -> Result<(), String> {
    if endpoint.is_empty() {
        return Ok(());
    }
    let rest = if let Some(rest) = endpoint.strip_prefix("https://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("http://") {
        if !allow_http {
            return Err(
                "is plain http://, which archive.remote.allow_http = false refuses: \
                 use https://, or set allow_http = true for a test server on loopback"
                    .to_owned(),
            );
        }
        rest
    } else {
        return Err(
            "must be an address such as \"https://minio.example.net:9000\" (or empty for AWS)"
                .to_owned(),
        );
    };
    let host = rest.split('/').next().unwrap_or("");
    if host.contains('@') {
        return Err(
            "holds credentials: never put them in the configuration; set \
             AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
                .to_owned(),
        );
    }
    if host.is_empty() || rest.contains(['?', '#', ' ']) {
        return Err("is not a host with an optional port and path".to_owned());
    }
    Ok(())
}

/// The object a restore names: `s3://bucket/key` → the bucket (with no prefix) and the key,
/// whose file name must be an archive's.
pub fn parse_object_url(text: &str) -> Result<(RemoteUrl, String), String> {
    let (bucket, key) = split_s3(text)?;
    if key.is_empty() {
        return Err("names a bucket, not an object: s3://bucket/prefix/Daily/<name>".to_owned());
    }
    ObjectPath::parse(key).map_err(|_| "has an empty, `.` or `..` part".to_owned())?;
    let name = key.rsplit('/').next().unwrap_or(key);
    if Format::from_name(name).is_none() {
        return Err(
            "its name does not say its format: it must end in .tar.zst, .tar.gz, .tgz, .zip \
             or .tar"
                .to_owned(),
        );
    }
    let url = RemoteUrl {
        bucket: bucket.to_owned(),
        prefix: String::new(),
    };
    Ok((url, key.to_owned()))
}

/// Retries after a failed upload: `first`, then twice as long each time, at most `max`, for
/// as long as it takes (`archive.remote.retry_initial`, `retry_max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Backoff {
    /// The wait after `failures` failures in a row (1 for the first).
    pub fn after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.first
            .checked_mul(1 << doublings)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

/// What `[archive.remote]` hands persistence: where, how to reach it, how to retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The bucket and prefix.
    pub url: RemoteUrl,
    /// The store's address for S3-compatible stores; `None`: AWS (from the region).
    pub endpoint: Option<String>,
    /// Plain `http://` allowed (a test server on loopback).
    pub allow_http: bool,
    /// Waits between attempts after a failure.
    pub retry: Backoff,
    /// Files this large or larger go up in parts.
    pub multipart_bytes: u64,
    /// The size of each part (at least 5 MiB: S3's minimum).
    pub part_bytes: usize,
}

impl Remote {
    /// The settings for `url`, with the default endpoint, retries and part sizes.
    pub fn new(url: RemoteUrl) -> Remote {
        Remote {
            url,
            endpoint: None,
            allow_http: false,
            retry: Backoff {
                first: Duration::from_secs(5),
                max: Duration::from_secs(600),
            },
            multipart_bytes: DEFAULT_MULTIPART_BYTES,
            part_bytes: DEFAULT_PART_BYTES,
        }
    }
}

/// Why an operation on the store failed, as `/metrics` counts it
/// (`shardloop_offsite_failures_total{cause}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// The store could not be reached (connection refused or reset, timeouts, DNS).
    Unreachable,
    /// The store refused the credentials or the operation (401, 403).
    Denied,
    /// The object's name is taken by another object (never overwritten).
    Conflict,
    /// The object is not what was uploaded: size or checksum differ.
    Mismatch,
    /// The local archive could not be read.
    Local,
    /// Anything else the store answered (a missing bucket, a server error).
    Store,
}

impl Cause {
    /// Every cause, in label order.
    pub const ALL: [Cause; 6] = [
        Cause::Unreachable,
        Cause::Denied,
        Cause::Conflict,
        Cause::Mismatch,
        Cause::Local,
        Cause::Store,
    ];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Unreachable => "unreachable",
            Cause::Denied => "denied",
            Cause::Conflict => "conflict",
            Cause::Mismatch => "mismatch",
            Cause::Local => "local",
            Cause::Store => "store",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A failed operation: why (for the counters) and what happened (for the operator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The class of failure.
    pub cause: Cause,
    /// What failed and why, naming the object or file.
    pub message: String,
}

impl Failure {
    fn new(cause: Cause, message: impl Into<String>) -> Failure {
        Failure {
            cause,
            message: message.into(),
        }
    }

    fn local(what: &str, path: &Path, e: io::Error) -> Failure {
        Failure::new(Cause::Local, format!("{what} {}: {e}", path.display()))
    }

    /// A store error while doing `what` (naming the object).
    fn store(what: String, e: object_store::Error) -> Failure {
        let cause = match &e {
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Cause::Denied,
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => Cause::Conflict,
            other if unreachable(other) => Cause::Unreachable,
            _ => Cause::Store,
        };
        Failure::new(cause, format!("{what}: {}", one_line(&e)))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.cause)
    }
}

impl std::error::Error for Failure {}

/// The store could not be reached: an I/O error (refused, reset, timed out) somewhere in the
/// chain, or the client saying it could not connect or send.
fn unreachable(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(e) = source {
        if e.downcast_ref::<io::Error>().is_some() {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if ["error sending request", "connect", "timed out", "dns error"]
            .iter()
            .any(|s| text.contains(s))
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// An error and its causes on one line (the client's errors nest several deep).
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = inner.source();
    }
    text.replace('\n', " ")
}

/// A file's size and SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sum {
    /// Its size, bytes.
    pub bytes: u64,
    /// The SHA-256 of its bytes.
    pub sha256: [u8; 32],
}

impl Sum {
    /// The SHA-256 in lowercase hex, as the object's metadata holds it.
    pub fn hex(&self) -> String {
        self.sha256.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The sum of `bytes`.
pub fn sum_bytes(bytes: &[u8]) -> Sum {
    Sum {
        bytes: bytes.len() as u64,
        sha256: Sha256::digest(bytes).into(),
    }
}

/// Reads `path` through and sums it. Blocking.
pub fn sum_file(path: &Path) -> io::Result<Sum> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 256 << 10];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(Sum {
        bytes,
        sha256: hasher.finalize().into(),
    })
}

/// An object as a `HEAD` request sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Its size, bytes.
    pub bytes: u64,
    /// The SHA-256 its metadata records (`None`: not written by a shard).
    pub sha256: Option<String>,
    /// The manifest its metadata records, as text.
    pub manifest: Option<String>,
}

impl Stat {
    /// The object is the file `sum` describes: same size, and the checksum it records is
    /// the file's.
    pub fn matches(&self, sum: &Sum) -> bool {
        self.bytes == sum.bytes && self.sha256.as_deref() == Some(sum.hex().as_str())
    }
}

/// An object under the prefix named as an archive (`<prefix>/<Kind>/<period><extension>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its full name in the bucket.
    pub key: String,
    /// The archive's kind.
    pub period: Period,
    /// The archive's file name (`2026-12-03.tar.zst`).
    pub name: String,
    /// Its size, bytes.
    pub bytes: u64,
}

impl Object {
    /// The period key of its name (`2026-12-03`).
    pub fn period_key(&self) -> &str {
        Format::from_name(&self.name).map_or(&self.name, |f| f.stem(&self.name))
    }
}

/// A download that arrived whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    /// Where it was written.
    pub path: PathBuf,
    /// Its size, bytes.
    pub bytes: u64,
    /// `true` when the object recorded a checksum and the bytes matched it; `false` when it
    /// recorded none (not uploaded by a shard: the restore's own checks are all there is).
    pub checksum_verified: bool,
}

/// The most a restore downloads, given the limits it unpacks within: the tar stream those
/// limits allow, plus 1/64 and 64 KiB for a compressed stream that came out larger than its
/// input and a zip's directory. A larger object is refused before a byte is read.
pub fn download_limit(limits: &Limits) -> u64 {
    let stream = limits.stream_bytes();
    stream.saturating_add(stream / 64).saturating_add(64 << 10)
}

/// The bucket, as the client reaches it.
#[derive(Debug, Clone)]
pub struct Store {
    objects: Arc<dyn ObjectStore>,
    url: RemoteUrl,
    multipart_bytes: u64,
    part_bytes: usize,
}

impl Store {
    /// The client for `remote`, with credentials and region from the `AWS_*` environment
    /// (object_store's `from_env`). Reads the environment; no request is made.
    pub fn open(remote: &Remote) -> Result<Store, String> {
        let first = remote.retry.first;
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: first.min(Duration::from_millis(100)),
                max_backoff: remote.retry.max.min(Duration::from_secs(2)),
                base: 2.0,
            },
            // A few quick tries inside one attempt; the uploader's own backoff (which
            // outlasts an outage of hours) does the rest.
            max_retries: 2,
            retry_timeout: Duration::from_secs(30),
        };
        let client = |key| AmazonS3ConfigKey::Client(key);
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(remote.url.bucket())
            .with_allow_http(remote.allow_http)
            .with_retry(retry)
            .with_config(
                client(ClientConfigKey::ConnectTimeout),
                humantime::format_duration(CONNECT_TIMEOUT).to_string(),
            )
            .with_config(
                client(ClientConfigKey::Timeout),
                humantime::format_duration(REQUEST_TIMEOUT).to_string(),
            );
        if let Some(endpoint) = &remote.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let objects = builder.build().map_err(|e| one_line(&e))?;
        Ok(Store::wrap(Arc::new(objects), remote))
    }

    /// A store on `objects` (another client, or one wrapped, e.g. in object_store's
    /// `ThrottledStore` to play a slow link), named and sized as `remote` says.
    pub fn wrap(objects: Arc<dyn ObjectStore>, remote: &Remote) -> Store {
        Store {
            objects,
            url: remote.url.clone(),
            multipart_bytes: remote.multipart_bytes,
            part_bytes: remote.part_bytes.max(5 << 20),
        }
    }

    /// Where it is.
    pub fn url(&self) -> &RemoteUrl {
        &self.url
    }

    /// Uploads `file` (whose size and checksum are `sum`) as the object `key`, never over an
    /// existing one: one conditional `PUT` (`PutMode::Create`) below the multipart size, else
    /// a multipart upload, after checking the name is free (S3 completes multipart uploads
    /// unconditionally). The metadata carries the checksum, and the save's `manifest` if it
    /// is short enough. The caller verifies with [`stat`](Self::stat).
    pub async fn upload(
        &self,
        file: &Path,
        key: &str,
        sum: &Sum,
        manifest: Option<&str>,
    ) -> Result<(), Failure> {
        if sum.bytes < self.multipart_bytes {
            let bytes = std::fs::read(file).map_err(|e| Failure::local("reading", file, e))?;
            return self.upload_bytes(bytes, key, sum, manifest).await;
        }
        let location = object_path(key)?;
        let attributes = attributes(sum, manifest);
        let uploading = || format!("uploading {}", self.url.object_url(key));
        if self.stat(key).await?.is_some() {
            return Err(Failure::new(
                Cause::Conflict,
                format!("{}: the name is taken", self.url.object_url(key)),
            ));
        }
        let options = PutMultipartOptions {
            attributes,
            ..PutMultipartOptions::default()
        };
        let upload = self
            .objects
            .put_multipart_opts(&location, options)
            .await
            .map_err(|e| Failure::store(uploading(), e))?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, self.part_bytes);
        match self.send_parts(file, &mut parts).await {
            Ok(()) => parts
                .finish()
                .await
                .map(|_| ())
                .map_err(|e| Failure::store(uploading(), e)),
            Err(failure) => {
                // Best effort: an upload left open costs storage until a lifecycle rule
                // aborts it (docs/backups-and-archives.md, "Costs").
                let _ = parts.abort().await;
                Err(failure)
            }
        }
    }

    /// Uploads `bytes` (whose sum is `sum`, below the multipart size) as the object `key` in
    /// one conditional `PUT` (`PutMode::Create`): [`upload`](Self::upload) for a caller that
    /// holds the file's bytes already.
    pub async fn upload_bytes(
        &self,
        bytes: Vec<u8>,
        key: &str,
        sum: &Sum,
        manifest: Option<&str>,
    ) -> Result<(), Failure> {
        let options = PutOptions {
            mode: PutMode::Create,
            attributes: attributes(sum, manifest),
            ..PutOptions::default()
        };
        self.objects
            .put_opts(&object_path(key)?, PutPayload::from(bytes), options)
            .await
            .map(|_| ())
            .map_err(|e| Failure::store(format!("uploading {}", self.url.object_url(key)), e))
    }

    /// Whether a file of `bytes` goes up in one `PUT` ([`upload_bytes`](Self::upload_bytes))
    /// rather than in parts.
    pub fn in_one_put(&self, bytes: u64) -> bool {
        bytes < self.multipart_bytes
    }

    /// Feeds `file` to a multipart upload, a part at a time, at most [`PARTS_IN_FLIGHT`]
    /// parts in flight.
    async fn send_parts(&self, file: &Path, parts: &mut WriteMultipart) -> Result<(), Failure> {
        let mut input = File::open(file).map_err(|e| Failure::local("reading", file, e))?;
        let mut buf = vec![0; self.part_bytes];
        loop {
            parts
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| Failure::store(format!("uploading {}", file.display()), e))?;
            let n =
                read_full(&mut input, &mut buf).map_err(|e| Failure::local("reading", file, e))?;
            if n == 0 {
                return Ok(());
            }
            parts.write(&buf[..n]);
        }
    }

    /// The object `key` as a `HEAD` sees it, with the metadata a shard writes; `None` if
    /// there is none by that name.
    pub async fn stat(&self, key: &str) -> Result<Option<Stat>, Failure> {
        let location = object_path(key)?;
        let options = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.objects.get_opts(&location, options).await {
            Ok(found) => {
                let meta = |k: &'static str| {
                    found
                        .attributes
                        .get(&Attribute::Metadata(k.into()))
                        .map(|v| v.as_ref().to_owned())
                };
                Ok(Some(Stat {
                    bytes: found.meta.size,
                    sha256: meta(SHA256_KEY),
                    manifest: meta(MANIFEST_KEY).map(|m| unescape(&m)),
                }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Failure::store(
                format!("looking up {}", self.url.object_url(key)),
                e,
            )),
        }
    }

    /// Every object under the prefix named as an archive (oldest period first within a
    /// kind), and how many other objects are there (never touched).
    pub async fn archives(&self) -> Result<(Vec<Object>, usize), Failure> {
        let prefix = match self.url.prefix.is_empty() {
            true => None,
            false => Some(object_path(&self.url.prefix)?),
        };
        let mut listing = self.objects.list(prefix.as_ref());
        let (mut archives, mut others) = (Vec::new(), 0);
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| Failure::store(format!("listing {}", self.url), e))?;
            let key = meta.location.to_string();
            match self.url.archive_of(&key) {
                Some((period, name)) => archives.push(Object {
                    key,
                    period,
                    name,
                    bytes: meta.size,
                }),
                None => others += 1,
            }
        }
        archives.sort_by(|a, b| (a.period, a.period_key()).cmp(&(b.period, b.period_key())));
        Ok((archives, others))
    }

    /// Deletes the object `key`.
    pub async fn delete(&self, key: &str) -> Result<(), Failure> {
        let location = object_path(key)?;
        self.objects
            .delete_stream(futures::stream::iter([Ok(location)]).boxed())
            .next()
            .await
            .transpose()
            .map(|_| ())
            .map_err(|e| Failure::store(format!("deleting {}", self.url.object_url(key)), e))
    }

    /// Downloads the object `key` into a new file `dest`, refusing an object larger than
    /// `max_bytes` before reading a byte (and stopping if more arrives than it said), and
    /// comparing what arrived with the checksum it records. On an error `dest` may be left
    /// part-written: the caller's temp directory holds it.
    pub async fn download(
        &self,
        key: &str,
        dest: &Path,
        max_bytes: u64,
    ) -> Result<Downloaded, Failure> {
        let url = self.url.object_url(key);
        let stat = self
            .stat(key)
            .await?
            .ok_or_else(|| Failure::new(Cause::Store, format!("{url}: there is no such object")))?;
        if stat.bytes > max_bytes {
            return Err(Failure::new(
                Cause::Mismatch,
                format!(
                    "{url} is {} bytes, more than the {max_bytes} a restore downloads \
                     (archive.max_restore_bytes allows no more): refused before downloading",
                    stat.bytes
                ),
            ));
        }
        let location = object_path(key)?;
        let got = self
            .objects
            .get_opts(&location, GetOptions::default())
            .await
            .map_err(|e| Failure::store(format!("downloading {url}"), e))?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(|e| Failure::local("creating", dest, e))?;
        let mut hasher = Sha256::new();
        let mut bytes = 0u64;
        let mut stream = got.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Failure::store(format!("downloading {url}"), e))?;
            bytes += chunk.len() as u64;
            if bytes > stat.bytes.min(max_bytes) {
                return Err(Failure::new(
                    Cause::Mismatch,
                    format!(
                        "{url} sent more than the {} bytes it said it holds",
                        stat.bytes
                    ),
                ));
            }
            hasher.update(&chunk);
            out.write_all(&chunk)
                .map_err(|e| Failure::local("writing", dest, e))?;
        }
        out.sync_all()
            .map_err(|e| Failure::local("syncing", dest, e))?;
        let sum = Sum {
            bytes,
            sha256: hasher.finalize().into(),
        };
        if bytes != stat.bytes {
            return Err(Failure::new(
                Cause::Mismatch,
                format!(
                    "{url}: {bytes} bytes arrived of the {} it holds",
                    stat.bytes
                ),
            ));
        }
        let checksum_verified = match &stat.sha256 {
            Some(recorded) if *recorded != sum.hex() => {
                return Err(Failure::new(
                    Cause::Mismatch,
                    format!(
                        "{url}: what arrived has SHA-256 {}, not the {recorded} the object \
                         records",
                        sum.hex()
                    ),
                ));
            }
            Some(_) => true,
            None => false,
        };
        Ok(Downloaded {
            path: dest.to_owned(),
            bytes,
            checksum_verified,
        })
    }
}

/// The archives in the bucket as `restore --list` shows them: size, and the counts of the
/// manifest their metadata records (one `HEAD` each, a few at a time; nothing downloaded).
pub async fn listed(store: &Store) -> Result<Vec<Listed>, Failure> {
    let (objects, _others) = store.archives().await?;
    let stats: Vec<Result<Option<Stat>, Failure>> = futures::stream::iter(&objects)
        .map(|object| store.stat(&object.key))
        .buffered(8)
        .collect()
        .await;
    let mut listed = Vec::with_capacity(objects.len());
    for (object, stat) in objects.iter().zip(stats) {
        let url = store.url().object_url(&object.key);
        let manifest = match stat?.and_then(|s| s.manifest) {
            Some(text) => Manifest::parse(&text).map_err(|e| {
                UnreadableManifest::Remote(format!("the manifest its metadata records: {e}"))
            }),
            None => Err(UnreadableManifest::Remote(
                "no manifest in its metadata (not uploaded by a shard)".to_owned(),
            )),
        };
        listed.push(Listed {
            kind: ListedKind::Remote,
            group: object.period.dir_name().to_owned(),
            path: PathBuf::from(&url),
            name: url,
            bytes: object.bytes,
            manifest,
        });
    }
    Ok(listed)
}

/// The metadata an object gets: its checksum, and the save's manifest if it fits.
fn attributes(sum: &Sum, manifest: Option<&str>) -> Attributes {
    let mut attributes = Attributes::new();
    attributes.insert(Attribute::Metadata(SHA256_KEY.into()), sum.hex().into());
    if let Some(escaped) = manifest
        .map(escape)
        .filter(|e| e.len() <= MAX_MANIFEST_METADATA)
    {
        attributes.insert(Attribute::Metadata(MANIFEST_KEY.into()), escaped.into());
    }
    attributes
}

fn object_path(key: &str) -> Result<ObjectPath, Failure> {
    ObjectPath::parse(key)
        .map_err(|e| Failure::new(Cause::Store, format!("{key:?} is not an object name: {e}")))
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(input: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Text as an HTTP header value keeps it: `%` and every byte that is not visible ASCII become
/// `%XX` (so newlines, spaces and non-ASCII survive the trip through metadata).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for b in text.bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`escape`] (a `%` not followed by two hex digits stays as it is).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `AWS_*` variables among `vars` that the client reads, for an operator: names always,
/// values only when they are no secret (a region, an endpoint without credentials, a flag).
/// Credentials, tokens and key ids show as `(redacted)`.
pub fn aws_environment(vars: impl IntoIterator<Item = (String, String)>) -> String {
    let mut shown: Vec<String> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with("AWS_"))
        .map(|(name, value)| {
            let secret = [
                "KEY",
                "SECRET",
                "TOKEN",
                "PASSWORD",
                "CREDENTIAL",
                "SESSION",
            ]
            .iter()
            .any(|s| name.contains(s));
            let value = if secret || value.contains('@') {
                "(redacted)".to_owned()
            } else {
                format!("{value:?}")
            };
            format!("{name}={value}")
        })
        .collect();
    shown.sort();
    match shown.is_empty() {
        true => "no AWS_* variable is set: credentials must come from the machine's role".into(),
        false => shown.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_a_prefix_and_refuse_the_rest() {
        let url = RemoteUrl::parse("s3://shard-backups/eu/shard-1/").unwrap();
        assert_eq!(
            (url.bucket(), url.prefix()),
            ("shard-backups", "eu/shard-1")
        );
        assert_eq!(url.to_string(), "s3://shard-backups/eu/shard-1");
        assert_eq!(
            url.key(Period::Daily, "2026-12-03.tar.zst"),
            "eu/shard-1/Daily/2026-12-03.tar.zst"
        );
        let root = RemoteUrl::parse("s3://bkt").unwrap();
        assert_eq!(root.key(Period::Hourly, "x.tar"), "Hourly/x.tar");
        for bad in [
            "",
            "https://bkt/p",
            "s3://",
            "s3://Bkt",
            "s3://bk",
            "s3://-bkt",
            "s3://key:secret@bkt/p",
            "s3://bkt/a//b",
            "s3://bkt/a/../b",
            "s3://bkt/p?x=1",
        ] {
            assert!(RemoteUrl::parse(bad).is_err(), "{bad:?} parsed");
        }
        let why = RemoteUrl::parse("s3://key:secret@bkt").unwrap_err();
        assert!(why.contains("AWS_ACCESS_KEY_ID"), "{why}");
    }

    #[test]
    fn only_names_shaped_as_archives_under_the_prefix_are_archives() {
        let url = RemoteUrl::parse("s3://bkt/shard").unwrap();
        let daily = url.archive_of("shard/Daily/2026-12-03.tar.zst");
        assert_eq!(
            daily,
            Some((Period::Daily, "2026-12-03.tar.zst".to_owned()))
        );
        assert!(url.archive_of("shard/Hourly/2026-12-03-10.zip").is_some());
        for foreign in [
            "shard/Daily/notes.txt",
            "shard/Daily/2026-12-03.tar.zst.bak",
            "shard/Daily/2026-13-03.tar.zst",
            "shard/Daily/2026-12-03-10.tar.zst",
            "shard/Daily/x/2026-12-03.tar.zst",
            "shard/Weekly/2026-12-03.tar.zst",
            "shard2/Daily/2026-12-03.tar.zst",
            "other/Daily/2026-12-03.tar.zst",
            "shard/Daily/2026-12-03.TAR.ZST",
        ] {
            assert_eq!(url.archive_of(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn endpoints_and_object_urls_are_checked() {
        assert!(check_endpoint("", false).is_ok());
        assert!(check_endpoint("https://minio.example.net:9000", false).is_ok());
        assert!(check_endpoint("http://127.0.0.1:9000", true).is_ok());
        let why = check_endpoint("http://127.0.0.1:9000", false).unwrap_err();
        assert!(why.contains("allow_http"), "{why}");
        assert!(check_endpoint("https://user:pw@host", false).is_err());
        assert!(check_endpoint("minio:9000", false).is_err());
        let (url, key) = parse_object_url("s3://bkt/p/Daily/2026-12-03.tar.zst").unwrap();
        assert_eq!(
            (url.bucket(), key.as_str()),
            ("bkt", "p/Daily/2026-12-03.tar.zst")
        );
        assert!(parse_object_url("s3://bkt/p/Daily/notes.txt").is_err());
        assert!(parse_object_url("s3://bkt").is_err());
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let b = Backoff {
            first: Duration::from_secs(5),
            max: Duration::from_secs(60),
        };
        let waits: Vec<u64> = (1..=6).map(|n| b.after(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
        assert_eq!(b.after(1000), Duration::from_secs(60));
    }

    #[test]
    fn manifests_survive_escaping_and_secrets_are_redacted() {
        let text = "format = 1\ncreated = \"2026-12-03T10:00:00Z\"\n# 100% ünïcode\n";
        let escaped = escape(text);
        assert!(escaped.bytes().all(|b| b.is_ascii_graphic()), "{escaped}");
        assert_eq!(unescape(&escaped), text);
        let env = [
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let shown = aws_environment(env);
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("AKIAEXAMPLE"),
            "{shown}"
        );
        assert!(
            shown.contains("AWS_DEFAULT_REGION=\"eu-west-1\""),
            "{shown}"
        );
        assert!(
            shown.contains("AWS_SECRET_ACCESS_KEY=(redacted)"),
            "{shown}"
        );
        assert!(!shown.contains("HOME"), "{shown}");
    }

    #[test]
    fn the_download_limit_leaves_room_for_a_compressed_stream() {
        let limits = Limits::default();
        assert!(download_limit(&limits) > limits.stream_bytes());
        assert!(download_limit(&limits) < limits.stream_bytes() / 32 * 33 + (1 << 20));
    }
}
