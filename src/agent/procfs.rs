//! Identifying processes across daemon restarts: a pid plus its start time names one process,
//! so a restarted daemon never kills an unrelated process that reused a recorded pid.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// The start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22), if it is
/// alive (and not a zombie).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); field 22 is rest[19].
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The resident memory of `pid` (`VmRSS` of `/proc/<pid>/status`), in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Kills the process group `pgid` if its leader `pid` is still the process that started at
/// `ticks`. Returns true when it sent the signal.
pub fn kill_group_if_same(pid: u32, pgid: u32, ticks: u64) -> bool {
    if start_ticks(pid) != Some(ticks) {
        return false;
    }
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    killpg(Pid::from_raw(pgid), Signal::SIGKILL).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_identify_a_live_process() {
        let me = std::process::id();
        let t = start_ticks(me).expect("own start time");
        assert_eq!(start_ticks(me), Some(t));
        assert_eq!(start_ticks(u32::MAX - 1), None);
        // A wrong start time never kills anything.
        assert!(!kill_group_if_same(me, me, t + 1));
    }

    #[test]
    fn rss_is_read_for_a_live_process_only() {
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
        assert_eq!(rss_bytes(u32::MAX - 1), None);
    }
}
