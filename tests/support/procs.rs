//! Which processes belong to a process session: how the tests and the load benchmark check
//! that nothing the daemon started outlives it. The daemon runs as the leader of a session of its
//! own, so everything it spawns shares that session id (std only: the bench includes this file).

/// Live (non-zombie) processes whose session id is `sid`.
pub fn session_members(sid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state ppid pgrp session …
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 3 && fields[0] != "Z" && fields[3].parse::<i32>() == Ok(sid) {
            out.push(pid);
        }
    }
    out
}

/// The process group of `pid`, if it is alive.
#[allow(dead_code)] // the load benchmark includes this file and does not use it
pub fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: impl std::fmt::Display) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim().to_owned()))
        .is_some_and(|rest| !rest.starts_with(['Z', 'X']))
}
