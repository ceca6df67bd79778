//! The REPL (`codebuffd chat`, `codebuffd` alone on a terminal, `resume` without a prompt): a
//! line editor with history; each line is a turn of the session, shown as `exec` shows it
//! (on stderr; the answers stay on the screen), and `/` commands manage the session. The
//! editor is not reading while a turn runs, so questions and approvals are asked in the
//! foreground and never mix with a half-typed line; Ctrl-C during a turn cancels it, at the
//! prompt it clears the line, Ctrl-D leaves.

use super::args::OutputArgs;
use super::error::{exit, ClientError};
use super::exec::create_request;
use super::format::cost_text;
use super::format::Style;
use super::line_editor::{LineEditor, Read};
use super::paint::Paint;
use super::prompts::Asker;
use super::render::Renderer;
use super::resume::last_session;
use super::settings::Settings;
use super::transport::Transport;
use super::turn::{self, Followed, Interrupts, TurnIo};
use super::view::View;
use crate::session::AGENT_MODES;

const HELP: &str = "\
/help              this help
/new               start a new session (the next line is its first turn)
/sessions          list the sessions
/resume <id|last>  continue another session
/mode [<mode>]     build, free, max or plan (this session's next turns; new sessions)
/cost              what this session has spent
/cancel            cancel the session's running turn
/exit              leave (also Ctrl-D)";

/// Runs the REPL on `session` (a new one when `None`, created at the first line).
pub async fn run(
    transport: &dyn Transport,
    settings: &Settings,
    session: Option<String>,
    output: &OutputArgs,
    paint: Paint,
) -> Result<u8, ClientError> {
    let mut repl = Repl {
        transport,
        settings: settings.clone(),
        session,
        verbose: output.verbose,
        view: View::new(paint, true, output.quiet),
        interrupts: Interrupts::new(),
        editor: LineEditor::load(),
    };
    repl.banner();
    while let Some(line) = repl.next_line(paint).await? {
        let said = match line.strip_prefix('/') {
            Some(command) => match repl.command(command).await {
                Ok(Flow::Exit) => break,
                Ok(Flow::Continue) => Ok(()),
                Err(e) => Err(e),
            },
            None => repl.turn(&line).await,
        };
        if let Err(e) = said {
            repl.view.notice(Style::Error, &format!("codebuffd: {e}"));
        }
    }
    repl.editor.save();
    if let Some(id) = &repl.session {
        repl.view
            .notice(Style::Dim, &format!("resume with: codebuffd resume {id}"));
    }
    Ok(exit::OK)
}

/// What the REPL does after a command.
enum Flow {
    Continue,
    Exit,
}

/// The REPL's state between lines.
struct Repl<'t> {
    transport: &'t dyn Transport,
    /// The client's settings; `/mode` changes the mode of the sessions it creates.
    settings: Settings,
    /// The session the next line goes to; `None` until the first line creates one.
    session: Option<String>,
    verbose: bool,
    view: View,
    interrupts: Interrupts,
    editor: LineEditor,
}

impl Repl<'_> {
    fn banner(&mut self) {
        self.view.notice(
            Style::Dim,
            &format!(
                "codebuffd chat — {} · agent {} · /help for commands, Ctrl-D to leave",
                self.transport.describe(),
                self.settings.agent
            ),
        );
        if let Some(id) = &self.session {
            self.view.notice(Style::Dim, &format!("session {id}"));
        }
    }

    /// The next line typed that is not empty; `None` at Ctrl-D.
    async fn next_line(&mut self, paint: Paint) -> Result<Option<String>, ClientError> {
        loop {
            match self.editor.read(paint.paint(Style::Bold, "› ")).await? {
                Read::Line(line) if !line.trim().is_empty() => {
                    return Ok(Some(line.trim().to_owned()))
                }
                Read::Line(_) | Read::Interrupted => {}
                Read::Eof => return Ok(None),
            }
        }
    }

    /// A `/` command (without its `/`).
    async fn command(&mut self, command: &str) -> Result<Flow, ClientError> {
        let mut words = command.split_whitespace();
        let name = words.next().unwrap_or_default();
        let arg = words.next();
        match (name, arg) {
            ("exit" | "quit" | "q", _) => return Ok(Flow::Exit),
            ("help", _) => {
                for l in HELP.lines() {
                    self.view.notice(Style::Plain, l);
                }
            }
            ("new", _) => {
                self.session = None;
                self.view
                    .notice(Style::Dim, "a new session starts with your next line");
            }
            ("sessions", _) => self.list().await?,
            ("resume", Some(which)) => self.resume(which).await?,
            ("resume", None) => {
                return Err(ClientError::usage(
                    "/resume needs a session id or `last` (/sessions lists them)",
                ))
            }
            ("mode", None) => {
                let mode = self.next_mode().await?;
                self.view
                    .notice(Style::Plain, &format!("the next turn runs in {mode} mode"));
            }
            ("mode", Some(mode)) => self.set_mode(mode).await?,
            ("cost", _) => self.cost().await?,
            ("cancel", _) => {
                if let Some(id) = &self.session {
                    self.transport.cancel(id).await?;
                }
            }
            _ => {
                return Err(ClientError::usage(format!(
                    "unknown command /{command}; /help lists them"
                )))
            }
        }
        Ok(Flow::Continue)
    }

    /// `/resume <id|last>`.
    async fn resume(&mut self, which: &str) -> Result<(), ClientError> {
        let id = if which == "last" {
            last_session(self.transport).await?
        } else {
            self.transport.info(which).await?.session_id
        };
        self.view.notice(Style::Dim, &format!("session {id}"));
        self.session = Some(id);
        Ok(())
    }

    /// The mode the next turn runs in: the session's, else the one new sessions get.
    async fn next_mode(&self) -> Result<String, ClientError> {
        match &self.session {
            Some(id) => Ok(self.transport.info(id).await?.agent_mode),
            None => Ok(self
                .settings
                .mode
                .clone()
                .unwrap_or_else(|| AGENT_MODES[0].to_owned())),
        }
    }

    /// `/mode <mode>`: the session's next turns, and the sessions created after.
    async fn set_mode(&mut self, mode: &str) -> Result<(), ClientError> {
        match &self.session {
            Some(id) => self.transport.set_mode(id, mode).await?,
            None if AGENT_MODES.contains(&mode) => {}
            None => {
                return Err(ClientError::usage(format!(
                    "mode `{mode}` is not one of {}",
                    AGENT_MODES.join(", ")
                )))
            }
        }
        self.settings.mode = Some(mode.to_owned());
        self.view.notice(Style::Dim, &format!("mode {mode}"));
        Ok(())
    }

    /// `/cost`.
    async fn cost(&mut self) -> Result<(), ClientError> {
        match &self.session {
            Some(id) => {
                let s = self.transport.info(id).await?;
                self.view.notice(
                    Style::Plain,
                    &format!("{} over {} turns", cost_text(s.cost), s.turns),
                );
            }
            None => self.view.notice(Style::Dim, "no session yet"),
        }
        Ok(())
    }

    /// `/sessions`: the newest sessions, the current one marked.
    async fn list(&mut self) -> Result<(), ClientError> {
        let mut sessions = self.transport.list().await?;
        sessions.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
        for s in sessions.iter().take(20) {
            let mark = if Some(&s.session_id) == self.session.as_ref() {
                "*"
            } else {
                " "
            };
            self.view.notice(
                Style::Plain,
                &format!(
                    "{mark} {}  {:<8} {:<14} {:>3} turns  {}",
                    s.session_id,
                    s.agent,
                    s.status.as_str(),
                    s.turns,
                    cost_text(s.cost)
                ),
            );
        }
        if sessions.is_empty() {
            self.view.notice(Style::Dim, "no sessions");
        }
        Ok(())
    }

    /// The session the next turn runs in, created now when there is none.
    async fn session(&mut self) -> Result<String, ClientError> {
        if let Some(id) = &self.session {
            return Ok(id.clone());
        }
        let id = uuid::Uuid::new_v4().to_string();
        let req = create_request(&self.settings, None)?;
        self.transport.create(&id, &req).await?;
        self.session = Some(id.clone());
        Ok(id)
    }

    /// A line that is not a command: a turn of the session, followed to its end.
    async fn turn(&mut self, line: &str) -> Result<(), ClientError> {
        let id = self.session().await?;
        let mut renderer = Renderer::new(self.verbose, false);
        let io = TurnIo {
            view: &mut self.view,
            renderer: &mut renderer,
            asker: &Asker::Terminal,
            json: false,
        };
        match turn::run(self.transport, &id, line, io, &mut self.interrupts).await? {
            Followed::Ended(result) => turn::show_ending(&mut self.view, &result, &id, true),
            Followed::Abandoned(_) => {}
        }
        Ok(())
    }
}
