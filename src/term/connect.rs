//! Choosing the transport: `--url` (or `CODEBUFFD_URL`) names a daemon; otherwise the engine
//! starts in this process on the configured data directory — unless a daemon already runs
//! there (its lock, `data_lock.rs`), in which case the client uses that daemon at the URL it
//! recorded, saying so, or stops with a clear error when it recorded none.

use super::error::ClientError;
use super::local::{Local, StartError};
use super::paint::Paint;
use super::remote::Remote;
use super::render::Style;
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
    match Local::start(&config) {
        Ok(local) => Ok(Box::new(local)),
        Err(StartError::Busy { holder, message }) => match holder.and_then(|h| h.url) {
            Some(url) => {
                eprintln!(
                    "{}",
                    paint.paint(
                        Style::Dim,
                        &format!(
                            "codebuffd: a daemon runs on {}: using it at {url}",
                            config.data_dir.display()
                        )
                    )
                );
                Ok(Box::new(Remote::new(&url, settings.token.clone())?))
            }
            None => Err(ClientError::usage(format!(
                "{message}; or pass --url to use a running daemon"
            ))),
        },
        Err(StartError::Other(e)) => Err(e),
    }
}
