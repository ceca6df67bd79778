//! The command line: `codebuffd convert` (and, as they land, the daemon's commands).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// codebuffd: the Codebuff coding agent behind the sandbox-agent `/v1` universal-events API.
#[derive(Debug, Parser)]
#[command(name = "codebuffd", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Convert a Codebuff JSON-lines stream to universal events (one JSON per line on stdout),
    /// as a new session's single turn would record them.
    Convert(ConvertArgs),
}

/// Arguments of `codebuffd convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// The Codebuff stream to read; `-` or nothing for stdin.
    pub file: Option<PathBuf>,
    /// The user's prompt for the turn (records the user item).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Keep each event's original agent line in `raw`.
    #[arg(long)]
    pub include_raw: bool,
    /// The session id the events carry.
    #[arg(long, default_value = "convert")]
    pub session_id: String,
    /// Longest accepted line, in bytes; longer lines are reported as `agent.unparsed`.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub max_line_bytes: usize,
    /// Stamp every event with this time instead of the clock (reproducible output).
    #[arg(long, value_name = "RFC3339")]
    pub fixed_time: Option<String>,
}
