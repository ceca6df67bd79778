//! Embeds the Codebuff adapter (`adapters/codebuff`: `package.json`, `package-lock.json`, `bin/`
//! and `src/`; not `node_modules/`, tests or scripts) in the binary, so an installed or copied
//! `codebuffd` can unpack it where it runs (`src/agent/adapter.rs`).
//!
//! Writes `$OUT_DIR/adapter_bundle.rs`: `ADAPTER_FILES`, each file's path relative to the adapter
//! and its bytes (`include_bytes!`, so the compiler tracks them too). Cargo reruns this script
//! when anything under those paths changes, and a new or removed file changes the list.
//! Also tells the crate where this build's artifacts go (`CODEBUFFD_BUILD_DIR`), so a binary
//! can tell that it runs from the build directory of its own source checkout.

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
