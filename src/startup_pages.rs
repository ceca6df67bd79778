//! The executable's code pages that only starting needed, released once the daemon is up
//! (`commands::server`, right before it says it is ready).
//!
//! **Why.** A file page of the binary counts in the daemon's resident set once it is mapped,
//! and the kernel maps 64 KiB around every page fault in code (`fault_around_bytes`): starting
//! (argument parsing, configuration, opening the store, building the router) touches about a
//! hundred places and leaves ~8 MiB of the binary mapped, against ~1.5 MiB of heap. An idle
//! daemon needs little of it. Unmapping the binary's read-only, never-written mappings
//! (`MADV_DONTNEED`) leaves the pages in the page cache, clean and shared; the code the
//! daemon runs afterwards is mapped again at its first use (minor faults, microseconds in all).
//!
//! **Safety.** Only mappings of the executable itself that are not writable and hold no
//! private copy of a page (`Anonymous: 0 kB` in `/proc/self/smaps`: nothing in them was ever
//! written, e.g. by relocation) are released: for those, dropping the mapping loses nothing.
//! Writable mappings, the RELRO segment (written by the loader, then made read-only) and
//! every library are left alone.

/// Releases the executable's clean read-only mappings; returns the bytes that were resident
/// in them. A no-op (0) off Linux or when `/proc` cannot be read.
pub fn release() -> usize {
    #[cfg(target_os = "linux")]
    {
        let (Ok(exe), Ok(smaps)) = (
            std::fs::read_link("/proc/self/exe"),
            std::fs::read_to_string("/proc/self/smaps"),
        ) else {
            return 0;
        };
        let Some(exe) = exe.to_str() else {
            return 0;
        };
        let mut released = 0;
        for mapping in clean_mappings(&smaps, exe) {
            // SAFETY: the range is a whole mapping of the executable that is not writable and
            // holds no private (written) page: MADV_DONTNEED only unmaps clean file pages,
            // which the next access maps again from the file with the same contents.
            let done =
                unsafe { libc::madvise(mapping.start as *mut _, mapping.len, libc::MADV_DONTNEED) };
            if done == 0 {
                released += mapping.rss;
            }
        }
        released
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// A mapping that may be released.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    len: usize,
    /// Its resident bytes.
    rss: usize,
}

/// The mappings of `/proc/self/smaps` (text in `smaps`) of the file `exe` that are neither
/// writable nor hold an anonymous (written) page.
fn clean_mappings(smaps: &str, exe: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    // The mapping being read: (start, end, eligible so far, rss).
    let mut current: Option<(usize, usize, bool, usize)> = None;
    let finish = |current: Option<(usize, usize, bool, usize)>, out: &mut Vec<Mapping>| {
        if let Some((start, end, true, rss)) = current {
            out.push(Mapping {
                start,
                len: end - start,
                rss,
            });
        }
    };
    for line in smaps.lines() {
        if let Some(header) = mapping_header(line) {
            finish(current.take(), &mut out);
            let (range, perms, path) = header;
            let eligible =
                path == exe && perms.starts_with('r') && perms.as_bytes().get(1) == Some(&b'-');
            current = range.map(|(start, end)| (start, end, eligible, 0));
            continue;
        }
        let Some((_, _, eligible, rss)) = current.as_mut() else {
            continue;
        };
        if let Some(kb) = field_kb(line, "Rss:") {
            *rss = kb * 1024;
        } else if let Some(kb) = field_kb(line, "Anonymous:") {
            if kb != 0 {
                *eligible = false;
            }
        }
    }
    finish(current, &mut out);
    out
}

/// A header line of smaps (`start-end perms offset dev inode [path]`): its range (when it
/// parses), its permissions and its path ("" for none).
#[allow(clippy::type_complexity)]
fn mapping_header(line: &str) -> Option<(Option<(usize, usize)>, &str, &str)> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    // Field lines ("Rss:   12 kB") have no '-' in their first word, except names like
    // "VmFlags:"; a header's first word is two hex numbers.
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let path = fields.nth(3).unwrap_or("").trim();
    Some((Some((start, end)).filter(|(s, e)| e > s), perms, path))
}

/// The number of kB of a `Name:   N kB` line, if it is that field.
fn field_kb(line: &str, name: &str) -> Option<usize> {
    line.strip_prefix(name)?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0326000 r--p 00000000 fe:00 42                         /opt/codebuffd
Size:               3224 kB
Rss:                1512 kB
Anonymous:             0 kB
VmFlags: rd mr mw me dw sd
55d0a0326000-55d0a0e8c000 r-xp 00325000 fe:00 42                         /opt/codebuffd
Size:              11672 kB
Rss:                6496 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
55d0a0e8c000-55d0a0ee8000 r--p 00e8a000 fe:00 42                         /opt/codebuffd
Size:                368 kB
Rss:                 368 kB
Anonymous:           368 kB
VmFlags: rd mr mw me dw ac sd
55d0a0ee8000-55d0a0ef0000 rw-p 00ee6000 fe:00 42                         /opt/codebuffd
Size:                 32 kB
Rss:                  32 kB
Anonymous:            12 kB
VmFlags: rd wr mr mw me dw ac sd
7f00a0000000-7f00a0026000 r--p 00000000 fe:00 7                          /usr/lib/x86_64-linux-gnu/libc.so.6
Size:                152 kB
Rss:                 152 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
7f00a1000000-7f00a1021000 rw-p 00000000 00:00 0 
Size:                132 kB
Rss:                  12 kB
Anonymous:            12 kB
VmFlags: rd wr mr mw me ac sd
";

    #[test]
    fn only_the_executables_unwritten_read_only_mappings_are_released() {
        let got = clean_mappings(SMAPS, "/opt/codebuffd");
        assert_eq!(
            got,
            [
                Mapping {
                    start: 0x55d0a0000000,
                    len: 0x326000,
                    rss: 1512 * 1024
                },
                Mapping {
                    start: 0x55d0a0326000,
                    len: 0xb66000,
                    rss: 6496 * 1024
                },
            ]
        );
        // Another executable's name matches nothing.
        assert!(clean_mappings(SMAPS, "/opt/other").is_empty());
    }

    #[test]
    fn releasing_keeps_the_process_working_and_its_data_intact() {
        // A test binary is an executable like the daemon: release its pages, then run code
        // and read constants from them again.
        let before: Vec<u64> = (0..1000u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        let text = format!("{before:?}");
        let released = release();
        let after: Vec<u64> = (0..1000u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        assert_eq!(before, after);
        assert_eq!(text, format!("{after:?}"));
        #[cfg(target_os = "linux")]
        assert!(released > 0, "a running executable has resident code");
    }
}
