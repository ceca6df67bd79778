//! The `codebuffd` binary: parses arguments, runs the command, owns the only `process::exit`.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::io::{self, Read};
use std::process::ExitCode;

use clap::Parser;
use codebuffd::cli::{AcpArgs, Cli, Command, ConvertArgs, DoctorArgs, InstallAdapterArgs};
use codebuffd::commands::convert::{convert_stream, ConvertOptions};
use codebuffd::config::{DaemonConfig, ServerArgs};
use codebuffd::secrets::Hidden;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any thread starts: the credentials leave what /proc shows of this process.
    let hidden = match &cli.command {
        Some(Command::MockAgent(_) | Command::Convert(_) | Command::Openapi) => None,
        _ => Some(codebuffd::secrets::hide_from_proc()),
    };
    let Some(command) = cli.command else {
        return match std::io::IsTerminal::is_terminal(&io::stdin()) {
            true => ExitCode::from(codebuffd::term::chat(Default::default())),
            false => {
                let _ = <Cli as clap::CommandFactory>::command().print_help();
                ExitCode::from(2)
            }
        };
    };
    let result = match command {
        Command::Convert(args) => run_convert(args),
        Command::Server(args) => run_server(args, hidden.as_ref()),
        Command::MockAgent(args) => {
            return ExitCode::from(codebuffd::agent::mock::run(args));
        }
        Command::Openapi => codebuffd::commands::openapi::run(&mut io::stdout().lock()),
        Command::Doctor(args) => return run_doctor(&args),
        Command::InstallAdapter(args) => run_install_adapter(&args),
        Command::Exec(args) => return client(|| codebuffd::term::exec::exec(args)),
        Command::Resume(args) => return client(|| codebuffd::term::resume::resume(args)),
        Command::Chat(args) => return client(|| codebuffd::term::chat(args)),
        Command::Sessions(args) => return client(|| codebuffd::term::sessions::run(args)),
        Command::Config(args) => return ExitCode::from(codebuffd::term::config(args)),
        Command::Acp(args) => run_acp(&args, hidden.as_ref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("codebuffd: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A terminal client command: the engine's log only for warnings and errors (`RUST_LOG`
/// overrides), so the human view on stderr stays readable.
fn client(run: impl FnOnce() -> u8) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .init();
    ExitCode::from(run())
}

/// The daemon's log: stderr, `RUST_LOG` filters it (info by default).
fn init_log() {
    init_log_at("info");
}

/// The log on stderr, `RUST_LOG` filters it (`default` without it).
fn init_log_at(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .init();
}

fn run_server(args: ServerArgs, hidden: Option<&Hidden>) -> anyhow::Result<()> {
    codebuffd::allocator::tune();
    init_log();
    if let Some(hidden) = hidden {
        hidden.log();
    }
    let config = DaemonConfig::resolve(&args, &|name| std::env::var(name).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(codebuffd::commands::server::run(config))?;
    // Do not wait for stray blocking tasks (a reader stuck on a foreign pipe).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    Ok(())
}

/// `codebuffd acp`: JSON-RPC on stdout, so the log (stderr) says only warnings unless
/// `RUST_LOG` asks for more (an editor shows an agent's stderr).
fn run_acp(args: &AcpArgs, hidden: Option<&Hidden>) -> anyhow::Result<()> {
    codebuffd::allocator::tune();
    init_log_at("warn");
    if let Some(hidden) = hidden {
        hidden.log();
    }
    let server_args = ServerArgs::without_listener(args.engine.clone());
    let config = DaemonConfig::resolve(&server_args, &|name| std::env::var(name).ok())?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let agent = codebuffd::agent::AgentKind::parse(&args.agent)
        .ok_or_else(|| anyhow::anyhow!("unknown agent `{}`", args.agent))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(codebuffd::commands::acp::run(config.engine(), agent))?;
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

/// `codebuffd doctor`: the report on stdout; exit status 1 when it found a problem.
fn run_doctor(args: &DoctorArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("codebuffd: {err}");
            return ExitCode::FAILURE;
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    let report = runtime.block_on(codebuffd::commands::doctor::examine(args, &env));
    if let Err(err) = report.render(&mut io::stdout().lock()) {
        eprintln!("codebuffd: {err}");
        return ExitCode::FAILURE;
    }
    if report.problems() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_install_adapter(args: &InstallAdapterArgs) -> anyhow::Result<()> {
    init_log();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let env = |name: &str| std::env::var(name).ok();
    runtime.block_on(codebuffd::commands::install_adapter::run(
        args,
        &env,
        &mut io::stdout().lock(),
    ))
}
