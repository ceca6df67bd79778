//! The inspector: the web page at `/ui/` (`docs/inspector.md`), embedded in the binary.
//!
//! The page is plain ES modules and one style sheet from `ui/` in the checkout, compiled in with
//! `include_bytes!` (no build step, nothing fetched at run time). It is one more client of the
//! public `/v1` API: it lists, follows and steers sessions through the same routes as any
//! orchestrator, so this file only serves bytes.
//!
//! Why the files are open (no token): they are the same public code in every copy of the binary
//! and hold no data; the page asks for the token and sends it to `/v1` itself. What stays: the
//! Host allow-list (the browser guard wraps these routes too) and headers that keep the page from
//! running anything but these files — a strict `Content-Security-Policy` (only this origin's
//! scripts and styles, `connect-src 'self'`, no framing, and Trusted Types required, so no code
//! path of the page can hand a string to an HTML sink), `X-Content-Type-Options: nosniff`,
//! `Referrer-Policy: no-referrer`.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::problem::Problem;

/// One embedded file of the page.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:literal) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../ui/", $name)),
        }
    };
}

/// Every file of the page; `index.html` is served at `/ui/`.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("sse.js", "text/javascript; charset=utf-8"),
    asset!("dom.js", "text/javascript; charset=utf-8"),
    asset!("format.js", "text/javascript; charset=utf-8"),
    asset!("markdown.js", "text/javascript; charset=utf-8"),
    asset!("diff.js", "text/javascript; charset=utf-8"),
    asset!("timeline.js", "text/javascript; charset=utf-8"),
    asset!("view_list.js", "text/javascript; charset=utf-8"),
    asset!("view_create.js", "text/javascript; charset=utf-8"),
    asset!("view_session.js", "text/javascript; charset=utf-8"),
    asset!("view_entries.js", "text/javascript; charset=utf-8"),
    asset!("view_prompts.js", "text/javascript; charset=utf-8"),
];

/// The page's policy: its own scripts, styles, images and `/v1` only; no inline code, no
/// plugins, no forms posting elsewhere, no framing; HTML sinks (`innerHTML`, …) refuse strings.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; \
     trusted-types 'none'";

/// The inspector's routes: `/ui` (redirects), `/ui/` (the page) and `/ui/<file>`.
pub fn routes() -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route(
            "/ui/{*file}",
            get(|Path(file): Path<String>, headers: HeaderMap| async move { serve(&file, &headers) }),
        )
        .method_not_allowed_fallback(read_only)
}

/// Anything but GET and HEAD: the page's files cannot be changed.
async fn read_only() -> Response {
    let mut resp = Problem::new(
        "method_not_allowed",
        StatusCode::METHOD_NOT_ALLOWED,
        "the inspector's files are read-only: GET them",
    )
    .into_response();
    protect(resp.headers_mut());
    resp
}

/// The page's total size in bytes (what `docs/inspector.md` states; a test keeps it honest).
pub fn total_bytes() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// The names of the embedded files.
pub fn file_names() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|a| a.name)
}

/// One file with the page's headers; a 304 when the client has it, a 404 problem (with the
/// same headers) for a name the page does not have.
fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some((asset, etag)) = ASSETS.iter().zip(etags()).find(|(a, _)| a.name == name) else {
        let mut resp = Problem::new(
            "not_found",
            StatusCode::NOT_FOUND,
            format!("the inspector has no file `{name}`"),
        )
        .into_response();
        protect(resp.headers_mut());
        return resp;
    };
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag.as_str()));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let headers = resp.headers_mut();
    protect(headers);
    // Revalidated each time (a new binary has new files), but cheaply: 304 on a match.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    resp
}

/// The headers every inspector response carries.
fn protect(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
}

/// Each asset's strong ETag: a 64-bit FNV-1a hash of its bytes, computed once.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let hash = a.body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
                });
                format!("\"{hash:016x}\"")
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_file_is_named_once_and_has_content() {
        let mut names: Vec<&str> = file_names().collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{}", a.name);
        }
    }

    #[test]
    fn the_page_loads_only_embedded_modules() {
        // Every `./x.js` an embedded file imports or loads is embedded: a missing one would
        // be a 404 only a browser notices.
        for a in ASSETS {
            let text = std::str::from_utf8(a.body).expect("UTF-8");
            for quote in ['"', '\''] {
                for (i, _) in text.match_indices(&format!("{quote}./")) {
                    let rest = &text[i + 3..];
                    let name = &rest[..rest.find(quote).unwrap_or(0)];
                    if name.ends_with(".js") || name.ends_with(".css") || name.ends_with(".svg") {
                        assert!(
                            file_names().any(|n| n == name),
                            "{} refers to {name}, which is not embedded",
                            a.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn etags_differ_between_files() {
        let tags = etags();
        assert_eq!(tags.len(), ASSETS.len());
        assert_ne!(tags[0], tags[1]);
    }
}
