//! No descendant of a turn outlives it, not even one that left the turn's process group.
//!
//! Killing a turn's process group kills what stayed in it; a grandchild that called `setsid()`
//! (a daemonizing dev server, `setsid sleep`, …) is in a group of its own. Two subreapers keep
//! such escapees within reach:
//!
//! * every agent leader is made a *child subreaper* before it runs (the attribute survives
//!   `exec`): while the turn runs, its orphaned descendants are re-parented to the leader, so
//!   they stay in the turn's tree;
//! * the engine's process itself is a child subreaper ([`become_subreaper`]): once a leader
//!   has exited, what was left of its tree is re-parented to the daemon.
//!
//! So every child of the daemon that the daemon did not spawn itself is an orphan of a turn
//! that is over; [`reap_orphans`] kills each with its whole subtree and reaps them. The daemon's
//! own children are registered here while they live ([`OwnedChildren`]), under a lock held
//! across their spawn, so a child just spawned is never taken for an orphan.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::procfs;
use crate::sync::LockExt;

/// Whether this process became a child subreaper (only then are orphans ours to reap).
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// The children this process spawned itself and has not reaped yet.
static OWNED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// How long [`reap_orphans`] waits for killed orphans to die before giving up on them.
pub const REAP_LIMIT: Duration = Duration::from_secs(2);

/// Makes this process a child subreaper (Linux); returns whether it is one now. Called once
/// by the engine at start; a process that is not one never reaps orphans.
pub fn become_subreaper() -> bool {
    let ok = nix::sys::prctl::set_child_subreaper(true).is_ok();
    if ok {
        SUBREAPER.store(true, Ordering::Release);
    } else {
        tracing::warn!("cannot become a child subreaper: processes that leave their turn's group may outlive it");
    }
    ok
}

/// The registry of this process's own children, locked: hold it across a spawn and
/// [`OwnedChildren::insert`] the new child before letting go.
pub(crate) struct OwnedChildren(MutexGuard<'static, Vec<u32>>);

impl OwnedChildren {
    pub(crate) fn lock() -> OwnedChildren {
        OwnedChildren(OWNED.lock_unpoisoned())
    }

    pub(crate) fn insert(&mut self, pid: u32) {
        self.0.push(pid);
    }

    fn contains(&self, pid: u32) -> bool {
        self.0.contains(&pid)
    }
}

/// Forgets a child once it has been reaped (its pid may be reused from then on).
pub(crate) fn disown(pid: u32) {
    let mut owned = OwnedChildren::lock();
    owned.0.retain(|p| *p != pid);
}

/// The reaps of this process: one at a time, shared by the calls that wait for one.
static REAPS: Coalesced = Coalesced::new();

/// Kills every orphan re-parented to this process, with its whole subtree, and reaps them;
/// waits at most `limit` for them to die. A no-op unless this process is a subreaper.
///
/// Called at the end of every turn, after its leader was reaped (so what it orphaned is this
/// process's already). A reap covers every orphan of the process, so calls that arrive while
/// one runs share the next: when twenty turns end together, the process tree is read a few
/// times, not twenty (each read opens every process's `stat`).
pub async fn reap_orphans(limit: Duration) {
    if !SUBREAPER.load(Ordering::Acquire) {
        return;
    }
    REAPS.run(|| reap(limit)).await;
}

/// Runs a job that covers everything that happened before it began, one at a time: a caller
/// that finds a whole run began (and ended) after it called has what it needs, and returns.
struct Coalesced {
    begun: AtomicU64,
    running: tokio::sync::Mutex<()>,
}

impl Coalesced {
    const fn new() -> Coalesced {
        Coalesced {
            begun: AtomicU64::new(0),
            running: tokio::sync::Mutex::const_new(()),
        }
    }

    /// Runs `job`, unless a run that began after this call ends meanwhile; returns whether
    /// this call ran it.
    async fn run<F: std::future::Future<Output = ()>>(&self, job: impl FnOnce() -> F) -> bool {
        let seen = self.begun.load(Ordering::Acquire);
        let _running = self.running.lock().await;
        if self.begun.load(Ordering::Acquire) != seen {
            return false;
        }
        self.begun.fetch_add(1, Ordering::AcqRel);
        job().await;
        true
    }
}

async fn reap(limit: Duration) {
    let me = std::process::id();
    let deadline = Instant::now() + limit;
    let mut killed: HashSet<u32> = HashSet::new();
    loop {
        let orphans: Vec<u32> = {
            let owned = OwnedChildren::lock();
            let tree = ProcessTree::scan();
            let orphans: Vec<u32> = tree
                .children(me)
                .into_iter()
                .filter(|pid| !owned.contains(*pid))
                .collect();
            for &orphan in &orphans {
                for pid in std::iter::once(orphan).chain(tree.descendants(orphan)) {
                    if killed.insert(pid) || pid == orphan {
                        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                    }
                }
            }
            orphans
        };
        if orphans.is_empty() {
            return;
        }
        for &pid in &orphans {
            match waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {}
                Ok(_) => tracing::warn!(pid, "killed a process that had left its turn"),
                Err(_) => {}
            }
        }
        if Instant::now() >= deadline {
            tracing::warn!(?orphans, "orphans still alive after being killed");
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Parent links of every process, read from `/proc` in one pass.
#[derive(Debug, Default)]
pub(crate) struct ProcessTree {
    children: HashMap<u32, Vec<u32>>,
}

impl ProcessTree {
    /// Reads `/proc/*/stat` (processes that vanish meanwhile are skipped).
    pub(crate) fn scan() -> ProcessTree {
        let mut tree = ProcessTree::default();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return tree;
        };
        let mut stat = [0u8; procfs::STAT_BYTES];
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = procfs::read_stat(pid, &mut stat).and_then(procfs::parent_pid) {
                tree.children.entry(ppid).or_default().push(pid);
            }
        }
        tree
    }

    /// A tree from (pid, parent) pairs (tests).
    #[cfg(test)]
    fn from_pairs(pairs: &[(u32, u32)]) -> ProcessTree {
        let mut tree = ProcessTree::default();
        for &(pid, ppid) in pairs {
            tree.children.entry(ppid).or_default().push(pid);
        }
        tree
    }

    /// The direct children of `pid`.
    pub(crate) fn children(&self, pid: u32) -> Vec<u32> {
        self.children.get(&pid).cloned().unwrap_or_default()
    }

    /// Every descendant of `pid` (not `pid` itself).
    pub(crate) fn descendants(&self, pid: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut todo = self.children(pid);
        while let Some(p) = todo.pop() {
            if out.contains(&p) {
                continue;
            }
            out.push(p);
            todo.extend(self.children(p));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_the_whole_subtree() {
        let tree = ProcessTree::from_pairs(&[(2, 1), (3, 2), (4, 3), (5, 2), (6, 1)]);
        let mut d = tree.descendants(2);
        d.sort_unstable();
        assert_eq!(d, vec![3, 4, 5]);
        assert_eq!(tree.children(1).len(), 2);
        assert!(tree.descendants(6).is_empty());
    }

    #[tokio::test]
    async fn calls_that_wait_for_a_run_share_the_next() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;

        let coalesced = Arc::new(Coalesced::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = tokio::spawn({
            let (coalesced, runs) = (coalesced.clone(), runs.clone());
            async move {
                coalesced
                    .run(|| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let _ = released.await;
                    })
                    .await
            }
        });
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Three calls while the first run is under way: it began before they called, so one
        // more run is due, and one is enough for all three.
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let (coalesced, runs) = (coalesced.clone(), runs.clone());
                tokio::spawn(async move {
                    coalesced
                        .run(|| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                        })
                        .await
                })
            })
            .collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        assert!(first.await.unwrap());
        let mut ran = 0;
        for call in waiting {
            ran += usize::from(call.await.unwrap());
        }
        assert_eq!(ran, 1);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        // A call after all that runs again.
        assert!(coalesced.run(|| async {}).await);
    }

    #[test]
    fn this_process_appears_in_the_scanned_tree() {
        let tree = ProcessTree::scan();
        let me = std::process::id();
        let parent = nix::unistd::getppid().as_raw() as u32;
        assert!(tree.children(parent).contains(&me));
    }
}
