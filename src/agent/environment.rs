//! The environment an agent command runs with.
//!
//! The daemon's own environment is not inherited: only an allowlist of variables the agent needs
//! (locale, paths, proxies, Node and TLS settings, Codebuff's own knobs) is passed through, then
//! the session's extra variables, then `CODEBUFF_API_KEY` from the resolved credential. Anything
//! else the daemon has (its API token, cloud credentials, unrelated secrets) stays with the daemon.

use std::ffi::{OsStr, OsString};

use super::credentials::Credential;

/// The variable carrying the API key to the agent.
const API_KEY_VAR: &str = "CODEBUFF_API_KEY";
/// The test-only backend redirect: passed through from the daemon, never set by a session.
const TEST_BACKEND_VAR: &str = "CODEBUFFD_TEST_BACKEND_URL";

/// Variables passed through from the daemon by exact name.
const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "CODEBUFF_STATE_DIR",
    "CODEBUFF_QUESTION_TIMEOUT_SECONDS",
    TEST_BACKEND_VAR,
];

/// Variables passed through from the daemon by prefix.
const ALLOWED_PREFIXES: &[&str] = &["LC_", "XDG_"];

/// Variables a session's extra environment may not set.
const RESERVED: &[&str] = &[API_KEY_VAR, TEST_BACKEND_VAR];

/// Variables that make a program load or trust code or data it would not otherwise: the
/// dynamic loader's, Node's, shells' startup files, other interpreters' preloads, TLS trust.
/// Set by a session, they would run code inside the agent (which holds the credential).
const LOADER_PREFIXES: &[&str] = &["LD_", "DYLD_"];
const LOADER_NAMES: &[&str] = &[
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "MALLOC_CHECK_",
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "NODE_REPL_EXTERNAL_MODULE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "BASH_ENV",
    "ENV",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
];

/// True for a variable a session may set only when the daemon allows loader variables
/// (`--allow-loader-env`).
pub fn is_loader_variable(name: &str) -> bool {
    LOADER_NAMES.contains(&name) || LOADER_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Builds the complete environment of an agent command.
///
/// `parent` is the daemon's environment (`std::env::vars_os()`), `extra` the session's own
/// variables and `credential` the key from [`resolve`](super::credentials::resolve). Later
/// sources replace earlier ones of the same name, except that `extra` cannot set
/// `CODEBUFF_API_KEY` or `CODEBUFFD_TEST_BACKEND_URL`; extra names that no environment can hold
/// (empty, or containing `=` or NUL) are dropped.
pub fn agent_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &[(String, String)],
    credential: Option<&Credential>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for (name, value) in parent {
        if name.to_str().is_some_and(is_allowed) {
            set(&mut env, name, value);
        }
    }
    for (name, value) in extra {
        if RESERVED.contains(&name.as_str()) {
            tracing::debug!(%name, "session environment may not set this variable; dropped");
            continue;
        }
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            tracing::debug!(%name, "invalid session environment variable; dropped");
            continue;
        }
        set(&mut env, name.into(), value.into());
    }
    if let Some(credential) = credential {
        set(&mut env, API_KEY_VAR.into(), credential.key.as_str().into());
    }
    env
}

fn is_allowed(name: &str) -> bool {
    ALLOWED.contains(&name) || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Sets `name` to `value`, replacing an earlier value in place.
fn set(env: &mut Vec<(OsString, OsString)>, name: OsString, value: OsString) {
    match env
        .iter_mut()
        .find(|(n, _)| n.as_os_str() == OsStr::new(&name))
    {
        Some(entry) => entry.1 = value,
        None => env.push((name, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::credentials::CredentialSource;

    fn parent(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
        env.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.to_str())
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().filter_map(|(n, _)| n.to_str()).collect()
    }

    fn key(k: &str) -> Credential {
        Credential {
            key: k.into(),
            source: CredentialSource::Env,
        }
    }

    #[test]
    fn only_allowlisted_daemon_variables_pass() {
        let env = agent_env(
            parent(&[
                ("PATH", "/bin"),
                ("HOME", "/home/a"),
                ("LC_ALL", "C.UTF-8"),
                ("XDG_CONFIG_HOME", "/x"),
                ("https_proxy", "http://p"),
                ("NO_PROXY", "localhost"),
                ("CODEBUFFD_TOKEN", "daemon-secret"),
                ("AWS_SECRET_ACCESS_KEY", "aws"),
                ("CODEBUFF_API_KEY", "from-daemon-env"),
                ("SOME_SECRET", "x"),
                ("PATHX", "no"),
            ]),
            &[],
            None,
        );
        assert_eq!(
            names(&env),
            vec![
                "PATH",
                "HOME",
                "LC_ALL",
                "XDG_CONFIG_HOME",
                "https_proxy",
                "NO_PROXY"
            ]
        );
    }

    #[test]
    fn the_test_backend_redirect_passes_only_from_the_daemon() {
        let env = agent_env(
            parent(&[("CODEBUFFD_TEST_BACKEND_URL", "http://127.0.0.1:9")]),
            &[],
            None,
        );
        assert_eq!(
            get(&env, "CODEBUFFD_TEST_BACKEND_URL"),
            Some("http://127.0.0.1:9")
        );

        let extra = [(
            "CODEBUFFD_TEST_BACKEND_URL".to_owned(),
            "http://evil".to_owned(),
        )];
        let env = agent_env(parent(&[]), &extra, None);
        assert_eq!(get(&env, "CODEBUFFD_TEST_BACKEND_URL"), None);
    }

    #[test]
    fn session_extras_override_daemon_values_but_not_the_api_key() {
        let extra = [
            ("HOME".to_owned(), "/session/home".to_owned()),
            ("PROJECT".to_owned(), "demo".to_owned()),
            ("CODEBUFF_API_KEY".to_owned(), "from-session-env".to_owned()),
        ];
        let cred = key("resolved");
        let env = agent_env(parent(&[("HOME", "/root")]), &extra, Some(&cred));
        assert_eq!(get(&env, "HOME"), Some("/session/home"));
        assert_eq!(get(&env, "PROJECT"), Some("demo"));
        assert_eq!(get(&env, "CODEBUFF_API_KEY"), Some("resolved"));
        assert_eq!(names(&env), vec!["HOME", "PROJECT", "CODEBUFF_API_KEY"]);
    }

    #[test]
    fn no_credential_means_no_api_key() {
        let extra = [("CODEBUFF_API_KEY".to_owned(), "x".to_owned())];
        let env = agent_env(parent(&[("CODEBUFF_API_KEY", "y")]), &extra, None);
        assert_eq!(get(&env, "CODEBUFF_API_KEY"), None);
    }

    #[test]
    fn extras_no_environment_can_hold_are_dropped() {
        let extra = [
            (String::new(), "v".to_owned()),
            ("A=B".to_owned(), "v".to_owned()),
            ("NUL".to_owned(), "a\0b".to_owned()),
            ("OK".to_owned(), "fine".to_owned()),
        ];
        let env = agent_env(parent(&[]), &extra, None);
        assert_eq!(names(&env), vec!["OK"]);
    }

    #[test]
    fn loader_variables_are_recognised() {
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "NODE_OPTIONS",
            "BASH_ENV",
        ] {
            assert!(is_loader_variable(name), "{name}");
        }
        for name in ["PATH", "HOME", "NODE_ENV", "PROJECT", "LANG"] {
            assert!(!is_loader_variable(name), "{name}");
        }
    }

    #[test]
    fn non_utf8_daemon_variables_are_dropped() {
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(vec![b'P', 0xff]);
        let env = agent_env(vec![(odd, "v".into())], &[], None);
        assert!(env.is_empty());
    }
}
