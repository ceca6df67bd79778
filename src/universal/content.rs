//! Content parts: the typed pieces an item's `content` is made of.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// One piece of an item's content, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text: a user prompt, an assistant message.
    #[schema(title = "TextPart")]
    Text { text: String },
    /// Structured data the agent produced that fits no other part (unknown events, status details).
    #[schema(title = "JsonPart")]
    Json { json: Value },
    /// A tool invocation; `arguments` is the JSON text of the tool's input.
    #[schema(title = "ToolCallPart")]
    ToolCall {
        name: String,
        arguments: String,
        call_id: String,
    },
    /// A tool's result; `output` is text (JSON text for structured results).
    #[schema(title = "ToolResultPart")]
    ToolResult { call_id: String, output: String },
    /// A file the item read, wrote or patched; `diff` when the agent reported one.
    #[schema(title = "FileRefPart")]
    FileRef {
        path: String,
        action: FileAction,
        #[schema(required = true)]
        diff: Option<String>,
    },
    /// Model reasoning ("thinking").
    #[schema(title = "ReasoningPart")]
    Reasoning {
        text: String,
        visibility: ReasoningVisibility,
    },
    /// An image (e.g. a media tool result).
    #[schema(title = "ImagePart")]
    Image {
        path: String,
        #[schema(required = true)]
        mime: Option<String>,
    },
    /// A status line (agent start, subagent lifecycle, fork-specific status events).
    #[schema(title = "StatusPart")]
    Status {
        label: String,
        #[schema(required = true)]
        detail: Option<String>,
    },
}

/// What a `file_ref` did to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileAction {
    Read,
    Write,
    Patch,
}

/// Whether reasoning text may be shown to end users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningVisibility {
    Public,
    Private,
}
