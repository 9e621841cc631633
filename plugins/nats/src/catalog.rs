//! The tool catalog on the bus: each worker instance puts what it serves into the JetStream
//! KV bucket `TY_CATALOG` under `srv.{server}.{instance}` and re-puts it on a heartbeat;
//! gateways watch the bucket. The bucket's `max_age` (three heartbeats) retires the key of a
//! worker that died without deleting it; delete markers make that expiry visible to watchers.

use crate::error::NatsError;
use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;
use toolyard_proto::Tool;

/// The KV bucket of the catalog.
pub const BUCKET: &str = "TY_CATALOG";

/// How often a worker re-puts its entry.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// What one worker instance serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// The server name its requests are addressed to (a subject token).
    pub server: String,
    /// This instance.
    pub instance: String,
    /// A digest of `tools`, so replicas can be compared and unchanged entries skipped.
    pub sha256: String,
    /// Its tools, with their upstream names.
    pub tools: Vec<Tool>,
}

impl CatalogEntry {
    /// An entry with its digest computed.
    pub fn new(server: &str, instance: &str, tools: Vec<Tool>) -> CatalogEntry {
        let bytes = serde_json::to_vec(&tools).unwrap_or_default();
        let sha256 = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        CatalogEntry {
            server: server.to_owned(),
            instance: instance.to_owned(),
            sha256,
            tools,
        }
    }

    /// Its key in the bucket.
    pub fn key(&self) -> String {
        key(&self.server, &self.instance)
    }
}

/// The key of an instance's entry.
pub(crate) fn key(server: &str, instance: &str) -> String {
    format!("srv.{server}.{instance}")
}

/// The catalog bucket, created when it does not exist yet (any worker or gateway may be
/// first).
pub(crate) async fn bucket(
    js: &jetstream::Context,
    heartbeat: Duration,
) -> Result<kv::Store, NatsError> {
    if let Ok(store) = js.get_key_value(BUCKET).await {
        return Ok(store);
    }
    let config = kv::Config {
        bucket: BUCKET.to_owned(),
        description: "Toolyard: the tools each worker instance serves".to_owned(),
        history: 1,
        max_age: heartbeat * 3,
        max_value_size: 8 * 1024 * 1024,
        limit_markers: Some(heartbeat),
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another process may have created it between our get and create.
        Err(create) => js
            .get_key_value(BUCKET)
            .await
            .map_err(|_| NatsError::Bus(format!("the catalog bucket {BUCKET}: {create}"))),
    }
}
