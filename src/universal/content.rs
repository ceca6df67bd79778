//! Content parts: the typed pieces an item's `content` is made of.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One piece of an item's content, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text: a user prompt, an assistant message.
    Text { text: String },
    /// Structured data the agent produced that fits no other part (unknown events, status details).
    Json { json: Value },
    /// A tool invocation; `arguments` is the JSON text of the tool's input.
    ToolCall {
        name: String,
        arguments: String,
        call_id: String,
    },
    /// A tool's result; `output` is text (JSON text for structured results).
    ToolResult { call_id: String, output: String },
    /// A file the item read, wrote or patched; `diff` when the agent reported one.
    FileRef {
        path: String,
        action: FileAction,
        diff: Option<String>,
    },
    /// Model reasoning ("thinking").
    Reasoning {
        text: String,
        visibility: ReasoningVisibility,
    },
    /// An image (e.g. a media tool result).
    Image { path: String, mime: Option<String> },
    /// A status line (agent start, subagent lifecycle, fork-specific status events).
    Status {
        label: String,
        detail: Option<String>,
    },
}

/// What a `file_ref` did to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileAction {
    Read,
    Write,
    Patch,
}

/// Whether reasoning text may be shown to end users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningVisibility {
    Public,
    Private,
}
