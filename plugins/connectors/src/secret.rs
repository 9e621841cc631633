//! Credentials in the config file. A token is never written into the file itself: the file
//! says where it lives (`"${VAR}"`, an environment variable, or `"file:/path"`, a file such as
//! a mounted Kubernetes Secret), so a config can be committed and printed. The value is
//! held by [`Secret`], whose `Debug` and `Display` print `<secret>`, so it cannot reach an
//! error message, a log line, a listing or a span by accident.

use serde::{Deserialize, Deserializer};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a secret comes from, as the config file says it.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `"${VAR}"`: the environment variable `VAR`.
    Env(String),
    /// `"file:/path"`: the file's contents, surrounding whitespace trimmed.
    File(PathBuf),
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(var) => write!(f, "${{{var}}}"),
            SecretSource::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

impl SecretSource {
    /// Parses `"${VAR}"` or `"file:/path"`; anything else is refused, with the reason, and
    /// the refused text is not repeated (it may be the token itself).
    pub fn parse(text: &str) -> Result<SecretSource, String> {
        let text = text.trim();
        if let Some(var) = text.strip_prefix("${").and_then(|t| t.strip_suffix('}')) {
            if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err("`${VAR}` needs a variable name of letters, digits and `_`".into());
            }
            return Ok(SecretSource::Env(var.to_owned()));
        }
        if let Some(path) = text.strip_prefix("file:") {
            if path.is_empty() {
                return Err("`file:` needs a path".into());
            }
            return Ok(SecretSource::File(PathBuf::from(path)));
        }
        Err(
            "a secret is written as \"${VAR}\" (an environment variable) or \"file:/path\" \
             (a file), never as the value itself"
                .into(),
        )
    }

    /// Reads the secret now.
    pub fn resolve(&self) -> Result<Secret, String> {
        let value = match self {
            SecretSource::Env(var) => {
                std::env::var(var).map_err(|_| format!("${{{var}}} is not set"))?
            }
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?,
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(format!("{self:?} is empty"));
        }
        Ok(Secret(Arc::from(value)))
    }
}

impl<'de> Deserialize<'de> for SecretSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SecretSource::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A credential's value. Cheap to clone; printed as `<secret>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// A secret with this value (for embedders that hold the value already).
    pub fn new(value: impl Into<Arc<str>>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends it (an `Authorization` header, a signing key).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_token_in_the_config_is_refused_without_repeating_it() {
        let e = SecretSource::parse("ghp_abcdef123").unwrap_err();
        assert!(e.contains("${VAR}"), "{e}");
        assert!(!e.contains("ghp_abcdef123"), "{e}");
    }

    #[test]
    fn env_and_file_sources_resolve_and_print_as_secret() {
        std::env::set_var("TOOLYARD_SECRET_TEST_VAR", " tok-1 \n");
        let s = SecretSource::parse("${TOOLYARD_SECRET_TEST_VAR}").unwrap();
        let v = s.resolve().unwrap();
        assert_eq!(v.expose(), "tok-1");
        assert_eq!(format!("{v:?} {v}"), "<secret> <secret>");

        let path = std::env::temp_dir().join(format!("toolyard-secret-{}", std::process::id()));
        std::fs::write(&path, "tok-2\n").unwrap();
        let s = SecretSource::parse(&format!("file:{}", path.display())).unwrap();
        assert_eq!(s.resolve().unwrap().expose(), "tok-2");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_unset_variable_or_missing_file_names_the_source_not_a_value() {
        let e = SecretSource::parse("${TOOLYARD_SECRET_SURELY_UNSET}")
            .unwrap()
            .resolve()
            .unwrap_err();
        assert_eq!(e, "${TOOLYARD_SECRET_SURELY_UNSET} is not set");
        let e = SecretSource::parse("file:/nonexistent/toolyard/secret")
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(
            e.starts_with("cannot read /nonexistent/toolyard/secret"),
            "{e}"
        );
    }
}
