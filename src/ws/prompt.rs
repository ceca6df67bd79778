//! The `prompt` action: find or create the session, set the agent mode its `costMode` asks
//! for, queue the message, then follow the turn in the log from its `turn.started` — chunks,
//! questions and permission requests as they come, `prompt-response` or `prompt-error` at its
//! end. The connection going away stops only this follower: the turn runs on, in the log.
//!
//! `question` and `permission` actions go only to a prompt whose client takes them (its
//! `extensions`). A question the client is not shown waits the door's question timeout for an
//! answer from elsewhere (another connection, `POST …/questions/{id}/reply`), then the door
//! declines it: the agent goes on as if the user skipped it. A permission request the client
//! is not shown waits for the session's permission timeout (which rejects).

use std::sync::Arc;

use tokio::task::JoinSet;

use super::client::PromptAction;
use super::connection::Routes;
use super::outbox::Outbox;
use super::server::ServerAction;
use super::session::{agent_mode_for, cause, ensure, NewSession};
use super::turn::TurnProjection;
use super::Door;
use crate::session::SessionError;

/// Runs prompt `prompt` in session `session_id` and reports it on `out`.
pub async fn run(
    door: Arc<Door>,
    out: Outbox,
    routes: Arc<Routes>,
    running: Running,
    prompt: PromptAction,
) {
    let session_id = running.session_id.clone();
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

/// A prompt in the door's table of running prompts, for as long as its task lives (however it
/// ends: done, or aborted with its connection).
pub struct Running {
    door: Arc<Door>,
    prompt_id: String,
    session_id: String,
}

impl Running {
    /// Enters prompt `prompt_id` of session `session_id` in the door's table.
    pub fn new(door: &Arc<Door>, prompt_id: &str, session_id: &str) -> Running {
        door.prompt_started(prompt_id, session_id);
        Running {
            door: door.clone(),
            prompt_id: prompt_id.to_owned(),
            session_id: session_id.to_owned(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.door.prompt_ended(&self.prompt_id, &self.session_id);
    }
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
        manager.set_agent_mode(id, mode).await?;
    }
    let first = manager.send_message_and_wait(id, prompt.text()).await?;
    if door.turn_started(&prompt.prompt_id) {
        // A cancel came while the prompt waited for its turn.
        manager.cancel(id).await?;
    }
    // The turn's events from its `turn.started` on.
    let mut follow = manager
        .follow(id, first.saturating_sub(1))?
        .with_raw(false)
        .streaming();
    let mut turn = TurnProjection::new(&prompt.prompt_id, id);
    let mut actions = Vec::new();
    // Declining unanswered questions the client is not shown; aborted when the prompt ends.
    let mut declines = JoinSet::new();
    'follow: while let Some(page) = follow.next().await? {
        for stored in &page {
            let data = match stored.data() {
                Ok(data) => data,
                Err(error) => {
                    tracing::warn!(session = %id, %error, "an event of the log cannot be read back");
                    continue;
                }
            };
            let done = turn.take(&data, &mut actions);
            for action in actions.drain(..) {
                match &action {
                    ServerAction::Question { question_id, .. } if !prompt.takes("question") => {
                        declines.spawn(decline(
                            door.manager.clone(),
                            id.to_owned(),
                            question_id.clone(),
                            door.options.question_timeout,
                        ));
                        continue;
                    }
                    ServerAction::Permission { .. } if !prompt.takes("permission") => continue,
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
    drop(declines);
    let info = manager.info(id)?;
    out.action(turn.finish(&info, prompt.session_state.as_ref()))
        .await;
    Ok(())
}

/// Declines question `question_id` of session `id` once `after` has passed without an
/// answer (an answered question is no longer pending: the decline then does nothing).
async fn decline(
    manager: Arc<crate::session::SessionManager>,
    id: String,
    question_id: String,
    after: std::time::Duration,
) {
    tokio::time::sleep(after).await;
    match manager.reject(&id, &question_id).await {
        Ok(()) => tracing::info!(session = %id, question = %question_id,
            "a WebSocket client that does not take questions left one unanswered: declined"),
        Err(error) => tracing::debug!(session = %id, question = %question_id, %error,
            "an unanswered question was answered meanwhile"),
    }
}
