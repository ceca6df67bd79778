//! Webhooks (`docs/webhooks.md`): signed, durable deliveries of chosen events to orchestrators,
//! so they learn of questions, permission requests, turn ends and costs without holding a
//! stream per session.
//!
//! The store's writer records a row in its outbox (`store/outbox.rs`) in the same transaction
//! as each event an endpoint wants; the [dispatcher](dispatcher) claims due rows and delivers
//! them signed as the Standard Webhooks specification says ([`secret`]), with a timeout, and
//! retries with backoff ([`backoff`]) until a horizon. Sessions may name endpoints of their own
//! ([`session`]) when the daemon allows it, within the SSRF rules ([`ssrf`]).
//!
//! Layering: below `session/` (which validates and registers a session's endpoints), beside
//! `agent/` and `store/`; it uses `store/` and `universal/` only. [`Webhooks`] is started and
//! stopped by `engine.rs`.

mod backoff;
mod deliveries;
mod dispatcher;
mod payload;
mod secret;
mod session;
mod settings;
mod ssrf;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use backoff::Backoff;
pub use deliveries::{Delivery, DeliveryQuery, MAX_PAGE};
pub use payload::body;
pub use secret::{signature_header, Secret};
pub use session::{SessionWebhook, SessionWebhookPolicy, SessionWebhookSpec};
pub use settings::{WebhookSettings, DEFAULT_EVENTS};
pub use ssrf::{check_url, forbidden_ip, AllowList};

use crate::store::outbox::{OutboxRoute, TypeMask};
use crate::store::EventStore;
use crate::sync::LockExt;

/// How long shutdown waits for the dispatcher to give up its claims.
const STOP_LIMIT: Duration = Duration::from_secs(3);

/// The engine's webhooks: the daemon's routes in the store, the dispatcher task (when
/// anything is to be delivered), and the deliveries' listing.
pub struct Webhooks {
    store: Arc<dyn EventStore>,
    stop: watch::Sender<bool>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    policy: SessionWebhookPolicy,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks").finish_non_exhaustive()
    }
}

impl Webhooks {
    /// Registers the daemon's endpoints with the store's outbox and starts the dispatcher.
    /// Must be called within a tokio runtime.
    pub fn start(
        store: Arc<dyn EventStore>,
        settings: WebhookSettings,
        owner: &str,
    ) -> Result<Webhooks, String> {
        let (stop, stopped) = watch::channel(false);
        let policy = SessionWebhookPolicy {
            allow: settings.allow_session_webhooks && !settings.secrets.is_empty(),
            allow_hosts: settings.allow_hosts.clone(),
        };
        let mut task = None;
        if let Some(outbox) = store.outbox() {
            let daemon: Vec<OutboxRoute> = if settings.secrets.is_empty() {
                Vec::new()
            } else {
                settings
                    .urls
                    .iter()
                    .map(|url| OutboxRoute {
                        endpoint: url.as_str().into(),
                        session_scoped: false,
                        types: settings.events,
                    })
                    .collect()
            };
            outbox.routes().set_daemon(daemon);
            if settings.enabled() {
                tracing::info!(
                    endpoints = settings.urls.len(),
                    events = %settings.events.names().join(","),
                    session_webhooks = settings.allow_session_webhooks,
                    "webhooks on"
                );
                let ctx = dispatcher::Context::new(store.clone(), settings, owner.to_owned())?;
                task = Some(tokio::spawn(dispatcher::run(Arc::new(ctx), stopped)));
            }
        } else if settings.enabled() {
            return Err("this event store keeps no outbox: webhooks cannot be delivered".into());
        }
        Ok(Webhooks {
            store,
            stop,
            task: std::sync::Mutex::new(task),
            policy,
        })
    }

    /// What sessions may ask for (`webhooks` at creation).
    pub fn policy(&self) -> &SessionWebhookPolicy {
        &self.policy
    }

    /// The deliveries, newest first.
    pub async fn deliveries(&self, query: DeliveryQuery) -> Result<Vec<Delivery>, String> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || deliveries::list(&*store, &query))
            .await
            .map_err(|e| e.to_string())?
    }

    /// How many deliveries wait (for `/metrics`).
    pub async fn pending(&self) -> Option<u64> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.outbox().and_then(|o| o.pending().ok()))
            .await
            .ok()
            .flatten()
    }

    /// Stops the dispatcher: deliveries in flight are abandoned and the daemon's claims given
    /// up, so the rows are delivered at the next start (or by another daemon of the fleet).
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock_unpoisoned().take();
        if let Some(task) = task {
            if tokio::time::timeout(STOP_LIMIT, task).await.is_err() {
                tracing::warn!("the webhook dispatcher did not stop in time");
            }
        }
    }
}

/// Routes a session's events to the endpoints it named (before its first event is appended;
/// again when it is restored), or forgets them (`webhooks` empty: when it is deleted).
pub fn route_session(store: &dyn EventStore, session_id: &str, webhooks: &[SessionWebhook]) {
    let Some(outbox) = store.outbox() else {
        return;
    };
    let routes = webhooks
        .iter()
        .map(|w| OutboxRoute {
            endpoint: w.url.as_str().into(),
            session_scoped: true,
            types: w.events,
        })
        .collect();
    outbox.routes().set_session(session_id, routes);
}

/// A URL fit for logs and listings: scheme, host, port and path, without credentials, query
/// or fragment (which may hold tokens).
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// The set of event types named, checked.
pub fn event_mask(names: &[String]) -> Result<TypeMask, String> {
    TypeMask::from_names(names.iter().map(String::as_str)).map_err(|unknown| {
        format!(
            "`{unknown}` is not an event type; use any of {}",
            crate::universal::EVENT_TYPES.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials_or_query() {
        assert_eq!(
            redact_url("https://user:pw@hooks.example.com:8443/in/x?token=abc#f"),
            "https://hooks.example.com:8443/in/x"
        );
        assert_eq!(redact_url("::"), "(not a URL)");
    }
}
