//! One engine per data directory at a time: `<data-dir>/engine.lock`, held (an exclusive
//! `flock`) by the process whose engine runs on it — `codebuffd server`, `codebuffd acp`, or an
//! in-process `codebuffd exec`.
//!
//! Why: every engine on a data directory has the same instance id, so at start it restores the
//! directory's sessions as its own and recovers the turns it finds running (kills their agents,
//! ends them as interrupted). A second engine on a directory whose engine still runs would do
//! that to live turns. The lock makes the second one fail at start instead, naming the holder;
//! the holder writes who it is into the file (its pid, its command and, for a server, the URL it
//! serves) so that a terminal client can use the running daemon instead.
//!
//! The kernel releases the lock when the holder exits, however it exits (`kill -9` included), so
//! a stale file never blocks a restart. The descriptor is close-on-exec: agents never hold it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

/// The lock file, inside the data directory.
pub const LOCK_FILE: &str = "engine.lock";

/// Who holds a data directory (the lock file's content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// The subcommand it runs (`server`, `acp`, `exec`, …).
    pub command: String,
    /// The `/v1` base URL, for a server once it listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}", busy_message(data_dir, holder.as_ref()))]
    Busy {
        data_dir: PathBuf,
        holder: Option<Holder>,
    },
    #[error("cannot lock the data directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn busy_message(data_dir: &Path, holder: Option<&Holder>) -> String {
    let who = match holder {
        Some(Holder {
            pid,
            command,
            url: Some(url),
        }) => format!("codebuffd {command} (pid {pid}, serving {url})"),
        Some(Holder { pid, command, .. }) => format!("codebuffd {command} (pid {pid})"),
        None => "another codebuffd process".to_owned(),
    };
    format!(
        "the data directory {} is in use by {who}: only one engine may run on it; stop it, or \
         use another --data-dir",
        data_dir.display()
    )
}

/// The held lock of a data directory; released on drop (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    file: Flock<File>,
    holder: Holder,
}

impl DataDirLock {
    /// Locks `data_dir` (which must exist) for this process, recording `command` as the holder.
    pub fn acquire(data_dir: &Path, command: &str) -> Result<DataDirLock, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let file = crate::private_files::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) => file,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(LockError::Busy {
                    data_dir: data_dir.to_owned(),
                    holder: holder(data_dir),
                })
            }
            Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
        };
        let mut lock = DataDirLock {
            file,
            holder: Holder {
                pid: std::process::id(),
                command: command.to_owned(),
                url: None,
            },
        };
        lock.write().map_err(io)?;
        Ok(lock)
    }

    /// Records the URL this process serves, for clients that find the directory busy.
    pub fn announce_url(&mut self, url: &str) -> std::io::Result<()> {
        self.holder.url = Some(url.to_owned());
        self.write()
    }

    fn write(&mut self) -> std::io::Result<()> {
        let text = serde_json::to_string(&self.holder).unwrap_or_default();
        let file: &mut File = &mut self.file;
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(text.as_bytes())?;
        file.flush()
    }
}

/// Who holds `data_dir`'s lock, as it wrote it (none when nobody wrote, or it cannot be read).
pub fn holder(data_dir: &Path) -> Option<Holder> {
    let mut text = String::new();
    File::open(data_dir.join(LOCK_FILE))
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_freed_on_drop() {
        let dir = std::env::temp_dir().join(format!("codebuffd-lock-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut first = DataDirLock::acquire(&dir, "server").unwrap();
        first.announce_url("http://127.0.0.1:9").unwrap();
        // flock locks belong to the open file: a second open in this process conflicts too.
        match DataDirLock::acquire(&dir, "exec") {
            Err(LockError::Busy { holder, .. }) => {
                let holder = holder.unwrap();
                assert_eq!(holder.pid, std::process::id());
                assert_eq!(holder.command, "server");
                assert_eq!(holder.url.as_deref(), Some("http://127.0.0.1:9"));
            }
            other => panic!("{other:?}"),
        }
        let message = DataDirLock::acquire(&dir, "exec").unwrap_err().to_string();
        assert!(message.contains("codebuffd server"), "{message}");
        assert!(message.contains("http://127.0.0.1:9"), "{message}");
        drop(first);
        let again = DataDirLock::acquire(&dir, "exec").unwrap();
        assert_eq!(holder(&dir).unwrap().command, "exec");
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
