//! The `prompt` action: find or create the session, set the agent mode its `costMode` asks
//! for, queue the message, then follow the turn in the log from its `turn.started` — chunks,
//! questions and permission requests as they come, `prompt-response` or `prompt-error` at its
//! end. The connection going away stops only this follower: the turn runs on, in the log.

use std::sync::Arc;

use super::client::PromptAction;
use super::connection::Routes;
use super::outbox::Outbox;
use super::server::ServerAction;
use super::session::{agent_mode_for, cause, ensure, info_after, NewSession};
use super::turn::TurnProjection;
use super::Door;
use crate::session::SessionError;
use crate::store::wait_after;

/// Events read from the log per page.
const PAGE: usize = 256;

/// Runs prompt `prompt` in session `session_id` and reports it on `out`.
pub async fn run(
    door: Arc<Door>,
    out: Outbox,
    routes: Arc<Routes>,
    session_id: String,
    prompt: PromptAction,
) {
    if let Err(error) = drive(&door, &out, &routes, &session_id, &prompt).await {
        tracing::debug!(session = %session_id, %error, "WebSocket prompt refused");
        let remaining_balance = door
            .manager
            .info(&session_id)
            .ok()
            .and_then(|i| i.remaining);
        out.action(ServerAction::PromptError {
            user_input_id: prompt.prompt_id.clone(),
            message: error.to_string(),
            error: Some(cause(&error).to_owned()),
            remaining_balance,
            session_id: session_id.clone(),
        })
        .await;
    }
    routes.prompt_ended(&prompt.prompt_id);
}

async fn drive(
    door: &Door,
    out: &Outbox,
    routes: &Routes,
    id: &str,
    prompt: &PromptAction,
) -> Result<(), SessionError> {
    let manager = &door.manager;
    let mode = prompt.cost_mode.as_deref().map(agent_mode_for);
    let info = ensure(
        manager,
        id,
        NewSession {
            agent_id: prompt.agent_id.as_deref(),
            agent_mode: mode,
            model: prompt.model.as_deref(),
            auth_token: prompt.auth_token.as_deref(),
        },
        &door.options.default_agent,
    )
    .await?;
    if let Some(mode) = mode.filter(|m| *m != info.agent_mode) {
        // Queued before the message: its turn runs in the new mode.
        manager.set_agent_mode(id, mode)?;
    }
    let first = manager.send_message_and_wait(id, prompt.text()).await?;
    let store = manager.store().clone();
    let mut rx = store.subscribe(id)?;
    let mut turn = TurnProjection::new(&prompt.prompt_id, id);
    let mut actions = Vec::new();
    let mut after = first.saturating_sub(1);
    'follow: loop {
        let page = store.read(id, after, PAGE)?;
        if page.is_empty() {
            if !wait_after(&mut rx, after).await {
                break;
            }
            continue;
        }
        for stored in &page {
            after = stored.sequence;
            let event = match stored.decode() {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(session = %id, %error, "an event of the log cannot be read back");
                    continue;
                }
            };
            let done = turn.take(&event, &mut actions);
            for action in actions.drain(..) {
                match &action {
                    ServerAction::Question {
                        question_id: ask, ..
                    }
                    | ServerAction::Permission {
                        permission_id: ask, ..
                    } => routes.asked(ask, id, &prompt.prompt_id),
                    _ => {}
                }
                if !out.action(action).await {
                    // The connection is gone; the turn goes on without it.
                    return Ok(());
                }
            }
            if done {
                break 'follow;
            }
        }
    }
    let info = info_after(manager, id, after).await?;
    out.action(turn.finish(&info)).await;
    Ok(())
}
