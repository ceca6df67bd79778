//! One supervised agent process: spawning it, reading its output, writing to its stdin, ending it.
//!
//! An [`AgentProcess`] owns one agent command from spawn until it has been reaped. The command runs
//! in its own process group, with a cleared environment, and every signal the daemon sends goes to
//! the whole group, so nothing the agent started can outlive it.
//!
//! Three background tasks do the work:
//!
//! * two readers, one per output pipe, frame bytes into lines with [`LineFramer`] and send them, a
//!   read chunk at a time, over one bounded channel. When the consumer falls behind the readers stop
//!   reading, the pipes fill up and the agent blocks on its writes: memory stays bounded.
//! * the supervisor waits for the group leader. It owns the kill timer armed by
//!   [`AgentProcess::stop`]. When the leader exits it SIGKILLs whatever is left of the group (a
//!   backgrounded grandchild holding the pipes open), lets the readers drain the pipes to EOF (at
//!   most [`PIPE_EOF_GRACE`] after the exit, for pipes held open by something outside the group),
//!   and sends [`ProcessEvent::Exited`] last, on the same channel, so it follows all output.
//!
//! Shutdown is explicit: [`AgentProcess::stop`] (a signal, a grace period, then SIGKILL) while the
//! caller keeps reading events until `Exited`. Dropping an `AgentProcess` that has not been reaped
//! SIGKILLs the group; the supervisor still reaps the leader in the background.

mod output;
mod stdin;
mod supervisor;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::reaper::OwnedChildren;
use output::{read_output, Cursor, Message};
use stdin::{closed, write_stdin, StdinLine};
use supervisor::{supervise, Group, GroupGuard, Supervisor};

/// Read chunks buffered between the readers and the consumer before the readers wait: the
/// pipe buffers more behind them. Each is a read (up to 8 KiB) its lines keep alive; four of
/// 32 KiB per agent held ~2.6 MB for twenty flooding agents, and two keep the consumer as busy.
const CHANNEL_BATCHES: usize = 2;
/// How long after the leader's exit the readers wait for their pipes to reach EOF.
pub const PIPE_EOF_GRACE: Duration = Duration::from_millis(500);

/// Everything needed to start one agent command.
///
/// Its `Debug` shows only the names of the environment variables, since one holds the API key.
#[derive(Clone)]
pub struct SpawnSpec {
    /// The executable; a bare name is looked up in the `PATH` of `env`.
    pub program: PathBuf,
    /// The arguments after the program, one element each; never a shell string.
    pub args: Vec<OsString>,
    /// The working directory; it must exist.
    pub cwd: PathBuf,
    /// The complete environment of the child: the daemon's own environment is not inherited.
    pub env: Vec<(OsString, OsString)>,
    /// The longest line accepted from stdout or stderr; longer ones become
    /// [`ProcessEvent::Oversized`].
    pub max_line_bytes: usize,
}

impl fmt::Debug for SpawnSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("SpawnSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env_names", &env_names)
            .field("max_line_bytes", &self.max_line_bytes)
            .finish()
    }
}

/// Which output pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// The agent's stdout: its JSON-lines events.
    Stdout,
    /// The agent's stderr: free-form logs, sometimes JSON error events.
    Stderr,
}

/// What the agent process produced, in the order [`AgentProcess::next_event`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// A line of output without its `\n` (the unterminated last line of a pipe is a line too);
    /// the bytes are untouched, valid UTF-8 or not.
    Line {
        stream: OutputStream,
        line: bytes::Bytes,
    },
    /// A line longer than `max_line_bytes`: `length` is its full size, `prefix` its first bytes;
    /// the rest was skipped and reading went on with the next line.
    Oversized {
        stream: OutputStream,
        length: usize,
        prefix: Vec<u8>,
    },
    /// The agent exited; sent exactly once, after all of its output.
    Exited(ExitInfo),
}

/// How the agent process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The number of the signal that terminated it, when one did.
    pub signal: Option<i32>,
}

impl ExitInfo {
    /// Neither code nor signal: the exit status could not be obtained.
    const UNKNOWN: ExitInfo = ExitInfo {
        code: None,
        signal: None,
    };

    fn from_status(status: ExitStatus) -> ExitInfo {
        ExitInfo {
            code: status.code(),
            signal: status.signal(),
        }
    }
}

/// Why an agent command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The program (or, for a script, its `#!` interpreter) does not exist.
    #[error("agent program {} not found (or its #! interpreter is missing)", .0.display())]
    NotFound(PathBuf),
    /// The program exists but may not be executed (no execute permission, a directory, not a
    /// recognised executable format).
    #[error("agent program {} is not executable", .0.display())]
    NotExecutable(PathBuf),
    /// The working directory does not exist or is not a directory.
    #[error("agent working directory {} does not exist or is not a directory", .0.display())]
    CwdMissing(PathBuf),
    /// Any other failure of the spawn itself.
    #[error("could not start agent program {}: {source}", program.display())]
    Io { program: PathBuf, source: io::Error },
}

/// A running (or finished but not yet fully read) agent command and the handle to end it.
///
/// Read it with [`next_event`](Self::next_event) until [`ProcessEvent::Exited`]; that is also
/// what keeps the agent from blocking on a full pipe.
pub struct AgentProcess {
    pid: u32,
    group: Group,
    /// Lines for the stdin writer task, in order; dropping it closes the agent's stdin.
    stdin: Option<mpsc::UnboundedSender<StdinLine>>,
    events: mpsc::Receiver<Message>,
    current: Option<Cursor>,
    exited: bool,
    /// When the supervisor must SIGKILL the group if the leader is still running.
    kill_at: watch::Sender<Option<Instant>>,
}

impl AgentProcess {
    /// Starts the command in its own process group with stdin, stdout and stderr piped.
    ///
    /// Must be called within a tokio runtime (it spawns the reader and supervisor tasks).
    pub fn spawn(spec: SpawnSpec) -> Result<AgentProcess, SpawnError> {
        if !spec.cwd.is_dir() {
            return Err(SpawnError::CwdMissing(spec.cwd));
        }
        let mut command = Command::new(&spec.program);
        command
            .args(&spec.args)
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // A backstop for the leader only; the group is killed by `GroupGuard`.
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent. The leader
        // becomes a child subreaper, so what its descendants orphan stays in its tree (see
        // `reaper`).
        unsafe {
            command.pre_exec(|| {
                let _ = nix::sys::prctl::set_child_subreaper(true);
                Ok(())
            });
        }
        // Registered before anyone can take it for an orphan.
        let mut owned = OwnedChildren::lock();
        let mut child = command
            .spawn()
            .map_err(|e| spawn_error(e, &spec.program, &spec.cwd))?;
        if let Some(pid) = child.id() {
            owned.insert(pid);
        }
        drop(owned);
        let raw_pid = child.id().and_then(|id| i32::try_from(id).ok());
        let Some(raw_pid) = raw_pid else {
            return Err(SpawnError::Io {
                program: spec.program,
                source: io::Error::other("spawned process has no pid"),
            });
        };
        let group = Group {
            pgid: Pid::from_raw(raw_pid),
            finished: Arc::new(AtomicBool::new(false)),
        };
        let guard = GroupGuard(group.clone());
        // Until the supervisor has reaped it (`supervisor.rs`).
        crate::metrics::metrics().agent_processes.inc();

        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        let (eof_tx, eof_rx) = watch::channel(None);
        let mut readers = Vec::with_capacity(2);
        if let Some(stdout) = child.stdout.take() {
            readers.push(tokio::spawn(read_output(
                stdout,
                OutputStream::Stdout,
                spec.max_line_bytes,
                tx.clone(),
                eof_rx.clone(),
            )));
        }
        if let Some(stderr) = child.stderr.take() {
            readers.push(tokio::spawn(read_output(
                stderr,
                OutputStream::Stderr,
                spec.max_line_bytes,
                tx.clone(),
                eof_rx,
            )));
        }
        let stdin = child.stdin.take().map(|pipe| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(write_stdin(pipe, rx));
            tx
        });
        let (kill_tx, kill_rx) = watch::channel(None);
        tokio::spawn(supervise(Supervisor {
            child,
            guard,
            kill_at: kill_rx,
            eof_deadline: eof_tx,
            readers,
            events: tx,
        }));
        tracing::debug!(pid = raw_pid, program = %spec.program.display(), "agent process started");

        Ok(AgentProcess {
            pid: raw_pid.unsigned_abs(),
            group,
            stdin,
            events: rx,
            current: None,
            exited: false,
            kill_at: kill_tx,
        })
    }

    /// The agent's pid, which is also its process-group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The next line, oversized-line report or exit of the agent.
    ///
    /// Returns `None` only after [`ProcessEvent::Exited`] has been returned. Cancel-safe: it can
    /// be used as a `tokio::select!` branch without losing events.
    pub async fn next_event(&mut self) -> Option<ProcessEvent> {
        loop {
            if let Some(event) = self.current.as_mut().and_then(Cursor::next) {
                return Some(event);
            }
            self.current = None;
            if self.exited {
                return None;
            }
            match self.events.recv().await {
                Some(Message::Output(batch)) => self.current = Some(Cursor::new(batch)),
                Some(Message::Exited(info)) => {
                    self.exited = true;
                    return Some(ProcessEvent::Exited(info));
                }
                // The supervisor is gone without a word (runtime shutdown): still end the stream.
                None => {
                    self.exited = true;
                    return Some(ProcessEvent::Exited(ExitInfo::UNKNOWN));
                }
            }
        }
    }

    /// Writes `line` and a `\n` to the agent's stdin (after the lines queued before it) and
    /// waits until it is written; stdin stays open.
    ///
    /// Used for answers. A line containing `\n` is refused (`InvalidInput`) since it would reach
    /// the agent as two lines; after [`close_stdin`](Self::close_stdin) or once the agent closed
    /// its end, the write fails (`BrokenPipe`).
    pub async fn write_line(&mut self, line: &str) -> io::Result<()> {
        let (done, written) = tokio::sync::oneshot::channel();
        self.send_line(line, Some(done))?;
        written.await.unwrap_or_else(|_| Err(closed()))
    }

    /// Queues `line` for the agent's stdin without waiting: the turn line, which the agent may
    /// read only once it is ready (a warm spare still loading), and which may be larger than the
    /// pipe holds. A write that fails shows as the agent's exit.
    pub fn queue_line(&mut self, line: &str) -> io::Result<()> {
        self.send_line(line, None)
    }

    fn send_line(
        &mut self,
        line: &str,
        done: Option<tokio::sync::oneshot::Sender<io::Result<()>>>,
    ) -> io::Result<()> {
        if line.contains('\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a line for the agent's stdin must not contain a newline",
            ));
        }
        let stdin = self.stdin.as_ref().ok_or_else(closed)?;
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        stdin.send(StdinLine { bytes, done }).map_err(|_| closed())
    }

    /// Closes the agent's stdin (once what is queued is written), so it reads EOF.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// True while the agent has printed no event and not exited: a warm spare still waiting
    /// for its turn, fit to be handed one. What it logged on stderr meanwhile is dropped.
    pub fn untouched(&mut self) -> bool {
        if self.exited || self.current.is_some() {
            return false;
        }
        loop {
            match self.events.try_recv() {
                Ok(Message::Output(batch)) if batch.stream == OutputStream::Stderr => continue,
                Ok(Message::Output(_)) => return false,
                Ok(Message::Exited(_)) => {
                    self.exited = true;
                    return false;
                }
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Sends `sig` to the agent's whole process group.
    ///
    /// Succeeds without doing anything when the group is already gone.
    pub fn signal(&self, sig: Signal) -> io::Result<()> {
        self.group.signal(sig)
    }

    /// Ends the agent: sends `first` to the group now and SIGKILLs the group if the leader has not
    /// exited within `grace`.
    ///
    /// Does not wait: keep reading [`next_event`](Self::next_event) for the remaining output and
    /// `Exited`. Calling it again with a shorter grace (or `SIGKILL`) escalates; a longer grace
    /// never postpones a kill already armed.
    pub fn stop(&mut self, first: Signal, grace: Duration) {
        if let Err(error) = self.signal(first) {
            tracing::warn!(pid = self.pid, signal = %first, %error, "signalling the agent failed");
        }
        let Some(at) = Instant::now().checked_add(grace) else {
            return; // a grace too long to represent: never escalate
        };
        self.kill_at.send_if_modified(|current| match current {
            Some(armed) if *armed <= at => false,
            _ => {
                *current = Some(at);
                true
            }
        });
    }
}

impl fmt::Debug for AgentProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentProcess")
            .field("pid", &self.pid)
            .field("exited", &self.exited)
            .finish_non_exhaustive()
    }
}

impl Drop for AgentProcess {
    /// SIGKILLs the group unless it was already reaped; the supervisor reaps it in the background.
    fn drop(&mut self) {
        if let Err(error) = self.group.signal(Signal::SIGKILL) {
            tracing::warn!(pid = self.pid, %error, "killing the dropped agent failed");
        }
    }
}

fn spawn_error(error: io::Error, program: &std::path::Path, cwd: &std::path::Path) -> SpawnError {
    match error.kind() {
        io::ErrorKind::NotFound if !cwd.is_dir() => SpawnError::CwdMissing(cwd.to_path_buf()),
        io::ErrorKind::NotFound => SpawnError::NotFound(program.to_path_buf()),
        io::ErrorKind::PermissionDenied => SpawnError::NotExecutable(program.to_path_buf()),
        _ if error.raw_os_error() == Some(Errno::ENOEXEC as i32) => {
            SpawnError::NotExecutable(program.to_path_buf())
        }
        _ => SpawnError::Io {
            program: program.to_path_buf(),
            source: error,
        },
    }
}
