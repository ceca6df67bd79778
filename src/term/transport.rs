//! How the client reaches the engine: one trait, two implementations — the engine in this
//! process (`local.rs`, the same `Engine` `codebuffd server` runs, on the same data directory)
//! and a running daemon over `/v1` (`remote.rs`). Every command of the client (`exec`,
//! `resume`, the REPL, `sessions …`) is written once against [`Transport`]; the two differ only
//! in how an operation travels, never in the types it speaks: the engine's `CreateRequest`,
//! `SessionInfo`, `PermissionReply` and universal events.

use async_trait::async_trait;
use futures_util::stream::BoxStream;

use super::error::ClientError;
use crate::session::{CreateRequest, PermissionReply, SessionInfo};
use crate::universal::UniversalEvent;

/// A session's events after a cursor, waiting for more when there are none; it ends when the
/// session's log is gone.
pub type Events = BoxStream<'static, Result<UniversalEvent, ClientError>>;

/// The engine, wherever it runs.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Where the engine is, for messages (`in-process on DIR`, `the daemon at URL`).
    fn describe(&self) -> String;

    /// Whether the engine runs in this process (and ends with it).
    fn is_local(&self) -> bool;

    /// Creates session `id`.
    async fn create(&self, id: &str, req: &CreateRequest) -> Result<(), ClientError>;

    async fn info(&self, id: &str) -> Result<SessionInfo, ClientError>;

    /// Every session.
    async fn list(&self) -> Result<Vec<SessionInfo>, ClientError>;

    /// Queues a message; returns the sequence to follow the session's log after (the turn's
    /// `turn.started` comes after it).
    async fn send(&self, id: &str, text: &str) -> Result<u64, ClientError>;

    /// Queues a message without following it.
    async fn queue(&self, id: &str, text: &str) -> Result<(), ClientError>;

    /// The session's events after sequence `after`.
    async fn events(&self, id: &str, after: u64) -> Result<Events, ClientError>;

    /// Answers a question: one list of answers per question it asks.
    async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), ClientError>;

    async fn reject_question(&self, id: &str, question_id: &str) -> Result<(), ClientError>;

    async fn permission(
        &self,
        id: &str,
        permission_id: &str,
        reply: PermissionReply,
    ) -> Result<(), ClientError>;

    async fn cancel(&self, id: &str) -> Result<(), ClientError>;

    async fn terminate(&self, id: &str) -> Result<(), ClientError>;

    async fn delete(&self, id: &str) -> Result<(), ClientError>;

    /// Whether a session of `agent` can start: it needs no key, or the engine finds one.
    async fn has_credential(&self, agent: &str) -> Result<bool, ClientError>;

    /// Changes the agent mode of the session's next turns.
    async fn set_mode(&self, id: &str, mode: &str) -> Result<(), ClientError>;

    /// Ends the in-process engine (running turns stopped, the store made durable); nothing for
    /// a daemon.
    async fn close(&self);
}
