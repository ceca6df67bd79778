//! The universal event model: what the daemon records and serves (`docs/universal-events.md`).
//!
//! This module is the bottom of the crate's dependency graph: it depends on nothing else in the
//! crate and does no I/O. Every type serializes exactly as the spec says (key order, snake_case,
//! explicit `null` for absent optionals unless the spec says "omitted").
//!
//! Every served type also describes itself for the OpenAPI document (`utoipa::ToSchema`;
//! `docs/openapi.md`), and the description must match the JSON: an `Option` that is always
//! written (as `null` when absent) is `#[schema(required = true)]`; one left out when absent
//! (`skip_serializing_if`) is `#[schema(nullable = false)]`. `tests/openapi.rs` checks real
//! transcripts against it. The hand-written envelope has its schema in `schema.rs`.

mod content;
mod cost;
mod data;
mod diff;
mod envelope;
mod event;
mod item;
mod schema;
mod stderr;
mod text;
mod time;

pub use content::{ContentPart, FileAction, ReasoningVisibility};
pub use cost::Cost;
pub use data::{
    AgentUnparsedData, ErrorData, ItemDeltaData, ItemEventData, PermissionData, PermissionReply,
    PermissionStatus, QuestionData, QuestionOption, QuestionSpec, QuestionStatus, SessionEndReason,
    SessionEndedData, SessionMetadata, SessionStartedData, TerminatedBy, TurnData, TurnMetadata,
    TurnPhase, TurnStatus,
};
pub use diff::unified_diff;
#[cfg(test)]
pub(crate) use envelope::sample_drafts;
pub use envelope::{json_string, layout, Digits, Envelope};
pub use event::{
    known_event_type, EventData, EventDraft, EventSource, EventView, Payload, RawLine,
    UniversalEvent, EVENT_TYPES,
};
pub use item::{Item, ItemKind, ItemRole, ItemStatus};
pub use stderr::{StderrCollector, StderrOutput};
pub use text::{EventText, TextBlocks};
pub use time::format_time;
