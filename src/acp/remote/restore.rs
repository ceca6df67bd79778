//! Which recorded servers this daemon serves: those of a data directory's records whose engine
//! is gone. A record whose engine still lives is that engine's; it *waits*,
//! and is taken up once that engine is gone — a daemon on Postgres that crashed and was
//! restarted at once starts while its predecessor's lease still runs (up to `--store-lease`),
//! and must then serve its servers again without another restart. While other engines share
//! the store, records they create later are looked at too (`registry.rs`, `sweep`).
//!
//! Taking a record up rewrites it with this engine's id ([`super::Server::start`]); daemons on
//! one data directory do that under [`RestoreLock`], each reading the record again once it
//! holds the lock, so two never serve one server (two writers would interleave its log).

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::record::ServerRecord;
use crate::session::SessionManager;

/// The lock file's name in the servers' directory (not a server: it holds no record).
const LOCK_FILE: &str = "restore.lock";

/// Held while a daemon decides which records it serves and takes them up.
pub struct RestoreLock {
    _file: Flock<File>,
}

impl RestoreLock {
    /// Waits for the lock of the servers' directory `root` (created when missing).
    pub fn take(root: &Path) -> std::io::Result<RestoreLock> {
        crate::private_files::create_dir_all(root)?;
        let file = crate::private_files::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(LOCK_FILE))?;
        let file = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| std::io::Error::from(errno))?;
        Ok(RestoreLock { _file: file })
    }
}

/// What to do with the record in one server directory.
pub enum Found {
    /// Its engine is gone: this daemon serves it.
    Serve(PathBuf, ServerRecord),
    /// A live engine serves it (another, or this one while it deletes it): look again once
    /// that engine may be gone.
    Wait(PathBuf, ServerRecord),
    /// A WebSocket connection's, whose socket is gone with its engine: its sessions end and
    /// its record goes.
    Forget(PathBuf, ServerRecord),
    /// Nothing to serve (deleted meanwhile, or unreadable: said in the log).
    Nothing,
}

/// Reads the record in `dir` (under [`RestoreLock`]) and says what to do with it.
pub fn classify(manager: &SessionManager, dir: PathBuf) -> Found {
    let record = match ServerRecord::load(&dir) {
        Ok(record) => record,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Found::Nothing,
        Err(error) => {
            tracing::warn!(%error, dir = %dir.display(), "an ACP server's record cannot be read; skipped");
            return Found::Nothing;
        }
    };
    // This engine counts as alive too: a record of its own that a look finds (a server being
    // deleted, its directory not yet removed) is never served a second time.
    let served_by_a_live_engine = record
        .engine
        .as_deref()
        .is_some_and(|e| manager.engine_alive(e));
    if served_by_a_live_engine {
        return Found::Wait(dir, record);
    }
    if record.websocket {
        return Found::Forget(dir, record);
    }
    Found::Serve(dir, record)
}
