//! Standard Webhooks signing secrets (`whsec_` + base64 of 24 to 64 random bytes) and the
//! signature of a delivery: `v1,` + base64 of HMAC-SHA256 over `"{id}.{timestamp}.{body}"`.
//!
//! A secret never leaves this type in text: its `Debug` is redacted, and nothing else prints it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a Standard Webhooks secret.
const PREFIX: &str = "whsec_";
/// The key sizes the specification asks for.
const MIN_KEY: usize = 24;
const MAX_KEY: usize = 64;

/// A signing key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// Parses `whsec_<base64>` (the prefix may be left out, as the official libraries allow).
    /// The error never quotes the secret.
    pub fn parse(text: &str) -> Result<Secret, String> {
        let text = text.trim();
        let encoded = text.strip_prefix(PREFIX).unwrap_or(text);
        let key = STANDARD.decode(encoded).map_err(|_| {
            "a webhook secret must be `whsec_` followed by base64 (the Standard Webhooks format)"
                .to_owned()
        })?;
        if !(MIN_KEY..=MAX_KEY).contains(&key.len()) {
            return Err(format!(
                "a webhook secret must hold {MIN_KEY} to {MAX_KEY} bytes (it holds {}); make one with `openssl rand -base64 32` and prefix it with whsec_",
                key.len()
            ));
        }
        Ok(Secret(key))
    }

    /// The signature of one delivery: `v1,<base64>`.
    pub fn sign(&self, webhook_id: &str, timestamp: i64, body: &[u8]) -> String {
        // HMAC takes keys of any length.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => return String::new(),
        };
        mac.update(webhook_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header: one signature per secret, space-separated (several while
/// a secret is being rotated; a receiver accepts any one it knows).
pub fn signature_header(
    secrets: &[Secret],
    webhook_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|s| s.sign(webhook_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        // The example of the Standard Webhooks specification's reference libraries.
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn bad_secrets_are_refused_without_being_quoted() {
        for bad in ["whsec_not base64!", "whsec_c2hvcnQ=", "hunter2"] {
            let error = Secret::parse(bad).unwrap_err();
            assert!(!error.contains(bad.trim_start_matches("whsec_")), "{error}");
        }
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
    }

    #[test]
    fn rotation_signs_with_every_secret() {
        let a = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let b = Secret::parse(&format!("whsec_{}", STANDARD.encode([7u8; 32]))).unwrap();
        let header = signature_header(&[a.clone(), b], "msg_1", 1, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], a.sign("msg_1", 1, b"{}"));
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
    }
}
