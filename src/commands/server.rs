//! `codebuffd server`: wires config, store, sessions and HTTP together, and owns shutdown.
//!
//! SIGTERM/SIGINT: stop accepting connections, end every running turn (killing its process
//! group and recording the ending), close the streams, exit 0.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::DaemonConfig;
use crate::engine::Engine;
use crate::http::{router, HttpOptions};
/// How long open connections get to finish after the sessions have stopped.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Runs the daemon until a shutdown signal.
pub async fn run(config: DaemonConfig) -> anyhow::Result<()> {
    let engine = Engine::start(&config.engine())?;
    let manager = engine.manager.clone();
    let app = router(
        manager.clone(),
        &HttpOptions {
            token: config.token.clone(),
            cors_allow_origins: config.cors_allow_origins.clone(),
            max_body_bytes: config.max_body_bytes,
            sse_keep_alive: config.sse_keep_alive,
        },
    );
    let addr = SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    // SSE writes are small: without TCP_NODELAY, Nagle's algorithm holds them back until the
    // client's delayed ACK (up to 40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tracing::info!(
        address = %axum::serve::Listener::local_addr(&listener).unwrap_or(addr),
        auth = config.token.is_some(),
        "codebuffd listening"
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app).with_graceful_shutdown({
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    });
    let mut server = std::pin::pin!(std::future::IntoFuture::into_future(server));
    tokio::select! {
        result = &mut server => return result.context("the HTTP server failed"),
        () = shutdown_signal() => {}
    }
    tracing::info!("shutting down: ending running turns");
    engine.shutdown().await;
    let _ = stop_tx.send(true);
    // Live SSE streams never end by themselves: give connections a moment, then stop.
    let _ = tokio::time::timeout(DRAIN_LIMIT, server).await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
