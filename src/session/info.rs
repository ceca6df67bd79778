//! `SessionInfo`: what `GET /v1/sessions[/{id}]` reports about a session, kept current by its
//! actor and read without waiting for it.

use serde::{Deserialize, Serialize};

use super::record::{from_record, Live};
use super::settings::SessionSettings;
use crate::store::SessionRecord;
use crate::universal::Cost;

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No turn is running; a message starts one.
    Idle,
    /// A turn is running.
    Running,
    /// A turn is waiting for the answer to a question.
    AwaitingInput,
    /// The session is over; it takes no more messages.
    Ended,
    /// The event log could not take the session's events: its turn was stopped, and the
    /// session is idle again once the log can be written (then the turn is recorded as failed).
    Failed,
}

impl SessionStatus {
    /// Every status, in the order they are documented.
    pub const ALL: [SessionStatus; 5] = [
        SessionStatus::Idle,
        SessionStatus::Running,
        SessionStatus::AwaitingInput,
        SessionStatus::Ended,
        SessionStatus::Failed,
    ];

    /// The status a name (as served) names.
    pub fn parse(name: &str) -> Option<SessionStatus> {
        SessionStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The status's name, as served and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::AwaitingInput => "awaiting_input",
            SessionStatus::Ended => "ended",
            SessionStatus::Failed => "failed",
        }
    }
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndState {
    /// Terminated on request.
    Terminated,
    /// The agent failed fatally (credentials, credits, cannot start).
    Error(String),
}

// The terminal client reads it back from `/v1` (`Deserialize`): both of its transports show
// the same type. The line below is the schema's description.
/// A snapshot of a session (`SessionInfo` of `docs/http-api.md`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub agent: String,
    pub agent_mode: String,
    pub permission_mode: String,
    #[schema(required = true)]
    pub model: Option<String>,
    #[schema(required = true)]
    pub variant: Option<String>,
    /// The agent's conversation id once known.
    #[schema(required = true)]
    pub native_session_id: Option<String>,
    pub ended: bool,
    pub event_count: u64,
    /// Epoch milliseconds.
    pub created_at: u64,
    /// Epoch milliseconds of the last event.
    pub updated_at: u64,
    /// The agent's working directory.
    pub directory: String,
    #[schema(required = true)]
    pub title: Option<String>,
    pub status: SessionStatus,
    /// The credits the session may spend, when it has a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub budget: Option<f64>,
    /// The credits it may still spend, when it has a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub remaining: Option<f64>,
    /// What the session has spent so far.
    pub cost: Cost,
    /// How many turns the session has begun.
    pub turns: u64,
    /// (ours) The session's first prompt on one line (whitespace runs made one space), cut
    /// after 200 characters with `…`, once a turn has begun: what a list shows for a session
    /// created without a title.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub first_prompt: Option<String>,
    /// (ours) The engine that holds the session now (`engineId` of `GET /v1/engines`): the
    /// one running its turn, or the one that just created or ran it; absent when no engine
    /// holds it (any may take it for the next turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub owner: Option<String>,
}

/// Characters of a prompt kept by [`prompt_preview`].
pub const PROMPT_PREVIEW_CHARS: usize = 200;

/// A prompt as lists show it: whitespace runs (newlines too) made one space, trimmed, cut after
/// [`PROMPT_PREVIEW_CHARS`] characters with `…`.
pub fn prompt_preview(text: &str) -> String {
    let mut out = String::new();
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > PROMPT_PREVIEW_CHARS {
            break;
        }
    }
    match out.char_indices().nth(PROMPT_PREVIEW_CHARS) {
        Some((cut, _)) => {
            out.truncate(cut);
            out.push('…');
            out
        }
        None => out,
    }
}

impl SessionInfo {
    /// The info of a stored session, as its record says (the engine running it writes it at
    /// every change of state); `last_sequence`, when known, is what its log holds.
    pub fn from_record(record: &SessionRecord, last_sequence: Option<u64>) -> Option<SessionInfo> {
        let restored = from_record(record, last_sequence)?;
        let mut live = restored.live;
        // A session another engine runs is as its record says (a dead engine's turn is ended
        // by a survivor within moments).
        if live.end.is_none() {
            if let Some(status) = SessionStatus::parse(&record.status) {
                live.status = status;
            }
        }
        let mut info = SessionInfo::from_live(
            &record.session_id,
            &restored.settings,
            live,
            restored.created_at,
        );
        info.owner = (!record.owner.is_empty()).then(|| record.owner.clone());
        Some(info)
    }

    /// The info of a session from its settings and live state.
    pub(super) fn from_live(
        id: &str,
        s: &SessionSettings,
        live: Live,
        created_at: u64,
    ) -> SessionInfo {
        SessionInfo {
            session_id: id.to_owned(),
            agent: s.agent.id().to_owned(),
            agent_mode: live.agent_mode.clone(),
            permission_mode: s.permission_mode.clone(),
            model: s.model.clone(),
            variant: s.variant.clone(),
            native_session_id: live.native_session_id,
            ended: live.end.is_some(),
            event_count: live.event_count,
            created_at,
            updated_at: live.updated_at,
            directory: s.directory.display().to_string(),
            title: s.title.clone(),
            status: live.status,
            budget: s.max_credits,
            remaining: s.max_credits.map(|b| (b - live.cost.credits).max(0.0)),
            cost: live.cost,
            turns: live.turns,
            first_prompt: live.first_prompt,
            owner: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_previews_are_one_trimmed_line_cut_at_the_limit() {
        assert_eq!(prompt_preview("  fix\n\tthe   build \n"), "fix the build");
        assert_eq!(prompt_preview(""), "");
        let long = "é".repeat(PROMPT_PREVIEW_CHARS + 50);
        let cut = prompt_preview(&long);
        assert_eq!(cut.chars().count(), PROMPT_PREVIEW_CHARS + 1);
        assert!(cut.ends_with('…'));
        let exact = "a".repeat(PROMPT_PREVIEW_CHARS);
        assert_eq!(prompt_preview(&exact), exact);
    }

    #[test]
    fn status_names_are_the_serialized_ones() {
        for status in [
            SessionStatus::Idle,
            SessionStatus::Running,
            SessionStatus::AwaitingInput,
            SessionStatus::Ended,
            SessionStatus::Failed,
        ] {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
        }
    }
}
