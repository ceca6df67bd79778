//! codebuffd: serves the Codebuff coding agent over the sandbox-agent `/v1` universal-events API.
//!
//! Layers, from the bottom: [`universal`] (the output model) ← [`codebuff`] (the input model and
//! `convert_codebuff`, pure) ← [`agent`] (framing and supervising agent processes) and
//! [`session`] (sessions, turns and the lifecycle rules) ← the commands.

pub mod agent;
pub mod cli;
pub mod codebuff;
pub mod config;
pub mod convert;
pub mod http;
pub mod instance;
pub mod server;
pub mod session;
pub mod store;
pub mod universal;
