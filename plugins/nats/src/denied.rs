//! Permission violations (N15). A publish the server's authorization refuses does not fail
//! at the client: the message is dropped and the server sends `-ERR 'Permissions Violation
//! for Publish to "<subject>"'`, which async-nats hands to the connection's event callback.
//! Without this a forwarded call would wait in silence until its inactivity deadline. The
//! callback ([`crate::connect`] installs it) reports the subject here, and the calls
//! published to that subject end at once with -32013 (through their reply routes:
//! [`crate::replies`]).

/// The subject of a server's permission-violation message for a publish, if it is one.
pub(crate) fn refused_publish(message: &str) -> Option<&str> {
    let lower = message.to_ascii_lowercase();
    let at = lower.find("permissions violation for publish to ")?;
    let rest = &message[at + "permissions violation for publish to ".len()..];
    let rest = rest.trim_start_matches(['"', '\'']);
    let end = rest.find(['"', '\'', ' ']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|s| !s.is_empty())
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
}
