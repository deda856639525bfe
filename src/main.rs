//! The `shardloop` binary: for now, an empty event loop that runs until Ctrl-C (or SIGTERM)
//! and prints its counters on the way out. The shard itself arrives with the next issue.

use shardloop::EventLoop;
use tracing_subscriber::EnvFilter;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("shardloop: cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    runtime.block_on(async {
        let mut event_loop = EventLoop::builder().probe_host(true).build();
        let ctx = event_loop.context();
        tokio::spawn(async move {
            wait_for_stop_signal().await;
            tracing::info!("stop requested; finishing the current iteration");
            ctx.shutdown();
        });
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            "shardloop running; Ctrl-C stops it"
        );
        event_loop.run().await;
        let stats = event_loop.stats();
        tracing::info!(?stats, "stopped cleanly");
    });
}

/// Ctrl-C, or SIGTERM from a service manager.
async fn wait_for_stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
