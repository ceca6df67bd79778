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
use super::door::{Door, SessionSlot, Ticket};
use super::errors::{invalid_params, session_error, store_error, turn_failed};
use super::log::{decode, LogCursor};
use super::project::{Effect, Projector, ProjectorOptions, TurnEnd};
use super::requests::{ask_permission, ask_question, PendingRequests};
use crate::universal::{Cost, TurnStatus};

/// Runs a prompt to its answer.
///
/// `ticket` is the prompt's place in its session's queue, taken when it arrived.
pub async fn run(
    door: Arc<Door>,
    cx: ConnectionTo<Client>,
    req: PromptRequest,
    ticket: Ticket,
) -> Result<PromptResponse, Error> {
    let id = req.session_id.to_string();
    let info = door.manager.info(&id).map_err(session_error)?;
    let slot = ticket.slot.clone();
    let cancels_before = ticket.cancels_before;
    let image_dir = content::image_dir(&door.options.data_dir, &id);
    let message = content::user_message(&req.prompt, &image_dir).map_err(|e| match e {
        content::ContentError::Invalid(why) => invalid_params(why),
        other => Error::internal_error().data(serde_json::json!({"message": other.to_string()})),
    })?;
    // One prompt of the session at a time, in the order they came.
    ticket.wait_turn().await;
    if ticket.cancelled() {
        return Ok(PromptResponse::new(StopReason::Cancelled));
    }
    let cost = match slot.cost() {
        Some(cost) => cost,
        None => door.manager.info(&id).map_err(session_error)?.cost,
    };
    let first = door
        .manager
        .send_message_and_wait(&id, message)
        .await
        .map_err(session_error)?;
    if slot.cancels() != cancels_before {
        // Cancelled while the turn was starting: stop it now it runs.
        let _ = door.manager.cancel(&id).await;
    }
    let follow = Follow {
        door: door.clone(),
        cx,
        sid: SessionId::new(id.as_str()),
        session_id: id,
        cwd: PathBuf::from(info.directory),
        slot: slot.clone(),
        cancels_before,
    };
    follow.turn(first, cost).await
}

/// Following one turn in the log.
struct Follow {
    door: Arc<Door>,
    cx: ConnectionTo<Client>,
    session_id: String,
    cwd: PathBuf,
    slot: Arc<SessionSlot>,
    cancels_before: u64,
    /// `session_id` as ACP's id (shared by every update).
    sid: SessionId,
}

impl Follow {
    fn cancelled(&self) -> bool {
        self.slot.cancels() != self.cancels_before
    }

    /// Reads the log from the turn's first event (`first`) to its `turn.ended`.
    async fn turn(self, first: u64, cost: Cost) -> Result<PromptResponse, Error> {
        let store = self.door.manager.store().clone();
        let mut cursor = LogCursor::new(store, &self.session_id, first.saturating_sub(1))
            .map_err(store_error)?;
        let mut projector = Projector::new(
            ProjectorOptions {
                cwd: self.cwd.clone(),
                replay: false,
                notices: self.door.client().notices,
            },
            cost,
        );
        let mut pending = PendingRequests::default();
        let mut cancels = self.slot.watch_cancels();
        let mut effects = Vec::new();
        let mut chunks = Coalescer::default();
        let mut ready = Vec::new();
        loop {
            let page = tokio::select! {
                page = cursor.next() => page.map_err(store_error)?,
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
                let data = match decode(&event) {
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
                        } if !self.cancelled() => {
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
                        } if !self.cancelled() => {
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
                            self.slot.set_cost(end.session_cost);
                            return self.answer(&end);
                        }
                        Effect::SessionEnded => {
                            pending.abort_all();
                            return Ok(PromptResponse::new(StopReason::Cancelled));
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

    /// The prompt's answer for the turn's ending.
    fn answer(&self, end: &TurnEnd) -> Result<PromptResponse, Error> {
        match end.status() {
            _ if self.cancelled() => Ok(PromptResponse::new(StopReason::Cancelled)),
            TurnStatus::Completed => Ok(PromptResponse::new(StopReason::EndTurn)),
            TurnStatus::Cancelled => Ok(PromptResponse::new(StopReason::Cancelled)),
            TurnStatus::Failed
            | TurnStatus::TimedOut
            | TurnStatus::Interrupted
            | TurnStatus::BudgetExhausted => Err(turn_failed(end)),
        }
    }
}
