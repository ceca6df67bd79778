//! Request bodies, query strings, paths and routes, question and permission replies: each refused
//! with its problem document.

use super::*;

// ----- request bodies -----------------------------------------------------------------------

/// A daemon taking bodies of 2048 bytes at most (`--max-body-bytes 2048`).
fn small_bodies() -> Api {
    Api::with(
        HttpOptions {
            max_body_bytes: 2048,
            ..options()
        },
        false,
    )
}

#[tokio::test]
async fn a_malformed_json_body_is_a_400_problem_with_the_parsers_message() {
    let api = Api::new();
    api.create("s1").await;
    for path in ["/v1/sessions/new1", "/v1/sessions/s1/messages"] {
        let reply = api
            .post_raw(path, Some("application/json"), "{\"agent\": ")
            .await;
        let detail = reply.detail(400, "invalid_request");
        assert!(detail.contains("EOF while parsing"), "{path}: {detail}");
    }
    api.assert_no_session("new1").await;
    api.close().await;
}

#[tokio::test]
async fn a_malformed_install_body_is_a_400_problem() {
    let api = Api::new();
    let reply = api
        .post_raw("/v1/agents/mock/install", Some("application/json"), "{nope")
        .await;
    let detail = reply.detail(400, "invalid_request");
    assert!(detail.contains("key must be a string"), "{detail}");
    api.close().await;
}

#[tokio::test]
async fn a_body_of_the_wrong_shape_is_a_422_problem() {
    let api = Api::new();
    api.create("s1").await;
    let reply = api
        .post("/v1/sessions/s1/messages", json!({"message": 5}))
        .await;
    let detail = reply.detail(422, "invalid_request");
    assert!(detail.contains("invalid type: integer `5`"), "{detail}");
    for (path, body) in [
        ("/v1/sessions/new2", json!({"agent": ["mock"]})),
        (
            "/v1/sessions/s1/questions/q1/reply",
            json!({"answers": "yes"}),
        ),
        ("/v1/sessions/s1/messages", json!([1, 2])),
    ] {
        api.post(path, body).await.problem(422, "invalid_request");
    }
    api.assert_no_session("new2").await;
    api.close().await;
}

#[tokio::test]
async fn a_missing_or_wrong_content_type_is_a_415_problem() {
    let api = Api::new();
    api.create("s1").await;
    let msg = json!({"message": "echo x"}).to_string();
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let reply = api
            .post_raw("/v1/sessions/s1/messages", ct, msg.clone())
            .await;
        let detail = reply.detail(415, "invalid_request");
        assert!(detail.contains("application/json"), "{ct:?}: {detail}");
    }
    assert_eq!(api.info("s1").await["turns"], 0, "no message was taken");
    api.close().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413_problem() {
    let api = small_bodies();
    api.create("s1").await;
    let big = json!({"message": "echo ".to_owned() + &"x".repeat(4096)});
    api.post("/v1/sessions/s1/messages", big)
        .await
        .problem(413, "payload_too_large");
    api.post(
        "/v1/sessions/big",
        json!({"agent": "mock", "title": "t".repeat(4096)}),
    )
    .await
    .problem(413, "payload_too_large");
    let pad = format!(
        "{{\"reinstall\": false, \"pad\": \"{}\"}}",
        "p".repeat(4096)
    );
    api.post_raw("/v1/agents/mock/install", Some("application/json"), pad)
        .await
        .problem(413, "payload_too_large");
    api.assert_no_session("big").await;
    api.close().await;
}

#[tokio::test]
async fn a_body_just_under_the_limit_is_taken_and_its_turn_runs() {
    let api = small_bodies();
    api.create("s1").await;
    api.message("s1", &("echo ".to_owned() + &"y".repeat(1500)))
        .await;
    let events = api.wait_turns_ended("s1", 1).await;
    assert_well_formed(&events);
    assert_eq!(turn_ends(&events)[0]["status"], "completed");
    assert_eq!(
        api.get("/v1/health").await.json(200),
        json!({"status": "ok"})
    );
    api.close().await;
}

#[tokio::test]
async fn an_empty_message_is_a_400_problem() {
    let api = Api::new();
    api.create("s1").await;
    api.post("/v1/sessions/s1/messages", json!({"message": "  "}))
        .await
        .problem(400, "invalid_request");
    api.close().await;
}

// ----- queries, paths, routes ---------------------------------------------------------------

#[tokio::test]
async fn a_bad_query_string_is_a_400_problem() {
    let api = Api::new();
    api.create("s1").await;
    for q in [
        "/v1/sessions/s1/events?offset=abc",
        "/v1/sessions/s1/events?limit=-1",
        "/v1/sessions/s1/events?includeRaw=maybe",
        "/v1/sessions/s1/events/sse?offset=x",
        "/v1/sessions/s1/events.jsonl?includeRaw=2",
    ] {
        let detail = api.get(q).await.detail(400, "invalid_request");
        assert!(detail.contains("query string"), "{q}: {detail}");
    }
    api.close().await;
}

#[tokio::test]
async fn a_last_event_id_that_is_not_a_number_is_a_400_problem() {
    let api = Api::new();
    api.create("s1").await;
    let req = api
        .request(Method::GET, "/v1/sessions/s1/events/sse")
        .header("last-event-id", "not-a-number")
        .body(Body::empty())
        .unwrap();
    api.send(req).await.problem(400, "invalid_request");
    api.close().await;
}

#[tokio::test]
async fn every_route_of_an_unknown_session_is_a_404_problem() {
    let api = Api::new();
    for (method, path, body) in routes("ghost") {
        if !path.starts_with("/v1/sessions/ghost") {
            continue;
        }
        let mut req = api.request(method.clone(), &path);
        let body = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        let p = api
            .send(req.body(body).unwrap())
            .await
            .problem(404, "session_not_found");
        assert_eq!(p["sessionId"], "ghost", "{method} {path}");
    }
    api.close().await;
}

#[tokio::test]
async fn a_path_segment_that_is_not_utf8_is_a_400_problem() {
    let api = Api::new();
    api.create("s1").await;
    for (method, path) in [
        (Method::GET, "/v1/sessions/%FF"),
        (Method::GET, "/v1/sessions/%FF/events"),
        (Method::GET, "/v1/sessions/%C3%28/events/sse"),
        (Method::POST, "/v1/sessions/s1/questions/%FE/reject"),
        (Method::GET, "/v1/agents/%FF/modes"),
    ] {
        let req = api.request(method, path).body(Body::empty()).unwrap();
        let detail = api.send(req).await.detail(400, "invalid_request");
        assert!(detail.contains("UTF-8"), "{path}: {detail}");
    }
    api.close().await;
}

#[tokio::test]
async fn an_unknown_route_is_a_404_problem() {
    let api = Api::new();
    for path in [
        "/v1/nothing",
        "/v2/health",
        "/",
        "/v1/sessions/s1/events/extra",
    ] {
        let p = api.get(path).await.problem(404, "not_found");
        assert_eq!(p["title"], "Not found");
    }
    api.close().await;
}

#[tokio::test]
async fn a_method_a_route_does_not_take_is_a_405_problem() {
    let api = Api::new();
    api.create("s1").await;
    let req = api
        .request(Method::PUT, "/v1/sessions/s1")
        .body(Body::empty())
        .unwrap();
    api.send(req).await.problem(405, "method_not_allowed");
    let req = api
        .request(Method::DELETE, "/v1/sessions/s1/events")
        .body(Body::empty())
        .unwrap();
    api.send(req).await.problem(405, "method_not_allowed");
    api.close().await;
}

#[tokio::test]
async fn a_session_id_that_cannot_be_is_a_400_problem() {
    let api = Api::new();
    api.post(
        &format!("/v1/sessions/{}", "i".repeat(300)),
        json!({"agent": "mock"}),
    )
    .await
    .problem(400, "invalid_request");
    assert_eq!(
        api.get("/v1/sessions").await.json(200)["sessions"],
        json!([])
    );
    api.close().await;
}

// ----- questions and permissions ------------------------------------------------------------

#[tokio::test]
async fn a_permission_reply_is_a_400_problem_as_none_is_ever_pending() {
    let api = Api::new();
    api.create("s1").await;
    for body in [
        json!({"reply": "once"}),
        json!({"reply": "always"}),
        json!({"reply": "maybe"}),
        json!({}),
    ] {
        let p = api
            .post("/v1/sessions/s1/permissions/p1/reply", body.clone())
            .await
            .problem(400, "invalid_request");
        assert_eq!(p["sessionId"], "s1", "{body}");
    }
    api.close().await;
}

#[tokio::test]
async fn an_unknown_question_is_a_400_problem() {
    let api = Api::new();
    api.create("s1").await;
    api.post(
        "/v1/sessions/s1/questions/q-unknown/reply",
        json!({"answers": [["x"]]}),
    )
    .await
    .problem(400, "invalid_request");
    api.post_empty("/v1/sessions/s1/questions/q-unknown/reject")
        .await
        .problem(400, "invalid_request");
    api.close().await;
}
