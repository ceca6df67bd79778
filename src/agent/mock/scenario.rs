//! The mock agent's scenarios: the prompt's first word picks one, the rest is its argument.
//!
//! Each scenario is one function that plays a scripted turn in the event shapes of real
//! Codebuff (`docs/codebuff-events.md` §1, fixtures in `fixtures/codebuff/`) after `start`, and says
//! how the run ended; the supervisor (`mod.rs`) writes the closing `finish`.

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::ask;
use super::gate;
use super::output::{flood_line, EmitError, Emitter};
use super::state::Session;
use super::workspace;

/// The root agent's id in `tool_call` events.
const MAIN_AGENT: &str = "main-agent";

/// Size of the `huge` scenario's text: one line of at least 5 MiB.
pub(super) const HUGE_TEXT_BYTES: usize = 5 * 1024 * 1024;

/// Deltas in `flood` when the prompt gives no count.
const DEFAULT_FLOOD_COUNT: u64 = 1000;

/// A scripted turn, chosen by the prompt's first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scenario {
    Echo,
    Stream,
    Reasoning,
    Tools,
    Subagent,
    Ask,
    Error,
    Fail,
    Crash,
    Hang,
    Garbage,
    Huge,
    Flood,
    /// Starts a process that leaves the turn's process group (`setsid`), then ends (or hangs).
    Escape,
    /// One `write_file` of `gated.txt`, then one command writing `gated-cmd.txt`: each asks
    /// first when the turn asks permission.
    Gated,
    /// `run <command line>`: one `run_terminal_command` of the argument, asking first when the
    /// turn asks permission.
    Run,
    /// Spends credits step by step (`cost` events), then finishes with the total.
    Spend,
    /// Any other prompt: echoed whole.
    Default,
}

impl Scenario {
    /// The scenario for `prompt` and its argument (the rest after the first word, leading
    /// whitespace removed; the whole prompt for [`Scenario::Default`]).
    pub(super) fn select(prompt: &str) -> (Scenario, &str) {
        let trimmed = prompt.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let (word, rest) = trimmed.split_at(end);
        let scenario = match word {
            "echo" => Scenario::Echo,
            "stream" => Scenario::Stream,
            "reasoning" => Scenario::Reasoning,
            "tools" => Scenario::Tools,
            "subagent" => Scenario::Subagent,
            "ask" => Scenario::Ask,
            "error" => Scenario::Error,
            "fail" => Scenario::Fail,
            "crash" => Scenario::Crash,
            "hang" => Scenario::Hang,
            "garbage" => Scenario::Garbage,
            "huge" => Scenario::Huge,
            "flood" => Scenario::Flood,
            "escape" => Scenario::Escape,
            "gated" => Scenario::Gated,
            "run" => Scenario::Run,
            "spend" => Scenario::Spend,
            _ => return (Scenario::Default, prompt),
        };
        (scenario, rest.trim_start())
    }

    /// Credits the run reports in `finish.totalCost` (deterministic per scenario).
    fn cost(self) -> f64 {
        match self {
            Scenario::Echo | Scenario::Default => 1.25,
            Scenario::Stream => 2.5,
            Scenario::Reasoning => 3.75,
            Scenario::Tools => 7.5,
            Scenario::Subagent => 8.25,
            Scenario::Ask => 3.0,
            Scenario::Error => 2.0,
            Scenario::Garbage => 1.5,
            Scenario::Huge => 4.0,
            Scenario::Flood => 5.0,
            Scenario::Escape => 1.0,
            Scenario::Gated => 6.0,
            Scenario::Run => 1.0,
            Scenario::Spend => 0.0,
            Scenario::Fail | Scenario::Crash | Scenario::Hang => 0.0,
        }
    }
}

/// How a scenario ended (when it ends at all).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Outcome {
    /// Normal end: the supervisor writes `finish` with this cost, exit 0.
    Finished { total_cost: f64 },
    /// A failed run: its `error` is already written; exit with this status, no `finish`.
    Failed { exit: u8 },
}

/// Everything a scenario plays with.
pub(super) struct Turn {
    pub out: Emitter,
    pub scenario: Scenario,
    /// The prompt after the scenario word.
    pub arg: String,
    pub session: Session,
    /// `base2`, `base2-lite`, … by mode.
    pub agent_id: &'static str,
    /// Makes this run's tool call ids unique (`ask-<tag>`), as Codebuff's random ids are.
    pub run_tag: String,
    /// How long `ask` waits for an answer.
    pub question_timeout: Option<std::time::Duration>,
    /// Images sent with the prompt (the turn line's `images`).
    pub images: Vec<crate::agent::TurnImage>,
    /// Ask before tools that write or run something (`permissionMode: "ask"`).
    pub ask_permission: bool,
}

impl Turn {
    fn call_id(&self, name: &str) -> String {
        format!("{name}-{}", self.run_tag)
    }

    /// Asks permission for a tool call when the turn asks (else allows).
    fn permission(
        &mut self,
        id: &str,
        tool: &str,
        input: &serde_json::Value,
        command: Option<&str>,
        paths: &[&str],
    ) -> Result<gate::Decision, EmitError> {
        if !self.ask_permission {
            return Ok(gate::Decision::Allow);
        }
        gate::ask(&mut self.out, id, tool, input, command, paths)
    }

    fn finished(&self) -> Result<Outcome, EmitError> {
        Ok(Outcome::Finished {
            total_cost: self.scenario.cost(),
        })
    }
}

/// Plays the turn: `start`, then the scenario.
pub(super) fn play(t: &mut Turn) -> Result<Outcome, EmitError> {
    let start_agent = t.session.continued.then_some(t.agent_id);
    t.out.start(start_agent, t.session.history, &t.session.id)?;
    match t.scenario {
        Scenario::Echo | Scenario::Default => echo(t),
        Scenario::Stream => stream(t),
        Scenario::Reasoning => reasoning(t),
        Scenario::Tools => tools(t),
        Scenario::Subagent => subagent(t),
        Scenario::Ask => ask(t),
        Scenario::Error => error(t),
        Scenario::Fail => fail(t),
        Scenario::Crash => crash(t),
        Scenario::Hang => hang(),
        Scenario::Garbage => garbage(t),
        Scenario::Huge => huge(t),
        Scenario::Flood => flood(t),
        Scenario::Escape => escape(t),
        Scenario::Gated => gated(t),
        Scenario::Run => run(t),
        Scenario::Spend => spend(t),
    }
}

/// `echo <text>` (and any unknown prompt): one `text` with the argument, and a line per image
/// that came with the prompt (`[image <path> <mime> <N> bytes]`).
fn echo(t: &mut Turn) -> Result<Outcome, EmitError> {
    let mut text = t.arg.clone();
    for image in &t.images {
        let size = std::fs::metadata(&image.path).map_or(0, |m| m.len());
        text.push_str(&format!(
            "\n[image {} {} {size} bytes]",
            image.path, image.mime
        ));
    }
    t.out.text(&text, None)?;
    t.finished()
}

/// `stream <text>`: the text as per-word `text_delta`s, then the whole `text`.
fn stream(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out.stream(&t.arg, None)?;
    t.finished()
}

/// `reasoning [answer]`: the root run thinks aloud, then answers.
fn reasoning(t: &mut Turn) -> Result<Outcome, EmitError> {
    for chunk in ["Let me think", " about the question", " step by step."] {
        t.out.reasoning_delta(chunk, "run-1")?;
    }
    let answer = if t.arg.is_empty() {
        "The answer is 42."
    } else {
        &t.arg
    };
    t.out.stream(answer, None)?;
    t.finished()
}

/// `tools [content]`: three parallel tool calls with real effects in the working directory —
/// `write_file hello.txt`, a failing `str_replace` on a missing file, and a shell command.
fn tools(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out.stream(
        "I will write the file, patch another and run a command.",
        None,
    )?;
    let content = if t.arg.is_empty() {
        "Hello from the mock agent!\n".to_owned()
    } else {
        format!("{}\n", t.arg)
    };
    let command = "echo mock-tools";
    let (write, patch, run) = (t.call_id("write"), t.call_id("patch"), t.call_id("run"));
    let calls = [
        (
            &write,
            "write_file",
            json!({"path": "hello.txt", "instructions": "Create a greeting file", "content": content}),
        ),
        (
            &patch,
            "str_replace",
            json!({"path": "missing.txt",
            "replacements": [{"old": "foo", "new": "bar", "allowMultiple": false}]}),
        ),
        (
            &run,
            "run_terminal_command",
            json!({"command": command, "process_type": "SYNC", "timeout_seconds": 30}),
        ),
    ];
    for (id, name, input) in &calls {
        t.out.tool_call(id, name, input.clone(), MAIN_AGENT, None)?;
    }
    let mut results = Vec::new();
    for (i, (id, name, input)) in calls.iter().enumerate() {
        let (asked_command, paths) = match i {
            0 => (None, vec!["hello.txt"]),
            1 => (None, vec!["missing.txt"]),
            _ => (Some(command), vec![]),
        };
        let decision = t.permission(id, name, input, asked_command, &paths)?;
        results.push(match (decision, i) {
            (gate::Decision::Reject(why), _) => gate::rejected(&gate::Decision::Reject(why)),
            (_, 0) => workspace::write_file("hello.txt", &content),
            (_, 1) => workspace::str_replace("missing.txt", "foo", "bar"),
            _ => workspace::run_command(command),
        });
    }
    for ((id, name, _), value) in calls.iter().zip(results) {
        t.out.tool_result(id, name, value, None)?;
    }
    t.out.stream(
        "Wrote hello.txt, could not patch missing.txt, and ran the command.",
        None,
    )?;
    t.finished()
}

/// `subagent`: `spawn_agents` runs a file picker that reads `hello.txt` and reports back.
fn subagent(t: &mut Turn) -> Result<Outcome, EmitError> {
    const SUB: &str = "sub-1";
    let prompt = "Find the files that greet people.";
    t.out.stream("Let me find the relevant files.", None)?;
    let spawn = t.call_id("spawn");
    t.out.tool_call(
        &spawn,
        "spawn_agents",
        json!({"agents": [{"agent_type": "file-picker", "prompt": prompt}]}),
        MAIN_AGENT,
        None,
    )?;
    let subagent = json!({"agentId": SUB, "agentType": "file-picker", "displayName": "File Picker",
        "onlyChild": true, "parentAgentId": MAIN_AGENT, "prompt": prompt});
    let mut start = json!({"type": "subagent_start"});
    let mut finish = json!({"type": "subagent_finish"});
    for e in [&mut start, &mut finish] {
        if let (Some(e), Some(fields)) = (e.as_object_mut(), subagent.as_object()) {
            e.extend(fields.clone());
        }
    }
    t.out.event(&start)?;
    let read = t.call_id("read");
    t.out.tool_call(
        &read,
        "read_files",
        json!({"paths": ["hello.txt"]}),
        SUB,
        Some(MAIN_AGENT),
    )?;
    t.out.tool_result(
        &read,
        "read_files",
        workspace::read_files(&["hello.txt"]),
        Some(SUB),
    )?;
    let summary = "hello.txt holds the greeting.";
    t.out.stream(summary, Some(SUB))?;
    t.out.event(&finish)?;
    let last_message = json!([{"agentName": "File Picker", "agentType": "file-picker", "value": {
        "type": "lastMessage",
        "value": [{"role": "assistant", "content": [{"type": "text", "text": summary}]}],
    }}]);
    t.out
        .tool_result(&spawn, "spawn_agents", last_message, None)?;
    t.out
        .stream("The file picker says hello.txt holds the greeting.", None)?;
    t.finished()
}

/// `ask`: asks two questions with `ask_user`, waits for the answer on stdin, says it back.
fn ask(t: &mut Turn) -> Result<Outcome, EmitError> {
    let id = t.call_id("ask");
    let input = json!({"questions": [
        {"question": "Which test framework?", "header": "Tests", "options": [
            {"label": "vitest", "description": "Fast, Vite-native test runner"},
            {"label": "jest", "description": "The long-standing default"},
        ], "multiSelect": false},
        {"question": "Which kinds of tests?", "header": "Kinds", "options": [
            {"label": "unit"}, {"label": "snapshot"}, {"label": "e2e"},
        ], "multiSelect": true},
    ]});
    t.out.tool_call(&id, "ask_user", input, MAIN_AGENT, None)?;
    let reply = ask::wait_for_reply(&id, t.question_timeout);
    t.out
        .tool_result(&id, "ask_user", reply.result_value(), None)?;
    t.out.stream(&reply.describe(), None)?;
    t.finished()
}

/// `error`: a non-fatal provider error the agent recovers from.
fn error(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out.error(
        "The model provider returned an error (mock): overloaded; retrying.",
        None,
        Some("provider-error"),
    )?;
    t.out.stream("Recovered after a provider error.", None)?;
    t.finished()
}

/// `fail`: the run fails like an unreachable backend: `error` with a code, exit 3, no `finish`.
fn fail(t: &mut Turn) -> Result<Outcome, EmitError> {
    eprintln!("mock-agent: connecting to the Codebuff backend…");
    eprintln!("mock-agent: POST /api/v1/agent-runs failed: connection refused (mock)");
    eprintln!("mock-agent: giving up");
    t.out.error(
        "Codebuff backend unreachable (mock failure)",
        Some("backend_error"),
        None,
    )?;
    Ok(Outcome::Failed { exit: 3 })
}

/// `crash`: dies by SIGKILL mid-stream, without `finish` or `error`.
fn crash(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out.text_delta("About to", None)?;
    t.out.text_delta(" crash", None)?;
    eprintln!("mock-agent: crashing (SIGKILL)");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    hang()
}

/// `escape [hang]`: starts `sleep 3600` in a session of its own (so outside the turn's process
/// group, holding the turn's stdout open), says its pid (`escaped <pid>`), then ends the turn
/// (or, with `hang`, never ends). The daemon must kill it all the same.
fn escape(t: &mut Turn) -> Result<Outcome, EmitError> {
    use std::os::unix::process::CommandExt;
    let mut sleeper = std::process::Command::new("sleep");
    sleeper.arg("3600").stdin(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        sleeper.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::other)?;
            Ok(())
        });
    }
    let pid = match sleeper.spawn() {
        Ok(child) => child.id(),
        Err(e) => {
            eprintln!("mock-agent: cannot start the escapee: {e}");
            0
        }
    };
    t.out.text(&format!("escaped {pid}"), None)?;
    if t.arg.trim() == "hang" {
        hang()
    }
    t.finished()
}

/// `gated`: writes `gated.txt`, then runs `echo gated-ok > gated-cmd.txt`; with a turn that
/// asks permission, each asks first and runs only if allowed. The answer says what happened.
fn gated(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out
        .stream("I will write gated.txt, then run a command.", None)?;
    let write = t.call_id("write");
    let input = json!({"path": "gated.txt", "instructions": "Create a file", "content": "gated\n"});
    t.out
        .tool_call(&write, "write_file", input.clone(), MAIN_AGENT, None)?;
    let wrote = match t.permission(&write, "write_file", &input, None, &["gated.txt"])? {
        gate::Decision::Allow => {
            t.out.tool_result(
                &write,
                "write_file",
                workspace::write_file("gated.txt", "gated\n"),
                None,
            )?;
            true
        }
        rejected => {
            t.out
                .tool_result(&write, "write_file", gate::rejected(&rejected), None)?;
            false
        }
    };
    let ran = run_command(t, "echo gated-ok > gated-cmd.txt")?;
    let said = |done: bool| if done { "yes" } else { "no" };
    t.out.stream(
        &format!(
            "Wrote gated.txt: {}; ran the command: {}.",
            said(wrote),
            said(ran)
        ),
        None,
    )?;
    t.finished()
}

/// `run <command line>`: runs the argument once allowed; the answer says whether it ran.
fn run(t: &mut Turn) -> Result<Outcome, EmitError> {
    let command = t.arg.clone();
    let ran = run_command(t, &command)?;
    t.out
        .text(&format!("ran: {}", if ran { "yes" } else { "no" }), None)?;
    t.finished()
}

/// One `run_terminal_command` of `command`, asking first when the turn asks; true if it ran.
fn run_command(t: &mut Turn, command: &str) -> Result<bool, EmitError> {
    let run = t.call_id("run");
    let input = json!({"command": command, "process_type": "SYNC"});
    t.out.tool_call(
        &run,
        "run_terminal_command",
        input.clone(),
        MAIN_AGENT,
        None,
    )?;
    Ok(
        match t.permission(&run, "run_terminal_command", &input, Some(command), &[])? {
            gate::Decision::Allow => {
                t.out.tool_result(
                    &run,
                    "run_terminal_command",
                    workspace::run_command(command),
                    None,
                )?;
                true
            }
            rejected => {
                t.out.tool_result(
                    &run,
                    "run_terminal_command",
                    gate::rejected(&rejected),
                    None,
                )?;
                false
            }
        },
    )
}

/// `spend [N]`: N steps (default 10), each costing one credit: a `text_delta` and a `cost` event
/// with the run's total so far, 50 ms apart; then `finish` with N credits. `spend -N` plays an
/// agent that lies: one `cost` of -N credits and a `finish` with -N.
fn spend(t: &mut Turn) -> Result<Outcome, EmitError> {
    let arg = t.arg.split_whitespace().next().unwrap_or("");
    if let Some(lie) = arg.strip_prefix('-').and_then(|n| n.parse::<u32>().ok()) {
        let total = -f64::from(lie);
        t.out.event(&json!({"type": "cost", "totalCost": total}))?;
        t.out.text(&format!("Spent {total} credits."), None)?;
        return Ok(Outcome::Finished { total_cost: total });
    }
    let steps = arg.parse::<u32>().unwrap_or(10);
    for step in 1..=steps {
        t.out.text_delta(&format!("step {step}; "), None)?;
        t.out
            .event(&json!({"type": "cost", "totalCost": f64::from(step)}))?;
        t.out.flush()?;
        thread::sleep(Duration::from_millis(50));
    }
    t.out.text(&format!("Spent {steps} credits."), None)?;
    Ok(Outcome::Finished {
        total_cost: f64::from(steps),
    })
}

/// `hang`: never ends by itself (until a signal or `--timeout`).
fn hang() -> ! {
    loop {
        thread::park();
    }
}

/// `garbage`: valid events with lines between them that are not events.
fn garbage(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out.raw("not json at all")?;
    t.out.text_delta("Some", None)?;
    t.out.raw("{broken")?;
    t.out.text_delta(" text", None)?;
    t.out.raw(r#"{"no_type":true}"#)?;
    t.out.text("Some text", None)?;
    t.finished()
}

/// `huge`: one `text` line of at least 5 MiB, then a normal one.
fn huge(t: &mut Turn) -> Result<Outcome, EmitError> {
    t.out.text(&huge_text(), None)?;
    t.out.text("That was a long one.", None)?;
    t.finished()
}

/// [`HUGE_TEXT_BYTES`] of readable ASCII.
fn huge_text() -> String {
    const PHRASE: &str = "All work and no play makes a very long line. ";
    let mut text = PHRASE.repeat(HUGE_TEXT_BYTES / PHRASE.len() + 1);
    text.truncate(HUGE_TEXT_BYTES);
    text
}

/// `flood [N [PER_SECOND]]`: N `text_delta`s, each `"<i>:<unix_time_ns>;"` stamped as it is
/// written (benchmarks measure latency from it). Without a rate: as fast as possible, buffered
/// and flushed every 64 KiB; with one: paced at PER_SECOND lines a second, each flushed at once.
fn flood(t: &mut Turn) -> Result<Outcome, EmitError> {
    let count = flood_count(&t.arg);
    let rate = flood_rate(&t.arg);
    let mut line = Vec::with_capacity(64);
    let start = Instant::now();
    for i in 0..count {
        if let Some(rate) = rate {
            // A tiny rate puts the next line beyond any representable instant: never due.
            let due = Duration::try_from_secs_f64(i as f64 / rate)
                .ok()
                .and_then(|after| start.checked_add(after));
            let Some(due) = due else { hang() };
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
        }
        flood_line(&mut line, i, unix_time_ns());
        match rate {
            Some(_) => t.out.flushed(&line)?,
            None => t.out.buffered(&line)?,
        }
    }
    t.out.flush()?;
    t.out.text(&format!("Flooded {count} deltas."), None)?;
    t.finished()
}

/// The delta count of `flood N` (default 1000 when absent or not a number).
pub(super) fn flood_count(arg: &str) -> u64 {
    let word = arg.split_whitespace().next().unwrap_or("");
    if word.is_empty() {
        return DEFAULT_FLOOD_COUNT;
    }
    word.replace('_', "").parse().unwrap_or_else(|_| {
        eprintln!("mock-agent: flood count {word:?} is not a number; using {DEFAULT_FLOOD_COUNT}");
        DEFAULT_FLOOD_COUNT
    })
}

/// The pace of `flood N PER_SECOND` in lines a second (none when absent, not a positive
/// number, or not finite: flood as fast as possible).
pub(super) fn flood_rate(arg: &str) -> Option<f64> {
    let word = arg.split_whitespace().nth(1)?;
    match word.replace('_', "").parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Some(rate),
        _ => {
            eprintln!(
                "mock-agent: flood rate {word:?} is not a positive number; flooding at full speed"
            );
            None
        }
    }
}

/// Wall-clock nanoseconds since the Unix epoch.
fn unix_time_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_selects_the_scenario_and_the_rest_is_its_argument() {
        assert_eq!(
            Scenario::select("echo hello  world"),
            (Scenario::Echo, "hello  world")
        );
        assert_eq!(
            Scenario::select("  stream\tsome text "),
            (Scenario::Stream, "some text ")
        );
        assert_eq!(Scenario::select("flood 1000"), (Scenario::Flood, "1000"));
        assert_eq!(Scenario::select("tools"), (Scenario::Tools, ""));
        assert_eq!(Scenario::select("ask\nplease"), (Scenario::Ask, "please"));
        for (word, scenario) in [
            ("reasoning", Scenario::Reasoning),
            ("subagent", Scenario::Subagent),
            ("error", Scenario::Error),
            ("fail", Scenario::Fail),
            ("crash", Scenario::Crash),
            ("hang", Scenario::Hang),
            ("garbage", Scenario::Garbage),
            ("huge", Scenario::Huge),
        ] {
            assert_eq!(Scenario::select(word).0, scenario);
        }
    }

    #[test]
    fn anything_else_echoes_the_whole_prompt() {
        assert_eq!(Scenario::select("Echo hi"), (Scenario::Default, "Echo hi"));
        assert_eq!(
            Scenario::select("echoes x"),
            (Scenario::Default, "echoes x")
        );
        assert_eq!(Scenario::select(""), (Scenario::Default, ""));
        assert_eq!(Scenario::select("  "), (Scenario::Default, "  "));
    }

    #[test]
    fn finishing_scenarios_cost_something() {
        for s in [
            Scenario::Echo,
            Scenario::Tools,
            Scenario::Flood,
            Scenario::Default,
        ] {
            assert!(s.cost() > 0.0, "{s:?}");
        }
    }

    #[test]
    fn flood_count_defaults_when_absent_or_invalid() {
        assert_eq!(flood_count("1000000"), 1_000_000);
        assert_eq!(flood_count("1_000 extra"), 1000);
        assert_eq!(flood_count(""), DEFAULT_FLOOD_COUNT);
        assert_eq!(flood_count("many"), DEFAULT_FLOOD_COUNT);
    }

    #[test]
    fn flood_rate_is_the_optional_second_word() {
        assert_eq!(flood_rate("1000 2000"), Some(2000.0));
        assert_eq!(flood_rate("1000 2_000 extra"), Some(2000.0));
        assert_eq!(flood_rate("1000 0.5"), Some(0.5));
        assert_eq!(flood_rate("1000"), None);
        assert_eq!(flood_rate(""), None);
        assert_eq!(flood_rate("1000 0"), None);
        assert_eq!(flood_rate("1000 -5"), None);
        assert_eq!(flood_rate("1000 fast"), None);
        assert_eq!(flood_rate("1000 inf"), None);
    }

    #[test]
    fn huge_text_is_exactly_five_mebibytes() {
        let text = huge_text();
        assert_eq!(text.len(), HUGE_TEXT_BYTES);
        assert!(text.is_ascii());
    }
}
