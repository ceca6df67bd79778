//! A fleet on one Postgres (issue "many clients, one log"): three daemons, each with its own
//! data directory, behave as one — any of them lists, follows, answers and cancels any
//! session, and a killed one's running turn is ended `interrupted` by another within the
//! lease. And the claim of an unowned session is a compare-and-swap: of many claimers at
//! once exactly one wins, on Postgres and on SQLite.
//!
//! The daemon tests and the Postgres claim race need Postgres, so they are `#[ignore]`d: run
//! them with `--ignored` (as `.ci/run` does) and `CODEBUFFD_TEST_POSTGRES_URL` naming a
//! database (`.ci/postgres.sh start` prints one); without the variable they fail. The SQLite
//! claim race always runs.

mod support;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use codebuffd::store::{EngineEntry, EventStore, PostgresStore, SessionRecord, SqliteStore};
use serde_json::{json, Value};
use support::daemon::{session_members, Daemon, TempDir};
use support::events::assert_dense;
use support::store::postgres_url;

/// The daemons' `--store-lease`: a dead one's turns are recovered within it (and a reaper
/// round, 1 s).
const LEASE: Duration = Duration::from_secs(3);

/// A daemon of the fleet: its own data directory, the shared database, a short lease.
fn member(dir: &TempDir, url: &str) -> Daemon {
    let lease = LEASE.as_secs().to_string();
    Daemon::start_in(dir.path(), &["--store", url, "--store-lease", &lease])
}

/// The engine id of daemon `d` (`GET /v1/engines`, the entry marked current).
async fn engine_of(d: &Daemon) -> String {
    let engines: Value = d.get("/v1/engines").await.json().await.unwrap();
    let me = engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["current"] == true)
        .unwrap_or_else(|| panic!("no current engine: {engines}"));
    assert_eq!(me["pid"], d.pid());
    me["engineId"].as_str().unwrap().to_owned()
}

/// The ids `GET /v1/sessions{query}` lists through `d`.
async fn listed(d: &Daemon, query: &str) -> Vec<String> {
    let v: Value = d
        .get(&format!("/v1/sessions{query}"))
        .await
        .json()
        .await
        .unwrap();
    v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["sessionId"].as_str().map(str::to_owned))
        .collect()
}

/// A prefix no other run uses (the database is shared with other tests and runs).
fn tag() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
async fn a_fleet_on_postgres_lists_follows_answers_and_cancels_across_daemons() {
    let url = postgres_url();
    let dirs = [
        TempDir::new("fleet-a"),
        TempDir::new("fleet-b"),
        TempDir::new("fleet-c"),
    ];
    let (a, b, c) = (
        member(&dirs[0], &url),
        member(&dirs[1], &url),
        member(&dirs[2], &url),
    );
    let t = tag();
    let (sa, sb, sc) = (format!("{t}-a"), format!("{t}-b"), format!("{t}-c"));
    a.create(&sa, json!({"agent": "mock"})).await;
    b.create(&sb, json!({"agent": "mock"})).await;
    c.create(&sc, json!({"agent": "mock"})).await;

    // Every daemon lists every session, and sees the three engines.
    let pids = [a.pid(), b.pid(), c.pid()];
    for d in [&a, &b, &c] {
        let ids = listed(d, "").await;
        for id in [&sa, &sb, &sc] {
            assert!(ids.contains(id), "{id} not listed by {}: {ids:?}", d.base);
        }
        let engines: Value = d.get("/v1/engines").await.json().await.unwrap();
        let seen: Vec<i64> = engines["engines"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["pid"].as_i64())
            .collect();
        for pid in pids {
            assert!(seen.contains(&i64::from(pid)), "{engines}");
        }
    }

    // C follows, live from its first event, a turn A runs.
    let mut sse = c.sse(&format!("/v1/sessions/{sa}/events/sse")).await;
    a.message(&sa, "flood 2000").await;
    let seen = sse
        .until(Duration::from_secs(60), |e| e["type"] == "turn.ended")
        .await;
    assert_eq!(
        seen.last().unwrap()["type"],
        "turn.ended",
        "C never saw the end"
    );
    assert_dense(&seen);
    let deltas = seen.iter().filter(|e| e["type"] == "item.delta").count();
    assert!(deltas >= 2000, "{deltas} deltas");
    assert_eq!(a.events(&sa).await, seen, "C's copy is A's log");

    // A question asked in A's turn, seen through B, answered through C.
    a.message(&sa, "ask").await;
    let events = b
        .wait_for(&sa, Duration::from_secs(30), |e| {
            e["type"] == "question.requested"
        })
        .await;
    let qid = events
        .iter()
        .rfind(|e| e["type"] == "question.requested")
        .unwrap()["data"]["question_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = c
        .post(
            &format!("/v1/sessions/{sa}/questions/{qid}/reply"),
            json!({"answers": [["Blue"]]}),
        )
        .await;
    assert!(
        resp.status().is_success(),
        "reply through C: {}",
        resp.status()
    );
    let events = a.wait_turns_ended(&sa, 2).await;
    let resolved = events
        .iter()
        .find(|e| e["type"] == "question.resolved")
        .expect("question.resolved");
    assert_eq!(resolved["data"]["status"], "answered", "{resolved}");
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    // An unknown question is refused through B as A refuses it.
    let resp = b
        .post(
            &format!("/v1/sessions/{sa}/questions/nope/reply"),
            json!({"answers": [["x"]]}),
        )
        .await;
    assert_eq!(resp.status(), 400);

    // B runs a turn; A lists it under B's engine and cancels it; C reads how it ended.
    b.message(&sb, "hang").await;
    b.wait_status(&sb, "running", Duration::from_secs(20)).await;
    let owner_b = engine_of(&b).await;
    assert_eq!(
        listed(&a, &format!("?owner={owner_b}")).await,
        vec![sb.clone()]
    );
    let info = c.info(&sb).await;
    assert_eq!(info["owner"], owner_b.as_str(), "{info}");
    let resp = a.post_empty(&format!("/v1/sessions/{sb}/cancel")).await;
    assert!(
        resp.status().is_success(),
        "cancel through A: {}",
        resp.status()
    );
    let events = c
        .wait_for(&sb, Duration::from_secs(30), |e| e["type"] == "turn.ended")
        .await;
    let ended = events.iter().rfind(|e| e["type"] == "turn.ended").unwrap();
    assert_eq!(ended["data"]["metadata"]["status"], "cancelled", "{ended}");

    // A session C created runs a turn sent through A; B reads its cost.
    a.message(&sc, "echo across the fleet").await;
    let events = c.wait_turns_ended(&sc, 1).await;
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    let info = b.info(&sa).await;
    assert_eq!(info["turns"], 2, "{info}");
    assert_eq!(info["cost"], a.info(&sa).await["cost"]);

    for d in [a, b, c] {
        d.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
async fn a_killed_fleet_member_s_turn_is_interrupted_by_another_within_the_lease() {
    let url = postgres_url();
    let dirs = [
        TempDir::new("fleet-a"),
        TempDir::new("fleet-b"),
        TempDir::new("fleet-c"),
    ];
    let (a, b, c) = (
        member(&dirs[0], &url),
        member(&dirs[1], &url),
        member(&dirs[2], &url),
    );
    let t = tag();
    let (victim, bystander) = (format!("{t}-victim"), format!("{t}-bystander"));
    a.create(&victim, json!({"agent": "mock"})).await;
    b.create(&bystander, json!({"agent": "mock"})).await;
    a.message(&victim, "hang").await;
    b.message(&bystander, "hang").await;
    a.wait_status(&victim, "running", Duration::from_secs(20))
        .await;
    b.wait_status(&bystander, "running", Duration::from_secs(20))
        .await;
    let agents = a.wait_agents().await;

    let killed = Instant::now();
    let a_pid = a.kill9();
    let events = c
        .wait_for(&victim, LEASE * 5, |e| {
            e["type"] == "turn.ended" && e["data"]["metadata"]["status"] == "interrupted"
        })
        .await;
    let took = killed.elapsed();
    eprintln!("the killed daemon's turn was interrupted after {took:?} (lease {LEASE:?})");
    // The lease, then at most one reaper round (1 s), with room for a loaded machine.
    assert!(
        took < LEASE + Duration::from_secs(3),
        "recovered after {took:?}"
    );
    assert_eq!(
        events.iter().filter(|e| e["type"] == "turn.ended").count(),
        1,
        "one survivor recovered it, once"
    );
    // The agent A left is killed by the survivor (one machine here, so the same process).
    let deadline = Instant::now() + Duration::from_secs(5);
    while agents.iter().any(|p| session_members(a_pid).contains(p)) {
        assert!(Instant::now() < deadline, "A's agent outlived the recovery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // B's turn goes on untouched; C cancels it.
    assert_eq!(b.info(&bystander).await["status"], "running");
    let resp = c
        .post_empty(&format!("/v1/sessions/{bystander}/cancel"))
        .await;
    assert!(resp.status().is_success());
    let events = b.wait_turns_ended(&bystander, 1).await;
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "cancelled"
    );
    // The victim runs again, through C.
    c.message(&victim, "echo again").await;
    let events = c.wait_turns_ended(&victim, 2).await;
    assert_eq!(
        events.last().unwrap()["data"]["metadata"]["status"],
        "completed"
    );
    b.stop();
    c.stop();
}

/// A daemon on Postgres that crashes and is restarted at once (as a supervisor does) starts
/// while its dead predecessor's lease still runs: the ACP servers of its data directory are
/// then not its to serve yet. Once the lease ends they are: the restarted daemon serves them
/// again (same server, same stream numbers, the session it had) without another restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
async fn a_daemon_restarted_within_its_lease_serves_its_acp_servers_once_the_lease_ends() {
    use support::acp_http::{
        initialize, new_session, open_stream, prompt, prompt_continues, stream_response,
    };
    let url = postgres_url();
    let dir = TempDir::new("fleet-acp");
    let work = TempDir::new("fleet-acp-work");
    let server = format!("{}-acp", tag());
    let d = member(&dir, &url);
    initialize(&d, &server, "mock").await;
    let session = new_session(&d, &server, 1, work.path()).await;
    let answer = prompt(&d, &server, 2, &session, "stream before the crash").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let mut s = open_stream(&d, &server, None).await;
    let before = s.until_response(2).await;
    drop(s);
    d.crash();

    let restarted = Instant::now();
    let d = member(&dir, &url);
    // Within the lease its predecessor still counts as alive; once it ends (and a sweep, 1 s),
    // the server is back.
    let deadline = Instant::now() + LEASE * 5;
    loop {
        let resp = stream_response(&d, &server, Some(before.len() as u64)).await;
        if resp.status() == 200 {
            break;
        }
        assert_eq!(resp.status(), 404);
        assert!(
            Instant::now() < deadline,
            "the ACP server is still not served {:?} after the restart",
            restarted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "served again {:?} after the restart (lease {LEASE:?})",
        restarted.elapsed()
    );
    prompt_continues(
        &d,
        &server,
        3,
        &session,
        before.len() as u64,
        "after the crash",
    )
    .await;
    let listed: Value = d.get("/v1/acp").await.json().await.unwrap();
    assert_eq!(
        listed["servers"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    d.stop();
}

/// Claimers at once per round (each its own store: its own connections, as its own engine).
const CLAIMERS: usize = 8;
const ROUNDS: usize = 20;

/// Creates unowned sessions and has [`CLAIMERS`] stores claim each at the same moment:
/// exactly one wins, and the record names it.
///
/// The claimers register as engines (and stay alive): the database is shared with the fleet
/// tests' daemons, whose reapers take a session whose owner is no live engine.
fn claim_race(open: &(dyn Fn() -> Arc<dyn EventStore> + Sync)) {
    let creator = open();
    let claimers: Vec<Arc<dyn EventStore>> = (0..CLAIMERS).map(|_| open()).collect();
    let t = tag();
    let names: Vec<String> = (0..CLAIMERS).map(|i| format!("{t}-claimer-{i}")).collect();
    let _leases: Vec<_> = claimers
        .iter()
        .zip(&names)
        .map(|(store, name)| {
            store
                .coordination()
                .register(&EngineEntry {
                    engine_id: name.clone(),
                    instance_id: t.clone(),
                    pid: std::process::id(),
                    command: "test".into(),
                    url: None,
                    started_at: 0,
                })
                .unwrap()
        })
        .collect();
    for round in 0..ROUNDS {
        let id = format!("{t}-claim-{round}");
        creator
            .create(&SessionRecord::new(&id, "mock", json!({}), "", 1))
            .unwrap();
        creator.flush().unwrap();
        let barrier = Barrier::new(CLAIMERS);
        let wins: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = claimers
                .iter()
                .enumerate()
                .map(|(i, store)| {
                    let (barrier, id, name) = (&barrier, &id, &names[i]);
                    s.spawn(move || {
                        barrier.wait();
                        store
                            .coordination()
                            .claim(id, "", name)
                            .unwrap_or_else(|e| panic!("claimer {i}: {e}"))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..CLAIMERS).filter(|i| wins[*i]).collect();
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let owner = creator
            .coordination()
            .load_session(&id)
            .unwrap()
            .unwrap()
            .owner;
        assert_eq!(owner, names[winners[0]], "round {round}");
        // Taken: nobody claims it from nobody any more; its owner lets it go.
        assert!(!claimers[0].coordination().claim(&id, "", "late").unwrap());
        assert!(creator.coordination().claim(&id, &owner, "").unwrap());
    }
}

#[test]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
fn concurrent_claimers_of_an_unowned_session_one_wins_on_postgres() {
    let url = postgres_url();
    claim_race(&|| Arc::new(PostgresStore::open(&url).unwrap()));
}

#[test]
fn concurrent_claimers_of_an_unowned_session_one_wins_on_sqlite() {
    let dir = TempDir::new("claims");
    let path = dir.path().join("codebuffd.db");
    claim_race(&|| Arc::new(SqliteStore::open(&path).unwrap()));
}
