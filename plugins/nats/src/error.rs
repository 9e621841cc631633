//! [`NatsError`]: why the bridge could not start or keep going.

/// The bridge could not start or keep going. Calls that fail on the bus are not this type:
/// they answer their caller with a JSON-RPC error (`wire`'s codes).
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// Connecting to the NATS server failed.
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect {
        /// The server URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A subscription, publish or JetStream operation failed.
    #[error("NATS: {0}")]
    Bus(String),
    /// A setting is unusable (e.g. a server name that is not a subject token).
    #[error("NATS bridge: {0}")]
    Config(String),
}
