//! What a web page could make a browser send: requests naming another host (DNS rebinding; 421
//! before routing) and state changes from other origins (403, nothing changed).

use super::*;

// ----- the Host allow-list (DNS rebinding) --------------------------------------------------

/// `GET path` naming `host` in the `Host` header.
async fn get_as(api: &Api, host: &str, path: &str) -> Reply {
    let req = Request::builder()
        .uri(path)
        .header(header::HOST, host)
        .body(Body::empty())
        .unwrap();
    api.send(req).await
}

#[tokio::test]
async fn an_open_daemon_answers_the_loopback_names() {
    let api = Api::new();
    for host in [
        "localhost:2468",
        "127.0.0.1:2468",
        "[::1]:2468",
        "localhost",
    ] {
        let reply = get_as(&api, host, "/v1/health").await;
        assert_eq!(reply.json(200), json!({"status": "ok"}), "{host}");
        assert_eq!(
            get_as(&api, host, "/v1/sessions").await.status,
            200,
            "{host}"
        );
    }
    api.close().await;
}

#[tokio::test]
async fn an_open_daemon_refuses_another_host_with_421_before_routing() {
    let api = Api::new();
    for path in ["/v1/health", "/v1/sessions", "/v1/nothing"] {
        for host in ["evil.example", "evil.example:2468"] {
            let detail = get_as(&api, host, path)
                .await
                .detail(421, "host_not_allowed");
            assert!(
                detail.contains("`evil.example`") && detail.contains("--allowed-host"),
                "{host} {path}: {detail}"
            );
        }
    }
    // Nothing behind the guard runs: a page on that name cannot create a session.
    api.post_with(
        "/v1/sessions/rebound",
        &[("host", "evil.example:2468")],
        Some(json!({"agent": "mock"})),
    )
    .await
    .problem(421, "host_not_allowed");
    api.assert_no_session("rebound").await;
    api.close().await;
}

#[tokio::test]
async fn an_allowed_host_is_answered_and_others_still_are_not() {
    let api = Api::with(
        HttpOptions {
            allowed_hosts: vec!["sandbox-1".into()],
            ..options()
        },
        false,
    );
    let reply = get_as(&api, "sandbox-1:2468", "/v1/health").await;
    assert_eq!(reply.json(200), json!({"status": "ok"}));
    assert_eq!(get_as(&api, "sandbox-1", "/v1/agents").await.status, 200);
    get_as(&api, "sandbox-2:2468", "/v1/health")
        .await
        .problem(421, "host_not_allowed");
    assert_eq!(
        get_as(&api, "localhost:2468", "/v1/health").await.status,
        200
    );
    api.close().await;
}

#[tokio::test]
async fn a_token_protected_daemon_answers_any_host_unless_hosts_are_listed() {
    let token = HttpOptions {
        token: Some("t0ken".into()),
        ..options()
    };
    let api = Api::with(token.clone(), false);
    let reply = get_as(&api, "sandbox:2468", "/v1/health").await;
    assert_eq!(reply.json(200), json!({"status": "ok"}));
    // The token still guards the rest.
    get_as(&api, "sandbox:2468", "/v1/agents")
        .await
        .problem(401, "token_invalid");
    api.close().await;

    let api = Api::with(
        HttpOptions {
            allowed_hosts: vec!["api.example".into()],
            ..token
        },
        false,
    );
    get_as(&api, "sandbox:2468", "/v1/health")
        .await
        .problem(421, "host_not_allowed");
    assert_eq!(
        get_as(&api, "api.example:2468", "/v1/health").await.status,
        200
    );
    api.close().await;
}

// ----- cross-site state changes -------------------------------------------------------------

/// Starts an `ask` turn in session `s` and waits for its question; returns the question id.
async fn pending_question(api: &Api) -> String {
    api.create("s").await;
    api.message("s", "ask").await;
    let events = api
        .wait_for("s", |ev| count(ev, "question.requested") > 0)
        .await;
    of_type(&events, "question.requested")[0]["data"]["question_id"]
        .as_str()
        .expect("question id")
        .to_owned()
}

/// Asserts that `s` still waits on its question: nothing was cancelled, rejected or ended.
async fn assert_still_waiting(api: &Api) {
    let info = api.info("s").await;
    assert_eq!(info["ended"], false, "{info}");
    assert_eq!(info["status"], "awaiting_input", "{info}");
    let events = api.events("s").await;
    assert_eq!(count(&events, "question.resolved"), 0);
    assert_eq!(count(&events, "turn.ended"), 0);
}

/// Rejects the question the ordinary way and lets the turn end.
async fn finish_question(api: &Api, qid: &str) {
    let reply = api
        .post_empty(&format!("/v1/sessions/s/questions/{qid}/reject"))
        .await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    let events = api.wait_turns_ended("s", 1).await;
    assert_well_formed(&events);
}

/// The body-less POSTs a page could fire at the daemon.
fn bodyless_posts(qid: &str) -> Vec<String> {
    vec![
        "/v1/sessions/s/cancel".into(),
        format!("/v1/sessions/s/questions/{qid}/reject"),
        "/v1/sessions/s/terminate".into(),
        "/v1/agents/codebuff/install".into(),
    ]
}

#[tokio::test]
async fn a_bodyless_post_from_another_origin_is_a_403_and_changes_nothing() {
    let api = Api::new();
    let qid = pending_question(&api).await;
    for path in bodyless_posts(&qid) {
        let detail = api
            .post_with(&path, &[("origin", EVIL)], None)
            .await
            .detail(403, "origin_not_allowed");
        assert!(
            detail.contains(EVIL) && detail.contains("--cors-allow-origin"),
            "{path}: {detail}"
        );
        assert_still_waiting(&api).await;
    }
    finish_question(&api, &qid).await;
    api.close().await;
}

#[tokio::test]
async fn a_cross_site_post_without_an_origin_is_a_403_by_its_fetch_metadata() {
    let api = Api::new();
    let qid = pending_question(&api).await;
    for site in ["cross-site", "same-site"] {
        for path in bodyless_posts(&qid) {
            api.post_with(&path, &[("sec-fetch-site", site)], None)
                .await
                .problem(403, "origin_not_allowed");
            assert_still_waiting(&api).await;
        }
    }
    finish_question(&api, &qid).await;
    api.close().await;
}

#[tokio::test]
async fn a_create_from_another_origin_is_a_403_and_creates_nothing() {
    let api = Api::new();
    api.post_with(
        "/v1/sessions/x",
        &[("origin", EVIL)],
        Some(json!({"agent": "mock"})),
    )
    .await
    .problem(403, "origin_not_allowed");
    api.assert_no_session("x").await;
    api.close().await;
}

#[tokio::test]
async fn a_post_from_an_origin_cors_allows_reaches_the_route() {
    let api = Api::with(
        HttpOptions {
            cors_allow_origins: vec!["https://app.example".into()],
            ..options()
        },
        false,
    );
    let qid = pending_question(&api).await;
    let from_app = [("origin", "https://app.example")];
    let reply = api
        .post_with(
            &format!("/v1/sessions/s/questions/{qid}/reject"),
            &from_app,
            None,
        )
        .await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    api.wait_turns_ended("s", 1).await;
    let reply = api
        .post_with("/v1/sessions/s/terminate", &from_app, None)
        .await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(api.info("s").await["ended"], true);
    api.close().await;
}

#[tokio::test]
async fn a_post_from_the_daemons_own_origin_reaches_the_route() {
    let api = Api::new();
    api.create("s").await;
    let reply = api
        .post_with(
            "/v1/sessions/s/terminate",
            &[
                ("origin", "http://127.0.0.1:2468"),
                ("sec-fetch-site", "same-origin"),
            ],
            None,
        )
        .await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(api.info("s").await["ended"], true);
    api.close().await;
}

#[tokio::test]
async fn a_post_without_origin_from_a_client_that_is_not_a_browser_reaches_the_route() {
    let api = Api::new();
    api.create("s").await;
    for path in ["/v1/sessions/s/cancel", "/v1/sessions/s/terminate"] {
        let reply = api.post_with(path, &[], None).await;
        assert_eq!(reply.status, 204, "{path}: {}", reply.text());
    }
    assert_eq!(api.info("s").await["ended"], true);
    api.close().await;
}
