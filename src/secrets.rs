//! Keeps the daemon's credentials out of `/proc/<pid>/environ` and `/proc/<pid>/cmdline`, where
//! the commands its agents run could read them (`grep -la <key> /proc/*/environ`).
//!
//! Called first thing in `main`, before any thread exists:
//!
//! * `PR_SET_DUMPABLE` 0: processes of the same user (the agents' commands, when the daemon is
//!   not root) can no longer open the daemon's `environ`, `mem`, `maps` … nor ptrace it. Root's
//!   processes still can (they have `CAP_SYS_PTRACE`), and `cmdline` stays readable by anyone.
//!   Agents are not affected: `execve` makes a process dumpable again.
//! * The secrets' bytes in the block the kernel shows as `environ` and `cmdline` (the initial
//!   stack, `env_start..env_end` and `arg_start..arg_end` of `/proc/self/stat`) are overwritten
//!   with NULs: `CODEBUFF_API_KEY`, `CODEBUFFD_TOKEN` and `CODEBUFFD_WEBHOOK_SECRET` (whose
//!   values are first moved into the process's own environment, so the daemon still reads
//!   them), and the values of `--token` and `--webhook-secret`.
//!   `std::env::remove_var` alone would not do: it leaves that block as it was. This works
//!   whoever the readers are, root included.
//!
//! What remains readable is the daemon's memory through `/proc/<pid>/mem` by root. Agents that
//! must not see the key at all run as another user (`docs/security.md`).

use std::path::Path;

/// The environment variables whose values never stay in the readable block.
pub const SECRET_VARS: [&str; 3] = [
    "CODEBUFF_API_KEY",
    "CODEBUFFD_TOKEN",
    "CODEBUFFD_WEBHOOK_SECRET",
];
/// The flags whose values never stay in the readable command line.
pub const SECRET_FLAGS: [&str; 2] = ["--token", "--webhook-secret"];

/// What [`hide_from_proc`] did, for the log (which is not set up yet when it runs).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hidden {
    /// `PR_SET_DUMPABLE` 0 took.
    pub undumpable: bool,
    /// Environment variables blanked in the readable block.
    pub env: Vec<String>,
    /// Command-line values blanked (by flag).
    pub args: Vec<String>,
    /// What could not be done, and why.
    pub problems: Vec<String>,
}

impl Hidden {
    /// Logs what was done (names only, never a value) and what could not be.
    pub fn log(&self) {
        tracing::debug!(
            undumpable = self.undumpable,
            env = ?self.env,
            args = ?self.args,
            "credentials hidden from /proc"
        );
        for problem in &self.problems {
            tracing::warn!(%problem, "cannot hide the credentials from /proc entirely");
        }
    }
}

/// Makes the process undumpable and blanks its secrets in `/proc/self/{environ,cmdline}`.
/// Must run before any other thread starts (it sets environment variables).
pub fn hide_from_proc() -> Hidden {
    let mut hidden = Hidden::default();
    blank_secrets(&mut hidden);
    // Last: once undumpable, a process that is not root cannot open its own `environ`.
    match nix::sys::prctl::set_dumpable(false) {
        Ok(()) => hidden.undumpable = true,
        Err(e) => hidden.problems.push(format!("PR_SET_DUMPABLE: {e}")),
    }
    hidden
}

/// Blanks the secret variables' values and the secret flags' values in the readable blocks.
fn blank_secrets(hidden: &mut Hidden) {
    let regions = match Regions::of_self() {
        Ok(r) => r,
        Err(e) => {
            hidden.problems.push(format!("/proc/self/stat: {e}"));
            return;
        }
    };
    for name in SECRET_VARS {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        // A copy the process keeps (glibc's setenv allocates it), before the original goes.
        std::env::set_var(name, &value);
        let prefix = format!("{name}=");
        match blank_values(
            regions.env,
            Path::new("/proc/self/environ"),
            |entries, i| {
                entries[i]
                    .strip_prefix(prefix.as_bytes())
                    .map(|v| (entries[i].len() - v.len(), v.len()))
            },
        ) {
            Ok(0) => {}
            Ok(_) => hidden.env.push(name.to_owned()),
            Err(e) => hidden.problems.push(format!("{name}: {e}")),
        }
    }
    for flag in SECRET_FLAGS {
        let with_eq = format!("{flag}=");
        match blank_values(
            regions.args,
            Path::new("/proc/self/cmdline"),
            |entries, i| {
                if let Some(v) = entries[i].strip_prefix(with_eq.as_bytes()) {
                    return Some((entries[i].len() - v.len(), v.len()));
                }
                (i > 0 && entries[i - 1] == flag.as_bytes()).then_some((0, entries[i].len()))
            },
        ) {
            Ok(0) => {}
            Ok(_) => hidden.args.push(flag.to_owned()),
            Err(e) => hidden.problems.push(format!("{flag}: {e}")),
        }
    }
}

/// The `[start, end)` addresses of the initial argument and environment blocks.
#[derive(Debug, Clone, Copy)]
struct Regions {
    args: (usize, usize),
    env: (usize, usize),
}

impl Regions {
    /// Fields 48–51 of `/proc/self/stat` (`proc(5)`).
    fn of_self() -> std::io::Result<Regions> {
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let bad = || std::io::Error::other("unexpected format");
        // Fields after the command name, which is in parentheses and may hold anything.
        let rest = &stat[stat.rfind(')').ok_or_else(bad)? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3.
        let field = |n: usize| -> std::io::Result<usize> {
            fields
                .get(n - 3)
                .and_then(|f| f.parse().ok())
                .ok_or_else(bad)
        };
        Ok(Regions {
            args: (field(48)?, field(49)?),
            env: (field(50)?, field(51)?),
        })
    }
}

/// Overwrites with NULs, in the memory block `region` whose contents `file` shows, the part
/// `pick(entries, i)` returns (offset, length within entry `i`) of each NUL-separated entry.
/// Checks that the memory holds what the file shows before writing. Returns how many entries
/// were blanked.
fn blank_values(
    region: (usize, usize),
    file: &Path,
    pick: impl Fn(&[&[u8]], usize) -> Option<(usize, usize)>,
) -> std::io::Result<usize> {
    let shown = std::fs::read(file)?;
    let (start, end) = region;
    if start == 0 || end < start || end - start < shown.len() {
        return Err(std::io::Error::other("the block's bounds do not match"));
    }
    // SAFETY: `start..start + shown.len()` is the initial block of the main thread's stack,
    // mapped for the whole life of the process, read and written by nothing else at this point
    // (no other thread exists; std keeps pointers into it but reads them only on demand).
    let memory = unsafe { std::slice::from_raw_parts(start as *const u8, shown.len()) };
    if memory != shown.as_slice() {
        return Err(std::io::Error::other(
            "the block in memory is not what /proc shows",
        ));
    }
    let entries: Vec<&[u8]> = shown.split(|b| *b == 0).collect();
    let mut blanked = 0;
    let mut offset = 0;
    for i in 0..entries.len() {
        if let Some((at, len)) = pick(&entries, i).filter(|(_, len)| *len > 0) {
            for k in 0..len {
                // SAFETY: within the block checked above.
                unsafe { std::ptr::write_volatile((start + offset + at + k) as *mut u8, 0) };
            }
            blanked += 1;
        }
        offset += entries[i].len() + 1;
    }
    Ok(blanked)
}
