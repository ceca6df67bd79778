//! What the webhook dispatcher runs with (from `config/webhooks.rs`: flags, `CODEBUFFD_*`,
//! config files).

use std::time::Duration;

use super::backoff::Backoff;
use super::secret::Secret;
use super::ssrf::AllowList;
use crate::store::outbox::TypeMask;

/// The event types delivered when `--webhook-events` is not given.
pub const DEFAULT_EVENTS: [&str; 4] = [
    "question.requested",
    "permission.requested",
    "turn.ended",
    "session.ended",
];

/// The webhook settings of a daemon.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSettings {
    /// The daemon's endpoints: every session's events of `events` go to each.
    pub urls: Vec<String>,
    /// Signing keys; the first signs, all sign while rotating (none: webhooks are off).
    pub secrets: Vec<Secret>,
    /// The event types sent to `urls`.
    pub events: TypeMask,
    /// Sessions may name endpoints of their own at creation.
    pub allow_session_webhooks: bool,
    /// Hosts session endpoints may use despite the SSRF rules (`ssrf.rs`).
    pub allow_hosts: AllowList,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// How long one request may take (connect, send, answer).
    pub timeout: Duration,
    pub backoff: Backoff,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            urls: Vec::new(),
            secrets: Vec::new(),
            events: default_mask(),
            allow_session_webhooks: false,
            allow_hosts: AllowList::default(),
            concurrency: 16,
            timeout: Duration::from_secs(10),
            backoff: Backoff {
                base: Duration::from_secs(5),
                horizon: Duration::from_secs(24 * 3600),
            },
        }
    }
}

impl WebhookSettings {
    /// Whether anything is ever delivered.
    pub fn enabled(&self) -> bool {
        !self.secrets.is_empty() && (!self.urls.is_empty() || self.allow_session_webhooks)
    }

    /// How long a claim holds: the request's timeout and then some, so a live delivery is
    /// never claimed twice, and a dead process's claims pass to another within a minute.
    pub fn lease(&self) -> Duration {
        self.timeout + Duration::from_secs(30)
    }

    /// How often the outbox is looked at without being told of new rows (retries that came
    /// due, rows another process wrote).
    pub fn poll_interval(&self) -> Duration {
        self.backoff
            .base
            .clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// [`DEFAULT_EVENTS`] as a set.
pub fn default_mask() -> TypeMask {
    TypeMask::from_names(DEFAULT_EVENTS).unwrap_or_default()
}
