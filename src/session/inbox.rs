//! Steering a session another engine runs: the request goes into the store's inbox, the
//! session's owner takes it (at most once), executes it as if it had come to it directly, and
//! writes the reply; the sender waits for that reply and answers its client with the same
//! result or error a local request would get.
//!
//! When the owner lets the session go before taking the request, the sender withdraws it and
//! takes the session itself ([`Remote::Retry`]); when the owner dies after taking it, nobody
//! can say whether it ran, and the sender reports that.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::message::UserMessage;
use super::SessionError;
use crate::agent::TurnImage;
use crate::store::{EventStore, InboxState};
use crate::universal::PermissionReply;

/// How often a waiting sender checks that the session's owner still lives (it wakes at every
/// change of the store besides).
const RECHECK: Duration = Duration::from_millis(500);

/// A request for a session's owner, as the inbox carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Queue a message; with `wait`, reply once its turn started (with the sequence of its
    /// `turn.started`), else once it is queued.
    Message {
        text: String,
        #[serde(default)]
        images: Vec<(String, String)>,
        wait: bool,
    },
    Answer {
        question_id: String,
        answers: Vec<Vec<String>>,
    },
    Reject {
        question_id: String,
    },
    Permission {
        permission_id: String,
        reply: String,
    },
    Cancel {
        queued: bool,
    },
    SetMode {
        mode: String,
    },
    Terminate,
    /// Terminate, then delete the session and its log.
    Delete,
}

impl Request {
    pub fn message(message: &UserMessage, wait: bool) -> Request {
        Request::Message {
            text: message.text.clone(),
            images: message
                .images
                .iter()
                .map(|i| (i.path.clone(), i.mime.clone()))
                .collect(),
            wait,
        }
    }

    pub fn permission(permission_id: &str, reply: PermissionReply) -> Request {
        Request::Permission {
            permission_id: permission_id.to_owned(),
            reply: reply.as_str().to_owned(),
        }
    }
}

/// The message a [`Request::Message`] carries.
pub(crate) fn message_of(text: String, images: Vec<(String, String)>) -> UserMessage {
    UserMessage {
        text,
        images: images
            .into_iter()
            .map(|(path, mime)| TurnImage { path, mime })
            .collect(),
    }
}

/// The owner's reply: a value (the sequence a waited-for turn started at), or the error a
/// local request would have got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    Ok { sequence: Option<u64> },
    Error(WireError),
}

/// A [`SessionError`] as the inbox carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WireError {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numbers: Option<(f64, f64)>,
}

impl Reply {
    pub fn of(result: Result<Option<u64>, SessionError>) -> Reply {
        match result {
            Ok(sequence) => Reply::Ok { sequence },
            Err(e) => Reply::Error(WireError::of(&e)),
        }
    }

    pub fn into_result(self) -> Result<Option<u64>, SessionError> {
        match self {
            Reply::Ok { sequence } => Ok(sequence),
            Reply::Error(e) => Err(e.into_error()),
        }
    }
}

impl WireError {
    fn of(e: &SessionError) -> WireError {
        WireError {
            code: e.code().to_owned(),
            message: e.to_string(),
            session: match e {
                SessionError::NotFound(id) | SessionError::AlreadyExists(id) => Some(id.clone()),
                _ => None,
            },
            numbers: match e {
                SessionError::BudgetExhausted { spent, budget } => Some((*spent, *budget)),
                SessionError::QueueFull(n) => Some((*n as f64, 0.0)),
                _ => None,
            },
        }
    }

    /// The error again, as the sender's doors know it.
    fn into_error(self) -> SessionError {
        let session = || self.session.clone().unwrap_or_default();
        match self.code.as_str() {
            "session_not_found" => SessionError::NotFound(session()),
            "session_already_exists" => SessionError::AlreadyExists(session()),
            "session_terminated" => SessionError::Terminated,
            "shutting_down" => SessionError::ShuttingDown,
            "cancelled" => SessionError::Cancelled,
            "queue_full" => SessionError::QueueFull(self.numbers.map_or(0, |(n, _)| n as usize)),
            "budget_exhausted" => match self.numbers {
                Some((spent, budget)) => SessionError::BudgetExhausted { spent, budget },
                None => SessionError::InvalidRequest(self.message),
            },
            "store_unavailable" => SessionError::StoreUnavailable(self.message),
            "agent_process_exited" => SessionError::AgentExited(self.message),
            "mode_not_supported" => SessionError::ModeNotSupported(self.message),
            _ => SessionError::InvalidRequest(self.message),
        }
    }
}

/// What became of a request sent to another engine.
pub(crate) enum Remote {
    /// The owner executed it.
    Done(Result<Option<u64>, SessionError>),
    /// The owner let the session go (or died) before taking it: the request was withdrawn;
    /// route it again.
    Retry,
}

/// Puts `request` for session `id` into the inbox; returns its id.
pub(crate) async fn post(
    store: &std::sync::Arc<dyn EventStore>,
    id: &str,
    request: &Request,
) -> Result<u64, SessionError> {
    let body = serde_json::to_value(request)
        .map_err(|e| SessionError::InvalidRequest(format!("cannot relay the request: {e}")))?;
    let store = store.clone();
    let id = id.to_owned();
    blocking(move || store.coordination().inbox_send(&id, &body)).await
}

/// The engine a request was sent to, and the session it is for: what a waiting sender checks
/// (off the async runtime) when the request takes long.
#[derive(Clone)]
pub(crate) struct Addressee {
    pub store: std::sync::Arc<dyn EventStore>,
    pub session_id: String,
    pub owner: String,
}

impl Addressee {
    /// Whether the owner lives (it answers every request it took, owner of the session or not).
    async fn lives(&self) -> bool {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            this.store
                .coordination()
                .engine_alive(&this.owner)
                .unwrap_or(false)
        })
        .await
        .unwrap_or(false)
    }

    /// Whether the owner still owns the session and lives (so it will take a pending request).
    async fn holds(&self) -> bool {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let coordination = this.store.coordination();
            matches!(coordination.load_session(&this.session_id), Ok(Some(r)) if r.owner == this.owner)
                && coordination.engine_alive(&this.owner).unwrap_or(false)
        })
        .await
        .unwrap_or(false)
    }

    async fn state(&self, sent: u64) -> Result<InboxState, SessionError> {
        let store = self.store.clone();
        blocking(move || store.coordination().inbox_state(sent)).await
    }

    /// Withdraws a pending request; true when it was still pending (and is now removed).
    async fn withdraw(&self, sent: u64) -> Result<bool, SessionError> {
        let store = self.store.clone();
        let withdrawn = blocking(move || store.coordination().inbox_withdraw(sent)).await?;
        if withdrawn {
            forget(&self.store, sent).await;
        }
        Ok(withdrawn)
    }
}

/// Waits for the outcome of request `sent`. While nobody took it, it is withdrawn as soon as
/// its addressee lets the session go or dies ([`Remote::Retry`]); once taken, the addressee
/// answers it unless it dies first (then nobody can say whether it ran).
pub(crate) async fn wait(to: &Addressee, sent: u64) -> Result<Remote, SessionError> {
    let mut changes = to.store.coordination().changes();
    loop {
        let state = to.state(sent).await?;
        match state {
            InboxState::Done(reply) => {
                let store = to.store.clone();
                let _ = blocking(move || store.coordination().inbox_forget(sent)).await;
                let reply: Reply = serde_json::from_value(reply).map_err(|e| {
                    SessionError::InvalidRequest(format!("the owner's reply is unreadable: {e}"))
                })?;
                return Ok(Remote::Done(reply.into_result()));
            }
            InboxState::Withdrawn | InboxState::Gone => return Ok(Remote::Retry),
            InboxState::Pending | InboxState::Taken => {}
        }
        let _ = tokio::time::timeout(RECHECK, changes.changed()).await;
        if let InboxState::Pending = state {
            // Not taken yet: the addressee must still hold the session to take it.
            if !to.holds().await && to.withdraw(sent).await? {
                return Ok(Remote::Retry);
            }
            continue;
        }
        if to.lives().await {
            continue;
        }
        // Taken, and its taker died: a reply written before it died still counts.
        if let InboxState::Done(_) = to.state(sent).await? {
            continue;
        }
        return Ok(Remote::Done(Err(SessionError::AgentExited(
            "the engine running the session stopped while it handled the request; check \
             the session's events to see whether it took effect"
                .into(),
        ))));
    }
}

/// Waits until request `sent` is taken by its addressee: true once taken (or done), false
/// when it was withdrawn because the addressee let the session go or died before taking it
/// (or it is gone).
pub(crate) async fn wait_taken(to: &Addressee, sent: u64) -> Result<bool, SessionError> {
    let mut changes = to.store.coordination().changes();
    loop {
        match to.state(sent).await? {
            InboxState::Taken | InboxState::Done(_) => return Ok(true),
            InboxState::Withdrawn | InboxState::Gone => return Ok(false),
            InboxState::Pending => {}
        }
        let _ = tokio::time::timeout(RECHECK, changes.changed()).await;
        if !to.holds().await && to.withdraw(sent).await? {
            return Ok(false);
        }
    }
}

/// Removes a withdrawn request (nobody will read it again).
async fn forget(store: &std::sync::Arc<dyn EventStore>, sent: u64) {
    let store = store.clone();
    let _ = blocking(move || store.coordination().inbox_forget(sent)).await;
}

/// Runs a store call off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SessionError::StoreUnavailable(e.to_string()))?
        .map_err(SessionError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_errors_cross_the_inbox_unchanged() {
        let message = UserMessage {
            text: "hi".into(),
            images: vec![TurnImage {
                path: "/tmp/a.png".into(),
                mime: "image/png".into(),
            }],
        };
        let request = Request::message(&message, true);
        let json = serde_json::to_value(&request).unwrap();
        assert_eq!(json["op"], "message");
        let back: Request = serde_json::from_value(json).unwrap();
        let Request::Message { text, images, wait } = back else {
            panic!()
        };
        assert!(wait);
        assert_eq!(message_of(text, images), message);
        for error in [
            SessionError::NotFound("s".into()),
            SessionError::Terminated,
            SessionError::Cancelled,
            SessionError::QueueFull(64),
            SessionError::BudgetExhausted {
                spent: 5.0,
                budget: 4.0,
            },
            SessionError::InvalidRequest("unknown question id `q`".into()),
        ] {
            let expected = error.to_string();
            let reply: Reply =
                serde_json::from_value(serde_json::to_value(Reply::of(Err(error))).unwrap())
                    .unwrap();
            let again = reply.into_result().unwrap_err();
            assert_eq!(again.to_string(), expected);
        }
    }
}
