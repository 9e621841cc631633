//! Scoped pools: whose requests a pool of workers takes, and whose calls a gateway makes.
//!
//! A request's subject names its tenant and user (`{prefix}.req.{tenant}.{user}.{server}...`,
//! `_` when unattributed). A pool of every caller subscribes `{prefix}.req.*.*.{server}.>` in
//! the queue group `tyw.{server}`; a tenant's pool `{prefix}.req.{tenant}.*.{server}.>` in
//! `tyw.{server}.{tenant}`; a user's pool `{prefix}.req.{tenant}.{user}.{server}.>` in
//! `tyw.{server}.{tenant}.{user}` (nats-mcp-gateway's scopes). Each group takes its own
//! copy of a message, so two pools of one server whose scopes overlap would both run a call
//! both take (N11): a worker whose pool overlaps one already serving refuses to start
//! (`Worker::start`), and a gateway exposes only the pools that serve its own calls. Each
//! pool has its own durable task job queue too ([`Scope::job_queue`]).

use crate::error::NatsError;
use crate::wire;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Whose requests a pool of workers takes (`None`: any tenant, any user), or, for a gateway,
/// the tenant and user its requests carry (`None`: `_`, unattributed). A user is always of a
/// tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Scope {
    /// The tenant token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The user token (only with a tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl Scope {
    /// Every caller: the default pool, and a gateway that attributes its calls to no one.
    pub fn every() -> Scope {
        Scope::default()
    }

    /// `tenant` (and, when given, its `user`), each a subject token other than `_`, the
    /// unattributed placeholder.
    pub fn of(tenant: Option<&str>, user: Option<&str>) -> Result<Scope, NatsError> {
        let token = |what: &str, value: &str| {
            if value == "_" || !wire::token_safe(value) {
                Err(NatsError::Config(format!(
                    "the {what} {value:?} is not a subject token other than `_` ([A-Za-z0-9_-]+)"
                )))
            } else {
                Ok(value.to_owned())
            }
        };
        match (tenant, user) {
            (None, Some(user)) => Err(NatsError::Config(format!(
                "the user {user:?} needs a tenant: a user is always of a tenant"
            ))),
            (tenant, user) => Ok(Scope {
                tenant: tenant.map(|t| token("tenant", t)).transpose()?,
                user: user.map(|u| token("user", u)).transpose()?,
            }),
        }
    }

    /// Fails as [`Scope::of`] would have on its parts (subject tokens other than `_`, a user
    /// only with a tenant): its fields are public, so a scope set by hand is checked so.
    pub(crate) fn check(&self) -> Result<(), NatsError> {
        Scope::of(self.tenant.as_deref(), self.user.as_deref()).map(drop)
    }

    /// Whether [`Scope::of`] could have made it: a catalog entry, which anything on the bus
    /// may write, is taken only then.
    pub(crate) fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// Whether this is the pool of every caller.
    pub fn is_every(&self) -> bool {
        self.tenant.is_none()
    }

    /// The tenant token a request carries (`_` when unattributed).
    pub fn tenant_token(&self) -> &str {
        self.tenant.as_deref().unwrap_or("_")
    }

    /// The user token a request carries (`_` when unattributed).
    pub fn user_token(&self) -> &str {
        self.user.as_deref().unwrap_or("_")
    }

    /// Whether a pool of this scope takes the requests of a gateway attributing its calls to
    /// `caller`.
    pub fn serves(&self, caller: &Scope) -> bool {
        match (&self.tenant, &self.user) {
            (None, _) => true,
            (Some(t), None) => caller.tenant.as_ref() == Some(t),
            (Some(t), Some(u)) => {
                caller.tenant.as_ref() == Some(t) && caller.user.as_ref() == Some(u)
            }
        }
    }

    /// Whether a request could reach pools of both scopes (of one server) in different queue
    /// groups: a call would then run twice. Workers of one scope share a group, so one scope
    /// does not overlap itself.
    pub fn overlaps(&self, other: &Scope) -> bool {
        let meets = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self != other && meets(&self.tenant, &other.tenant) && meets(&self.user, &other.user)
    }

    /// The subjects a pool of this scope for `server` subscribes to.
    pub fn worker_subject(&self, prefix: &str, server: &str) -> String {
        let tenant = self.tenant.as_deref().unwrap_or("*");
        let user = self.user.as_deref().unwrap_or("*");
        format!("{prefix}.req.{tenant}.{user}.{server}.>")
    }

    /// The durable task job queue of the pool of this scope for `server` (`jobs`): the
    /// server's name for the pool of every caller, else one token of its own
    /// (`calc~acme`, `calc~acme~bob`: `~` is in no subject token a name may be), so no two
    /// pools' job subjects overlap, which a work-queue stream's consumers may not.
    pub fn job_queue(&self, server: &str) -> String {
        match (&self.tenant, &self.user) {
            (None, _) => server.to_owned(),
            (Some(t), None) => format!("{server}~{t}"),
            (Some(t), Some(u)) => format!("{server}~{t}~{u}"),
        }
    }

    /// The queue group of the pool of this scope for `server`: one more worker is more
    /// capacity, and each scope has its own group (NATS gives every group its own copy).
    pub fn queue_group(&self, server: &str) -> String {
        match (&self.tenant, &self.user) {
            (None, _) => format!("tyw.{server}"),
            (Some(t), None) => format!("tyw.{server}.{t}"),
            (Some(t), Some(u)) => format!("tyw.{server}.{t}.{u}"),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.tenant, &self.user) {
            (None, _) => f.write_str("every caller"),
            (Some(t), None) => write!(f, "tenant {t}"),
            (Some(t), Some(u)) => write!(f, "user {u} of tenant {t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(tenant: Option<&str>, user: Option<&str>) -> Scope {
        Scope::of(tenant, user).unwrap()
    }

    #[test]
    fn a_scope_is_made_of_subject_tokens_and_a_user_needs_a_tenant() {
        assert!(Scope::of(None, Some("bob")).is_err());
        assert!(Scope::of(Some("a.b"), None).is_err());
        assert!(Scope::of(Some("_"), None).is_err(), "`_` is unattributed");
        assert!(Scope::of(Some("acme"), Some("*")).is_err());
        assert_eq!(Scope::of(None, None).unwrap(), Scope::every());
        let forged = |tenant: Option<&str>, user: Option<&str>| Scope {
            tenant: tenant.map(str::to_owned),
            user: user.map(str::to_owned),
        };
        assert!(!forged(None, Some("bob")).is_valid());
        assert!(!forged(Some("*"), None).is_valid());
        assert!(forged(Some("acme"), Some("bob")).is_valid() && Scope::every().is_valid());
    }

    #[test]
    fn each_scope_has_its_own_subjects_and_queue_group() {
        let every = Scope::every();
        let acme = scope(Some("acme"), None);
        let bob = scope(Some("acme"), Some("bob"));
        assert_eq!(
            every.worker_subject("mcp.v1", "calc"),
            "mcp.v1.req.*.*.calc.>"
        );
        assert_eq!(
            acme.worker_subject("mcp.v1", "calc"),
            "mcp.v1.req.acme.*.calc.>"
        );
        assert_eq!(
            bob.worker_subject("mcp.v1", "calc"),
            "mcp.v1.req.acme.bob.calc.>"
        );
        assert_eq!(every.queue_group("calc"), "tyw.calc");
        assert_eq!(acme.queue_group("calc"), "tyw.calc.acme");
        assert_eq!(bob.queue_group("calc"), "tyw.calc.acme.bob");
        assert_eq!((every.tenant_token(), every.user_token()), ("_", "_"));
        assert_eq!(every.job_queue("calc"), "calc");
        assert_eq!(acme.job_queue("calc"), "calc~acme");
        assert_eq!(bob.job_queue("calc"), "calc~acme~bob");
    }

    #[test]
    fn scopes_overlap_when_one_request_reaches_both_and_serve_the_callers_they_take() {
        let every = Scope::every();
        let acme = scope(Some("acme"), None);
        let beta = scope(Some("beta"), None);
        let bob = scope(Some("acme"), Some("bob"));
        let eve = scope(Some("acme"), Some("eve"));
        for (a, b, overlap) in [
            (&every, &acme, true),
            (&every, &bob, true),
            (&acme, &bob, true),
            (&acme, &acme, false),
            (&every, &every, false),
            (&bob, &bob, false),
            (&acme, &beta, false),
            (&bob, &eve, false),
            (&beta, &bob, false),
        ] {
            assert_eq!(a.overlaps(b), overlap, "{a} / {b}");
            assert_eq!(b.overlaps(a), overlap, "{b} / {a}");
        }
        assert!(every.serves(&every) && every.serves(&bob));
        assert!(acme.serves(&acme) && acme.serves(&bob) && !acme.serves(&every));
        assert!(!acme.serves(&scope(Some("beta"), Some("bob"))));
        assert!(bob.serves(&bob) && !bob.serves(&eve) && !bob.serves(&acme));
    }
}
