//! How the client reaches the engine: in-process ([`Local`], the same `Engine` `codebuffd
//! server` runs, on the same data directory) or a running daemon over `/v1` ([`Remote`]).
//! Everything above this file sees one set of operations and one event stream.

use serde::Deserialize;
use serde_json::Value;

use super::error::ClientError;
use super::local::{Local, LocalEvents};
use super::remote::{Remote, RemoteEvents};
use crate::universal::{Cost, UniversalEvent};

/// What a new session is created with.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub agent: String,
    pub agent_mode: Option<String>,
    pub permission_mode: Option<String>,
    pub model: Option<String>,
    /// The agent's working directory (absolute).
    pub directory: Option<String>,
    pub timeout_seconds: Option<f64>,
}

/// A session as `GET /v1/sessions/{id}` shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRow {
    pub session_id: String,
    pub agent: String,
    pub agent_mode: String,
    pub permission_mode: String,
    #[serde(default)]
    pub model: Option<String>,
    pub status: String,
    pub turns: u64,
    pub cost: Cost,
    pub created_at: u64,
    pub updated_at: u64,
    pub directory: String,
    pub event_count: u64,
    #[serde(default)]
    pub budget: Option<f64>,
    #[serde(default)]
    pub remaining: Option<f64>,
    /// The whole document, as served (`sessions show --json`).
    #[serde(skip)]
    pub json: Value,
}

impl SessionRow {
    /// Reads a `SessionInfo` document.
    pub fn from_json(json: Value) -> Result<SessionRow, ClientError> {
        let mut row: SessionRow = serde_json::from_value(json.clone())
            .map_err(|e| ClientError::failed(format!("an unexpected session document: {e}")))?;
        row.json = json;
        Ok(row)
    }
}

/// The engine, wherever it runs.
pub enum Transport {
    Local(Box<Local>),
    Remote(Remote),
}

/// A session's events after a cursor, waiting for more when there are none.
pub enum Events {
    Local(LocalEvents),
    Remote(RemoteEvents),
}

impl Events {
    /// The next event; `None` when the session's log is gone.
    pub async fn next(&mut self) -> Result<Option<UniversalEvent>, ClientError> {
        match self {
            Events::Local(e) => e.next().await,
            Events::Remote(e) => e.next().await,
        }
    }
}

impl Transport {
    /// Where the engine is, for messages (`in-process on DIR`, `the daemon at URL`).
    pub fn describe(&self) -> String {
        match self {
            Transport::Local(l) => format!("in-process on {}", l.data_dir().display()),
            Transport::Remote(r) => format!("the daemon at {}", r.base()),
        }
    }

    /// Whether the engine runs in this process (and ends with it).
    pub fn is_local(&self) -> bool {
        matches!(self, Transport::Local(_))
    }

    pub async fn create(&self, id: &str, new: &NewSession) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.create(id, new).await,
            Transport::Remote(r) => r.create(id, new).await,
        }
    }

    pub async fn info(&self, id: &str) -> Result<SessionRow, ClientError> {
        match self {
            Transport::Local(l) => l.info(id),
            Transport::Remote(r) => r.info(id).await,
        }
    }

    /// Every session, newest first.
    pub async fn list(&self) -> Result<Vec<SessionRow>, ClientError> {
        match self {
            Transport::Local(l) => l.list(),
            Transport::Remote(r) => r.list().await,
        }
    }

    /// Queues a message; returns the sequence to follow the session's log after (the turn's
    /// `turn.started` comes after it).
    pub async fn send(&self, id: &str, text: &str) -> Result<u64, ClientError> {
        match self {
            Transport::Local(l) => l.send(id, text).await,
            Transport::Remote(r) => r.send(id, text).await,
        }
    }

    /// Queues a message without following it.
    pub async fn queue(&self, id: &str, text: &str) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.queue(id, text),
            Transport::Remote(r) => r.send(id, text).await.map(|_| ()),
        }
    }

    /// The session's events after sequence `after`.
    pub async fn events(&self, id: &str, after: u64) -> Result<Events, ClientError> {
        match self {
            Transport::Local(l) => l.events(id, after).map(Events::Local),
            Transport::Remote(r) => r.events(id, after).await.map(Events::Remote),
        }
    }

    pub async fn answer(
        &self,
        id: &str,
        question_id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.answer(id, question_id, answers).await,
            Transport::Remote(r) => r.answer(id, question_id, answers).await,
        }
    }

    pub async fn reject_question(&self, id: &str, question_id: &str) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.reject_question(id, question_id).await,
            Transport::Remote(r) => r.reject_question(id, question_id).await,
        }
    }

    /// Answers a permission request: `once`, `always` or `reject`.
    pub async fn permission(
        &self,
        id: &str,
        permission_id: &str,
        reply: &str,
    ) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.permission(id, permission_id, reply).await,
            Transport::Remote(r) => r.permission(id, permission_id, reply).await,
        }
    }

    pub async fn cancel(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.cancel(id).await,
            Transport::Remote(r) => r.post_empty(id, "cancel").await,
        }
    }

    pub async fn terminate(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.terminate(id).await,
            Transport::Remote(r) => r.post_empty(id, "terminate").await,
        }
    }

    pub async fn delete(&self, id: &str) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.delete(id).await,
            Transport::Remote(r) => r.delete(id).await,
        }
    }

    /// Ends the in-process engine (running turns stopped, the store made durable); nothing for
    /// a daemon.
    pub async fn close(self) {
        if let Transport::Local(l) = self {
            l.shutdown().await;
        }
    }
}

impl Transport {
    /// Changes the agent mode of the session's next turns (in-process only: `/v1` has no
    /// route for it).
    pub fn set_mode(&self, id: &str, mode: &str) -> Result<(), ClientError> {
        match self {
            Transport::Local(l) => l.set_mode(id, mode),
            Transport::Remote(_) => Err(ClientError::usage(
                "a daemon's sessions keep their mode; `/new` starts one in the new mode",
            )),
        }
    }
}
