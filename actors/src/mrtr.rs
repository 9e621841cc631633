//! Multi-round-trip requests (2026-07-28): sealing what a call keeps between rounds into an
//! integrity-protected `requestState`.
//!
//! The server keeps nothing between rounds: the retry may land on another replica. What a
//! tool needs on the next round (the answers it already got, its own state) travels in
//! `requestState`, HMAC-SHA256 signed and bound to the method, the target, a digest of the
//! arguments, the principal and an expiry, so a client can neither forge it nor replay it on
//! another request or after it lapses.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolyard_proto::{ErrorObject, InputResponses};

type HmacSha256 = Hmac<Sha256>;

/// What one round hands to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RoundState {
    /// Method, e.g. `tools/call`.
    pub(crate) m: String,
    /// Target (tool or prompt name, resource URI).
    pub(crate) t: String,
    /// Digest of the request's salient parameters.
    pub(crate) d: String,
    /// Principal the state was issued to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) p: Option<String>,
    /// Expiry, seconds since the Unix epoch.
    pub(crate) e: u64,
    /// Every input answer received so far.
    #[serde(default)]
    pub(crate) r: InputResponses,
    /// The handler's own state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) s: Option<serde_json::Value>,
}

/// Signs and verifies `requestState`. Shared, not copied: every call's future carries
/// one, and a pointer keeps those futures smaller than the key and TTL would.
#[derive(Clone)]
pub struct StateSealer(Arc<SealerKey>);

struct SealerKey {
    /// Replaceable ([`StateSealer::use_secret`]): a process may learn the key its replicas
    /// share only after it started (a NATS worker reads it from the bus before it serves).
    key: RwLock<Key>,
    ttl: Duration,
}

#[derive(Clone, Copy)]
struct Key {
    bytes: [u8; 32],
    /// Made up by this process ([`StateSealer::random`]): no replica shares it.
    random: bool,
    /// The key before [`StateSealer::use_secret`] replaced it: state it sealed (a round a
    /// gateway answered while it waited for the bus) still opens here.
    previous: Option<[u8; 32]>,
}

impl std::fmt::Debug for StateSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSealer")
            .field("ttl", &self.0.ttl)
            .field("random", &self.is_random())
            .finish()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A digest of a request's salient parameters, binding state to one request.
pub(crate) fn digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    B64.encode(&h.finalize()[..16])
}

fn mac_of(key: &[u8; 32]) -> HmacSha256 {
    // HMAC accepts keys of any length; 32 bytes never fails.
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length")
}

fn invalid(why: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid requestState: {why}"))
}

impl StateSealer {
    fn with_key(key: Key, ttl: Duration) -> Self {
        StateSealer(Arc::new(SealerKey {
            key: RwLock::new(key),
            ttl,
        }))
    }

    /// A sealer with a secret key. Replicas that must accept each other's state share the key.
    pub fn new(key: [u8; 32], ttl: Duration) -> Self {
        Self::with_key(
            Key {
                bytes: key,
                random: false,
                previous: None,
            },
            ttl,
        )
    }

    /// A sealer with a random key (state is then only valid on this process).
    pub fn random(ttl: Duration) -> Self {
        Self::with_key(
            Key {
                bytes: rand::random(),
                random: true,
                previous: None,
            },
            ttl,
        )
    }

    /// A sealer whose key is derived from a passphrase.
    pub fn from_secret(secret: &str, ttl: Duration) -> Self {
        Self::new(Sha256::digest(secret.as_bytes()).into(), ttl)
    }

    /// Whether the key was made up by this process ([`StateSealer::random`]): state it seals
    /// opens nowhere else, so a retry landing on a replica fails.
    pub fn is_random(&self) -> bool {
        self.key().random
    }

    /// Seals with the key derived from `secret` (as [`StateSealer::from_secret`] derives it)
    /// from now on, in every clone of this sealer; opens with it, and with the key it
    /// replaces (state this process sealed before keeps opening here, until it expires).
    /// Returns whether the key changed.
    pub fn use_secret(&self, secret: &[u8]) -> bool {
        let bytes: [u8; 32] = Sha256::digest(secret).into();
        let mut key = self.0.key.write().unwrap_or_else(PoisonError::into_inner);
        if key.bytes == bytes {
            return false;
        }
        *key = Key {
            bytes,
            random: false,
            previous: Some(key.bytes),
        };
        true
    }

    fn key(&self) -> Key {
        *self.0.key.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn mac(&self) -> HmacSha256 {
        mac_of(&self.key().bytes)
    }

    pub(crate) fn seal(&self, mut state: RoundState) -> String {
        state.e = now_secs() + self.0.ttl.as_secs().max(1);
        let payload = serde_json::to_vec(&state).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&payload);
        let tag = mac.finalize().into_bytes();
        format!("{}.{}", B64.encode(&payload), B64.encode(tag))
    }

    /// `sealed` signed again with this sealer's key and a fresh expiry, for a state kept
    /// where only trusted writers reach (a durable task's record, where it may wait hours
    /// for a person's answer and then go on in another process, with another key): its
    /// signature and expiry are not checked; what it is bound to (method, target,
    /// arguments, principal) stays.
    pub(crate) fn renew(&self, sealed: &str) -> Result<String, ErrorObject> {
        let (payload, _) = sealed.split_once('.').ok_or_else(|| invalid("malformed"))?;
        let payload = B64.decode(payload).map_err(|_| invalid("malformed"))?;
        let state: RoundState =
            serde_json::from_slice(&payload).map_err(|_| invalid("malformed payload"))?;
        Ok(self.seal(state))
    }

    /// Verifies `sealed` and checks it belongs to this request and caller.
    pub(crate) fn open(
        &self,
        sealed: &str,
        method: &str,
        target: &str,
        digest: &str,
        principal: Option<&str>,
    ) -> Result<RoundState, ErrorObject> {
        let (payload, tag) = sealed.split_once('.').ok_or_else(|| invalid("malformed"))?;
        let payload = B64.decode(payload).map_err(|_| invalid("malformed"))?;
        let tag = B64.decode(tag).map_err(|_| invalid("malformed"))?;
        let key = self.key();
        let signed_with = |key: &[u8; 32]| {
            let mut mac = mac_of(key);
            mac.update(&payload);
            mac.verify_slice(&tag).is_ok()
        };
        if !signed_with(&key.bytes) && !key.previous.as_ref().is_some_and(signed_with) {
            return Err(invalid(
                "integrity check failed (sealed with another key? every replica a retry \
                 may land on must share one state secret)",
            ));
        }
        let state: RoundState =
            serde_json::from_slice(&payload).map_err(|_| invalid("malformed payload"))?;
        if state.e < now_secs() {
            return Err(invalid("expired"));
        }
        if state.m != method || state.t != target || state.d != digest {
            return Err(invalid("issued for a different request"));
        }
        if state.p.as_deref() != principal {
            return Err(invalid("issued to a different principal"));
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> RoundState {
        RoundState {
            m: "tools/call".into(),
            t: "ask".into(),
            d: digest(&[b"{}"]),
            p: None,
            e: 0,
            r: Default::default(),
            s: Some(serde_json::json!({"step": 1})),
        }
    }

    #[test]
    fn a_renewed_state_opens_under_another_key_and_stays_bound_to_its_request() {
        let issuer = StateSealer::random(Duration::from_secs(1));
        let other = StateSealer::random(Duration::from_secs(600));
        let d = digest(&[b"{}"]);
        let mut bound = state();
        bound.p = Some("alice".into());
        let sealed = issuer.seal(bound);
        assert!(other
            .open(&sealed, "tools/call", "ask", &d, Some("alice"))
            .is_err());
        let renewed = other.renew(&sealed).unwrap();
        let opened = other
            .open(&renewed, "tools/call", "ask", &d, Some("alice"))
            .unwrap();
        assert!(opened.e > now_secs() + 500, "a fresh expiry");
        assert_eq!(opened.s, Some(serde_json::json!({"step": 1})));
        assert!(other
            .open(&renewed, "tools/call", "other", &d, Some("alice"))
            .is_err());
        assert!(other
            .open(&renewed, "tools/call", "ask", &d, Some("bob"))
            .is_err());
        assert!(other.renew("not a state").is_err());
        // Lapsed (an answer given hours later): renewed all the same.
        let mut old = state();
        old.e = 1;
        let payload = serde_json::to_vec(&old).unwrap();
        let mut mac = issuer.mac();
        mac.update(&payload);
        let lapsed = format!(
            "{}.{}",
            B64.encode(&payload),
            B64.encode(mac.finalize().into_bytes())
        );
        let expired = issuer.open(&lapsed, "tools/call", "ask", &d, None);
        assert!(expired.unwrap_err().message.contains("expired"));
        let renewed = issuer.renew(&lapsed).unwrap();
        assert!(issuer.open(&renewed, "tools/call", "ask", &d, None).is_ok());
    }

    #[test]
    fn sealed_state_opens_for_the_same_request() {
        let s = StateSealer::random(Duration::from_secs(60));
        let sealed = s.seal(state());
        let opened = s
            .open(&sealed, "tools/call", "ask", &digest(&[b"{}"]), None)
            .unwrap();
        assert_eq!(opened.s, Some(serde_json::json!({"step": 1})));
    }

    #[test]
    fn tampered_state_is_rejected() {
        let s = StateSealer::random(Duration::from_secs(60));
        let sealed = s.seal(state());
        let (payload, tag) = sealed.split_once('.').unwrap();
        let mut bytes = B64.decode(payload).unwrap();
        let pos = bytes.iter().position(|b| *b == b'1').unwrap();
        bytes[pos] = b'2';
        let forged = format!("{}.{}", B64.encode(bytes), tag);
        let err = s
            .open(&forged, "tools/call", "ask", &digest(&[b"{}"]), None)
            .unwrap_err();
        assert_eq!(err.code, toolyard_proto::error::code::INVALID_PARAMS);
    }

    #[test]
    fn state_is_bound_to_request_principal_and_key() {
        let s = StateSealer::random(Duration::from_secs(60));
        let sealed = s.seal(state());
        assert!(s
            .open(&sealed, "tools/call", "other", &digest(&[b"{}"]), None)
            .is_err());
        assert!(s
            .open(&sealed, "tools/call", "ask", &digest(&[b"{\"a\":1}"]), None)
            .is_err());
        assert!(s
            .open(
                &sealed,
                "tools/call",
                "ask",
                &digest(&[b"{}"]),
                Some("mallory")
            )
            .is_err());
        let other = StateSealer::random(Duration::from_secs(60));
        assert!(other
            .open(&sealed, "tools/call", "ask", &digest(&[b"{}"]), None)
            .is_err());
    }

    #[test]
    fn a_random_key_replaced_by_a_shared_secret_opens_what_a_replica_sealed_with_it() {
        let d = digest(&[b"{}"]);
        let here = StateSealer::random(Duration::from_secs(60));
        let clone = here.clone();
        assert!(here.is_random());
        let replica = StateSealer::from_secret("shared", Duration::from_secs(60));
        assert!(!replica.is_random());
        let sealed = replica.seal(state());
        let err = here
            .open(&sealed, "tools/call", "ask", &d, None)
            .unwrap_err();
        assert!(
            err.message.contains("share one state secret"),
            "{}",
            err.message
        );
        here.use_secret(b"shared");
        assert!(!here.is_random());
        // Every clone (each call's future holds one) seals with the new key.
        let opened = clone.open(&sealed, "tools/call", "ask", &d, None).unwrap();
        assert_eq!(opened.s, Some(serde_json::json!({"step": 1})));
        let back = clone.seal(state());
        assert!(replica.open(&back, "tools/call", "ask", &d, None).is_ok());
        // What this process sealed before the switch still opens here.
        let before = StateSealer::random(Duration::from_secs(60));
        let early = before.seal(state());
        before.use_secret(b"shared");
        assert!(before.open(&early, "tools/call", "ask", &d, None).is_ok());
        assert!(before.open(&back, "tools/call", "ask", &d, None).is_ok());
        assert!(replica.open(&early, "tools/call", "ask", &d, None).is_err());
    }
}
