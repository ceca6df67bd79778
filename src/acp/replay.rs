//! `session/load`'s replay: the whole log, read from the store up to where it is when the load
//! arrives, projected as `session/update`s (user and agent messages, thoughts, tool calls with
//! their final status, plans, and a `usage_update` after each turn). Nobody is asked anything:
//! the questions of the past were answered in the past.

use std::path::PathBuf;

use agent_client_protocol::v1::schema::{SessionId, SessionNotification};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error};

use super::coalesce::Coalescer;
use super::door::Door;
use super::errors::session_error;
use super::project::{Effect, Projector, ProjectorOptions};
use crate::session::SessionError;
use crate::universal::{Cost, EventData};

/// How long a load waits for the engine to end a turn a previous process left open.
const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn skipped(session_id: &str, sequence: u64) {
    tracing::warn!(session = %session_id, sequence, "an event the door cannot read; skipped");
}

/// Sends the session's history to the client.
pub async fn replay(
    door: &Door,
    cx: &ConnectionTo<Client>,
    session_id: &str,
    cwd: PathBuf,
) -> Result<(), Error> {
    let mut log = door
        .manager
        .follow(session_id, 0)
        .map_err(session_error)?
        .with_raw(false)
        .streaming()
        .with_page(1024);
    let until = log.last_sequence().map_err(session_error)?;
    let mut projector = Projector::new(
        ProjectorOptions {
            cwd,
            replay: true,
            notices: door.client().notices,
        },
        Cost::default(),
    );
    let sid = SessionId::new(session_id);
    let mut effects = Vec::new();
    let mut chunks = Coalescer::default();
    let mut ready = Vec::new();
    let mut send =
        async |projector: &mut Projector, data: Option<EventData>| -> Result<(), Error> {
            match data {
                Some(data) => {
                    projector.apply(&data, &mut effects);
                    for effect in effects.drain(..) {
                        if let Effect::Update(update) = effect {
                            chunks.push(update, &mut ready);
                        }
                    }
                }
                // The end of a page: what was merged goes out.
                None => ready.extend(chunks.flush()),
            }
            for update in ready.drain(..) {
                door.outbox.reserve().await;
                cx.send_notification(SessionNotification::new(sid.clone(), update))?;
            }
            Ok(())
        };
    loop {
        let page = log.poll_until(until).map_err(session_error)?;
        if page.is_empty() {
            break;
        }
        for event in page {
            match event.data() {
                Ok(data) => send(&mut projector, Some(data)).await?,
                Err(_) => skipped(session_id, event.sequence),
            }
        }
        send(&mut projector, None).await?;
    }
    // A turn the log leaves open that no prompt of this connection runs is one a previous
    // process left behind: the engine is ending it (as interrupted) right now. Show that end.
    let prompting = door.slot(session_id).prompting();
    if projector.turn_open() && !prompting {
        let deadline = tokio::time::Instant::now() + RECOVERY_WAIT;
        while projector.turn_open() {
            let page = match tokio::time::timeout_at(deadline, log.next()).await {
                // The log cannot be written now: that end comes later; show what is stored.
                Ok(Err(SessionError::StoreUnavailable(_))) | Err(_) => break,
                Ok(page) => page.map_err(session_error)?,
            };
            let Some(page) = page else { break };
            for event in page {
                match event.data() {
                    Ok(data) => send(&mut projector, Some(data)).await?,
                    Err(_) => skipped(session_id, event.sequence),
                }
            }
            send(&mut projector, None).await?;
        }
    }
    Ok(())
}
