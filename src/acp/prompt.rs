//! `session/prompt`: one message, one turn of the session, followed in the log from its
//! `turn.started` to its `turn.ended` and projected as `session/update`s; the answer is the
//! turn's ending (`end_turn`, `cancelled`, or a JSON-RPC error for a turn that failed).
//!
//! Prompts of one session run one at a time in the order they came: a prompt sent while another
//! runs waits for it. `session/cancel` cancels the running turn (the engine stops its agent) and
//! every prompt still waiting; all of them answer `cancelled`. While the turn runs, the agent's
//! questions and permission requests are asked of the client; when the turn ends or is
//! cancelled, what is still being asked is withdrawn (`$/cancel_request`).

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    PromptRequest, PromptResponse, SessionId, SessionNotification, SessionUpdate, StopReason,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error};

use super::coalesce::Coalescer;
use super::content;
use super::door::{Door, PromptGuard};
use super::errors::{invalid_params, session_error, turn_failed};
use super::project::{Effect, Projector, ProjectorOptions};
use super::requests::{ask_permission, ask_question, PendingRequests};
use crate::session::{QueuedTurn, SessionError, TurnEnd};
use crate::universal::TurnStatus;

/// A prompt queued on its session, waiting for its turn.
pub struct Queued {
    turn: QueuedTurn,
    guard: PromptGuard,
    cwd: PathBuf,
}

/// Queues a prompt on its session as it arrives (called by the dispatch loop, so prompts take
/// their places in the order they came).
pub async fn queue(door: &Door, req: &PromptRequest) -> Result<Queued, Error> {
    let id = req.session_id.to_string();
    let info = door.manager.info(&id).map_err(session_error)?;
    let image_dir = content::image_dir(&door.options.data_dir, &id);
    let message = content::user_message(&req.prompt, &image_dir).map_err(|e| match e {
        content::ContentError::Invalid(why) => invalid_params(why),
        other => Error::internal_error().data(serde_json::json!({"message": other.to_string()})),
    })?;
    let guard = door.slot(&id).prompt();
    let turn = door
        .manager
        .queue_turn(&id, message)
        .await
        .map_err(session_error)?;
    Ok(Queued {
        turn,
        guard,
        cwd: PathBuf::from(info.directory),
    })
}

/// Runs a queued prompt to its answer.
pub async fn run(
    door: Arc<Door>,
    cx: ConnectionTo<Client>,
    session_id: SessionId,
    queued: Queued,
) -> Result<PromptResponse, Error> {
    let first = match queued.turn.started().await {
        Ok(first) => first,
        // `session/cancel` dropped it before its turn (the engine cancels queued prompts).
        Err(SessionError::Cancelled) => return Ok(PromptResponse::new(StopReason::Cancelled)),
        Err(_) if queued.guard.cancelled() => {
            return Ok(PromptResponse::new(StopReason::Cancelled))
        }
        Err(other) => return Err(session_error(other)),
    };
    let follow = Follow {
        door: door.clone(),
        cx,
        session_id: session_id.to_string(),
        sid: session_id,
        cwd: queued.cwd,
        guard: queued.guard,
    };
    follow.turn(first).await
}

/// Following one turn in the log.
struct Follow {
    door: Arc<Door>,
    cx: ConnectionTo<Client>,
    session_id: String,
    cwd: PathBuf,
    guard: PromptGuard,
    /// `session_id` as ACP's id (shared by every update).
    sid: SessionId,
}

impl Follow {
    /// Reads the log from the turn's first event (`first`) to its end.
    async fn turn(self, first: u64) -> Result<PromptResponse, Error> {
        let manager = &self.door.manager;
        let mut log = manager
            .follow(&self.session_id, first.saturating_sub(1))
            .map_err(session_error)?
            .with_raw(false)
            .streaming()
            .with_page(1024);
        // The session's cost, in case its log is older than `turn.ended`'s `session_cost`.
        let cost = manager.info(&self.session_id).map_err(session_error)?.cost;
        let mut projector = Projector::new(
            ProjectorOptions {
                cwd: self.cwd.clone(),
                replay: false,
                notices: self.door.client().notices,
            },
            cost,
        );
        let mut pending = PendingRequests::default();
        let mut cancels = self.guard.slot.watch_cancels();
        let mut effects = Vec::new();
        let mut chunks = Coalescer::default();
        let mut ready = Vec::new();
        loop {
            let page = tokio::select! {
                page = log.next() => page.map_err(session_error)?,
                changed = cancels.changed() => {
                    if changed.is_ok() {
                        // The engine is stopping the turn; withdraw what the client is asked.
                        pending.abort_all();
                    }
                    continue;
                }
            };
            let Some(page) = page else {
                return Err(Error::internal_error()
                    .data(serde_json::json!({"message": "the session's log is gone"})));
            };
            for event in page {
                if let Some(delta) = event.item_delta() {
                    // Most of a streamed answer: its text goes out (merged into the chunk
                    // held back when it can be) without building each delta's payload.
                    if let Some((kind, id)) = projector.delta_stream(&delta.item_id) {
                        if !chunks.append(kind, id, &delta.delta) {
                            chunks.push(kind.update(&delta.delta, id), &mut ready);
                            for update in ready.drain(..) {
                                self.send(update).await?;
                            }
                        }
                    }
                    continue;
                }
                let data = match event.data() {
                    Ok(data) => data,
                    Err(error) => {
                        tracing::warn!(session = %self.session_id, sequence = event.sequence, %error, "an event the door cannot read; skipped");
                        continue;
                    }
                };
                projector.apply(&data, &mut effects);
                for effect in effects.drain(..) {
                    if let Effect::Update(update) = effect {
                        chunks.push(update, &mut ready);
                        for update in ready.drain(..) {
                            self.send(update).await?;
                        }
                        continue;
                    }
                    // Anything else happens after the updates before it are sent.
                    if let Some(update) = chunks.flush() {
                        self.send(update).await?;
                    }
                    match effect {
                        Effect::Update(_) => {}
                        Effect::Ask {
                            question,
                            tool_call_id,
                        } if !self.guard.cancelled() => {
                            let id = question.question_id.clone();
                            let task = ask_question(
                                self.door.clone(),
                                self.cx.clone(),
                                self.session_id.clone(),
                                question,
                                tool_call_id,
                            );
                            pending.insert(id, task);
                        }
                        Effect::Permission {
                            request,
                            tool_call_id,
                        } if !self.guard.cancelled() => {
                            let id = request.permission_id.clone();
                            let task = ask_permission(
                                self.door.clone(),
                                self.cx.clone(),
                                self.session_id.clone(),
                                self.cwd.clone(),
                                request,
                                tool_call_id,
                            );
                            pending.insert(id, task);
                        }
                        Effect::QuestionResolved(id) | Effect::PermissionResolved(id) => {
                            pending.resolved(&id)
                        }
                        Effect::TurnEnded(end) => {
                            pending.abort_all();
                            return answer(Some(&end), self.guard.cancelled());
                        }
                        Effect::SessionEnded => {
                            pending.abort_all();
                            return answer(None, self.guard.cancelled());
                        }
                        Effect::Ask { .. } | Effect::Permission { .. } => {}
                    }
                }
            }
            // Nothing waits for the next page: what was merged goes out now.
            if let Some(update) = chunks.flush() {
                self.send(update).await?;
            }
        }
    }

    async fn send(&self, update: SessionUpdate) -> Result<(), Error> {
        self.door.outbox.reserve().await;
        self.cx
            .send_notification(SessionNotification::new(self.sid.clone(), update))
    }
}

/// The prompt's answer for how its turn ended (`end`, the engine's verdict; `None` when the
/// session ended before the turn started): `end_turn` for a completed turn, `cancelled` for a
/// cancelled one, else the JSON-RPC error of [`turn_failed`]. ACP wants `cancelled` for a
/// prompt the client cancelled (`client_cancelled`), whatever its turn then did. Pure: the
/// cross-door verdict test (`tests/turn_verdicts.rs`) runs it on the same logs as the others.
pub fn answer(end: Option<&TurnEnd>, client_cancelled: bool) -> Result<PromptResponse, Error> {
    let Some(end) = end else {
        return Ok(PromptResponse::new(StopReason::Cancelled));
    };
    match end.status {
        _ if client_cancelled => Ok(PromptResponse::new(StopReason::Cancelled)),
        TurnStatus::Completed => Ok(PromptResponse::new(StopReason::EndTurn)),
        TurnStatus::Cancelled => Ok(PromptResponse::new(StopReason::Cancelled)),
        TurnStatus::Failed
        | TurnStatus::TimedOut
        | TurnStatus::Interrupted
        | TurnStatus::BudgetExhausted => Err(turn_failed(end)),
    }
}
