//! Creating sessions: what is refused (with its problem document, leaving no session behind), and
//! ordinary input that could not reach an agent whole (NUL characters, oversized or loader
//! variables in `env`).

use super::*;

// ----- creating sessions --------------------------------------------------------------------

#[tokio::test]
async fn creating_a_session_that_exists_is_a_409_problem() {
    let api = Api::new();
    api.create("s1").await;
    let p = api
        .post("/v1/sessions/s1", json!({"agent": "mock"}))
        .await
        .problem(409, "session_already_exists");
    assert_eq!(p["sessionId"], "s1");
    api.close().await;
}

#[tokio::test]
async fn creating_a_session_of_an_unknown_agent_is_a_400_problem() {
    let api = Api::new();
    let p = api
        .post("/v1/sessions/c1", json!({"agent": "claude"}))
        .await
        .problem(400, "unsupported_agent");
    assert_eq!(p["agent"], "claude");
    api.assert_no_session("c1").await;
    api.close().await;
}

#[tokio::test]
async fn an_unknown_agent_mode_is_a_400_problem_naming_it() {
    let api = Api::new();
    let detail = api
        .post(
            "/v1/sessions/c2",
            json!({"agent": "mock", "agentMode": "turbo"}),
        )
        .await
        .detail(400, "mode_not_supported");
    assert!(detail.contains("turbo"), "{detail}");
    api.assert_no_session("c2").await;
    api.close().await;
}

#[tokio::test]
async fn a_permission_mode_other_than_bypass_is_a_400_problem_naming_it() {
    let api = Api::new();
    let detail = api
        .post(
            "/v1/sessions/c3",
            json!({"agent": "codebuff", "permissionMode": "ask"}),
        )
        .await
        .detail(400, "mode_not_supported");
    assert!(detail.contains("ask"), "{detail}");
    api.assert_no_session("c3").await;
    api.close().await;
}

#[tokio::test]
async fn a_directory_that_does_not_exist_is_a_400_problem_naming_it() {
    let api = Api::new();
    let missing = api.work.path().join("does-not-exist");
    let detail = api
        .post(
            "/v1/sessions/c4",
            json!({"agent": "mock", "directory": missing}),
        )
        .await
        .detail(400, "invalid_request");
    assert!(detail.contains("does-not-exist"), "{detail}");
    api.assert_no_session("c4").await;
    api.close().await;
}

#[tokio::test]
async fn a_file_as_the_directory_is_a_400_problem() {
    let api = Api::new();
    let file = api.work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    api.post(
        "/v1/sessions/c5",
        json!({"agent": "mock", "directory": file}),
    )
    .await
    .problem(400, "invalid_request");
    api.assert_no_session("c5").await;
    api.close().await;
}

#[tokio::test]
async fn creating_a_session_without_an_agent_is_a_422_problem() {
    let api = Api::new();
    api.post("/v1/sessions/c6", json!({"directory": api.work.path()}))
        .await
        .problem(422, "invalid_request");
    api.assert_no_session("c6").await;
    api.close().await;
}

// ----- ordinary input that cannot reach an agent whole --------------------------------------

#[tokio::test]
async fn a_nul_character_in_a_message_is_a_400_problem_and_the_session_takes_the_next() {
    let api = Api::new();
    api.create("s1").await;
    for path in [
        "/v1/sessions/s1/messages",
        "/v1/sessions/s1/messages/stream",
    ] {
        let detail = api
            .post(path, json!({"message": "echo a\u{0}b"}))
            .await
            .detail(400, "invalid_request");
        assert!(detail.contains("NUL"), "{path}: {detail}");
    }
    api.message("s1", "echo ok").await;
    let events = api.wait_turns_ended("s1", 1).await;
    assert_eq!(
        count(&events, "turn.ended"),
        1,
        "the refused messages ran no turn"
    );
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_eq!(assistant_texts(&events), vec!["ok"]);
    assert_eq!(api.info("s1").await["ended"], false);
    assert_well_formed(&events);
    api.close().await;
}

#[tokio::test]
async fn a_nul_character_in_the_model_is_a_400_problem() {
    let api = Api::new();
    let detail = api
        .post(
            "/v1/sessions/m1",
            json!({"agent": "mock", "model": "mock\u{0}x"}),
        )
        .await
        .detail(400, "invalid_request");
    assert!(
        detail.contains("`model`") && detail.contains("NUL"),
        "{detail}"
    );
    api.assert_no_session("m1").await;
    api.close().await;
}

#[tokio::test]
async fn an_env_value_over_128_kib_is_a_400_problem() {
    let api = Api::new();
    let detail = api
        .post(
            "/v1/sessions/e1",
            json!({"agent": "mock", "env": {"BIG": "x".repeat(129 * 1024)}}),
        )
        .await
        .detail(400, "invalid_request");
    assert!(
        detail.contains("BIG") && detail.contains("too long"),
        "{detail}"
    );
    api.assert_no_session("e1").await;
    api.close().await;
}

#[tokio::test]
async fn a_loader_variable_in_env_is_a_400_problem_naming_the_opt_in() {
    let api = Api::new();
    for (id, name, value) in [
        ("l1", "LD_PRELOAD", "/tmp/evil.so"),
        ("l2", "NODE_OPTIONS", "--require /tmp/evil.js"),
    ] {
        let detail = api
            .post(
                &format!("/v1/sessions/{id}"),
                json!({"agent": "mock", "env": {name: value}}),
            )
            .await
            .detail(400, "invalid_request");
        assert!(
            detail.contains(name) && detail.contains("--allow-loader-env"),
            "{name}: {detail}"
        );
        api.assert_no_session(id).await;
    }
    api.close().await;
}

#[tokio::test]
async fn loader_variables_are_taken_when_the_daemon_allows_them() {
    let api = Api::with(options(), true);
    let reply = api
        .post(
            "/v1/sessions/l1",
            json!({"agent": "mock", "env": {"LD_PRELOAD": "", "NODE_OPTIONS": "--no-warnings"}}),
        )
        .await;
    assert_eq!(reply.json(200), json!({"healthy": true}));
    api.close().await;
}
