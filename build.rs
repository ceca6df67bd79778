//! Embeds the Codebuff adapter (`adapters/codebuff`: `package.json`, `package-lock.json`, `bin/`
//! and `src/`; not `node_modules/`, tests or scripts) in the binary, so an installed or copied
//! `codebuffd` can unpack it where it runs (`src/agent/adapter.rs`).
//!
//! Writes `$OUT_DIR/adapter_bundle.rs`: `ADAPTER_FILES`, each file's path relative to the adapter
//! and its bytes (`include_bytes!`, so the compiler tracks them too). Cargo reruns this script
//! when anything under those paths changes, and a new or removed file changes the list.
//! Also tells the crate where this build's artifacts go (`CODEBUFFD_BUILD_DIR`), so a binary
//! can tell that it runs from the build directory of its own source checkout, and gives the
//! linker of a release build the order of the daemon's functions (`link/symbol-order.txt`,
//! see [`symbol_order`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const ADAPTER: &str = "adapters/codebuff";
const FILES: [&str; 2] = ["package.json", "package-lock.json"];
const DIRS: [&str; 2] = ["bin", "src"];

fn main() {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let adapter = manifest.join(ADAPTER);
    println!("cargo:rerun-if-changed=build.rs");

    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for name in FILES {
        println!("cargo:rerun-if-changed={ADAPTER}/{name}");
        let path = adapter.join(name);
        assert!(
            path.is_file(),
            "the Codebuff adapter is incomplete: {} is missing",
            path.display()
        );
        files.push((name.to_owned(), path));
    }
    for dir in DIRS {
        // A directory: Cargo rescans everything under it.
        println!("cargo:rerun-if-changed={ADAPTER}/{dir}");
        collect(&adapter, &adapter.join(dir), &mut files);
    }
    files.sort();

    let mut code = String::from(
        "/// The embedded adapter's files: (path relative to the adapter, content), sorted by path.\n\
         pub const ADAPTER_FILES: &[(&str, &[u8])] = &[\n",
    );
    for (relative, path) in &files {
        let absolute = path.canonicalize().expect("canonical adapter path");
        let absolute = absolute.to_str().expect("a UTF-8 adapter path");
        writeln!(code, "    ({relative:?}, include_bytes!({absolute:?})),").expect("write");
    }
    code.push_str("];\n");
    std::fs::write(out.join("adapter_bundle.rs"), code).expect("write adapter_bundle.rs");

    symbol_order(&manifest);

    // OUT_DIR is <build dir>/<profile>/build/<package>-<hash>/out.
    if let Some(build_dir) = out.ancestors().nth(3) {
        println!(
            "cargo:rustc-env=CODEBUFFD_BUILD_DIR={}",
            build_dir.display()
        );
    }
}

/// Every regular file under `dir` (hidden entries skipped), as (path relative to `root`, path).
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the adapter directory {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().expect("a file type");
        if kind.is_dir() {
            collect(root, &path, files);
        } else if kind.is_file() {
            let relative = path
                .strip_prefix(root)
                .expect("under the adapter")
                .to_str()
                .expect("a UTF-8 file name")
                .to_owned();
            files.push((relative, path));
        }
    }
}

/// Release builds (and benches, which inherit them) of the `codebuffd` binary link with
/// `link/symbol-order.txt` (written by `scripts/order-symbols`): the functions that run while
/// the daemon idles and streams are laid out first and together, so the kernel maps fewer of
/// the binary's pages around them (idle and peak RSS; benches/README.md, "Fifteenth
/// session"). Only where the linker is LLD, the default of Rust 1.90 on x86-64 Linux
/// (`--symbol-ordering-file` is LLD's), and not when `CODEBUFFD_SYMBOL_ORDER=0` (another
/// linker set up in `RUSTFLAGS`, or to compare). A stale file costs memory, never correctness:
/// names it lists that no longer exist are skipped. Such a build also packs its relative
/// relocations where the C library can read them ([`glibc_reads_packed_relocations`]).
fn symbol_order(manifest: &Path) {
    println!("cargo:rerun-if-env-changed=CODEBUFFD_SYMBOL_ORDER");
    let file = manifest.join("link/symbol-order.txt");
    let present = file.is_file();
    if present {
        // (A path that does not exist would make Cargo run this script at every build.)
        println!("cargo:rerun-if-changed=link/symbol-order.txt");
    }
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let wanted = env("CODEBUFFD_SYMBOL_ORDER") != "0"
        && env("PROFILE") == "release"
        && env("TARGET") == "x86_64-unknown-linux-gnu"
        && present
        && rustc_links_with_lld()
        // A linker chosen in the flags may not be LLD.
        && !env("CARGO_ENCODED_RUSTFLAGS").contains("linker");
    if wanted {
        println!(
            "cargo:rustc-link-arg-bin=codebuffd=-Wl,--symbol-ordering-file={}",
            file.display()
        );
        println!("cargo:rustc-link-arg-bin=codebuffd=-Wl,--no-warn-symbol-ordering");
        if glibc_reads_packed_relocations() {
            // The binary's ~22,000 relative relocations in a few KiB instead of 510: the
            // dynamic loader reads all of them when any codebuffd process starts (the daemon,
            // and each `mock-agent`), and their pages stay mapped for the process's life.
            println!("cargo:rustc-link-arg-bin=codebuffd=-Wl,-z,pack-relative-relocs");
        }
    }
}

/// True when this machine's glibc (where the binary is built, and so meant to run) is 2.36
/// or later, the first whose loader reads packed relative relocations (`DT_RELR`); a binary
/// linked with them names that requirement, so an older glibc refuses it with a clear error.
fn glibc_reads_packed_relocations() -> bool {
    let Ok(output) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&output.stdout);
    major_minor(text.trim().trim_start_matches("glibc ")) >= (2, 36)
}

/// True for a rustc of 1.90 or later: it links x86-64 Linux programs with its own LLD.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(output) = std::process::Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let release = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .unwrap_or("");
    major_minor(release) >= (1, 90)
}

/// The first two numbers of a version (`1.90.0-nightly`: (1, 90)); missing ones are 0.
fn major_minor(version: &str) -> (u32, u32) {
    let mut parts = version
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}
