//! The Codebuff adapter this binary carries, and where the adapter a daemon runs comes from.
//!
//! `build.rs` embeds the adapter's sources and lockfile (`adapters/codebuff`: `package.json`,
//! `package-lock.json`, `bin/`, `src/`). An installed or copied binary unpacks them on first use
//! into `<data-dir>/adapter/<hash>/` (the hash of the embedded files) and installs the Node
//! packages there: everything happens in a temporary directory beside it that is renamed into
//! place once complete, so two daemons, or a crash, never leave a half-installed adapter, and
//! a directory named by the hash is always complete. Other hashes (older binaries) are removed.
//!
//! Which adapter a daemon runs ([`AdapterSource::locate`]):
//!
//! 1. `CODEBUFFD_ADAPTER_DIR`, used as it is (development, tests, a pre-installed image);
//! 2. the source checkout the binary was built from, when it runs from that checkout or from
//!    its build directory (`cargo run`, `cargo test`: edits to the adapter apply at once);
//! 3. else the embedded adapter.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::node::InstallError;

include!(concat!(env!("OUT_DIR"), "/adapter_bundle.rs"));

/// The environment variable naming an adapter directory to use as it is.
pub const ADAPTER_DIR_ENV: &str = "CODEBUFFD_ADAPTER_DIR";

/// The embedded adapter's files: (path relative to the adapter, content), sorted by path.
pub fn files() -> &'static [(&'static str, &'static [u8])] {
    ADAPTER_FILES
}

/// The embedded adapter's content hash: 16 hex digits of a SHA-256 over its paths and contents.
pub fn hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        let mut sha = Sha256::new();
        for (path, content) in ADAPTER_FILES {
            sha.update(path.as_bytes());
            sha.update([0]);
            sha.update((content.len() as u64).to_le_bytes());
            sha.update(content);
        }
        sha.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    })
}

/// The embedded adapter's version and the `@codebuff/sdk` version it depends on, from its
/// `package.json`: `codebuffd-codebuff-adapter 0.1.0, @codebuff/sdk 0.10.7`.
pub fn describe_version() -> String {
    let manifest = ADAPTER_FILES
        .iter()
        .find(|(path, _)| *path == "package.json")
        .and_then(|(_, content)| serde_json::from_slice::<serde_json::Value>(content).ok())
        .unwrap_or_default();
    let name = manifest["name"].as_str().unwrap_or("adapter");
    let version = manifest["version"].as_str().unwrap_or("?");
    let sdk = manifest["dependencies"]["@codebuff/sdk"]
        .as_str()
        .unwrap_or("?");
    format!("{name} {version}, @codebuff/sdk {sdk}")
}

/// Where the adapter a daemon runs comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterSource {
    /// `CODEBUFFD_ADAPTER_DIR`: that directory, as it is.
    Override(PathBuf),
    /// The source checkout this binary was built from.
    Checkout(PathBuf),
    /// The embedded adapter, unpacked into `<root>/<hash>` (`root` = `<data-dir>/adapter`).
    Embedded { root: PathBuf },
}

impl AdapterSource {
    /// The adapter a daemon with `data_dir` runs (see the module docs); `env` reads the
    /// environment.
    pub fn locate(data_dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> AdapterSource {
        if let Some(dir) = env(ADAPTER_DIR_ENV).filter(|v| !v.is_empty()) {
            return AdapterSource::Override(PathBuf::from(dir));
        }
        let exe = std::env::current_exe().ok();
        match exe.as_deref().and_then(checkout_of) {
            Some(dir) => AdapterSource::Checkout(dir),
            None => AdapterSource::embedded(data_dir),
        }
    }

    /// [`AdapterSource::locate`] reading this process's environment.
    pub fn from_env(data_dir: &Path) -> AdapterSource {
        AdapterSource::locate(data_dir, &|name| std::env::var(name).ok())
    }

    /// The embedded adapter, unpacked under `data_dir`.
    pub fn embedded(data_dir: &Path) -> AdapterSource {
        AdapterSource::Embedded {
            root: data_dir.join("adapter"),
        }
    }

    /// The directory the adapter runs from (for the embedded one: where it is, or will be,
    /// unpacked).
    pub fn dir(&self) -> PathBuf {
        match self {
            AdapterSource::Override(dir) | AdapterSource::Checkout(dir) => dir.clone(),
            AdapterSource::Embedded { root } => root.join(hash()),
        }
    }

    /// Where the adapter comes from, in words.
    pub fn describe(&self) -> String {
        match self {
            AdapterSource::Override(dir) => format!("{ADAPTER_DIR_ENV}={}", dir.display()),
            AdapterSource::Checkout(dir) => {
                format!(
                    "the source checkout {} (this binary runs from its build)",
                    dir.display()
                )
            }
            AdapterSource::Embedded { .. } => {
                format!("embedded {} ({})", hash(), describe_version())
            }
        }
    }
}

/// The adapter of the source checkout this binary was built from, if `exe` runs from inside
/// that checkout or from the build directory it was compiled into (`target/debug`, …).
fn checkout_of(exe: &Path) -> Option<PathBuf> {
    let exe = exe.canonicalize().ok()?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let adapter = manifest.join("adapters/codebuff");
    let build_dir = option_env!("CODEBUFFD_BUILD_DIR").map(Path::new);
    let inside = |dir: &Path| dir.canonicalize().is_ok_and(|d| exe.starts_with(d));
    let built_here = inside(manifest) || build_dir.is_some_and(inside);
    (built_here && adapter.join("package.json").is_file()).then_some(adapter)
}

/// Whether `dir` holds exactly the embedded files (other files, such as `node_modules`, may be
/// there too).
pub fn matches_embedded(dir: &Path) -> bool {
    ADAPTER_FILES
        .iter()
        .all(|(path, content)| std::fs::read(dir.join(path)).is_ok_and(|c| c == *content))
}

/// Whether the adapter in `dir` has its packages installed.
pub fn packages_installed(dir: &Path) -> bool {
    dir.join("node_modules/@codebuff/sdk/package.json")
        .is_file()
}

/// The version of `@codebuff/sdk` installed in `dir`.
pub fn installed_sdk_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("node_modules/@codebuff/sdk/package.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_owned)
}

/// Makes `dest` hold the embedded adapter with its packages installed (`codebuffd
/// install-adapter --into DIR`, for an image or a package that sets `CODEBUFFD_ADAPTER_DIR`).
/// Returns false when it already did. Fails naming what is missing (Node.js ≥ 20, npm), or
/// when `dest` holds something else.
pub async fn install_into(dest: &Path) -> Result<bool, InstallError> {
    if packages_installed(dest) && matches_embedded(dest) {
        return Ok(false);
    }
    // An empty directory is replaced by the rename; anything else is somebody's.
    if std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) || dest.is_file() {
        return Err(InstallError(format!(
            "{} exists and does not hold this binary's adapter: remove it, or choose another directory",
            dest.display()
        )));
    }
    if let Some(problem) = super::node::NodeTools::probe().await.install_problem() {
        return Err(InstallError(problem));
    }
    unpack_and_install(dest, false).await?;
    Ok(true)
}

/// Unpacks the embedded adapter into `dest` and installs its packages there, atomically: in a
/// temporary directory beside `dest`, renamed to `dest` once complete. When `dest` already
/// holds the complete adapter (another daemon got there first) that one is kept. A `dest` that
/// exists but is not complete is replaced only when `replace_incomplete` (a directory this
/// daemon manages); otherwise it is an error.
pub async fn unpack_and_install(dest: &Path, replace_incomplete: bool) -> Result<(), InstallError> {
    let parent = dest.parent().ok_or_else(|| {
        InstallError(format!("cannot unpack the adapter into {}", dest.display()))
    })?;
    crate::private_files::create_dir_all(parent)
        .map_err(|e| InstallError(format!("cannot create {}: {e}", parent.display())))?;
    // One process installs at a time (engines starting together on one data directory would
    // each run `npm ci`); the others wait, then find it installed.
    let _installing = install_lock(parent).await?;
    if packages_installed(dest) && matches_embedded(dest) {
        tracing::info!(dir = %dest.display(), "another process installed the adapter; using it");
        return Ok(());
    }
    let temp = parent.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = unpack_into(&temp, dest, replace_incomplete).await;
    if temp.exists() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    result
}

/// Takes `<parent>/.install.lock` (waiting for a process installing now). The kernel releases
/// it when the holder exits, however it exits.
async fn install_lock(parent: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, InstallError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = parent.join(".install.lock");
    let fail = |e: String| InstallError(format!("cannot lock {}: {e}", path.display()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| fail(e.to_string()))?;
    tokio::task::spawn_blocking(move || {
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e)
    })
    .await
    .map_err(|e| fail(e.to_string()))?
    .map_err(|e| fail(e.to_string()))
}

async fn unpack_into(
    temp: &Path,
    dest: &Path,
    replace_incomplete: bool,
) -> Result<(), InstallError> {
    tracing::info!(
        hash = hash(),
        dir = %dest.display(),
        "unpacking the Codebuff adapter this binary carries"
    );
    write_files(temp).map_err(|e| {
        InstallError(format!(
            "cannot unpack the adapter into {}: {e}",
            temp.display()
        ))
    })?;
    super::node::npm_ci(temp).await?;
    if !packages_installed(temp) {
        return Err(InstallError(format!(
            "`npm ci` in {} left no @codebuff/sdk in node_modules",
            temp.display()
        )));
    }
    match std::fs::rename(temp, dest) {
        Ok(()) => {
            tracing::info!(dir = %dest.display(), "the Codebuff adapter is ready");
            Ok(())
        }
        Err(_) if packages_installed(dest) && matches_embedded(dest) => {
            tracing::info!(dir = %dest.display(), "another process installed the adapter first; using it");
            Ok(())
        }
        Err(_) if dest.exists() && replace_incomplete => {
            // An incomplete adapter of ours (its packages removed by hand): set it aside, then
            // swap in the complete one.
            let aside = dest.with_file_name(format!(
                ".old-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::rename(dest, &aside)
                .and_then(|()| std::fs::rename(temp, dest))
                .map_err(|e| InstallError(format!("cannot replace {}: {e}", dest.display())))?;
            let _ = std::fs::remove_dir_all(&aside);
            Ok(())
        }
        Err(_) if dest.exists() => Err(InstallError(format!(
            "{} exists and does not hold this binary's adapter: remove it, or choose another directory",
            dest.display()
        ))),
        Err(e) => Err(InstallError(format!(
            "cannot move the adapter into {}: {e}",
            dest.display()
        ))),
    }
}

/// Writes the embedded files under `dir` (created; must not exist).
fn write_files(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .mode(crate::private_files::DIR_MODE)
        .create(dir)?;
    for (path, content) in ADAPTER_FILES {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, content)?;
        if path.starts_with("bin/") {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// Removes what other versions left under `root` (the unpacked adapters of other hashes,
/// temporary directories of processes that are gone); keeps `keep`.
pub fn remove_others(root: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = match name.strip_prefix(".tmp-").or(name.strip_prefix(".old-")) {
            Some(rest) => rest
                .split('-')
                .next()
                .and_then(|pid| pid.parse::<i32>().ok())
                .is_some_and(|pid| !alive(pid)),
            None => name != keep && is_hash(&name),
        };
        if stale {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::info!(dir = %entry.path().display(), "removed an old Codebuff adapter")
                }
                Err(error) => {
                    tracing::warn!(dir = %entry.path().display(), %error, "cannot remove an old Codebuff adapter")
                }
            }
        }
    }
}

fn is_hash(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn alive(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("codebuffd-adapter-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_bundle_holds_the_sources_and_lockfile_only() {
        let paths: Vec<&str> = files().iter().map(|(p, _)| *p).collect();
        for must in [
            "package.json",
            "package-lock.json",
            "bin/codebuff-agent.mjs",
            "src/main.mjs",
        ] {
            assert!(paths.contains(&must), "{must} in {paths:?}");
        }
        assert!(
            paths.iter().all(|p| p.starts_with("bin/")
                || p.starts_with("src/")
                || p.starts_with("package")),
            "{paths:?}"
        );
        let mut sorted = paths.clone();
        sorted.sort_unstable();
        assert_eq!(paths, sorted);
        assert!(is_hash(hash()), "{}", hash());
        assert!(
            describe_version().contains("@codebuff/sdk 0.10"),
            "{}",
            describe_version()
        );
    }

    #[test]
    fn the_files_written_are_the_embedded_ones() {
        let scratch = Scratch::new();
        let dir = scratch.0.join("a");
        write_files(&dir).unwrap();
        assert!(matches_embedded(&dir));
        assert!(!packages_installed(&dir));
        std::fs::write(dir.join("src/main.mjs"), "changed").unwrap();
        assert!(!matches_embedded(&dir));
        // The checkout's adapter is what was embedded (this test builds from it).
        assert!(matches_embedded(
            &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("adapters/codebuff")
        ));
    }

    #[test]
    fn the_override_wins_then_the_checkout_of_a_binary_run_from_its_build() {
        let data = Path::new("/data");
        let set = |name: &str| (name == ADAPTER_DIR_ENV).then(|| "/opt/adapter".to_owned());
        assert_eq!(
            AdapterSource::locate(data, &set),
            AdapterSource::Override(PathBuf::from("/opt/adapter"))
        );
        // This test runs from target/…/deps, inside the build of the checkout.
        let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("adapters/codebuff");
        assert_eq!(
            AdapterSource::locate(data, &|_| None),
            AdapterSource::Checkout(checkout)
        );
        // A binary elsewhere (installed, copied) uses the embedded adapter.
        assert_eq!(checkout_of(Path::new("/usr/bin/env")), None);
        let embedded = AdapterSource::embedded(data);
        assert_eq!(embedded.dir(), data.join("adapter").join(hash()));
        assert!(embedded
            .describe()
            .starts_with(&format!("embedded {}", hash())));
    }

    #[test]
    fn other_hashes_and_dead_temporaries_are_removed() {
        let scratch = Scratch::new();
        let keep = hash();
        for name in [keep, "0123456789abcdef", ".tmp-999999999-x", "notes"] {
            std::fs::create_dir_all(scratch.0.join(name)).unwrap();
        }
        let mine = format!(".tmp-{}-y", std::process::id());
        std::fs::create_dir_all(scratch.0.join(&mine)).unwrap();
        remove_others(&scratch.0, keep);
        let mut left: Vec<String> = std::fs::read_dir(&scratch.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![keep.to_owned(), "notes".to_owned(), mine];
        want.sort();
        assert_eq!(left, want);
    }
}
