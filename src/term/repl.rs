//! The REPL (`codebuffd chat`, `codebuffd` alone on a terminal, `resume` without a prompt): a
//! line editor with history; each line is a turn of the session, shown as `exec` shows it
//! (on stderr; the answers stay on the screen), and `/` commands manage the session. The
//! editor is not reading while a turn runs, so questions and approvals are asked in the
//! foreground and never mix with a half-typed line; Ctrl-C during a turn cancels it, at the
//! prompt it clears the line, Ctrl-D leaves.

use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use super::args::OutputArgs;
use super::error::{exit, ClientError};
use super::exec::{last_session, new_session};
use super::format::{closing_line, cost_text};
use super::paint::Paint;
use super::prompts::Asker;
use super::render::{Renderer, Style};
use super::settings::Settings;
use super::transport::Transport;
use super::turn::{self, Followed, Interrupts, TurnIo};
use super::view::View;

/// Lines of history kept.
const HISTORY: usize = 1000;

const HELP: &str = "\
/help              this help
/new               start a new session (the next line is its first turn)
/sessions          list the sessions
/resume <id|last>  continue another session
/mode [<mode>]     build, free, max or plan (this session's next turns; new sessions)
/cost              what this session has spent
/cancel            cancel the session's running turn
/exit              leave (also Ctrl-D)";

/// Where the line history is kept: `$XDG_STATE_HOME/codebuffd/history`, else
/// `~/.local/state/codebuffd/history`.
fn history_file() -> Option<PathBuf> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let dir = env("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(dir.join("codebuffd/history"))
}

/// A line read at the prompt.
enum Read {
    Line(String),
    Interrupted,
    Eof,
}

/// Reads a line on a blocking thread, with an editor made for it and dropped after: an editor
/// holds the terminal's SIGINT handler while it lives, and a turn needs Ctrl-C to reach the
/// client (and the question prompts make editors of their own).
async fn read(history: Vec<String>, prompt: String) -> Result<(Vec<String>, Read), ClientError> {
    tokio::task::spawn_blocking(move || {
        let config = rustyline::Config::builder()
            .behavior(rustyline::config::Behavior::PreferTerm)
            .auto_add_history(true)
            .max_history_size(HISTORY)
            .map_err(|e| ClientError::failed(e.to_string()))?
            .build();
        let mut editor =
            DefaultEditor::with_config(config).map_err(|e| ClientError::failed(e.to_string()))?;
        for line in &history {
            let _ = editor.add_history_entry(line.as_str());
        }
        let read = match editor.readline(&prompt) {
            Ok(line) => Read::Line(line),
            Err(ReadlineError::Interrupted) => Read::Interrupted,
            Err(ReadlineError::Eof) => Read::Eof,
            Err(e) => {
                return Err(ClientError::failed(format!(
                    "cannot read the terminal: {e}"
                )))
            }
        };
        let history = editor.history().iter().cloned().collect();
        Ok((history, read))
    })
    .await
    .map_err(|e| ClientError::failed(e.to_string()))?
}

/// Runs the REPL on `session` (a new one when `None`, created at the first line).
pub async fn run(
    transport: &Transport,
    settings: &Settings,
    session: Option<String>,
    output: &OutputArgs,
    paint: Paint,
) -> Result<u8, ClientError> {
    let history_path = history_file();
    let mut history: Vec<String> = history_path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default();
    let mut settings = settings.clone();
    let mut session = session;
    let mut view = View::new(paint, true, output.quiet);
    let mut interrupts = Interrupts::new();
    let asker = Asker::Terminal;
    view.notice(
        Style::Dim,
        &format!(
            "codebuffd chat — {} · agent {} · /help for commands, Ctrl-D to leave",
            transport.describe(),
            settings.agent
        ),
    );
    if let Some(id) = &session {
        view.notice(Style::Dim, &format!("session {id}"));
    }
    loop {
        let (lines, read) =
            read(std::mem::take(&mut history), paint.paint(Style::Bold, "› ")).await?;
        history = lines;
        let line = match read {
            Read::Line(line) => line,
            Read::Interrupted => continue,
            Read::Eof => break,
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(command) = line.strip_prefix('/') {
            let mut words = command.split_whitespace();
            let name = words.next().unwrap_or_default();
            let arg = words.next();
            let said = match (name, arg) {
                ("exit" | "quit" | "q", _) => break,
                ("help", _) => {
                    for l in HELP.lines() {
                        view.notice(Style::Plain, l);
                    }
                    Ok(())
                }
                ("new", _) => {
                    session = None;
                    view.notice(Style::Dim, "a new session starts with your next line");
                    Ok(())
                }
                ("sessions", _) => list(transport, &mut view, session.as_deref()).await,
                ("resume", Some(which)) => {
                    let id = if which == "last" {
                        last_session(transport).await
                    } else {
                        transport.info(which).await.map(|s| s.session_id)
                    };
                    id.map(|id| {
                        view.notice(Style::Dim, &format!("session {id}"));
                        session = Some(id);
                    })
                }
                ("resume", None) => Err(ClientError::usage(
                    "/resume needs a session id or `last` (/sessions lists them)",
                )),
                // Without a mode: the one the next turn runs in.
                ("mode", None) => match &session {
                    Some(id) => transport.info(id).await.map(|s| s.agent_mode),
                    None => Ok(settings
                        .mode
                        .clone()
                        .unwrap_or_else(|| crate::session::AGENT_MODES[0].to_owned())),
                }
                .map(|mode| {
                    view.notice(Style::Plain, &format!("the next turn runs in {mode} mode"))
                }),
                ("mode", Some(mode)) => {
                    settings.mode = Some(mode.to_owned());
                    match &session {
                        Some(id) => transport.set_mode(id, mode),
                        None if crate::session::AGENT_MODES.contains(&mode) => Ok(()),
                        None => Err(ClientError::usage(format!(
                            "mode `{mode}` is not one of {}",
                            crate::session::AGENT_MODES.join(", ")
                        ))),
                    }
                    .map(|()| view.notice(Style::Dim, &format!("mode {mode}")))
                }
                ("cost", _) => match &session {
                    Some(id) => transport.info(id).await.map(|s| {
                        view.notice(
                            Style::Plain,
                            &format!("{} over {} turns", cost_text(s.cost), s.turns),
                        );
                    }),
                    None => {
                        view.notice(Style::Dim, "no session yet");
                        Ok(())
                    }
                },
                ("cancel", _) => match &session {
                    Some(id) => transport.cancel(id).await,
                    None => Ok(()),
                },
                _ => Err(ClientError::usage(format!(
                    "unknown command /{command}; /help lists them"
                ))),
            };
            if let Err(e) = said {
                view.notice(Style::Error, &format!("codebuffd: {e}"));
            }
            continue;
        }
        let id = match &session {
            Some(id) => id.clone(),
            None => {
                let id = uuid::Uuid::new_v4().to_string();
                let created = match new_session(&settings, None) {
                    Ok(new) => transport.create(&id, &new).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = created {
                    view.notice(Style::Error, &format!("codebuffd: {e}"));
                    continue;
                }
                session = Some(id.clone());
                id
            }
        };
        let mut renderer = Renderer::new(output.verbose, false);
        let io = TurnIo {
            view: &mut view,
            renderer: &mut renderer,
            asker: &asker,
            json: false,
        };
        match turn::run(transport, &id, line, io, &mut interrupts).await {
            Ok(Followed::Ended(result)) => {
                if let (Some(message), false) = (
                    &result.message,
                    result.status == crate::universal::TurnStatus::Completed,
                ) {
                    view.notice(Style::Error, &format!("codebuffd: {message}"));
                }
                let (style, text) = closing_line(result.status, result.elapsed, result.cost, &id);
                view.notice(style, &text);
            }
            Ok(Followed::Abandoned) => {}
            Err(e) => view.notice(Style::Error, &format!("codebuffd: {e}")),
        }
    }
    if let Some(path) = &history_path {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let keep = history.len().saturating_sub(HISTORY);
        let mut text = history[keep..].join("\n");
        text.push('\n');
        let _ = std::fs::write(path, text);
    }
    if let Some(id) = &session {
        view.notice(Style::Dim, &format!("resume with: codebuffd resume {id}"));
    }
    Ok(exit::OK)
}

/// `/sessions`: the newest sessions, the current one marked.
async fn list(
    transport: &Transport,
    view: &mut View,
    current: Option<&str>,
) -> Result<(), ClientError> {
    let sessions = transport.list().await?;
    for s in sessions.iter().take(20) {
        let mark = if Some(s.session_id.as_str()) == current {
            "*"
        } else {
            " "
        };
        view.notice(
            Style::Plain,
            &format!(
                "{mark} {}  {:<8} {:<14} {:>3} turns  {}",
                s.session_id,
                s.agent,
                s.status,
                s.turns,
                cost_text(s.cost)
            ),
        );
    }
    if sessions.is_empty() {
        view.notice(Style::Dim, "no sessions");
    }
    Ok(())
}
