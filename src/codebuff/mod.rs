//! The Codebuff side: the `PrintModeEvent` input model and `convert_codebuff`, which turns agent
//! lines into universal events (`docs/codebuff-events.md`).
//!
//! Pure code: no I/O and no clock. The caller frames lines, passes them in, and stamps the
//! resulting drafts with time and sequence.

mod answer;
mod converter;
mod event;
mod ids;
mod intake;
mod open_items;
mod permissions;
mod questions;
mod shell;
mod text_buf;
mod tools;

pub use answer::{answer_line, skip_line, AnswerError};
pub use converter::{CodebuffConverter, TurnOutcome};
pub use event::{
    CostEvent, DownloadEvent, ErrorEvent, FinishEvent, OtherEvent, ParseError,
    PermissionRequestEvent, PrintModeEvent, ReasoningDeltaEvent, StartEvent, SubagentEvent,
    TextEvent, ToolCallEvent, ToolProgressEvent, ToolResultEvent, FORK_TYPES,
};
pub use intake::Stream;
pub use permissions::{
    DecidedBy, PermissionError, PermissionMode, PermissionReply, PermissionRequest,
};
pub use questions::QuestionError;
pub use shell::{command_prefix, simple_command, Word};
