//! `${VAR}` expansion (in `env` and `headers` values and `admin_token`) and where the values
//! come from ([`Vars`]): one syntax, one implementation, shared by the sections and
//! resolution.

use super::error::SourceError;

/// Where `${VAR}` values come from: our process environment in
/// [`resolve_source`](super::resolve_source), a map in tests.
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(super) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Why `${...}` expansion failed.
pub(super) enum ExpandError {
    Unset(String),
    Unterminated,
}

impl ExpandError {
    pub(super) fn into_error(self, source: &str, field: &str) -> SourceError {
        match self {
            ExpandError::Unset(var) => SourceError::UnsetVariable {
                source_name: source.to_owned(),
                field: field.to_owned(),
                var,
            },
            ExpandError::Unterminated => SourceError::BadReference {
                source_name: source.to_owned(),
                field: field.to_owned(),
            },
        }
    }
}

/// Replaces each `${VAR}` by the variable's value; `$${` is a literal `${`.
pub(super) fn expand(value: &str, vars: Vars<'_>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix("${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail.find('}').ok_or(ExpandError::Unterminated)?;
            let name = &tail[..end];
            match vars(name) {
                Some(v) => out.push_str(&v),
                None => return Err(ExpandError::Unset(name.to_owned())),
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::sections::{AdminTokenError, GatewaySection};
    use crate::config::testing::*;

    #[test]
    fn variable_expansion_and_unset_variables() {
        let vars = |k: &str| (k == "A").then(|| "1".to_owned());
        assert_eq!(expand("x${A}y$${A}$z$", &vars).ok().unwrap(), "x1y${A}$z$");
        let err = resolve(
            "name = \"s\"\ncommand = \"npx\"\nenv = { TOKEN = \"${NOT_SET_ANYWHERE}\" }",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "source `s`: env TOKEN uses ${NOT_SET_ANYWHERE}, which is not set"
        );
        let err = resolve(
            "name = \"s\"\ncommand = \"npx\"\nenv = { T = \"${OOPS\" }",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("unterminated"), "{err}");
        let g: GatewaySection = toml::from_str("admin_token = \"${ADMIN}\"").unwrap();
        let env = Env::new(&[("ADMIN", "adm1n")]);
        assert_eq!(
            g.admin_token_with(&|k| env.get(k)).unwrap().as_deref(),
            Some("adm1n")
        );
        // Unset: the admin API is off, start-up goes on (the README's example must run as
        // written on a machine without the variable).
        assert_eq!(g.admin_token_with(&|_| None).unwrap(), None);
        let bad: GatewaySection = toml::from_str("admin_token = \"${ADMIN\"").unwrap();
        let err = bad.admin_token_with(&|_| None).unwrap_err();
        assert_eq!(err, AdminTokenError::Unterminated);
        assert!(!err.to_string().contains("source"), "not a source: {err}");
        let empty: GatewaySection = toml::from_str("admin_token = \"${ADMIN}\"").unwrap();
        assert_eq!(
            empty
                .admin_token_with(&|_| Some(String::new()))
                .unwrap_err(),
            AdminTokenError::Empty
        );
    }
}
