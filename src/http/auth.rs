//! Token authentication: `Authorization: Bearer <T>`, `Token <T>`, or Basic with the token as
//! the password; compared in constant time. `GET /v1/health` never needs it.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;
use super::AppState;

/// Rejects requests without the daemon's token (when one is set).
pub async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = state.token.as_deref() else {
        return next.run(req).await;
    };
    if req.uri().path() == "/v1/health" {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(presented_token);
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
    fn comparison_needs_equal_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
