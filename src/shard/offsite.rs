//! Off-site archives, as the shard runs them: the uploader started beside the archiver when
//! `[archive.remote]` names a bucket, woken after every rollup, asking the archiver for a prune
//! once it has verified archives that retention was holding, and stopped at shutdown.
//!
//! Owns that wiring and the startup lines about it (which `AWS_*` variables are set, never
//! their secret values). The uploads themselves are `persist::archive::upload`'s, on their own
//! thread. Must never block the loop.

use std::time::Duration;

use crate::config::Config;
use crate::persist::Clock;
use crate::persist::archive::Archiver;
use crate::persist::archive::remote::{self, Store};
use crate::persist::archive::upload::Uploader;

use super::ShardError;

/// How long the shutdown waits for an upload in progress (what is left goes at the next
/// start).
pub(super) const STOP_GRACE: Duration = Duration::from_secs(10);

/// The uploader, when `archive.remote.url` is set and archives are on. A first pass starts at
/// once; every rollup or prune that ends wakes it.
pub(super) fn start(
    config: &Config,
    archiver: &Option<Archiver>,
    clock: Clock,
) -> Result<Option<Uploader>, ShardError> {
    let Some(remote) = config.archive.remote.remote() else {
        return Ok(None);
    };
    let Some(archiver) = archiver else {
        tracing::warn!(
            url = %remote.url,
            "archive.remote is set but archives are off (archive.enabled = false): nothing is \
             uploaded"
        );
        return Ok(None);
    };
    let store = Store::open(&remote).map_err(ShardError::Offsite)?;
    tracing::info!(
        url = %remote.url,
        endpoint = remote.endpoint.as_deref().unwrap_or("AWS"),
        environment = %remote::aws_environment(std::env::vars()),
        "archives go off-site"
    );
    if remote.allow_http {
        tracing::warn!(
            "archive.remote.allow_http = true: archives travel unencrypted (for a test server \
             on loopback)"
        );
    }
    let prune = archiver.clone();
    let uploader = Uploader::start(
        archiver.plan().clone(),
        store,
        remote.retry,
        clock,
        // Retention may now delete archives it kept until their copy was verified (a run
        // going now is followed by one more, which prunes too).
        Box::new(move || {
            prune.prune();
        }),
    )
    .map_err(|e| ShardError::Offsite(format!("cannot start the uploader's thread: {e}")))?;
    let wake = uploader.clone();
    archiver.after_each_run(move |_| wake.wake());
    Ok(Some(uploader))
}

/// At shutdown, after the last rollup: one last pass (what that rollup wrote goes up, if the
/// store is there), for at most [`STOP_GRACE`], then the uploader stops.
pub(super) async fn stop(uploader: &Option<Uploader>) {
    let Some(uploader) = uploader else { return };
    match uploader.stop(STOP_GRACE).await {
        None => tracing::warn!(
            "the off-site uploads did not finish within {}: what is left goes at the next start",
            humantime::format_duration(STOP_GRACE)
        ),
        Some(0) => {}
        Some(waiting) => {
            tracing::info!(waiting, "archives not yet off-site go at the next start")
        }
    }
}

/// `check-config`'s note on `[archive.remote]`, when it is on: which `AWS_*` variables the
/// client will read, secrets redacted.
pub(super) fn check_config_note(config: &Config) -> Option<String> {
    let remote = config.archive.remote.remote()?;
    Some(format!(
        "archive.remote: {} via {}; from the environment: {}",
        remote.url,
        remote.endpoint.as_deref().unwrap_or("AWS"),
        remote::aws_environment(std::env::vars())
    ))
}
