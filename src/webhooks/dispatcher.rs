//! The dispatcher: one task that claims due rows of the store's outbox, and a task per
//! delivery in flight (at most `concurrency`), each one signed request with a timeout. It
//! runs beside the sessions, never in their way: a slow or dead receiver holds up only its
//! own deliveries, and turns never wait for any.
//!
//! The loop: claim as many rows as there are free slots (leased to this engine's id),
//! start a delivery per row, then wait for new rows (the writer says when it committed some),
//! a free slot, or the poll interval (retries that came due, rows of other processes). Each
//! attempt is settled in the store: delivered (a 2xx), tried again later (backoff with
//! jitter), or failed (past the horizon). Store calls run on blocking threads.

use std::sync::Arc;

use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::payload;
use super::secret::signature_header;
use super::settings::WebhookSettings;
use super::ssrf::{check_url, GuardedResolver};
use crate::metrics::metrics;
use crate::store::outbox::{now_ms, Claim, OutboxRow, Settlement};
use crate::store::EventStore;

/// The most of an error text kept with a row.
const MAX_ERROR: usize = 300;

/// What every delivery task shares.
pub(super) struct Context {
    pub store: Arc<dyn EventStore>,
    pub settings: WebhookSettings,
    /// This engine's id: the owner of its claims (a claim of a dead engine expires).
    pub owner: String,
    /// For the daemon's own endpoints.
    pub client: reqwest::Client,
    /// For endpoints sessions named: resolves through the SSRF guard, no proxy.
    pub session_client: reqwest::Client,
}

impl Context {
    pub fn new(
        store: Arc<dyn EventStore>,
        settings: WebhookSettings,
        owner: String,
    ) -> Result<Context, String> {
        let agent = concat!("codebuffd/", env!("CARGO_PKG_VERSION"), " (webhooks)");
        let client = reqwest::Client::builder()
            .user_agent(agent)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.timeout)
            .build()
            .map_err(|e| format!("cannot make the webhook client: {e}"))?;
        let session_client = reqwest::Client::builder()
            .user_agent(agent)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.timeout)
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver {
                allow: settings.allow_hosts.clone(),
            }))
            .build()
            .map_err(|e| format!("cannot make the webhook client: {e}"))?;
        Ok(Context {
            store,
            settings,
            owner,
            client,
            session_client,
        })
    }
}

/// Runs the dispatcher until `stop` turns true; then gives up its claims (the rows stay
/// pending for the next start, or another process).
pub(super) async fn run(ctx: Arc<Context>, mut stop: watch::Receiver<bool>) {
    let Some(routes) = ctx.store.outbox().map(|o| o.routes().clone()) else {
        return;
    };
    let slots = Arc::new(Semaphore::new(ctx.settings.concurrency.max(1)));
    let mut inflight = JoinSet::new();
    let poll = ctx.settings.poll_interval();
    let mut quiet_until = 0u64;
    let mut orphans_checked = 0u64;
    loop {
        while inflight.try_join_next().is_some() {}
        if now_ms() >= orphans_checked + ORPHANS_EVERY_MS {
            orphans_checked = now_ms();
            release_orphans(&ctx).await;
        }
        let free = slots.available_permits();
        let mut full = false;
        if free > 0 {
            match claim(&ctx, free).await {
                Ok(rows) => {
                    full = rows.len() == free;
                    for row in rows {
                        let Ok(slot) = slots.clone().try_acquire_owned() else {
                            break;
                        };
                        let ctx = ctx.clone();
                        inflight.spawn(async move {
                            deliver(&ctx, row).await;
                            drop(slot);
                        });
                    }
                }
                Err(error) => {
                    // Said once a minute at most (a degraded store fails every poll).
                    let now = now_ms();
                    if now >= quiet_until {
                        tracing::warn!(%error, "cannot claim webhook deliveries from the outbox");
                        quiet_until = now + 60_000;
                    }
                }
            }
        }
        if full && slots.available_permits() > 0 {
            continue;
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            () = routes.committed() => {}
            Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
            () = tokio::time::sleep(poll) => {}
        }
    }
    inflight.abort_all();
    while inflight.join_next().await.is_some() {}
    release(&ctx).await;
}

/// How often the claims of engines that died are looked for.
const ORPHANS_EVERY_MS: u64 = 2_000;

/// Releases the claims of engines that are gone (killed before they could release them), so
/// their deliveries go out now rather than when the claims' lease runs out.
async fn release_orphans(ctx: &Arc<Context>) {
    let ctx = ctx.clone();
    let released = tokio::task::spawn_blocking(move || {
        let Some(outbox) = ctx.store.outbox() else {
            return Ok(0);
        };
        let mut released = 0;
        for owner in outbox.lease_owners()? {
            if owner != ctx.owner && !ctx.store.coordination().engine_alive(&owner)? {
                released += outbox.release(&owner)?;
            }
        }
        Ok::<u64, crate::store::StoreError>(released)
    })
    .await;
    match released {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(
            deliveries = n,
            "took over the webhook claims of a stopped engine"
        ),
        Ok(Err(error)) => tracing::debug!(%error, "cannot look for orphaned webhook claims"),
        Err(_) => {}
    }
}

async fn claim(ctx: &Arc<Context>, limit: usize) -> Result<Vec<OutboxRow>, String> {
    let ctx = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let Some(outbox) = ctx.store.outbox() else {
            return Ok(Vec::new());
        };
        outbox
            .claim(&Claim {
                owner: &ctx.owner,
                now: now_ms(),
                lease: ctx.settings.lease(),
                limit,
                endpoints: &ctx.settings.urls,
                session_scoped: ctx.settings.allow_session_webhooks,
            })
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()))
}

async fn release(ctx: &Arc<Context>) {
    let ctx = ctx.clone();
    let released = tokio::task::spawn_blocking(move || {
        ctx.store
            .outbox()
            .map(|o| o.release(&ctx.owner))
            .transpose()
    })
    .await;
    if let Ok(Err(error)) = released {
        tracing::warn!(%error, "cannot release this daemon's webhook claims");
    }
}

/// One attempt at one row, then its settlement.
async fn deliver(ctx: &Arc<Context>, row: OutboxRow) {
    let endpoint = super::redact_url(&row.endpoint);
    let (status, error) = attempt(ctx, &row).await;
    let now = now_ms();
    let settlement = match (status, error) {
        (Some(status), None) => Settlement::Delivered { status },
        (status, error) => {
            let error = error.unwrap_or_else(|| "no answer".into());
            let jitter = rand::random::<f64>();
            match ctx
                .settings
                .backoff
                .next_attempt(row.attempts + 1, row.created_at, now, jitter)
            {
                Some(at) => Settlement::Retry { at, status, error },
                None => Settlement::Failed { status, error },
            }
        }
    };
    match &settlement {
        Settlement::Delivered { status } => {
            metrics().webhook_delivery("delivered");
            tracing::debug!(webhook_id = %row.webhook_id, %endpoint, status, event = %row.event_type, "webhook delivered");
        }
        Settlement::Retry { at, status, error } => {
            metrics().webhook_delivery("retried");
            tracing::warn!(webhook_id = %row.webhook_id, %endpoint, ?status, %error,
                attempt = row.attempts + 1, retry_in_ms = at.saturating_sub(now),
                "webhook delivery failed; it will be tried again");
        }
        Settlement::Failed { status, error } => {
            metrics().webhook_delivery("failed");
            tracing::error!(webhook_id = %row.webhook_id, %endpoint, ?status, %error,
                attempts = row.attempts + 1, "webhook delivery given up: past its retry horizon");
        }
    }
    let ctx2 = ctx.clone();
    let owner = ctx.owner.clone();
    let settled = tokio::task::spawn_blocking(move || {
        ctx2.store
            .outbox()
            .map(|o| o.settle(row.id, &owner, now, &settlement))
            .transpose()
    })
    .await;
    match settled {
        Ok(Ok(Some(true))) => {}
        Ok(Ok(_)) => {
            tracing::warn!(%endpoint, "a webhook delivery's claim had passed to another process before it was settled")
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot record a webhook delivery's outcome; it will be made again")
        }
        Err(error) => tracing::warn!(%error, "recording a webhook delivery failed"),
    }
}

/// Sends the row once: `(Some(status), None)` for a 2xx, else the status (if any) and why.
async fn attempt(ctx: &Context, row: &OutboxRow) -> (Option<u16>, Option<String>) {
    let client = if row.session_scoped {
        if let Err(why) = check_url(&row.endpoint, &ctx.settings.allow_hosts) {
            return (None, Some(format!("the endpoint {why}")));
        }
        &ctx.session_client
    } else {
        &ctx.client
    };
    let body = payload::body(&row.event_type, &row.session_id, &row.payload);
    let timestamp = (now_ms() / 1000) as i64;
    let signature = signature_header(&ctx.settings.secrets, &row.webhook_id, timestamp, &body);
    let sent = client
        .post(&row.endpoint)
        .timeout(ctx.settings.timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", &row.webhook_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(response) => {
            let status = response.status();
            // The body is not read (nor kept): only whether the receiver took the delivery.
            if status.is_success() {
                (Some(status.as_u16()), None)
            } else {
                (
                    Some(status.as_u16()),
                    Some(format!("the receiver answered {status}")),
                )
            }
        }
        Err(error) => (None, Some(describe(error))),
    }
}

/// A request error without its URL (which may hold a token), with its causes, shortened.
fn describe(error: reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let error = error.without_url();
    let mut text = format!("{kind}: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if text.len() > MAX_ERROR {
        let mut cut = MAX_ERROR;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}
