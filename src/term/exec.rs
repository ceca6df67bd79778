//! `codebuffd exec` (one turn in a new session) and the one-turn contract `resume` shares:
//! stdout gets only the data — the final answer, or with `--json` every event of the turn as a
//! JSON line — and stderr the human view and a closing line (status, duration, cost, how to
//! resume). Exit status: 0 completed, 1 failed, 2 usage, 3 budget or credentials, 130
//! cancelled.

use std::io::{IsTerminal, Read, Write};

use super::args::{ExecArgs, OutputArgs};
use super::error::ClientError;
use super::format::Style;
use super::new_session::{create_request, warn_if_unguarded};
use super::paint::Paint;
use super::prompts::{AnswerBook, Asker};
use super::render::Renderer;
use super::runner::{fail, resolve, run_with_client};
use super::transport::Transport;
use super::turn::{self, Followed, Interrupts, TurnIo};
use super::view::View;
use super::visible::visible;

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

/// `codebuffd exec`.
pub fn exec(args: ExecArgs) -> u8 {
    let (settings, paint) = match resolve(&args.client, &args.session) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    let prompt = match prompt_of(&args.prompt) {
        Ok(p) => p,
        Err(e) => return fail(paint, &e),
    };
    let tty = std::io::stderr().is_terminal();
    run_with_client(&settings, paint, async |client| {
        let asker = asker(&args.output, interactive())?;
        let at_terminal = matches!(asker, Asker::Terminal);
        let req = create_request(&settings, args.session.cwd.as_deref(), &prompt, at_terminal)?;
        let id = uuid::Uuid::new_v4().to_string();
        client.create(&id, &req).await?;
        if at_terminal {
            let mode = req.permission_mode.as_deref().unwrap_or_default();
            warn_if_unguarded(&mut View::new(paint, tty, false), mode);
        }
        one_turn(client, &id, &prompt, &args.output, &asker, paint, tty).await
    })
}

/// Runs one turn with the stdout/stderr contract and returns the exit status.
pub async fn one_turn(
    transport: &dyn Transport,
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
        Followed::Abandoned(stop) => {
            view.notice(
                Style::Warn,
                &format!("codebuffd: gave up waiting; resume with: codebuffd resume {id}"),
            );
            return Ok(turn::stopped_code(Some(stop)));
        }
    };
    // Both on one terminal, the answer has just streamed there: not twice. The text of a
    // turn that did not complete is no answer: only `--partial` prints it.
    // On a terminal it is shown, never obeyed (`visible.rs`); elsewhere it is data, as written.
    let stdout_tty = std::io::stdout().is_terminal();
    let shown = tty && !output.quiet && stdout_tty;
    let wanted = result.end.completed() || output.partial;
    if let Some(answer) = result.end.answer.as_deref() {
        if wanted && !output.json && !shown {
            let answer = if stdout_tty {
                visible(answer)
            } else {
                answer.into()
            };
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{answer}").and_then(|()| out.flush());
        }
    }
    turn::show_ending(&mut view, &result, id, !output.quiet);
    Ok(turn::exit_code(&result))
}
