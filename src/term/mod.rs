//! The terminal client: `codebuffd exec` / `run`, `resume`, `chat` (the REPL), `sessions …` and
//! `config show` — a front door like the others, on the same engine: in-process on the data
//! directory the daemon uses (`local.rs`, `Engine::start`), or a running daemon over `/v1`
//! (`remote.rs`); `transport.rs` makes the two one.
//!
//! One concept per file: `args` (command lines), `settings` (their precedence), `connect`
//! (which transport), `render` (pure: events → pieces of output), `paint` (colour), `view`
//! (stderr: spinner, streamed text), `prompts` (questions and approvals), `turn` (one turn
//! followed to its end), `exec` (`exec`, `resume`), `repl`, `sessions`, `error` (exit statuses).

pub mod args;
pub mod connect;
pub mod error;
pub mod exec;
pub mod format;
pub mod local;
pub mod paint;
pub mod prompts;
pub mod remote;
pub mod render;
pub mod repl;
pub mod sessions;
pub mod settings;
pub mod transport;
pub mod turn;
pub mod view;

use std::io::IsTerminal;

pub use args::{ChatArgs, ConfigArgs, ExecArgs, ResumeArgs, SessionsArgs};

use exec::{env, fail, runtime};
use paint::Paint;
use settings::Settings;

/// `codebuffd chat`, and `codebuffd` alone on a terminal: the REPL on a new session.
pub fn chat(args: ChatArgs) -> u8 {
    let tty = std::io::stderr().is_terminal();
    let settings = match Settings::resolve(&args.client, &args.session, &env) {
        Ok(s) => s,
        Err(e) => return fail(Paint::plain(), &e.into()),
    };
    let paint = Paint::new(settings.color, tty, &env);
    if !exec::interactive() {
        return fail(
            paint,
            &error::ClientError::usage("the REPL needs a terminal; use `codebuffd exec PROMPT`"),
        );
    }
    let runtime = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(paint, &e),
    };
    let code = runtime.block_on(async {
        let transport = connect::connect(&settings, &env, paint)?;
        let result = repl::run(&transport, &settings, None, &args.output, paint).await;
        transport.close().await;
        result
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match code {
        Ok(code) => code,
        Err(e) => fail(paint, &e),
    }
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
