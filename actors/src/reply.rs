//! [`Reply`]: the one-shot answer to a request, carried with the request through the actors.
//!
//! Rule: no request is ever left unanswered. A `Reply` that is dropped without being used (a
//! handler actor died with the message in its mailbox, a task panicked) sends an internal
//! error to the caller from its `Drop`.

use crate::middleware::{Outcome, Watch};
use crate::sink::Sink;
use serde::Serialize;
use std::sync::Arc;
use toolyard_proto::{jsonrpc, ErrorObject, RequestId, ResultType};

/// Called when a request finishes, so its connection can forget it (cancellation table).
pub(crate) trait InflightRelease: Send + Sync + 'static {
    fn release(&self, id: &RequestId);
}

/// The answer channel of one request.
pub struct Reply {
    id: RequestId,
    sink: Sink,
    modern: bool,
    release: Option<Arc<dyn InflightRelease>>,
    watch: Option<Box<Watch>>,
    done: bool,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply").field("id", &self.id).finish()
    }
}

impl Reply {
    /// A reply to `id` written to `sink`; `modern` results get `resultType`.
    pub fn new(id: RequestId, sink: Sink, modern: bool) -> Self {
        Reply {
            id,
            sink,
            modern,
            release: None,
            watch: None,
            done: false,
        }
    }

    pub(crate) fn with_release(mut self, release: Arc<dyn InflightRelease>) -> Self {
        self.release = Some(release);
        self
    }

    pub(crate) fn with_watch(mut self, watch: Option<Box<Watch>>) -> Self {
        self.watch = watch;
        self
    }

    /// The request id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// True when the request came in the modern (2026-07-28) generation.
    pub fn is_modern(&self) -> bool {
        self.modern
    }

    /// The sink the answer goes to (also used for the request's notifications).
    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    fn finish(&mut self, bytes: Vec<u8>, outcome: Outcome) {
        self.done = true;
        if let Some(r) = self.release.take() {
            r.release(&self.id);
        }
        match self.watch.take() {
            Some(w) if w.captures => {
                w.finish_with_response(&outcome, &bytes);
                self.sink.send(bytes);
            }
            watch => {
                self.sink.send(bytes);
                if let Some(w) = watch {
                    w.finish(&outcome);
                }
            }
        }
    }

    /// Answers with a complete result.
    pub fn ok<T: Serialize + ?Sized>(self, result: &T) {
        self.ok_as(result, ResultType::Complete, Outcome::Ok)
    }

    /// Answers with a result of the given kind; `outcome` is what layers see.
    pub fn ok_as<T: Serialize + ?Sized>(mut self, result: &T, kind: ResultType, outcome: Outcome) {
        let rt = self.modern.then_some(kind.as_str());
        match jsonrpc::result_bytes(&self.id, result, rt) {
            Ok(bytes) => self.finish(bytes, outcome),
            Err(e) => {
                let err = ErrorObject::internal(format!("result not serializable: {e}"));
                let bytes = jsonrpc::error_bytes(Some(&self.id), &err);
                self.finish(bytes, Outcome::Error(err.code));
            }
        }
    }

    /// Answers with a result that already is JSON text (a JSON object: a forwarded result),
    /// copied into the response as it is.
    pub fn ok_raw(mut self, json: &str, kind: ResultType, outcome: Outcome) {
        let rt = self.modern.then_some(kind.as_str());
        let mut bytes = Vec::with_capacity(json.len() + 64);
        jsonrpc::write_result(&mut bytes, &self.id, json.as_bytes(), rt);
        self.finish(bytes, outcome);
    }

    /// Answers that the call's deferred task is the caller's to make
    /// ([`TaskRole::HandOff`](crate::TaskRole::HandOff)): an empty result of the kind
    /// [`TASK_HANDOFF`](crate::TASK_HANDOFF).
    pub(crate) fn handed_off(mut self) {
        let empty = serde_json::Map::new();
        match jsonrpc::result_bytes(&self.id, &empty, Some(crate::context::TASK_HANDOFF)) {
            Ok(bytes) => self.finish(bytes, Outcome::Ok),
            Err(e) => self.err(ErrorObject::internal(format!(
                "result not serializable: {e}"
            ))),
        }
    }

    /// Answers with an error.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    pub fn err(mut self, error: ErrorObject) {
        let bytes = jsonrpc::error_bytes(Some(&self.id), &error);
        self.finish(bytes, Outcome::Error(error.code));
    }

    /// Ends the request without a response (it was cancelled: the protocol says the receiver
    /// of a cancellation should not answer).
    pub fn cancelled(mut self) {
        self.done = true;
        if let Some(r) = self.release.take() {
            r.release(&self.id);
        }
        if let Some(w) = self.watch.take() {
            w.finish(&Outcome::Cancelled);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.done {
            let err = ErrorObject::internal("the request's handler stopped before answering");
            let bytes = jsonrpc::error_bytes(Some(&self.id), &err);
            self.finish(bytes, Outcome::Error(err.code));
        }
    }
}
