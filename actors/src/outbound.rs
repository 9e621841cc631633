//! Server-to-client requests of a legacy connection and their pending replies.

use crate::context::InputError;
use crate::sink::Sink;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use toolyard_proto::{jsonrpc, ErrorObject, RequestId};

type Pending = oneshot::Sender<Result<Box<RawValue>, ErrorObject>>;

/// The pending table of one connection's requests to its client.
pub(crate) struct Outbound {
    next_id: AtomicI64,
    pending: Mutex<HashMap<RequestId, Pending>>,
    timeout: Duration,
}

impl Outbound {
    pub(crate) fn new(timeout: Duration) -> Self {
        Outbound {
            next_id: AtomicI64::new(1),
            pending: Mutex::new(HashMap::new()),
            timeout,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a request and waits for its reply, the timeout, or cancellation (which also sends
    /// `notifications/cancelled` to the client).
    pub(crate) async fn request<P: Serialize>(
        &self,
        sink: &Sink,
        method: &str,
        params: &P,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, InputError> {
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let bytes = jsonrpc::request_bytes(&id, method, params)
            .map_err(|e| InputError::Malformed(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        self.table().insert(id.clone(), tx);
        if !sink.send(bytes) {
            self.table().remove(&id);
            return Err(InputError::Cancelled);
        }
        let outcome = tokio::select! {
            r = rx => match r {
                Ok(Ok(raw)) => Ok(raw),
                Ok(Err(e)) => Err(InputError::Client(e)),
                Err(_) => Err(InputError::Cancelled),
            },
            _ = tokio::time::sleep(self.timeout) => Err(InputError::Timeout),
            _ = cancel.cancelled() => Err(InputError::Cancelled),
        };
        if matches!(
            outcome,
            Err(InputError::Timeout) | Err(InputError::Cancelled)
        ) && self.table().remove(&id).is_some()
        {
            let note = serde_json::json!({"requestId": id, "reason": "no longer needed"});
            if let Ok(b) = jsonrpc::notification_bytes("notifications/cancelled", &note) {
                sink.send(b);
            }
        }
        outcome
    }

    /// Delivers the client's reply; false when no request with that id is pending.
    pub(crate) fn resolve(
        &self,
        id: &RequestId,
        reply: Result<Box<RawValue>, ErrorObject>,
    ) -> bool {
        match self.table().remove(id) {
            Some(tx) => {
                let _ = tx.send(reply);
                true
            }
            None => false,
        }
    }

    /// Fails every pending request (the connection closed).
    pub(crate) fn fail_all(&self) {
        self.table().clear();
    }
}
