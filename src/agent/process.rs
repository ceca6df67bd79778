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

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at, Instant};

use super::framing::{Frame, LineFramer};
use super::reaper::{self, OwnedChildren};

/// Bytes asked for per read of an output pipe (a pipe holds 64 KiB by default).
const READ_CHUNK: usize = 32 * 1024;
/// Read chunks buffered between the readers and the consumer before the readers wait.
const CHANNEL_BATCHES: usize = 4;
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
    Line { stream: OutputStream, line: Vec<u8> },
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
        // Until the supervisor has reaped it (`supervise`).
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

/// The agent's process group and whether it is finished (leader reaped, leftovers killed), after
/// which its id may be reused and must not be signalled any more.
#[derive(Clone)]
struct Group {
    pgid: Pid,
    finished: Arc<AtomicBool>,
}

impl Group {
    fn signal(&self, sig: Signal) -> io::Result<()> {
        if self.finished.load(Ordering::Acquire) {
            return Ok(());
        }
        match killpg(self.pgid, sig) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(errno) => Err(io::Error::from(errno)),
        }
    }
}

/// A line for the agent's stdin, and who waits for it to be written.
struct StdinLine {
    bytes: Vec<u8>,
    done: Option<tokio::sync::oneshot::Sender<io::Result<()>>>,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the agent's stdin is closed")
}

/// Writes queued lines to the agent's stdin in order, until the queue is dropped (then stdin
/// closes) or a write fails (the agent closed its end: later lines fail too).
async fn write_stdin(mut pipe: ChildStdin, mut lines: mpsc::UnboundedReceiver<StdinLine>) {
    while let Some(line) = lines.recv().await {
        let written = match pipe.write_all(&line.bytes).await {
            Ok(()) => pipe.flush().await,
            Err(e) => Err(e),
        };
        let failed = written.is_err();
        if let Some(done) = line.done {
            let _ = done.send(written);
        }
        if failed {
            lines.close();
            while let Some(line) = lines.recv().await {
                if let Some(done) = line.done {
                    let _ = done.send(Err(closed()));
                }
            }
            return;
        }
    }
}

/// Kills the group if the supervisor task is dropped before it finished (runtime shutdown).
struct GroupGuard(Group);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = self.0.signal(Signal::SIGKILL);
    }
}

/// What travels from the background tasks to [`AgentProcess::next_event`].
enum Message {
    Output(Batch),
    Exited(ExitInfo),
}

/// The frames of one read chunk of one pipe, their bytes stored back to back.
struct Batch {
    stream: OutputStream,
    bytes: Vec<u8>,
    frames: Vec<BatchFrame>,
}

#[derive(Clone, Copy)]
enum BatchFrame {
    Line { len: usize },
    Oversized { length: usize, prefix_len: usize },
}

impl Batch {
    fn new(stream: OutputStream) -> Batch {
        Batch {
            stream,
            bytes: Vec::new(),
            frames: Vec::new(),
        }
    }

    fn push(&mut self, frame: Frame<'_>) {
        match frame {
            Frame::Line(line) => {
                self.bytes.extend_from_slice(line);
                self.frames.push(BatchFrame::Line { len: line.len() });
            }
            Frame::Oversized { length, prefix } => {
                self.bytes.extend_from_slice(prefix);
                self.frames.push(BatchFrame::Oversized {
                    length,
                    prefix_len: prefix.len(),
                });
            }
        }
    }
}

/// The consumer's position in the batch it is handing out.
struct Cursor {
    batch: Batch,
    frame: usize,
    offset: usize,
}

impl Cursor {
    fn new(batch: Batch) -> Cursor {
        Cursor {
            batch,
            frame: 0,
            offset: 0,
        }
    }

    fn next(&mut self) -> Option<ProcessEvent> {
        let frame = *self.batch.frames.get(self.frame)?;
        self.frame += 1;
        let stream = self.batch.stream;
        let start = self.offset;
        Some(match frame {
            BatchFrame::Line { len } => {
                self.offset += len;
                ProcessEvent::Line {
                    stream,
                    line: self.batch.bytes[start..self.offset].to_vec(),
                }
            }
            BatchFrame::Oversized { length, prefix_len } => {
                self.offset += prefix_len;
                ProcessEvent::Oversized {
                    stream,
                    length,
                    prefix: self.batch.bytes[start..self.offset].to_vec(),
                }
            }
        })
    }
}

/// Reads one pipe to EOF (or until it stays silent past the deadline set when the leader
/// exited), sending one batch per read chunk.
async fn read_output<R: AsyncRead + Unpin>(
    mut pipe: R,
    stream: OutputStream,
    max_line_bytes: usize,
    events: mpsc::Sender<Message>,
    mut eof_deadline: watch::Receiver<Option<Instant>>,
) {
    let mut framer = LineFramer::new(max_line_bytes);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let deadline = *eof_deadline.borrow_and_update();
        let result = match deadline {
            // The leader has exited: data still in the pipe is read at once, an empty pipe is
            // waited for only until the deadline.
            Some(at) => match timeout_at(at, pipe.read(&mut buf)).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::debug!(
                        ?stream,
                        "agent output pipe still open after its exit; giving up on it"
                    );
                    break;
                }
            },
            None => tokio::select! {
                result = pipe.read(&mut buf) => result,
                changed = eof_deadline.changed() => {
                    if changed.is_err() {
                        break; // the supervisor is gone
                    }
                    continue;
                }
            },
        };
        match result {
            Ok(0) => break,
            Ok(n) => {
                let mut batch = Batch::new(stream);
                framer.push(&buf[..n], &mut |frame| batch.push(frame));
                if !batch.frames.is_empty() && events.send(Message::Output(batch)).await.is_err() {
                    return; // nobody listens any more
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::debug!(?stream, %error, "reading agent output failed");
                break;
            }
        }
    }
    let mut batch = Batch::new(stream);
    framer.finish(&mut |frame| batch.push(frame));
    if !batch.frames.is_empty() {
        let _ = events.send(Message::Output(batch)).await;
    }
}

/// The state the supervisor task owns.
struct Supervisor {
    child: Child,
    guard: GroupGuard,
    kill_at: watch::Receiver<Option<Instant>>,
    eof_deadline: watch::Sender<Option<Instant>>,
    readers: Vec<JoinHandle<()>>,
    events: mpsc::Sender<Message>,
}

/// Waits for the leader, cleans up the group, waits for the readers, then sends `Exited`.
async fn supervise(mut sup: Supervisor) {
    let group = sup.guard.0.clone();
    let status = wait_for_leader(&mut sup.child, &group, &mut sup.kill_at).await;
    reaper::disown(group.pgid.as_raw().unsigned_abs());

    // The leader is reaped: kill what is left of its group, and what left the group (now
    // re-parented to the daemon), so the pipes reach EOF.
    if let Err(error) = group.signal(Signal::SIGKILL) {
        tracing::warn!(pgid = %group.pgid, %error, "killing the agent's leftover processes failed");
    }
    group.finished.store(true, Ordering::Release);
    crate::metrics::metrics().agent_processes.dec();
    reaper::reap_orphans(reaper::REAP_LIMIT).await;
    let grace_end = Instant::now() + PIPE_EOF_GRACE;
    let _ = sup.eof_deadline.send(Some(grace_end));
    reap_group_orphans(group.pgid, grace_end).await;
    for reader in sup.readers.drain(..) {
        let _ = reader.await;
    }

    let info = match status {
        Ok(status) => ExitInfo::from_status(status),
        Err(error) => {
            tracing::warn!(pgid = %group.pgid, %error, "waiting for the agent failed");
            ExitInfo::UNKNOWN
        }
    };
    tracing::debug!(pgid = %group.pgid, code = ?info.code, signal = ?info.signal, "agent process exited");
    let _ = sup.events.send(Message::Exited(info)).await;
}

/// Waits for the leader to exit, SIGKILLing the group when the deadline set by `stop` passes or
/// when the `AgentProcess` is dropped.
async fn wait_for_leader(
    child: &mut Child,
    group: &Group,
    kill_at: &mut watch::Receiver<Option<Instant>>,
) -> io::Result<ExitStatus> {
    let mut deadline = *kill_at.borrow_and_update();
    let mut handle_alive = true;
    loop {
        let sleep_target = deadline.unwrap_or_else(Instant::now);
        tokio::select! {
            status = child.wait() => return status,
            () = sleep_until(sleep_target), if deadline.is_some() => {
                tracing::debug!(pgid = %group.pgid, "agent still running after its grace; SIGKILL");
                if let Err(error) = group.signal(Signal::SIGKILL) {
                    tracing::warn!(pgid = %group.pgid, %error, "killing the agent failed");
                }
                deadline = None;
            }
            changed = kill_at.changed(), if handle_alive => match changed {
                Ok(()) => deadline = *kill_at.borrow_and_update(),
                Err(_) => {
                    // The AgentProcess was dropped (and killed the group); just reap.
                    handle_alive = false;
                    let _ = group.signal(Signal::SIGKILL);
                }
            },
        }
    }
}

/// Reaps members of the finished group that were re-parented to the daemon.
///
/// That happens only when the daemon is PID 1 or a child subreaper; otherwise the group's
/// orphans belong to init and `waitpid` reports `ECHILD` at once. Only the group's own pid range
/// is waited for, so children owned by tokio elsewhere are never stolen.
async fn reap_group_orphans(pgid: Pid, until: Instant) {
    let members = Pid::from_raw(-pgid.as_raw());
    loop {
        match waitpid(members, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                if Instant::now() >= until {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A generous bound for any single test's events.
    const TEST_TIMEOUT: Duration = Duration::from_secs(3);

    fn sh_spec(script: &str, max_line_bytes: usize) -> SpawnSpec {
        SpawnSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            max_line_bytes,
        }
    }

    fn spawn_sh(script: &str) -> AgentProcess {
        AgentProcess::spawn(sh_spec(script, 64 * 1024)).expect("spawn /bin/sh")
    }

    async fn next(p: &mut AgentProcess) -> ProcessEvent {
        tokio::time::timeout(TEST_TIMEOUT, p.next_event())
            .await
            .expect("event in time")
            .expect("an event before the end")
    }

    /// Reads every event up to and including `Exited`.
    async fn collect(p: &mut AgentProcess) -> (Vec<ProcessEvent>, ExitInfo) {
        let mut events = Vec::new();
        loop {
            match next(p).await {
                ProcessEvent::Exited(info) => {
                    assert_eq!(p.next_event().await, None, "nothing after Exited");
                    return (events, info);
                }
                other => events.push(other),
            }
        }
    }

    fn lines(events: &[ProcessEvent], want: OutputStream) -> Vec<Vec<u8>> {
        events
            .iter()
            .filter_map(|e| match e {
                ProcessEvent::Line { stream, line } if *stream == want => Some(line.clone()),
                _ => None,
            })
            .collect()
    }

    fn text_line(event: &ProcessEvent) -> String {
        match event {
            ProcessEvent::Line { line, .. } => String::from_utf8_lossy(line).into_owned(),
            other => panic!("expected a line, got {other:?}"),
        }
    }

    /// Members of process group `pgid` that are neither gone nor zombies.
    fn live_members(pgid: u32) -> Vec<u32> {
        let mut live = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return live;
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
            let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else {
                continue;
            };
            if pgrp.parse::<u32>() == Ok(pgid) && !matches!(*state, "Z" | "X") {
                live.push(pid);
            }
        }
        live
    }

    /// Waits until process group `pgid` is gone: `kill(-pgid, 0)` fails with ESRCH, or only
    /// zombies are left. Zombies are accepted because the orphaned members of a killed group
    /// belong to init, and init in this sandbox reaps only every ~2 s.
    async fn assert_group_gone(pgid: u32) {
        let deadline = Instant::now() + Duration::from_millis(1500);
        loop {
            let pg = Pid::from_raw(pgid as i32);
            if killpg(pg, None) == Err(Errno::ESRCH) || live_members(pgid).is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "process group {pgid} still has live members: {:?}",
                live_members(pgid)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `pid` is gone or a zombie. A SIGKILLed process closes its pipes (which can
    /// let `Exited` through) a moment before it becomes a zombie, hence the wait.
    async fn assert_pid_dead(pid: u32) {
        let deadline = Instant::now() + Duration::from_millis(1000);
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim().to_owned()));
            match state {
                Some(rest) if !rest.starts_with(['Z', 'X']) => {
                    assert!(
                        Instant::now() < deadline,
                        "process {pid} still alive: {rest}"
                    );
                }
                _ => return,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn stdout_and_stderr_lines_arrive_with_their_stream() {
        let mut p = spawn_sh("echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3");
        let pgid = p.pid();
        let (events, info) = collect(&mut p).await;
        assert_eq!(
            lines(&events, OutputStream::Stdout),
            vec![b"out1".to_vec(), b"out2".to_vec(), b"out3".to_vec()]
        );
        assert_eq!(
            lines(&events, OutputStream::Stderr),
            vec![b"err1".to_vec(), b"err2".to_vec()]
        );
        assert_eq!(
            info,
            ExitInfo {
                code: Some(0),
                signal: None
            }
        );
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn a_partial_last_line_is_delivered() {
        let mut p = spawn_sh("printf 'first\\nlast'");
        let (events, _) = collect(&mut p).await;
        assert_eq!(
            lines(&events, OutputStream::Stdout),
            vec![b"first".to_vec(), b"last".to_vec()]
        );
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn invalid_utf8_passes_through_untouched() {
        let mut p = spawn_sh("printf '\\377\\376ok\\300\\n'");
        let (events, _) = collect(&mut p).await;
        assert_eq!(
            lines(&events, OutputStream::Stdout),
            vec![vec![0xff, 0xfe, b'o', b'k', 0xc0]]
        );
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn an_oversized_line_is_reported_and_the_next_line_arrives() {
        let script = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo next";
        let mut p = AgentProcess::spawn(sh_spec(script, 1024 * 1024)).expect("spawn");
        let (events, info) = collect(&mut p).await;
        assert_eq!(events.len(), 2, "{:?}", events.first());
        match &events[0] {
            ProcessEvent::Oversized {
                stream,
                length,
                prefix,
            } => {
                assert_eq!(*stream, OutputStream::Stdout);
                assert_eq!(*length, 3_000_000);
                assert!(!prefix.is_empty() && prefix.iter().all(|&b| b == b'x'));
            }
            other => panic!("expected an oversized report, got {other:?}"),
        }
        assert_eq!(text_line(&events[1]), "next");
        assert_eq!(info.code, Some(0));
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn exit_code_and_terminating_signal_are_reported() {
        let mut p = spawn_sh("exit 3");
        let (_, info) = collect(&mut p).await;
        assert_eq!(
            info,
            ExitInfo {
                code: Some(3),
                signal: None
            }
        );

        let mut p = spawn_sh("kill -9 $$");
        let (_, info) = collect(&mut p).await;
        assert_eq!(
            info,
            ExitInfo {
                code: None,
                signal: Some(9)
            }
        );
        // Signalling a finished agent is harmless.
        p.signal(Signal::SIGTERM).expect("no error after the exit");
        p.stop(Signal::SIGTERM, Duration::ZERO);
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn the_environment_is_exactly_the_given_one() {
        let mut spec = sh_spec("echo \"[$HOME][$FOO]\"; pwd", 1024);
        spec.env.push(("FOO".into(), "bar".into()));
        let cwd = std::env::temp_dir().canonicalize().expect("temp dir");
        spec.cwd = cwd.clone();
        let mut p = AgentProcess::spawn(spec).expect("spawn");
        let (events, _) = collect(&mut p).await;
        assert_eq!(text_line(&events[0]), "[][bar]");
        assert_eq!(text_line(&events[1]), cwd.display().to_string());
    }

    #[tokio::test]
    async fn write_line_reaches_the_child() {
        let mut p = spawn_sh("read l; echo \"got $l\"; read m; echo \"then $m\"");
        p.write_line("hello world").await.expect("write");
        assert_eq!(text_line(&next(&mut p).await), "got hello world");
        assert!(p.write_line("two\nlines").await.is_err());
        p.write_line("bye").await.expect("write");
        assert_eq!(text_line(&next(&mut p).await), "then bye");
        let (_, info) = collect(&mut p).await;
        assert_eq!(info.code, Some(0));
        p.close_stdin();
        assert!(p.write_line("late").await.is_err());
    }

    #[tokio::test]
    async fn close_stdin_gives_the_child_eof() {
        let mut p = spawn_sh("cat; echo done");
        p.write_line("echoed").await.expect("write");
        p.close_stdin();
        let (events, info) = collect(&mut p).await;
        assert_eq!(
            lines(&events, OutputStream::Stdout),
            vec![b"echoed".to_vec(), b"done".to_vec()]
        );
        assert_eq!(info.code, Some(0));
    }

    #[tokio::test]
    async fn stop_escalates_to_sigkill_after_the_grace_and_kills_the_group() {
        let mut p = spawn_sh("trap '' TERM; sleep 1000 & echo $!; wait; echo survived");
        let grandchild: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
        let started = Instant::now();
        p.stop(Signal::SIGTERM, Duration::from_millis(200));
        let (events, info) = collect(&mut p).await;
        let elapsed = started.elapsed();
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(info.signal, Some(9), "{info:?}");
        assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
        assert_pid_dead(grandchild).await;
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn stop_again_with_sigkill_escalates_at_once() {
        let mut p = spawn_sh("trap '' TERM; echo ready; while :; do sleep 0.05; done");
        assert_eq!(text_line(&next(&mut p).await), "ready");
        let started = Instant::now();
        p.stop(Signal::SIGTERM, Duration::from_secs(30));
        p.stop(Signal::SIGKILL, Duration::ZERO);
        let (_, info) = collect(&mut p).await;
        assert_eq!(info.signal, Some(9));
        assert!(started.elapsed() < Duration::from_millis(1000));
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn leader_exit_kills_a_grandchild_holding_stdout() {
        let mut p = spawn_sh("sleep 1000 & echo $!; exit 4");
        let started = Instant::now();
        let grandchild: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
        let (events, info) = collect(&mut p).await;
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(info.code, Some(4));
        assert!(started.elapsed() < Duration::from_millis(1000));
        assert_pid_dead(grandchild).await;
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn a_pipe_held_open_outside_the_group_delays_exit_only_by_the_grace() {
        // setsid moves the sleep out of the group, beyond the reach of the group kill.
        let mut p = spawn_sh("setsid sleep 5 & echo $!; echo bye");
        let outsider: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
        let started = Instant::now();
        let (events, info) = collect(&mut p).await;
        let elapsed = started.elapsed();
        let _ = nix::sys::signal::kill(Pid::from_raw(outsider as i32), Signal::SIGKILL);
        assert_eq!(lines(&events, OutputStream::Stdout), vec![b"bye".to_vec()]);
        assert_eq!(info.code, Some(0));
        assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
        assert_group_gone(p.pid()).await;
    }

    #[tokio::test]
    async fn dropping_an_unreaped_agent_leaves_nothing_alive() {
        let mut p = spawn_sh("sleep 1000 & echo $!; sleep 1000");
        let grandchild: u32 = text_line(&next(&mut p).await).parse().expect("a pid");
        let pgid = p.pid();
        drop(p);
        assert_group_gone(pgid).await;
        assert_pid_dead(grandchild).await;
    }

    #[tokio::test]
    async fn a_slow_consumer_makes_the_agent_wait() {
        let marker = std::env::temp_dir().join(format!("codebuffd-bp-{}", uuid::Uuid::new_v4()));
        // ~4 MB of lines, far more than the channel and the pipe hold together.
        let script = format!(
            "yes 0123456789012345678 | head -n 200000; touch '{}'",
            marker.display()
        );
        let mut p = spawn_sh(&script);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !marker.exists(),
            "the agent wrote everything without being read"
        );
        let (events, info) = collect(&mut p).await;
        assert_eq!(events.len(), 200_000);
        assert_eq!(info.code, Some(0));
        assert!(marker.exists());
        let _ = std::fs::remove_file(&marker);
    }

    #[test]
    fn spawn_spec_debug_hides_environment_values() {
        let mut spec = sh_spec("true", 1024);
        spec.env
            .push(("CODEBUFF_API_KEY".into(), "sk-secret".into()));
        let shown = format!("{spec:?}");
        assert!(shown.contains("CODEBUFF_API_KEY"), "{shown}");
        assert!(!shown.contains("sk-secret"), "{shown}");
    }

    #[tokio::test]
    async fn spawn_failures_say_what_failed() {
        let mut spec = sh_spec("true", 1024);
        spec.program = "/nonexistent/codebuff-agent".into();
        let err = AgentProcess::spawn(spec).expect_err("an error");
        assert!(matches!(err, SpawnError::NotFound(_)), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/codebuff-agent"));

        let mut spec = sh_spec("true", 1024);
        spec.program = "/etc/passwd".into();
        let err = AgentProcess::spawn(spec).expect_err("an error");
        assert!(matches!(err, SpawnError::NotExecutable(_)), "{err:?}");

        let mut spec = sh_spec("true", 1024);
        spec.cwd = "/nonexistent/dir".into();
        let err = AgentProcess::spawn(spec).expect_err("an error");
        assert!(matches!(err, SpawnError::CwdMissing(_)), "{err:?}");
    }
}
