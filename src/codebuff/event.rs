//! `PrintModeEvent`: one line of a Codebuff agent command's output (`docs/codebuff-events.md` §1).
//!
//! Known types are parsed into typed structs (lenient about optional fields and legacy shapes);
//! fork types and unknown types are accepted and kept whole as [`OtherEvent`]. Fields a typed
//! struct does not name are not lost: the converter keeps every line verbatim as the event's `raw`.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod parse;

pub use parse::ParseError;

/// Types added by the Openbuff fork; recorded as `status` items labelled with the type.
pub const FORK_TYPES: &[&str] = &[
    "provider_status",
    "tool_start",
    "phase",
    "context_window",
    "context_compaction",
    "context_compaction_start",
    "context_compaction_end",
    "memory_reuse",
    "job_update",
];

/// One Codebuff event, by `type`.
///
/// Each line's event is moved several times between parsing and conversion, so the events a
/// turn has few of are boxed: the enum is as large as a streamed delta (profile of a flood:
/// copying a 240-byte enum was a quarter of parsing a line).
#[derive(Debug, Clone)]
pub enum PrintModeEvent {
    /// Once per run, first. `sessionId` is our shim's extension (the id for `--continue`).
    Start(Box<StartEvent>),
    /// A consolidated segment of assistant text.
    Text(TextEvent),
    /// (ours) A streamed chunk of assistant text preceding the `text` segment.
    TextDelta(TextEvent),
    /// A tool invocation.
    ToolCall(Box<ToolCallEvent>),
    /// A tool's result.
    ToolResult(Box<ToolResultEvent>),
    /// Partial tool output (seed-listed; in no known Codebuff version).
    ToolProgress(Box<ToolProgressEvent>),
    /// A subagent began.
    SubagentStart(Box<SubagentEvent>),
    /// A subagent ended.
    SubagentFinish(Box<SubagentEvent>),
    /// A chunk of model reasoning.
    ReasoningDelta(ReasoningDeltaEvent),
    /// An error; most are not fatal.
    Error(Box<ErrorEvent>),
    /// The run is over; carries its cost in credits.
    Finish(Box<FinishEvent>),
    /// Legacy launcher download progress.
    Download(Box<DownloadEvent>),
    /// (ours) The agent asks before a tool that changes files or runs code.
    PermissionRequest(Box<PermissionRequestEvent>),
    /// (ours) The run's cost so far, in credits, as it grows.
    Cost(CostEvent),
    /// A fork type ([`FORK_TYPES`]) or a type nobody knows: kept whole.
    Other(Box<OtherEvent>),
}

/// Fields of `start`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartEvent {
    pub agent_id: Option<String>,
    pub message_history_length: Option<u64>,
    pub session_id: Option<String>,
    pub model: Option<String>,
}

/// Fields of `text` and `text_delta`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextEvent {
    pub text: String,
    pub agent_id: Option<String>,
}

/// Fields of `tool_call` (legacy streams call `input` `args`). `input` is kept as the agent
/// wrote it: it becomes the item's `arguments` text unchanged, and is parsed only for the tools
/// whose input the daemon reads (file tools, `ask_user`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    pub tool_call_id: String,
    pub tool_name: String,
    #[serde(default, alias = "args")]
    pub input: Option<Box<RawValue>>,
    pub agent_id: Option<String>,
    pub parent_agent_id: Option<String>,
    pub include_tool_call: Option<bool>,
}

/// Fields of `tool_result`: `output` is `ToolResultOutput[]`; legacy streams send `result` text.
/// Both are kept as written (the item's `output` text) and parsed only when needed.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultEvent {
    pub tool_call_id: String,
    pub tool_name: Option<String>,
    pub output: Option<Box<RawValue>>,
    pub result: Option<Box<RawValue>>,
    pub agent_id: Option<String>,
    pub parent_agent_id: Option<String>,
}

/// Fields of `tool_progress`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolProgressEvent {
    pub tool_call_id: String,
    pub tool_name: Option<String>,
    #[serde(default)]
    pub output: Value,
    pub agent_id: Option<String>,
    pub parent_agent_id: Option<String>,
}

/// Fields of `subagent_start` and `subagent_finish`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentEvent {
    pub agent_id: String,
    pub agent_type: Option<String>,
    pub display_name: Option<String>,
    pub only_child: Option<bool>,
    pub parent_agent_id: Option<String>,
    pub params: Option<Value>,
    pub prompt: Option<String>,
    pub model: Option<String>,
}

/// Fields of `reasoning_delta`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningDeltaEvent {
    pub text: String,
    pub run_id: Option<String>,
    #[serde(default)]
    pub ancestor_run_ids: Vec<String>,
    pub agent_id: Option<String>,
}

/// Fields of `error`; `code`, `statusCode` and `fatal` are the agent command's extensions on
/// failed runs (`docs/agent-command.md` §2.1).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorEvent {
    pub message: String,
    pub source: Option<String>,
    pub code: Option<String>,
    pub status_code: Option<Value>,
    /// True on the one error that ends a failed run.
    #[serde(default)]
    pub fatal: bool,
}

/// Fields of `finish`: `totalCost` is this run's cost in credits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishEvent {
    pub agent_id: Option<String>,
    pub total_cost: Option<f64>,
}

/// Fields of `permission_request` (`docs/agent-command.md` §5).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequestEvent {
    pub request_id: String,
    pub tool_call_id: Option<String>,
    pub tool_name: String,
    pub kind: Option<String>,
    pub title: Option<String>,
    pub command: Option<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub input: Value,
}

/// Fields of `cost`: the run's cost so far.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CostEvent {
    pub total_cost: f64,
}

/// Fields of `download`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadEvent {
    pub version: Option<String>,
    pub status: Option<String>,
}

/// A fork or unknown event, kept whole (including its `type`).
#[derive(Debug, Clone, PartialEq)]
pub struct OtherEvent {
    pub event_type: String,
    pub fields: Map<String, Value>,
}

impl OtherEvent {
    /// True for the Openbuff fork's types.
    pub fn is_fork_type(&self) -> bool {
        FORK_TYPES.contains(&self.event_type.as_str())
    }
}

impl PrintModeEvent {
    /// The event's `type` as written on the wire.
    pub fn event_type(&self) -> &str {
        match self {
            PrintModeEvent::Start(_) => "start",
            PrintModeEvent::Text(_) => "text",
            PrintModeEvent::TextDelta(_) => "text_delta",
            PrintModeEvent::ToolCall(_) => "tool_call",
            PrintModeEvent::ToolResult(_) => "tool_result",
            PrintModeEvent::ToolProgress(_) => "tool_progress",
            PrintModeEvent::SubagentStart(_) => "subagent_start",
            PrintModeEvent::SubagentFinish(_) => "subagent_finish",
            PrintModeEvent::ReasoningDelta(_) => "reasoning_delta",
            PrintModeEvent::Error(_) => "error",
            PrintModeEvent::Finish(_) => "finish",
            PrintModeEvent::Download(_) => "download",
            PrintModeEvent::PermissionRequest(_) => "permission_request",
            PrintModeEvent::Cost(_) => "cost",
            PrintModeEvent::Other(o) => &o.event_type,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_no_larger_than_a_streamed_delta() {
        let delta = std::mem::size_of::<ReasoningDeltaEvent>();
        assert!(std::mem::size_of::<PrintModeEvent>() <= delta + 8);
    }
}
