//! The terminal client: `codebuffd exec` / `run`, `resume`, `chat` (the REPL), `sessions …` and
//! `config show` — a front door like the others, on the same engine: in-process on the data
//! directory the daemon uses (`local.rs`, `Engine::start`), or a running daemon over `/v1`
//! (`remote.rs`): both implement `transport.rs`'s trait, in the engine's own types, and every
//! command runs through `runner.rs` (`run_with_client`).
//!
//! One concept per file: `args` (command lines), `settings` (their precedence), `connect`
//! (which transport), `new_session` (what a session is created with), `runner` (settings → engine → command → close → exit status), `render`
//! (pure: events → pieces of output), `format` (the lines' text), `paint` (colour), `view`
//! (stderr: spinner, streamed text), `visible` (agent text shown, never obeyed), `approval`
//! (a permission request's command or diff), `prompts` (questions and approvals), `turn` (one turn
//! followed to its end), `exec`, `resume`, `repl` and `line_editor`, `sessions`, `error` (exit
//! statuses).

pub mod approval;
pub mod args;
pub mod connect;
pub mod echo;
pub mod error;
pub mod exec;
pub mod format;
pub mod line_editor;
pub mod local;
pub mod new_session;
pub mod paint;
pub mod prompts;
pub mod remote;
pub mod render;
pub mod repl;
pub mod resume;
pub mod runner;
pub mod sessions;
pub mod settings;
pub mod transport;
pub mod turn;
pub mod view;
pub mod visible;

pub use args::{ChatArgs, ConfigArgs, ExecArgs, ResumeArgs, SessionsArgs};
pub use exec::exec;
pub use resume::resume;
pub use runner::run_with_client;

use paint::Paint;
use runner::{env, fail, resolve};
use settings::Settings;

/// `codebuffd chat`, and `codebuffd` alone on a terminal: the REPL on a new session.
pub fn chat(args: ChatArgs) -> u8 {
    let (settings, paint) = match resolve(&args.client, &args.session) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    if !exec::interactive() {
        return fail(
            paint,
            &error::ClientError::usage("the REPL needs a terminal; use `codebuffd exec PROMPT`"),
        );
    }
    run_with_client(&settings, paint, async |client| {
        repl::run(client, &settings, None, &args.output, paint).await
    })
}

/// `codebuffd config show`: the client's effective settings, each with its source, on stdout.
pub fn config(args: ConfigArgs) -> u8 {
    let settings = match Settings::resolve(&args.client, &args.session, &env) {
        Ok(s) => s,
        Err(e) => return fail(Paint::plain(), &e.into()),
    };
    let engine = match settings.engine(&env) {
        Ok(engine) => Some(engine),
        Err(e) => {
            eprintln!("codebuffd: the in-process engine's settings: {e}");
            None
        }
    };
    match args.command {
        args::ConfigCommand::Show => {
            for (key, value, source) in settings.describe(engine.as_ref()) {
                println!("{key:<16} {value:<40} ({source})");
            }
        }
    }
    error::exit::OK
}
