//! The requests a session's actor takes from its mailbox (sent by [`super::SessionManager`]).
//!
//! Requests that need an answer carry a `oneshot` for it; the actor answers each exactly once,
//! when the request is done (an answer written to the agent, a turn stopped …).

use tokio::sync::{mpsc, oneshot};

use super::message::UserMessage;
use super::queue::QueueCount;
use super::SessionError;
use crate::universal::PermissionReply;

/// A request to a session actor.
pub(crate) enum Command {
    /// Queue a user message; `started` gets the sequence of its `turn.started`.
    Message {
        message: UserMessage,
        started: Option<oneshot::Sender<Result<u64, SessionError>>>,
    },
    Answer {
        question_id: String,
        answers: Vec<Vec<String>>,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    Reject {
        question_id: String,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    /// Answer a permission request of the running turn.
    Permission {
        permission_id: String,
        answer: PermissionReply,
        reply: oneshot::Sender<Result<(), SessionError>>,
    },
    /// Stop the running turn; with `queued`, also drop the messages waiting for their turn.
    Cancel {
        queued: bool,
        reply: oneshot::Sender<()>,
    },
    /// Change the agent mode of the next turns.
    SetMode {
        mode: String,
    },
    Terminate {
        reply: oneshot::Sender<()>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// The receiving end of a session's mailbox, given to its actor: the commands, and the count
/// of client messages waiting that the manager admits against.
pub(crate) struct Mailbox {
    pub rx: mpsc::Receiver<Command>,
    pub queued: QueueCount,
    /// Whether the engine owns the session in the store (the actor clears it as it lets go).
    pub owned: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Held by the manager while it hands the actor a request, and by the actor while it
    /// lets the session go.
    pub routing: std::sync::Arc<tokio::sync::Mutex<()>>,
}
