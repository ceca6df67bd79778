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
        .refuse_create("c1", json!({"agent": "claude"}), 400, "unsupported_agent")
        .await;
    assert_eq!(p["agent"], "claude");
    api.close().await;
}

#[tokio::test]
async fn an_unknown_agent_mode_is_a_400_problem_naming_it() {
    let api = Api::new();
    let body = json!({"agent": "mock", "agentMode": "turbo"});
    let p = api
        .refuse_create("c2", body, 400, "mode_not_supported")
        .await;
    assert!(p["detail"].as_str().unwrap().contains("turbo"), "{p}");
    api.close().await;
}

#[tokio::test]
async fn a_permission_mode_other_than_bypass_is_a_400_problem_naming_it() {
    let api = Api::new();
    let body = json!({"agent": "codebuff", "permissionMode": "ask"});
    let p = api
        .refuse_create("c3", body, 400, "mode_not_supported")
        .await;
    assert!(p["detail"].as_str().unwrap().contains("ask"), "{p}");
    api.close().await;
}

#[tokio::test]
async fn a_directory_that_does_not_exist_is_a_400_problem_naming_it() {
    let api = Api::new();
    let missing = api.work.path().join("does-not-exist");
    let body = json!({"agent": "mock", "directory": missing});
    let p = api.refuse_create("c4", body, 400, "invalid_request").await;
    assert!(
        p["detail"].as_str().unwrap().contains("does-not-exist"),
        "{p}"
    );
    api.close().await;
}

#[tokio::test]
async fn a_file_as_the_directory_is_a_400_problem() {
    let api = Api::new();
    let file = api.work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let body = json!({"agent": "mock", "directory": file});
    api.refuse_create("c5", body, 400, "invalid_request").await;
    api.close().await;
}

#[tokio::test]
async fn creating_a_session_without_an_agent_is_a_422_problem() {
    let api = Api::new();
    let body = json!({"directory": api.work.path()});
    api.refuse_create("c6", body, 422, "invalid_request").await;
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
    let body = json!({"agent": "mock", "model": "mock\u{0}x"});
    let p = api.refuse_create("m1", body, 400, "invalid_request").await;
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("`model`") && detail.contains("NUL"),
        "{detail}"
    );
    api.close().await;
}

#[tokio::test]
async fn an_env_value_over_128_kib_is_a_400_problem() {
    let api = Api::new();
    let body = json!({"agent": "mock", "env": {"BIG": "x".repeat(129 * 1024)}});
    let p = api.refuse_create("e1", body, 400, "invalid_request").await;
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("BIG") && detail.contains("too long"),
        "{detail}"
    );
    api.close().await;
}

#[tokio::test]
async fn a_loader_variable_in_env_is_a_400_problem_naming_the_opt_in() {
    let api = Api::new();
    for (id, name, value) in [
        ("l1", "LD_PRELOAD", "/tmp/evil.so"),
        ("l2", "NODE_OPTIONS", "--require /tmp/evil.js"),
    ] {
        let body = json!({"agent": "mock", "env": {name: value}});
        let p = api.refuse_create(id, body, 400, "invalid_request").await;
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains(name) && detail.contains("--allow-loader-env"),
            "{name}: {detail}"
        );
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
