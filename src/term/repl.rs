//! The REPL (`codebuffd chat`, `codebuffd` alone on a terminal, `resume` without a prompt): a
//! line editor with history; each line is a turn of the session, shown as `exec` shows it
//! (on stderr; the answers stay on the screen), and `/` commands manage the session. The
//! editor is not reading while a turn runs, so questions and approvals are asked in the
//! foreground and never mix with a half-typed line; Ctrl-C during a turn cancels it, at the
//! prompt it clears the line, Ctrl-D leaves.

use super::args::OutputArgs;
use super::error::{exit, ClientError};
use super::format::{cost_text, one_line, Style};
use super::line_editor::{LineEditor, Read};
use super::new_session::{create_request, directory, permission_mode, warn_if_unguarded};
use super::paint::Paint;
use super::prompts::Asker;
use super::render::Renderer;
use super::resume::{last_session, where_it_works};
use super::settings::Settings;
use super::transport::Transport;
use super::turn::{self, Followed, Interrupts, TurnIo};
use super::view::View;
use crate::session::{AgentKind, AGENT_MODES};

/// The width the banner's lines fit in.
const BANNER: usize = 80;

const HELP: &str = "\
/help              this help
/new               start a new session (the next line is its first turn)
/sessions          list the sessions
/resume <id|last>  continue another session (last: of this directory)
/agent [<agent>]   codebuff or mock (a new session starts with the next line)
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
    repl.banner().await?;
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
    /// Where the REPL runs, on lines that fit 80 columns: the agent and how it asks for
    /// permission, the engine, the commands; the session when it continues one; a warning when
    /// the agent has no key.
    async fn banner(&mut self) -> Result<(), ClientError> {
        let (agent, mode) = match &self.session {
            Some(id) => {
                let info = self.transport.info(id).await?;
                (info.agent, Some(info.permission_mode))
            }
            None => (
                self.settings.agent.clone(),
                permission_mode(&self.settings, true),
            ),
        };
        let asks = match mode.as_deref() {
            Some("default") => "asks before edits and commands",
            Some("acceptEdits") => "asks before commands",
            Some("plan") => "read-only (plan)",
            _ => "",
        };
        let head = format!("codebuffd chat · agent {agent} · {asks}");
        self.view
            .notice(Style::Bold, head.trim_end_matches([' ', '·']));
        let engine = one_line(&self.transport.describe(), BANNER);
        self.view.notice(Style::Dim, &engine);
        self.view
            .notice(Style::Dim, "/help for commands · Ctrl-D to leave");
        if let Some(id) = &self.session {
            self.view.notice(Style::Dim, &format!("session {id}"));
        }
        if let Some(mode) = &mode {
            warn_if_unguarded(&mut self.view, mode);
        }
        self.warn_if_no_key(&agent).await
    }

    /// Says, before the first turn fails, that `agent` has no key, and how to go on.
    async fn warn_if_no_key(&mut self, agent: &str) -> Result<(), ClientError> {
        if self.transport.has_credential(agent).await? {
            return Ok(());
        }
        for line in [
            "⚠ no Codebuff API key found: turns of the codebuff agent will fail.",
            "  Get one at https://www.codebuff.com/api-keys and set CODEBUFF_API_KEY,",
            "  or type /agent mock to try the mock agent, which needs none.",
        ] {
            self.view.notice(Style::Warn, line);
        }
        Ok(())
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
            ("agent", None) => {
                let agent = self.agent().await?;
                self.view.notice(
                    Style::Plain,
                    &format!("agent {agent} (/agent codebuff or /agent mock to switch)"),
                );
            }
            ("agent", Some(agent)) => self.set_agent(agent).await?,
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

    /// The agent the next turn runs: the session's, else the one new sessions get.
    async fn agent(&self) -> Result<String, ClientError> {
        match &self.session {
            Some(id) => Ok(self.transport.info(id).await?.agent),
            None => Ok(self.settings.agent.clone()),
        }
    }

    /// `/agent <agent>`: new sessions run it; a session of another agent is left (its agent
    /// is fixed), the next line starts a new one.
    async fn set_agent(&mut self, agent: &str) -> Result<(), ClientError> {
        if AgentKind::parse(agent).is_none() {
            return Err(ClientError::usage(format!(
                "the agent `{agent}` is not `codebuff` or `mock`"
            )));
        }
        if self.agent().await? != agent {
            self.session = None;
        }
        self.settings.agent = agent.to_owned();
        let next = if self.session.is_some() {
            "this session runs it"
        } else {
            "a new session starts with your next line"
        };
        self.view
            .notice(Style::Dim, &format!("agent {agent}: {next}"));
        self.warn_if_no_key(agent).await
    }

    /// `/resume <id|last>`.
    async fn resume(&mut self, which: &str) -> Result<(), ClientError> {
        let info = if which == "last" {
            last_session(self.transport, Some(&directory(None)?)).await?
        } else {
            self.transport.info(which).await?
        };
        self.view
            .notice(Style::Dim, &format!("session {}", info.session_id));
        self.view.notice(Style::Dim, &where_it_works(&info));
        warn_if_unguarded(&mut self.view, &info.permission_mode);
        self.session = Some(info.session_id);
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

    /// The session the next turn (`line`) runs in, created now when there is none.
    async fn session(&mut self, line: &str) -> Result<String, ClientError> {
        if let Some(id) = &self.session {
            return Ok(id.clone());
        }
        let id = uuid::Uuid::new_v4().to_string();
        let req = create_request(&self.settings, None, line, true)?;
        self.transport.create(&id, &req).await?;
        self.session = Some(id.clone());
        Ok(id)
    }

    /// A line that is not a command: a turn of the session, followed to its end.
    async fn turn(&mut self, line: &str) -> Result<(), ClientError> {
        let id = self.session(line).await?;
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
