//! Items: the units of a conversation (messages, tool calls and results, status lines).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ContentPart;

/// One conversation item as carried by `item.started` / `item.completed`.
///
/// `item_id` is the daemon's (`itm_N`, stable per session); `native_item_id` keeps the agent's own
/// id (tool call id, subagent id, run id) so a client can correlate; `parent_id` is the `itm_N` of
/// the subagent item this item belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Item {
    pub item_id: String,
    #[schema(required = true)]
    pub native_item_id: Option<String>,
    #[schema(required = true)]
    pub parent_id: Option<String>,
    pub kind: ItemKind,
    #[schema(required = true)]
    pub role: Option<ItemRole>,
    /// Shared, because the same content goes out in `item.started` and `item.completed`.
    #[schema(value_type = Vec<ContentPart>)]
    pub content: Arc<Vec<ContentPart>>,
    pub status: ItemStatus,
}

impl Item {
    /// The item's text parts, joined; `None` when it has none (a tool call, an image …).
    pub fn text(&self) -> Option<String> {
        let mut texts = self.content.iter().filter_map(|p| match p {
            ContentPart::Text { text } => Some(text.as_str()),
            _ => None,
        });
        let first = texts.next()?;
        let mut joined = first.to_owned();
        joined.extend(texts);
        Some(joined)
    }

    /// True for a top-level assistant message (not a subagent's): the turn's answer is the
    /// last of these.
    pub fn is_answer(&self) -> bool {
        self.kind == ItemKind::Message
            && self.role == Some(ItemRole::Assistant)
            && self.parent_id.is_none()
    }
}

/// What sort of item it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    Message,
    ToolCall,
    ToolResult,
    System,
    Status,
    Unknown,
}

/// Who speaks in the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemRole {
    User,
    Assistant,
    System,
    Tool,
}

/// Where the item is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Failed,
}
