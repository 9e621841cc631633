//! Resolution of `[[sources]]` into [`SourceSpec`]s: what to launch (plugin manifest,
//! command or URL), environment and headers, lifecycle, timeouts, supervision, protocol and
//! naming, with every problem reported at once and naming its source.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;
use toolyard_client::ProtocolChoice;
use toolyard_proto::ProtocolVersion;

use super::error::SourceError;
use super::expand::{expand, process_env, Vars};
use super::locate::locate_command;
use super::sections::{GatewaySection, LifecycleSetting, SourceConfig, TransportSetting};
use crate::manifest::{Entry, Manifest};
use crate::spec::{
    EnvVar, Launch, Lifecycle, Naming, ProcessSpec, RemoteSpec, RemoteTransport, SourceSpec,
    Supervision,
};

/// Resolves one source against our process environment and `PATH`.
pub fn resolve_source(
    cfg: &SourceConfig,
    base_dir: &Path,
    gateway: &GatewaySection,
) -> Result<SourceSpec, SourceError> {
    resolve_source_with(cfg, base_dir, gateway, &process_env)
}

/// Resolves every source against our process environment; names must be unique, and every
/// problem (of every source) is reported at once.
pub fn resolve_all(
    sources: &[SourceConfig],
    base_dir: &Path,
    gateway: &GatewaySection,
) -> Result<Vec<SourceSpec>, SourceError> {
    resolve_all_with(sources, base_dir, gateway, &process_env)
}

/// [`resolve_all`] with `${VAR}` and `PATH` taken from `vars`.
pub(crate) fn resolve_all_with(
    sources: &[SourceConfig],
    base_dir: &Path,
    gateway: &GatewaySection,
    vars: Vars<'_>,
) -> Result<Vec<SourceSpec>, SourceError> {
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    let mut reported = HashSet::new();
    for s in sources {
        if !s.name.is_empty() && !seen.insert(s.name.as_str()) && reported.insert(s.name.as_str()) {
            errors.push(SourceError::DuplicateName {
                name: s.name.clone(),
            });
        }
    }
    let mut specs = Vec::new();
    for s in sources {
        match resolve_source_with(s, base_dir, gateway, vars) {
            Ok(spec) => specs.push(spec),
            Err(e) => errors.extend(e.into_vec()),
        }
    }
    let mut prefixes: BTreeMap<&str, &str> = BTreeMap::new();
    for spec in &specs {
        if let Some(first) = prefixes.insert(&spec.naming.prefix, &spec.name) {
            if first != spec.name {
                errors.push(SourceError::DuplicatePrefix {
                    prefix: spec.naming.prefix.clone(),
                    first: first.to_owned(),
                    second: spec.name.clone(),
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(SourceError::from_many(errors))
    }
}

/// [`resolve_source`] with `${VAR}` and `PATH` taken from `vars`.
pub fn resolve_source_with(
    cfg: &SourceConfig,
    base_dir: &Path,
    gateway: &GatewaySection,
    vars: Vars<'_>,
) -> Result<SourceSpec, SourceError> {
    if cfg.name.trim().is_empty() {
        return Err(SourceError::EmptyName);
    }
    let name = cfg.name.as_str();
    let mut errors = Vec::new();
    let invalid = |message: String| SourceError::Invalid {
        source_name: name.to_owned(),
        message,
    };

    // What to launch.
    let found: Vec<&'static str> = [
        ("plugin", cfg.plugin.is_some()),
        ("command", cfg.command.is_some()),
        ("url", cfg.url.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, given)| given.then_some(k))
    .collect();
    if found.len() != 1 {
        return Err(SourceError::LaunchChoice {
            source_name: name.to_owned(),
            found,
        });
    }
    if cfg.args.is_some() && cfg.command.is_none() {
        errors.push(invalid("`args` goes with `command`".into()));
    }
    if cfg.transport.is_some() && cfg.url.is_none() {
        errors.push(invalid("`transport` goes with `url`".into()));
    }
    if !cfg.headers.is_empty() && cfg.command.is_some() {
        errors.push(invalid("`headers` go with `url` or a remote plugin".into()));
    }

    let mut version = None;
    let mut description = None;
    let mut is_remote = cfg.url.is_some();
    let path_var = vars("PATH");
    let located = |command: &str, dir: &Path, errors: &mut Vec<SourceError>| {
        locate_command(command, dir, path_var.as_deref()).unwrap_or_else(|| {
            errors.push(SourceError::CommandNotFound {
                source_name: name.to_owned(),
                command: command.to_owned(),
            });
            command.to_owned()
        })
    };
    let cwd = cfg.cwd.as_ref().map(|c| base_dir.join(c));
    if let Some(c) = &cwd {
        if !c.is_dir() {
            errors.push(invalid(format!("cwd {} is not a directory", c.display())));
        }
    }
    let launch = if let Some(url) = &cfg.url {
        let transport = match cfg.transport.unwrap_or_default() {
            TransportSetting::Auto => RemoteTransport::Auto,
            TransportSetting::Http => RemoteTransport::StreamableHttp,
            TransportSetting::Sse => RemoteTransport::Sse,
        };
        remote(cfg, url.clone(), transport, &[], vars, &mut errors)
    } else if let Some(command) = &cfg.command {
        let env = resolve_env(cfg, &[], vars, &mut errors);
        let command = located(command, base_dir, &mut errors);
        Some(Launch::Process(ProcessSpec {
            command,
            args: cfg.args.clone().unwrap_or_default(),
            env,
            inherit_env: cfg.inherit_env.clone(),
            inherit_env_defaults: cfg.inherit_env_defaults.unwrap_or(true),
            cwd,
        }))
    } else if let Some(plugin) = &cfg.plugin {
        let dir = base_dir.join(plugin);
        // A manifest problem ends resolution, reported with what was found before it.
        macro_rules! manifest {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(error) => {
                        errors.push(SourceError::Manifest {
                            source_name: name.to_owned(),
                            error,
                        });
                        return Err(SourceError::from_many(errors));
                    }
                }
            };
        }
        let manifest = manifest!(Manifest::load(&dir));
        version = manifest.doc.version.clone();
        description = manifest.doc.description.clone();
        match manifest!(manifest.entry()) {
            Entry::Stdio(package) => {
                if !cfg.headers.is_empty() {
                    errors.push(invalid(
                        "`headers` go with `url` or a remote plugin, and this plugin is a process"
                            .into(),
                    ));
                }
                let env = resolve_env(cfg, &package.environment_variables, vars, &mut errors);
                let line = manifest!(manifest.command(package, &env));
                let command = located(&line.command, &dir, &mut errors);
                Some(Launch::Process(ProcessSpec {
                    command,
                    args: line.args,
                    env,
                    inherit_env: cfg.inherit_env.clone(),
                    inherit_env_defaults: cfg.inherit_env_defaults.unwrap_or(true),
                    cwd: Some(cwd.unwrap_or(dir)),
                }))
            }
            Entry::Remote(r, transport) => {
                is_remote = true;
                let defs: Vec<_> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.clone(),
                            h.value.clone().or_else(|| h.default.clone()),
                            h.is_required,
                        )
                    })
                    .collect();
                remote(cfg, r.url.clone(), transport, &defs, vars, &mut errors)
            }
        }
    } else {
        // None of `url`, `command`, `plugin`: the launch-choice check above reported it.
        None
    };
    if is_remote {
        if !cfg.env.is_empty() || !cfg.secret_env.is_empty() {
            errors.push(invalid(
                "`env` applies to processes, not remote servers".into(),
            ));
        }
        if cfg.cwd.is_some() {
            errors.push(invalid(
                "`cwd` applies to processes, not remote servers".into(),
            ));
        }
        if !cfg.inherit_env.is_empty() || cfg.inherit_env_defaults.is_some() {
            errors.push(invalid(
                "`inherit_env` and `inherit_env_defaults` apply to processes, not remote servers"
                    .into(),
            ));
        }
    }

    // Lifecycle.
    let pooled_given: Vec<&str> = [
        ("pool_size", cfg.pool_size.is_some()),
        ("min_idle", cfg.min_idle.is_some()),
        ("max_concurrency", cfg.max_concurrency.is_some()),
        ("idle_secs", cfg.idle_secs.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, given)| given.then_some(k))
    .collect();
    let setting = cfg.lifecycle.unwrap_or(LifecycleSetting::Singleton);
    if setting != LifecycleSetting::Pooled && !pooled_given.is_empty() {
        errors.push(invalid(format!(
            "{} only apply to lifecycle = \"pooled\"",
            pooled_given.join(", ")
        )));
    }
    if is_remote && setting != LifecycleSetting::Singleton {
        errors.push(invalid(
            "a remote server is one shared connection: lifecycle must be \"singleton\"".into(),
        ));
    }
    let lifecycle = match setting {
        LifecycleSetting::Transient => Lifecycle::Transient,
        LifecycleSetting::Singleton => Lifecycle::Singleton,
        LifecycleSetting::Pooled => {
            let size = cfg.pool_size.unwrap_or(4);
            let min_idle = cfg.min_idle.unwrap_or(1);
            let max_concurrency = cfg.max_concurrency.unwrap_or(8);
            if size == 0 {
                errors.push(invalid("pool_size must be at least 1".into()));
            }
            if max_concurrency == 0 {
                errors.push(invalid("max_concurrency must be at least 1".into()));
            }
            if min_idle > size {
                errors.push(invalid(format!(
                    "min_idle ({min_idle}) exceeds pool_size ({size})"
                )));
            }
            Lifecycle::Pooled {
                size,
                min_idle,
                max_concurrency,
                idle: Duration::from_secs(cfg.idle_secs.unwrap_or(300)),
            }
        }
    };

    // Timeouts and supervision.
    let positive = |v: Option<u64>, default: u64, key: &str, errors: &mut Vec<SourceError>| {
        let v = v.unwrap_or(default);
        if v == 0 {
            errors.push(invalid(format!("{key} must be positive")));
        }
        v
    };
    let call_timeout =
        Duration::from_millis(positive(cfg.timeout_ms, 30_000, "timeout_ms", &mut errors));
    let startup_timeout = Duration::from_millis(positive(
        cfg.startup_timeout_ms,
        30_000,
        "startup_timeout_ms",
        &mut errors,
    ));
    let defaults = Supervision::default();
    let max_crashes = cfg.max_crashes.unwrap_or(defaults.max_crashes);
    if max_crashes == 0 {
        errors.push(invalid("max_crashes must be at least 1".into()));
    }
    let supervision = Supervision {
        backoff_initial: Duration::from_millis(cfg.backoff_ms.unwrap_or(200)),
        backoff_max: defaults.backoff_max,
        max_crashes,
        window: Duration::from_secs(positive(
            cfg.crash_window_secs,
            60,
            "crash_window_secs",
            &mut errors,
        )),
        probe_interval: Duration::from_secs(positive(
            cfg.probe_secs,
            10,
            "probe_secs",
            &mut errors,
        )),
    };

    // Protocol.
    let sse = matches!(&launch, Some(Launch::Remote(r)) if r.transport == RemoteTransport::Sse);
    let protocol = match cfg.protocol.as_deref() {
        None | Some("probe") | Some("auto") if sse => {
            ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05)
        }
        None | Some("probe") | Some("auto") => ProtocolChoice::Auto,
        Some(v) => match ProtocolVersion::parse(v) {
            Some(ProtocolVersion::V2026_07_28) => ProtocolChoice::Modern,
            Some(legacy) => ProtocolChoice::Legacy(legacy),
            None => {
                errors.push(SourceError::UnknownProtocol {
                    source_name: name.to_owned(),
                    version: v.to_owned(),
                });
                ProtocolChoice::Auto
            }
        },
    };

    // Naming.
    let prefix = cfg.prefix.clone().unwrap_or_else(|| cfg.name.clone());
    if prefix.is_empty() {
        errors.push(invalid("`prefix` is empty".into()));
    } else if !gateway.separator.is_empty() && prefix.contains(&gateway.separator) {
        errors.push(invalid(format!(
            "prefix `{prefix}` contains the separator `{}`, which makes names ambiguous",
            gateway.separator
        )));
    }
    let mut exposed = HashSet::new();
    for to in cfg.aliases.values() {
        if to.is_empty() || !exposed.insert(to.as_str()) {
            errors.push(invalid(format!(
                "alias `{to}` is empty or given to two tools"
            )));
        }
    }
    let naming = Naming {
        prefix,
        separator: gateway.separator.clone(),
        aliases: cfg
            .aliases
            .iter()
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect(),
    };

    match launch {
        Some(launch) if errors.is_empty() => Ok(SourceSpec {
            name: cfg.name.clone(),
            version,
            description,
            launch,
            lifecycle,
            call_timeout,
            startup_timeout,
            protocol,
            supervision,
            failure_mode: cfg.failure_mode.unwrap_or(gateway.failure_mode).into(),
            naming,
            audience: cfg.audience.clone(),
        }),
        _ => Err(SourceError::from_many(errors)),
    }
}

/// A remote's spec: the manifest's headers (`(name, value, required)`), then the
/// registration's, which win. `None` when a header failed (the error is in `errors`).
fn remote(
    cfg: &SourceConfig,
    url: String,
    transport: RemoteTransport,
    defs: &[(String, Option<String>, bool)],
    vars: Vars<'_>,
    errors: &mut Vec<SourceError>,
) -> Option<Launch> {
    let before = errors.len();
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value, required) in defs {
        if cfg.headers.keys().any(|k| k.eq_ignore_ascii_case(name)) {
            continue;
        }
        match value {
            Some(v) => headers.push((name.clone(), v.clone())),
            None if *required => errors.push(SourceError::MissingRequired {
                source_name: cfg.name.clone(),
                kind: "header",
                name: name.clone(),
            }),
            None => {}
        }
    }
    for (name, value) in &cfg.headers {
        match expand(value, vars) {
            Ok(v) => headers.push((name.clone(), v)),
            Err(e) => errors.push(e.into_error(&cfg.name, &format!("header {name}"))),
        }
    }
    (errors.len() == before).then_some(Launch::Remote(RemoteSpec {
        url,
        transport,
        headers,
    }))
}

/// A process's environment: the manifest's variables in its order (registration value,
/// else default; required ones must have one), then the registration's other variables in
/// name order.
fn resolve_env(
    cfg: &SourceConfig,
    defs: &[crate::manifest::EnvVarDef],
    vars: Vars<'_>,
    errors: &mut Vec<SourceError>,
) -> Vec<EnvVar> {
    let mut env = Vec::new();
    for s in &cfg.secret_env {
        if !cfg.env.contains_key(s) && !defs.iter().any(|d| &d.name == s) {
            errors.push(SourceError::Invalid {
                source_name: cfg.name.clone(),
                message: format!("secret_env lists `{s}`, which is not one of its variables"),
            });
        }
    }
    let registered = |name: &str, errors: &mut Vec<SourceError>| -> Option<Option<String>> {
        let raw = cfg.env.get(name)?;
        Some(match expand(raw, vars) {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(e.into_error(&cfg.name, &format!("env {name}")));
                None
            }
        })
    };
    for def in defs {
        let secret = def.is_secret || cfg.secret_env.contains(&def.name);
        let value = match registered(&def.name, errors) {
            Some(Some(v)) => Some(v),
            Some(None) => continue,
            None => def.default.clone(),
        };
        match value {
            Some(value) => env.push(EnvVar {
                name: def.name.clone(),
                value,
                secret,
            }),
            None if def.is_required => errors.push(SourceError::MissingRequired {
                source_name: cfg.name.clone(),
                kind: "environment variable",
                name: def.name.clone(),
            }),
            None => {}
        }
    }
    for name in cfg.env.keys() {
        if defs.iter().any(|d| &d.name == name) {
            continue;
        }
        if let Some(Some(value)) = registered(name, errors) {
            env.push(EnvVar {
                name: name.clone(),
                value,
                secret: cfg.secret_env.contains(name),
            });
        }
    }
    env
}

#[cfg(test)]
// A test panics on whatever other variant it got.
#[allow(clippy::match_wildcard_for_single_variants)]
mod tests {
    use super::*;
    use crate::config::sections::{FailureModeSetting, GatewayConfig};
    use crate::config::testing::*;
    use crate::spec::FailureMode;

    #[test]
    fn a_command_source_gets_every_default() {
        let spec = resolve(
            "name = \"everything\"\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-everything\"]",
            &Env::new(&[]),
        )
        .unwrap();
        let p = process(&spec);
        assert_eq!(p.command, "npx");
        assert_eq!(p.args, ["-y", "@modelcontextprotocol/server-everything"]);
        assert!(p.env.is_empty() && p.cwd.is_none());
        assert_eq!(spec.lifecycle, Lifecycle::Singleton);
        assert_eq!(spec.call_timeout, Duration::from_secs(30));
        assert_eq!(spec.startup_timeout, Duration::from_secs(30));
        assert_eq!(spec.protocol, ProtocolChoice::Auto);
        assert_eq!(spec.supervision, Supervision::default());
        assert_eq!(spec.failure_mode, FailureMode::Skip);
        assert_eq!(spec.naming, Naming::for_source("everything"));
        assert_eq!(spec.version, None);
    }

    #[test]
    fn every_option_is_read() {
        let spec = resolve(
            r#"
            name = "time"
            command = "uvx"
            args = ["mcp-server-time"]
            cwd = "everything"
            lifecycle = "pooled"
            pool_size = 2
            min_idle = 0
            max_concurrency = 3
            idle_secs = 5
            timeout_ms = 1500
            startup_timeout_ms = 2500
            protocol = "2025-06-18"
            failure_mode = "fail"
            prefix = "clock"
            aliases = { get_current_time = "now" }
            max_crashes = 2
            crash_window_secs = 7
            backoff_ms = 50
            probe_secs = 3
            "#,
            &Env::new(&[]),
        )
        .unwrap();
        assert_eq!(
            process(&spec).cwd.as_deref(),
            Some(fixtures().join("everything").as_path())
        );
        assert_eq!(
            spec.lifecycle,
            Lifecycle::Pooled {
                size: 2,
                min_idle: 0,
                max_concurrency: 3,
                idle: Duration::from_secs(5)
            }
        );
        assert_eq!(spec.call_timeout, Duration::from_millis(1500));
        assert_eq!(spec.startup_timeout, Duration::from_millis(2500));
        assert_eq!(
            spec.protocol,
            ProtocolChoice::Legacy(ProtocolVersion::V2025_06_18)
        );
        assert_eq!(spec.failure_mode, FailureMode::Fail);
        assert_eq!(spec.naming.expose("convert_time"), "clock__convert_time");
        assert_eq!(spec.naming.expose("get_current_time"), "now");
        assert_eq!(
            spec.supervision,
            Supervision {
                backoff_initial: Duration::from_millis(50),
                backoff_max: Duration::from_secs(30),
                max_crashes: 2,
                window: Duration::from_secs(7),
                probe_interval: Duration::from_secs(3),
            }
        );
    }

    #[test]
    fn pooled_defaults_and_modern_protocol() {
        let spec = resolve(
            "name = \"p\"\ncommand = \"npx\"\nlifecycle = \"pooled\"\nprotocol = \"2026-07-28\"",
            &Env::new(&[]),
        )
        .unwrap();
        assert_eq!(
            spec.lifecycle,
            Lifecycle::Pooled {
                size: 4,
                min_idle: 1,
                max_concurrency: 8,
                idle: Duration::from_secs(300)
            }
        );
        assert_eq!(spec.protocol, ProtocolChoice::Modern);
    }

    #[test]
    fn a_registry_plugin_resolves_with_manifest_metadata_and_its_dir_as_cwd() {
        let spec = resolve(
            "name = \"everything\"\nplugin = \"everything\"",
            &Env::new(&[]),
        )
        .unwrap();
        assert_eq!(spec.version.as_deref(), Some("2025.9.25"));
        assert!(spec.description.is_some());
        let p = process(&spec);
        assert_eq!(p.command, "npx");
        assert_eq!(
            p.args,
            [
                "-y",
                "@modelcontextprotocol/server-everything@2025.9.25",
                "stdio"
            ]
        );
        assert_eq!(
            p.cwd.as_deref(),
            Some(fixtures().join("everything").as_path())
        );

        let spec = resolve("name = \"time\"\nplugin = \"time\"", &Env::new(&[])).unwrap();
        let p = process(&spec);
        assert_eq!(p.command, "uvx");
        assert_eq!(format!("{:?}", p.env), "[TZ=UTC]");
    }

    #[test]
    fn plugin_env_comes_from_registration_then_defaults_and_secrets_are_marked() {
        let spec = resolve(
            r#"
            name = "github"
            plugin = "github"
            env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GH_TOKEN}", EXTRA = "x-${USER_NAME}-y", LOG = "debug" }
            secret_env = ["EXTRA"]
            "#,
            &Env::new(&[("GH_TOKEN", "ghp_topsecret"), ("USER_NAME", "ann")]),
        )
        .unwrap();
        let p = process(&spec);
        let env: Vec<_> = p
            .env
            .iter()
            .map(|v| (v.name.as_str(), v.value.as_str(), v.secret))
            .collect();
        assert_eq!(
            env,
            [
                ("GITHUB_PERSONAL_ACCESS_TOKEN", "ghp_topsecret", true),
                ("GITHUB_TOOLSETS", "repos,issues,pull_requests", false),
                ("EXTRA", "x-ann-y", true),
                ("LOG", "debug", false),
            ]
        );
        assert_eq!(p.command, "docker");
        assert_eq!(
            p.args,
            [
                "run",
                "-i",
                "--rm",
                "-e",
                "GITHUB_PERSONAL_ACCESS_TOKEN",
                "-e",
                "GITHUB_TOOLSETS",
                "-e",
                "EXTRA",
                "-e",
                "LOG",
                "ghcr.io/github/github-mcp-server:0.20.1",
                "stdio"
            ]
        );
    }

    #[test]
    fn a_missing_required_variable_names_it_and_the_source() {
        let err = resolve("name = \"gh\"\nplugin = \"github\"", &Env::new(&[])).unwrap_err();
        assert!(
            matches!(err, SourceError::MissingRequired { .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "source `gh`: required environment variable `GITHUB_PERSONAL_ACCESS_TOKEN` has no value (set it in the source's `env`)"
        );
        // Two at once are both reported.
        let err = resolve(
            "name = \"w\"\nplugin = \"local-python\"\nsecret_env = [\"NOPE\"]",
            &Env::new(&[]),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("WEATHER_API_KEY") && msg.contains("`NOPE`"),
            "{msg}"
        );
    }

    #[test]
    fn secret_values_never_appear_in_debug_or_errors() {
        const SECRET: &str = "s3cr3t-value-42";
        let env = Env::new(&[("GH_TOKEN", SECRET), ("PLAIN", SECRET)]);
        let g: GatewaySection =
            toml::from_str(&format!("admin_token = \"{SECRET}\"\nseparator = \".\"")).unwrap();
        let mut shown = vec![format!("{g:?}")];

        let ok = [
            // manifest-secret, from ${VAR}
            "name = \"gh\"\nplugin = \"github\"\nenv = { GITHUB_PERSONAL_ACCESS_TOKEN = \"${GH_TOKEN}\" }".to_owned(),
            // registration secret, literal
            format!("name = \"c\"\ncommand = \"npx\"\nenv = {{ KEY = \"{SECRET}\" }}\nsecret_env = [\"KEY\"]"),
        ];
        for toml in &ok {
            let cfg = source(toml);
            shown.push(format!("{cfg:?}"));
            let spec = resolve_source_with(&cfg, &fixtures(), &g, &|k| env.get(k)).unwrap();
            shown.push(format!("{spec:?}"));
            assert!(process(&spec)
                .env
                .iter()
                .any(|v| v.value == SECRET && v.secret));
        }
        let bad = [
            // every error a source with secrets can produce
            format!("name = \"a\"\ncommand = \"not-a-command-xyz\"\nenv = {{ KEY = \"{SECRET}\" }}\nsecret_env = [\"KEY\"]"),
            format!("name = \"b\"\nplugin = \"github\"\nenv = {{ OTHER = \"{SECRET}\" }}\nsecret_env = [\"OTHER\", \"MISSING\"]"),
            format!("name = \"c\"\nurl = \"https://x\"\nheaders = {{ Authorization = \"{SECRET}\", X = \"${{UNSET_1}}\" }}\nenv = {{ K = \"{SECRET}\" }}\nlifecycle = \"pooled\""),
            format!("name = \"d\"\nplugin = \"remote\"\nenv = {{ K = \"{SECRET}\" }}\nsecret_env = [\"K\"]"),
            "name = \"e\"\ncommand = \"npx\"\nargs = []\nenv = { K = \"${GH_TOKEN}\", L = \"${UNSET_2}\" }\nprotocol = \"1999\"\nprefix = \"a.b\"".to_owned(),
            format!("name = \"f\"\nplugin = \"malformed\"\nenv = {{ K = \"{SECRET}\" }}"),
            format!("name = \"g\"\nplugin = \"empty\"\nenv = {{ K = \"{SECRET}\" }}"),
            format!("name = \"h\"\nplugin = \"unknown-runtime\"\nenv = {{ K = \"{SECRET}\" }}"),
            format!("name = \"i\"\ncommand = \"npx\"\nurl = \"https://x\"\nenv = {{ K = \"{SECRET}\" }}"),
        ];
        let cfgs: Vec<SourceConfig> = bad.iter().map(|t| source(t)).collect();
        for cfg in &cfgs {
            shown.push(format!("{cfg:?}"));
            let err = resolve_source_with(cfg, &fixtures(), &g, &|k| env.get(k)).unwrap_err();
            shown.push(err.to_string());
            shown.push(format!("{err:?}"));
        }
        let all = resolve_all_with(&cfgs, &fixtures(), &g, &|k| env.get(k)).unwrap_err();
        shown.push(all.to_string());
        shown.push(format!("{all:?}"));
        for s in &shown {
            assert!(!s.contains(SECRET), "secret leaked: {s}");
        }
        // The errors are the expected ones, each naming its source.
        let text = all.to_string();
        for needle in [
            "source `a`: command `not-a-command-xyz` not found",
            "`MISSING`",
            "header X uses ${UNSET_1}",
            "lifecycle must be \"singleton\"",
            "`env` applies to processes",
            "required header `Authorization`",
            "env L uses ${UNSET_2}",
            "unknown protocol version \"1999\"",
            "prefix `a.b` contains the separator `.`",
            "malformed plugin manifest",
            "no plugin manifest in",
            "unknown runtime hint \"dnx\"",
            "source `i`: give exactly one of `plugin`, `command` or `url` (found command, url)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }

    /// Header values (tokens) of a remote source: hidden by `RemoteSpec`'s `Debug`.
    #[test]
    fn remote_header_values_never_print() {
        const SECRET: &str = "s3cr3t-header-42";
        let env = Env::new(&[("TOKEN", SECRET)]);
        let cfg = source(&format!(
            "name = \"r\"\nurl = \"https://x\"\nheaders = {{ A = \"{SECRET}\", B = \"Bearer ${{TOKEN}}\" }}"
        ));
        let spec = resolve_source_with(&cfg, &fixtures(), &GatewaySection::default(), &|k| {
            env.get(k)
        })
        .unwrap();
        match &spec.launch {
            Launch::Remote(r) => assert!(r.headers.iter().all(|(_, v)| v.contains(SECRET))),
            other => panic!("{other:?}"),
        }
        for shown in [format!("{cfg:?}"), format!("{spec:?}")] {
            assert!(!shown.contains(SECRET), "secret leaked: {shown}");
        }
    }

    #[test]
    fn malformed_and_missing_manifests_are_source_errors() {
        let err = resolve("name = \"m\"\nplugin = \"malformed\"", &Env::new(&[])).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("source `m`: malformed plugin manifest "),
            "{msg}"
        );
        assert!(msg.contains("malformed/plugin.json:6:5"), "{msg}");
        let err = resolve("name = \"m\"\nplugin = \"empty\"", &Env::new(&[])).unwrap_err();
        assert!(
            err.to_string()
                .contains("expected plugin.json or server.json"),
            "{err}"
        );
        let err = resolve("name = \"m\"\nplugin = \"http-only\"", &Env::new(&[])).unwrap_err();
        assert!(
            err.to_string()
                .contains("no package with the stdio transport"),
            "{err}"
        );
    }

    #[test]
    fn exactly_one_of_plugin_command_url() {
        for (toml, found) in [
            ("name = \"x\"", "none"),
            (
                "name = \"x\"\nplugin = \"time\"\ncommand = \"npx\"",
                "plugin, command",
            ),
            (
                "name = \"x\"\nplugin = \"time\"\ncommand = \"npx\"\nurl = \"http://h\"",
                "plugin, command, url",
            ),
        ] {
            let err = resolve(toml, &Env::new(&[])).unwrap_err();
            assert!(matches!(err, SourceError::LaunchChoice { .. }), "{err:?}");
            assert_eq!(
                err.to_string(),
                format!(
                    "source `x`: give exactly one of `plugin`, `command` or `url` (found {found})"
                )
            );
        }
        let err = resolve(
            "name = \"x\"\nurl = \"http://h\"\nargs = [\"a\"]",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`args` goes with `command`"),
            "{err}"
        );
        let err = resolve(
            "name = \"x\"\ncommand = \"npx\"\ntransport = \"sse\"",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`transport` goes with `url`"),
            "{err}"
        );
    }

    #[test]
    fn plugins_of_every_runtime_resolve() {
        let env = Env::new(&[("NOTES_DIR", "/tmp/notes"), ("KEY", "k")]);
        let spec = resolve(
            "name = \"n\"\nplugin = \"local-node\"\nenv = { NOTES_DIR = \"${NOTES_DIR}\" }",
            &env,
        )
        .unwrap();
        assert_eq!(process(&spec).command, "node");
        let spec = resolve(
            "name = \"w\"\nplugin = \"local-python\"\nenv = { WEATHER_API_KEY = \"${KEY}\" }",
            &env,
        )
        .unwrap();
        let p = process(&spec);
        assert_eq!(
            (p.command.as_str(), p.args[..3].join(" ")),
            ("python", "-u -m weather_mcp.server".to_owned())
        );
        assert_eq!(
            format!("{:?}", p.env),
            "[WEATHER_API_KEY=<secret>, WEATHER_UNITS=metric]"
        );
        let spec = resolve("name = \"e\"\nplugin = \"explicit\"", &env).unwrap();
        assert!(process(&spec).command.ends_with("explicit/bin/serve.sh"));
    }

    #[test]
    fn remote_sources() {
        let env = Env::new(&[("TOKEN", "t0k")]);
        let spec = resolve(
            "name = \"r\"\nurl = \"https://h/sse\"\ntransport = \"sse\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }",
            &env,
        )
        .unwrap();
        match &spec.launch {
            Launch::Remote(r) => {
                assert_eq!(r.transport, RemoteTransport::Sse);
                assert_eq!(
                    r.headers,
                    [("Authorization".to_owned(), "Bearer t0k".to_owned())]
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            spec.protocol,
            ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05)
        );
        // A remote-only manifest: its fixed headers, and the registration's for the required one.
        let spec = resolve(
            "name = \"h\"\nplugin = \"remote\"\nheaders = { authorization = \"Bearer ${TOKEN}\" }",
            &env,
        )
        .unwrap();
        match &spec.launch {
            Launch::Remote(r) => {
                assert_eq!(r.transport, RemoteTransport::StreamableHttp);
                assert_eq!(r.url, "https://mcp.example.com/mcp");
                assert_eq!(
                    r.headers,
                    [
                        ("X-Client".to_owned(), "toolyard".to_owned()),
                        ("authorization".to_owned(), "Bearer t0k".to_owned())
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(spec.protocol, ProtocolChoice::Auto);
        assert_eq!(spec.version.as_deref(), Some("2.1.0"));
    }

    #[test]
    fn a_url_without_transport_is_automatic_and_http_or_sse_pin_it() {
        let v2024 = ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05);
        for (line, transport, protocol) in [
            ("", RemoteTransport::Auto, ProtocolChoice::Auto),
            (
                "transport = \"auto\"",
                RemoteTransport::Auto,
                ProtocolChoice::Auto,
            ),
            (
                "transport = \"http\"",
                RemoteTransport::StreamableHttp,
                ProtocolChoice::Auto,
            ),
            (
                "transport = \"streamable-http\"",
                RemoteTransport::StreamableHttp,
                ProtocolChoice::Auto,
            ),
            ("transport = \"sse\"", RemoteTransport::Sse, v2024),
        ] {
            let spec = resolve(
                &format!("name = \"r\"\nurl = \"http://h/sse\"\n{line}"),
                &Env::new(&[]),
            )
            .unwrap();
            match &spec.launch {
                Launch::Remote(r) => assert_eq!(r.transport, transport, "{line:?}"),
                other => panic!("{other:?}"),
            }
            assert_eq!(spec.protocol, protocol, "{line:?}");
        }
    }

    #[test]
    fn inherit_env_is_read_for_processes_and_refused_for_remotes() {
        let spec = resolve("name = \"p\"\ncommand = \"npx\"", &Env::new(&[])).unwrap();
        let p = process(&spec);
        assert!(p.inherit_env.is_empty() && p.inherit_env_defaults);
        let spec = resolve(
            "name = \"p\"\ncommand = \"npx\"\ninherit_env = [\"AWS_PROFILE\", \"npm_config_registry\"]\ninherit_env_defaults = false",
            &Env::new(&[]),
        )
        .unwrap();
        let p = process(&spec);
        assert_eq!(p.inherit_env, ["AWS_PROFILE", "npm_config_registry"]);
        assert!(!p.inherit_env_defaults);
        // A plugin's process takes them too.
        let spec = resolve(
            "name = \"t\"\nplugin = \"time\"\ninherit_env = [\"UV_INDEX_URL\"]",
            &Env::new(&[]),
        )
        .unwrap();
        assert_eq!(process(&spec).inherit_env, ["UV_INDEX_URL"]);
        let err = resolve(
            "name = \"r\"\nurl = \"http://h\"\ninherit_env = [\"X\"]",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`inherit_env` and `inherit_env_defaults` apply to processes"),
            "{err}"
        );
    }

    #[test]
    fn invalid_lifecycles() {
        let err = resolve(
            "name = \"x\"\ncommand = \"npx\"\npool_size = 2",
            &Env::new(&[]),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("pool_size only apply to lifecycle = \"pooled\""),
            "{err}"
        );
        let err = resolve(
            "name = \"x\"\ncommand = \"npx\"\nlifecycle = \"pooled\"\npool_size = 0\nmin_idle = 2\ntimeout_ms = 0",
            &Env::new(&[]),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("3 problems with sources:"), "{msg}");
        assert!(
            msg.contains("pool_size must be at least 1")
                && msg.contains("min_idle (2) exceeds pool_size (0)")
                && msg.contains("timeout_ms must be positive"),
            "{msg}"
        );
    }

    #[test]
    fn resolve_all_reports_duplicates_and_every_error() {
        let cfgs: Vec<SourceConfig> = [
            "name = \"a\"\ncommand = \"npx\"",
            "name = \"a\"\ncommand = \"uvx\"",
            "name = \"b\"\ncommand = \"missing-cmd-1\"",
            "name = \"c\"\ncommand = \"missing-cmd-2\"",
            "name = \"d\"\ncommand = \"npx\"\nprefix = \"b\"",
            "name = \"\"\ncommand = \"npx\"",
        ]
        .iter()
        .map(|t| source(t))
        .collect();
        let env = Env::new(&[]);
        let err = resolve_all_with(&cfgs, &fixtures(), &GatewaySection::default(), &|k| {
            env.get(k)
        })
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("4 problems with sources:"), "{msg}");
        assert!(
            msg.contains("source name `a` is used more than once"),
            "{msg}"
        );
        assert!(
            msg.contains("missing-cmd-1") && msg.contains("missing-cmd-2"),
            "{msg}"
        );
        assert!(msg.contains("empty name"), "{msg}");
        let ok = resolve_all_with(&cfgs[..1], &fixtures(), &GatewaySection::default(), &|k| {
            env.get(k)
        })
        .unwrap();
        assert_eq!(ok[0].name, "a");
        // Prefix collisions between otherwise valid sources.
        let err = resolve_all_with(
            &[
                cfgs[0].clone(),
                source("name = \"z\"\ncommand = \"npx\"\nprefix = \"a\""),
            ],
            &fixtures(),
            &GatewaySection::default(),
            &|k| env.get(k),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sources `a` and `z` both use the prefix `a`"
        );
    }

    #[test]
    fn the_example_gateway_config_loads_and_resolves() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway/gateway.toml");
        let config = GatewayConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.gateway.separator, "__");
        assert_eq!(config.gateway.failure_mode, FailureModeSetting::Skip);
        let env = Env::new(&[("TOOLYARD_ADMIN_TOKEN", "tok")]);
        assert_eq!(
            config
                .gateway
                .admin_token_with(&|k| env.get(k))
                .unwrap()
                .as_deref(),
            Some("tok")
        );
        let base = path.parent().unwrap();
        let specs =
            resolve_all_with(&config.sources, base, &config.gateway, &|k| env.get(k)).unwrap();
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["everything", "time"]);
        assert_eq!(process(&specs[0]).command, "npx");
        assert_eq!(
            process(&specs[0]).args,
            ["-y", "@modelcontextprotocol/server-everything"]
        );
        assert_eq!(specs[0].lifecycle, Lifecycle::Singleton);
        assert_eq!(process(&specs[1]).command, "uvx");
        assert_eq!(process(&specs[1]).args, ["mcp-server-time"]);
        assert_eq!(specs[1].lifecycle, Lifecycle::Transient);
    }
}
