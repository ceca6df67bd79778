//! `codebuffd server`: wires config, store, sessions and HTTP together, and owns shutdown.
//!
//! SIGTERM/SIGINT: stop accepting connections, end every running turn (killing its process
//! group and recording the ending), close the streams, exit 0.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use super::signals::ShutdownSignals;
use crate::config::DaemonConfig;
use crate::engine::Engine;
use crate::http::{default_max_connections, router, serve, HttpOptions, ServeOptions};
/// How long open connections get to finish after the sessions have stopped.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Runs the daemon until a shutdown signal.
pub async fn run(config: DaemonConfig) -> anyhow::Result<()> {
    // Before anything else: a SIGTERM right after the ready line must stop the daemon cleanly.
    let mut signals = ShutdownSignals::install();
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let engine = Engine::start(&config.engine())?;
    let manager = engine.manager.clone();
    let app = router(
        manager.clone(),
        &HttpOptions {
            token: config.token.clone(),
            cors_allow_origins: config.cors_allow_origins.clone(),
            allowed_hosts: config.allowed_hosts.clone(),
            bind: Some(config.host),
            max_body_bytes: config.max_body_bytes,
            sse_keep_alive: config.sse_keep_alive,
            ws: crate::ws::WsOptions {
                heartbeat_timeout: config.ws_heartbeat_timeout,
                default_agent: config.ws_default_agent.clone(),
                max_frame_bytes: config.ws_max_frame_bytes,
                question_timeout: config.ws_question_timeout,
            },
            data_dir: Some(config.data_dir.clone()),
            webhooks: Some(engine.webhooks.clone()),
            metrics_no_auth: config.metrics_no_auth,
            acp: config.acp,
        },
    );
    let addr = SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let address = listener.local_addr().unwrap_or(addr);
    let max_connections = config
        .max_connections
        .unwrap_or_else(|| default_max_connections(engine.open_files));
    tracing::info!(
        %address,
        auth = config.token.is_some(),
        max_connections,
        "codebuffd listening"
    );
    engine.announce_url(&local_url(address));
    // Started: the code only starting ran leaves the resident set (see startup_pages.rs).
    let released = crate::startup_pages::release();
    tracing::debug!(released_bytes = released, "startup code pages released");
    announce_ready(address);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let options = ServeOptions {
        max_connections,
        header_read_timeout: config.header_read_timeout,
        drain: DRAIN_LIMIT,
    };
    let stopped = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let mut server = std::pin::pin!(serve(listener, app, options, stopped));
    tokio::select! {
        result = &mut server => return result.context("the HTTP server failed"),
        () = signals.recv() => {}
    }
    tracing::info!("shutting down: ending running turns");
    engine.shutdown().await;
    let _ = stop_tx.send(true);
    // Live SSE streams never end by themselves: the server gives connections a moment, then stops.
    server.await.context("the HTTP server failed")?;
    tracing::info!("stopped");
    Ok(())
}

/// Tells whoever started the daemon that it is ready, in one JSON line on stdout (the only
/// thing the server prints there): `{"event":"listening","address":…,"url":…,"pid":…}`.
fn announce_ready(address: SocketAddr) {
    use std::io::Write;
    let line = serde_json::json!({
        "event": "listening",
        "address": address.to_string(),
        "url": format!("http://{address}"),
        "pid": std::process::id(),
    });
    let mut stdout = std::io::stdout().lock();
    // Nobody reading stdout is not an error.
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

/// The URL a client on this machine reaches the daemon at (loopback for a wildcard address).
fn local_url(address: SocketAddr) -> String {
    let mut address = address;
    if address.ip().is_unspecified() {
        let loopback: std::net::IpAddr = match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        address.set_ip(loopback);
    }
    format!("http://{address}")
}
