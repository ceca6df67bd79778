//! The daemon with the real Codebuff adapter against the scripted fake backend: starting one,
//! creating `codebuff` sessions (shared by the suites that run the real SDK).

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::daemon::{Daemon, DaemonOptions, TempDir};
use super::fake_backend::FakeBackend;

/// Generous: the adapter takes 1–2 s per run, more on a loaded machine.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A daemon whose codebuff agent talks to `backend`, with a scratch `HOME` (no real credentials)
/// and the key `test-key`. `extra` adds (or overrides) environment variables.
pub fn start_daemon(backend: &FakeBackend, home: &TempDir, extra: &[(&str, &str)]) -> Daemon {
    start_daemon_with(backend, home, extra, &[])
}

pub fn start_daemon_with(
    backend: &FakeBackend,
    home: &TempDir,
    extra: &[(&str, &str)],
    args: &[String],
) -> Daemon {
    let mut env = vec![
        ("CODEBUFFD_TEST_BACKEND_URL".to_owned(), backend.url.clone()),
        ("CODEBUFF_API_KEY".to_owned(), "test-key".to_owned()),
        ("HOME".to_owned(), home.path().display().to_string()),
    ];
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push(((*k).to_owned(), (*v).to_owned()));
    }
    Daemon::start_with(DaemonOptions {
        env,
        args: args.to_vec(),
        ..Default::default()
    })
}

/// Creates a `codebuff` session working in `dir`.
pub async fn create_codebuff(d: &Daemon, id: &str, dir: &Path) {
    d.create(
        id,
        json!({"agent": "codebuff", "directory": dir.display().to_string()}),
    )
    .await;
}

/// Credits the fake backend reports for a reply costing `usd`: round(usd × 1.055 × 100).
pub fn credits(usd: f64) -> f64 {
    (usd * 1.055 * 100.0).round()
}
