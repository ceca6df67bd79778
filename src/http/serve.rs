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
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::scope::ConnectionScope;
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
    let max = options.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let upgrades = Arc::new(Semaphore::new(
        max - crate::scope::reserved_for_requests(max),
    ));
    let (closing, closing_rx) = watch::channel(false);
    // HTTP/1.1 (SSE and WebSocket upgrades): its header-read timeout runs from the start of the
    // connection, so one that sends nothing is closed too.
    let mut builder = http1::Builder::new();
    builder
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
        // Every request carries the connection's scope; an upgraded connection keeps it (and
        // so its slot) for its whole life.
        let scope = ConnectionScope::new(slot, closing_rx.clone(), upgrades.clone());
        let request_scope = scope.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(request_scope.clone());
            app.clone().oneshot(req)
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let mut closing = closing_rx.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = async { let _ = closing.wait_for(|c| *c).await; } => {
                    // Finish the request in flight, take no other.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(scope);
        });
    }
    drop(listener);
    let _ = closing.send(true);
    // Every connection gives its slot back when it ends.
    let all = slots.acquire_many(max as u32);
    if tokio::time::timeout(options.drain, all).await.is_err() {
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
