//! The size limit of `/v1/ws` messages (`--ws-max-frame-bytes`): what can be read of a
//! message over it (its `txid`, a prompt's `promptId`) so the refusal reaches the request that
//! sent it, the close's reason, and the read error of a message too far over it to be read.
//! Pure: tested on plain data (and, end to end, in `tests/ws_real_client.rs`).

use serde::Deserialize;
use serde_json::Value;

/// The close code of a connection that sent a message over the limit (RFC 6455 "message too
/// big").
pub const CLOSE_TOO_BIG: u16 = 1009;

/// How far past the limit a message is still read whole, so that its `txid` (and a prompt's
/// `promptId`) can be answered before the close; larger ones are closed on unread.
pub const READ_PAST_LIMIT: usize = 1024 * 1024;

/// The close code of a connection whose frames could not be read (RFC 6455).
pub const PROTOCOL_ERROR: u16 = 1002;

/// True for the read error of a message over the socket's hard size limit.
pub fn is_capacity(error: &axum::Error) -> bool {
    let text = error.to_string();
    text.contains("Space limit exceeded") || text.contains("too long") || text.contains("too big")
}

/// The reason of a close for a message over the limit.
pub fn too_big_reason(size: Option<usize>, limit: usize) -> String {
    match size {
        Some(size) => format!(
            "message too big: {size} bytes, over the limit of {limit} bytes (--ws-max-frame-bytes)"
        ),
        None => format!("message too big: over the limit of {limit} bytes (--ws-max-frame-bytes)"),
    }
}

/// What can be read of a message too large to take: its `txid`, and a prompt's `promptId`
/// and `sessionId`, so the refusal reaches the request that sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    pub txid: Option<i64>,
    pub prompt_id: Option<String>,
    pub session_id: Option<String>,
}

/// Reads the [`Head`] of a message (empty when it is not a JSON object); skips the rest
/// without keeping it.
pub fn head(text: &str) -> Head {
    #[derive(Deserialize)]
    struct Outer {
        #[serde(default)]
        txid: Option<Value>,
        #[serde(default)]
        data: Option<Data>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Data {
        #[serde(default, rename = "type")]
        kind: Option<Value>,
        #[serde(default)]
        prompt_id: Option<Value>,
        #[serde(default)]
        session_id: Option<Value>,
    }
    let Ok(outer) = serde_json::from_str::<Outer>(text) else {
        return Head::default();
    };
    let text_of = |v: Option<Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    };
    let (prompt_id, session_id) = match outer.data {
        Some(d) if d.kind.as_ref().and_then(Value::as_str) == Some("prompt") => {
            (text_of(d.prompt_id), text_of(d.session_id))
        }
        _ => (None, None),
    };
    Head {
        txid: outer.txid.as_ref().and_then(Value::as_i64),
        prompt_id,
        session_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_of_a_message_names_its_txid_and_prompt() {
        let big = "x".repeat(10_000);
        assert_eq!(
            head(&format!(
                r#"{{"type":"action","txid":7,"data":{{"type":"prompt","promptId":"p9","sessionState":{{"fileContext":"{big}"}},"sessionId":"s"}}}}"#
            )),
            Head {
                txid: Some(7),
                prompt_id: Some("p9".into()),
                session_id: Some("s".into())
            }
        );
        assert_eq!(
            head(r#"{"type":"ping","txid":3}"#),
            Head {
                txid: Some(3),
                ..Head::default()
            }
        );
        assert_eq!(
            head(r#"{"type":"action","txid":"x","data":{"type":"init","promptId":"p"}}"#),
            Head::default()
        );
        assert_eq!(head("[1,2,3]"), Head::default());
        assert_eq!(head(r#"{"txid":5,"data":7}"#), Head::default());
    }

    #[test]
    fn the_reason_names_the_sizes_and_the_flag_and_fits_a_close_frame() {
        let reason = too_big_reason(Some(2_500_000), 2_000_000);
        assert_eq!(
            reason,
            "message too big: 2500000 bytes, over the limit of 2000000 bytes (--ws-max-frame-bytes)"
        );
        assert!(reason.len() <= 123);
        assert!(too_big_reason(None, usize::MAX).len() <= 123);
    }
}
