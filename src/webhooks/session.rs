//! A session's own webhooks (`webhooks: [{url, events}]` at creation): allowed only when the
//! daemon says so (`--allow-session-webhooks`), to URLs the SSRF rules accept (`ssrf.rs`),
//! signed with the daemon's secret.

use serde::{Deserialize, Serialize};

use super::ssrf::{check_url, AllowList};
use crate::store::outbox::TypeMask;

/// The most endpoints one session may name.
pub const MAX_SESSION_WEBHOOKS: usize = 8;

/// What the daemon lets sessions ask for.
#[derive(Debug, Clone, Default)]
pub struct SessionWebhookPolicy {
    /// Sessions may name endpoints (and the daemon has a secret to sign with).
    pub allow: bool,
    pub allow_hosts: AllowList,
}

/// An endpoint a session named, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionWebhook {
    pub url: String,
    pub events: TypeMask,
}

/// As a create request and the stored settings say it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionWebhookSpec {
    /// Where to POST the session's events (http or https).
    pub url: String,
    /// The event types to send; default: `question.requested`, `permission.requested`,
    /// `turn.ended`, `session.ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
}

impl SessionWebhookPolicy {
    /// Checks the endpoints a create request names.
    pub fn check(&self, specs: &[SessionWebhookSpec]) -> Result<Vec<SessionWebhook>, String> {
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        if !self.allow {
            return Err("this daemon does not take webhooks from sessions (start it with --allow-session-webhooks and a --webhook-secret)".into());
        }
        if specs.len() > MAX_SESSION_WEBHOOKS {
            return Err(format!(
                "at most {MAX_SESSION_WEBHOOKS} webhooks per session"
            ));
        }
        specs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let url = check_url(&spec.url, &self.allow_hosts)
                    .map_err(|why| format!("webhooks[{i}].url {why}"))?;
                let events = match &spec.events {
                    None => super::settings::default_mask(),
                    Some(names) => super::event_mask(names)
                        .map_err(|why| format!("webhooks[{i}].events: {why}"))?,
                };
                if events.is_empty() {
                    return Err(format!("webhooks[{i}].events names no event type"));
                }
                Ok(SessionWebhook {
                    url: url.to_string(),
                    events,
                })
            })
            .collect()
    }
}

impl SessionWebhook {
    /// The endpoints of stored settings (checked when the session was created; one that no
    /// longer reads is dropped).
    pub fn restore(specs: &[SessionWebhookSpec]) -> Vec<SessionWebhook> {
        specs
            .iter()
            .filter_map(|spec| {
                let names = spec.events.clone().unwrap_or_default();
                Some(SessionWebhook {
                    url: spec.url.clone(),
                    events: super::event_mask(&names).ok()?,
                })
            })
            .collect()
    }

    /// As stored with the session's settings (restored at restart).
    pub fn to_spec(&self) -> SessionWebhookSpec {
        SessionWebhookSpec {
            url: self.url.clone(),
            events: Some(
                self.events
                    .names()
                    .iter()
                    .map(|n| (*n).to_owned())
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str, events: Option<&[&str]>) -> SessionWebhookSpec {
        SessionWebhookSpec {
            url: url.into(),
            events: events.map(|e| e.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn sessions_need_the_daemons_leave_and_a_safe_url() {
        let closed = SessionWebhookPolicy::default();
        assert!(closed.check(&[]).unwrap().is_empty());
        let e = closed
            .check(&[spec("https://h.example/x", None)])
            .unwrap_err();
        assert!(e.contains("--allow-session-webhooks"), "{e}");
        let open = SessionWebhookPolicy {
            allow: true,
            allow_hosts: AllowList::default(),
        };
        let ok = open
            .check(&[spec("https://h.example/x", Some(&["turn.ended"]))])
            .unwrap();
        assert_eq!(ok[0].events.names(), ["turn.ended"]);
        let e = open
            .check(&[spec("http://169.254.169.254/latest", None)])
            .unwrap_err();
        assert!(
            e.starts_with("webhooks[0].url goes to 169.254.169.254"),
            "{e}"
        );
        let e = open
            .check(&[spec("https://h.example/x", Some(&["turn.over"]))])
            .unwrap_err();
        assert!(e.contains("turn.over"), "{e}");
        let defaults = open.check(&[spec("https://h.example/x", None)]).unwrap();
        assert_eq!(
            defaults[0].to_spec().events.unwrap(),
            [
                "session.ended",
                "turn.ended",
                "permission.requested",
                "question.requested"
            ]
        );
    }
}
