//! Identifying processes across daemon restarts: a pid plus its start time names one process,
//! so a restarted daemon never kills an unrelated process that reused a recorded pid.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Bytes of `/proc/<pid>/stat` read: the fields up to the start time (22) come within the
/// first ~200 (after a command of at most 64 bytes), so a longer line cut short still has them.
pub(crate) const STAT_BYTES: usize = 512;

/// `/proc/<pid>/stat` (its first [`STAT_BYTES`]) in one open and one read into `buf`, if the
/// process exists: the reaper reads it for every process at each turn's end, where
/// `read_to_string` (a `statx`, two reads, a `String`) cost 4 % of a flood's CPU.
pub(crate) fn read_stat(pid: u32, buf: &mut [u8; STAT_BYTES]) -> Option<&[u8]> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let n = file.read(buf).ok()?;
    Some(&buf[..n])
}

/// The fields of a stat line from field 3 (the state) on. They follow the command in
/// parentheses, which is whatever bytes the process named itself (spaces and parentheses
/// included): fields resume after the last `)`, and are ASCII.
pub(crate) fn stat_fields(stat: &[u8]) -> Option<std::str::SplitAsciiWhitespace<'_>> {
    let rest = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    Some(std::str::from_utf8(rest).ok()?.split_ascii_whitespace())
}

/// The parent pid in a stat line (field 4).
pub(crate) fn parent_pid(stat: &[u8]) -> Option<u32> {
    stat_fields(stat)?.nth(1)?.parse().ok()
}

/// The start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22), if it is
/// alive (and not a zombie).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let mut buf = [0u8; STAT_BYTES];
    let mut fields = stat_fields(read_stat(pid, &mut buf)?)?;
    if fields.next()? == "Z" {
        return None;
    }
    // Field 3 is taken; field 22 is the 19th after it.
    fields.nth(18)?.parse().ok()
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
        // Field 22 of the whole line, counted the long way.
        let line = std::fs::read_to_string("/proc/self/stat").unwrap();
        let after = line.rsplit_once(')').unwrap().1;
        let field_22: u64 = after.split_whitespace().nth(19).unwrap().parse().unwrap();
        assert_eq!(t, field_22);
        assert_eq!(start_ticks(me), Some(t));
        assert_eq!(start_ticks(u32::MAX - 1), None);
        // A wrong start time never kills anything.
        assert!(!kill_group_if_same(me, me, t + 1));
    }

    #[test]
    fn the_parent_is_read_past_odd_command_names() {
        assert_eq!(parent_pid(b"12 (sh) S 7 12 12 0"), Some(7));
        assert_eq!(parent_pid(b"12 (a (b) c) R 99 12 12 0"), Some(99));
        assert_eq!(parent_pid(b"12 (\xff\xfe) S 8 12 12 0"), Some(8));
        assert_eq!(parent_pid(b"garbage"), None);
    }

    #[test]
    fn rss_is_read_for_a_live_process_only() {
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
        assert_eq!(rss_bytes(u32::MAX - 1), None);
    }
}
