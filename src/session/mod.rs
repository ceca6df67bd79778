//! Sessions: their settings, the actor that runs their turns and enforces the lifecycle rules,
//! the registry of all sessions, and the stamping of events into a log.

mod actor;
mod context;
mod error;
mod info;
mod manager;
mod recorder;
mod recovery;
mod settings;

pub use context::{Limits, SessionContext};
pub use error::SessionError;
pub use info::{EndState, SessionInfo, SessionStatus};
pub use manager::SessionManager;
pub use recorder::Recorder;
pub use recovery::LogSummary;
pub use settings::{CreateRequest, SessionSettings, AGENT_MODES, PERMISSION_MODES};
