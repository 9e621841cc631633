//! Where a request's answer and notifications go.
//!
//! A [`Sink`] takes serialized messages for one peer: for stdio and in-memory connections it
//! feeds the connection's single writer; for an HTTP request it feeds that request's response
//! stream. Bytes are serialized by the producer (the task that ran the handler), so the writer
//! only copies and batches them.

use std::fmt;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Receives serialized JSON-RPC messages (without a trailing newline) for one peer.
pub trait MessageSink: Send + Sync + 'static {
    /// Queues one message. Returns false when the peer is gone.
    fn send(&self, message: Vec<u8>) -> bool;
    /// True when nothing more can be delivered (connection closed, stream dropped).
    fn is_closed(&self) -> bool;
}

/// A shared handle to a [`MessageSink`].
#[derive(Clone)]
pub struct Sink(Arc<dyn MessageSink>);

impl Sink {
    /// Wraps a sink.
    pub fn new(sink: impl MessageSink) -> Self {
        Sink(Arc::new(sink))
    }
    /// A sink feeding an unbounded channel (a connection's writer task).
    pub fn channel(tx: mpsc::UnboundedSender<Vec<u8>>) -> Self {
        Self::new(ChannelSink(tx))
    }
    /// Queues one message; false when the peer is gone.
    pub fn send(&self, message: Vec<u8>) -> bool {
        self.0.send(message)
    }
    /// True when the peer is gone.
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
    /// Tells sinks apart: equal for clones of one sink.
    pub(crate) fn identity(&self) -> u64 {
        Arc::as_ptr(&self.0).cast::<()>() as usize as u64
    }
}

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sink")
    }
}

struct ChannelSink(mpsc::UnboundedSender<Vec<u8>>);

impl MessageSink for ChannelSink {
    fn send(&self, message: Vec<u8>) -> bool {
        self.0.send(message).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}
