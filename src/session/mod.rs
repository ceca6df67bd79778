//! Sessions: their settings, the actor that runs their turns and enforces the lifecycle rules,
//! the registry of all sessions, and their records.

mod actor;
mod agents;
mod answers;
mod command;
mod context;
mod create;
mod driver;
mod ending;
mod engines;
mod error;
mod follow;
mod holding;
mod inbox;
mod info;
mod manager;
mod message;
pub mod observe;
mod owner;
mod queue;
mod record;
mod recover;
mod recovery;
pub mod retention;
mod settings;
mod tracker;
mod turn;

pub use agents::AgentStatus;
pub use context::{Limits, SessionContext};
// The engine's facade: what a door needs to name agents, prompt images and permission
// replies, without reaching into the layers below.
pub use crate::agent::{AgentKind, TurnImage};
pub use crate::universal::PermissionReply;
pub use driver::{decide_outcome, Ending, StopReason, TurnDriver};
pub use engines::{EngineInfo, EngineList};
pub use error::SessionError;
pub use follow::{Follow, ItemDeltaText, LoggedEvent, DEFAULT_PAGE};
pub use info::{EndState, SessionInfo, SessionStatus};
pub use manager::{Cancel, QueuedTurn, SessionManager};
pub use message::UserMessage;
pub use owner::REAP_EVERY;
pub use queue::MAX_QUEUED;
pub use recovery::LogSummary;
pub use settings::{CreatePolicy, CreateRequest, SessionSettings, AGENT_MODES, PERMISSION_MODES};
pub use tracker::{TurnEnd, TurnTracker};
