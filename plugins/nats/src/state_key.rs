//! The key that seals `requestState`, shared through the bus by the workers of one name, and
//! by the gateways.
//!
//! A multi-round-trip call (an elicitation, a sampling or a roots question, 2026-07-28's
//! `input_required`) is answered by sending the call again with the sealed state, and that
//! retry goes to the name's queue group: any worker may take it, and it opens only where the
//! key that sealed it is. A server built without a state secret seals with a key it made up,
//! so with two workers of one name about every other such retry failed "Invalid
//! requestState: integrity check failed" — the README's own two-worker example did. Such a
//! server now takes the key its name's workers share: the first worker to start writes a
//! random secret under `worker.{name}` in the bucket [`BUCKET`] (a create, which exactly one
//! wins), every other reads it. Gateways do the same under [`GATEWAYS`]: a 2026-07-28
//! caller's retry, behind a load balancer, may reach another gateway than the one that
//! sealed its state. A server given a secret (`--state-secret`, the builder's
//! `state_secret`) keeps its own: whoever may read the bucket may seal state the servers
//! trust, so a deployment whose bus is open to callers it does not trust gives every server
//! the same secret and keeps it off the bus.
//!
//! The key is followed, not read once: a new value put under it (an operator rotating it)
//! is taken by every server sharing it at once, and what the key it replaces sealed still
//! opens, so the input rounds in flight finish. Deleting the key makes the next server to
//! start write a new one, which the others then take the same way.

use crate::catalog;
use crate::error::NatsError;
use async_nats::jetstream::{self, kv};
use std::fmt::Write as _;
use toolyard::Server;

/// The JetStream KV bucket holding the state secrets: a worker name's under
/// `worker.{name}`, the gateways' under `gateway`.
pub const BUCKET: &str = "TY_STATE_KEYS";

/// The key of the secret every gateway on the bus shares: a 2026-07-28 caller's retry of an
/// input round, behind a load balancer, may reach another gateway than the one that asked.
pub(crate) const GATEWAYS: &str = "gateway";

/// The key of worker name `name`'s secret.
pub(crate) fn worker(name: &str) -> String {
    format!("worker.{name}")
}

/// Makes `server` seal with the secret shared under `key` in [`BUCKET`], when it was given
/// none: reads it, or writes a new random one when it is the first. Returns, when the
/// server now seals with the shared secret, the task that follows the key (a value put
/// under it later is taken: [`follow`]); abort it when the server leaves the bus.
pub(crate) async fn share(
    js: &jetstream::Context,
    server: &Server,
    key: &str,
    replicas: usize,
) -> Result<Option<tokio::task::JoinHandle<()>>, NatsError> {
    if !server.state_key_is_random() {
        return Ok(None);
    }
    let config = kv::Config {
        bucket: BUCKET.to_owned(),
        description: "Toolyard: the secret each worker name seals requestState with".to_owned(),
        history: 1,
        num_replicas: replicas.max(1),
        ..Default::default()
    };
    let store = Box::pin(catalog::open_bucket(js, config, "state key")).await?;
    let ours = random_secret();
    let secret = match store.create(key, ours.clone().into()).await {
        Ok(_) => ours.into(),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => store
            .get(key)
            .await
            .map_err(|e| NatsError::Bus(format!("reading the state key {key}: {e}")))?
            .filter(|secret| !secret.is_empty())
            .ok_or_else(|| NatsError::Bus(format!("the state key {key} is empty")))?,
        Err(e) => return Err(NatsError::Bus(format!("writing the state key {key}: {e}"))),
    };
    server.use_state_secret(&secret);
    Ok(Some(tokio::spawn(follow(
        store,
        key.to_owned(),
        server.clone(),
    ))))
}

/// Takes each value put under `key` from now on (the last one first: a value put since the
/// key was read is not missed), as the secret `server` seals with; the one it replaces
/// still opens what it sealed. A delete or purge changes nothing here (the next server to
/// start writes a new secret, taken then). A watch that fails or ends is set up again a
/// second later.
async fn follow(store: kv::Store, key: String, server: Server) {
    use futures_util::StreamExt;
    loop {
        match store.watch_with_history(&key).await {
            Ok(mut watch) => {
                while let Some(entry) = watch.next().await {
                    match entry {
                        Ok(e) if e.operation == kv::Operation::Put && !e.value.is_empty() => {
                            if server.use_state_secret(&e.value) {
                                tracing::info!(target: "toolyard::nats", key = %key, "the shared state key changed: requestState is sealed with the new one, and what the old one sealed still opens");
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(target: "toolyard::nats", key = %key, error = %e, "the state key's watch failed; setting it up again");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(target: "toolyard::nats", key = %key, error = %e, "cannot watch the state key yet; retrying");
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// 32 random bytes, as hex: what `--state-secret` would be given, so an operator can read it
/// out of the bucket and hand it to a process that does not share the bus.
fn random_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    let mut hex = String::with_capacity(64);
    for byte in bytes {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_secret_is_64_hex_digits_and_differs_each_time() {
        let a = random_secret();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_secret());
    }
}
