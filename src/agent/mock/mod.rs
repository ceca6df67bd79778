//! The mock agent (`codebuffd mock-agent`): a scripted stand-in for the Codebuff agent command.
//!
//! It honours the same contract as the real adapter (`docs/agent-command.md`): the flags, one
//! `PrintModeEvent` JSON object per stdout line, `ask_user` answers on stdin, `--continue`
//! conversations, `--timeout`, SIGINT/SIGTERM and the exit codes. The prompt's first word picks
//! a [`scenario`]. The daemon's `mock` agent, the tests and the benchmarks run it.
//!
//! A run: [`run`] prepares (working directory, conversation state), then plays the scenario on
//! a worker thread while a small current-thread tokio runtime waits for the first of: the
//! scenario's outcome, SIGINT, SIGTERM, the `--timeout`. Only this supervisor writes the last
//! line (`finish`, or the `error` of an aborted run); [`output::Output`] keeps lines whole and
//! refuses the worker's writes after it. Returning from `run` ends the process even while the
//! worker is still blocked (reading stdin, sleeping, running a command).

mod ask;
mod gate;
mod output;
mod scenario;
mod state;
mod stdin;
mod workspace;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::agent::{AgentCommandArgs, TurnImage, TurnLine};
use output::{error_event, finish_event, EmitError, Emitter, Output};
use scenario::{Outcome, Scenario, Turn};
use state::Session;

/// Exit statuses (the real adapter's, `adapters/codebuff/src/main.mjs`).
mod exit {
    pub const OK: u8 = 0;
    /// The mock itself failed (cannot open stdout, start a thread …).
    pub const INTERNAL: u8 = 1;
    /// Bad invocation: the `--cwd` directory is unusable.
    pub const BAD_CWD: u8 = 2;
    /// Bad invocation: the turn line is not one.
    pub const USAGE: u8 = 2;
    pub const TIMEOUT: u8 = 124;
    pub const SIGINT: u8 = 130;
    /// stdout was closed under us (EPIPE).
    pub const BROKEN_PIPE: u8 = 141;
    pub const SIGTERM: u8 = 143;
}

/// How long an aborting supervisor waits for a worker stuck writing into a full pipe.
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// What ended the run, as the supervisor saw it.
enum Verdict {
    /// The scenario returned (or its thread died: `Err`).
    Played(Result<Result<Outcome, EmitError>, tokio::sync::oneshot::error::RecvError>),
    Signal {
        exit: u8,
    },
    TimedOut,
}

/// Runs one mock turn; returns the process exit code.
pub fn run(mut args: AgentCommandArgs) -> u8 {
    let out = match Output::stdout() {
        Ok(out) => Arc::new(out),
        Err(e) => {
            eprintln!("mock-agent: cannot open stdout: {e}");
            return exit::INTERNAL;
        }
    };
    let mut images = Vec::new();
    let mut ask_permission = false;
    if args.stdin_turn {
        // Started before its turn was known (a warm spare): the turn comes on stdin.
        match read_turn() {
            Ok(Some(turn)) => {
                ask_permission = turn.permission_mode == "ask";
                images = take_turn(&mut args, turn);
            }
            Ok(None) => return exit::OK,
            Err(message) => {
                eprintln!("mock-agent: {message}");
                write_last(
                    &out,
                    &error_event(&message, Some("invalid_arguments"), None),
                );
                return exit::USAGE;
            }
        }
    }
    let prompt = args.prompt.clone().unwrap_or_default();
    if let Some(dir) = &args.cwd {
        if let Err(e) = std::env::set_current_dir(dir) {
            let message = format!("cannot use working directory {}: {e}", dir.display());
            eprintln!("mock-agent: {message}");
            write_last(&out, &error_event(&message, Some("backend_error"), None));
            return exit::BAD_CWD;
        }
    }
    let (scenario, arg) = Scenario::select(&prompt);
    let agent_id = agent_id(&args);
    if let Some(model) = &args.model {
        eprintln!("mock-agent: model {model} (ignored)");
    }
    eprintln!("mock-agent: scenario {scenario:?}, agent {agent_id}");
    let turn = Turn {
        out: Emitter::new(out.clone()),
        scenario,
        arg: arg.to_owned(),
        session: Session::open(args.continue_session.as_deref()),
        agent_id,
        run_tag: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        images,
        ask_permission,
        question_timeout: ask::question_timeout(
            std::env::var("CODEBUFF_QUESTION_TIMEOUT_SECONDS")
                .ok()
                .as_deref(),
        ),
    };
    let timeout = args.timeout.and_then(timeout_duration);
    supervise(out, turn, timeout, args.timeout.unwrap_or_default())
}

/// Reads the turn line from stdin; `None` when stdin ends first (nobody needs this process).
fn read_turn() -> Result<Option<TurnLine>, String> {
    use std::io::BufRead;
    let mut line = String::new();
    // Read through the process-wide buffer: what follows the line (answers) stays there for
    // the readers of questions.
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) => Ok(None),
        Ok(_) => TurnLine::parse(line.trim_end()).map(Some),
        Err(e) => Err(format!("cannot read the turn: {e}")),
    }
}

/// Makes `args` say what the turn line says; applies its environment; returns its images.
fn take_turn(args: &mut AgentCommandArgs, turn: TurnLine) -> Vec<TurnImage> {
    args.free = matches!(turn.mode.as_str(), "free" | "lite");
    args.max = turn.mode == "max";
    args.plan = turn.mode == "plan";
    args.model = turn.model;
    args.continue_session = turn.continue_session;
    args.timeout = turn.timeout_seconds;
    args.cwd = Some(turn.cwd);
    args.prompt = Some(turn.prompt);
    for (name, value) in &turn.env {
        // Still one thread: nothing reads the environment concurrently.
        std::env::set_var(name, value);
    }
    turn.images
}

/// The agent for the mode flags: `base2`, `base2-lite`, `base2-max`, `base2-plan`.
fn agent_id(args: &AgentCommandArgs) -> &'static str {
    match (args.free, args.max, args.plan) {
        (true, _, _) => "base2-lite",
        (_, true, _) => "base2-max",
        (_, _, true) => "base2-plan",
        _ => "base2",
    }
}

/// `--timeout` as a duration: negative means "already over", infinite or NaN means none.
fn timeout_duration(seconds: f64) -> Option<Duration> {
    if seconds.is_nan() {
        return None;
    }
    Duration::try_from_secs_f64(seconds.max(0.0)).ok()
}

/// Plays `turn` on a worker thread and ends the run on the first of outcome, signal, timeout.
fn supervise(out: Arc<Output>, turn: Turn, timeout: Option<Duration>, timeout_secs: f64) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mock-agent: cannot start the runtime: {e}");
            return exit::INTERNAL;
        }
    };
    let session = turn.session.clone();
    let agent_id = turn.agent_id;
    let verdict = runtime.block_on(async move {
        // Handlers first: a signal during the scenario must reach us, not kill the process.
        let (mut sigint, mut sigterm) = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(i), Ok(t)) => (i, t),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("mock-agent: cannot handle signals: {e}");
                return None;
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut turn = turn;
        let spawned = thread::Builder::new()
            .name("mock-scenario".into())
            .spawn(move || {
                let _ = tx.send(scenario::play(&mut turn));
            });
        if let Err(e) = spawned {
            eprintln!("mock-agent: cannot start the scenario: {e}");
            return None;
        }
        let deadline = async {
            match timeout {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        Some(tokio::select! {
            biased;
            played = rx => Verdict::Played(played),
            _ = sigint.recv() => Verdict::Signal { exit: exit::SIGINT },
            _ = sigterm.recv() => Verdict::Signal { exit: exit::SIGTERM },
            () = deadline => Verdict::TimedOut,
        })
    });
    let Some(verdict) = verdict else {
        return exit::INTERNAL;
    };
    conclude(&out, &session, agent_id, verdict, timeout_secs)
}

/// Writes the run's last line, saves the conversation, and picks the exit status.
///
/// The state is saved before the last line so a `--continue` started as soon as the daemon sees
/// `finish` finds it. A finished run adds the prompt and the reply; any other adds the prompt.
fn conclude(
    out: &Output,
    session: &Session,
    agent_id: &str,
    verdict: Verdict,
    timeout_secs: f64,
) -> u8 {
    match verdict {
        Verdict::Played(Ok(Ok(Outcome::Finished { total_cost }))) => {
            session.save(2);
            match out.close_with(
                Some(&line(&finish_event(agent_id, total_cost))),
                ABORT_GRACE,
            ) {
                Ok(_) => exit::OK,
                Err(_) => exit::BROKEN_PIPE,
            }
        }
        Verdict::Played(Ok(Ok(Outcome::Failed { exit }))) => {
            session.save(1);
            let _ = out.close_with(None, ABORT_GRACE);
            exit
        }
        Verdict::Played(Ok(Err(EmitError::Io(e)))) => {
            // EPIPE is the reader's choice and stays quiet; anything else is worth a note.
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("mock-agent: cannot write stdout: {e}");
            }
            exit::BROKEN_PIPE
        }
        Verdict::Played(Ok(Err(EmitError::Closed))) => exit::INTERNAL,
        Verdict::Played(Err(_)) => {
            write_last(
                out,
                &error_event("mock agent failed internally", Some("backend_error"), None),
            );
            exit::INTERNAL
        }
        Verdict::Signal { exit } => {
            session.save(1);
            write_last(out, &error_event("aborted", Some("aborted"), None));
            exit
        }
        Verdict::TimedOut => {
            session.save(1);
            let message = format!("run timed out after {timeout_secs} s");
            write_last(out, &error_event(&message, Some("timeout"), None));
            exit::TIMEOUT
        }
    }
}

/// Writes a failed run's last line; a closed stdout no longer matters then.
fn write_last(out: &Output, event: &serde_json::Value) {
    if !matches!(out.close_with(Some(&line(event)), ABORT_GRACE), Ok(true)) {
        eprintln!("mock-agent: could not write the last event");
    }
}

fn line(event: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(event).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_flags_pick_the_agent() {
        let args = |free, max, plan| AgentCommandArgs {
            stream_json: true,
            free,
            max,
            plan,
            continue_session: None,
            timeout: None,
            cwd: None,
            model: None,
            stdin_turn: false,
            prompt: None,
        };
        assert_eq!(agent_id(&args(false, false, false)), "base2");
        assert_eq!(agent_id(&args(true, false, false)), "base2-lite");
        assert_eq!(agent_id(&args(false, true, false)), "base2-max");
        assert_eq!(agent_id(&args(false, false, true)), "base2-plan");
    }

    #[test]
    fn timeouts_out_of_range_are_clamped_or_dropped() {
        assert_eq!(timeout_duration(1.5), Some(Duration::from_millis(1500)));
        assert_eq!(timeout_duration(-3.0), Some(Duration::ZERO));
        assert_eq!(timeout_duration(f64::INFINITY), None);
        assert_eq!(timeout_duration(f64::NAN), None);
    }
}
