//! Finding the Codebuff API key for an agent command (spec §5).
//!
//! Resolved at every spawn, first found wins: the session's own key, the daemon's
//! `CODEBUFF_API_KEY`, then the files the real CLI and the seed notes use under the home directory.
//! The key itself is never logged: [`Credential`]'s `Debug` redacts it, and unreadable or malformed
//! files are reported without their content.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Credential files larger than this are not credential files; they are skipped.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// An API key and where it was found.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The key, handed to the agent as `CODEBUFF_API_KEY`. Never log it.
    pub key: String,
    /// Where the key came from, for diagnostics.
    pub source: CredentialSource,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("key", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

/// Where a [`Credential`] was found, in lookup order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// The key passed when the session was created.
    Session,
    /// The daemon's `CODEBUFF_API_KEY` environment variable.
    Env,
    /// `~/.config/manicode/credentials.json`, field `default.authToken` (the real CLI's file).
    ManicodeCredentials(PathBuf),
    /// `~/.codebuff/config.json`, field `apiKey` or `token`.
    CodebuffConfig(PathBuf),
    /// `~/.codebuff/auth.json`, field `apiKey` or `token`.
    CodebuffAuth(PathBuf),
}

/// Where [`resolve`] looks, in order, for messages that say how to provide a key.
pub fn places(home: Option<&Path>) -> Vec<String> {
    let home = home.map_or_else(|| "~".to_owned(), |h| h.display().to_string());
    vec![
        "the session's `apiKey`".to_owned(),
        "the daemon's CODEBUFF_API_KEY".to_owned(),
        format!("{home}/.config/manicode/credentials.json (default.authToken)"),
        format!("{home}/.codebuff/config.json (apiKey or token)"),
        format!("{home}/.codebuff/auth.json (apiKey or token)"),
    ]
}

/// Where a person gets a Codebuff API key.
pub const GET_A_KEY: &str = "https://www.codebuff.com/api-keys";

/// Finds the key for a spawn: `session_key`, then `env_key` (the daemon's `CODEBUFF_API_KEY`),
/// then the credential files under `home`.
///
/// Empty (or all-whitespace) values do not count; surrounding whitespace is trimmed. Files that
/// are missing, unreadable or malformed are skipped. `None` when nothing was found.
pub fn resolve(
    session_key: Option<&str>,
    env_key: Option<&str>,
    home: Option<&Path>,
) -> Option<Credential> {
    if let Some(key) = non_empty(session_key) {
        return Some(Credential {
            key,
            source: CredentialSource::Session,
        });
    }
    if let Some(key) = non_empty(env_key) {
        return Some(Credential {
            key,
            source: CredentialSource::Env,
        });
    }
    let home = home?;

    let manicode = home.join(".config/manicode/credentials.json");
    if let Some(key) = read_json(&manicode).and_then(|v| field(&v, &["default", "authToken"])) {
        return Some(Credential {
            key,
            source: CredentialSource::ManicodeCredentials(manicode),
        });
    }

    let codebuff = [
        (
            home.join(".codebuff/config.json"),
            CredentialSource::CodebuffConfig as fn(PathBuf) -> CredentialSource,
        ),
        (
            home.join(".codebuff/auth.json"),
            CredentialSource::CodebuffAuth,
        ),
    ];
    for (path, source) in codebuff {
        let Some(json) = read_json(&path) else {
            continue;
        };
        if let Some(key) = field(&json, &["apiKey"]).or_else(|| field(&json, &["token"])) {
            return Some(Credential {
                key,
                source: source(path),
            });
        }
    }
    None
}

fn non_empty(value: Option<&str>) -> Option<String> {
    let value = value?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// The non-empty string at `path` in `json`.
fn field(json: &serde_json::Value, path: &[&str]) -> Option<String> {
    let mut value = json;
    for key in path {
        value = value.get(key)?;
    }
    non_empty(value.as_str())
}

/// The parsed file, or `None` (with a debug line naming only the path) when it cannot be used.
fn read_json(path: &Path) -> Option<serde_json::Value> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::debug!(path = %path.display(), error = %error.kind(), "credentials file unreadable; skipped");
            return None;
        }
    };
    let mut bytes = Vec::new();
    if let Err(error) = file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        tracing::debug!(path = %path.display(), error = %error.kind(), "credentials file unreadable; skipped");
        return None;
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        tracing::debug!(path = %path.display(), "credentials file too large; skipped");
        return None;
    }
    match serde_json::from_slice(&bytes) {
        Ok(json) => Some(json),
        Err(_) => {
            // The parser's message can quote the file; name only the path.
            tracing::debug!(path = %path.display(), "credentials file is not valid JSON; skipped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch home directory, removed on drop.
    struct Home(PathBuf);

    impl Home {
        fn new() -> Home {
            let dir = std::env::temp_dir().join(format!("codebuffd-cred-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).expect("create temp home");
            Home(dir)
        }

        fn write(&self, relative: &str, content: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, content).expect("write");
            path
        }
    }

    impl Drop for Home {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MANICODE: &str = ".config/manicode/credentials.json";
    const CONFIG: &str = ".codebuff/config.json";
    const AUTH: &str = ".codebuff/auth.json";

    #[test]
    fn the_session_key_wins_over_everything() {
        let home = Home::new();
        home.write(MANICODE, r#"{"default":{"authToken":"file"}}"#);
        let c = resolve(Some("sess"), Some("env"), Some(&home.0)).expect("found");
        assert_eq!(c.key, "sess");
        assert_eq!(c.source, CredentialSource::Session);
    }

    #[test]
    fn env_comes_before_files_and_empty_values_do_not_count() {
        let home = Home::new();
        home.write(MANICODE, r#"{"default":{"authToken":"file"}}"#);
        let c = resolve(Some(""), Some("env"), Some(&home.0)).expect("found");
        assert_eq!((c.key.as_str(), c.source), ("env", CredentialSource::Env));
        let c = resolve(Some("  "), Some(""), Some(&home.0)).expect("found");
        assert_eq!(c.key, "file");
    }

    #[test]
    fn the_manicode_file_comes_before_the_codebuff_files() {
        let home = Home::new();
        let path = home.write(MANICODE, r#"{"default":{"authToken":"mani"}}"#);
        home.write(CONFIG, r#"{"apiKey":"cfg"}"#);
        let c = resolve(None, None, Some(&home.0)).expect("found");
        assert_eq!(c.key, "mani");
        assert_eq!(c.source, CredentialSource::ManicodeCredentials(path));
    }

    #[test]
    fn codebuff_config_then_auth_api_key_then_token() {
        let home = Home::new();
        let auth = home.write(AUTH, r#"{"apiKey":"auth-key","token":"auth-token"}"#);
        let c = resolve(None, None, Some(&home.0)).expect("found");
        assert_eq!(c.key, "auth-key");
        assert_eq!(c.source, CredentialSource::CodebuffAuth(auth));

        let config = home.write(CONFIG, r#"{"apiKey":"","token":"cfg-token"}"#);
        let c = resolve(None, None, Some(&home.0)).expect("found");
        assert_eq!(c.key, "cfg-token");
        assert_eq!(c.source, CredentialSource::CodebuffConfig(config));

        home.write(CONFIG, r#"{"apiKey":"cfg-key","token":"cfg-token"}"#);
        assert_eq!(
            resolve(None, None, Some(&home.0)).expect("found").key,
            "cfg-key"
        );
    }

    #[test]
    fn malformed_and_unusable_files_are_skipped() {
        let home = Home::new();
        home.write(MANICODE, "{not json");
        home.write(CONFIG, r#"{"apiKey":42,"token":null}"#);
        let auth = home.write(AUTH, r#"{"token":"t"}"#);
        let c = resolve(None, None, Some(&home.0)).expect("found");
        assert_eq!(c.key, "t");
        assert_eq!(c.source, CredentialSource::CodebuffAuth(auth));

        // A directory where a file should be is unreadable, not fatal.
        std::fs::remove_file(home.0.join(AUTH)).expect("rm");
        std::fs::create_dir(home.0.join(AUTH)).expect("mkdir");
        assert_eq!(resolve(None, None, Some(&home.0)), None);
    }

    #[test]
    fn nothing_found_without_home_or_files() {
        assert_eq!(resolve(None, None, None), None);
        let home = Home::new();
        assert_eq!(resolve(None, Some(""), Some(&home.0)), None);
    }

    #[test]
    fn debug_does_not_print_the_key() {
        let c = resolve(Some("sk-very-secret"), None, None).expect("found");
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        assert!(shown.contains("Session"), "{shown}");
    }
}
