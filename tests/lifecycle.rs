//! A session's whole life over real HTTP with the SQLite store: deletion (of an idle session and
//! of one whose turn runs), retention, paging of the session list, and the directories sessions
//! may not work in (the daemon's data directory, its installation).

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::api::{assert_problem_body, status_and_json};
use support::daemon::{work_dir, Daemon, DaemonOptions, TempDir};
use support::events::{of_type, turn_ends};

const WAIT: Duration = Duration::from_secs(60);

async fn delete(d: &Daemon, id: &str) -> reqwest::Response {
    d.delete(&format!("/v1/sessions/{id}")).await
}

async fn list(d: &Daemon, query: &str) -> (u16, Value) {
    status_and_json(d.get(&format!("/v1/sessions{query}")).await).await
}

fn ids(page: &Value) -> Vec<String> {
    page["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn deleting_a_session_removes_it_and_its_events_for_good_even_across_a_restart() {
    let data = TempDir::new("lifecycle-delete");
    let d = Daemon::start_in(data.path(), &[]);
    for id in ["gone", "kept"] {
        d.create(id, json!({"agent": "mock"})).await;
        d.message(id, "echo hello").await;
        d.wait_turns_ended(id, 1).await;
    }
    let resp = delete(&d, "gone").await;
    assert_eq!(resp.status(), 204);
    assert_eq!(resp.bytes().await.unwrap().len(), 0, "204 has no body");
    let (status, p) = status_and_json(delete(&d, "gone").await).await;
    assert_problem_body("second DELETE", &p, 404, "session_not_found");
    assert_eq!(status, 404);
    let (status, _) = status_and_json(d.get("/v1/sessions/gone").await).await;
    assert_eq!(status, 404);
    let (status, _) = status_and_json(d.get("/v1/sessions/gone/events").await).await;
    assert_eq!(status, 404);
    assert_eq!(ids(&list(&d, "").await.1), ["kept"]);
    // The id is free again: a new session under it starts from sequence 1.
    d.create("gone", json!({"agent": "mock"})).await;
    let events = d
        .wait_for("gone", WAIT, |e| e["type"] == "session.started")
        .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["sequence"], 1);
    assert_eq!(events[0]["type"], "session.started");
    assert_eq!(delete(&d, "gone").await.status(), 204);
    d.stop();

    let d = Daemon::start_in(data.path(), &[]);
    assert_eq!(
        ids(&list(&d, "").await.1),
        ["kept"],
        "the delete was durable"
    );
    let (status, _) = status_and_json(d.get("/v1/sessions/gone").await).await;
    assert_eq!(status, 404);
    let kept = d.events("kept").await;
    assert!(
        kept.iter().any(|e| e["type"] == "turn.ended"),
        "the other session is whole"
    );
    d.stop();
}

#[tokio::test]
async fn deleting_a_running_session_stops_its_agent_and_ends_its_followers() {
    let d = Daemon::start();
    d.create("busy", json!({"agent": "mock"})).await;
    let mut sse = d.sse("/v1/sessions/busy/events/sse").await;
    d.message("busy", "hang").await;
    sse.until(WAIT, |e| e["type"] == "turn.started").await;
    let deadline = Instant::now() + WAIT;
    while d.agents().await.is_empty() {
        assert!(Instant::now() < deadline, "the hanging agent never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(delete(&d, "busy").await.status(), 204);
    assert!(
        d.wait_no_agents(WAIT).await.is_empty(),
        "the deleted session's agent was killed"
    );
    // The follower saw the turn and the session end, then the stream closed.
    let rest = sse.until(WAIT, |e| e["type"] == "session.ended").await;
    assert!(rest.iter().any(|e| e["type"] == "turn.ended"), "{rest:?}");
    assert!(
        sse.closes_within(WAIT).await,
        "the stream of a deleted session ends"
    );
    let (status, _) = status_and_json(d.get("/v1/sessions/busy").await).await;
    assert_eq!(status, 404);
    d.stop();
}

#[tokio::test]
async fn retention_deletes_ended_sessions_only_once_they_are_old_enough() {
    // 0.00003 days = 2.6 s: the sweep runs every second.
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--retention-days".into(), "0.00003".into()],
        ..Default::default()
    });
    d.create("ended", json!({"agent": "mock"})).await;
    d.message("ended", "echo bye").await;
    d.wait_turns_ended("ended", 1).await;
    assert_eq!(
        d.post_empty("/v1/sessions/ended/terminate").await.status(),
        204
    );
    d.create("idle", json!({"agent": "mock"})).await;
    // Still young: both are there.
    assert_eq!(ids(&list(&d, "?status=ended").await.1), ["ended"]);
    let deadline = Instant::now() + WAIT;
    loop {
        let now = ids(&list(&d, "").await.1);
        if now == ["idle"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention never deleted: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The idle session stays however old it gets.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(ids(&list(&d, "").await.1), ["idle"]);
    d.stop();
}

#[tokio::test]
async fn the_session_list_pages_newest_first_and_filters_by_status() {
    let d = Daemon::start();
    for n in 0..7 {
        d.create(&format!("s{n}"), json!({"agent": "mock"})).await;
    }
    assert_eq!(
        d.post_empty("/v1/sessions/s2/terminate").await.status(),
        204
    );
    // Unpaged, as 0.1.x clients ask: everything, no cursor.
    let (status, all) = list(&d, "").await;
    assert_eq!(status, 200);
    assert_eq!(ids(&all), ["s6", "s5", "s4", "s3", "s2", "s1", "s0"]);
    assert!(all.get("nextCursor").is_none());
    // Pages of 3, followed by their cursors, give the same list.
    let mut seen = Vec::new();
    let mut query = "?limit=3".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = list(&d, &query).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let got = ids(&page);
        assert!(got.len() <= 3);
        seen.extend(got);
        match page["nextCursor"].as_str() {
            Some(c) => query = format!("?limit=3&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ids(&all));
    // A cursor stays valid when the session it came after is deleted.
    let (_, first) = list(&d, "?limit=2").await;
    assert_eq!(ids(&first), ["s6", "s5"]);
    assert_eq!(delete(&d, "s5").await.status(), 204);
    let cursor = first["nextCursor"].as_str().unwrap();
    let (_, next) = list(&d, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&next), ["s4", "s3"]);
    // Status filters, one or several.
    assert_eq!(ids(&list(&d, "?status=ended").await.1), ["s2"]);
    assert_eq!(
        ids(&list(&d, "?status=idle,ended&limit=2").await.1),
        ["s6", "s4"]
    );
    // Bad values are problems, not empty pages.
    for (query, what) in [
        ("?limit=0", "limit"),
        ("?limit=5000", "limit"),
        ("?status=sleeping", "sleeping"),
        ("?cursor=yesterday", "yesterday"),
        ("?limit=x", "limit"),
    ] {
        let (status, p) = list(&d, query).await;
        assert_eq!(status, 400, "{query}: {p}");
        assert_problem_body(query, &p, 400, "invalid_request");
        assert!(p["detail"].as_str().unwrap().contains(what), "{query}: {p}");
    }
    d.stop();
}

#[tokio::test]
async fn sessions_may_not_work_in_the_daemons_data_directory_or_installation() {
    let d = Daemon::start();
    let inside = d.data_dir.join("agent-state");
    let checkout = env!("CARGO_MANIFEST_DIR");
    let binary_dir = support::daemon::binary().parent().unwrap().to_path_buf();
    for (n, dir) in [
        d.data_dir.display().to_string(),
        inside.display().to_string(),
        checkout.to_owned(),
        format!("{checkout}/src"),
        binary_dir.display().to_string(),
    ]
    .into_iter()
    .enumerate()
    {
        let resp = d
            .post(
                &format!("/v1/sessions/p{n}"),
                json!({"agent": "mock", "directory": dir}),
            )
            .await;
        let (status, p) = status_and_json(resp).await;
        assert_eq!(status, 400, "{dir}: {p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.contains("may not work there"), "{dir}: {detail}");
        assert!(detail.contains("--workdir"), "{dir}: {detail}");
    }
    assert!(ids(&list(&d, "").await.1).is_empty(), "nothing was created");
    // The default directory (the daemon's own working directory, a scratch one here) is fine.
    d.create("ok", json!({"agent": "mock"})).await;
    let info = d.info("ok").await;
    let expected = work_dir(&d.data_dir).canonicalize().unwrap();
    assert_eq!(
        std::path::Path::new(info["directory"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        expected
    );
    d.stop();
}

#[tokio::test]
async fn workdir_sets_the_default_directory_and_a_protected_one_refuses_defaults() {
    let work = TempDir::new("lifecycle-workdir");
    let d = Daemon::start_with(DaemonOptions {
        args: vec!["--workdir".into(), work.path().display().to_string()],
        ..Default::default()
    });
    d.create("w", json!({"agent": "mock"})).await;
    d.message("w", "tools").await;
    d.wait_turns_ended("w", 1).await;
    let info = d.info("w").await;
    assert_eq!(
        std::path::Path::new(info["directory"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        work.path().canonicalize().unwrap()
    );
    assert!(
        std::fs::read_dir(work.path()).unwrap().next().is_some(),
        "the mock's tools scenario wrote into the workdir"
    );
    d.stop();

    // A daemon whose workdir is inside its data directory refuses sessions that take it.
    let data = TempDir::new("lifecycle-workdir-data");
    std::fs::create_dir_all(data.path().join("w")).unwrap();
    let d = Daemon::start_in(
        data.path(),
        &["--workdir", &data.path().join("w").display().to_string()],
    );
    let (status, p) =
        status_and_json(d.post("/v1/sessions/x", json!({"agent": "mock"})).await).await;
    assert_eq!(status, 400, "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("data directory"),
        "{p}"
    );
    d.stop();
}

#[tokio::test]
async fn a_directory_repointed_into_the_data_directory_is_refused_at_the_next_turn() {
    let data = TempDir::new("lifecycle-repoint-data");
    let outside = TempDir::new("lifecycle-repoint-work");
    let link = outside.path().join("project");
    let real = outside.path().join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let d = Daemon::start_in(data.path(), &[]);
    d.create(
        "r",
        json!({"agent": "mock", "directory": link.display().to_string()}),
    )
    .await;
    d.message("r", "tools").await;
    let events = d.wait_turns_ended("r", 1).await;
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert!(
        std::fs::read_dir(&real).unwrap().next().is_some(),
        "it worked in the real directory"
    );
    // The link now points into the daemon's data directory.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(data.path(), &link).unwrap();
    let before: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    d.message("r", "tools").await;
    let events = d.wait_turns_ended("r", 2).await;
    let end = turn_ends(&events)[1];
    assert_eq!(end["status"], "failed", "{end}");
    let error = of_type(&events, "error")
        .into_iter()
        .last()
        .expect("an error event")
        .clone();
    assert_eq!(error["data"]["code"], "directory_protected", "{error}");
    let message = error["data"]["message"].as_str().unwrap();
    assert!(message.contains("data directory"), "{message}");
    assert!(
        !message.contains(&data.path().display().to_string()),
        "no host path: {message}"
    );
    let after: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        before.len(),
        after.len(),
        "nothing was written into the data directory"
    );
    d.stop();
}

/// The cause of a flaky `permissions` test: a SIGTERM that came right after the ready line, before
/// the daemon caught the signal, killed it instead of stopping it (exit 0).
#[tokio::test]
async fn a_sigterm_right_after_the_ready_line_stops_the_daemon_cleanly() {
    for _ in 0..25 {
        // `stop` sends SIGTERM at once and asserts exit 0 and no process left.
        Daemon::start().stop();
    }
}
