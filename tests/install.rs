//! Installing codebuffd as a user would, and what `codebuffd doctor` tells them.
//!
//! `cargo install --path . --root TMP` (reusing this build's target directory, so only the
//! install itself runs), then the installed binary — which is not in the checkout's build, so
//! it uses the adapter it carries — started from a scratch directory with an empty `HOME` and
//! data directory, runs a `codebuff` turn against the fake backend: it unpacks its adapter and
//! installs its Node packages (`npm ci`) on the first session. npm uses the run's cache
//! (`npm_config_cache`, which `.ci/run` points at a directory of its own run), else the
//! user's `~/.npm`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::json;
use support::daemon::{binary, Daemon, TempDir};
use support::events::assistant_texts;
use support::fake_backend::FakeBackend;

/// The variables of the test's own environment that would change what the daemon finds.
const SCRUBBED: [&str; 6] = [
    "CODEBUFF_API_KEY",
    "CODEBUFFD_ADAPTER_DIR",
    "CODEBUFFD_DATA_DIR",
    "CODEBUFFD_CONFIG",
    "CODEBUFFD_STORE",
    "XDG_DATA_HOME",
];

/// `program doctor …` with `home` as `HOME` and `extra` variables.
fn doctor(program: &Path, home: &Path, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.arg("doctor").args(args).env("HOME", home);
    for name in SCRUBBED {
        cmd.env_remove(name);
    }
    cmd.envs(extra.iter().copied());
    cmd.output().expect("run codebuffd doctor")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The line of the report about `subject`, with the fix under it when there is one.
fn finding(report: &str, subject: &str) -> String {
    let lines: Vec<&str> = report.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.split_whitespace().nth(1) == Some(subject))
        .unwrap_or_else(|| panic!("no `{subject}` line in:\n{report}"));
    let fixes = lines[start + 1..]
        .iter()
        .take_while(|l| l.trim_start().starts_with('→'));
    std::iter::once(&lines[start])
        .chain(fixes)
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn doctor_on_a_fresh_home_names_the_missing_credential_and_the_data_dir() {
    let home = TempDir::new("doctor-home");
    let output = doctor(&binary(), home.path(), &[], &[]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "a problem: exit 1\n{report}");
    let credentials = finding(&report, "credentials");
    assert!(credentials.starts_with("PROBLEM"), "{credentials}");
    assert!(credentials.contains("no Codebuff API key"), "{credentials}");
    assert!(
        credentials.contains(&format!(
            "{}/.config/manicode/credentials.json",
            home.path().display()
        )),
        "the places looked in: {credentials}"
    );
    assert!(
        credentials.contains("https://www.codebuff.com/api-keys"),
        "{credentials}"
    );
    let data_dir = home.path().join(".local/share/codebuffd");
    let data = finding(&report, "data");
    assert!(data.starts_with("ok"), "{data}");
    assert!(
        data.contains(&data_dir.display().to_string()),
        "the default data dir under HOME: {data}"
    );
    assert!(data.contains("not created yet"), "{data}");
    assert!(!data_dir.exists(), "doctor creates nothing");
    for subject in ["Node.js", "npm", "adapter", "store"] {
        assert!(finding(&report, subject).starts_with("ok"), "{report}");
    }
    assert!(
        report.ends_with("1 problem: see the → line under it.\n"),
        "{report}"
    );

    // With a key in the environment, all is well; the key itself is never printed.
    let output = doctor(
        &binary(),
        home.path(),
        &[],
        &[("CODEBUFF_API_KEY", "cb-secret-key")],
    );
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert!(
        finding(&report, "credentials").contains("CODEBUFF_API_KEY"),
        "{report}"
    );
    assert!(!report.contains("cb-secret-key"), "{report}");
    assert!(report.ends_with("All good.\n"), "{report}");
}

/// The target directory this test binary was built in (`<target>/debug/codebuffd`).
fn target_dir() -> PathBuf {
    binary()
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in <target>/<profile>")
        .to_path_buf()
}

/// `cargo install --path <checkout> --root <root>` with this build's profile and target
/// directory; returns the installed binary.
fn cargo_install(root: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let output = Command::new(cargo)
        .args(["install", "--locked", "--offline", "--debug", "--path"])
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg("--root")
        .arg(root)
        .arg("--target-dir")
        .arg(target_dir())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo install");
    assert!(
        output.status.success(),
        "cargo install failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("cargo install: {:.1} s", started.elapsed().as_secs_f64());
    root.join("bin/codebuffd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_binary_runs_a_codebuff_turn_from_any_directory() {
    let root = TempDir::new("install-root");
    let installed = cargo_install(root.path());
    assert!(installed.is_file(), "{}", installed.display());
    let hash = codebuffd::agent::adapter::hash();

    let home = TempDir::new("install-home");
    let data = TempDir::new("install-data");
    let data_dir = data.path().join("data");
    let data_arg = data_dir.display().to_string();

    // Before: the installed binary reports the embedded adapter, not the checkout's.
    let before = doctor(&installed, home.path(), &["--data-dir", &data_arg], &[]);
    let report = text(&before);
    let adapter = finding(&report, "adapter");
    assert!(
        adapter.contains(&format!("embedded {hash}")) && adapter.contains("not unpacked yet"),
        "{report}"
    );
    assert!(!adapter.contains(env!("CARGO_MANIFEST_DIR")), "{report}");

    let backend = FakeBackend::start("text");
    let mut cmd = Command::new(&installed);
    cmd.args(["server", "--host", "127.0.0.1", "--port", "0", "--no-token"])
        .args(["--data-dir", &data_arg])
        .env("HOME", home.path())
        .env("RUST_LOG", "info");
    for name in SCRUBBED {
        cmd.env_remove(name);
    }
    cmd.env("CODEBUFF_API_KEY", "test-key")
        .env("CODEBUFFD_TEST_BACKEND_URL", &backend.url);
    if std::env::var_os("npm_config_cache").is_none() {
        // The developer's own cache (an empty HOME has none); CI sets a cache of its run.
        if let Some(real_home) = std::env::var_os("HOME") {
            cmd.env("npm_config_cache", PathBuf::from(real_home).join(".npm"));
        }
    }
    cmd.env("npm_config_prefer_offline", "true");
    // Anywhere but the checkout.
    let elsewhere = TempDir::new("install-cwd");
    cmd.current_dir(elsewhere.path());
    let d = Daemon::launch(cmd, None, data_dir.clone());

    // The first codebuff session unpacks the adapter and installs its packages.
    let work = TempDir::new("install-work");
    let started = Instant::now();
    d.create(
        "first",
        json!({"agent": "codebuff", "directory": work.path().display().to_string()}),
    )
    .await;
    eprintln!(
        "first codebuff session (unpack + npm ci): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let unpacked = data_dir.join("adapter").join(hash);
    assert!(
        unpacked
            .join("node_modules/@codebuff/sdk/package.json")
            .is_file(),
        "the adapter's packages in {}",
        unpacked.display()
    );
    let agents = d
        .get("/v1/agents")
        .await
        .json::<serde_json::Value>()
        .await
        .expect("agents");
    let codebuff = &agents["agents"][0];
    assert_eq!(codebuff["installed"], true, "{codebuff}");
    assert!(
        codebuff["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(&unpacked.display().to_string())),
        "runs the unpacked adapter: {codebuff}"
    );

    d.message("first", "Say hello.").await;
    let events = tokio::time::timeout(Duration::from_secs(120), d.wait_turns_ended("first", 1))
        .await
        .expect("the turn ends");
    assert_eq!(assistant_texts(&events), vec!["Hello from the fake model."]);
    let ended = events
        .iter()
        .rfind(|e| e["type"] == "turn.ended")
        .expect("turn.ended");
    assert_eq!(ended["data"]["metadata"]["status"], "completed", "{ended}");

    // After: doctor finds the adapter unpacked, and with a key all is well.
    let after = doctor(
        &installed,
        home.path(),
        &["--data-dir", &data_arg],
        &[("CODEBUFF_API_KEY", "test-key")],
    );
    let report = text(&after);
    assert_eq!(after.status.code(), Some(0), "{report}");
    assert!(
        finding(&report, "adapter").contains(&format!("unpacked in {}", unpacked.display())),
        "{report}"
    );

    // Nothing the daemon started (agents, npm) outlives it.
    d.stop();
}
