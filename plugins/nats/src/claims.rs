//! Claim-check for messages larger than the bus's `max_payload`, both ways.
//!
//! Answers (nats-mcp-gateway's scheme): a caller that sends `Mcp-Accept-Claim: 1` lets the
//! worker put an answer that does not fit into the JetStream object store `TY_CLAIMS`
//! (objects expire after 5 minutes, at most 64 MiB each, 1 GiB in all) and send an empty
//! `end` frame carrying `Mcp-Claim: <object>`. The caller reads the object (its SHA-256
//! digest is checked by the reader; its size is capped here, since the size in the metadata
//! is the producer's word), deletes it, and answers as if the frame had carried it. A caller
//! that did not accept claims gets -32012, as before.
//!
//! Requests (Toolyard's own, `Mcp-Body-Claim`): a gateway whose request does not fit puts its
//! body into the same store and publishes the request with an empty body naming the object.
//! The worker reads it and serves the request as if it had come inline. The gateway, not the
//! worker, deletes it once the call has ended: a call sent again (no responders, a lost
//! stream, a busy worker) sends the same object again.
//!
//! Durable tasks' requests (`jobs`): a job too large for its stream puts its call in
//! `TY_TASK_BODIES` under the task's id, where it lives as long as the job may wait; the
//! worker that finishes the task deletes it.

use crate::NatsError;
use async_nats::jetstream::{self, object_store};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The object store claims go to.
pub const BUCKET: &str = "TY_CLAIMS";
/// The object store a durable task's request goes to when it does not fit its job: it lives
/// as long as the job may wait in its stream (`jobs`), not a claim's 5 minutes.
pub const TASK_BODIES: &str = "TY_TASK_BODIES";
/// The largest answer put in a claim.
pub const MAX_CLAIM_BYTES: usize = 64 * 1024 * 1024;
/// How long an unclaimed object lives.
const TTL: Duration = Duration::from_secs(300);
/// How long the eager delete after a read may take.
const DELETE_WITHIN: Duration = Duration::from_secs(2);
/// How long putting or reading a claim may take: a 64 MiB object moves in well under a second
/// on a healthy bus, and a bus that cannot move it must not hold a call forever.
const MOVE_WITHIN: Duration = Duration::from_secs(30);

/// An object store that holds bodies too large for the bus, as its first user creates it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    name: &'static str,
    description: &'static str,
    ttl: Duration,
    replicas: usize,
}

impl Bucket {
    /// `TY_CLAIMS`: answers and plain requests, read within moments.
    pub(crate) const CLAIMS: Bucket = Bucket {
        name: BUCKET,
        description: "Toolyard: answers too large for max_payload, claimed once",
        ttl: TTL,
        replicas: 1,
    };

    /// `TY_TASK_BODIES`: durable tasks' requests, living as long as their jobs may wait
    /// (`ttl`), with the jobs' `replicas`.
    pub(crate) const fn task_bodies(ttl: Duration, replicas: usize) -> Bucket {
        Bucket {
            name: TASK_BODIES,
            description: "Toolyard: durable tasks' requests too large for max_payload",
            ttl,
            replicas,
        }
    }
}

async fn store_of(
    client: &async_nats::Client,
    bucket: Bucket,
) -> Result<object_store::ObjectStore, NatsError> {
    let js = jetstream::new(client.clone());
    if let Ok(store) = js.get_object_store(bucket.name).await {
        return Ok(store);
    }
    let config = object_store::Config {
        bucket: bucket.name.to_owned(),
        description: Some(bucket.description.to_owned()),
        max_age: bucket.ttl,
        max_bytes: 1024 * 1024 * 1024,
        num_replicas: bucket.replicas,
        ..Default::default()
    };
    match js.create_object_store(config).await {
        Ok(store) => Ok(store),
        // Another process may have created it between our get and create.
        Err(create) => js
            .get_object_store(bucket.name)
            .await
            .map_err(|_| NatsError::Bus(format!("the claims bucket {}: {create}", bucket.name))),
    }
}

/// Puts `body` in a claim, in chunks under `max_payload`; the object's name.
pub(crate) async fn put(
    client: &async_nats::Client,
    body: &[u8],
    max_payload: usize,
) -> Result<String, NatsError> {
    let name = nuid::next().to_string();
    put_as(client, Bucket::CLAIMS, &name, body, max_payload).await?;
    Ok(name)
}

/// Puts `body` in `bucket` as `name` (replacing an object of that name), in chunks under
/// `max_payload`.
pub(crate) async fn put_as(
    client: &async_nats::Client,
    bucket: Bucket,
    name: &str,
    body: &[u8],
    max_payload: usize,
) -> Result<(), NatsError> {
    if body.len() > MAX_CLAIM_BYTES {
        return Err(NatsError::Bus(format!(
            "{} bytes is more than a claim may hold ({MAX_CLAIM_BYTES})",
            body.len()
        )));
    }
    let store = store_of(client, bucket).await?;
    let meta = object_store::ObjectMetadata {
        name: name.to_owned(),
        // Headers and framing need room under max_payload.
        chunk_size: Some((max_payload.saturating_sub(4096)).clamp(1024, 128 * 1024)),
        ..Default::default()
    };
    let mut reader = body;
    tokio::time::timeout(MOVE_WITHIN, store.put(meta, &mut reader))
        .await
        .map_err(|_| NatsError::Bus(format!("putting the claim took over {MOVE_WITHIN:?}")))?
        .map_err(|e| NatsError::Bus(format!("putting the claim: {e}")))?;
    Ok(())
}

/// Reads the claim `name` (digest checked, at most [`MAX_CLAIM_BYTES`]) and deletes it.
/// The bucket is looked up once for both (a JetStream API request each time).
pub(crate) async fn take(client: &async_nats::Client, name: &str) -> Result<Vec<u8>, NatsError> {
    let taken = tokio::time::timeout(MOVE_WITHIN, async {
        let store = store_of(client, Bucket::CLAIMS).await?;
        let body = read_object(&store, name, MAX_CLAIM_BYTES).await;
        delete_in_background(store, name);
        body
    })
    .await;
    match taken {
        // Deleted, however the read went; or the bucket could not be looked up, and its
        // TTL removes the object.
        Ok(read) => read,
        Err(_) => {
            discard(client, name);
            Err(moving_took_too_long(name))
        }
    }
}

/// Reads the claim `name` (digest checked, at most `limit` bytes, itself at most
/// [`MAX_CLAIM_BYTES`]), leaving it there.
pub(crate) async fn read(
    client: &async_nats::Client,
    name: &str,
    limit: usize,
) -> Result<Vec<u8>, NatsError> {
    read_from(client, Bucket::CLAIMS, name, limit).await
}

/// [`read`] from `bucket`.
pub(crate) async fn read_from(
    client: &async_nats::Client,
    bucket: Bucket,
    name: &str,
    limit: usize,
) -> Result<Vec<u8>, NatsError> {
    tokio::time::timeout(MOVE_WITHIN, async {
        read_object(&store_of(client, bucket).await?, name, limit).await
    })
    .await
    .map_err(|_| moving_took_too_long(name))?
}

fn moving_took_too_long(name: &str) -> NatsError {
    NatsError::Bus(format!(
        "reading the claim {name} took over {MOVE_WITHIN:?}"
    ))
}

/// The object `name` of `store`, at most `limit` bytes (itself at most [`MAX_CLAIM_BYTES`]),
/// its digest checked by async-nats as it is read.
async fn read_object(
    store: &object_store::ObjectStore,
    name: &str,
    limit: usize,
) -> Result<Vec<u8>, NatsError> {
    let limit = limit.min(MAX_CLAIM_BYTES);
    let object = store
        .get(name)
        .await
        .map_err(|e| NatsError::Bus(format!("fetching the claim {name}: {e}")))?;
    let mut body = Vec::new();
    // What the object's metadata says is the producer's word: the read itself is capped.
    // One byte more than allowed tells an oversize object from one exactly at the cap.
    object
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .await
        .map_err(|e| NatsError::Bus(format!("reading the claim {name}: {e}")))?;
    if body.len() > limit {
        return Err(NatsError::Bus(format!(
            "the claim {name} is larger than {limit} bytes"
        )));
    }
    Ok(body)
}

/// Deletes the claim `name` in the background (within a bound; the bucket's TTL removes
/// what a failed delete leaves). Needs a tokio runtime; without one the TTL does it.
pub(crate) fn discard(client: &async_nats::Client, name: &str) {
    discard_from(client, Bucket::CLAIMS, name);
}

/// [`discard`] from `bucket`.
pub(crate) fn discard_from(client: &async_nats::Client, bucket: Bucket, name: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let client = client.clone();
    let name = name.to_owned();
    runtime.spawn(async move {
        let _ = tokio::time::timeout(DELETE_WITHIN, async {
            if let Ok(store) = store_of(&client, bucket).await {
                let _ = store.delete(name).await;
            }
        })
        .await;
    });
}

/// Deletes `name` from `store` in the background, as [`discard_from`] does, with the bucket
/// already looked up.
fn delete_in_background(store: object_store::ObjectStore, name: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let name = name.to_owned();
    runtime.spawn(async move {
        let _ = tokio::time::timeout(DELETE_WITHIN, store.delete(name)).await;
    });
}
