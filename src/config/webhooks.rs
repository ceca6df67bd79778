//! The webhook and metrics settings of the server (`docs/webhooks.md`, `docs/metrics.md`):
//! their flags, and how flags, `CODEBUFFD_*` variables and config file keys become
//! [`WebhookSettings`].

use std::path::PathBuf;
use std::time::Duration;

use super::layers::{ConfigError, Layers};
use crate::webhooks::{event_mask, AllowList, Backoff, Secret, WebhookSettings};

/// The flags (flattened into the server's).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WebhookArgs {
    /// POST the chosen events of every session to this URL, signed as Standard Webhooks say
    /// (repeatable) [env CODEBUFFD_WEBHOOK_URL, comma-separated].
    #[arg(long, value_name = "URL")]
    pub webhook_url: Vec<String>,
    /// The signing secret, `whsec_` + base64 (repeat to sign with several while rotating)
    /// [env CODEBUFFD_WEBHOOK_SECRET].
    #[arg(long, value_name = "SECRET")]
    pub webhook_secret: Vec<String>,
    /// Read the signing secret(s) from this file, one per line [env
    /// CODEBUFFD_WEBHOOK_SECRET_FILE].
    #[arg(long, value_name = "PATH")]
    pub webhook_secret_file: Option<PathBuf>,
    /// The event types to send [default: question.requested, permission.requested,
    /// turn.ended, session.ended; env CODEBUFFD_WEBHOOK_EVENTS, comma-separated].
    #[arg(long, value_name = "TYPES", value_delimiter = ',')]
    pub webhook_events: Vec<String>,
    /// Let sessions name webhooks of their own at creation (`webhooks: [{url, events}]`),
    /// never to loopback, link-local or metadata addresses unless listed with
    /// --webhook-allow-host [env CODEBUFFD_ALLOW_SESSION_WEBHOOKS=1].
    #[arg(long)]
    pub allow_session_webhooks: bool,
    /// A host sessions' webhooks may use despite those rules (repeatable) [env
    /// CODEBUFFD_WEBHOOK_ALLOW_HOST, comma-separated].
    #[arg(long, value_name = "HOST")]
    pub webhook_allow_host: Vec<String>,
    /// Seconds one delivery may take [default: 10; env CODEBUFFD_WEBHOOK_TIMEOUT].
    #[arg(long, value_name = "SECONDS")]
    pub webhook_timeout: Option<f64>,
    /// Deliveries in flight at once [default: 16; env CODEBUFFD_WEBHOOK_CONCURRENCY].
    #[arg(long, value_name = "N")]
    pub webhook_concurrency: Option<usize>,
    /// Seconds before the first retry of a failed delivery; each further retry waits twice as
    /// long (at most an hour), less up to half at random [default: 5; env
    /// CODEBUFFD_WEBHOOK_RETRY_BASE].
    #[arg(long, value_name = "SECONDS")]
    pub webhook_retry_base: Option<f64>,
    /// Seconds after its event a delivery is still tried, then marked failed [default: 86400;
    /// env CODEBUFFD_WEBHOOK_RETRY_HORIZON].
    #[arg(long, value_name = "SECONDS")]
    pub webhook_retry_horizon: Option<f64>,
    /// Serve `GET /metrics` without the token (for a scraper on loopback) [env
    /// CODEBUFFD_METRICS_NO_AUTH=1].
    #[arg(long)]
    pub metrics_no_auth: bool,
}

/// Their config file keys.
pub const KEYS: &[&str] = &[
    "webhook_url",
    "webhook_secret",
    "webhook_secret_file",
    "webhook_events",
    "allow_session_webhooks",
    "webhook_allow_host",
    "webhook_timeout",
    "webhook_concurrency",
    "webhook_retry_base",
    "webhook_retry_horizon",
    "metrics_no_auth",
];

/// Reads the webhook settings; errors never quote a secret.
pub fn resolve(l: &mut Layers<'_>, args: &WebhookArgs) -> Result<WebhookSettings, ConfigError> {
    let error = |e: String| ConfigError(e);
    let urls = l.list("webhook_url", &args.webhook_url)?;
    for url in &urls {
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            error(format!(
                "the webhook URL {} is not a URL ({e})",
                crate::webhooks::redact_url(url)
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(error(format!(
                "the webhook URL {} must be http or https",
                crate::webhooks::redact_url(url)
            )));
        }
    }
    let mut texts = l.list("webhook_secret", &args.webhook_secret)?;
    if let Some(path) =
        l.value::<PathBuf>("webhook_secret_file", args.webhook_secret_file.clone())?
    {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            error(format!(
                "cannot read the webhook secret file {}: {e}",
                path.display()
            ))
        })?;
        texts.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    let secrets = texts
        .iter()
        .map(|t| Secret::parse(t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(error)?;
    let names = l.list("webhook_events", &args.webhook_events)?;
    let events = if names.is_empty() {
        WebhookSettings::default().events
    } else {
        event_mask(&names).map_err(|e| error(format!("--webhook-events: {e}")))?
    };
    let allow_session_webhooks = l.switch("allow_session_webhooks", args.allow_session_webhooks)?;
    if (!urls.is_empty() || allow_session_webhooks) && secrets.is_empty() {
        return Err(error(
            "webhooks need a signing secret: give --webhook-secret whsec_… (or --webhook-secret-file)".into(),
        ));
    }
    let allow_hosts = l.list("webhook_allow_host", &args.webhook_allow_host)?;
    let defaults = WebhookSettings::default();
    let timeout = seconds(
        "webhook timeout",
        l.value("webhook_timeout", args.webhook_timeout)?,
        defaults.timeout,
    )?;
    let concurrency = l
        .value("webhook_concurrency", args.webhook_concurrency)?
        .unwrap_or(defaults.concurrency);
    if concurrency == 0 || concurrency > 1024 {
        return Err(error("webhook concurrency must be 1 to 1024".into()));
    }
    let base = seconds(
        "webhook retry base",
        l.value("webhook_retry_base", args.webhook_retry_base)?,
        defaults.backoff.base,
    )?;
    let horizon = seconds(
        "webhook retry horizon",
        l.value("webhook_retry_horizon", args.webhook_retry_horizon)?,
        defaults.backoff.horizon,
    )?;
    Ok(WebhookSettings {
        urls,
        secrets,
        events,
        allow_session_webhooks,
        allow_hosts: AllowList::new(&allow_hosts),
        concurrency,
        timeout,
        backoff: Backoff { base, horizon },
    })
}

/// A positive number of seconds (at most a year), or the default.
fn seconds(what: &str, value: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 366.0 * 86_400.0 => {
            Ok(Duration::from_secs_f64(s))
        }
        Some(s) => Err(ConfigError(format!(
            "{what} must be a positive number of seconds, got {s}"
        ))),
    }
}

/// Whether `/metrics` is served without the token.
pub fn metrics_no_auth(l: &mut Layers<'_>, args: &WebhookArgs) -> Result<bool, ConfigError> {
    l.switch("metrics_no_auth", args.metrics_no_auth)
}
