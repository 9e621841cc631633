//! Finding a source's command: a path (relative to the config file's directory) that must
//! exist, or a name that must be an executable on `PATH`. A filesystem lookup, apart from
//! the pure parts of resolution.

use std::path::Path;

/// Finds a command: a name with a `/` is a path (relative to `base_dir`) that must exist; a
/// bare name must be an executable file in one of `path`'s directories. Returns what to run
/// (the absolute path for a relative path, the name itself for a name found on `PATH`).
pub fn locate_command(command: &str, base_dir: &Path, path: Option<&str>) -> Option<String> {
    if command.is_empty() {
        return None;
    }
    if command.contains('/') {
        let p = Path::new(command);
        let p = if p.is_relative() {
            base_dir.join(p)
        } else {
            p.to_owned()
        };
        return p.is_file().then(|| p.to_string_lossy().into_owned());
    }
    let path = path?;
    std::env::split_paths(path)
        .filter(|d| !d.as_os_str().is_empty())
        .any(|d| is_executable(&d.join(command)))
        .then(|| command.to_owned())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use crate::config::error::SourceError;
    use crate::config::resolve::resolve_source_with;
    use crate::config::sections::GatewaySection;
    use crate::config::testing::*;

    #[test]
    fn a_bad_command_names_it() {
        let err = resolve(
            "name = \"x\"\ncommand = \"definitely-not-installed-mcp\"",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "source `x`: command `definitely-not-installed-mcp` not found (neither on PATH nor an existing file)"
        );
        let err = resolve(
            "name = \"x\"\ncommand = \"./nope/server.sh\"",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert!(
            matches!(err, SourceError::CommandNotFound { .. }),
            "{err:?}"
        );
        // A relative path is relative to the config file's directory, and made absolute.
        let spec = resolve(
            "name = \"x\"\ncommand = \"explicit/bin/serve.sh\"",
            &Env::new(&[]),
        )
        .unwrap();
        let p = process(&spec);
        assert_eq!(
            p.command,
            fixtures().join("explicit/bin/serve.sh").to_string_lossy()
        );
        // A plugin whose runtime is not installed.
        let err = resolve_source_with(
            &source("name = \"t\"\nplugin = \"time\""),
            &fixtures(),
            &GatewaySection::default(),
            &|_| Some("/nonexistent-dir".to_owned()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("command `uvx` not found"), "{err}");
    }
}
