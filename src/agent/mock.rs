//! The mock agent (`codebuffd mock-agent`): placeholder until implemented.

use crate::cli::AgentCommandArgs;

/// Runs one mock turn; returns the process exit code.
pub fn run(_args: AgentCommandArgs) -> u8 {
    1
}
