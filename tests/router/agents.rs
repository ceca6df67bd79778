//! The agents, their modes, models and install, and the OpenAPI document.

use super::*;

// ----- agents -------------------------------------------------------------------------------

#[tokio::test]
async fn agents_are_listed_with_exactly_the_capability_flags_they_have() {
    let api = Api::new();
    let body = api.get("/v1/agents").await.json(200);
    let agents = body["agents"].as_array().expect("agents array");
    let ids: Vec<&str> = agents.iter().filter_map(|a| a["id"].as_str()).collect();
    assert_eq!(ids, vec!["codebuff", "mock"]);
    let mut flags = vec![
        "planMode",
        "permissions",
        "questions",
        "toolCalls",
        "toolResults",
        "textMessages",
        "images",
        "fileAttachments",
        "sessionLifecycle",
        "errorEvents",
        "reasoning",
        "status",
        "commandExecution",
        "fileChanges",
        "mcpTools",
        "streamingDeltas",
        "itemStarted",
        "variants",
        "sharedProcess",
    ];
    flags.sort_unstable();
    for a in agents {
        assert!(a["installed"].is_boolean(), "{a}");
        assert!(a["credentialsAvailable"].is_boolean(), "{a}");
        let caps = a["capabilities"].as_object().expect("capabilities");
        let mut keys: Vec<&str> = caps.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, flags, "{}: exactly the 19 flags", a["id"]);
        assert!(caps.values().all(Value::is_boolean), "{a}");
        // Truthful: both ask questions, stream deltas, call tools and gate them.
        for on in [
            "questions",
            "streamingDeltas",
            "toolCalls",
            "textMessages",
            "permissions",
        ] {
            assert_eq!(caps[on], true, "{}: {on}", a["id"]);
        }
    }
    let mock = &agents[1];
    assert_eq!(mock["installed"], true);
    assert_eq!(mock["credentialsAvailable"], true);
    api.close().await;
}

#[tokio::test]
async fn every_agent_has_the_four_modes_and_a_model_list() {
    let api = Api::new();
    for agent in ["codebuff", "mock"] {
        let modes = api
            .get(&format!("/v1/agents/{agent}/modes"))
            .await
            .json(200);
        let modes = modes["modes"].as_array().expect("modes");
        let ids: Vec<&str> = modes.iter().filter_map(|m| m["id"].as_str()).collect();
        assert_eq!(ids, vec!["build", "free", "max", "plan"]);
        for m in modes {
            assert!(m["name"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
            assert!(
                m["description"].as_str().is_some_and(|s| !s.is_empty()),
                "{m}"
            );
        }
        let models = api
            .get(&format!("/v1/agents/{agent}/models"))
            .await
            .json(200);
        assert!(models["models"].is_array(), "{models}");
        for m in models["models"].as_array().unwrap() {
            assert!(m["id"].is_string(), "{m}");
        }
    }
    let models = api.get("/v1/agents/mock/models").await.json(200);
    assert_eq!(models["defaultModel"], "mock");
    assert_eq!(models["models"][0]["id"], "mock");
    api.close().await;
}

#[tokio::test]
async fn an_unknown_agents_modes_models_and_install_are_400_problems() {
    let api = Api::new();
    for path in [
        "/v1/agents/claude/modes",
        "/v1/agents/claude/models",
        "/v1/agents/amp/modes",
    ] {
        let p = api.get(path).await.problem(400, "unsupported_agent");
        assert!(p["agent"].is_string(), "{p}");
    }
    let p = api
        .post_empty("/v1/agents/claude/install")
        .await
        .problem(400, "unsupported_agent");
    assert_eq!(p["agent"], "claude");
    api.close().await;
}

#[tokio::test]
async fn installing_the_mock_takes_no_body_an_empty_object_or_reinstall() {
    let api = Api::new();
    let reply = api.post_empty("/v1/agents/mock/install").await;
    assert_eq!(reply.status, 204);
    assert_eq!(reply.text(), "");
    for body in [json!({"reinstall": true}), json!({})] {
        let reply = api.post("/v1/agents/mock/install", body.clone()).await;
        assert_eq!(reply.status, 204, "{body}");
    }
    api.close().await;
}

// ----- the OpenAPI document -----------------------------------------------------------------

#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let api = Api::new();
    let doc = api.get("/v1/openapi.json").await.json(200);
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "openapi version: {}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string());
    let spec = [
        ("get", "/v1/health"),
        ("get", "/v1/agents"),
        ("post", "/v1/agents/{agent}/install"),
        ("get", "/v1/agents/{agent}/modes"),
        ("get", "/v1/agents/{agent}/models"),
        ("get", "/v1/sessions"),
        ("post", "/v1/sessions/{id}"),
        ("get", "/v1/sessions/{id}"),
        ("post", "/v1/sessions/{id}/messages"),
        ("post", "/v1/sessions/{id}/messages/stream"),
        ("post", "/v1/sessions/{id}/terminate"),
        ("post", "/v1/sessions/{id}/cancel"),
        ("get", "/v1/sessions/{id}/events"),
        ("get", "/v1/sessions/{id}/events/sse"),
        ("post", "/v1/sessions/{id}/questions/{question_id}/reply"),
        ("post", "/v1/sessions/{id}/questions/{question_id}/reject"),
        (
            "post",
            "/v1/sessions/{id}/permissions/{permission_id}/reply",
        ),
        ("get", "/v1/openapi.json"),
    ];
    let paths = doc["paths"].as_object().expect("paths");
    for (method, path) in spec {
        let op = &paths
            .get(path)
            .unwrap_or_else(|| panic!("{path} missing; have {:?}", paths.keys()))[method];
        assert!(op.is_object(), "{method} {path} missing");
        assert!(op["responses"].is_object(), "{method} {path}: responses");
    }
    let ops: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert!(ops >= spec.len());
    // The problem document is described.
    assert!(doc["components"]["schemas"]["Problem"].is_object());
    api.close().await;
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let api = Api::new();
    let doc = api.get("/v1/openapi.json").await.json(200);
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for method in ops.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "nosuch")
                .replace("{agent}", "mock")
                .replace("{question_id}", "q")
                .replace("{permission_id}", "p");
            let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let req = api.request(m, &concrete).body(Body::empty()).unwrap();
            let reply = api.send(req).await;
            let text = reply.text();
            assert!(
                !text.contains("urn:sandbox-agent:error:not_found")
                    && !text.contains("method_not_allowed"),
                "{method} {path} is documented but not routed: {} {text}",
                reply.status
            );
        }
    }
    api.close().await;
}
