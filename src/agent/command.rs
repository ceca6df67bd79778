//! The command line of one agent turn (the stream-json contract, spec §1).
//!
//! ```text
//! --stream-json [--free|--max|--plan] [--continue ID] [--timeout SECONDS] [--cwd DIR]
//!               [--model MODEL] [--] PROMPT
//! ```
//!
//! Every value is its own argv element; nothing is ever interpolated into a shell string.

use std::ffi::OsString;
use std::path::Path;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
