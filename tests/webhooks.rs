//! Webhooks through the real binary (`docs/webhooks.md`): a receiver on loopback gets signed
//! deliveries of a mock session's question, permission request, turn ends and end (with cost),
//! verified with the official Standard Webhooks library (npm `standardwebhooks`); deliveries
//! survive a receiver that is down and a `kill -9` of the daemon, keep their `webhook-id`,
//! are retried with backoff and given up past their horizon; sessions' own webhooks need the
//! daemon's leave and keep to the SSRF rules.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon::{Daemon, DaemonOptions, TempDir};
use support::events::of_type;
use support::receiver::{verify_with_official_library, Behaviour, Received, Receiver};

const WAIT: Duration = Duration::from_secs(30);
/// A Standard Webhooks secret (24 random bytes), for these tests only.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The daemon's webhook flags; retries start after 0.2 s (the default is 5 s) unless `extra`
/// says otherwise.
fn webhook_args(url: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["--webhook-url", url, "--webhook-secret", SECRET]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    if !extra.contains(&"--webhook-retry-base") {
        args.extend(["--webhook-retry-base".to_owned(), "0.2".to_owned()]);
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// The daemon's deliveries listing.
async fn deliveries(d: &Daemon, query: &str) -> Vec<Value> {
    let resp = d.get(&format!("/v1/webhooks/deliveries{query}")).await;
    assert_eq!(resp.status(), 200);
    let page: Value = resp.json().await.unwrap();
    page["deliveries"].as_array().cloned().unwrap_or_default()
}

async fn wait_deliveries(
    d: &Daemon,
    query: &str,
    what: &str,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let list = deliveries(d, query).await;
        if pred(&list) {
            return list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the deliveries never showed {what}: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn of(got: &[Received], ty: &str) -> Vec<Received> {
    got.iter()
        .filter(|r| r.event_type() == ty)
        .cloned()
        .collect()
}

async fn requested(d: &Daemon, id: &str, ty: &str) -> Value {
    let events = d.wait_for(id, WAIT, |e| e["type"] == ty).await;
    of_type(&events, ty)[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn question_permission_turn_and_session_ends_arrive_signed_with_their_cost() {
    let receiver = Receiver::start(Behaviour::default()).await;
    let d = Daemon::start_with(DaemonOptions {
        args: webhook_args(&receiver.url(), &[]),
        ..Default::default()
    });
    let dir = TempDir::new("webhooks");
    let directory = dir.path().display().to_string();
    d.create(
        "w",
        json!({"agent": "mock", "permissionMode": "default", "directory": directory}),
    )
    .await;

    // A question, answered.
    d.message("w", "ask").await;
    let question = requested(&d, "w", "question.requested").await;
    let qid = question["data"]["question_id"].as_str().unwrap().to_owned();
    let got = receiver
        .wait_until(WAIT, "question.requested", |g| {
            !of(g, "question.requested").is_empty()
        })
        .await;
    let q = &of(&got, "question.requested")[0];
    assert_eq!(
        q.json()["data"]["event"]["data"]["question_id"],
        qid.as_str()
    );
    let resp = d
        .post(
            &format!("/v1/sessions/w/questions/{qid}/reply"),
            json!({"answers": [["jest"], ["e2e"]]}),
        )
        .await;
    assert_eq!(resp.status(), 204);
    d.wait_status("w", "idle", WAIT).await;

    // A permission request, allowed twice (a file, then a command).
    d.message("w", "gated").await;
    for n in 1..=2 {
        let deadline = std::time::Instant::now() + WAIT;
        let permission = loop {
            let events = d.events("w").await;
            let asked = of_type(&events, "permission.requested");
            if asked.len() >= n {
                break asked[n - 1]["data"]["permission_id"]
                    .as_str()
                    .unwrap()
                    .to_owned();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no permission request {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let resp = d
            .post(
                &format!("/v1/sessions/w/permissions/{permission}/reply"),
                json!({"reply": "once"}),
            )
            .await;
        assert_eq!(resp.status(), 204);
    }
    d.wait_status("w", "idle", WAIT).await;

    // The end of the session.
    let resp = d.post_empty("/v1/sessions/w/terminate").await;
    assert_eq!(resp.status(), 204);
    let got = receiver
        .wait_until(WAIT, "every delivery", |g| {
            of(g, "question.requested").len() == 1
                && of(g, "permission.requested").len() == 2
                && of(g, "turn.ended").len() == 2
                && of(g, "session.ended").len() == 1
        })
        .await;
    // Only the default types were sent, each once.
    assert_eq!(
        got.len(),
        6,
        "{:?}",
        got.iter().map(Received::event_type).collect::<Vec<_>>()
    );

    // The official library accepts every signature and gives back the bodies.
    let payloads = verify_with_official_library(SECRET, &got);
    for (payload, r) in payloads.iter().zip(&got) {
        let sent = r.json();
        assert_eq!(
            payload["data"]["event"]["event_id"],
            sent["data"]["event"]["event_id"]
        );
        assert_eq!(payload["type"], sent["type"]);
        assert_eq!(payload["data"]["sessionId"], "w");
        assert_eq!(payload["data"]["event"]["session_id"], "w");
        assert_eq!(payload["type"], payload["data"]["event"]["type"]);
        assert_eq!(payload["timestamp"], payload["data"]["event"]["time"]);
        assert!(r.webhook_id.starts_with("msg_"), "{}", r.webhook_id);
    }
    // A wrong secret is refused by the same library: the check above can fail.
    let wrong = "whsec_".to_owned() + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let refused = std::panic::catch_unwind(|| verify_with_official_library(&wrong, &got[..1]));
    assert!(refused.is_err(), "a delivery verified with another secret");

    // turn.ended carries the turn's cost, session.ended the session's.
    let turns = of(&got, "turn.ended");
    let costs: Vec<f64> = turns
        .iter()
        .map(|t| t.json()["data"]["cost"]["credits"].as_f64().unwrap())
        .collect();
    assert_eq!(costs, [3.0, 6.0]);
    assert_eq!(turns[0].json()["data"]["cost"]["usd"], 0.03);
    let end = of(&got, "session.ended")[0].json();
    assert_eq!(end["data"]["cost"]["credits"], 9.0);
    assert_eq!(end["data"]["cost"]["usd"], 0.09);
    assert!(of(&got, "question.requested")[0].json()["data"]
        .get("cost")
        .is_none());

    // The listing shows them delivered, with the ids the receiver saw, and no secret.
    let listed = wait_deliveries(&d, "?status=delivered", "six delivered", |l| l.len() == 6).await;
    for r in &got {
        let row = listed
            .iter()
            .find(|l| l["webhookId"] == r.webhook_id.as_str())
            .unwrap_or_else(|| panic!("{} is not listed", r.webhook_id));
        assert_eq!(row["attempts"], 1);
        assert_eq!(row["lastStatus"], 204);
        assert_eq!(row["endpoint"], receiver.url());
        assert_eq!(row["sessionId"], "w");
    }
    let text = d.get("/v1/webhooks/deliveries").await.text().await.unwrap();
    assert!(!text.contains(&SECRET[6..]), "the listing holds the secret");
    // Started with `--webhook-secret` on its command line, the daemon blanked it there
    // (`src/secrets.rs`) and still signs with it (verified above).
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", d.pid())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(cmdline.contains("--webhook-secret"), "{cmdline:?}");
    assert!(
        !cmdline.contains(&SECRET[6..]),
        "the secret is in /proc/<pid>/cmdline"
    );
    let bad = d.get("/v1/webhooks/deliveries?status=lost").await;
    assert_eq!(bad.status(), 400);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_outlives_a_receiver_that_is_down_and_a_kill_9() {
    // A port nobody listens on (yet): the receiver is down.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let data = TempDir::new("webhook-kill");
    let args = webhook_args(&url, &["--webhook-retry-base", "0.5"]);
    let opts = DaemonOptions {
        args: args.clone(),
        ..Default::default()
    };
    let d = Daemon::start_in_with(data.path(), opts.clone());
    d.create("k", json!({"agent": "mock"})).await;
    d.message("k", "echo while the receiver is down").await;
    d.wait_status("k", "idle", WAIT).await;
    // Tried and failed at least once, still pending.
    let listed = wait_deliveries(&d, "?sessionId=k", "a failed attempt", |l| {
        l.iter()
            .any(|r| r["type"] == "turn.ended" && r["attempts"].as_u64() >= Some(1))
    })
    .await;
    let row = listed.iter().find(|r| r["type"] == "turn.ended").unwrap();
    assert_eq!(row["status"], "pending");
    assert!(
        row["lastError"].as_str().unwrap().contains("connect"),
        "{row}"
    );
    assert!(row.get("lastStatus").is_none());
    let webhook_id = row["webhookId"].as_str().unwrap().to_owned();

    d.kill9();
    let d = Daemon::start_in_with(data.path(), opts);
    let receiver = Receiver::start_on(port, Behaviour::default()).await;
    let got = receiver
        .wait_until(WAIT, "the turn's end", |g| !of(g, "turn.ended").is_empty())
        .await;
    let delivered = &of(&got, "turn.ended")[0];
    assert_eq!(
        delivered.webhook_id, webhook_id,
        "the id changed across the restart"
    );
    assert_eq!(delivered.json()["data"]["sessionId"], "k");
    verify_with_official_library(SECRET, std::slice::from_ref(delivered));
    let listed = wait_deliveries(&d, "?sessionId=k&status=delivered", "the delivery", |l| {
        l.iter().any(|r| r["webhookId"] == webhook_id.as_str())
    })
    .await;
    let row = listed
        .iter()
        .find(|r| r["webhookId"] == webhook_id.as_str())
        .unwrap();
    assert!(row["attempts"].as_u64().unwrap() >= 2, "{row}");
    d.stop();
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_500_is_retried_with_growing_pauses() {
    let receiver = Receiver::start(Behaviour {
        first: vec![500, 500, 503],
        ..Behaviour::default()
    })
    .await;
    let d = Daemon::start_with(DaemonOptions {
        args: webhook_args(&receiver.url(), &["--webhook-events", "turn.ended"]),
        ..Default::default()
    });
    d.create("r", json!({"agent": "mock"})).await;
    d.message("r", "echo retry me").await;
    let got = receiver
        .wait_until(WAIT, "four attempts", |g| g.len() >= 4)
        .await;
    assert_eq!(got.len(), 4);
    assert!(
        got.iter().all(|r| r.webhook_id == got[0].webhook_id),
        "one delivery, one id"
    );
    assert!(
        got.iter().all(|r| r.body == got[0].body),
        "the same body every time"
    );
    // Each pause is at least half its schedule (jitter takes up to half): 0.2 s, 0.4 s, 0.8 s.
    for (n, pair) in got.windows(2).enumerate() {
        let pause = pair[1].at - pair[0].at;
        let least = Duration::from_millis(100 << n);
        assert!(
            pause >= least,
            "pause {n} was {pause:?}, less than {least:?}"
        );
    }
    let listed = wait_deliveries(&d, "?status=delivered", "the delivery", |l| !l.is_empty()).await;
    assert_eq!(listed[0]["attempts"], 4);
    assert_eq!(listed[0]["lastStatus"], 204);
    verify_with_official_library(SECRET, &got[3..]);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_past_its_horizon_is_failed_and_listed() {
    let receiver = Receiver::start(Behaviour {
        then: 500,
        ..Behaviour::default()
    })
    .await;
    let d = Daemon::start_with(DaemonOptions {
        args: webhook_args(
            &receiver.url(),
            &[
                "--webhook-events",
                "turn.ended",
                "--webhook-retry-horizon",
                "1",
            ],
        ),
        ..Default::default()
    });
    d.create("h", json!({"agent": "mock"})).await;
    d.message("h", "echo nobody takes this").await;
    let listed =
        wait_deliveries(&d, "?status=failed", "a failed delivery", |l| !l.is_empty()).await;
    let row = &listed[0];
    assert_eq!(row["type"], "turn.ended");
    assert_eq!(row["lastStatus"], 500);
    assert!(row["lastError"].as_str().unwrap().contains("500"), "{row}");
    let attempts = row["attempts"].as_u64().unwrap();
    assert!(attempts >= 2, "{row}");
    // Nothing more is sent once it failed.
    let sent = receiver.got().len() as u64;
    assert_eq!(sent, attempts);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.got().len() as u64, sent);
    assert!(deliveries(&d, "?status=pending").await.is_empty());
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_name_webhooks_only_when_allowed_and_never_to_loopback_unless_listed() {
    let receiver = Receiver::start(Behaviour::default()).await;
    let asked =
        json!({"agent": "mock", "webhooks": [{"url": receiver.url(), "events": ["turn.ended"]}]});

    // Not allowed: refused with a clear error.
    let d = Daemon::start();
    let resp = d.post("/v1/sessions/s", asked.clone()).await;
    assert_eq!(resp.status(), 400);
    let problem: Value = resp.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("--allow-session-webhooks"),
        "{problem}"
    );
    d.stop();

    // Allowed, but loopback is refused unless listed.
    let d = Daemon::start_with(DaemonOptions {
        args: vec![
            "--allow-session-webhooks".into(),
            "--webhook-secret".into(),
            SECRET.into(),
        ],
        ..Default::default()
    });
    let resp = d.post("/v1/sessions/s", asked.clone()).await;
    assert_eq!(resp.status(), 400);
    let problem: Value = resp.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains("127.0.0.1"),
        "{problem}"
    );
    let metadata =
        json!({"agent": "mock", "webhooks": [{"url": "http://169.254.169.254/latest/meta-data"}]});
    assert_eq!(d.post("/v1/sessions/m", metadata).await.status(), 400);
    d.stop();

    // Listed: the session's own endpoint gets its events, signed with the daemon's secret.
    let data = TempDir::new("session-webhooks");
    let opts = DaemonOptions {
        args: vec![
            "--allow-session-webhooks".into(),
            "--webhook-secret".into(),
            SECRET.into(),
            "--webhook-allow-host".into(),
            "127.0.0.1".into(),
        ],
        ..Default::default()
    };
    let d = Daemon::start_in_with(data.path(), opts.clone());
    d.create("s", asked.clone()).await;
    d.create("quiet", json!({"agent": "mock"})).await;
    d.message("s", "echo one").await;
    d.message("quiet", "echo not for the receiver").await;
    receiver
        .wait_until(WAIT, "the session's turn end", |g| g.len() == 1)
        .await;
    // Restarted, the session still has its endpoint.
    d.wait_status("quiet", "idle", WAIT).await;
    d.stop();
    let d = Daemon::start_in_with(data.path(), opts);
    d.message("s", "echo two").await;
    let got = receiver
        .wait_until(WAIT, "the second turn end", |g| g.len() == 2)
        .await;
    let payloads = verify_with_official_library(SECRET, &got);
    assert!(payloads
        .iter()
        .all(|p| p["type"] == "turn.ended" && p["data"]["sessionId"] == "s"));
    let listed = deliveries(&d, "").await;
    assert!(
        listed.iter().all(|r| r["sessionScoped"] == true),
        "{listed:?}"
    );
    d.stop();
    receiver.stop().await;
}

#[test]
fn bad_webhook_settings_are_refused_at_start_without_quoting_the_secret() {
    for (args, expect) in [
        (
            vec!["--webhook-url", "http://127.0.0.1:9/x"],
            "need a signing secret",
        ),
        (
            vec![
                "--webhook-url",
                "http://127.0.0.1:9/x",
                "--webhook-secret",
                "whsec_c2VjcmV0LXRvby1zaG9ydA==",
            ],
            "24 to 64 bytes",
        ),
        (
            vec!["--webhook-url", "ftp://x/", "--webhook-secret", SECRET],
            "http or https",
        ),
        (
            vec![
                "--webhook-url",
                "http://x/",
                "--webhook-secret",
                SECRET,
                "--webhook-events",
                "turn.over",
            ],
            "turn.over",
        ),
    ] {
        let out = std::process::Command::new(support::daemon::binary())
            .args(["server", "--port", "0", "--data-dir"])
            .arg(Path::new("/nonexistent/never-created"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
        assert!(!stderr.contains("c2VjcmV0LXRvby1zaG9ydA"), "{stderr}");
        assert!(!stderr.contains(&SECRET[6..]), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Postgres: CODEBUFFD_TEST_POSTGRES_URL, and --ignored"]
async fn a_fleet_on_one_postgres_delivers_each_event_once() {
    let url = support::store::postgres_url();
    let receiver = Receiver::start(Behaviour {
        // Slow enough that both daemons' dispatchers are busy at once.
        delay: Duration::from_millis(50),
        ..Behaviour::default()
    })
    .await;
    let args = webhook_args(
        &receiver.url(),
        &[
            "--store",
            &url,
            "--webhook-events",
            "turn.ended,turn.started",
        ],
    );
    let start = || {
        Daemon::start_with(DaemonOptions {
            args: args.clone(),
            ..Default::default()
        })
    };
    let (a, b) = (start(), start());
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let mut ids = Vec::new();
    for (n, d) in [&a, &b, &a, &b].into_iter().enumerate() {
        let id = format!("fleet-{tag}-{n}");
        d.create(&id, json!({"agent": "mock"})).await;
        for turn in 0..3 {
            d.message(&id, &format!("echo {turn}")).await;
            d.wait_status(&id, "idle", WAIT).await;
        }
        ids.push(id);
    }
    // 4 sessions × 3 turns × (started + ended).
    receiver
        .wait_until(WAIT, "24 deliveries", |g| {
            g.iter()
                .filter(|r| {
                    ids.iter()
                        .any(|id| r.json()["data"]["sessionId"] == id.as_str())
                })
                .count()
                >= 24
        })
        .await;
    // Give a duplicate time to arrive, then count.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got: Vec<Received> = receiver
        .got()
        .into_iter()
        .filter(|r| {
            ids.iter()
                .any(|id| r.json()["data"]["sessionId"] == id.as_str())
        })
        .collect();
    let distinct: std::collections::BTreeSet<&str> =
        got.iter().map(|r| r.webhook_id.as_str()).collect();
    assert_eq!(got.len(), 24, "some event was delivered twice or never");
    assert_eq!(distinct.len(), 24);
    a.stop();
    b.stop();
    receiver.stop().await;
}
