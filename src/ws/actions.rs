//! The client actions besides `prompt`: `init` (the session made sure of, its real usage
//! reported), and ours — `answer` a question, `cancel` the running prompt, `permission-reply`.
//! Each runs after its `ack`; a failure is an `action-error` with the typed cause.

use std::sync::Arc;

use serde_json::json;

use super::client::{AnswerAction, InitAction, PermissionReplyAction};
use super::outbox::Outbox;
use super::server::ServerAction;
use super::session::{cause, ensure, NewSession};
use super::Door;
use crate::session::{PermissionReply, SessionError};

/// `init`: makes sure session `id` exists, then answers `init-response` with its usage.
pub async fn init(door: Arc<Door>, out: Outbox, id: String, init: InitAction) {
    let new = NewSession {
        auth_token: init.auth_token.as_deref(),
        ..NewSession::default()
    };
    match ensure(&door.manager, &id, new, &door.options.default_agent).await {
        Ok(info) => {
            out.action(ServerAction::InitResponse {
                message: Some(format!(
                    "session `{id}` is ready: agent {}, mode {}, {} turn(s), status {}",
                    info.agent,
                    info.agent_mode,
                    info.turns,
                    info.status.as_str()
                )),
                agent_names: Some(json!({"codebuff": "Codebuff", "mock": "Mock agent"})),
                usage: info.cost.credits,
                // The protocol requires a number: without a budget, the usage.
                remaining_balance: info.remaining.unwrap_or(info.cost.credits),
                next_quota_reset: None,
                session_id: id,
            })
            .await;
        }
        Err(error) => action_error(&door, &out, &id, &error).await,
    }
}

/// `answer`: answers question `questionId` of session `id`.
pub async fn answer(door: Arc<Door>, out: Outbox, id: String, answer: AnswerAction) {
    if let Err(error) = door
        .manager
        .answer(&id, &answer.question_id, answer.answers)
        .await
    {
        action_error(&door, &out, &id, &error).await;
    }
}

/// `cancel`: stops the running turn of session `id` (its prompt then ends with a
/// `prompt-error` whose cause is `cancelled`).
pub async fn cancel(door: Arc<Door>, out: Outbox, id: String) {
    if let Err(error) = door.manager.cancel(&id).await {
        action_error(&door, &out, &id, &error).await;
    }
}

/// `permission-reply`: answers permission request `permissionId` of session `id`.
pub async fn permission_reply(
    door: Arc<Door>,
    out: Outbox,
    id: String,
    reply: PermissionReplyAction,
) {
    let Some(answer) = PermissionReply::parse(&reply.reply) else {
        // The parser only lets the three replies through.
        return;
    };
    if let Err(error) = door
        .manager
        .reply_permission(&id, &reply.permission_id, answer)
        .await
    {
        action_error(&door, &out, &id, &error).await;
    }
}

/// Reports an action that failed after its `ack`.
pub async fn action_error(door: &Door, out: &Outbox, id: &str, error: &SessionError) {
    let remaining_balance = door.manager.info(id).ok().and_then(|i| i.remaining);
    out.action(ServerAction::ActionError {
        message: error.to_string(),
        error: Some(cause(error).to_owned()),
        remaining_balance,
    })
    .await;
}
