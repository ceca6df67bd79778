//! The `data` payloads of the universal event types (one struct per shape).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{Cost, Item, StderrOutput};

/// `session.started`: the session's settings, recorded once at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionStartedData {
    pub metadata: SessionMetadata,
}

/// The settings a session was created with; keys sorted, `null` when unset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionMetadata {
    #[schema(required = true)]
    pub agent: Option<String>,
    #[schema(required = true)]
    pub agent_mode: Option<String>,
    #[schema(required = true)]
    pub model: Option<String>,
    #[schema(required = true)]
    pub permission_mode: Option<String>,
    #[schema(required = true)]
    pub variant: Option<String>,
}

/// `session.ended`: why the session is over; `message`, `exit_code` and `stderr` only for errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionEndedData {
    pub reason: SessionEndReason,
    pub terminated_by: TerminatedBy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub stderr: Option<StderrOutput>,
    /// **(ours)** the session's total cost.
    pub cost: Cost,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionEndReason {
    Completed,
    Error,
    Terminated,
}

/// Who ended a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TerminatedBy {
    Agent,
    Daemon,
}

/// `turn.started` / `turn.ended`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TurnData {
    pub phase: TurnPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub turn_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub metadata: Option<TurnMetadata>,
}

/// Whether a turn event opens or closes the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnPhase {
    Started,
    Ended,
}

/// **(ours)** How a turn ended, carried by `turn.ended.metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TurnMetadata {
    pub status: TurnStatus,
    /// The turn's cost (zero when the run never reported one).
    pub cost: Cost,
    /// False when the run ended without reporting a cost (no `finish`).
    pub cost_reported: bool,
    /// The session's cost so far, this turn included: what a client shows as the session's
    /// total without adding turns up. Absent only in logs written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub session_cost: Option<Cost>,
    /// The agent process's exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub exit_code: Option<i32>,
    /// The signal that killed the agent process, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub signal: Option<i32>,
    /// The agent id the run's `finish` named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub agent_id: Option<String>,
    /// A stable code for why the turn did not complete (`store_error`, the agent's own error
    /// code, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub code: Option<String>,
    /// A human-readable reason when the turn did not complete normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub message: Option<String>,
    /// The last lines (at most 20) the agent wrote on stderr, when the turn failed, timed out
    /// or was stopped by its budget and the agent wrote any: what a client shows to explain
    /// the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub stderr_tail: Option<String>,
}

/// **(ours)** The outcome of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Interrupted,
    /// **(ours)** Stopped because the session reached its credit budget.
    BudgetExhausted,
}

impl TurnStatus {
    /// The status's name, as served (`completed`, `timed_out`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
            TurnStatus::TimedOut => "timed_out",
            TurnStatus::Cancelled => "cancelled",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// `item.started` / `item.completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ItemEventData {
    pub item: Item,
}

/// `item.delta`: a piece of an item's streamed content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ItemDeltaData {
    /// Shared, not copied: an open item drafts one delta per agent line with its id, and a
    /// `String` each (an allocation and its free) was 2.9 % of a 20-session flood's daemon CPU.
    #[schema(value_type = String)]
    pub item_id: std::sync::Arc<str>,
    #[schema(required = true)]
    pub native_item_id: Option<String>,
    pub delta: String,
}

/// `error`: an error the agent reported; does not by itself end the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorData {
    pub message: String,
    #[schema(required = true)]
    pub code: Option<String>,
    #[schema(required = true)]
    pub details: Option<Value>,
}

/// `permission.requested` / `permission.resolved`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PermissionData {
    pub permission_id: String,
    pub action: String,
    pub status: PermissionStatus,
    #[schema(required = true)]
    pub metadata: Option<Value>,
}

/// The state of a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionStatus {
    Requested,
    Accept,
    AcceptForSession,
    Reject,
}

/// An answer to a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionReply {
    /// Allow this call.
    Once,
    /// Allow this call and every later one like it in this session.
    Always,
    /// Refuse this call.
    Reject,
}

impl PermissionReply {
    /// Parses `once`, `always` or `reject`.
    pub fn parse(name: &str) -> Option<PermissionReply> {
        match name {
            "once" => Some(PermissionReply::Once),
            "always" => Some(PermissionReply::Always),
            "reject" => Some(PermissionReply::Reject),
            _ => None,
        }
    }

    /// The reply's name (`once`, `always`, `reject`), as requests carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionReply::Once => "once",
            PermissionReply::Always => "always",
            PermissionReply::Reject => "reject",
        }
    }

    /// The status `permission.resolved` records for this reply.
    pub fn status(self) -> PermissionStatus {
        match self {
            PermissionReply::Once => PermissionStatus::Accept,
            PermissionReply::Always => PermissionStatus::AcceptForSession,
            PermissionReply::Reject => PermissionStatus::Reject,
        }
    }
}

/// `question.requested` / `question.resolved`: the agent asks the user (Codebuff's `ask_user`).
///
/// `prompt`/`options` describe the first question for compatibility; `questions` **(ours)** has
/// every question in full and `answers` **(ours)** the answers, one list per question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QuestionData {
    pub question_id: String,
    pub prompt: String,
    pub options: Vec<String>,
    #[schema(required = true)]
    pub response: Option<String>,
    pub status: QuestionStatus,
    pub questions: Vec<QuestionSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub answers: Option<Vec<Vec<String>>>,
}

impl QuestionData {
    /// Every question asked: `questions`, or for data that has none (events older than that
    /// field) one question made of `prompt` and `options`. What every door shows the user.
    pub fn specs(&self) -> Vec<QuestionSpec> {
        if !self.questions.is_empty() {
            return self.questions.clone();
        }
        vec![QuestionSpec {
            question: self.prompt.clone(),
            header: None,
            options: self
                .options
                .iter()
                .map(|label| QuestionOption {
                    label: label.clone(),
                    description: None,
                })
                .collect(),
            multi_select: false,
        }]
    }
}

/// One question of an `ask_user` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QuestionSpec {
    pub question: String,
    #[schema(required = true)]
    pub header: Option<String>,
    pub options: Vec<QuestionOption>,
    pub multi_select: bool,
}

/// One option of a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QuestionOption {
    pub label: String,
    #[schema(required = true)]
    pub description: Option<String>,
}

/// The state of a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuestionStatus {
    Requested,
    Answered,
    Rejected,
}

/// `agent.unparsed`: an agent line the daemon could not understand; the line is the event's `raw`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentUnparsedData {
    pub error: String,
    pub location: String,
    #[schema(required = true)]
    pub raw_hash: Option<String>,
}
