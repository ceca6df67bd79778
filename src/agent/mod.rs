//! Running agent commands: the command contract, starting a turn's agent (program, arguments,
//! environment, credential), supervising it (process groups, bounded line framing, stdin
//! answers, kill escalation), the scripted mock agent, and the Codebuff adapter this binary
//! carries with the Node.js it needs.

pub mod adapter;
mod command;
pub mod credentials;
mod environment;
mod framing;
mod launch;
mod launcher;
pub mod mock;
pub mod node;
mod process;
pub mod procfs;
pub mod reaper;

pub use adapter::AdapterSource;
pub use command::{
    agent_args, AgentCommandArgs, TurnCommand, TurnImage, TurnLine, STDIN_TURN_ARGS,
};
pub use credentials::{Credential, CredentialSource};
pub use environment::{agent_env, is_loader_variable};
pub use framing::{Frame, LineFramer};
pub use launch::{AgentHost, LaunchError, StartedAgent, TurnLaunch};
pub use launcher::{AgentKind, Installation, Launcher};
pub use node::InstallError;
pub use process::{
    AgentProcess, ExitInfo, OutputStream, ProcessEvent, SpawnError, SpawnSpec, PIPE_EOF_GRACE,
};
