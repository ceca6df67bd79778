//! The terminal client's command lines (clap): `exec`, `resume`, `chat`, `sessions …`,
//! `config show`. Every setting here also comes from `CODEBUFFD_*` or the config files
//! (`settings.rs`).

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where the client finds the engine, and how it talks.
#[derive(Debug, Clone, Default, Args)]
pub struct ClientArgs {
    /// Use the daemon at this URL (`http://127.0.0.1:2468`) instead of running the engine
    /// in-process [env CODEBUFFD_URL].
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
    /// The daemon's token, with `--url` [env CODEBUFFD_TOKEN; prefer the variable: flags show
    /// in `ps`].
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The data directory of the in-process engine [default: as `codebuffd server`; env
    /// CODEBUFFD_DATA_DIR].
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML file with settings (the flags' names with `_`), read before the user's
    /// `$XDG_CONFIG_HOME/codebuffd/config.toml` [env CODEBUFFD_CONFIG].
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Colour on stderr: `auto` (a terminal, and `NO_COLOR` unset), `always` or `never`
    /// [env CODEBUFFD_COLOR].
    #[arg(long, global = true, value_name = "WHEN")]
    pub color: Option<String>,
}

/// The settings of a new session.
#[derive(Debug, Clone, Default, Args)]
pub struct SessionArgs {
    /// The agent: `codebuff` or `mock` [default: codebuff; env CODEBUFFD_AGENT].
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Codebuff's mode: `build`, `free`, `max` or `plan` [env CODEBUFFD_MODE].
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// The model [env CODEBUFFD_MODEL].
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The agent's working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// `default` (ask before every tool that changes files or runs code), `acceptEdits` (ask
    /// before commands), `plan` (read-only) or `bypass` (never ask) [default: `default` when
    /// someone is at a terminal to answer; otherwise — stderr not a terminal, or `--answers`
    /// — the engine's, `bypass` unless configured; env CODEBUFFD_PERMISSION_MODE].
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// `--permission-mode bypass`: the agent edits files and runs commands without asking.
    #[arg(long)]
    pub yolo: bool,
    /// The credits the session may spend; a turn that reaches it is stopped (exit 3).
    #[arg(long, value_name = "CREDITS")]
    pub max_credits: Option<f64>,
    /// Per-turn timeout in seconds [default: the engine's; env CODEBUFFD_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
}

/// How a turn is shown.
#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// stdout gets every universal event of the turn as one JSON line (instead of the answer).
    #[arg(long)]
    pub json: bool,
    /// Nothing on stderr but errors and the questions asked.
    #[arg(long, short)]
    pub quiet: bool,
    /// Show edits' diffs and tool results.
    #[arg(long, short)]
    pub verbose: bool,
    /// Print the text of a turn that did not complete on stdout too (by default stdout gets
    /// an answer only when the turn completed).
    #[arg(long)]
    pub partial: bool,
    /// Answers for the turn's questions and permission requests, when no one is at a terminal:
    /// a JSON object mapping a question's text (or header, or id) to its answer (a string or a
    /// list of strings), and `"permissions"` to `once`, `always` or `reject` (or an object
    /// from tool names to those); `@FILE` reads it from a file.
    #[arg(long, value_name = "JSON")]
    pub answers: Option<String>,
}

/// `codebuffd exec`.
#[derive(Debug, Clone, Default, Args)]
pub struct ExecArgs {
    /// The prompt; `-` or nothing reads it from stdin.
    #[arg(value_name = "PROMPT")]
    pub prompt: Vec<String>,
    #[command(flatten)]
    pub session: SessionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `codebuffd resume`.
#[derive(Debug, Clone, Default, Args)]
pub struct ResumeArgs {
    /// The session to continue, then the prompt (with `--last`: only the prompt). No prompt on
    /// a terminal opens the REPL on the session; `-` reads it from stdin.
    #[arg(value_name = "SESSION_ID PROMPT", required_unless_present = "last")]
    pub words: Vec<String>,
    /// Continue the most recently updated session of the current directory (`--cwd`).
    #[arg(long)]
    pub last: bool,
    /// With `--last`: the most recently updated session of any directory.
    #[arg(long, requires = "last")]
    pub all: bool,
    /// The directory whose last session `--last` continues [default: the current one].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub client: ClientArgs,
}

impl ResumeArgs {
    /// The session named (none with `--last`) and the prompt's words.
    pub fn split(&self) -> (Option<&str>, &[String]) {
        match (self.last, self.words.split_first()) {
            (false, Some((id, prompt))) => (Some(id.as_str()), prompt),
            _ => (None, &self.words),
        }
    }
}

/// `codebuffd chat` (and `codebuffd` alone on a terminal).
#[derive(Debug, Clone, Default, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub session: SessionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `codebuffd sessions …`.
#[derive(Debug, Clone, Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub command: SessionsCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The `sessions` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum SessionsCommand {
    /// A table of the sessions, newest first.
    #[command(alias = "ls")]
    List {
        /// One JSON line per session instead.
        #[arg(long)]
        json: bool,
    },
    /// One session's settings and state.
    Show {
        id: String,
        /// The session as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// A session's events: the human view, or JSON lines.
    Events {
        id: String,
        /// Go on showing new events as they come (until Ctrl-C).
        #[arg(long, short)]
        follow: bool,
        /// One JSON line per event.
        #[arg(long)]
        json: bool,
        /// Start after this sequence.
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// Queue a message (the turn runs on; `resume ID PROMPT` follows it instead).
    Send { id: String, prompt: Vec<String> },
    /// Answer a question: `answer ID [QID] ANSWER…` (one answer per question; `a,b` for several
    /// options of one).
    Answer { id: String, args: Vec<String> },
    /// Allow a permission request (`--always` for every later call of the same tool).
    Approve {
        id: String,
        permission_id: String,
        #[arg(long)]
        always: bool,
    },
    /// Refuse a permission request.
    Reject { id: String, permission_id: String },
    /// Stop the running turn.
    Cancel { id: String },
    /// End the session.
    Terminate { id: String },
    /// Delete the session and its events.
    #[command(alias = "rm")]
    Delete { id: String },
}

/// `codebuffd config …`.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub session: SessionArgs,
}

/// The `config` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum ConfigCommand {
    /// The effective settings of the terminal client and where each came from.
    Show,
}
