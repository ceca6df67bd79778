//! The supervisor and reaping: one task per agent waits for the group leader (SIGKILLing the
//! group when [`AgentProcess::stop`](super::AgentProcess::stop)'s grace ends or the handle is
//! dropped), then kills and reaps what is left of the group, lets the readers drain, and sends
//! `Exited` last.

use std::io;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use super::output::Message;
use super::{ExitInfo, PIPE_EOF_GRACE};
use crate::agent::reaper;

/// The agent's process group and whether it is finished (leader reaped, leftovers killed), after
/// which its id may be reused and must not be signalled any more.
#[derive(Clone)]
pub(super) struct Group {
    pub(super) pgid: Pid,
    pub(super) finished: Arc<AtomicBool>,
}

impl Group {
    pub(super) fn signal(&self, sig: Signal) -> io::Result<()> {
        if self.finished.load(Ordering::Acquire) {
            return Ok(());
        }
        match killpg(self.pgid, sig) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(errno) => Err(io::Error::from(errno)),
        }
    }
}

/// Kills the group if the supervisor task is dropped before it finished (runtime shutdown).
pub(super) struct GroupGuard(pub(super) Group);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = self.0.signal(Signal::SIGKILL);
    }
}

/// The state the supervisor task owns.
pub(super) struct Supervisor {
    pub(super) child: Child,
    pub(super) guard: GroupGuard,
    pub(super) kill_at: watch::Receiver<Option<Instant>>,
    pub(super) eof_deadline: watch::Sender<Option<Instant>>,
    pub(super) readers: Vec<JoinHandle<()>>,
    pub(super) events: mpsc::Sender<Message>,
}

/// Waits for the leader, cleans up the group, waits for the readers, then sends `Exited`.
pub(super) async fn supervise(mut sup: Supervisor) {
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
