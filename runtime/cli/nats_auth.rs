//! The NATS connection's credentials, TLS and inbox prefix flags, and the tenant and user of
//! its calls, shared by `serve --nats` and `worker`: each overrides the config file's
//! `[nats]` setting of the same name (`toolyard_nats::NatsAuth`, `toolyard_nats::Scope`).

use std::path::{Path, PathBuf};
use toolyard_nats::{NatsAuth, NatsSection};

#[derive(clap::Args, Debug, Default)]
pub(crate) struct NatsAuthArgs {
    /// A NATS credentials file (.creds: a user JWT and its seed, as `nsc` writes it).
    #[arg(long, env = "TOOLYARD_NATS_CREDS", value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// A file holding a user nkey seed (SU...), for servers that list users by nkey.
    #[arg(
        long,
        env = "TOOLYARD_NATS_NKEY",
        value_name = "FILE",
        conflicts_with = "nats_creds"
    )]
    nats_nkey: Option<PathBuf>,
    /// PEM root certificates the NATS server's certificate must chain to (implies TLS).
    #[arg(long, env = "TOOLYARD_NATS_TLS_CA", value_name = "FILE")]
    nats_tls_ca: Option<PathBuf>,
    /// A PEM client certificate, for a NATS server that verifies clients (with --nats-tls-key).
    #[arg(
        long,
        env = "TOOLYARD_NATS_TLS_CERT",
        value_name = "FILE",
        requires = "nats_tls_key"
    )]
    nats_tls_cert: Option<PathBuf>,
    /// The client certificate's PEM private key.
    #[arg(
        long,
        env = "TOOLYARD_NATS_TLS_KEY",
        value_name = "FILE",
        requires = "nats_tls_cert"
    )]
    nats_tls_key: Option<PathBuf>,
    /// TLS before the server's INFO, for a NATS server with `handshake_first`.
    #[arg(long, env = "TOOLYARD_NATS_TLS_FIRST")]
    nats_tls_first: bool,
    /// The prefix of the connection's reply subjects (default _INBOX), for a NATS user
    /// allowed to subscribe only under a prefix of its own.
    #[arg(long, env = "TOOLYARD_NATS_INBOX_PREFIX", value_name = "PREFIX")]
    nats_inbox_prefix: Option<String>,
    /// The tenant (a subject token) of this gateway's calls, or whose calls this worker's
    /// pool takes (default: every tenant's). A pool of a server overlapping one already
    /// serving it (every tenant's and a tenant's, a tenant's and its user's) refuses to start.
    #[arg(long, env = "TOOLYARD_NATS_TENANT", value_name = "TENANT")]
    nats_tenant: Option<String>,
    /// The user (a subject token) of that tenant, for a gateway's calls or a worker's pool.
    #[arg(long, env = "TOOLYARD_NATS_USER", value_name = "USER")]
    nats_user: Option<String>,
}

impl NatsAuthArgs {
    /// The section's settings (relative paths read from `base`, the config file's
    /// directory), each flag given taking the place of its setting.
    pub(crate) fn over(&self, section: &NatsSection, base: &Path) -> NatsAuth {
        let mut auth = section.auth(base);
        // A flag names one identity: it replaces the section's, whichever kind that is.
        if self.nats_creds.is_some() || self.nats_nkey.is_some() {
            auth.credentials_file = self.nats_creds.clone();
            auth.nkey_seed_file = self.nats_nkey.clone();
        }
        if let Some(ca) = &self.nats_tls_ca {
            auth.tls_ca_file = Some(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.nats_tls_cert, &self.nats_tls_key) {
            auth.tls_cert_file = Some(cert.clone());
            auth.tls_key_file = Some(key.clone());
        }
        auth.tls_first |= self.nats_tls_first;
        if let Some(prefix) = &self.nats_inbox_prefix {
            auth.inbox_prefix = Some(prefix.clone());
        }
        auth
    }

    /// The section with the tenant and user flags in place of its own: a tenant flag names
    /// the whole scope (its user is the user flag's, or none), a user flag alone only the
    /// user.
    pub(crate) fn scoped(&self, section: &NatsSection) -> NatsSection {
        let mut section = section.clone();
        if self.nats_tenant.is_some() {
            section.tenant = self.nats_tenant.clone();
            section.user = self.nats_user.clone();
        } else if self.nats_user.is_some() {
            section.user = self.nats_user.clone();
        }
        section
    }
}
