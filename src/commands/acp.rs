//! `codebuffd acp`: the engine behind the ACP door on stdin/stdout, for a client that launches
//! it as a subprocess (an editor, `acpx`).
//!
//! stdout carries only JSON-RPC; logs go to stderr. When stdin ends (the client went away, or
//! closed it to stop the agent), the connection ends and the engine shuts down: every running
//! turn is ended (its agent's process group killed) and the store made durable; exit 0. SIGTERM
//! and SIGINT do the same.

use std::time::Duration;

use anyhow::Context;

use super::signals::ShutdownSignals;
use crate::acp::{self, AcpOptions, Outbox, StdioTransport};
use crate::agent::AgentKind;
use crate::engine::{Engine, EngineConfig};

/// How long the writer gets to write the last answers after the connection ended.
const WRITER_DRAIN: Duration = Duration::from_secs(2);

/// Runs the ACP agent until the client goes away.
pub async fn run(config: EngineConfig, agent: AgentKind) -> anyhow::Result<()> {
    let mut signals = ShutdownSignals::install();
    let engine = Engine::start(&config)?;
    let outbox = Outbox::new();
    let (lines, transport) =
        StdioTransport::start(outbox.clone()).context("cannot start the stdio transport")?;
    tracing::info!(agent = agent.id(), data_dir = %config.data_dir.display(), "codebuffd acp ready");
    let options = AcpOptions {
        agent,
        data_dir: config.data_dir.clone(),
    };
    let served = {
        let connection = acp::serve(engine.manager.clone(), options, outbox, lines);
        tokio::select! {
            result = connection => result.map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}")),
            () = signals.recv() => {
                tracing::info!("signal: shutting down");
                Ok(())
            }
        }
    };
    tracing::info!("the client is gone: ending running turns");
    engine.shutdown().await;
    transport.finish(WRITER_DRAIN);
    served
}
