//! The inspector's files (`/ui/`, `src/http/ui.rs`): served without a token but behind the Host
//! allow-list, each with its content type and the page's protections (CSP, nosniff, no
//! referrer, no framing), revalidated by ETag; unknown names are 404 problems. Also the one
//! thing `/v1` gained for it: a session's `firstPrompt`.

use super::*;
use codebuffd::http::{inspector_bytes, inspector_files, INSPECTOR_CSP};

/// Asserts the headers every inspector answer carries.
fn assert_protected(reply: &Reply) {
    let what = &reply.what;
    assert_eq!(
        reply.header("content-security-policy"),
        Some(INSPECTOR_CSP),
        "{what}"
    );
    assert_eq!(
        reply.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(
        reply.header("referrer-policy"),
        Some("no-referrer"),
        "{what}"
    );
    assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{what}");
}

#[tokio::test]
async fn the_page_is_served_at_ui_with_its_protections() {
    let api = Api::new();
    let reply = api.get("/ui/").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_protected(&reply);
    let html = reply.text();
    assert!(html.contains(r#"<script type="module" src="./app.js"></script>"#));
    // Nothing inline for the CSP to refuse, nothing from elsewhere.
    assert_eq!(html.matches("<script").count(), 1, "one script, by src");
    for inline in [
        "<style",
        " style=",
        " onclick=",
        " onload=",
        "javascript:",
        "//cdn",
    ] {
        assert!(!html.contains(inline), "{inline} in index.html");
    }
    // The policy itself: only this origin, no inline code, Trusted Types required.
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(INSPECTOR_CSP.contains(directive), "{directive}");
    }
    assert!(!INSPECTOR_CSP.contains("unsafe"), "{INSPECTOR_CSP}");
    api.close().await;
}

#[tokio::test]
async fn every_file_has_its_content_type_and_the_sizes_add_up() {
    let api = Api::new();
    let mut total = 0;
    for name in inspector_files() {
        let reply = api.get(&format!("/ui/{name}")).await;
        assert_eq!(reply.status, 200, "{name}");
        let expected = match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("html") => "text/html; charset=utf-8",
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected file type {other:?}"),
        };
        assert_eq!(reply.header("content-type"), Some(expected), "{name}");
        assert_eq!(reply.header("cache-control"), Some("no-cache"), "{name}");
        assert!(reply.header("etag").is_some(), "{name}");
        assert_protected(&reply);
        // Modules import only sibling modules; nothing is loaded from another origin.
        let text = reply.text();
        for line in text
            .lines()
            .filter(|l| l.trim_start().starts_with("import "))
        {
            assert!(line.contains("from './"), "{name}: {line}");
        }
        assert!(!text.contains("@import"), "{name}");
        total += reply.body.len();
    }
    assert_eq!(total, inspector_bytes());
    // It stays small, and docs/inspector.md states its size.
    assert!(total < 160 * 1024, "the page grew to {total} bytes");
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/inspector.md"))
        .expect("docs/inspector.md");
    let stated = format!("{} files, {} bytes in all", inspector_files().count(), {
        let digits = total.to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        grouped
    });
    assert!(
        doc.contains(&stated),
        "docs/inspector.md must say the page's size: \"{stated}\""
    );
    api.close().await;
}

#[tokio::test]
async fn a_file_the_client_has_is_a_304() {
    let api = Api::new();
    let first = api.get("/ui/app.js").await;
    let etag = first.header("etag").expect("an etag").to_owned();
    let req = api
        .request(Method::GET, "/ui/app.js")
        .header(header::IF_NONE_MATCH, &etag)
        .body(Body::empty())
        .unwrap();
    let again = api.send(req).await;
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_protected(&again);
    // Another file's tag does not match.
    let css_tag = api
        .get("/ui/style.css")
        .await
        .header("etag")
        .unwrap()
        .to_owned();
    assert_ne!(css_tag, etag);
    api.close().await;
}

#[tokio::test]
async fn ui_without_its_slash_redirects_and_unknown_files_are_404_problems() {
    let api = Api::new();
    let reply = api.get("/ui").await;
    assert_eq!(reply.status, 308);
    assert_eq!(reply.header("location"), Some("/ui/"));
    for path in [
        "/ui/nope.js",
        "/ui/a/b.css",
        "/ui/..%2FCargo.toml",
        "/ui/index.html/",
    ] {
        let reply = api.get(path).await;
        reply.problem(404, "not_found");
        assert_protected(&reply);
    }
    // The page is read-only.
    let reply = api.post_empty("/ui/").await;
    reply.problem(405, "method_not_allowed");
    api.close().await;
}

#[tokio::test]
async fn the_page_needs_no_token_but_v1_still_does() {
    let api = Api::with(
        HttpOptions {
            token: Some("ui-t0ken".into()),
            ..options()
        },
        false,
    );
    assert_eq!(api.get("/ui/").await.status, 200);
    assert_eq!(api.get("/ui/api.js").await.status, 200);
    api.get("/v1/sessions").await.problem(401, "token_invalid");
    api.close().await;
}

#[tokio::test]
async fn the_page_obeys_the_host_allow_list() {
    let api = Api::new();
    let req = Request::builder()
        .uri("/ui/")
        .header(header::HOST, "evil.example")
        .body(Body::empty())
        .unwrap();
    api.send(req).await.problem(421, "host_not_allowed");
    let req = Request::builder()
        .uri("/ui/app.js")
        .header(header::HOST, "localhost:2468")
        .body(Body::empty())
        .unwrap();
    assert_eq!(api.send(req).await.status, 200);
    api.close().await;
}

#[tokio::test]
async fn a_session_shows_its_first_prompt_once_a_turn_began() {
    let api = Api::new();
    api.create("s1").await;
    let info = api.info("s1").await;
    assert!(info.get("firstPrompt").is_none(), "{info}");
    api.message("s1", "echo  fix\n\tthe build").await;
    api.wait_turns_ended("s1", 1).await;
    api.message("s1", "echo a later prompt").await;
    api.wait_turns_ended("s1", 2).await;
    assert_eq!(api.info("s1").await["firstPrompt"], "echo fix the build");
    let list = api.get("/v1/sessions").await.json(200);
    assert_eq!(list["sessions"][0]["firstPrompt"], "echo fix the build");
    api.close().await;
}
