//! `codebuffd exec` (one turn in a new session) and `codebuffd resume` (one more turn in an
//! existing one, or the REPL on it): stdout gets only the data — the final answer, or with
//! `--json` every event of the turn as a JSON line — and stderr the human view and a closing
//! line (status, duration, cost, how to resume). Exit status: 0 completed, 1 failed, 2 usage,
//! 3 budget or credentials, 130 cancelled.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use super::args::{ExecArgs, OutputArgs, ResumeArgs};
use super::connect::connect;
use super::error::{exit, ClientError};
use super::format::closing_line;
use super::paint::Paint;
use super::prompts::{AnswerBook, Asker};
use super::render::{Renderer, Style};
use super::settings::Settings;
use super::transport::{NewSession, Transport};
use super::turn::{self, Followed, Interrupts, TurnIo};
use super::view::View;

/// The environment, as the settings read it.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The prompt of `words`: joined, or read from stdin when empty or `-`.
pub fn prompt_of(words: &[String]) -> Result<String, ClientError> {
    let text = if words.is_empty() || (words.len() == 1 && words[0] == "-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| ClientError::usage(format!("cannot read the prompt from stdin: {e}")))?;
        text
    } else {
        words.join(" ")
    };
    let text = text.trim_end().to_owned();
    if text.trim().is_empty() {
        return Err(ClientError::usage(
            "no prompt: give one, or pipe it to stdin",
        ));
    }
    Ok(text)
}

/// Who answers questions: `--answers`, else the terminal when there is one, else no one.
pub fn asker(output: &OutputArgs, interactive: bool) -> Result<Asker, ClientError> {
    match &output.answers {
        Some(text) => Ok(Asker::Book(AnswerBook::parse(text)?)),
        None if interactive => Ok(Asker::Terminal),
        None => Ok(Asker::Nobody),
    }
}

/// Someone is at a terminal: stderr is one, and the terminal can be read.
pub fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok()
}

/// A new session's settings from the client's.
pub fn new_session(settings: &Settings, cwd: Option<&Path>) -> Result<NewSession, ClientError> {
    let dir = match cwd {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|e| ClientError::usage(format!("no current directory: {e}")))?,
    };
    let dir = dir.canonicalize().map_err(|e| {
        ClientError::usage(format!(
            "the directory {} is not usable: {e}",
            dir.display()
        ))
    })?;
    Ok(NewSession {
        agent: settings.agent.clone(),
        agent_mode: settings.mode.clone(),
        permission_mode: settings.permission_mode.clone(),
        model: settings.model.clone(),
        directory: Some(dir.display().to_string()),
        timeout_seconds: settings.timeout,
    })
}

/// A tokio runtime for a client command.
pub fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::failed(format!("cannot start the runtime: {e}")))
}

/// Prints an error of the client on stderr and returns its exit status.
pub fn fail(paint: Paint, e: &ClientError) -> u8 {
    eprintln!("{}", paint.paint(Style::Error, &format!("codebuffd: {e}")));
    e.exit_code()
}

/// `codebuffd exec`.
pub fn exec(args: ExecArgs) -> u8 {
    let tty = std::io::stderr().is_terminal();
    let settings = match Settings::resolve(&args.client, &args.session, &env) {
        Ok(s) => s,
        Err(e) => return fail(Paint::plain(), &e.into()),
    };
    let paint = Paint::new(settings.color, tty, &env);
    let prompt = match prompt_of(&args.prompt) {
        Ok(p) => p,
        Err(e) => return fail(paint, &e),
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(paint, &e),
    };
    let code = runtime.block_on(async {
        let asker = asker(&args.output, interactive())?;
        let new = new_session(&settings, args.session.cwd.as_deref())?;
        let transport = connect(&settings, &env, paint)?;
        let id = uuid::Uuid::new_v4().to_string();
        let created = transport.create(&id, &new).await;
        let code = match created {
            Ok(()) => one_turn(&transport, &id, &prompt, &args.output, &asker, paint, tty).await,
            Err(e) => Err(e),
        };
        transport.close().await;
        code
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match code {
        Ok(code) => code,
        Err(e) => fail(paint, &e),
    }
}

/// `codebuffd resume`.
pub fn resume(args: ResumeArgs) -> u8 {
    let tty = std::io::stderr().is_terminal();
    let settings = match Settings::resolve(&args.client, &Default::default(), &env) {
        Ok(s) => s,
        Err(e) => return fail(Paint::plain(), &e.into()),
    };
    let paint = Paint::new(settings.color, tty, &env);
    let (session, words) = args.split();
    let repl = words.is_empty() && std::io::stdin().is_terminal() && tty;
    let prompt = if repl {
        None
    } else {
        match prompt_of(words) {
            Ok(p) => Some(p),
            Err(e) => return fail(paint, &e),
        }
    };
    let runtime = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(paint, &e),
    };
    let code = runtime.block_on(async {
        let transport = connect(&settings, &env, paint)?;
        let result = async {
            let id = match session {
                Some(id) => transport.info(id).await?.session_id,
                None => last_session(&transport).await?,
            };
            match &prompt {
                Some(prompt) => {
                    let asker = asker(&args.output, interactive())?;
                    one_turn(&transport, &id, prompt, &args.output, &asker, paint, tty).await
                }
                None => {
                    super::repl::run(&transport, &settings, Some(id), &args.output, paint).await
                }
            }
        }
        .await;
        transport.close().await;
        result
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match code {
        Ok(code) => code,
        Err(e) => fail(paint, &e),
    }
}

/// The most recently updated session.
pub async fn last_session(transport: &Transport) -> Result<String, ClientError> {
    transport
        .list()
        .await?
        .into_iter()
        .max_by_key(|s| s.updated_at)
        .map(|s| s.session_id)
        .ok_or_else(|| {
            ClientError::usage(format!("no session to resume ({})", transport.describe()))
        })
}

/// Runs one turn with the stdout/stderr contract and returns the exit status.
async fn one_turn(
    transport: &Transport,
    id: &str,
    prompt: &str,
    output: &OutputArgs,
    asker: &Asker,
    paint: Paint,
    tty: bool,
) -> Result<u8, ClientError> {
    let mut view = View::new(paint, tty, output.quiet);
    let mut renderer = Renderer::new(output.verbose, false);
    let mut interrupts = Interrupts::new();
    let io = TurnIo {
        view: &mut view,
        renderer: &mut renderer,
        asker,
        json: output.json,
    };
    let followed = turn::run(transport, id, prompt, io, &mut interrupts).await?;
    let result = match followed {
        Followed::Ended(result) => result,
        Followed::Abandoned => {
            view.notice(
                Style::Warn,
                &format!("codebuffd: gave up waiting; resume with: codebuffd resume {id}"),
            );
            return Ok(exit::CANCELLED);
        }
    };
    // Both on one terminal, the answer has just streamed there: not twice.
    let shown = tty && !output.quiet && std::io::stdout().is_terminal();
    if let Some(answer) = result.answer.as_deref().filter(|_| !output.json && !shown) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{answer}").and_then(|()| out.flush());
    }
    if let (Some(message), false) = (
        &result.message,
        result.status == crate::universal::TurnStatus::Completed,
    ) {
        view.notice(Style::Error, &format!("codebuffd: {message}"));
    }
    let (style, line) = closing_line(result.status, result.elapsed, result.cost, id);
    if !output.quiet {
        view.notice(style, &line);
    }
    Ok(turn::exit_code(result.status))
}
