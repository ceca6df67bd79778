//! The agent command contract (`docs/agent-command.md` §1), both halves in one place: the
//! daemon builds a turn's command line with [`agent_args`], and agent commands written in Rust
//! (the mock agent) parse it with [`AgentCommandArgs`]. A round-trip test keeps them in step.
//!
//! ```text
//! --stream-json [--free|--max|--plan] [--continue ID] [--timeout SECONDS] [--cwd DIR]
//!               [--model MODEL] [--] PROMPT
//! ```
//!
//! Every value is its own argv element; nothing is ever interpolated into a shell string.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The parameters of one agent turn that end up on its command line.
#[derive(Debug, Clone, Copy)]
pub struct TurnCommand<'a> {
    /// The session's agent mode: `build` (or `None`) for the default agent, `free` (alias
    /// `lite`), `max` or `plan`. Unknown modes get the default agent; the session layer validates
    /// modes before they get here.
    pub agent_mode: Option<&'a str>,
    /// The model to ask for, if the session chose one.
    pub model: Option<&'a str>,
    /// The conversation to resume: the `sessionId` of the previous turn's `start` event.
    pub continue_session: Option<&'a str>,
    /// How long the agent may run before it aborts itself.
    pub timeout: Option<Duration>,
    /// The directory the agent works in.
    pub cwd: &'a Path,
    /// The user's message, passed as the last argument.
    pub prompt: &'a str,
}

/// The arguments (after the program) for one agent turn.
///
/// The prompt is always the last element; when it starts with `-` a `--` precedes it so it cannot
/// be read as a flag. The timeout is given in whole seconds, rounded up, at least 1.
pub fn agent_args(cmd: &TurnCommand) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--stream-json".into()];
    match cmd.agent_mode {
        Some("free" | "lite") => args.push("--free".into()),
        Some("max") => args.push("--max".into()),
        Some("plan") => args.push("--plan".into()),
        _ => {}
    }
    if let Some(id) = cmd.continue_session {
        args.push("--continue".into());
        args.push(id.into());
    }
    if let Some(timeout) = cmd.timeout {
        args.push("--timeout".into());
        args.push(whole_seconds(timeout).to_string().into());
    }
    args.push("--cwd".into());
    args.push(cmd.cwd.into());
    if let Some(model) = cmd.model {
        args.push("--model".into());
        args.push(model.into());
    }
    if cmd.prompt.starts_with('-') {
        args.push("--".into());
    }
    args.push(cmd.prompt.into());
    args
}

/// `duration` in whole seconds, rounded up, at least 1.
fn whole_seconds(duration: Duration) -> u64 {
    let rounded_up = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    rounded_up.max(1)
}

/// The contract's arguments as an agent command parses them (`codebuffd mock-agent …`).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct AgentCommandArgs {
    /// Emit JSON lines (the only output format; accepted for compatibility).
    #[arg(long)]
    pub stream_json: bool,
    /// Free mode (`base2-lite`).
    #[arg(long, alias = "lite")]
    pub free: bool,
    /// Max mode (`base2-max`).
    #[arg(long)]
    pub max: bool,
    /// Plan mode (`base2-plan`).
    #[arg(long)]
    pub plan: bool,
    /// Resume the conversation with this id (from a previous run's `start.sessionId`).
    #[arg(long = "continue", value_name = "SESSION_ID")]
    pub continue_session: Option<String>,
    /// Abort the run after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Working directory.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Model id.
    #[arg(long)]
    pub model: Option<String>,
    /// The prompt (last argument).
    pub prompt: String,
}

impl AgentCommandArgs {
    /// The agent mode the flags select: `build`, `free`, `max` or `plan`.
    pub fn agent_mode(&self) -> &'static str {
        match (self.free, self.max, self.plan) {
            (true, _, _) => "free",
            (_, true, _) => "max",
            (_, _, true) => "plan",
            _ => "build",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Parses arguments the way an agent command would.
    #[derive(Debug, Parser)]
    struct Agent {
        #[command(flatten)]
        args: AgentCommandArgs,
    }

    fn parse(args: Vec<OsString>) -> AgentCommandArgs {
        let argv = std::iter::once(OsString::from("agent")).chain(args);
        Agent::try_parse_from(argv)
            .expect("the built arguments parse")
            .args
    }

    fn base(prompt: &str) -> TurnCommand<'_> {
        TurnCommand {
            agent_mode: None,
            model: None,
            continue_session: None,
            timeout: None,
            cwd: Path::new("/work/repo"),
            prompt,
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter()
            .map(|a| a.into_string().expect("utf-8"))
            .collect()
    }

    #[test]
    fn a_plain_turn_has_stream_json_cwd_and_the_prompt_last() {
        assert_eq!(
            strings(agent_args(&base("fix the tests"))),
            ["--stream-json", "--cwd", "/work/repo", "fix the tests"]
        );
    }

    #[test]
    fn every_option_in_contract_order() {
        let cmd = TurnCommand {
            agent_mode: Some("max"),
            model: Some("openai/gpt-5"),
            continue_session: Some("sess-1"),
            timeout: Some(Duration::from_secs(90)),
            ..base("go on")
        };
        assert_eq!(
            strings(agent_args(&cmd)),
            [
                "--stream-json",
                "--max",
                "--continue",
                "sess-1",
                "--timeout",
                "90",
                "--cwd",
                "/work/repo",
                "--model",
                "openai/gpt-5",
                "go on"
            ]
        );
    }

    #[test]
    fn modes_map_to_their_flags() {
        let flag = |mode: Option<&str>| {
            let args = strings(agent_args(&TurnCommand {
                agent_mode: mode,
                ..base("p")
            }));
            args.get(1).filter(|a| *a != "--cwd").cloned()
        };
        assert_eq!(flag(None), None);
        assert_eq!(flag(Some("build")), None);
        assert_eq!(flag(Some("free")).as_deref(), Some("--free"));
        assert_eq!(flag(Some("lite")).as_deref(), Some("--free"));
        assert_eq!(flag(Some("max")).as_deref(), Some("--max"));
        assert_eq!(flag(Some("plan")).as_deref(), Some("--plan"));
        assert_eq!(flag(Some("unknown")), None);
    }

    #[test]
    fn the_timeout_is_whole_seconds_rounded_up_at_least_one() {
        let timeout = |d: Duration| {
            let args = strings(agent_args(&TurnCommand {
                timeout: Some(d),
                ..base("p")
            }));
            args[2].clone()
        };
        assert_eq!(timeout(Duration::from_millis(1500)), "2");
        assert_eq!(timeout(Duration::from_secs(3)), "3");
        assert_eq!(timeout(Duration::ZERO), "1");
        assert_eq!(timeout(Duration::from_nanos(1)), "1");
    }

    #[test]
    fn a_prompt_starting_with_a_dash_follows_a_double_dash() {
        let args = strings(agent_args(&base("--help me")));
        assert_eq!(args[args.len() - 2..], ["--", "--help me"]);
        let args = strings(agent_args(&base("-")));
        assert_eq!(args[args.len() - 2..], ["--", "-"]);
    }

    #[test]
    fn prompts_are_single_arguments_whatever_they_contain() {
        let prompt = "it's \"quoted\"; $(rm -rf /) `x` \n second line";
        let args = strings(agent_args(&base(prompt)));
        assert_eq!(args.last().map(String::as_str), Some(prompt));
        assert!(!args.contains(&"--".to_owned()));
        let args = strings(agent_args(&base("")));
        assert_eq!(args.last().map(String::as_str), Some(""));
    }

    #[test]
    fn what_the_daemon_builds_an_agent_command_parses_back() {
        for (mode, model, resume, timeout, prompt) in [
            (None, None, None, None, "plain"),
            (
                Some("free"),
                Some("m/x"),
                Some("s-1"),
                Some(90),
                "--looks like a flag",
            ),
            (Some("max"), None, None, Some(1), "-"),
            (
                Some("plan"),
                Some("p"),
                Some("s 2"),
                None,
                "multi\nline $(x)",
            ),
        ] {
            let cmd = TurnCommand {
                agent_mode: mode,
                model,
                continue_session: resume,
                timeout: timeout.map(Duration::from_secs),
                cwd: Path::new("/srv/my repo"),
                prompt,
            };
            let parsed = parse(agent_args(&cmd));
            assert!(parsed.stream_json);
            assert_eq!(parsed.agent_mode(), mode.unwrap_or("build"));
            assert_eq!(parsed.model.as_deref(), model);
            assert_eq!(parsed.continue_session.as_deref(), resume);
            assert_eq!(parsed.timeout, timeout.map(|t| t as f64));
            assert_eq!(parsed.cwd.as_deref(), Some(Path::new("/srv/my repo")));
            assert_eq!(parsed.prompt, prompt);
        }
    }
}
