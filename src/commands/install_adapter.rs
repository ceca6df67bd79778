//! `codebuffd install-adapter`: unpacks the Codebuff adapter this binary carries and installs
//! its Node packages now, instead of on the first codebuff session — where the daemon would
//! (`<data-dir>/adapter/<hash>`), or `--into DIR` for an image or a package that then sets
//! `CODEBUFFD_ADAPTER_DIR=DIR`. Progress goes to the log (stderr); the adapter's directory is
//! printed on stdout.

use std::io::Write;

use anyhow::Context;

use crate::agent::adapter::{self, AdapterSource};
use crate::agent::{AgentKind, Launcher};
use crate::cli::InstallAdapterArgs;
use crate::config::DaemonConfig;
use crate::config::{EngineArgs, ServerArgs};

/// Installs the adapter; returns the directory it is in.
pub async fn run(
    args: &InstallAdapterArgs,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let dir = match &args.into {
        Some(dest) => {
            let dest = std::path::absolute(dest)
                .with_context(|| format!("cannot use {}", dest.display()))?;
            if !adapter::install_into(&dest).await? {
                tracing::info!(dir = %dest.display(), "the Codebuff adapter is already there");
            }
            dest
        }
        None => {
            let server_args = ServerArgs {
                engine: EngineArgs {
                    data_dir: args.data_dir.clone(),
                    config: args.config.clone(),
                    ..EngineArgs::default()
                },
                ..ServerArgs::default()
            };
            let config = DaemonConfig::resolve(&server_args, env)?;
            let launcher = Launcher::new(None, AdapterSource::locate(&config.data_dir, env));
            tracing::info!(adapter = %launcher.adapter().describe(), "installing the Codebuff adapter");
            launcher.install(AgentKind::Codebuff, false).await?;
            launcher.adapter_dir().to_path_buf()
        }
    };
    writeln!(out, "{}", dir.display())?;
    Ok(())
}
