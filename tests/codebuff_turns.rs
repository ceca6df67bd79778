//! Codebuff turns as a user meets them, with the real adapter and SDK against the fake backend:
//! every way the backend can fail ends the turn `failed` with a typed code and the backend's own
//! message (and the session goes on); prompts of any size; the key out of reach of the agent's
//! commands; sensitive files never sent; background commands killed with the turn; images sent
//! as images; and the warm spares that make turns start fast.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::codebuff::{create_codebuff, start_daemon, start_daemon_with, LIMIT};
use support::daemon::{Daemon, DaemonOptions, TempDir};
use support::events::{assistant_texts, of_type, turn_ends};
use support::fake_backend::FakeBackend;
use support::invariants::assert_well_formed;
use support::procs::alive;
use support::sse::SseReader;

/// Sends `message` with `POST …/messages/stream` and reads the turn's events to their end.
async fn stream_turn(d: &Daemon, id: &str, message: &str) -> Vec<Value> {
    let resp = d
        .post(
            &format!("/v1/sessions/{id}/messages/stream"),
            json!({ "message": message }),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    sse.until(LIMIT, |e| e["type"] == "turn.ended").await
}

/// One backend failure end to end: the stream shows the `error` and a `failed` turn whose
/// metadata has `code` and the backend's message; the session takes another message.
async fn assert_backend_failure(scenario: &str, code: &str, status: Option<u64>, says: &str) {
    let backend = FakeBackend::start(scenario);
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "f", work.path()).await;
    let events = stream_turn(&d, "f", "Say hello.").await;

    let errors = of_type(&events, "error");
    let fatal = errors
        .iter()
        .find(|e| e["data"]["details"]["fatal"] == true)
        .unwrap_or_else(|| panic!("{scenario}: no fatal error in the stream: {errors:?}"));
    assert_eq!(fatal["data"]["code"], code, "{scenario}");
    assert_eq!(
        fatal["data"]["details"]["statusCode"].as_u64(),
        status,
        "{scenario}"
    );
    let ends = turn_ends(&events);
    assert_eq!(ends.len(), 1, "{scenario}");
    let metadata = ends[0];
    assert_eq!(metadata["status"], "failed", "{scenario}: {metadata}");
    assert_eq!(metadata["code"], code, "{scenario}: {metadata}");
    let message = metadata["message"].as_str().unwrap_or("");
    assert!(
        message.contains(says),
        "{scenario}: the backend's own message {says:?} in {message:?}"
    );
    // The session goes on.
    let info = d.wait_status("f", "idle", LIMIT).await;
    assert_eq!(info["ended"], false, "{scenario}");
    assert!(of_type(&d.events("f").await, "session.ended").is_empty());
    let resp = d
        .post("/v1/sessions/f/messages", json!({"message": "Again."}))
        .await;
    assert_eq!(
        resp.status(),
        204,
        "{scenario}: the session takes another message"
    );
    d.wait_turns_ended("f", 2).await;
    let all = d.events("f").await;
    d.stop();
    assert_well_formed(&all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_key_fails_the_turn_with_auth_failed() {
    assert_backend_failure("auth_failed", "auth_failed", Some(401), "Invalid API key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credits_fail_the_turn_with_out_of_credits() {
    assert_backend_failure(
        "payment_required",
        "out_of_credits",
        Some(402),
        "Insufficient credits",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_account_fails_the_turn_with_account_suspended() {
    assert_backend_failure(
        "account_suspended",
        "account_suspended",
        Some(403),
        "suspended for abuse",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_fail_the_turn_with_rate_limited() {
    assert_backend_failure(
        "rate_limited",
        "rate_limited",
        Some(429),
        "Too many requests",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_fails_the_turn_with_backend_error() {
    assert_backend_failure(
        "server_error",
        "backend_error",
        Some(500),
        "upstream model provider crashed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_fails_the_turn_with_invalid_request() {
    assert_backend_failure(
        "model_unavailable",
        "invalid_request",
        Some(400),
        "is not available",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_breaks_fails_the_turn_with_backend_error() {
    assert_backend_failure("stream_break", "backend_error", None, "stream broke").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_backend_fails_the_turn_with_network_error() {
    let backend = FakeBackend::start("text");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    // Port 9 (discard) is below the ephemeral range: nothing listens there.
    let d = start_daemon(
        &backend,
        &home,
        &[("CODEBUFFD_TEST_BACKEND_URL", "http://127.0.0.1:9")],
    );
    create_codebuff(&d, "n", work.path()).await;
    let events = stream_turn(&d, "n", "Say hello.").await;
    let metadata = turn_ends(&events)[0];
    assert_eq!(metadata["status"], "failed");
    assert_eq!(metadata["code"], "network_error");
    assert!(
        metadata["message"]
            .as_str()
            .unwrap_or("")
            .contains("Cannot reach"),
        "{metadata}"
    );
    assert_eq!(d.info("n").await["ended"], false);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_megabyte_prompt_reaches_the_model_whole() {
    let backend = FakeBackend::start("text");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let d = start_daemon_with(
        &backend,
        &home,
        &[],
        &["--max-body-bytes".to_owned(), (4 << 20).to_string()],
    );
    create_codebuff(&d, "big", work.path()).await;
    let mut prompt = "Say hello. ".repeat((1 << 20) / 11 + 1);
    prompt.truncate(1 << 20);
    prompt.push_str("END-OF-PROMPT-7f3a");
    d.message("big", &prompt).await;
    let events = d.wait_turns_ended("big", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    let chats = backend.chat_requests().await;
    let sent = chats[0].to_string();
    assert!(
        sent.contains("END-OF-PROMPT-7f3a"),
        "the prompt's end reached the model"
    );
    assert!(sent.len() > 1 << 20);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_out_of_reach_of_the_agents_commands() {
    let backend = FakeBackend::start("secret_env");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let key = "sk-codebuffd-secret-4f9e1c";
    let d = start_daemon(&backend, &home, &[("CODEBUFF_API_KEY", key)]);
    create_codebuff(&d, "k", work.path()).await;
    d.message("k", "Show the environment.").await;
    let events = d.wait_turns_ended("k", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    // The command ran: its result holds the adapter's initial environment and its own.
    let transcript = d
        .get("/v1/sessions/k/events.jsonl?includeRaw=true")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        transcript.contains("CODEBUFF_STATE_DIR"),
        "the environment was printed"
    );
    assert!(!transcript.contains(key), "the key is in no event");
    // The model got the command's output, without the key; the SDK still used the key.
    let requests = backend.requests().await;
    let chats: Vec<String> = backend
        .chat_requests()
        .await
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(chats.iter().any(|c| c.contains("CODEBUFF_STATE_DIR")));
    assert!(chats.iter().all(|c| !c.contains(key)));
    assert!(requests
        .iter()
        .any(|r| r["authorization"] == format!("Bearer {key}")));
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sensitive_files_never_reach_the_model() {
    let backend = FakeBackend::start("sensitive_files");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    for (path, content) in [
        (
            "id_rsa",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nSECRET-RSA-91fa\n",
        ),
        (".env", "API_TOKEN=SECRET-ENV-77c2\n"),
        ("config/deploy.pem", "SECRET-PEM-3b1c\n"),
        (".env.example", "API_TOKEN=<your token here>\n"),
        ("notes.txt", "ordinary-content-5d3e\n"),
    ] {
        let file = work.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "s", work.path()).await;
    d.message("s", "Read everything.").await;
    d.wait_turns_ended("s", 1).await;
    let sent: String = backend
        .requests()
        .await
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(
        sent.contains("ordinary-content-5d3e"),
        "ordinary files are read"
    );
    for secret in ["SECRET-RSA-91fa", "SECRET-ENV-77c2", "SECRET-PEM-3b1c"] {
        assert!(!sent.contains(secret), "{secret} reached the backend");
    }
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symbolic_links_to_secrets_never_reach_the_model() {
    let backend = FakeBackend::start("sensitive_symlinks");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let ssh = home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "SECRET-KEY-0b7e\n").unwrap();
    std::fs::write(ssh.join("authorized.txt"), "SECRET-SSHDIR-4c1d\n").unwrap();
    std::fs::write(work.path().join(".env"), "API_TOKEN=SECRET-ENV-9a2f\n").unwrap();
    std::fs::write(work.path().join("plain.txt"), "plain-content-1a2b\n").unwrap();
    let link = |target: &std::path::Path, name: &str| {
        std::os::unix::fs::symlink(target, work.path().join(name)).unwrap();
    };
    link(std::path::Path::new(".env"), "notes-link.txt");
    link(&ssh.join("id_ed25519"), "deploy-notes.txt");
    link(&ssh, "keys");
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "l", work.path()).await;
    d.message("l", "Read the notes.").await;
    let events = d.wait_turns_ended("l", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    let sent: String = backend
        .requests()
        .await
        .iter()
        .map(Value::to_string)
        .collect();
    assert!(
        sent.contains("plain-content-1a2b"),
        "ordinary files are read"
    );
    for secret in ["SECRET-KEY-0b7e", "SECRET-SSHDIR-4c1d", "SECRET-ENV-9a2f"] {
        assert!(!sent.contains(secret), "{secret} reached the backend");
    }
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_background_command_leaves_no_process() {
    let backend = FakeBackend::start("background");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "b", work.path()).await;
    d.message("b", "Start the server.").await;
    // The background command runs (its result names its pid) …
    let events = d
        .wait_for("b", LIMIT, |e| {
            e["type"] == "item.completed"
                && e["data"]["item"]["content"][0]["output"]
                    .as_str()
                    .is_some_and(|o| o.contains("processId"))
        })
        .await;
    let output = events
        .iter()
        .filter_map(|e| e["data"]["item"]["content"][0]["output"].as_str())
        .find(|o| o.contains("processId"))
        .unwrap();
    let result: Value = serde_json::from_str(output).unwrap();
    let pid = result
        .pointer("/0/value/processId")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("a pid in {result}")) as i32;
    // … and a cancel (or the turn's end) kills it with the turn.
    let _ = d.post_empty("/v1/sessions/b/cancel").await;
    d.wait_turns_ended("b", 1).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))
    {
        assert!(
            Instant::now() < deadline,
            "the background command {pid} outlived its turn"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = d.wait_no_agents(Duration::from_secs(10)).await;
    assert!(left.is_empty(), "{left:?}");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_attachments_reach_the_model_as_images() {
    let backend = FakeBackend::start("text");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    // A 1×1 PNG.
    let png: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52, 0,
        0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0x0d, 0x49, 0x44,
        0x41, 0x54, 0x78, 0x9c, 0x63, 0, 1, 0, 0, 5, 0, 1, 0x0d, 0x0a, 0x2d, 0xb4, 0, 0, 0, 0,
        0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    let image = work.path().join("shot.png");
    std::fs::write(&image, png).unwrap();
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "i", work.path()).await;
    let resp = d
        .post(
            "/v1/sessions/i/messages",
            json!({"message": "What is in this picture?",
                   "attachments": [{"path": image.display().to_string(), "mime": "image/png"}]}),
        )
        .await;
    assert_eq!(resp.status(), 204);
    let events = d.wait_turns_ended("i", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    // The user item shows the image; the model got it as image content, not as a path.
    let user = events
        .iter()
        .find(|e| e["type"] == "item.completed" && e["data"]["item"]["role"] == "user")
        .unwrap();
    assert_eq!(user["data"]["item"]["content"][1]["type"], "image");
    let chat = backend.chat_requests().await[0].to_string();
    assert!(chat.contains("data:image/png;base64,"), "{chat:.2000}");
    assert!(!chat.contains("shot.png"), "no path in the prompt");
    d.stop();
}

/// The pid of the warm spare of `agent`, waiting for it to appear.
async fn spare_of(d: &Daemon, agent: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let agents: Value = d.get("/v1/agents").await.json().await.unwrap();
        let pid = agents["agents"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["id"] == agent))
            .and_then(|a| a["warmSpare"]["pid"].as_i64());
        if let Some(pid) = pid {
            return pid as i32;
        }
        assert!(Instant::now() < deadline, "no warm spare for {agent}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_spare_is_the_process_that_runs_the_turn() {
    let backend = FakeBackend::start("stall");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let d = start_daemon(&backend, &home, &[]);
    create_codebuff(&d, "r", work.path()).await;
    let spare = spare_of(&d, "codebuff").await;
    // Let it load the SDK (and log that it is ready) before its turn comes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    d.message("r", "Take your time.").await;
    d.wait_for("r", LIMIT, |e| {
        e["type"] == "item.delta" && e["data"]["delta"] == "Working"
    })
    .await;
    assert!(alive(spare), "the spare {spare} runs the turn");
    assert!(
        d.agents().await.contains(&spare),
        "{spare} is the turn's agent now"
    );
    assert_ne!(spare_of(&d, "codebuff").await, spare, "a new spare waits");
    let _ = d.post_empty("/v1/sessions/r/cancel").await;
    d.wait_turns_ended("r", 1).await;
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_spares_take_turns_after_turns_cancels_kills_and_restarts() {
    let backend = FakeBackend::start("continue");
    let home = TempDir::new("cb-home");
    let work = TempDir::new("cb-work");
    let data = TempDir::new("cb-data");
    let env = vec![
        ("CODEBUFFD_TEST_BACKEND_URL".to_owned(), backend.url.clone()),
        ("CODEBUFF_API_KEY".to_owned(), "test-key".to_owned()),
        ("HOME".to_owned(), home.path().display().to_string()),
    ];
    let start = || {
        Daemon::start_in_with(
            data.path(),
            DaemonOptions {
                env: env.clone(),
                ..Default::default()
            },
        )
    };
    let d = start();
    create_codebuff(&d, "w", work.path()).await;
    // The spare is there before the first message, and that message's turn is run by it.
    let spare = spare_of(&d, "codebuff").await;
    d.message("w", "Remember the number 42.").await;
    let events = d.wait_turns_ended("w", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    let next = spare_of(&d, "codebuff").await;
    assert_ne!(next, spare, "a fresh spare waits for the next turn");
    assert!(
        !std::path::Path::new(&format!("/proc/{spare}/stat")).exists()
            || std::fs::read_to_string(format!("/proc/{spare}/stat"))
                .is_ok_and(|s| s.contains(") Z")),
        "the spare that ran the turn is gone"
    );

    // Right after another turn.
    d.message("w", "Which number did I mention?").await;
    let events = d.wait_turns_ended("w", 2).await;
    assert_eq!(turn_ends(&events)[1]["status"], "completed");
    assert_eq!(assistant_texts(&events)[1], "You asked me to remember 42.");

    // After a spare was killed: it is replaced, and the turn still runs.
    let spare = spare_of(&d, "codebuff").await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spare),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.message("w", "Third.").await;
    let events = d.wait_turns_ended("w", 3).await;
    assert_eq!(turn_ends(&events)[2]["status"], "completed");

    // After a cancel.
    d.message("w", "Fourth.").await;
    let _ = d.post_empty("/v1/sessions/w/cancel").await;
    let events = d.wait_turns_ended("w", 4).await;
    assert!(matches!(
        turn_ends(&events)[3]["status"].as_str(),
        Some("cancelled" | "completed")
    ));
    d.message("w", "Fifth.").await;
    let events = d.wait_turns_ended("w", 5).await;
    assert_eq!(turn_ends(&events)[4]["status"], "completed");
    let left = d.wait_no_agents(Duration::from_secs(10)).await;
    assert!(left.is_empty(), "{left:?}");

    // After a restart: the restored session's next turn runs, nothing is left behind.
    d.stop();
    let d = start();
    d.message("w", "After the restart.").await;
    let events = d.wait_turns_ended("w", 6).await;
    assert_eq!(turn_ends(&events)[5]["status"], "completed");
    assert_well_formed(&events);
    let left = d.wait_no_agents(Duration::from_secs(10)).await;
    assert!(left.is_empty(), "{left:?}");
    d.stop();
}
