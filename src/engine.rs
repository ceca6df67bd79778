//! The engine every front door runs on: the data directory, this daemon's instance id, the
//! event store, the agents and the session manager, started (and stored sessions restored) in
//! one place. `codebuffd server` wraps it in HTTP; the other doors wrap the same engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::agent::{AdapterSource, Launcher};
use crate::session::{Limits, SessionContext, SessionInfo, SessionManager};
use crate::store::{open_store_with, EngineEntry, SessionQuery, StoreOptions};

/// The store spec with its password hidden, for showing where an engine keeps its log (the
/// terminal's `settings` lists it); re-exported so doors need not reach into `store/`.
pub use crate::store::redact_spec;
use crate::webhooks::Webhooks;

/// How long shutdown waits for sessions to end their turns.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(15);

/// What the engine is started with.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// The store spec (`sqlite`, `sqlite://PATH`, `postgres://…`, `memory`).
    pub store: String,
    /// A shared Postgres store's engine lease: how long a silent engine keeps its sessions.
    pub store_lease: Duration,
    /// The codebuff agent command; `None` = the bundled adapter.
    pub agent_command: Option<PathBuf>,
    pub limits: Limits,
    /// Sessions may set loader variables (`LD_PRELOAD`, `NODE_OPTIONS`, …) in their `env`.
    pub allow_loader_env: bool,
    /// Keep a warm agent process per agent kind in use.
    pub warm_start: bool,
    /// The permission mode of sessions that do not choose one.
    pub permission_mode: String,
    /// The credit budget of sessions that do not set one.
    pub max_session_credits: Option<f64>,
    /// Ended sessions older than this are deleted in the background.
    pub retention: Option<Duration>,
    /// The directory of sessions that do not name one; `None` = the working directory.
    pub workdir: Option<PathBuf>,
    /// Webhooks (`webhooks/`): endpoints, secret, events, retries.
    pub webhooks: crate::webhooks::WebhookSettings,
}

/// A running engine.
pub struct Engine {
    pub manager: Arc<SessionManager>,
    /// The webhook dispatcher and the deliveries' listing.
    pub webhooks: Arc<Webhooks>,
    /// The open-files limit of the process (raised to its hard limit at start).
    pub open_files: u64,
    /// The retention sweep, when `--retention-days` is set.
    retention: Option<tokio::task::JoinHandle<()>>,
    /// This engine's lease in the store: other engines know it is alive while it is held
    /// (dropped last, after the engine has stopped its sessions).
    lease: Box<dyn crate::store::Lease>,
}

impl Engine {
    /// Opens the store, restores this daemon's sessions and returns the running engine.
    /// Must be called within a tokio runtime (restored sessions start their actors).
    pub fn start(config: &EngineConfig) -> anyhow::Result<Engine> {
        // Agents' pipes, clients and the store all take descriptors.
        let open_files = raise_open_files_limit();
        // What leaves a turn's process group is re-parented here, to be killed with it.
        crate::agent::reaper::become_subreaper();
        let agent_state_dir = config.data_dir.join("agent-state");
        secure_data_dir(&config.data_dir)?;
        crate::private_files::create_dir_all(&agent_state_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                config.data_dir.display()
            )
        })?;
        let command = std::env::args()
            .nth(1)
            .unwrap_or_else(|| "engine".to_owned());
        let instance_id = crate::instance::load_or_create(&config.data_dir)?;
        // Readers see an event only once it is committed: what a client saw survives a crash,
        // so `Last-Event-ID` resumes exactly after a restart.
        let options = StoreOptions {
            visible_after_commit: true,
            lease: config.store_lease,
            ..StoreOptions::default()
        };
        let store =
            open_store_with(&config.store, &config.data_dir, options).with_context(|| {
                format!(
                    "cannot open the event store `{}`",
                    redact_spec(&config.store)
                )
            })?;
        // Before sessions are restored: what restoring records (turns ended `interrupted`)
        // is delivered too.
        // This engine process's own id: the owner of the sessions it runs and of the webhook
        // deliveries it claims (several engines may share the data directory).
        let engine_id = uuid::Uuid::new_v4().hyphenated().to_string();
        let webhooks = Arc::new(
            Webhooks::start(store.clone(), config.webhooks.clone(), &engine_id)
                .map_err(anyhow::Error::msg)?,
        );
        let adapter = AdapterSource::from_env(&config.data_dir);
        let launcher = Arc::new(Launcher::new(config.agent_command.clone(), adapter));
        tracing::info!(instance = %instance_id, "instance id");
        let mut ctx = SessionContext::from_env(
            store,
            launcher,
            config.limits.clone(),
            agent_state_dir,
            instance_id,
            config.allow_loader_env,
        );
        ctx.engine_id = engine_id;
        ctx.agents.warm_start = config.warm_start;
        ctx.policy.default_permission_mode = config.permission_mode.clone();
        ctx.policy.default_max_credits = config.max_session_credits;
        ctx.policy.webhooks = webhooks.policy().clone();
        if let Some(dir) = &config.workdir {
            ctx.policy.cwd = dir.canonicalize().with_context(|| {
                format!("the working directory {} is not usable", dir.display())
            })?;
            if !ctx.policy.cwd.is_dir() {
                anyhow::bail!("the working directory {} is not a directory", dir.display());
            }
        }
        ctx.policy.protected = protected_dirs(&config.data_dir, ctx.agents.launcher.adapter_dir());
        if let Some((_, what)) = ctx.policy.protected.iter().find(|(root, _)| {
            ctx.policy
                .cwd
                .canonicalize()
                .is_ok_and(|c| c.starts_with(root))
        }) {
            tracing::warn!(
                workdir = %ctx.policy.cwd.display(),
                "the working directory is inside {what}: sessions that do not name a directory will be refused; start the daemon elsewhere or pass --workdir DIR"
            );
        }
        // This engine's lease: other engines on the store see it alive while it runs, and
        // recover its sessions' turns once it is gone, however it goes.
        let lease = ctx
            .store
            .coordination()
            .register(&EngineEntry {
                engine_id: ctx.engine_id.clone(),
                instance_id: ctx.instance_id.clone(),
                pid: std::process::id(),
                command,
                url: None,
                started_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0)),
            })
            .context("cannot register this engine in the event store")?;
        tracing::info!(engine = %ctx.engine_id, "engine id");
        let manager = Arc::new(SessionManager::new(ctx));
        manager.start_ownership();
        let retention = config
            .retention
            .map(|keep| crate::session::retention::spawn(manager.clone(), keep));
        Ok(Engine {
            manager,
            webhooks,
            open_files,
            retention,
            lease,
        })
    }

    /// Every stored session, newest first, read from the store without starting an engine
    /// (no registration, no actors, no recovery): `codebuffd sessions list` beside whatever
    /// engines run on the data directory. A session another engine runs shows its record.
    pub fn stored_sessions(config: &EngineConfig) -> anyhow::Result<Vec<SessionInfo>> {
        let options = StoreOptions {
            visible_after_commit: true,
            ..StoreOptions::default()
        };
        let store =
            open_store_with(&config.store, &config.data_dir, options).with_context(|| {
                format!(
                    "cannot open the event store `{}`",
                    redact_spec(&config.store)
                )
            })?;
        let records = store.coordination().query_sessions(&SessionQuery {
            limit: usize::MAX >> 1,
            ..SessionQuery::default()
        })?;
        Ok(records
            .iter()
            .filter_map(|r| SessionInfo::from_record(r, None))
            .collect())
    }

    /// Records the URL this engine is served at with its registration (`GET /v1/engines`,
    /// `codebuffd doctor` show it).
    pub fn announce_url(&self, url: &str) {
        if let Err(error) = self.lease.announce_url(url) {
            tracing::warn!(%error, "cannot record the URL with this engine's registration");
        }
    }

    /// Ends every running turn (recording its ending, killing its agent) and makes the store
    /// durable.
    pub async fn shutdown(&self) {
        if let Some(sweep) = &self.retention {
            sweep.abort();
        }
        self.manager.shutdown(SHUTDOWN_LIMIT).await;
        self.manager.context().agents.drop_spares();
        if let Err(error) = self.manager.store().flush() {
            tracing::error!(%error, "the event store could not be flushed");
        }
        // Last: the turns ended above are in the outbox, delivered now or at the next start.
        self.webhooks.stop().await;
    }
}

/// The directories sessions may not work in: the data directory, the adapter, and the
/// installation (the executable's directory; for a binary run from its Cargo build
/// directory, the whole checkout it was built from).
fn protected_dirs(data_dir: &Path, adapter_dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let mut dirs = Vec::new();
    let mut add = |path: &Path, what: &'static str| {
        if let Ok(real) = path.canonicalize() {
            dirs.push((real, what));
        }
    };
    add(data_dir, "the daemon's data directory");
    add(adapter_dir, "the daemon's Codebuff adapter");
    if let Ok(exe) = std::env::current_exe() {
        if let Some(bin) = exe.parent() {
            add(bin, "the daemon's installation directory");
            // Run from a Cargo build directory (it holds `CACHEDIR.TAG`, wherever
            // `CARGO_TARGET_DIR` put it): the checkout it was built from is the installation.
            let built_in_place = bin.ancestors().any(|d| d.join("CACHEDIR.TAG").is_file());
            let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
            if built_in_place && checkout.join("Cargo.toml").is_file() {
                add(checkout, "the daemon's source checkout");
            }
        }
    }
    dirs
}

/// Raises this process's soft limit of open files to its hard limit (agents' pipes, SSE
/// clients and the store all take descriptors) and returns the limit now in force.
pub fn raise_open_files_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                return hard;
            }
            soft
        }
        Err(_) => 1024,
    }
}

/// Creates the data directory 0700 and narrows whatever in it others could read
/// (`private_files.rs`), warning about each change.
fn secure_data_dir(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let narrowed = crate::private_files::secure_data_dir(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    for (path, had) in &narrowed.fixed {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{had:o}"),
            "the data directory held something others could read: made it private (0700 directories, 0600 files)"
        );
    }
    for (path, why) in &narrowed.failed {
        tracing::warn!(path = %path.display(), error = %why, "cannot make this path in the data directory private");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_the_open_files_limit_reaches_the_hard_limit() {
        use nix::sys::resource::{getrlimit, Resource};
        let now = raise_open_files_limit();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, hard);
        assert_eq!(now, soft);
    }
}
