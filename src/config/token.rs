//! The API token: from `--token`, `--token-file`, `CODEBUFFD_TOKEN`, a file's keys, or none
//! (`no_token`), decided by which source set what.

use std::path::{Path, PathBuf};

use super::{ConfigError, Layers, ServerArgs, Source};

/// The token: `--no-token` beats everything; otherwise a `no_token` set anywhere means no
/// token unless the token was set at a higher precedence (a `--token` flag over
/// `CODEBUFFD_NO_TOKEN`, a `CODEBUFFD_TOKEN` over a file's `no_token`).
pub(super) fn resolve_token(
    l: &mut Layers<'_>,
    args: &ServerArgs,
) -> Result<Option<String>, ConfigError> {
    fn rank(source: Option<&Source>) -> u8 {
        match source {
            Some(Source::Flag) => 3,
            Some(Source::Env(_)) => 2,
            Some(Source::File(_)) => 1,
            Some(Source::Default) | None => 0,
        }
    }
    let token = l.value::<String>("token", args.token.clone())?;
    let token_file = l.value::<PathBuf>("token_file", args.token_file.clone())?;
    // A token file given at the same or a higher precedence than a token wins over it.
    let token = match token_file {
        Some(path) if rank(l.sources().get("token_file")) >= rank(l.sources().get("token")) => {
            let token = read_token_file(&path)?;
            let source = l.sources()["token_file"].clone();
            l.sources_mut().insert("token", source);
            Some(token)
        }
        _ => token,
    };
    let no_token = l.switch("no_token", args.no_token)?;
    let token_rank = rank(l.sources().get("token"));
    let no_token_rank = rank(l.sources().get("no_token"));
    let token = if args.no_token || (no_token && token_rank <= no_token_rank) {
        None
    } else {
        token
    };
    if token.as_deref() == Some("") {
        return Err(ConfigError("the token must not be empty".into()));
    }
    Ok(token)
}

/// The token in `path`: its first line, without surrounding whitespace; it must not be empty.
fn read_token_file(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "cannot read the token file {}: {e}",
            path.display()
        ))
    })?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(ConfigError(format!(
            "the token file {} is empty",
            path.display()
        )));
    }
    Ok(token.to_owned())
}
