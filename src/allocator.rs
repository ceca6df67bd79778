//! The daemon's malloc settings, set once at start before any thread exists (`main.rs`, for
//! the long-lived commands: `server`, `acp`).
//!
//! glibc's defaults suit short programs, not a daemon that idles for hours between floods:
//!
//! * **Arenas.** Every thread that allocates may get an arena of its own, up to 8 per core;
//!   each keeps the pages it touched. The daemon's threads (runtime workers, blocking threads,
//!   the store's writer, the ACP transports) need no more than two: at most two run at once
//!   on the machines it targets, and two keep contention low where there are more cores.
//! * **Trimming.** glibc raises its mmap threshold (up to 32 MiB) each time a large block is
//!   freed, after which large blocks come from the heap and the heap's top is returned to the
//!   system only beyond twice that threshold: after one flood the daemon keeps its peak for
//!   good. Fixed thresholds (blocks from 128 KiB on are mapped and unmapped; a free top over
//!   512 KiB is returned) keep idle memory near what is in use.
//!
//! `MALLOC_ARENA_MAX`, `MALLOC_TRIM_THRESHOLD_` and `MALLOC_MMAP_THRESHOLD_` in the
//! environment still win (to compare, or to tune a deployment).

/// Applies the settings (glibc on Linux; a no-op elsewhere).
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const ARENAS: i32 = 2;
        const TRIM_THRESHOLD: i32 = 512 * 1024;
        const MMAP_THRESHOLD: i32 = 128 * 1024;
        let unset = |name: &str| std::env::var_os(name).is_none();
        // SAFETY: mallopt only changes malloc's parameters; called before other threads run.
        unsafe {
            if unset("MALLOC_ARENA_MAX") {
                libc::mallopt(libc::M_ARENA_MAX, ARENAS);
            }
            if unset("MALLOC_TRIM_THRESHOLD_") {
                libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            }
            if unset("MALLOC_MMAP_THRESHOLD_") {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            }
        }
    }
}
