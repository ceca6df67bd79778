//! Which process serves a recorded ACP server: an exclusive `flock` on
//! `<server dir>/serving.lock`, held by the [`Server`](super::server::Server) for its life.
//!
//! Why: several codebuffd servers may share a data directory (they share one log). Each
//! restores the ACP servers recorded there at start; one that another live process serves must
//! be left to it (two writers of one envelope log would interleave it, and a WebSocket server
//! whose socket is still open must not be forgotten). The kernel drops the lock when its
//! holder exits, however it exits, so a crashed process's servers are restored by the next.

use std::fs::File;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// The lock file in a server's directory.
const LOCK_FILE: &str = "serving.lock";

/// This process serves the server in the directory while it holds this.
pub struct ServingLock {
    _file: Flock<File>,
}

impl ServingLock {
    /// Takes the lock of the server in `dir`; `Ok(None)` when another process holds it.
    pub fn try_take(dir: &Path) -> std::io::Result<Option<ServingLock>> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(LOCK_FILE))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) => Ok(Some(ServingLock { _file: file })),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(std::io::Error::from(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_free_again_once_dropped() {
        let dir = std::env::temp_dir().join(format!("serving-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let held = ServingLock::try_take(&dir).unwrap().expect("free");
        // flock locks belong to the open file: a second open in this process is refused too.
        assert!(ServingLock::try_take(&dir).unwrap().is_none());
        drop(held);
        assert!(ServingLock::try_take(&dir).unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
