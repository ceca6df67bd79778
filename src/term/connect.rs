//! Choosing the transport: `--url` (or `CODEBUFFD_URL`) names a daemon; otherwise the engine
//! starts in this process on the configured data directory, beside whatever other engines
//! (a server, editors, other terminals) work on it: they share one log.

use super::error::ClientError;
use super::format::Style;
use super::local::Local;
use super::paint::Paint;
use super::remote::Remote;
use super::settings::Settings;
use super::transport::Transport;

/// The transport `settings` ask for. Must run within the tokio runtime.
pub fn connect(
    settings: &Settings,
    env: &dyn Fn(&str) -> Option<String>,
    paint: Paint,
) -> Result<Box<dyn Transport>, ClientError> {
    if let Some(url) = &settings.url {
        return Ok(Box::new(Remote::new(url, settings.token.clone())?));
    }
    let config = settings.engine(env)?;
    for warning in &config.warnings {
        eprintln!(
            "{}",
            paint.paint(Style::Warn, &format!("codebuffd: {warning}"))
        );
    }
    Ok(Box::new(Local::start(&config)?))
}
