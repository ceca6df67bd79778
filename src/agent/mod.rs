//! Running agent commands: building their command lines and environment, spawning and
//! supervising them (process groups, bounded line framing, stdin answers, kill escalation),
//! and the scripted mock agent.

mod framing;
pub mod mock;

pub use framing::{Frame, LineFramer};
