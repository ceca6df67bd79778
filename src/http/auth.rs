//! Token authentication: `Authorization: Bearer <T>`, `Token <T>`, or Basic with the token as
//! the password; compared in constant time. `GET /v1/health` never needs it. A WebSocket
//! upgrade (which browsers cannot give an `Authorization` header) may instead offer the
//! subprotocol `bearer.<T>` in `Sec-WebSocket-Protocol`; a token is never read from the URL.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;
use super::AppState;

/// The paths answered without a token (orchestrators poll health before they have one).
pub const OPEN_PATHS: [&str; 1] = ["/v1/health"];

/// Rejects requests without the daemon's token (when one is set).
pub async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = state.token.as_deref() else {
        return next.run(req).await;
    };
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(presented_token)
        .or_else(|| protocol_token(req.headers()));
    match given {
        Some(t) if constant_time_eq(t.as_bytes(), expected.as_bytes()) => next.run(req).await,
        Some(_) => Problem::new(
            "token_invalid",
            StatusCode::UNAUTHORIZED,
            "the token is wrong",
        )
        .into_response(),
        None => Problem::new(
            "token_invalid",
            StatusCode::UNAUTHORIZED,
            "missing token: send `Authorization: Bearer <token>`",
        )
        .into_response(),
    }
}

/// The token a WebSocket upgrade offers as its `bearer.<token>` subprotocol.
fn protocol_token(headers: &axum::http::HeaderMap) -> Option<String> {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        return None;
    }
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix("bearer."))
        .map(str::to_owned)
}

/// The token an `Authorization` value carries.
fn presented_token(value: &str) -> Option<String> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    match scheme.to_ascii_lowercase().as_str() {
        "bearer" | "token" => Some(rest.to_owned()),
        "basic" => {
            let decoded = decode_base64(rest)?;
            let text = String::from_utf8(decoded).ok()?;
            let (_, password) = text.split_once(':')?;
            Some(password.to_owned())
        }
        _ => None,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 (with or without padding).
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_schemes_present_the_token() {
        assert_eq!(presented_token("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(presented_token("Token abc").as_deref(), Some("abc"));
        // "user:abc"
        assert_eq!(
            presented_token("Basic dXNlcjphYmM=").as_deref(),
            Some("abc")
        );
        assert_eq!(presented_token("Digest abc"), None);
        assert_eq!(presented_token("Basic !!!"), None);
    }

    #[test]
    fn websocket_upgrades_may_offer_the_token_as_a_subprotocol() {
        use axum::http::{HeaderMap, HeaderValue};
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("codebuff, bearer.s3cret"),
        );
        // Only on an upgrade.
        assert_eq!(protocol_token(&h), None);
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(protocol_token(&h).as_deref(), Some("s3cret"));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("codebuff"),
        );
        assert_eq!(protocol_token(&h), None);
    }

    #[test]
    fn comparison_needs_equal_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
