//! Subscribed topics: a task per topic follows a session's log at its own cursor and sends each
//! event as an `event` server action. `id@sequence` replays the events after `sequence` first;
//! a plain `id` starts at the end of the log; `*` follows every session from now on (and new
//! sessions from their first event). A topic naming a session that does not exist yet starts
//! when it is created, from its first event.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::client::Topic;
use super::outbox::Outbox;
use super::server::event_action;
use crate::session::SessionManager;
use crate::store::{wait_after, EventStore};

/// How often new sessions are looked for (`*`, and topics naming sessions not created yet).
const DISCOVER_EVERY: Duration = Duration::from_millis(200);
/// Events read from the log per page.
const PAGE: usize = 256;

/// Follows `topic` until the connection is gone (or the task is aborted).
pub async fn follow(manager: Arc<SessionManager>, topic: Topic, out: Outbox) {
    if topic.is_all() {
        follow_all(&manager, &out).await;
        return;
    }
    let id = topic.name.as_str();
    let after = match (manager.info(id), topic.after) {
        (Ok(_), Some(after)) => after,
        (Ok(info), None) => info.event_count,
        (Err(_), after) => {
            // Not created yet: wait for it, then read it from its start (or the sequence).
            loop {
                if out.is_closed() {
                    return;
                }
                tokio::time::sleep(DISCOVER_EVERY).await;
                if manager.info(id).is_ok() {
                    break after.unwrap_or(0);
                }
            }
        }
    };
    follow_log(manager.store().clone(), id, id, after, &out).await;
}

/// `*`: every session live, and every session created later from its first event.
async fn follow_all(manager: &SessionManager, out: &Outbox) {
    let mut known: HashSet<String> = HashSet::new();
    let mut followers = JoinSet::new();
    let mut first = true;
    loop {
        for info in manager.list() {
            if known.insert(info.session_id.clone()) {
                let after = if first { info.event_count } else { 0 };
                let store = manager.store().clone();
                let out = out.clone();
                followers.spawn(async move {
                    follow_log(store, &info.session_id, "*", after, &out).await;
                });
            }
        }
        first = false;
        while followers.try_join_next().is_some() {}
        if out.is_closed() {
            return;
        }
        tokio::time::sleep(DISCOVER_EVERY).await;
    }
}

/// Sends the events of session `id` after `after` as they become visible, as `event` actions
/// of `topic`.
async fn follow_log(store: Arc<dyn EventStore>, id: &str, topic: &str, after: u64, out: &Outbox) {
    let Ok(mut rx) = store.subscribe(id) else {
        return;
    };
    let mut after = after;
    loop {
        let page = match store.read(id, after, PAGE) {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(session = %id, %error, "a WebSocket subscription cannot read the log");
                return;
            }
        };
        if page.is_empty() {
            if !wait_after(&mut rx, after).await {
                return;
            }
            continue;
        }
        for event in &page {
            if !out.text(event_action(topic, &event.json)).await {
                return;
            }
            after = event.sequence;
        }
    }
}
