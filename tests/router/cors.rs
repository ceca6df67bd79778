//! CORS: closed by default, open to the configured origins only.

use super::*;

// ----- CORS ---------------------------------------------------------------------------------

/// A CORS preflight for a POST to `path` from `origin`, asking for every header the API takes.
fn preflight(api: &Api, origin: &str, path: &str) -> Request<Body> {
    api.request(Method::OPTIONS, path)
        .header(header::ORIGIN, origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type,last-event-id",
        )
        .body(Body::empty())
        .unwrap()
}

/// A daemon with a token whose CORS allows `http://a.example` only.
fn cors_api() -> Api {
    Api::with(
        HttpOptions {
            token: Some("cors-token".into()),
            cors_allow_origins: vec!["http://a.example".into()],
            ..options()
        },
        false,
    )
}

/// `GET /v1/agents` from a page at `origin`, with the token or not.
async fn get_agents_from(api: &Api, origin: &str, token: Option<&str>) -> Reply {
    let mut req = api
        .request(Method::GET, "/v1/agents")
        .header(header::ORIGIN, origin);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    api.send(req.body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn cors_is_closed_by_default() {
    let api = Api::new();
    let reply = get_agents_from(&api, "http://a.example", None).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("access-control-allow-origin"), None);
    let reply = api
        .send(preflight(&api, "http://a.example", "/v1/sessions/x"))
        .await;
    assert_eq!(reply.header("access-control-allow-origin"), None);
    assert_eq!(reply.header("access-control-allow-methods"), None);
    api.close().await;
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_allows_the_methods_and_headers_the_api_takes() {
    let api = cors_api();
    for path in ["/v1/sessions/x", "/v1/sessions/x/messages", "/v1/agents"] {
        let reply = api.send(preflight(&api, "http://a.example", path)).await;
        assert!(
            (200..300).contains(&reply.status),
            "{path}: {}",
            reply.status
        );
        assert_eq!(
            reply.header("access-control-allow-origin"),
            Some("http://a.example")
        );
        let methods = reply.header("access-control-allow-methods").unwrap_or("");
        for m in ["GET", "POST"] {
            assert!(methods.contains(m), "{path}: allow-methods {methods}");
        }
        let headers = reply
            .header("access-control-allow-headers")
            .unwrap_or("")
            .to_ascii_lowercase();
        for h in ["authorization", "content-type", "last-event-id"] {
            assert!(headers.contains(h), "{path}: allow-headers {headers}");
        }
    }
    api.close().await;
}

#[tokio::test]
async fn a_preflight_from_another_origin_is_not_allowed() {
    let api = cors_api();
    for origin in [
        "http://b.example",
        "http://a.example.evil",
        "https://a.example",
    ] {
        let reply = api.send(preflight(&api, origin, "/v1/sessions/x")).await;
        assert_eq!(
            reply.header("access-control-allow-origin"),
            None,
            "{origin}"
        );
    }
    api.close().await;
}

#[tokio::test]
async fn only_an_allowed_origin_gets_the_allow_origin_header() {
    let api = cors_api();
    let reply = get_agents_from(&api, "http://a.example", Some("cors-token")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("http://a.example")
    );
    let reply = get_agents_from(&api, "http://b.example", Some("cors-token")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("access-control-allow-origin"), None);
    api.close().await;
}

#[tokio::test]
async fn an_allowed_origin_still_needs_the_token_and_may_read_the_problem() {
    let api = cors_api();
    let reply = get_agents_from(&api, "http://a.example", None).await;
    // The browser may read the error: it carries the allow header too.
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("http://a.example")
    );
    reply.problem(401, "token_invalid");
    api.close().await;
}
