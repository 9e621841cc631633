//! The wire on the bus: subjects, headers, frames and error codes, compatible with
//! nats-mcp-gateway's wire v1 where it has one (`docs/nats.md` specifies it for other
//! clients). Everything here is pure: no I/O.

use crate::scope::Scope;
use async_nats::HeaderName;
use toolyard_proto::{ErrorObject, RequestId};

// The header names are `HeaderName`s made at compile time: a `&str` name is checked,
// looked up among NATS's standard names and copied into a fresh allocation every time it
// is used, which the forwarding path did for each header it wrote or read.

/// A message's header `name` as text, if it has it.
pub(crate) fn header(
    message: &async_nats::Message,
    name: impl async_nats::header::IntoHeaderName,
) -> Option<&str> {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(async_nats::HeaderValue::as_str)
}

/// The first value of each of `names` in a message's headers, found in one pass over them.
/// A [`header`] per name hashes the name with SipHash for each lookup (~300 instructions);
/// the worker reads nine per request and the caller four per frame.
pub(crate) fn headers<'m, const N: usize>(
    message: &'m async_nats::Message,
    names: [&async_nats::header::HeaderName; N],
) -> [Option<&'m str>; N] {
    let mut found = [None; N];
    if let Some(headers) = &message.headers {
        for (name, values) in headers.iter() {
            if let Some(i) = names.iter().position(|n| *n == name) {
                found[i] = values.first().map(async_nats::HeaderValue::as_str);
            }
        }
    }
    found
}

/// The default subject prefix.
pub const DEFAULT_PREFIX: &str = "mcp.v1";

/// `Mcp-Wire`: the wire version a request speaks (`1`).
pub const WIRE: HeaderName = HeaderName::from_static("Mcp-Wire");
/// `Mcp-Method`: the JSON-RPC method of the request, as in its body.
pub const METHOD: HeaderName = HeaderName::from_static("Mcp-Method");
/// `Mcp-Name`: the tool, prompt or resource a request names, as in its body.
pub const NAME: HeaderName = HeaderName::from_static("Mcp-Name");
/// `MCP-Protocol-Version`: the request's protocol revision.
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("MCP-Protocol-Version");
/// `Mcp-Timeout-Ms`: the caller's remaining budget in milliseconds (relative, so clocks need
/// not agree); the worker cancels the request when it runs out.
pub const TIMEOUT_MS: HeaderName = HeaderName::from_static("Mcp-Timeout-Ms");
/// `Mcp-Task-Handoff: 1` on a `tools/call` of a tool the catalog lists in `deferredTasks`:
/// the caller (a gateway) makes the task. When the tool starts its task, the worker stops it
/// and answers `{"resultType": "task_handoff"}`; the caller then creates the task and
/// publishes its job with that round's answers (docs/nats.md, "Deferred tasks").
pub const TASK_HANDOFF: HeaderName = HeaderName::from_static("Mcp-Task-Handoff");
/// `Mcp-Frame`: what a reply message is (`msg`, `end`, `err`, `ka`).
pub const FRAME: HeaderName = HeaderName::from_static("Mcp-Frame");
/// `Mcp-Seq`: 0, 1, 2... per reply stream, keepalives included; a gap means a frame was
/// dropped (a slow consumer), which the caller turns into -32010.
pub const SEQ: HeaderName = HeaderName::from_static("Mcp-Seq");
/// `Mcp-Worker`: the instance that answered (on `end` and `err` frames).
pub const WORKER: HeaderName = HeaderName::from_static("Mcp-Worker");
/// W3C trace context, carried as on HTTP.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// W3C trace state.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
/// W3C baggage, passed on unchanged.
pub const BAGGAGE: HeaderName = HeaderName::from_static("baggage");
/// The caller's principal, taken by a worker only on a subject whose user token is made from
/// it ([`principal_token`](crate::principal_token)).
pub const PRINCIPAL: HeaderName = HeaderName::from_static("Mcp-Principal");
/// `Mcp-Accept-Claim: 1` on a request: the caller can fetch an answer put in a claim
/// (`crate::claims`) when it does not fit the bus's `max_payload`.
pub const ACCEPT_CLAIM: HeaderName = HeaderName::from_static("Mcp-Accept-Claim");
/// `Mcp-Claim` on an empty `end` frame: the object in the claims bucket holding the answer.
pub const CLAIM: HeaderName = HeaderName::from_static("Mcp-Claim");
/// `Mcp-Body-Claim` on a request with an empty body: the object in the claims bucket holding
/// the request's JSON-RPC body, which did not fit the bus's `max_payload` (Toolyard's own;
/// a worker that reads it says so in its catalog entry, `bodyClaims`).
pub const BODY_CLAIM: HeaderName = HeaderName::from_static("Mcp-Body-Claim");
/// `Mcp-State` on a `ka` frame: [`WAITING`] when the request waits for a free slot of the
/// worker (not started), [`RUNNING`] when it took one (sent, and seen by the broker, before
/// the request runs). A caller whose call's last state is `waiting` when its worker is found
/// gone knows the call never ran, and may send it again whatever its tool.
pub const STATE: HeaderName = HeaderName::from_static("Mcp-State");
/// [`STATE`]: the request waits for a slot; it has not started.
pub const WAITING: &str = "waiting";
/// [`STATE`]: the request took its slot and runs from now on.
pub const RUNNING: &str = "running";

/// The stream was lost (a worker went away, a frame was dropped, the worker is draining):
/// the request may be re-issued.
pub const STREAM_LOST: i32 = -32010;
/// No worker serves the subject (NATS no-responders): nothing was delivered.
pub const NO_RESPONDERS: i32 = -32011;
/// The request or its answer does not fit the bus's `max_payload`.
pub const PAYLOAD_TOO_LARGE: i32 = -32012;
/// The bus refused to carry the request: this connection may not publish to its subject.
pub const PERMISSION_DENIED: i32 = -32013;
/// The worker had no slot and no room to wait: the request was not started (Toolyard's
/// own code; nats-mcp-gateway uses -32014 for credentials).
pub const BUSY: i32 = -32015;
/// The subject, the mirrored headers and the body disagree (the MCP HeaderMismatch code).
pub const HEADER_MISMATCH: i32 = toolyard_proto::error::code::HEADER_MISMATCH;

/// What a reply message on a request's stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A JSON-RPC notification of the request (progress, a log message).
    Msg,
    /// The JSON-RPC response; an empty body means the request was cancelled and has none.
    End,
    /// An error the bridge produced (not the server's answer), echoing the request id.
    Err,
    /// A keepalive, empty.
    Ka,
}

impl Frame {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Frame::Msg => "msg",
            Frame::End => "end",
            Frame::Err => "err",
            Frame::Ka => "ka",
        }
    }

    /// Reads a header value.
    pub fn parse(value: &str) -> Option<Frame> {
        Some(match value {
            "msg" => Frame::Msg,
            "end" => Frame::End,
            "err" => Frame::Err,
            "ka" => Frame::Ka,
            _ => return None,
        })
    }

    /// Whether the frame ends the stream.
    pub fn is_terminal(self) -> bool {
        matches!(self, Frame::End | Frame::Err)
    }
}

/// Whether `token` may stand in a subject as is (`^[A-Za-z0-9_-]+$`).
pub fn token_safe(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The subject of a request: `{prefix}.req.{tenant}.{user}.{server}.{method tokens}.{name}`,
/// with the method's slashes as tokens and `_` for a name that is absent or not token-safe
/// (tenant and user are `_` when unattributed).
pub fn request_subject(prefix: &str, server: &str, method: &str, name: Option<&str>) -> String {
    request_subject_for(prefix, &Scope::every(), server, method, name)
}

/// [`request_subject`] for a request `caller`'s tenant and user make: it reaches the pools
/// that take them ([`Scope`]).
pub fn request_subject_for(
    prefix: &str,
    caller: &Scope,
    server: &str,
    method: &str,
    name: Option<&str>,
) -> String {
    request_subject_of(
        prefix,
        caller.tenant_token(),
        caller.user_token(),
        server,
        method,
        name,
    )
}

/// [`request_subject`] with these tenant and user tokens.
pub(crate) fn request_subject_of(
    prefix: &str,
    tenant: &str,
    user: &str,
    server: &str,
    method: &str,
    name: Option<&str>,
) -> String {
    let name = match name {
        Some(n) if token_safe(n) => n,
        _ => "_",
    };
    format!(
        "{prefix}.req.{tenant}.{user}.{server}.{}.{name}",
        method.replace('/', ".")
    )
}

/// The subjects a worker for `server` of the pool of every caller subscribes to (every
/// tenant and user; [`Scope::worker_subject`] for the others).
pub fn worker_subject(prefix: &str, server: &str) -> String {
    Scope::every().worker_subject(prefix, server)
}

/// The queue group of the workers of `server` serving every caller: one more worker is more
/// capacity ([`Scope::queue_group`] for the others).
pub fn queue_group(server: &str) -> String {
    Scope::every().queue_group(server)
}

/// Where a caller sends `notifications/cancelled` for the request answered on `reply`.
pub fn control_subject(reply: &str) -> String {
    format!("{reply}.ctl")
}

/// Checks a request's subject against its body: the method tokens and the name token must be
/// the ones [`request_subject`] gives for the body, so a subject-based access rule cannot be
/// dodged by a body naming something else.
pub fn subject_matches(
    subject: &str,
    prefix: &str,
    server: &str,
    method: &str,
    name: Option<&str>,
) -> bool {
    // Compared in place, not against a subject built for every request: the tail must be
    // `{server}.{method tokens}.{name}`.
    let Some(tail) = request_tail(subject, prefix) else {
        return false;
    };
    let name = match name {
        Some(n) if token_safe(n) => n,
        _ => "_",
    };
    let tail = tail.as_bytes();
    let (s, m) = (server.len(), method.len());
    // The method's slashes are its subject's dots; every other byte is itself.
    let same_method = |written: &[u8]| {
        written
            .iter()
            .zip(method.bytes())
            .all(|(&w, b)| w == if b == b'/' { b'.' } else { b })
    };
    tail.len() == s + 1 + m + 1 + name.len()
        && tail.starts_with(server.as_bytes())
        && tail[s] == b'.'
        && same_method(&tail[s + 1..s + 1 + m])
        && tail[s + 1 + m] == b'.'
        && tail.ends_with(name.as_bytes())
}

/// The user token of a request subject under `prefix`.
pub(crate) fn request_user_token<'s>(subject: &'s str, prefix: &str) -> Option<&'s str> {
    let rest = subject.strip_prefix(prefix)?.strip_prefix(".req.")?;
    rest.split('.').nth(1)
}

/// What follows the tenant and user tokens (which any value may fill) of a request subject
/// under `prefix`: `{server}.{method tokens}.{name}`.
fn request_tail<'s>(subject: &'s str, prefix: &str) -> Option<&'s str> {
    let rest = subject.strip_prefix(prefix)?.strip_prefix(".req.")?;
    let mut parts = rest.splitn(3, '.');
    let (Some(_tenant), Some(_user), Some(tail)) = (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some(tail)
}

/// Whether a caller-chosen reply subject is safe to publish frames to: not empty, no
/// wildcard, whitespace or empty token (`{reply}.ctl` would be an invalid subscription, and
/// the server would close the connection), not a system subject (`$...`), not under our own
/// request prefix (frames reflected onto other requests).
pub fn usable_reply_subject(reply: &str, prefix: &str) -> bool {
    !reply.is_empty()
        && !reply.starts_with('$')
        && !reply
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.'))
        && tokens_usable(reply)
}

/// Every `.`-separated token of `subject` is non-empty and free of wildcards and whitespace.
/// One pass over the bytes (a `split` and a `chars` walk per token were ~1 200 instructions
/// of every request a worker takes); only a subject with non-ASCII bytes is walked again,
/// for Unicode whitespace.
fn tokens_usable(subject: &str) -> bool {
    let mut token_empty = true;
    for &b in subject.as_bytes() {
        match b {
            b'.' if token_empty => return false,
            b'.' => token_empty = true,
            // `char::is_whitespace` of the ASCII range: tab to carriage return, and space.
            b'*' | b'>' | b'\t'..=b'\r' | b' ' => return false,
            _ => token_empty = false,
        }
    }
    !token_empty && (subject.is_ascii() || !subject.chars().any(char::is_whitespace))
}

/// How our serializer starts every response, whatever its id: a message of a request that
/// does not start so is a notification.
pub(crate) const RESPONSE_START: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";

/// The bytes that start our serializer's answer to request `id`
/// (`{"jsonrpc":"2.0","id":<id>,`): recognizing the answer among a request's messages needs
/// no parse.
pub fn answer_prefix(id: &RequestId) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(32);
    prefix.extend_from_slice(RESPONSE_START);
    let _ = serde_json::to_writer(&mut prefix, id);
    prefix.push(b',');
    prefix
}

/// A JSON-RPC error response echoing `id`, the body of an `err` frame.
pub fn error_body(id: Option<&RequestId>, error: &ErrorObject) -> Vec<u8> {
    toolyard_proto::jsonrpc::error_bytes(id, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_carry_method_tokens_and_a_safe_name() {
        assert_eq!(
            request_subject("mcp.v1", "calc", "tools/call", Some("add")),
            "mcp.v1.req._._.calc.tools.call.add"
        );
        assert_eq!(
            request_subject("mcp.v1", "calc", "tools/call", Some("a.b")),
            "mcp.v1.req._._.calc.tools.call._"
        );
        assert_eq!(
            request_subject("mcp.v1", "calc", "tools/list", None),
            "mcp.v1.req._._.calc.tools.list._"
        );
    }

    #[test]
    fn a_subject_must_name_what_the_body_names() {
        let s = "mcp.v1.req.acme.bob.calc.tools.call.add";
        assert!(subject_matches(
            s,
            "mcp.v1",
            "calc",
            "tools/call",
            Some("add")
        ));
        assert!(!subject_matches(
            s,
            "mcp.v1",
            "calc",
            "tools/call",
            Some("sub")
        ));
        assert!(!subject_matches(s, "mcp.v1", "calc", "tools/list", None));
        // A token-safe name must not hide behind `_`.
        let hidden = "mcp.v1.req._._.calc.tools.call._";
        assert!(!subject_matches(
            hidden,
            "mcp.v1",
            "calc",
            "tools/call",
            Some("add")
        ));
        assert!(subject_matches(
            hidden,
            "mcp.v1",
            "calc",
            "tools/call",
            Some("a b")
        ));
    }

    /// The in-place comparison agrees with building the expected subject and comparing it,
    /// as it was done before, for subjects that differ from the body in every part.
    #[test]
    fn a_subject_is_matched_as_the_built_subject_would_be() {
        let servers = ["calc", "c", "calc2", ""];
        let methods = [
            "tools/call",
            "tools/list",
            "resources/read",
            "tools.call",
            "ping",
            "a/b/c",
        ];
        let names = [
            None,
            Some("add"),
            Some("a b"),
            Some("a.b"),
            Some("_"),
            Some(""),
            Some("add2"),
        ];
        let prefixes = ["mcp.v1", "mcp"];
        let mut subjects = vec![
            String::new(),
            "mcp.v1.req".to_owned(),
            "mcp.v1.req.".to_owned(),
            "mcp.v1.req.a".to_owned(),
            "mcp.v1.req.a.b".to_owned(),
            "mcp.v1.req.a.b.calc".to_owned(),
            "mcp.v1.req.a.b.calc.tools.call.add.extra".to_owned(),
            "mcp.v1.req.a.b.calc.tools/call.add".to_owned(),
            "mcp.v1.req.a.b.calc.tools.calladd".to_owned(),
            "mcp.v1xreq.a.b.calc.tools.call.add".to_owned(),
        ];
        for p in prefixes {
            for s in servers {
                for m in methods {
                    for n in names {
                        let built = request_subject(p, s, m, n);
                        subjects.push(built.replacen("._._.", ".acme.bob.", 1));
                        subjects.push(built);
                    }
                }
            }
        }
        let by_building =
            |subject: &str, prefix: &str, server: &str, method: &str, name: Option<&str>| {
                request_tail(subject, prefix).is_some_and(|tail| {
                    request_subject("", server, method, name).strip_prefix(".req._._.")
                        == Some(tail)
                })
            };
        let mut matched = 0;
        for subject in &subjects {
            for p in prefixes {
                for s in servers {
                    for m in methods {
                        for n in names {
                            let expected = by_building(subject, p, s, m, n);
                            assert_eq!(
                                subject_matches(subject, p, s, m, n),
                                expected,
                                "{subject:?} against {p:?} {s:?} {m:?} {n:?}"
                            );
                            matched += usize::from(expected);
                        }
                    }
                }
            }
        }
        assert!(
            matched > subjects.len(),
            "the cases must include matches ({matched})"
        );
    }

    #[test]
    fn hostile_reply_subjects_are_refused() {
        for bad in [
            "",
            "$JS.API.STREAM.DELETE.x",
            "_INBOX.*",
            "_INBOX.>",
            "_INBOX..x",
            "_INBOX. x",
            "mcp.v1.req._._.calc.tools.call.add",
        ] {
            assert!(!usable_reply_subject(bad, "mcp.v1"), "{bad:?}");
        }
        assert!(usable_reply_subject("_INBOX.abc.def", "mcp.v1"));
    }

    /// The one pass over a reply subject's bytes judges every token as splitting the subject
    /// and walking each token's chars did: every string of up to four characters over an
    /// alphabet of separators, wildcards, ASCII and Unicode whitespace and other characters.
    #[test]
    fn reply_subject_tokens_are_judged_as_the_split_and_char_walk_judged_them() {
        let by_splitting = |subject: &str| {
            subject.split('.').all(|t| {
                !t.is_empty() && !t.contains(['*', '>']) && !t.chars().any(char::is_whitespace)
            })
        };
        let alphabet = [
            "a", ".", "*", ">", " ", "\t", "\u{b}", "\r", "$", "é", "\u{85}", "\u{a0}", "\u{2003}",
        ];
        let mut subjects = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..4 {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            subjects.extend(last.iter().cloned());
        }
        let mut usable = 0;
        for subject in &subjects {
            assert_eq!(tokens_usable(subject), by_splitting(subject), "{subject:?}");
            usable += usize::from(by_splitting(subject));
        }
        assert!(
            usable > 100 && usable < subjects.len() / 2,
            "{usable} of {}",
            subjects.len()
        );
    }

    #[test]
    fn the_answer_prefix_matches_our_serializer() {
        let id = RequestId::from(7);
        let bytes =
            toolyard_proto::jsonrpc::result_bytes(&id, &serde_json::json!({}), None).unwrap();
        assert!(bytes.starts_with(&answer_prefix(&id)));
        let note = toolyard_proto::jsonrpc::notification_bytes(
            "notifications/progress",
            &serde_json::json!({"progress": 1}),
        )
        .unwrap();
        assert!(!note.starts_with(&answer_prefix(&id)));
    }
}
