//! [`TaskSettings`]: how the server runs tasks (retention, polling). Plain configuration,
//! read by the server's config and the run table alike.

use std::time::Duration;

/// How the server runs tasks.
#[derive(Debug, Clone, Copy)]
pub struct TaskSettings {
    /// Retention of a task from its creation, unless a 2025-11-25 caller asks for less;
    /// `None` for unlimited.
    pub default_ttl: Option<Duration>,
    /// The longest retention a 2025-11-25 caller may ask for.
    pub max_ttl: Duration,
    /// The polling interval suggested to callers.
    pub poll_interval: Duration,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            default_ttl: Some(Duration::from_secs(3600)),
            max_ttl: Duration::from_secs(24 * 3600),
            poll_interval: Duration::from_millis(500),
        }
    }
}
