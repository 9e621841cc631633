//! The in-flight table of a connection: which request ids are running, for
//! `notifications/cancelled`, duplicate ids, `max_in_flight` and cancelling all on close.

use crate::reply::InflightRelease;
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;
use toolyard_proto::RequestId;

/// The in-flight requests of a connection, by id.
#[derive(Default)]
///
/// Hashed with FxHash: ids are the client's own, and the table is bounded by
/// `max_in_flight`, so a client choosing colliding ids can only slow its own connection.
pub(crate) struct Inflight(Mutex<rustc_hash::FxHashMap<RequestId, CancellationToken>>);

impl Inflight {
    /// Enters a request unless its id is already in flight or the table is full (the
    /// connection actor then answers with the matching error).
    pub(super) fn enter(&self, id: &RequestId, cancel: &CancellationToken, max: usize) -> bool {
        let mut table = self.table();
        if table.contains_key(id) || table.len() >= max {
            return false;
        }
        table.insert(id.clone(), cancel.clone());
        true
    }

    pub(super) fn table(
        &self,
    ) -> std::sync::MutexGuard<'_, rustc_hash::FxHashMap<RequestId, CancellationToken>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl InflightRelease for Inflight {
    fn release(&self, id: &RequestId) {
        self.table().remove(id);
    }
}
