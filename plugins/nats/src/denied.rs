//! Permission violations (N15). A publish the server's authorization refuses does not fail
//! at the client: the message is dropped and the server sends `-ERR 'Permissions Violation
//! for Publish to "<subject>"'`, which async-nats hands to the connection's event callback.
//! Without this a forwarded call would wait in silence until its inactivity deadline. The
//! callback ([`crate::connect`] installs it) reports the subject here, and the calls waiting
//! on that subject end at once with -32013.

use rustc_hash::FxHashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use tokio::sync::oneshot;

type Waiters = FxHashMap<String, Vec<(u64, oneshot::Sender<String>)>>;

fn waiters() -> MutexGuard<'static, Waiters> {
    static WAITERS: OnceLock<Mutex<Waiters>> = OnceLock::new();
    WAITERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A call's interest in refusals of its request subject; dropping it withdraws it.
pub(crate) struct Watch {
    subject: String,
    id: u64,
    /// Resolves with the server's message when the subject is refused.
    pub(crate) refused: oneshot::Receiver<String>,
}

/// Starts watching for refusals of publishes to `subject`.
pub(crate) fn watch(subject: &str) -> Watch {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let (tx, refused) = oneshot::channel();
    // Calls on one subject share its entry: the key is copied only for the first.
    let mut all = waiters();
    match all.get_mut(subject) {
        Some(list) => list.push((id, tx)),
        None => {
            all.insert(subject.to_owned(), vec![(id, tx)]);
        }
    }
    drop(all);
    Watch {
        subject: subject.to_owned(),
        id,
        refused,
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut all = waiters();
        if let Some(list) = all.get_mut(&self.subject) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                all.remove(&self.subject);
            }
        }
    }
}

/// The subject of a server's permission-violation message for a publish, if it is one.
pub(crate) fn refused_publish(message: &str) -> Option<&str> {
    let lower = message.to_ascii_lowercase();
    let at = lower.find("permissions violation for publish to ")?;
    let rest = &message[at + "permissions violation for publish to ".len()..];
    let rest = rest.trim_start_matches(['"', '\'']);
    let end = rest.find(['"', '\'', ' ']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|s| !s.is_empty())
}

/// Ends every call waiting on `subject` with `message`.
pub(crate) fn report(subject: &str, message: &str) {
    if let Some(list) = waiters().remove(subject) {
        for (_, tx) in list {
            let _ = tx.send(message.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_subject_is_read_from_the_servers_message() {
        assert_eq!(
            refused_publish(
                r#"Permissions Violation for Publish to "mcp.v1.req._._.secret.tools.call.echo""#
            ),
            Some("mcp.v1.req._._.secret.tools.call.echo")
        );
        assert_eq!(
            refused_publish("permissions violation for publish to 'a.b'"),
            Some("a.b")
        );
        assert_eq!(
            refused_publish("Permissions Violation for Subscription to \"x\""),
            None
        );
        assert_eq!(refused_publish("authorization violation"), None);
    }

    #[tokio::test]
    async fn a_report_ends_the_watches_of_its_subject_only() {
        let mut a = watch("s.one");
        let mut b = watch("s.two");
        report("s.one", "refused");
        assert_eq!(a.refused.try_recv().unwrap(), "refused");
        assert!(b.refused.try_recv().is_err());
        drop(b);
        assert!(
            !waiters().contains_key("s.two"),
            "a dropped watch is withdrawn"
        );
    }
}
