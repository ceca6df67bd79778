//! Engine leases on one machine: one lock file per engine process in a directory beside the
//! database, held with `flock` for the engine's life.
//!
//! The kernel releases an `flock` when its holder exits, however it exits (`kill -9`
//! included), so "is engine X alive" is "does anyone hold X's file exclusively": the engine
//! holds an exclusive lock; a finder asks with a non-blocking *shared* lock, which fails with
//! `EWOULDBLOCK` while X lives and succeeds once it is gone (the finder then removes the
//! file). Shared, because finders run at once (an engine's reaper beside the ACP door's
//! restore, several engines starting together): a finder's exclusive lock would make a dead
//! engine look alive to the finder beside it. A lock is taken on a file under a temporary
//! name and only then renamed into place, so a file under an engine's name is never seen
//! unlocked while the engine lives. The descriptors are close-on-exec: agents never hold them.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock a finder takes to see whether an engine lives (see the module docs): shared, so
/// finders never mistake one another for the engine.
const FINDER_LOCK: FlockArg = FlockArg::LockSharedNonblock;

/// The directory of lock files.
#[derive(Debug, Clone)]
pub(crate) struct LeaseDir {
    dir: PathBuf,
}

/// A held lease: the engine's locked file (released when dropped).
#[derive(Debug)]
pub(crate) struct HeldLease {
    _file: Flock<File>,
    path: PathBuf,
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        // Removed first, then unlocked (by dropping the file): a finder never takes the
        // lock of a removed name for a dead engine's.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl LeaseDir {
    /// The lease directory of the database at `db` (`<db>.engines`), created owner-only.
    pub fn beside(db: &Path) -> io::Result<LeaseDir> {
        let mut name = db.as_os_str().to_owned();
        name.push(".engines");
        let dir = PathBuf::from(name);
        std::fs::create_dir_all(&dir)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(LeaseDir { dir })
    }

    fn path_of(&self, engine_id: &str) -> io::Result<PathBuf> {
        // Ids are UUIDs; anything else could name a path outside the directory.
        if engine_id.is_empty()
            || !engine_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{engine_id}` is not an engine id"),
            ));
        }
        Ok(self.dir.join(format!("{engine_id}.lock")))
    }

    /// Takes the lease of `engine_id` for this process.
    pub fn hold(&self, engine_id: &str) -> io::Result<HeldLease> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path_of(engine_id)?;
        let tmp = self
            .dir
            .join(format!(".{engine_id}.{}.tmp", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let file = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, errno)| io::Error::from(errno))?;
        std::fs::rename(&tmp, &path)?;
        Ok(HeldLease { _file: file, path })
    }

    /// True while the engine holds its lease. A dead engine's file is removed.
    pub fn alive(&self, engine_id: &str) -> io::Result<bool> {
        let path = self.path_of(engine_id)?;
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match Flock::lock(file, FINDER_LOCK) {
            Ok(lock) => {
                // Nobody holds it exclusively: the engine is gone. Remove its name while
                // holding the lock (a later finder finds no file; finders beside this one may
                // remove it too), then let go.
                let _ = std::fs::remove_file(&path);
                drop(lock);
                Ok(false)
            }
            Err((_, Errno::EWOULDBLOCK)) => Ok(true),
            Err((_, errno)) => Err(io::Error::from(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease directory in a scratch directory, removed when dropped (also when a test fails).
    struct Scratch {
        dir: PathBuf,
        leases: LeaseDir,
    }

    impl Scratch {
        fn new() -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("codebuffd-leases-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            let leases = LeaseDir::beside(&dir.join("db")).unwrap();
            Scratch { dir, leases }
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// The lock another finder would hold on `engine_id`'s file while it asks.
    fn finder_lock(leases: &LeaseDir, engine_id: &str) -> Result<Flock<File>, Errno> {
        let file = File::open(leases.path_of(engine_id).unwrap()).unwrap();
        Flock::lock(file, FINDER_LOCK).map_err(|(_, e)| e)
    }

    #[test]
    fn a_lease_is_alive_while_held_and_dead_once_dropped() {
        let scratch = Scratch::new();
        let leases = &scratch.leases;
        let id = uuid::Uuid::new_v4().to_string();
        assert!(!leases.alive(&id).unwrap(), "never registered");
        let held = leases.hold(&id).unwrap();
        // flock locks belong to the open file: a check from this process sees it held too.
        assert!(leases.alive(&id).unwrap());
        assert!(leases.alive(&id).unwrap());
        drop(held);
        assert!(!leases.alive(&id).unwrap());
        assert!(leases.path_of("../x").is_err());
        let names: Vec<_> = std::fs::read_dir(scratch.dir.join("db.engines"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }

    /// Two finders at once (an engine's reaper and the ACP door's restore, on a daemon that
    /// starts after a crash): while one holds its finder's lock on a dead engine's file, the
    /// other must still see the engine dead, and a live engine stays alive to both.
    #[test]
    fn a_finder_beside_another_sees_a_dead_engine_dead() {
        let scratch = Scratch::new();
        let leases = &scratch.leases;
        // What `kill -9` leaves: the engine's file, locked by nobody.
        let dead = uuid::Uuid::new_v4().to_string();
        std::fs::write(leases.path_of(&dead).unwrap(), b"").unwrap();
        let other_finder = finder_lock(leases, &dead).unwrap();
        assert!(!leases.alive(&dead).unwrap(), "dead beside another finder");
        drop(other_finder);
        assert!(!leases.path_of(&dead).unwrap().exists());

        let live = uuid::Uuid::new_v4().to_string();
        let _held = leases.hold(&live).unwrap();
        assert!(
            finder_lock(leases, &live).is_err(),
            "a finder cannot lock a live engine's file"
        );
        assert!(leases.alive(&live).unwrap());
    }
}
