//! The catalog on the bus: each worker instance puts what it serves (tools, resources,
//! resource templates, prompts) into the JetStream KV bucket `TY_CATALOG` under
//! `srv.{server}.{instance}` and re-puts it on a heartbeat;
//! gateways watch the bucket. The bucket's `max_age` (three heartbeats) retires the key of a
//! worker that died without deleting it; delete markers make that expiry visible to watchers.

use crate::error::NatsError;
use crate::scope::Scope;
use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;
use toolyard_proto::{Prompt, Resource, ResourceTemplate, Tool};

/// The KV bucket of the catalog.
pub const BUCKET: &str = "TY_CATALOG";

/// How often a worker re-puts its entry.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// The most one catalog operation (a JetStream API request, a put's ack) may take. A cluster
/// without JetStream quorum answers nothing (N7): the client's defaults (10 s per API request,
/// 5 s per ack) held a starting worker 20 s before it learnt that. Core request/reply keeps
/// working meanwhile, so failing the catalog fast costs no call.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(3);

/// A JetStream context for the catalog: its requests and acks bounded by [`TIMEOUT`].
pub(crate) fn context(client: async_nats::Client) -> jetstream::Context {
    let mut js = jetstream::new(client);
    js.set_timeout(TIMEOUT);
    js
}

/// What one worker instance serves. The lists other than `tools` came later: an entry
/// without them (an older worker's) reads as offering none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// The server name its requests are addressed to (a subject token).
    pub server: String,
    /// This instance.
    pub instance: String,
    /// A digest of everything it offers, so replicas can be compared and unchanged entries
    /// skipped.
    pub sha256: String,
    /// Its tools, with their upstream names.
    pub tools: Vec<Tool>,
    /// Its static resources, by their URIs.
    #[serde(default)]
    pub resources: Vec<Resource>,
    /// Its resource templates.
    #[serde(default)]
    pub resource_templates: Vec<ResourceTemplate>,
    /// Its prompts, with their upstream names.
    #[serde(default)]
    pub prompts: Vec<Prompt>,
    /// It reads a request's body from a claim (`Mcp-Body-Claim`, `crate::claims`) when the
    /// body did not fit the bus. An entry without it (an older worker's, another
    /// implementation's) does not: a gateway sends a request that way only when every
    /// instance of its server does, since any of them may take it.
    #[serde(default)]
    pub body_claims: bool,
    /// It reads a durable task's request from `TY_TASK_BODIES` when the request did not fit
    /// its job (`crate::jobs`). A gateway puts one there only when every instance of its
    /// server says so; any of them may run the job.
    #[serde(default)]
    pub task_body_claims: bool,
    /// Its tools that decide when their task starts
    /// ([`ToolDef::with_deferred_task`](toolyard::ToolDef::with_deferred_task)): a gateway
    /// runs their first rounds in place, sending `Mcp-Task-Handoff`, and makes the task
    /// when the worker hands it back. A tool not listed is a task from its first round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred_tasks: Vec<String>,
    /// Whose requests its pool takes ([`Scope`]); absent: every caller's (as every older
    /// worker's). A gateway exposes only the pools that take its own calls.
    #[serde(default, skip_serializing_if = "Scope::is_every")]
    pub scope: Scope,
    /// The revision of this instance's first entry: the order in which pools joined, so of
    /// two whose scopes overlap the later one gives way (`Worker::start`). Absent from the
    /// first entry itself (`joining`), whose own revision it is, and from an older worker's,
    /// which joined before any that can give way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<u64>,
    /// This is the instance's first entry, put before it subscribes: it joins at this
    /// entry's revision, once no pool that joined earlier overlaps it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joining: bool,
    /// What it offers only to some callers ([`Restricted`]); absent: nothing.
    #[serde(default, skip_serializing_if = "Restricted::is_empty")]
    pub for_users: Restricted,
}

/// What a worker offers only to some callers: its items whose
/// [`Audience`](toolyard::Audience) is a list of principals, each with the tokens of those
/// principals ([`principal_token`](crate::principal_token): no principal is written to the
/// bucket). A gateway lists each to the callers whose principal's token is among them and
/// sends their calls with their principal, which the worker checks again. An older gateway
/// does not read this, so it offers none of it: nothing reaches a caller it is not for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restricted {
    /// Tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ForUsers<Tool>>,
    /// Static resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ForUsers<Resource>>,
    /// Resource templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_templates: Vec<ForUsers<ResourceTemplate>>,
    /// Prompts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<ForUsers<Prompt>>,
}

impl Restricted {
    /// Whether it offers nothing.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
            && self.resources.is_empty()
            && self.resource_templates.is_empty()
            && self.prompts.is_empty()
    }
}

/// One item offered to the callers whose principal's token is in `tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForUsers<T> {
    /// The item, as a listing shows it.
    pub item: T,
    /// The tokens of the principals it is for.
    pub tokens: Vec<String>,
}

impl CatalogEntry {
    /// An entry offering `tools` only, with its digest computed.
    pub fn new(server: &str, instance: &str, tools: Vec<Tool>) -> CatalogEntry {
        CatalogEntry {
            server: server.to_owned(),
            instance: instance.to_owned(),
            sha256: String::new(),
            tools,
            resources: Vec::new(),
            resource_templates: Vec::new(),
            prompts: Vec::new(),
            body_claims: false,
            task_body_claims: false,
            deferred_tasks: Vec::new(),
            scope: Scope::every(),
            joined: None,
            joining: false,
            for_users: Restricted::default(),
        }
        .sealed()
    }

    /// The entry also offering these items to some callers only (digest recomputed).
    #[must_use]
    pub fn with_for_users(mut self, restricted: Restricted) -> CatalogEntry {
        self.for_users = restricted;
        self.sealed()
    }

    /// The entry also offering these resources and templates (digest recomputed).
    #[must_use]
    pub fn with_resources(
        mut self,
        resources: Vec<Resource>,
        templates: Vec<ResourceTemplate>,
    ) -> CatalogEntry {
        self.resources = resources;
        self.resource_templates = templates;
        self.sealed()
    }

    /// The entry also offering these prompts (digest recomputed).
    #[must_use]
    pub fn with_prompts(mut self, prompts: Vec<Prompt>) -> CatalogEntry {
        self.prompts = prompts;
        self.sealed()
    }

    /// The entry also naming the tools that defer their task (digest recomputed).
    #[must_use]
    pub fn with_deferred_tasks(mut self, tools: Vec<String>) -> CatalogEntry {
        self.deferred_tasks = tools;
        self.sealed()
    }

    /// The digest of everything offered (not of the names), so two instances serving the
    /// same things have the same one.
    fn sealed(mut self) -> CatalogEntry {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Offer<'a> {
            tools: &'a [Tool],
            resources: &'a [Resource],
            resource_templates: &'a [ResourceTemplate],
            prompts: &'a [Prompt],
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            deferred_tasks: &'a [String],
            #[serde(skip_serializing_if = "Restricted::is_empty")]
            for_users: &'a Restricted,
        }
        let bytes = serde_json::to_vec(&Offer {
            tools: &self.tools,
            resources: &self.resources,
            resource_templates: &self.resource_templates,
            prompts: &self.prompts,
            deferred_tasks: &self.deferred_tasks,
            for_users: &self.for_users,
        })
        .unwrap_or_default();
        self.sha256 = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self
    }

    /// Its key in the bucket.
    pub fn key(&self) -> String {
        key(&self.server, &self.instance)
    }

    /// When its pool joined, this entry being at `revision`: older workers' entries (they
    /// cannot give way) first.
    pub(crate) fn joined_at(&self, revision: u64) -> u64 {
        match (self.joining, self.joined) {
            (true, _) => revision,
            (false, joined) => joined.unwrap_or(0),
        }
    }
}

/// The key of an instance's entry.
pub(crate) fn key(server: &str, instance: &str) -> String {
    format!("srv.{server}.{instance}")
}

/// How long looking the bucket up is retried when JetStream does not answer: a cluster that
/// has just elected its meta leader may leave the first requests unanswered (seen under
/// load), and one without quorum never answers (N7), which a starting process should learn
/// in seconds.
const LOOKUP_BUDGET: Duration = Duration::from_secs(5);

/// The catalog bucket, created when it does not exist yet (any worker or gateway may be
/// first).
pub(crate) async fn bucket(
    js: &jetstream::Context,
    heartbeat: Duration,
    replicas: usize,
) -> Result<kv::Store, NatsError> {
    let config = kv::Config {
        bucket: BUCKET.to_owned(),
        description: "Toolyard: what each worker instance serves".to_owned(),
        history: 1,
        max_age: heartbeat * 3,
        max_value_size: 8 * 1024 * 1024,
        limit_markers: Some(heartbeat),
        // On a cluster, more than one replica keeps the catalog through a node's loss; with
        // quorum lost, puts then fail (bounded) while calls go on (N7).
        num_replicas: replicas.max(1),
        ..Default::default()
    };
    Box::pin(open_bucket(js, config, "catalog")).await
}

/// Opens the KV bucket `config` names, creating it when it does not exist yet. Only a bucket
/// JetStream says does not exist is created: one that cannot be looked up (no quorum, a
/// timeout) could not be created either, and is retried for [`LOOKUP_BUDGET`] at most; so is
/// a creation the cluster cannot place yet ([`placement_pending`]).
pub(crate) async fn open_bucket(
    js: &jetstream::Context,
    config: kv::Config,
    what: &str,
) -> Result<kv::Store, NatsError> {
    let name = config.bucket.clone();
    // Read once the server has answered (a client still connecting has no version yet), and
    // whatever it answered: an old server's answers fail in ways that say nothing of its
    // age, and a bucket it did open would lack what the bridge relies on.
    let too_old = || {
        older_than_supported(&js.client().server_info())
            .map(|old| NatsError::Bus(format!("the {what} bucket {name}: {old}")))
    };
    let give_up = tokio::time::Instant::now() + LOOKUP_BUDGET;
    loop {
        let looked_up = js.get_key_value(&name).await;
        if let Some(old) = too_old() {
            return Err(old);
        }
        match looked_up {
            Ok(store) => return Ok(store),
            Err(e) if missing(&e) => break,
            Err(e) if tokio::time::Instant::now() >= give_up => {
                return Err(NatsError::Bus(format!(
                    "the {what} bucket {name} cannot be looked up (is JetStream available?): {e}"
                )))
            }
            Err(e) => {
                tracing::debug!(target: "toolyard::nats", error = %e, "looking the {what} bucket up failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    loop {
        let create = match js.create_key_value(config.clone()).await {
            Ok(store) => return Ok(store),
            Err(create) => create,
        };
        // Another process may have created it between our get and create.
        if let Ok(store) = js.get_key_value(&name).await {
            return Ok(store);
        }
        if let Some(old) = too_old() {
            return Err(old);
        }
        if !placement_pending(&create) || tokio::time::Instant::now() >= give_up {
            return Err(NatsError::Bus(format!(
                "the {what} bucket {name}: {create}"
            )));
        }
        tracing::debug!(target: "toolyard::nats", error = %create, "creating the {what} bucket failed; retrying");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The oldest nats-server the buckets work with: the catalog's per-key delete markers
/// (`limit_markers`) came with 2.11. Older servers failed without saying why: async-nats
/// 0.51 could not read 2.9's answers to a bucket lookup at all ("data did not match any variant
/// of untagged enum Response"; Debian 12 ships 2.9), and refused the catalog on 2.10 with
/// "limit markers not supported", while the task bucket opened there.
const OLDEST_SERVER: (u64, u64) = (2, 11);

/// Why the connected server is too old for the buckets, when it is (`None` when it is recent
/// enough, or its version is not known).
fn older_than_supported(info: &async_nats::ServerInfo) -> Option<String> {
    let mut parts = info.version.split('.').map(str::parse::<u64>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return None;
    };
    ((major, minor) < OLDEST_SERVER).then(|| {
        format!(
            "the NATS server is version {}; the bridge needs nats-server {}.{} or newer \
             (JetStream key-value buckets with per-key delete markers)",
            info.version, OLDEST_SERVER.0, OLDEST_SERVER.1,
        )
    })
}

/// Whether creating a bucket failed only because the cluster cannot place it yet: a cluster
/// just formed (or a node rejoining) answers "no suitable peers for placement" until its
/// peers are known, and a request may time out meanwhile. Seen when gateways, workers and a
/// 3-node cluster start together (and in the 3-node task test). Anything else (a bad
/// configuration, JetStream off) is final.
fn placement_pending(e: &jetstream::context::CreateKeyValueError) -> bool {
    use jetstream::context::{CreateKeyValueErrorKind, CreateStreamError, CreateStreamErrorKind};
    use jetstream::ErrorCode;
    if e.kind() == CreateKeyValueErrorKind::TimedOut {
        return true;
    }
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<CreateStreamError>())
        .is_some_and(|s| match s.kind() {
            CreateStreamErrorKind::TimedOut => true,
            CreateStreamErrorKind::JetStream(j) => [
                ErrorCode::CLUSTER_NO_PEERS,
                ErrorCode::INSUFFICIENT_RESOURCES,
                ErrorCode::CLUSTER_INCOMPLETE,
                ErrorCode::CLUSTER_NOT_AVAILABLE,
            ]
            .contains(&j.error_code()),
            _ => false,
        })
}

/// Whether looking the bucket up failed because its stream does not exist (rather than
/// because JetStream did not answer).
fn missing(e: &jetstream::context::KeyValueError) -> bool {
    use jetstream::context::{GetStreamError, GetStreamErrorKind};
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<GetStreamError>())
        .is_some_and(|s| {
            matches!(s.kind(), GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_older_than_2_11_is_named_with_the_version_needed() {
        let info = |version: &str| async_nats::ServerInfo {
            version: version.to_owned(),
            ..Default::default()
        };
        let why = older_than_supported(&info("2.9.10")).expect("2.9 is too old");
        assert!(
            why.contains("version 2.9.10") && why.contains("2.11 or newer"),
            "{why}"
        );
        assert!(older_than_supported(&info("2.10.24")).is_some());
        assert!(older_than_supported(&info("1.4.1")).is_some());
        for recent in ["2.11.0", "2.11.0-RC.1", "2.15.1", "3.0.0"] {
            assert!(older_than_supported(&info(recent)).is_none(), "{recent}");
        }
        // Not connected yet, or a version we cannot read: no verdict.
        assert!(older_than_supported(&info("")).is_none());
        assert!(older_than_supported(&info("dev")).is_none());
    }

    #[test]
    fn an_entry_without_resources_or_prompts_still_parses() {
        let old = r#"{"server":"calc","instance":"1","sha256":"x","tools":[]}"#;
        let entry: CatalogEntry = serde_json::from_str(old).unwrap();
        assert!(entry.resources.is_empty() && entry.resource_templates.is_empty());
        assert!(entry.prompts.is_empty());
        assert!(!entry.body_claims, "an older worker reads no body claims");
        assert!(!entry.task_body_claims, "nor tasks' bodies");
    }

    #[test]
    fn the_digest_covers_resources_templates_and_prompts() {
        let base = CatalogEntry::new("calc", "1", Vec::new());
        let with_resource = base
            .clone()
            .with_resources(vec![Resource::new("calc://a", "a")], Vec::new());
        let with_template = base.clone().with_resources(
            Vec::new(),
            vec![ResourceTemplate {
                uri_template: "calc://{x}".into(),
                name: "x".into(),
                ..Default::default()
            }],
        );
        let with_prompt = base.clone().with_prompts(vec![Prompt {
            name: "p".into(),
            ..Default::default()
        }]);
        let digests = [
            &base.sha256,
            &with_resource.sha256,
            &with_template.sha256,
            &with_prompt.sha256,
        ];
        for (i, a) in digests.iter().enumerate() {
            for b in &digests[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // The instance does not enter it: replicas compare equal.
        assert_eq!(
            CatalogEntry::new("calc", "2", Vec::new()).sha256,
            base.sha256
        );
        let json = serde_json::to_value(&with_template).unwrap();
        assert!(json["resourceTemplates"].is_array(), "{json}");
    }
}
