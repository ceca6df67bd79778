//! Serving the API on a TCP listener, bounded: one task per connection, at most
//! `max_connections` at once (the daemon keeps file descriptors for its agents' pipes and its
//! store), request headers read within `header_read_timeout` (an idle or trickling connection
//! cannot hold a slot for ever), `TCP_NODELAY` (SSE writes are small), and a graceful stop.
//!
//! When every slot is taken, the daemon stops accepting until one frees: new connections wait
//! in the listen backlog instead of being accepted and starving everything else of descriptors.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

/// How a listener is served.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (also: to start its next
    /// request on a kept-alive connection).
    pub header_read_timeout: Duration,
    /// How long open connections get to finish once the server stops.
    pub drain: Duration,
}

/// How long to wait before accepting again after the process ran out of descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` completes, then lets open connections finish (at
/// most `options.drain`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let mut stop = std::pin::pin!(stop);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = &mut stop => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // EMFILE/ENFILE and friends: the connection waits in the backlog meanwhile.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            app.clone().oneshot(req)
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(options.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("some connections were still open when the server stopped");
    }
    Ok(())
}

/// The default connection limit for an open-files limit: half of what is left after a
/// reserve for the store, agents' pipes and everything else, at least 32, at most 16384.
pub fn default_max_connections(open_files: u64) -> usize {
    let usable = open_files.saturating_sub(256) / 2;
    usable.clamp(32, 16384) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_keeps_descriptors_for_everything_else() {
        assert_eq!(default_max_connections(1024), 384);
        assert_eq!(default_max_connections(100), 32);
        assert_eq!(default_max_connections(1 << 20), 16384);
    }
}
