//! The `codebuffd` binary: parses arguments, runs the command, owns the only `process::exit`.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::io::{self, Read};
use std::process::ExitCode;

use clap::Parser;
use codebuffd::cli::{Cli, Command, ConvertArgs, ServerArgs};
use codebuffd::commands::convert::{convert_stream, ConvertOptions};
use codebuffd::config::DaemonConfig;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Convert(args) => run_convert(args),
        Command::Server(args) => run_server(args),
        Command::MockAgent(args) => {
            return ExitCode::from(codebuffd::agent::mock::run(args));
        }
        Command::Openapi => codebuffd::commands::openapi::run(&mut io::stdout().lock()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("codebuffd: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .init();
    let config = DaemonConfig::resolve(&args, &|name| std::env::var(name).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(codebuffd::commands::server::run(config))?;
    // Do not wait for stray blocking tasks (a reader stuck on a foreign pipe).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    Ok(())
}

fn run_convert(args: ConvertArgs) -> anyhow::Result<()> {
    let mut input: Box<dyn Read> = match &args.file {
        None => Box::new(io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(io::stdin().lock()),
        Some(p) => Box::new(
            File::open(p).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", p.display()))?,
        ),
    };
    let options = ConvertOptions {
        session_id: args.session_id,
        prompt: args.prompt,
        include_raw: args.include_raw,
        max_line_bytes: args.max_line_bytes,
        fixed_time: args.fixed_time,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match convert_stream(&mut input, &mut out, &options) {
        Ok(_) => Ok(()),
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}
