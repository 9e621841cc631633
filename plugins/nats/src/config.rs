//! The config file's `[nats]` section (the binary composes the file from each crate's
//! sections): where the bus is and how the gateway side exposes and calls the workers'
//! tools. Flags (`--nats`) override it.

use crate::auth::NatsAuth;
use crate::error::NatsError;
use crate::remote::RemoteConfig;
use crate::scope::Scope;
use crate::worker::WorkerConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `[nats]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSection {
    /// The server(s), e.g. `nats://127.0.0.1:4222` (comma-separated for a cluster). When set,
    /// `toolyard serve` exposes the workers' tools as `--nats URL` does.
    pub url: Option<String>,
    /// The subject prefix (default `mcp.v1`).
    pub prefix: Option<String>,
    /// Between a worker's name and a tool's name (default `__`); `""` exposes the tools under
    /// their own names.
    pub separator: Option<String>,
    /// A call fails with -32010 when no frame came for this long (default 60 000).
    pub inactivity_ms: Option<u64>,
    /// The budget a call announces to the worker (default 300 000).
    pub call_timeout_ms: Option<u64>,
    /// Replicas of the catalog bucket, for whichever gateway or worker creates it (default
    /// 1; 3 on a cluster, so the catalog survives a node's loss).
    pub catalog_replicas: Option<usize>,
    /// Task-augmented calls of the workers' tools run as durable jobs on JetStream, their
    /// records in the `TY_TASKS` bucket that every gateway reads (default true; workers
    /// run the jobs of their server unless it is false).
    pub durable_tasks: Option<bool>,
    /// How long a worker's task job may go without a sign of life before JetStream hands it
    /// to another worker (default 30 000).
    pub task_ack_wait_ms: Option<u64>,
    /// A NATS credentials file (`.creds`: user JWT and seed), relative to the config file.
    pub credentials_file: Option<PathBuf>,
    /// A file holding a user nkey seed, relative to the config file.
    pub nkey_seed_file: Option<PathBuf>,
    /// PEM root certificates for the server's certificate (implies TLS).
    pub tls_ca_file: Option<PathBuf>,
    /// A PEM client certificate (mutual TLS), with `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The client certificate's PEM private key.
    pub tls_key_file: Option<PathBuf>,
    /// Refuse a connection that is not TLS (default false; a `tls://` URL requires it too).
    pub tls_required: Option<bool>,
    /// TLS before the server's INFO, for a server with `handshake_first` (default false).
    pub tls_first: Option<bool>,
    /// The prefix of the connection's reply subjects (default `_INBOX`), for a user allowed
    /// to subscribe only under a prefix of its own.
    pub inbox_prefix: Option<String>,
    /// The tenant (a subject token) of a gateway's calls, or whose calls a worker's pool
    /// takes (default: every tenant's; `Scope`).
    pub tenant: Option<String>,
    /// The user (a subject token, with `tenant`) of a gateway's calls, or whose calls a
    /// worker's pool takes.
    pub user: Option<String>,
    /// A gateway sends each caller's authenticated principal with its calls, for the
    /// worker's tool (default true; `RemoteConfig::forward_principal`).
    pub forward_principal: Option<bool>,
    /// A gateway of a tenant also exposes that tenant's user pools, each caller's calls going
    /// to its own (default false; `RemoteConfig::user_pools`).
    pub user_pools: Option<bool>,
}

/// The NATS bridge's sections of a config file.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NatsConfig {
    /// `[nats]`.
    #[serde(default)]
    pub nats: NatsSection,
}

impl NatsConfig {
    /// The top-level sections this crate owns.
    pub const SECTIONS: [&'static str; 1] = ["nats"];

    /// Parses the bridge's sections of a whole config file's TOML text (other sections are
    /// other crates' business).
    pub fn parse(text: &str) -> Result<NatsConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

impl NatsSection {
    /// How the connection authenticates and what TLS it uses, its relative paths read from
    /// `base` (the config file's directory).
    pub fn auth(&self, base: &Path) -> NatsAuth {
        NatsAuth {
            credentials_file: self.credentials_file.clone(),
            nkey_seed_file: self.nkey_seed_file.clone(),
            tls_ca_file: self.tls_ca_file.clone(),
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
            tls_required: self.tls_required.unwrap_or(false),
            tls_first: self.tls_first.unwrap_or(false),
            inbox_prefix: self.inbox_prefix.clone(),
        }
        .relative_to(base)
    }

    /// The tenant and user the section names (`Scope`): an error when they are no subject
    /// tokens, or a user is given without a tenant.
    pub fn scope(&self) -> Result<Scope, NatsError> {
        Scope::of(self.tenant.as_deref(), self.user.as_deref())
    }

    /// The gateway side's settings: the defaults, with what the section sets.
    pub fn remote(&self) -> Result<RemoteConfig, NatsError> {
        let mut config = RemoteConfig {
            caller: self.scope()?,
            ..RemoteConfig::default()
        };
        if let Some(prefix) = &self.prefix {
            config.prefix = prefix.clone();
        }
        if let Some(sep) = &self.separator {
            config.separator = (!sep.is_empty()).then(|| sep.clone());
        }
        if let Some(ms) = self.inactivity_ms {
            config.inactivity = Duration::from_millis(ms);
        }
        if let Some(ms) = self.call_timeout_ms {
            config.call_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.catalog_replicas {
            config.catalog_replicas = n.max(1);
        }
        config.durable_tasks = self.durable_tasks.unwrap_or(true);
        config.forward_principal = self.forward_principal.unwrap_or(true);
        config.user_pools = self.user_pools.unwrap_or(false);
        config.check()?;
        Ok(config)
    }

    /// A worker's settings for serving as `name`: the defaults, with the section's subject
    /// prefix (a worker and its gateways must agree on it), catalog replicas and scope.
    pub fn worker(&self, name: &str) -> Result<WorkerConfig, NatsError> {
        let mut config = WorkerConfig::new(name);
        config.scope = self.scope()?;
        if let Some(prefix) = &self.prefix {
            config.prefix = prefix.clone();
        }
        if let Some(n) = self.catalog_replicas {
            config.catalog_replicas = n.max(1);
        }
        config.tasks = self.durable_tasks.unwrap_or(true);
        if let Some(ms) = self.task_ack_wait_ms {
            config.task_ack_wait = Duration::from_millis(ms.max(100));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sections_credentials_and_tls_files_are_read_from_the_config_files_directory() {
        let c = NatsConfig::parse(
            "[nats]\ncredentials_file = \"secrets/user.creds\"\ntls_ca_file = \"/etc/nats/ca.pem\"\ntls_first = true\n",
        )
        .unwrap();
        let auth = c.nats.auth(Path::new("/srv/ty"));
        assert_eq!(
            auth.credentials_file.as_deref(),
            Some(Path::new("/srv/ty/secrets/user.creds"))
        );
        assert_eq!(
            auth.tls_ca_file.as_deref(),
            Some(Path::new("/etc/nats/ca.pem"))
        );
        assert!(auth.tls_first && !auth.tls_required);
        assert!(NatsConfig::parse("[nats]\ntls_ca = \"x\"\n").is_err());
    }

    #[test]
    fn the_section_sets_the_naming_and_timeouts_and_refuses_typos() {
        let c = NatsConfig::parse(
            "[nats]\nurl = \"nats://h:4222\"\nseparator = \"\"\ninactivity_ms = 5000\n[server]\nname = \"x\"\n",
        )
        .unwrap();
        assert_eq!(c.nats.url.as_deref(), Some("nats://h:4222"));
        let r = c.nats.remote().unwrap();
        assert_eq!(r.separator, None, "an empty separator exposes bare names");
        assert_eq!(r.inactivity, Duration::from_millis(5000));
        assert_eq!(r.prefix, "mcp.v1");
        let w = NatsConfig::parse("[nats]\nprefix = \"acme\"\ncatalog_replicas = 3\n")
            .unwrap()
            .nats;
        assert_eq!(
            w.worker("calc").unwrap().prefix,
            "acme",
            "a worker follows the section's prefix"
        );
        assert_eq!(w.worker("calc").unwrap().catalog_replicas, 3);
        assert_eq!(w.remote().unwrap().catalog_replicas, 3);
        assert!(
            w.remote().unwrap().durable_tasks && w.worker("calc").unwrap().tasks,
            "durable tasks by default"
        );
        let off = NatsConfig::parse("[nats]\ndurable_tasks = false\ntask_ack_wait_ms = 2000\n")
            .unwrap()
            .nats;
        assert!(!off.remote().unwrap().durable_tasks && !off.worker("calc").unwrap().tasks);
        assert_eq!(
            off.worker("calc").unwrap().task_ack_wait,
            Duration::from_secs(2)
        );
        let err = NatsConfig::parse("[nats]\nurll = \"x\"\n").unwrap_err();
        assert!(err.contains("urll"), "{err}");
    }

    #[test]
    fn the_sections_tenant_and_user_scope_the_gateways_calls_and_the_workers_pool() {
        let c = NatsConfig::parse("[nats]\ntenant = \"acme\"\nuser = \"bob\"\n")
            .unwrap()
            .nats;
        let bob = Scope::of(Some("acme"), Some("bob")).unwrap();
        assert_eq!(c.remote().unwrap().caller, bob);
        assert_eq!(c.worker("calc").unwrap().scope, bob);
        let bad = NatsConfig::parse("[nats]\nuser = \"bob\"\n").unwrap().nats;
        let err = bad.remote().unwrap_err().to_string();
        assert!(err.contains("needs a tenant"), "{err}");
        assert!(bad.worker("calc").is_err());
        assert_eq!(
            NatsSection::default().remote().unwrap().caller,
            Scope::every()
        );
    }

    #[test]
    fn user_pools_need_the_gateways_tenant_no_user_and_principals_sent() {
        let ok = NatsConfig::parse("[nats]\ntenant = \"acme\"\nuser_pools = true\n").unwrap();
        assert!(ok.nats.remote().unwrap().user_pools);
        for bad in [
            "[nats]\nuser_pools = true\n",
            "[nats]\ntenant = \"acme\"\nuser = \"bob\"\nuser_pools = true\n",
            "[nats]\ntenant = \"acme\"\nforward_principal = false\nuser_pools = true\n",
        ] {
            let err = NatsConfig::parse(bad).unwrap().nats.remote().unwrap_err();
            assert!(err.to_string().contains("user_pools"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_gateway_sends_its_callers_principals_unless_the_section_says_not_to() {
        assert!(NatsSection::default().remote().unwrap().forward_principal);
        let off = NatsConfig::parse("[nats]\nforward_principal = false\n").unwrap();
        assert!(!off.nats.remote().unwrap().forward_principal);
    }
}
