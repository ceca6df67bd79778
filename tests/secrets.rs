//! Secrets at rest and in `/proc`, through the real binary: the daemon's key and token are not
//! in what its agents' commands can read of it (`/proc/<pid>/environ`, `cmdline`), the token can
//! come from a file or the environment, and the data directory is private whatever the umask.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::acp_http::{initialize, new_session, prompt};
use support::daemon::{Daemon, DaemonOptions, TempDir};
use support::events::of_type;

/// The API key the daemon is given: the agents' commands search for it.
const KEY: &str = "sk-codebuffd-proc-7d1a";
/// The token the daemon is started with on its command line.
const TOKEN: &str = "tok-codebuffd-proc-5e2b";

/// The output of `command`, run by the mock agent (a child of the daemon) in session `id`.
async fn run_as_agent(d: &Daemon, id: &str, command: &str) -> String {
    d.create(id, json!({"agent": "mock", "permissionMode": "bypass"}))
        .await;
    d.message(id, &format!("run {command}")).await;
    let events = d.wait_turns_ended(id, 1).await;
    let result = of_type(&events, "item.completed")
        .into_iter()
        .find(|e| e["data"]["item"]["kind"] == "tool_result")
        .unwrap_or_else(|| panic!("no command result: {events:?}"))
        .clone();
    let output = result["data"]["item"]["content"][0]["output"].clone();
    let parsed: Value = match output.as_str() {
        Some(text) => serde_json::from_str(text).unwrap_or(Value::String(text.to_owned())),
        None => output,
    };
    parsed[0]["value"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("no stdout in {result}"))
        .to_owned()
}

/// `/proc/<pid>/<file>` as text; an unreadable file reads as empty.
fn proc_file(pid: i32, file: &str) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default())
        .into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_and_the_token_are_not_in_the_daemons_proc_files() {
    let d = Daemon::start_with(DaemonOptions {
        token: Some(TOKEN.into()),
        env: vec![("CODEBUFF_API_KEY".into(), KEY.into())],
        ..Default::default()
    });
    // What a command of an agent finds (the brackets keep grep from finding its own command
    // line).
    let found = run_as_agent(
        &d,
        "s",
        "grep -las -e 'sk-codebuffd-proc-[7]d1a' -e 'tok-codebuffd-proc-[5]e2b' /proc/[0-9]*/environ /proc/[0-9]*/cmdline; echo searched",
    )
    .await;
    assert!(found.contains("searched"), "{found}");
    let pid = d.pid();
    assert!(
        !found.contains(&format!("/proc/{pid}/")),
        "the agent's command found the daemon's secrets: {found}"
    );
    // What the test (root or the daemon's own user) reads directly.
    let environ = proc_file(pid, "environ");
    let cmdline = proc_file(pid, "cmdline");
    assert!(!environ.contains(KEY), "the key is in environ");
    assert!(!cmdline.contains(TOKEN), "the token is in cmdline");
    assert!(cmdline.contains("--token"), "{cmdline:?}");
    // The daemon still has both: the token is required, the key is the default credential.
    assert_eq!(
        reqwest::get(d.url("/v1/sessions")).await.unwrap().status(),
        401
    );
    let resp = d.get("/v1/agents").await;
    assert_eq!(resp.status(), 200);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_can_come_from_a_file_or_the_environment_and_stays_out_of_proc() {
    let dir = TempDir::new("token-file");
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    for (args, env) in [
        (
            vec!["--token-file".to_owned(), file.display().to_string()],
            vec![],
        ),
        (
            vec![],
            vec![("CODEBUFFD_TOKEN".to_owned(), TOKEN.to_owned())],
        ),
        (
            vec![],
            vec![(
                "CODEBUFFD_TOKEN_FILE".to_owned(),
                file.display().to_string(),
            )],
        ),
    ] {
        let data = TempDir::new("token-data");
        let mut cmd = std::process::Command::new(support::daemon::binary());
        cmd.args(["server", "--host", "127.0.0.1", "--port", "0"])
            .args(&args)
            .env("CODEBUFFD_DATA_DIR", data.path().join("d"))
            .envs(env.iter().map(|(k, v)| (k, v)));
        let d = Daemon::launch(cmd, Some(TOKEN.to_owned()), data.path().join("d"));
        let client = reqwest::Client::new();
        let ok = client
            .get(d.url("/v1/sessions"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "{args:?} {env:?}");
        let wrong = client
            .get(d.url("/v1/sessions"))
            .bearer_auth("nope")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401);
        assert!(!proc_file(d.pid(), "environ").contains(TOKEN));
        assert!(!proc_file(d.pid(), "cmdline").contains(TOKEN));
        d.stop();
    }
    // An empty or missing file is refused at start.
    std::fs::write(&file, "\n").unwrap();
    let out = std::process::Command::new(support::daemon::binary())
        .args(["server", "--port", "0", "--token-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is empty"));
}

/// Every directory and file under `dir` with a mode others or the group can use, except inside
/// the adapter npm installed.
fn not_private(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            if mode != 0o700 {
                out.push(format!("{} {mode:o}", path.display()));
            }
            if !path.ends_with("node_modules") {
                not_private(&path, out);
            }
        } else if meta.is_file() && mode & 0o077 != 0 {
            out.push(format!("{} {mode:o}", path.display()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_private_whatever_the_umask() {
    let data = TempDir::new("private-data");
    // What an older version left: a world-readable directory and instance id.
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let id_file = data.path().join("instance-id");
    std::fs::write(&id_file, format!("{}\n", uuid::Uuid::new_v4())).unwrap();
    std::fs::set_permissions(&id_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let d = Daemon::start_in_with(
        data.path(),
        DaemonOptions {
            umask: Some(0o022),
            ..Default::default()
        },
    );
    // Everything the daemon writes: the log (SQLite and its WAL), an ACP server's record and
    // envelope log, an image sent with an ACP prompt, the lock and the instance id.
    d.create("s", json!({"agent": "mock"})).await;
    d.message("s", "echo hello").await;
    d.wait_turns_ended("s", 1).await;
    let work = TempDir::new("private-work");
    initialize(&d, "srv", "mock").await;
    let session = new_session(&d, "srv", 1, work.path()).await;
    let answer = prompt(&d, "srv", 2, &session, "echo over acp").await;
    assert!(answer["result"].is_object(), "{answer}");
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let image = support::acp_http::request(
        &d,
        "srv",
        None,
        3,
        "session/prompt",
        json!({"sessionId": session, "prompt": [
            {"type": "text", "text": "echo image"},
            {"type": "image", "mimeType": "image/png", "data": png}
        ]}),
    )
    .await;
    assert!(image["result"].is_object(), "{image}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut wide = Vec::new();
    let mode = std::fs::metadata(data.path()).unwrap().permissions().mode() & 0o777;
    if mode != 0o700 {
        wide.push(format!("the data directory {mode:o}"));
    }
    not_private(data.path(), &mut wide);
    let names: Vec<String> = walk_names(data.path());
    for expected in [
        "instance-id",
        // This engine's lease (`<db>.engines/<engine id>.lock`).
        ".lock",
        "server.json",
        "envelopes.jsonl",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(expected)),
            "{expected} in {names:?}"
        );
    }
    assert!(names.iter().any(|n| n.ends_with(".png")), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("-wal")), "{names:?}");
    d.stop();
    assert!(wide.is_empty(), "readable by others: {wide:#?}");
}

/// Every path under `dir`, relative.
fn walk_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            names.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    names
}

/// Runs `cat /proc/<pid>/<file>` as `uid`; its output, or None when it could not read it.
fn read_as(uid: u32, pid: i32, file: &str) -> Option<String> {
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new("cat")
        .arg(format!("/proc/{pid}/{file}"))
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (to start the daemon as another user), and --ignored"]
async fn a_daemon_that_is_not_root_is_closed_to_processes_of_its_own_user() {
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "this test needs root: it starts the daemon as another user"
    );
    use std::os::unix::process::CommandExt;
    const NOBODY: u32 = 65534;
    let data = TempDir::new("nobody-data");
    std::os::unix::fs::chown(data.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let mut cmd = std::process::Command::new(support::daemon::binary());
    cmd.args([
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--token",
        TOKEN,
    ])
    .arg("--data-dir")
    .arg(data.path())
    .env("CODEBUFF_API_KEY", KEY)
    .uid(NOBODY)
    .gid(NOBODY);
    let d = Daemon::launch(cmd, Some(TOKEN.to_owned()), data.path().to_path_buf());
    let pid = d.pid();
    // Its own user cannot open environ (nor maps), and its cmdline shows no token.
    assert_eq!(read_as(NOBODY, pid, "environ"), None);
    assert_eq!(read_as(NOBODY, pid, "maps"), None);
    let cmdline = read_as(NOBODY, pid, "cmdline").expect("cmdline is public");
    assert!(
        cmdline.contains("--token") && !cmdline.contains(TOKEN),
        "{cmdline:?}"
    );
    // Root can open environ, but the key is not in it.
    let environ = proc_file(pid, "environ");
    assert!(environ.contains("CODEBUFF_API_KEY="), "{environ:?}");
    assert!(!environ.contains(KEY));
    // The daemon still works with its token.
    assert_eq!(d.get("/v1/sessions").await.status(), 200);
    d.stop();
}
