//! The agent command contract (`docs/agent-command.md` §1), both halves in one place: the
//! daemon builds a turn's command line ([`agent_args`]) or, as it launches agents, its turn line
//! ([`TurnLine`], with `--stdin-turn`), and agent commands written in Rust (the mock agent) parse
//! them ([`AgentCommandArgs`], [`TurnLine::parse`]). Round-trip tests keep the halves in step.
//!
//! ```text
//! --stream-json --stdin-turn                     then one JSON turn line on stdin
//! --stream-json [--free|--max|--plan] [--continue ID] [--timeout SECONDS] [--cwd DIR]
//!               [--model MODEL] [--] PROMPT
//! ```
//!
//! Every value is its own argv element or a JSON string; nothing is ever interpolated into a
//! shell string.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The arguments of an agent started before its turn is known: the turn comes on stdin.
pub const STDIN_TURN_ARGS: [&str; 2] = ["--stream-json", "--stdin-turn"];

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
    /// Read the turn as one JSON line from stdin (`docs/agent-command.md` §1.1) instead of
    /// these flags and the prompt.
    #[arg(long, conflicts_with_all = ["free", "max", "plan", "continue_session", "timeout", "cwd", "model", "prompt"])]
    pub stdin_turn: bool,
    /// The prompt (last argument).
    #[arg(required_unless_present = "stdin_turn")]
    pub prompt: Option<String>,
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

/// An image sent to the model with the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnImage {
    /// The image file (absolute, or relative to the turn's `cwd`).
    pub path: String,
    /// Its media type (`image/png`, …).
    pub mime: String,
}

/// The turn line an agent started with `--stdin-turn` reads first (`docs/agent-command.md`
/// §1.1). Unknown fields are ignored by readers.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnLine {
    /// Always `turn`.
    #[serde(rename = "type")]
    pub kind: String,
    pub prompt: String,
    /// `build`, `free` (alias `lite`), `max` or `plan`.
    pub mode: String,
    pub model: Option<String>,
    /// The conversation to resume.
    #[serde(rename = "continue")]
    pub continue_session: Option<String>,
    pub timeout_seconds: Option<f64>,
    pub cwd: PathBuf,
    /// Extra environment for the agent and what it runs.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The credential; never in the agent's environment.
    pub api_key: Option<String>,
    /// `bypass` (tools run without asking) or `ask` (mutating tools ask first).
    #[serde(default = "bypass")]
    pub permission_mode: String,
    #[serde(default)]
    pub images: Vec<TurnImage>,
}

fn bypass() -> String {
    "bypass".to_owned()
}

impl std::fmt::Debug for TurnLine {
    /// Never shows the credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnLine")
            .field("mode", &self.mode)
            .field("model", &self.model)
            .field("continue", &self.continue_session)
            .field("timeout_seconds", &self.timeout_seconds)
            .field("cwd", &self.cwd)
            .field("prompt_bytes", &self.prompt.len())
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl TurnLine {
    /// The turn line for a turn (the timeout in whole seconds, rounded up, as on argv).
    pub fn new(cmd: &TurnCommand, env: &[(String, String)], api_key: Option<&str>) -> TurnLine {
        TurnLine {
            kind: "turn".to_owned(),
            prompt: cmd.prompt.to_owned(),
            mode: match cmd.agent_mode {
                Some("free" | "lite") => "free",
                Some("max") => "max",
                Some("plan") => "plan",
                _ => "build",
            }
            .to_owned(),
            model: cmd.model.map(str::to_owned),
            continue_session: cmd.continue_session.map(str::to_owned),
            timeout_seconds: cmd.timeout.map(|t| whole_seconds(t) as f64),
            cwd: cmd.cwd.to_path_buf(),
            env: env.iter().cloned().collect(),
            api_key: api_key.map(str::to_owned),
            permission_mode: bypass(),
            images: Vec::new(),
        }
    }

    /// The line (one line of JSON, no newline).
    pub fn to_line(&self) -> String {
        // Plain data: serializing cannot fail, and JSON escapes every line break.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a turn line.
    pub fn parse(line: &str) -> Result<TurnLine, String> {
        let turn: TurnLine =
            serde_json::from_str(line).map_err(|e| format!("not a turn line: {e}"))?;
        if turn.kind != "turn" {
            return Err(format!("not a turn line: type `{}`", turn.kind));
        }
        Ok(turn)
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
            assert_eq!(parsed.prompt.as_deref(), Some(prompt));

            let line = TurnLine::new(&cmd, &[("K".into(), "v".into())], Some("sk-1")).to_line();
            assert!(!line.contains('\n'), "one line: {line}");
            let back = TurnLine::parse(&line).unwrap();
            assert_eq!(
                back.mode,
                mode.map_or("build", |m| if m == "lite" { "free" } else { m })
            );
            assert_eq!(back.model.as_deref(), model);
            assert_eq!(back.continue_session.as_deref(), resume);
            assert_eq!(back.timeout_seconds, timeout.map(|t| t as f64));
            assert_eq!(back.cwd, Path::new("/srv/my repo"));
            assert_eq!(back.prompt, prompt);
            assert_eq!(back.env.get("K").map(String::as_str), Some("v"));
            assert_eq!(back.api_key.as_deref(), Some("sk-1"));
            assert_eq!(back.permission_mode, "bypass");
        }
    }

    #[test]
    fn the_stdin_turn_form_parses_and_excludes_the_argv_form() {
        let args = parse(STDIN_TURN_ARGS.iter().map(OsString::from).collect());
        assert!(args.stdin_turn && args.stream_json);
        assert_eq!(args.prompt, None);
        let argv = ["agent", "--stream-json", "--stdin-turn", "a prompt"];
        assert!(Agent::try_parse_from(argv).is_err());
        assert!(Agent::try_parse_from(["agent", "--stream-json"]).is_err());
    }

    #[test]
    fn a_turn_line_takes_a_megabyte_prompt_and_hides_the_key_in_debug() {
        let prompt = "x\n".repeat(512 * 1024);
        let cmd = TurnCommand {
            prompt: &prompt,
            ..base("")
        };
        let turn = TurnLine::new(&cmd, &[], Some("sk-secret"));
        let line = turn.to_line();
        assert!(line.len() > 1024 * 1024 && !line.contains('\n'));
        assert_eq!(TurnLine::parse(&line).unwrap().prompt, prompt);
        assert!(!format!("{turn:?}").contains("sk-secret"));
    }

    #[test]
    fn lines_that_are_not_turns_are_refused() {
        assert!(TurnLine::parse("{}").is_err());
        assert!(
            TurnLine::parse(r#"{"type":"other","prompt":"p","mode":"build","cwd":"/"}"#).is_err()
        );
        assert!(TurnLine::parse("not json").is_err());
        let minimal = r#"{"type":"turn","prompt":"p","mode":"build","model":null,"continue":null,"timeoutSeconds":null,"cwd":"/","apiKey":null}"#;
        let turn = TurnLine::parse(minimal).unwrap();
        assert_eq!(turn.permission_mode, "bypass");
        assert!(turn.env.is_empty() && turn.images.is_empty());
    }
}
