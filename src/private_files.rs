//! The data directory is private to the daemon's user, whatever the umask: transcripts
//! (the SQLite log, `acp-http/*/envelopes.jsonl`), images sent with prompts, the lock file with
//! the server's URL and the instance id are nobody else's business. Directories the daemon
//! creates there are 0700 and files 0600 (`create_dir_all`, `options`, `write`), and
//! [`secure_data_dir`], at every engine start, narrows what an older version or another tool
//! left wider, and says so.
//!
//! The installed adapter (`adapter/<hash>/`) is a program, not data: its directories are made
//! 0700 but what `npm ci` put inside is left as npm made it.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of the directories the daemon creates in its data directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files the daemon creates in its data directory.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and its missing parents, each new one 0700.
pub fn create_dir_all(path: &Path) -> std::io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// Open options whose new files are 0600.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Writes `bytes` to `path` (created 0600, or truncated: then narrowed to 0600 too).
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    narrow(&file.metadata()?.permissions(), FILE_MODE).map_or(Ok(()), |mode| {
        file.set_permissions(Permissions::from_mode(mode))
    })?;
    file.write_all(bytes)
}

/// What [`secure_data_dir`] changed.
#[derive(Debug, Default)]
pub struct Narrowed {
    /// Directories and files whose mode was narrowed, with the mode they had.
    pub fixed: Vec<(PathBuf, u32)>,
    /// Paths whose mode could not be changed, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Makes `data_dir` (created if missing) 0700 and everything in it private: directories 0700,
/// files without group or other bits (the owner's bits, e.g. an executable bit, are kept).
/// Symbolic links are not followed. Returns what it changed; the caller warns.
pub fn secure_data_dir(data_dir: &Path) -> std::io::Result<Narrowed> {
    create_dir_all(data_dir)?;
    let mut narrowed = Narrowed::default();
    fix(data_dir, true, &mut narrowed);
    walk(data_dir, 0, &mut narrowed);
    Ok(narrowed)
}

/// Narrows the children of `dir` and walks into its directories (but not into the adapter's).
fn walk(dir: &Path, depth: usize, narrowed: &mut Narrowed) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            fix(&path, true, narrowed);
            if depth == 0 && entry.file_name() == "adapter" {
                // `adapter/<hash>/` themselves, not what npm installed in them.
                walk_dirs_only(&path, narrowed);
            } else {
                walk(&path, depth + 1, narrowed);
            }
        } else if kind.is_file() {
            fix(&path, false, narrowed);
        }
    }
}

/// Makes the directories directly in `adapter/` 0700.
fn walk_dirs_only(dir: &Path, narrowed: &mut Narrowed) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            fix(&entry.path(), true, narrowed);
        }
    }
}

/// Narrows one path's mode when group or others have any bit.
fn fix(path: &Path, dir: bool, narrowed: &mut Narrowed) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    let want = if dir { DIR_MODE } else { FILE_MODE };
    if let Some(mode) = narrow(&meta.permissions(), want) {
        let had = meta.permissions().mode() & 0o7777;
        match std::fs::set_permissions(path, Permissions::from_mode(mode)) {
            Ok(()) => narrowed.fixed.push((path.to_owned(), had)),
            Err(e) => narrowed.failed.push((path.to_owned(), e.to_string())),
        }
    }
}

/// The mode `current` should get: `None` when it is private already. Directories get `want`
/// (0700) exactly; files keep their owner bits and lose the rest.
fn narrow(current: &Permissions, want: u32) -> Option<u32> {
    let mode = current.mode() & 0o7777;
    if mode & 0o077 == 0 && (want != DIR_MODE || mode & 0o700 == 0o700) {
        return None;
    }
    Some(if want == DIR_MODE {
        DIR_MODE
    } else {
        mode & 0o700
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn new_files_and_directories_are_private_and_wide_ones_are_narrowed() {
        let scratch = Scratch(std::env::temp_dir().join(format!(
            "codebuffd-private-{}",
            uuid::Uuid::new_v4().simple()
        )));
        let data = scratch.0.join("data");
        create_dir_all(&data.join("a/b")).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("a/b")), 0o700);
        write(&data.join("a/f"), b"x").unwrap();
        assert_eq!(mode(&data.join("a/f")), 0o600);
        // Wide things left by someone else.
        let set =
            |p: &Path, m: u32| std::fs::set_permissions(p, Permissions::from_mode(m)).unwrap();
        set(&data, 0o755);
        set(&data.join("a"), 0o775);
        std::fs::write(data.join("a/b/log"), "secret").unwrap();
        set(&data.join("a/b/log"), 0o644);
        std::fs::write(data.join("run"), "x").unwrap();
        set(&data.join("run"), 0o755);
        std::os::unix::fs::symlink("/etc/passwd", data.join("link")).unwrap();
        let npm = data.join("adapter/abc/node_modules/x");
        std::fs::create_dir_all(&npm).unwrap();
        set(&data.join("adapter"), 0o755);
        set(&data.join("adapter/abc"), 0o755);
        std::fs::write(npm.join("index.js"), "").unwrap();
        set(&npm.join("index.js"), 0o644);
        let narrowed = secure_data_dir(&data).unwrap();
        assert!(narrowed.failed.is_empty(), "{:?}", narrowed.failed);
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("a")), 0o700);
        assert_eq!(mode(&data.join("a/b/log")), 0o600);
        assert_eq!(mode(&data.join("run")), 0o700);
        assert_eq!(mode(&data.join("adapter/abc")), 0o700);
        assert_eq!(mode(&npm.join("index.js")), 0o644, "npm's files are npm's");
        assert_eq!(
            mode(Path::new("/etc/passwd")) & 0o044,
            0o044,
            "links not followed"
        );
        let mut fixed: Vec<_> = narrowed
            .fixed
            .iter()
            .map(|(p, m)| (p.strip_prefix(&data).unwrap().display().to_string(), *m))
            .collect();
        fixed.sort();
        assert_eq!(
            fixed,
            vec![
                (String::new(), 0o755),
                ("a".into(), 0o775),
                ("a/b/log".into(), 0o644),
                ("adapter".into(), 0o755),
                ("adapter/abc".into(), 0o755),
                ("run".into(), 0o755),
            ]
        );
        // A second start has nothing to do.
        assert!(secure_data_dir(&data).unwrap().fixed.is_empty());
    }
}
