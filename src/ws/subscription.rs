//! Subscribed topics: a task per topic follows a session's log at its own cursor and sends each
//! event as an `event` server action. `id@sequence` replays the events after `sequence` first;
//! a plain `id` starts at the end of the log; `*` follows every session from now on (and new
//! sessions from their first event). A topic naming a session that does not exist yet starts
//! when it is created, from its first event. While the event log cannot be written, a follower
//! that has caught up says so once (an `action-error` whose `error` is `store_unavailable`) and
//! goes on from its cursor when events are committed again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::client::Topic;
use super::outbox::Outbox;
use super::server::{event_action, ServerAction};
use crate::session::{SessionError, SessionManager};

/// How often a follower waiting for new sessions checks that its connection is still open.
const CHECK_OPEN_EVERY: Duration = Duration::from_secs(1);

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
            let mut creations = manager.creations();
            loop {
                if manager.info(id).is_ok() {
                    break after.unwrap_or(0);
                }
                if !next_creation(&mut creations, &out).await {
                    return;
                }
            }
        }
    };
    follow_log(&manager, id, id, after, &out).await;
}

/// `*`: every session live, and every session created later from its first event.
async fn follow_all(manager: &Arc<SessionManager>, out: &Outbox) {
    // Subscribed before the first listing, so no session created in between is missed.
    let mut creations = manager.creations();
    let mut known: HashSet<String> = HashSet::new();
    let mut followers = JoinSet::new();
    let follow = |followers: &mut JoinSet<()>, id: String, after: u64| {
        let manager = manager.clone();
        let out = out.clone();
        followers.spawn(async move {
            follow_log(&manager, &id, "*", after, &out).await;
        });
    };
    // The sessions that exist now: from now on.
    for info in manager.list() {
        known.insert(info.session_id.clone());
        follow(&mut followers, info.session_id, info.event_count);
    }
    // Sessions created later: from their first event.
    loop {
        if !next_creation(&mut creations, out).await {
            return;
        }
        for id in manager.ids() {
            if known.insert(id.clone()) {
                follow(&mut followers, id, 0);
            }
        }
        while followers.try_join_next().is_some() {}
    }
}

/// Waits until a session is created; false once the connection is closed (checked now and
/// then, so a follower of a quiet daemon does not outlive its connection for long).
async fn next_creation(creations: &mut tokio::sync::watch::Receiver<u64>, out: &Outbox) -> bool {
    loop {
        if out.is_closed() {
            return false;
        }
        match tokio::time::timeout(CHECK_OPEN_EVERY, creations.changed()).await {
            Ok(Ok(())) => return true,
            Ok(Err(_)) => return false,
            Err(_) => {}
        }
    }
}

/// Sends the events of session `id` after `after` as they become visible, as `event` actions
/// of `topic` (the engine's follow cursor: replay, then live).
async fn follow_log(manager: &SessionManager, id: &str, topic: &str, after: u64, out: &Outbox) {
    let Ok(follow) = manager.follow(id, after) else {
        return;
    };
    let mut follow = follow.with_raw(false).streaming();
    loop {
        let page = match follow.next().await {
            Ok(Some(page)) => page,
            // The session was deleted: nothing will follow.
            Ok(None) => return,
            Err(error @ SessionError::StoreUnavailable(_)) => {
                // Nothing is committed until the store recovers: say so, and wait for it.
                let told = out
                    .action(ServerAction::ActionError {
                        message: format!(
                            "session {id} of subscription `{topic}`: {error}; its events follow \
                             once the log can be written again (the last one sent: {})",
                            follow.position()
                        ),
                        error: Some(error.code().to_owned()),
                        remaining_balance: None,
                    })
                    .await;
                if !told || !follow.wait().await {
                    return;
                }
                continue;
            }
            Err(error) => {
                tracing::warn!(session = %id, %error, "a WebSocket subscription cannot read the log");
                return;
            }
        };
        for event in &page {
            if !out.text(event_action(topic, &event.json)).await {
                return;
            }
        }
    }
}
