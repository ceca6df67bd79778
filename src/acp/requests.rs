//! Asking the client: a question (`elicitation/create`, or the `session/request_permission`
//! fallback) or a permission request, each in a task of its own whose answer goes to the
//! session. Aborting the task (the question was answered elsewhere, the turn ended or was
//! cancelled) drops the pending request, which sends the client `$/cancel_request`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::Client;
use tokio::task::JoinHandle;

use super::door::Door;
use super::permissions::{self, Reply};
use super::questions::{self, Answer};
use crate::session::PermissionReply;
use crate::session::SessionError;
use crate::universal::{PermissionData, QuestionData};

/// The client requests of one turn, by question or permission id; dropping it aborts them.
#[derive(Default)]
pub struct PendingRequests(HashMap<String, JoinHandle<()>>);

impl PendingRequests {
    /// Keeps the task asking about `id`.
    pub fn insert(&mut self, id: String, task: JoinHandle<()>) {
        self.0.retain(|_, t| !t.is_finished());
        if let Some(old) = self.0.insert(id, task) {
            old.abort();
        }
    }

    /// Stops asking about `id` (it was answered).
    pub fn resolved(&mut self, id: &str) {
        if let Some(task) = self.0.remove(id) {
            task.abort();
        }
    }

    /// Stops asking anything.
    pub fn abort_all(&mut self) {
        for (_, task) in self.0.drain() {
            task.abort();
        }
    }
}

impl Drop for PendingRequests {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// Asks the client a question and answers (or skips) it in the session.
pub fn ask_question(
    door: Arc<Door>,
    cx: ConnectionTo<Client>,
    session_id: String,
    question: QuestionData,
    tool_call_id: Option<String>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let tool_call = tool_call_id.as_deref();
        let answer = if door.client().forms {
            let request = questions::elicitation(&session_id, tool_call, &question);
            match cx.send_request(request).block_task().await {
                Ok(response) => questions::elicitation_answer(&question, &response.action),
                Err(error) => {
                    tracing::warn!(session = %session_id, %error, "elicitation/create failed; the question is skipped");
                    Answer::Skip
                }
            }
        } else {
            let request = questions::permission_fallback(&session_id, tool_call, &question);
            match cx.send_request(request).block_task().await {
                Ok(response) => questions::permission_answer(&question, &response.outcome),
                Err(error) => {
                    tracing::warn!(session = %session_id, %error, "session/request_permission failed; the question is skipped");
                    Answer::Skip
                }
            }
        };
        let id = &question.question_id;
        let result = match answer {
            Answer::Answers(answers) => door.manager.answer(&session_id, id, answers).await,
            Answer::Skip => door.manager.reject(&session_id, id).await,
        };
        if let Err(error) = result {
            // Answered meanwhile (elsewhere, or the question timed out): nothing to do.
            tracing::debug!(session = %session_id, question = %id, %error, "answer not taken");
        }
    })
}

/// Asks the client for permission and replies in the session.
pub fn ask_permission(
    door: Arc<Door>,
    cx: ConnectionTo<Client>,
    session_id: String,
    cwd: PathBuf,
    request: PermissionData,
    tool_call_id: Option<String>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let ask = permissions::request(&session_id, &cwd, tool_call_id.as_deref(), &request);
        let reply = match cx.send_request(ask).block_task().await {
            Ok(response) => permissions::reply(&response.outcome),
            Err(error) => {
                tracing::warn!(session = %session_id, %error, "session/request_permission failed; the call is rejected");
                Reply::Reject
            }
        };
        let id = &request.permission_id;
        if let Err(error) = reply_permission(&door, &session_id, id, reply).await {
            tracing::debug!(session = %session_id, permission = %id, %error, "reply not taken");
        }
    })
}

/// Gives the session the client's reply to a permission request.
async fn reply_permission(
    door: &Door,
    session_id: &str,
    permission_id: &str,
    reply: Reply,
) -> Result<(), SessionError> {
    let answer = match reply {
        Reply::Once => PermissionReply::Once,
        Reply::Always => PermissionReply::Always,
        Reply::Reject => PermissionReply::Reject,
    };
    door.manager
        .reply_permission(session_id, permission_id, answer)
        .await
}
