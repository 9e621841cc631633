//! One reply subscription for every call a gateway makes: `{prefix}.*` on a fresh inbox
//! prefix, each call answering on `{prefix}.{n}`, and a demultiplexer that hands every frame
//! to its call by the last token.
//!
//! A subscription per call (SUB, then UNSUB when it ends) cost two protocol round trips to
//! the server and a server-side interest change per call, most of the bus overhead of a short
//! call. `Client::request` muxes the same way but returns one message, and a call answers
//! with a stream of frames. The worker's `.ctl` control subject (`{prefix}.{n}.ctl`) has one
//! token more, so cancellations never reach the demultiplexer.

use async_nats::{Client, Message};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

type Routes = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Message>>>>;

/// The shared reply subscription and its routing table.
#[derive(Debug)]
pub(crate) struct Inboxes {
    prefix: String,
    next: AtomicU64,
    routes: Routes,
    demux: tokio::task::JoinHandle<()>,
}

fn lock(
    routes: &Routes,
) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::UnboundedSender<Message>>> {
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inboxes {
    /// Subscribes `{prefix}.*` and starts the demultiplexer.
    pub(crate) async fn start(client: &Client) -> Result<Inboxes, async_nats::SubscribeError> {
        let prefix = client.new_inbox();
        let mut replies = client.subscribe(format!("{prefix}.*")).await?;
        let routes: Routes = Arc::default();
        let table = routes.clone();
        let demux = tokio::spawn(async move {
            while let Some(message) = replies.next().await {
                let id = message
                    .subject
                    .rsplit('.')
                    .next()
                    .and_then(|t| t.parse::<u64>().ok());
                let Some(id) = id else { continue };
                // A frame for a call that ended (late keep-alive, answer after a cancel) has
                // no route: dropped.
                if let Some(tx) = lock(&table).get(&id) {
                    let _ = tx.send(message);
                }
            }
        });
        Ok(Inboxes {
            prefix,
            next: AtomicU64::new(1),
            routes,
            demux,
        })
    }

    /// A reply subject of its own for one call, and the frames that arrive on it until the
    /// returned [`Inbox`] is dropped.
    pub(crate) fn open(&self) -> Inbox {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.routes).insert(id, tx);
        Inbox {
            subject: format!("{}.{id}", self.prefix),
            id,
            frames: rx,
            routes: self.routes.clone(),
        }
    }
}

impl Drop for Inboxes {
    fn drop(&mut self) {
        self.demux.abort();
    }
}

/// One call's reply subject and frames; leaves the routing table when dropped.
pub(crate) struct Inbox {
    /// The reply subject to publish the call with.
    pub(crate) subject: String,
    id: u64,
    frames: mpsc::UnboundedReceiver<Message>,
    routes: Routes,
}

impl Inbox {
    /// The next frame; `None` when the shared subscription ended (the client closed).
    pub(crate) async fn next(&mut self) -> Option<Message> {
        self.frames.recv().await
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        lock(&self.routes).remove(&self.id);
    }
}
