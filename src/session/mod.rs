//! Sessions: their settings, the actor that runs their turns and enforces the lifecycle rules,
//! the registry of all sessions, and their records.

mod actor;
mod context;
mod error;
mod info;
mod manager;
mod message;
pub mod observe;
mod record;
mod recover;
mod recovery;
pub mod retention;
mod settings;
mod turn;

pub use context::{Limits, SessionContext};
pub use error::SessionError;
pub use info::{EndState, SessionInfo, SessionStatus};
pub use manager::SessionManager;
pub use message::UserMessage;
pub use recovery::LogSummary;
pub use settings::{CreatePolicy, CreateRequest, SessionSettings, AGENT_MODES, PERMISSION_MODES};
pub use turn::{decide_outcome, Ending, StopReason, TurnDriver};
