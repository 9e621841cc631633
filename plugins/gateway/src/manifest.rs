//! Plugin manifests: a plugin directory's `plugin.json` (preferred) or `server.json`.
//!
//! Two shapes are accepted by one set of types (serde aliases):
//!
//! - the MCP registry's `server.json` (camelCase): `packages[]` with `registryType`,
//!   `identifier`, `version`, `runtimeHint`, `transport: {type}`, `environmentVariables[]`
//!   (`isRequired`, `isSecret`, `default`), `runtimeArguments[]` / `packageArguments[]`
//!   (`{type: "positional", value}` or `{type: "named", name, value}`), and `remotes[]`
//!   (`{type: "streamable-http" | "sse", url, headers: [{name, value, isRequired, isSecret}]}`);
//! - a simpler snake_case `plugin.json`: `packages[]` with `transport_type`, `runtime`
//!   (`uvx`, `npx`, `python`, `node`, `docker`), `package` / `identifier`, `version`,
//!   `command`, `args` (plain strings), `module` (python), `entry` (node),
//!   `environment_variables[]` (`required`, `secret`, `default`).
//!
//! The first package whose transport is stdio is the one launched; a manifest without one
//! falls back to its first remote. How a package becomes a command line:
//!
//! | runtime  | command line                                                            |
//! |----------|-------------------------------------------------------------------------|
//! | `npx`    | `npx -y <runtime args> <identifier>[@<version>] <args>`                  |
//! | `uvx`    | `uvx <runtime args> [--from <identifier>==<version>] <identifier> <args>`|
//! | `python` | `python <runtime args> -m <module or identifier> <args>`                 |
//! | `node`   | `node <runtime args> <plugin dir>/<entry or identifier> <args>`          |
//! | `docker` | `docker run -i --rm <runtime args> [-e NAME]... <image>[:<version>] <args>` |
//!
//! An explicit `command` wins over the runtime hint (`<command> <runtime args> <args>`; a
//! relative path in it is relative to the plugin directory). Without a hint, the registry
//! type implies one: `npm` -> npx, `pypi` -> uvx, `oci` -> docker. uvx pins a version with
//! `--from 'pkg==ver' pkg` rather than `pkg@ver`, which older uv releases do not know and
//! which only names exact versions. The process runs in the plugin directory.

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

use super::spec::{EnvVar, RemoteTransport};

/// The manifest file names, in order of preference.
pub const MANIFEST_FILES: [&str; 2] = ["plugin.json", "server.json"];

/// A manifest problem, naming the file (or directory) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Neither `plugin.json` nor `server.json` exists.
    #[error("no plugin manifest in {}: expected plugin.json or server.json", dir.display())]
    Missing {
        /// The plugin directory.
        dir: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read plugin manifest {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not JSON, or not a manifest.
    #[error("malformed plugin manifest {}:{line}:{column}: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde_json found.
        message: String,
    },
    /// No package speaks stdio and there is no remote.
    #[error("plugin manifest {}: no package with the stdio transport (and no remote)", path.display())]
    NoStdioPackage {
        /// The file.
        path: PathBuf,
    },
    /// A runtime hint we cannot turn into a command.
    #[error(
        "plugin manifest {}: unknown runtime hint {runtime:?} (known: npx, uvx, python, node, docker)",
        path.display()
    )]
    UnknownRuntime {
        /// The file.
        path: PathBuf,
        /// The hint.
        runtime: String,
    },
    /// No `command`, no runtime hint, and a registry type that implies none.
    #[error(
        "plugin manifest {}: the stdio package has no `command` and no runtime hint{}",
        path.display(),
        match registry_type { Some(t) => format!(" (registry type {t:?} implies none)"), None => String::new() }
    )]
    NoRuntime {
        /// The file.
        path: PathBuf,
        /// The package's registry type, if any.
        registry_type: Option<String>,
    },
    /// The runtime needs an identifier (package, image, module or entry) and there is none.
    #[error("plugin manifest {}: the {runtime} package has no identifier", path.display())]
    MissingIdentifier {
        /// The file.
        path: PathBuf,
        /// The runtime.
        runtime: Runtime,
    },
    /// The remote's transport is neither streamable HTTP nor SSE.
    #[error(
        "plugin manifest {}: unknown remote transport {transport:?} (known: streamable-http, sse)",
        path.display()
    )]
    UnknownTransport {
        /// The file.
        path: PathBuf,
        /// The transport.
        transport: String,
    },
}

/// How a package is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `npx -y <package>`.
    Npx,
    /// `uvx <package>`.
    Uvx,
    /// `python -m <module>`.
    Python,
    /// `node <entry>`.
    Node,
    /// `docker run -i --rm <image>`.
    Docker,
}

impl Runtime {
    /// Parses a runtime hint (`npx`, `uvx`, `python`/`python3`, `node`, `docker`).
    pub fn parse(hint: &str) -> Option<Runtime> {
        Some(match hint {
            "npx" => Runtime::Npx,
            "uvx" => Runtime::Uvx,
            "python" | "python3" => Runtime::Python,
            "node" => Runtime::Node,
            "docker" => Runtime::Docker,
            _ => return None,
        })
    }

    /// The runtime a registry type implies (`npm`, `pypi`, `oci`).
    pub fn for_registry(registry_type: &str) -> Option<Runtime> {
        Some(match registry_type {
            "npm" => Runtime::Npx,
            "pypi" => Runtime::Uvx,
            "oci" | "docker" => Runtime::Docker,
            _ => return None,
        })
    }

    /// The program.
    pub fn program(self) -> &'static str {
        match self {
            Runtime::Npx => "npx",
            Runtime::Uvx => "uvx",
            Runtime::Python => "python",
            Runtime::Node => "node",
            Runtime::Docker => "docker",
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.program())
    }
}

/// A parsed manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The manifest file.
    pub path: PathBuf,
    /// The plugin directory (the process's working directory).
    pub dir: PathBuf,
    /// The manifest's contents.
    pub doc: ManifestDoc,
}

/// The JSON document of a manifest.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestDoc {
    /// The server's name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its version.
    #[serde(default)]
    pub version: Option<String>,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// Ways to run it locally.
    #[serde(default)]
    pub packages: Vec<Package>,
    /// Ways to reach it remotely.
    #[serde(default)]
    pub remotes: Vec<Remote>,
}

/// One way to run the server locally.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// `npm`, `pypi`, `oci`, ...
    #[serde(default, alias = "registry_type", alias = "registry_name")]
    pub registry_type: Option<String>,
    /// The package name, image or module.
    #[serde(default, alias = "package")]
    pub identifier: Option<String>,
    /// The package version.
    #[serde(default)]
    pub version: Option<String>,
    /// `npx`, `uvx`, `python`, `node`, `docker`.
    #[serde(default, alias = "runtime_hint", alias = "runtime")]
    pub runtime_hint: Option<String>,
    /// The transport (default stdio).
    #[serde(default, alias = "transport_type")]
    pub transport: Option<TransportField>,
    /// An explicit program, winning over the runtime hint.
    #[serde(default)]
    pub command: Option<String>,
    /// The python module (default: the identifier).
    #[serde(default)]
    pub module: Option<String>,
    /// The node entry point, relative to the plugin directory (default: the identifier).
    #[serde(default)]
    pub entry: Option<String>,
    /// Arguments to the runtime, before the package.
    #[serde(default, alias = "runtime_arguments", alias = "runtime_args")]
    pub runtime_arguments: Vec<Argument>,
    /// Arguments to the package, after it.
    #[serde(default, alias = "package_arguments", alias = "args")]
    pub package_arguments: Vec<Argument>,
    /// Environment variables the server reads.
    #[serde(default, alias = "environment_variables", alias = "env")]
    pub environment_variables: Vec<EnvVarDef>,
}

/// A package's transport: `"stdio"` or `{"type": "stdio"}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TransportField {
    /// `"stdio"`.
    Name(String),
    /// `{"type": "stdio", "url": ...}`.
    Object {
        /// `stdio`, `streamable-http`, `sse`.
        #[serde(rename = "type")]
        kind: String,
        /// For HTTP transports.
        #[serde(default)]
        url: Option<String>,
    },
}

impl TransportField {
    /// The transport's type.
    pub fn kind(&self) -> &str {
        match self {
            TransportField::Name(k) | TransportField::Object { kind: k, .. } => k,
        }
    }
}

impl Package {
    /// True when the package speaks stdio (the default when no transport is given).
    pub fn is_stdio(&self) -> bool {
        self.transport.as_ref().is_none_or(|t| t.kind() == "stdio")
    }
}

/// A command-line argument: a plain string, or the registry's `{type, name, value}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Argument {
    /// A plain string (plugin.json `args`).
    Plain(String),
    /// `{"type": "positional", "value": ..}` or `{"type": "named", "name": "--x", "value": ..}`.
    Structured {
        /// `positional` (default) or `named`.
        #[serde(default, rename = "type")]
        kind: Option<String>,
        /// The flag of a named argument.
        #[serde(default)]
        name: Option<String>,
        /// The value.
        #[serde(default)]
        value: Option<String>,
        /// Used when there is no value.
        #[serde(default)]
        default: Option<String>,
    },
}

impl Argument {
    /// Appends the argument's words: a named argument is its flag and then its value (if
    /// any); a positional one is its value, or its default; a positional argument with
    /// neither is the user's to fill in and is left out.
    fn push_to(&self, out: &mut Vec<String>) {
        match self {
            Argument::Plain(s) => out.push(s.clone()),
            Argument::Structured {
                kind,
                name,
                value,
                default,
            } => {
                let value = value.as_ref().or(default.as_ref());
                if kind.as_deref() == Some("named") {
                    if let Some(n) = name {
                        out.push(n.clone());
                    }
                }
                if let Some(v) = value {
                    out.push(v.clone());
                }
            }
        }
    }
}

/// An environment variable a server reads.
#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarDef {
    /// The name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Registration fails when it has no value.
    #[serde(default, alias = "is_required", alias = "required")]
    pub is_required: bool,
    /// Its value is never printed.
    #[serde(default, alias = "is_secret", alias = "secret")]
    pub is_secret: bool,
    /// The value when the registration gives none.
    #[serde(default)]
    pub default: Option<String>,
}

impl fmt::Debug for EnvVarDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let default = match (&self.default, self.is_secret) {
            (Some(_), true) => Some("<secret>"),
            (Some(d), false) => Some(d.as_str()),
            (None, _) => None,
        };
        f.debug_struct("EnvVarDef")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("is_required", &self.is_required)
            .field("is_secret", &self.is_secret)
            .field("default", &default)
            .finish()
    }
}

/// A remote endpoint of the server.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remote {
    /// `streamable-http` (or `http`) or `sse`.
    #[serde(rename = "type", alias = "transport_type", alias = "transport")]
    pub kind: String,
    /// The endpoint.
    pub url: String,
    /// Headers it expects.
    #[serde(default)]
    pub headers: Vec<HeaderDef>,
}

impl Remote {
    /// The transport, if known.
    pub fn transport(&self) -> Option<RemoteTransport> {
        match self.kind.as_str() {
            "streamable-http" | "streamable_http" | "http" => Some(RemoteTransport::StreamableHttp),
            "sse" => Some(RemoteTransport::Sse),
            _ => None,
        }
    }
}

/// A header a remote expects.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderDef {
    /// The name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// A fixed value.
    #[serde(default)]
    pub value: Option<String>,
    /// Registration fails when it has no value.
    #[serde(default, alias = "is_required", alias = "required")]
    pub is_required: bool,
    /// Its value is never printed.
    #[serde(default, alias = "is_secret", alias = "secret")]
    pub is_secret: bool,
    /// The value when none is given.
    #[serde(default)]
    pub default: Option<String>,
}

impl fmt::Debug for HeaderDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are credentials more often than not: never printed.
        f.debug_struct("HeaderDef")
            .field("name", &self.name)
            .field("is_required", &self.is_required)
            .field("is_secret", &self.is_secret)
            .field(
                "has_value",
                &(self.value.is_some() || self.default.is_some()),
            )
            .finish()
    }
}

/// What a manifest launches.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// The first stdio package.
    Stdio(&'a Package),
    /// No stdio package: the first remote.
    Remote(&'a Remote, RemoteTransport),
}

/// A command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
}

impl Manifest {
    /// Reads `<dir>/plugin.json`, or `<dir>/server.json` when there is no plugin.json.
    pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
        for file in MANIFEST_FILES {
            let path = dir.join(file);
            match std::fs::read_to_string(&path) {
                Ok(text) => return Manifest::parse(&path, &text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(ManifestError::Read { path, source }),
            }
        }
        Err(ManifestError::Missing {
            dir: dir.to_owned(),
        })
    }

    /// Parses a manifest's text; `path` names it in errors and its parent is the plugin
    /// directory.
    pub fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let doc: ManifestDoc = serde_json::from_str(text).map_err(|e| {
            let (line, column) = (e.line(), e.column());
            let full = e.to_string();
            let suffix = format!(" at line {line} column {column}");
            let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
            ManifestError::Malformed {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        })?;
        let dir = path
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("."));
        Ok(Manifest {
            path: path.to_owned(),
            dir,
            doc,
        })
    }

    /// The first stdio package.
    pub fn stdio_package(&self) -> Result<&Package, ManifestError> {
        self.doc
            .packages
            .iter()
            .find(|p| p.is_stdio())
            .ok_or_else(|| ManifestError::NoStdioPackage {
                path: self.path.clone(),
            })
    }

    /// What to launch: the first stdio package, else the first remote.
    pub fn entry(&self) -> Result<Entry<'_>, ManifestError> {
        if let Ok(p) = self.stdio_package() {
            return Ok(Entry::Stdio(p));
        }
        match self.doc.remotes.first() {
            Some(r) => match r.transport() {
                Some(t) => Ok(Entry::Remote(r, t)),
                None => Err(ManifestError::UnknownTransport {
                    path: self.path.clone(),
                    transport: r.kind.clone(),
                }),
            },
            None => Err(ManifestError::NoStdioPackage {
                path: self.path.clone(),
            }),
        }
    }

    /// The command line of a package. `env` is the resolved environment: docker passes each
    /// variable on with `-e NAME` (its value comes from the docker client's environment,
    /// never from the command line).
    pub fn command(&self, package: &Package, env: &[EnvVar]) -> Result<CommandLine, ManifestError> {
        let mut runtime_args = Vec::new();
        for a in &package.runtime_arguments {
            a.push_to(&mut runtime_args);
        }
        let mut package_args = Vec::new();
        for a in &package.package_arguments {
            a.push_to(&mut package_args);
        }

        if let Some(command) = &package.command {
            let command = if command.contains('/') && Path::new(command).is_relative() {
                self.dir.join(command).to_string_lossy().into_owned()
            } else {
                command.clone()
            };
            let mut args = runtime_args;
            args.extend(package_args);
            return Ok(CommandLine { command, args });
        }

        let runtime = match (&package.runtime_hint, &package.registry_type) {
            (Some(hint), _) => {
                Runtime::parse(hint).ok_or_else(|| ManifestError::UnknownRuntime {
                    path: self.path.clone(),
                    runtime: hint.clone(),
                })?
            }
            (None, Some(reg)) => {
                Runtime::for_registry(reg).ok_or_else(|| ManifestError::NoRuntime {
                    path: self.path.clone(),
                    registry_type: Some(reg.clone()),
                })?
            }
            (None, None) => {
                return Err(ManifestError::NoRuntime {
                    path: self.path.clone(),
                    registry_type: None,
                })
            }
        };
        let need = |v: Option<&String>| {
            v.filter(|s| !s.is_empty())
                .cloned()
                .ok_or_else(|| ManifestError::MissingIdentifier {
                    path: self.path.clone(),
                    runtime,
                })
        };
        let version = package.version.as_deref().filter(|v| !v.is_empty());
        let mut args = Vec::new();
        match runtime {
            Runtime::Npx => {
                let id = need(package.identifier.as_ref())?;
                args.push("-y".to_owned());
                args.extend(runtime_args);
                args.push(match version {
                    Some(v) => format!("{id}@{v}"),
                    None => id,
                });
            }
            Runtime::Uvx => {
                let id = need(package.identifier.as_ref())?;
                args.extend(runtime_args);
                if let Some(v) = version {
                    args.push("--from".to_owned());
                    args.push(format!("{id}=={v}"));
                }
                args.push(id);
            }
            Runtime::Python => {
                let module = need(package.module.as_ref().or(package.identifier.as_ref()))?;
                args.extend(runtime_args);
                args.push("-m".to_owned());
                args.push(module);
            }
            Runtime::Node => {
                let entry = need(package.entry.as_ref().or(package.identifier.as_ref()))?;
                args.extend(runtime_args);
                args.push(self.dir.join(entry).to_string_lossy().into_owned());
            }
            Runtime::Docker => {
                let image = need(package.identifier.as_ref())?;
                args.extend(["run", "-i", "--rm"].map(String::from));
                args.extend(runtime_args);
                for var in env {
                    args.push("-e".to_owned());
                    args.push(var.name.clone());
                }
                args.push(match version {
                    Some(v) if !has_tag(&image) => format!("{image}:{v}"),
                    _ => image,
                });
            }
        }
        args.extend(package_args);
        Ok(CommandLine {
            command: runtime.program().to_owned(),
            args,
        })
    }
}

/// True when an image reference already names a tag or a digest.
fn has_tag(image: &str) -> bool {
    image.contains('@')
        || image
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'))
}

#[cfg(test)]
// A test panics on whatever other variant it got.
#[allow(clippy::match_wildcard_for_single_variants)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/plugins")
            .join(name)
    }

    fn command_of(dir: &str, env: &[EnvVar]) -> CommandLine {
        let m = Manifest::load(&fixture(dir)).unwrap();
        let p = m.stdio_package().unwrap();
        m.command(p, env).unwrap()
    }

    fn parse(json: &str) -> Manifest {
        Manifest::parse(Path::new("/plugins/x/plugin.json"), json).unwrap()
    }

    #[test]
    fn registry_server_json_of_an_npm_package_picks_the_stdio_package() {
        let m = Manifest::load(&fixture("everything")).unwrap();
        assert!(m.path.ends_with("server.json"));
        assert_eq!(m.doc.version.as_deref(), Some("2025.9.25"));
        assert!(m.doc.description.as_deref().unwrap().contains("MCP"));
        // The streamable-http package comes first in the file; the stdio one is chosen.
        let c = command_of("everything", &[]);
        assert_eq!(c.command, "npx");
        assert_eq!(
            c.args,
            [
                "-y",
                "@modelcontextprotocol/server-everything@2025.9.25",
                "stdio"
            ]
        );
    }

    #[test]
    fn registry_server_json_of_a_pypi_package_runs_uvx_with_from() {
        let m = Manifest::load(&fixture("time")).unwrap();
        let p = m.stdio_package().unwrap();
        assert_eq!(p.registry_type.as_deref(), Some("pypi"));
        let c = m.command(p, &[]).unwrap();
        assert_eq!(c.command, "uvx");
        assert_eq!(
            c.args,
            [
                "--from",
                "mcp-server-time==0.6.2",
                "mcp-server-time",
                "--local-timezone",
                "UTC"
            ]
        );
        // Its environment variable definitions are read.
        let tz = &p.environment_variables[0];
        assert_eq!(tz.name, "TZ");
        assert!(!tz.is_required && !tz.is_secret);
        assert_eq!(tz.default.as_deref(), Some("UTC"));
    }

    #[test]
    fn snake_case_plugin_json_with_docker_passes_env_names_only() {
        let m = Manifest::load(&fixture("github")).unwrap();
        let p = m.stdio_package().unwrap();
        let token = &p.environment_variables[0];
        assert_eq!(token.name, "GITHUB_PERSONAL_ACCESS_TOKEN");
        assert!(token.is_required && token.is_secret);
        let env = [
            EnvVar {
                name: "GITHUB_PERSONAL_ACCESS_TOKEN".into(),
                value: "ghp_secret".into(),
                secret: true,
            },
            EnvVar {
                name: "GITHUB_TOOLSETS".into(),
                value: "repos".into(),
                secret: false,
            },
        ];
        let c = m.command(p, &env).unwrap();
        assert_eq!(c.command, "docker");
        assert_eq!(
            c.args,
            [
                "run",
                "-i",
                "--rm",
                "-e",
                "GITHUB_PERSONAL_ACCESS_TOKEN",
                "-e",
                "GITHUB_TOOLSETS",
                "ghcr.io/github/github-mcp-server:0.20.1",
                "stdio"
            ]
        );
        assert!(!format!("{c:?}").contains("ghp_secret"));
    }

    #[test]
    fn docker_keeps_an_image_tag_or_digest() {
        let m = parse(
            r#"{"packages":[{"runtime":"docker","package":"localhost:5000/mcp/time:1.2","version":"9"}]}"#,
        );
        let c = m.command(m.stdio_package().unwrap(), &[]).unwrap();
        assert_eq!(c.args, ["run", "-i", "--rm", "localhost:5000/mcp/time:1.2"]);
        let m = parse(
            r#"{"packages":[{"registry_type":"oci","package":"localhost:5000/mcp/time","version":"9"}]}"#,
        );
        let c = m.command(m.stdio_package().unwrap(), &[]).unwrap();
        assert_eq!(c.args, ["run", "-i", "--rm", "localhost:5000/mcp/time:9"]);
    }

    #[test]
    fn npx_and_uvx_without_version() {
        let m = parse(r#"{"packages":[{"runtime":"npx","package":"some-server","args":["--x"]}]}"#);
        let c = m.command(m.stdio_package().unwrap(), &[]).unwrap();
        assert_eq!(
            (c.command.as_str(), c.args),
            (
                "npx",
                vec!["-y".to_owned(), "some-server".into(), "--x".into()]
            )
        );
        let m = parse(r#"{"packages":[{"runtime":"uvx","package":"mcp-server-fetch"}]}"#);
        let c = m.command(m.stdio_package().unwrap(), &[]).unwrap();
        assert_eq!(
            (c.command.as_str(), c.args),
            ("uvx", vec!["mcp-server-fetch".to_owned()])
        );
    }

    #[test]
    fn python_runs_a_module() {
        let c = command_of("local-python", &[]);
        assert_eq!(c.command, "python");
        assert_eq!(c.args, ["-u", "-m", "weather_mcp.server", "--stdio"]);
        // Without `module`, the identifier is the module.
        let m = parse(r#"{"packages":[{"runtime":"python","package":"mcp_server_git"}]}"#);
        let c = m.command(m.stdio_package().unwrap(), &[]).unwrap();
        assert_eq!(c.args, ["-m", "mcp_server_git"]);
    }

    #[test]
    fn node_runs_an_entry_relative_to_the_plugin_dir() {
        let c = command_of("local-node", &[]);
        assert_eq!(c.command, "node");
        let entry = fixture("local-node").join("dist/index.js");
        assert_eq!(c.args, [entry.to_string_lossy().as_ref(), "--verbose"]);
    }

    #[test]
    fn an_explicit_command_wins_over_the_runtime_hint() {
        let c = command_of("explicit", &[]);
        let script = fixture("explicit").join("bin/serve.sh");
        assert_eq!(c.command, script.to_string_lossy());
        assert_eq!(c.args, ["--mode", "stdio"]);
        let m = parse(
            r#"{"packages":[{"runtime":"npx","package":"x","command":"my-server","args":["a"]}]}"#,
        );
        let c = m.command(m.stdio_package().unwrap(), &[]).unwrap();
        assert_eq!(
            (c.command.as_str(), c.args),
            ("my-server", vec!["a".to_owned()])
        );
    }

    #[test]
    fn plugin_json_is_preferred_over_server_json() {
        let m = Manifest::load(&fixture("both")).unwrap();
        assert!(m.path.ends_with("plugin.json"));
        assert_eq!(m.doc.name.as_deref(), Some("from-plugin-json"));
    }

    #[test]
    fn a_manifest_without_a_stdio_package_uses_its_remote() {
        let m = Manifest::load(&fixture("remote")).unwrap();
        match m.entry().unwrap() {
            Entry::Remote(r, t) => {
                assert_eq!(t, RemoteTransport::StreamableHttp);
                assert_eq!(r.url, "https://mcp.example.com/mcp");
                assert_eq!(r.headers[0].name, "Authorization");
                assert!(r.headers[0].is_required && r.headers[0].is_secret);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_stdio_package_is_an_error_naming_the_file() {
        let m = Manifest::load(&fixture("http-only")).unwrap();
        let err = m.entry().unwrap_err();
        assert!(
            matches!(err, ManifestError::NoStdioPackage { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("http-only/server.json") && msg.contains("stdio"),
            "{msg}"
        );
    }

    #[test]
    fn an_unknown_runtime_is_an_error_naming_it() {
        let m = Manifest::load(&fixture("unknown-runtime")).unwrap();
        let err = m.command(m.stdio_package().unwrap(), &[]).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, ManifestError::UnknownRuntime { .. }),
            "{err:?}"
        );
        assert!(
            msg.contains("\"dnx\"") && msg.contains("unknown-runtime/plugin.json"),
            "{msg}"
        );
        let m = parse(r#"{"packages":[{"registryType":"nuget","identifier":"X"}]}"#);
        let err = m.command(m.stdio_package().unwrap(), &[]).unwrap_err();
        assert!(err.to_string().contains("\"nuget\""), "{err}");
    }

    #[test]
    fn a_missing_identifier_is_an_error() {
        let m = parse(r#"{"packages":[{"runtime":"npx"}]}"#);
        let err = m.command(m.stdio_package().unwrap(), &[]).unwrap_err();
        assert!(
            err.to_string().contains("npx package has no identifier"),
            "{err}"
        );
    }

    #[test]
    fn malformed_json_reports_path_line_and_column() {
        let err = Manifest::load(&fixture("malformed")).unwrap_err();
        match &err {
            ManifestError::Malformed { line, column, .. } => assert_eq!((*line, *column), (6, 5)),
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("malformed/plugin.json:6:5"), "{msg}");
        // A wrong type is reported the same way.
        let err =
            Manifest::parse(Path::new("p/server.json"), "{\n \"packages\": 3\n}").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("malformed plugin manifest p/server.json:2:"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_manifest_names_the_directory() {
        let err = Manifest::load(&fixture("empty")).unwrap_err();
        assert!(matches!(err, ManifestError::Missing { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("plugins/empty") && msg.contains("plugin.json or server.json"),
            "{msg}"
        );
        let err = Manifest::load(&fixture("does-not-exist")).unwrap_err();
        assert!(matches!(err, ManifestError::Missing { .. }), "{err:?}");
    }

    #[test]
    fn secret_defaults_never_print() {
        let m = parse(
            r#"{"packages":[{"runtime":"npx","package":"x","environment_variables":[{"name":"K","secret":true,"default":"s3cr3t-default"}]}],
               "remotes":[{"type":"sse","url":"https://x","headers":[{"name":"Authorization","value":"Bearer s3cr3t-header"}]}]}"#,
        );
        let shown = format!("{m:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}
