//! Retention (`--retention-days`): ended sessions whose last event is older than the limit are
//! deleted — record and events — by a background sweep, so a long-lived daemon's store does
//! not grow without end. Running and idle sessions are never touched, however old.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::SessionManager;

/// Sweeps now and then every tenth of `keep` (between a second and an hour), until aborted.
pub fn spawn(manager: Arc<SessionManager>, keep: Duration) -> JoinHandle<()> {
    let every = (keep / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600));
    tokio::spawn(async move {
        loop {
            sweep(&manager, keep).await;
            tokio::time::sleep(every).await;
        }
    })
}

/// Deletes the ended sessions older than `keep`; returns how many.
pub async fn sweep(manager: &SessionManager, keep: Duration) -> usize {
    let mut deleted = 0;
    for id in manager.ended_before(keep) {
        match manager.delete(&id).await {
            Ok(()) => deleted += 1,
            Err(error) => {
                tracing::warn!(session = %id, %error, "retention could not delete the session; retrying later")
            }
        }
    }
    if deleted > 0 {
        tracing::info!(sessions = deleted, "retention deleted ended sessions");
    }
    deleted
}
