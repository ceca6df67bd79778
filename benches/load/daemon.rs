//! The daemon under test: starting `codebuffd server` in its own session, stopping it, and
//! making sure nothing it started outlives the benchmark; what `/proc` says about it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::Settings;

/// The daemons alive now (each leads its own session) and their data directories, for
/// emergency cleanup.
static DAEMONS: Mutex<Vec<(i32, PathBuf)>> = Mutex::new(Vec::new());

/// How many daemons are still running.
pub fn running() -> usize {
    DAEMONS.lock().map(|d| d.len()).unwrap_or(0)
}

/// Kills every daemon still running and everything it started, after `limit` (a hung run) or
/// on SIGINT/SIGTERM, then exits.
pub fn install_guards(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("load: still running after {limit:?} (LOAD_TIMEOUT): killing every daemon");
        kill_all();
        std::process::exit(2);
    });
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            eprintln!("load: interrupted: killing every daemon");
            kill_all();
            std::process::exit(130);
        });
    });
}

/// CPU of a process in clock ticks: (its own utime+stime, its reaped children's cutime+cstime).
pub fn cpu_ticks(pid: &str) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after "(comm)": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime(14) stime(15) cutime(16) cstime(17).
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(1)
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    if f.len() < 16 {
        return (0, 0);
    }
    (f[10] + f[11], f[12] + f[13])
}

/// A `Vm*` line of `/proc/<pid>/status`, in KiB.
pub fn status_kib(pid: i32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `session_members`: the daemon and everything it started (shared with the tests, whose other
/// helpers the bench does not use).
#[path = "../../tests/support/procs.rs"]
#[allow(dead_code)]
mod procs;
use procs::session_members;

/// SIGKILLs every live process of session `sid`.
fn kill_session(sid: i32) {
    for p in session_members(sid) {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
}

/// Kills every daemon still registered and everything it started (watchdog, Ctrl-C).
fn kill_all() {
    let daemons = DAEMONS.lock().map(|d| d.clone()).unwrap_or_default();
    for (pid, data_dir) in daemons {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        kill_session(pid);
        let _ = std::fs::remove_dir_all(data_dir);
    }
}

/// The first three fields of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A running `codebuffd server`; dropping it stops it.
pub struct Daemon {
    child: Option<Child>,
    pub pid: i32,
    pub addr: SocketAddr,
    data_dir: PathBuf,
}

/// `codebuffd server --no-token` on `port` (0: any), in a new session, quiet on stdout.
pub fn daemon_command(s: &Settings, port: u16, data_dir: &Path) -> Command {
    let mut cmd = Command::new(&s.bin);
    cmd.arg("server")
        .args(["--no-token", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .args(&s.daemon_args)
        // Sessions run in the daemon's working directory, which must be neither the checkout
        // nor the data directory (the daemon refuses both): a scratch place, as a user's.
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("LOAD_DAEMON_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::other)?;
            Ok(())
        });
    }
    cmd
}

/// A fresh path under the temporary directory.
pub fn scratch_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "codebuffd-load-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ))
}

impl Daemon {
    /// Starts a daemon on a port it picks and waits for the address it announces.
    pub fn start(s: &Settings) -> Daemon {
        let data_dir = scratch_dir("data");
        let mut cmd = daemon_command(s, 0, &data_dir);
        cmd.stdout(Stdio::piped());
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        Daemon::spawn(cmd, data_dir, true)
    }

    /// Spawns `cmd` (from [`daemon_command`]); with `announce`, waits for its ready signal
    /// (`{"event":"listening","address":…}` on stdout).
    pub fn spawn(mut cmd: Command, data_dir: PathBuf, announce: bool) -> Daemon {
        let mut child = cmd.spawn().expect("start codebuffd");
        let pid = child.id() as i32;
        DAEMONS
            .lock()
            .expect("registry")
            .push((pid, data_dir.clone()));
        let mut daemon = Daemon {
            child: None,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir,
        };
        if announce {
            let stdout = child.stdout.take().expect("stdout");
            daemon.child = Some(child);
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let ready: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                    if ready["event"] == "listening" {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(ready["address"].as_str().unwrap_or("").to_owned());
                        }
                    }
                }
            });
            let addr = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the daemon announces its address");
            daemon.addr = addr.parse().expect("a socket address");
        } else {
            daemon.child = Some(child);
        }
        daemon
    }

    /// SIGTERM, wait (SIGKILL after 20 s), kill anything left of its session; returns how long
    /// the daemon took to exit.
    pub fn stop(mut self) -> Duration {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Duration {
        let Some(mut child) = self.child.take() else {
            return Duration::ZERO;
        };
        let t = Instant::now();
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        let deadline = t + Duration::from_secs(20);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                eprintln!("daemon {} ignored SIGTERM for 20 s: killing it", self.pid);
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let took = t.elapsed();
        kill_session(self.pid);
        if let Ok(mut d) = DAEMONS.lock() {
            d.retain(|(p, _)| *p != self.pid);
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
        took
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
