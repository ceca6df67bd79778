//! The daemon's instance id: a UUID kept in `<data-dir>/instance-id`, created on the first
//! start and read on every later one.
//!
//! Many daemons (one per sandbox) may share one store (`--store postgres://…`). Each session
//! record names the instance that runs it (`SessionRecord::owner`), and at start a daemon
//! restores only its own sessions, so it never recovers, appends to or kills the agent of
//! another daemon's session. The id lives in the data directory, not the store, so a daemon
//! restarted on the same data directory finds its sessions again.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file, inside the data directory, that holds the instance id.
pub const INSTANCE_ID_FILE: &str = "instance-id";

/// Why the instance id could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum InstanceIdError {
    #[error("cannot {action} the instance id file {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the instance id file {} does not hold a UUID (found {found:?}); it names the sessions \
         this daemon owns in its store: restore it rather than delete it",
        path.display()
    )]
    Malformed { path: PathBuf, found: String },
}

/// The instance id of the daemon whose data directory is `data_dir` (which must exist): read
/// from `<data_dir>/instance-id`, or a new UUID written there first.
///
/// A new id is written to a temporary file, synced, then moved into place without replacing an
/// id another process put there meanwhile; the file is always read back, so every daemon on
/// the directory gets the same id.
pub fn load_or_create(data_dir: &Path) -> Result<String, InstanceIdError> {
    let path = data_dir.join(INSTANCE_ID_FILE);
    if !path.exists() {
        create(data_dir, &path)?;
    }
    let text = std::fs::read_to_string(&path).map_err(|source| InstanceIdError::Io {
        action: "read",
        path: path.clone(),
        source,
    })?;
    match uuid::Uuid::parse_str(text.trim()) {
        Ok(id) => Ok(id.hyphenated().to_string()),
        Err(_) => Err(InstanceIdError::Malformed {
            path,
            found: text.chars().take(64).collect(),
        }),
    }
}

/// Writes a new id to `path` unless the file exists by then.
fn create(data_dir: &Path, path: &Path) -> Result<(), InstanceIdError> {
    let io = |action, source| InstanceIdError::Io {
        action,
        path: path.to_owned(),
        source,
    };
    let tmp = data_dir.join(format!(
        ".{INSTANCE_ID_FILE}.{}.{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| {
        let mut file = crate::private_files::options()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        writeln!(file, "{}", uuid::Uuid::new_v4().hyphenated())?;
        file.sync_all()?;
        // A hard link never replaces an existing file (unlike a rename): the first id wins.
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            // A file system without hard links: rename, the id is read back anyway.
            Err(_) => std::fs::rename(&tmp, path),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    written.map_err(|e| io("create", e))?;
    // Make the new name durable (best effort: not every file system syncs directories).
    if let Ok(dir) = std::fs::File::open(data_dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!(
                "codebuffd-instance-{}",
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn created_once_and_stable() {
        let dir = TempDir::new();
        let id = load_or_create(&dir.0).unwrap();
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
        assert_eq!(load_or_create(&dir.0).unwrap(), id);
        assert_eq!(load_or_create(&dir.0).unwrap(), id);
        let text = std::fs::read_to_string(dir.0.join(INSTANCE_ID_FILE)).unwrap();
        assert_eq!(text.trim(), id);
        // Nothing but the id file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(INSTANCE_ID_FILE)]);
        // Another data directory, another id.
        let other = TempDir::new();
        assert_ne!(load_or_create(&other.0).unwrap(), id);
    }

    #[test]
    fn concurrent_first_starts_agree() {
        let dir = TempDir::new();
        let ids: Vec<String> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|_| s.spawn(|| load_or_create(&dir.0).unwrap()))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    }

    #[test]
    fn a_written_id_is_kept_as_it_is() {
        let dir = TempDir::new();
        let id = "6f1c2d3e-4a5b-4c6d-8e7f-001122334455";
        std::fs::write(dir.0.join(INSTANCE_ID_FILE), format!("  {id}\n")).unwrap();
        assert_eq!(load_or_create(&dir.0).unwrap(), id);
    }

    #[test]
    fn a_malformed_file_is_a_clear_error() {
        for content in ["", "not a uuid\n", "6f1c2d3e-4a5b-4c6d-8e7f"] {
            let dir = TempDir::new();
            let path = dir.0.join(INSTANCE_ID_FILE);
            std::fs::write(&path, content).unwrap();
            let error = load_or_create(&dir.0).unwrap_err();
            assert!(matches!(error, InstanceIdError::Malformed { .. }));
            let message = error.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("UUID"), "{message}");
            // The file is left for the operator to fix.
            assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
        }
    }

    #[test]
    fn an_unreadable_path_is_a_clear_error() {
        let dir = TempDir::new();
        std::fs::create_dir(dir.0.join(INSTANCE_ID_FILE)).unwrap();
        let message = load_or_create(&dir.0).unwrap_err().to_string();
        assert!(message.contains("cannot read"), "{message}");
    }
}
