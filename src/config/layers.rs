//! Where a setting comes from: command-line flag > `CODEBUFFD_*` environment variable > the TOML
//! file `--config` names > the user's config file > the default — the same precedence for every
//! command. One key per setting everywhere: the flag's name (`--turn-timeout`), its environment
//! variable (`CODEBUFFD_TURN_TIMEOUT`) and its file key (`turn_timeout`) are spellings of it.
//!
//! Values from the environment and from files are read as text and parsed like the flag would
//! be, so one setting has one parser and one error message per source.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Why the settings are unusable.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Where a setting's value came from (for `codebuffd config show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// An environment variable.
    Env(String),
    /// A config file (`--config`, or the user's).
    File(PathBuf),
    /// Nothing set it.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

/// A file key that was renamed: still read, with a warning.
pub struct Deprecated {
    pub old: &'static str,
    pub new: &'static str,
}

/// The sources of one command's settings, and a record of which one gave each value.
pub struct Layers<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Config files, highest precedence first.
    files: Vec<(PathBuf, toml::Table)>,
    sources: BTreeMap<&'static str, Source>,
    warnings: Vec<String>,
}

impl<'a> Layers<'a> {
    /// Reads the file `--config` (or `CODEBUFFD_CONFIG`) names and the user's config file
    /// (`$XDG_CONFIG_HOME/codebuffd/config.toml`, else `~/.config/codebuffd/config.toml`, when
    /// it exists). A file key outside `known` is an error (a typo must not pass silently); a
    /// `deprecated` key is renamed, with a warning.
    pub fn new(
        explicit: Option<&Path>,
        env: &'a dyn Fn(&str) -> Option<String>,
        known: &[&str],
        deprecated: &[Deprecated],
    ) -> Result<Layers<'a>, ConfigError> {
        let mut layers = Layers {
            env,
            files: Vec::new(),
            sources: BTreeMap::new(),
            warnings: Vec::new(),
        };
        let explicit = explicit
            .map(Path::to_path_buf)
            .or_else(|| layers.env_value("CODEBUFFD_CONFIG").map(PathBuf::from));
        if let Some(path) = explicit {
            layers.read_file(path, known, deprecated)?;
        }
        if let Some(path) = user_config_file(env).filter(|p| p.is_file()) {
            layers.read_file(path, known, deprecated)?;
        }
        Ok(layers)
    }

    fn read_file(
        &mut self,
        path: PathBuf,
        known: &[&str],
        deprecated: &[Deprecated],
    ) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?;
        let mut renamed = toml::Table::new();
        for (key, value) in table {
            let key = match deprecated.iter().find(|d| d.old == key) {
                Some(d) => {
                    self.warnings.push(format!(
                        "config file {}: `{}` is deprecated, use `{}` (the flag's name)",
                        path.display(),
                        d.old,
                        d.new
                    ));
                    if renamed.contains_key(d.new) {
                        continue;
                    }
                    d.new.to_owned()
                }
                None if known.contains(&key.as_str()) => key,
                None => {
                    return Err(ConfigError(format!(
                        "config file {}: unknown key `{key}` (keys are the flags' names with `_`, e.g. `turn_timeout`)",
                        path.display()
                    )))
                }
            };
            renamed.insert(key, value);
        }
        self.files.push((path, renamed));
        Ok(())
    }

    /// The sources, to record that one setting stands for another (a token read from a file).
    pub fn sources_mut(&mut self) -> &mut BTreeMap<&'static str, Source> {
        &mut self.sources
    }

    /// What was set where, one entry per setting looked up.
    pub fn sources(&self) -> &BTreeMap<&'static str, Source> {
        &self.sources
    }

    /// Deprecated keys that were read (to be logged by the caller once logging is up).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn env_value(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.is_empty())
    }

    /// The value of an environment variable that is not a setting (`HOME`, …).
    pub fn raw_env(&self, name: &str) -> Option<String> {
        self.env_value(name)
    }

    fn env_name(key: &str) -> String {
        format!("CODEBUFFD_{}", key.to_ascii_uppercase())
    }

    /// The first file that sets `key`, as text, and that file.
    fn file_text(&self, key: &str) -> Result<Option<(String, PathBuf)>, ConfigError> {
        for (path, table) in &self.files {
            let Some(value) = table.get(key) else {
                continue;
            };
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(ConfigError(format!(
                        "config file {}: `{key}` must be a single value, not {}",
                        path.display(),
                        other.type_str()
                    )))
                }
            };
            return Ok(Some((text, path.clone())));
        }
        Ok(None)
    }

    /// A single value: the flag, else `CODEBUFFD_<KEY>`, else the files. `None` when nothing
    /// sets it (its source is then recorded as the default).
    pub fn value<T: FromStr>(
        &mut self,
        key: &'static str,
        flag: Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        if let Some(v) = flag {
            self.sources.insert(key, Source::Flag);
            return Ok(Some(v));
        }
        let env = Self::env_name(key);
        if let Some(text) = self.env_value(&env) {
            let v = text
                .parse()
                .map_err(|_| ConfigError(format!("{env}: `{text}` is not a valid value")))?;
            self.sources.insert(key, Source::Env(env));
            return Ok(Some(v));
        }
        if let Some((text, path)) = self.file_text(key)? {
            let v = text.parse().map_err(|_| {
                ConfigError(format!(
                    "config file {}: `{key}`: `{text}` is not a valid value",
                    path.display()
                ))
            })?;
            self.sources.insert(key, Source::File(path));
            return Ok(Some(v));
        }
        self.sources.insert(key, Source::Default);
        Ok(None)
    }

    /// A switch: the flag when given, else `CODEBUFFD_<KEY>` (`1`/`true`/`yes`/`on` or
    /// `0`/`false`/`no`/`off`), else the files, else off.
    pub fn switch(&mut self, key: &'static str, flag: bool) -> Result<bool, ConfigError> {
        let flag = flag.then_some(Switch(true));
        Ok(self.value::<Switch>(key, flag)?.is_some_and(|s| s.0))
    }

    /// A list: the flag's values (repeated flag) when any, else `CODEBUFFD_<KEY>`
    /// (comma-separated), else the files' array (or single string).
    pub fn list(&mut self, key: &'static str, flag: &[String]) -> Result<Vec<String>, ConfigError> {
        if !flag.is_empty() {
            self.sources.insert(key, Source::Flag);
            return Ok(flag.to_vec());
        }
        let env = Self::env_name(key);
        if let Some(text) = self.env_value(&env) {
            self.sources.insert(key, Source::Env(env));
            return Ok(text
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect());
        }
        for (path, table) in &self.files {
            let items = match table.get(key) {
                None => continue,
                Some(toml::Value::String(s)) => vec![s.clone()],
                Some(toml::Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        ConfigError(format!(
                            "config file {}: `{key}` must be a list of strings",
                            path.display()
                        ))
                    })?,
                Some(other) => {
                    return Err(ConfigError(format!(
                        "config file {}: `{key}` must be a list of strings, not {}",
                        path.display(),
                        other.type_str()
                    )))
                }
            };
            self.sources.insert(key, Source::File(path.clone()));
            return Ok(items);
        }
        self.sources.insert(key, Source::Default);
        Ok(Vec::new())
    }

    /// Marks a setting as set by its flag even though its value came out of another
    /// (for settings resolved from several, like `no_token` overriding `token`).
    pub fn set_source(&mut self, key: &'static str, source: Source) {
        self.sources.insert(key, source);
    }
}

/// The user's config file: `$XDG_CONFIG_HOME/codebuffd/config.toml`, else
/// `~/.config/codebuffd/config.toml`.
pub fn user_config_file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(xdg) = env("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(xdg).join("codebuffd/config.toml"));
    }
    env("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".config/codebuffd/config.toml"))
}

/// A yes/no value as the environment and files spell it.
struct Switch(bool);

impl FromStr for Switch {
    type Err = ();

    fn from_str(s: &str) -> Result<Switch, ()> {
        match s.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Switch(true)),
            "0" | "false" | "no" | "off" => Ok(Switch(false)),
            _ => Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn scratch(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("codebuffd-layers-{tag}-{}", std::process::id()))
    }

    #[test]
    fn flag_beats_env_beats_file_beats_user_file() {
        let dir = scratch("order");
        let explicit = file(&dir, "c.toml", "port = 1\nstore = \"memory\"\n");
        file(
            &dir.join("xdg/codebuffd"),
            "config.toml",
            "port = 9\nstore = \"x\"\ntoken = \"user\"\n",
        );
        let xdg = dir.join("xdg");
        let e = env(&[
            ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
            ("CODEBUFFD_PORT", "2"),
        ]);
        let mut l = Layers::new(Some(&explicit), &e, &["port", "store", "token"], &[]).unwrap();
        assert_eq!(l.value::<u16>("port", Some(3)).unwrap(), Some(3));
        assert_eq!(l.sources()["port"], Source::Flag);
        assert_eq!(l.value::<u16>("port", None).unwrap(), Some(2));
        assert_eq!(l.sources()["port"], Source::Env("CODEBUFFD_PORT".into()));
        assert_eq!(l.value::<String>("store", None).unwrap().unwrap(), "memory");
        assert_eq!(l.sources()["store"], Source::File(explicit.clone()));
        assert_eq!(l.value::<String>("token", None).unwrap().unwrap(), "user");
        assert_eq!(
            l.sources()["token"],
            Source::File(xdg.join("codebuffd/config.toml"))
        );
        assert_eq!(l.value::<String>("host", None).unwrap(), None);
        assert_eq!(l.sources()["host"], Source::Default);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn deprecated_keys_are_read_with_a_warning_and_unknown_keys_refused() {
        let dir = scratch("deprecated");
        let path = file(&dir, "c.toml", "turn_timeout_seconds = 5\n");
        let e = env(&[]);
        let renames = [Deprecated {
            old: "turn_timeout_seconds",
            new: "turn_timeout",
        }];
        let mut l = Layers::new(Some(&path), &e, &["turn_timeout"], &renames).unwrap();
        assert_eq!(l.value::<f64>("turn_timeout", None).unwrap(), Some(5.0));
        assert!(
            l.warnings()[0].contains("`turn_timeout_seconds` is deprecated, use `turn_timeout`")
        );
        let path = file(&dir, "bad.toml", "turn_timout = 5\n");
        let err = Layers::new(Some(&path), &e, &["turn_timeout"], &renames)
            .err()
            .unwrap();
        assert!(err.0.contains("unknown key `turn_timout`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn switches_and_lists_read_every_spelling() {
        let dir = scratch("switch");
        let path = file(
            &dir,
            "c.toml",
            "no_token = true\nallowed_host = [\"a\", \"b\"]\n",
        );
        let e = env(&[
            ("CODEBUFFD_ALLOW_LOADER_ENV", "off"),
            ("CODEBUFFD_CORS_ALLOW_ORIGIN", "x, y"),
        ]);
        let known = [
            "no_token",
            "allowed_host",
            "allow_loader_env",
            "cors_allow_origin",
        ];
        let mut l = Layers::new(Some(&path), &e, &known, &[]).unwrap();
        assert!(l.switch("no_token", false).unwrap());
        assert!(!l.switch("allow_loader_env", false).unwrap());
        assert!(l.switch("allow_loader_env", true).unwrap());
        assert_eq!(l.list("allowed_host", &[]).unwrap(), ["a", "b"]);
        assert_eq!(l.list("cors_allow_origin", &[]).unwrap(), ["x", "y"]);
        let bad = env(&[("CODEBUFFD_NO_TOKEN", "maybe")]);
        let mut l = Layers::new(None, &bad, &known, &[]).unwrap();
        let err = l.switch("no_token", false).unwrap_err();
        assert!(err.0.contains("CODEBUFFD_NO_TOKEN: `maybe`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
