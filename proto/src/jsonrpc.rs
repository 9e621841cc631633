//! JSON-RPC 2.0 framing: one parse at the edge into [`Incoming`], and direct serialization of
//! outgoing messages into bytes.
//!
//! Parameters and results stay [`RawValue`]s here: the method handler deserializes them into
//! its own typed struct, so a message is walked once by the envelope parser and once by the
//! handler, never through a `serde_json::Value`.

use crate::error::{code, ErrorObject};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use std::fmt;
use std::sync::Arc;

/// The JSON-RPC version string every message carries.
pub const JSONRPC_VERSION: &str = "2.0";

/// A request id: a number or a string (never null in MCP).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    /// A numeric id.
    Number(i64),
    /// A string id.
    String(Arc<str>),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Number(n)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.into())
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Number(n) => s.serialize_i64(*n),
            RequestId::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = RequestId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or integer request id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RequestId, E> {
                Ok(RequestId::Number(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RequestId, E> {
                i64::try_from(v)
                    .map(RequestId::Number)
                    .map_err(|_| E::custom("request id out of range"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RequestId, E> {
                Ok(RequestId::String(v.into()))
            }
        }
        d.deserialize_any(IdVisitor)
    }
}

impl schemars::JsonSchema for RequestId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RequestId".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": ["string", "integer"] })
    }
}

/// A request: it expects exactly one response with the same id.
#[derive(Debug, Clone)]
pub struct Request {
    /// The id the response must carry.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The raw params, when present.
    pub params: Option<Box<RawValue>>,
}

/// A notification: no id, no response.
#[derive(Debug, Clone)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The raw params, when present.
    pub params: Option<Box<RawValue>>,
}

/// A successful response to a request we sent.
#[derive(Debug, Clone)]
pub struct Response {
    /// The id of our request.
    pub id: RequestId,
    /// The raw result.
    pub result: Box<RawValue>,
}

/// An error response; `id` is `None` when the peer could not read our request's id.
#[derive(Debug, Clone)]
pub struct ErrorResponse {
    /// The id of our request, if known.
    pub id: Option<RequestId>,
    /// The error.
    pub error: ErrorObject,
}

/// Any JSON-RPC message, classified.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A result response.
    Response(Response),
    /// An error response.
    Error(ErrorResponse),
}

/// A message that could not be accepted: the error to answer with, and the id to answer to
/// (`None` answers with `"id": null`, as for a notification).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct Rejected {
    /// The id recovered from the message, if any.
    pub id: Option<RequestId>,
    /// -32700, -32600, or -32602 for `params` that are not an object.
    pub error: ErrorObject,
}

/// The members of a message, borrowed from the input: only `params` (and `result`) are
/// copied out, so a request costs two allocations at the edge (method and params).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// Keeps an explicit `null` as `Some("null")`, so `"id": null` is told apart from no id.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// A JSON string's contents when it needs no unescaping (the usual method name).
fn plain_str(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// The deepest nesting of arrays and objects a message may have. serde_json skips over raw
/// values without counting depth, so the edge counts it once, cheaply, before parsing.
pub const MAX_DEPTH: usize = 128;

fn too_deep(bytes: &[u8]) -> bool {
    // Nesting deeper than MAX_DEPTH needs more than MAX_DEPTH opening brackets; only messages
    // with that many brackets (in strings or not) pay for the exact scan below. They are
    // counted into a byte per chunk of 255: a `u8` sum is one SIMD lane per byte, ~1
    // instruction a byte, where summing into `usize` (each byte widened to 64 bits) was not
    // vectorized and took ~5.5 (a 150-byte call: ~830 instructions, 5% of a stdio call).
    let openers: usize = bytes
        .chunks(usize::from(u8::MAX))
        .map(|chunk| {
            let n = chunk.iter().fold(0u8, |n, &b| {
                n.wrapping_add(u8::from(b == b'{' || b == b'['))
            });
            usize::from(n)
        })
        .sum();
    if openers <= MAX_DEPTH {
        return false;
    }
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_str {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_str = false;
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Parses one message. Invalid JSON (including nesting past serde_json's recursion limit) is
/// -32700; valid JSON that is not a single JSON-RPC 2.0 message object is -32600.
pub fn parse(bytes: &[u8]) -> Result<Incoming, Rejected> {
    if too_deep(bytes) {
        return Err(Rejected {
            id: None,
            error: ErrorObject::parse_error(format_args!("nesting deeper than {MAX_DEPTH} levels")),
        });
    }
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        first => {
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                return Err(Rejected {
                    id: None,
                    error: ErrorObject::parse_error(e),
                });
            }
            let what = if first == Some(&b'[') {
                "batches (JSON arrays) are not supported; send one message object"
            } else {
                "a JSON-RPC message must be a JSON object"
            };
            return Err(Rejected {
                id: None,
                error: ErrorObject::invalid_request(what),
            });
        }
    }
    // One UTF-8 check of the whole message; parsing from `str` then validates nothing twice
    // (from bytes, every raw member would be checked again when borrowed).
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return Err(Rejected {
                id: None,
                error: ErrorObject::parse_error(format_args!("message is not UTF-8: {e}")),
            })
        }
    };
    let env: Envelope = match serde_json::from_str(text) {
        Ok(env) => env,
        Err(e) if e.is_data() => {
            return Err(Rejected {
                id: None,
                error: ErrorObject::invalid_request(format!("not a JSON-RPC message: {e}")),
            });
        }
        Err(e) => {
            return Err(Rejected {
                id: None,
                error: ErrorObject::parse_error(e),
            })
        }
    };
    classify(env)
}

fn invalid(id: Option<RequestId>, msg: impl Into<std::borrow::Cow<'static, str>>) -> Rejected {
    Rejected {
        id,
        error: ErrorObject::invalid_request(msg),
    }
}

/// A request id from its raw JSON: integers without a detour through serde.
fn parse_id(raw: &str) -> Result<RequestId, serde_json::Error> {
    if !raw.is_empty() && raw.len() <= 18 && raw.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = raw.parse::<i64>() {
            return Ok(RequestId::Number(n));
        }
    }
    serde_json::from_str(raw)
}

#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
fn classify(env: Envelope<'_>) -> Result<Incoming, Rejected> {
    // Recover the id first so every later complaint can be addressed to it.
    let id = match &env.id {
        None => None,
        Some(raw) if raw.get() == "null" => {
            return Err(invalid(
                None,
                "request id must be a string or an integer, not null",
            ))
        }
        Some(raw) => match parse_id(raw.get()) {
            Ok(id) => Some(id),
            Err(_) => return Err(invalid(None, "request id must be a string or an integer")),
        },
    };
    match env.jsonrpc.map(RawValue::get) {
        Some("\"2.0\"") => {}
        Some(_) => {
            return Err(invalid(
                id,
                "the \"jsonrpc\" member must be exactly \"2.0\"",
            ))
        }
        None => return Err(invalid(id, "missing \"jsonrpc\": \"2.0\"")),
    }
    if let Some(method) = env.method {
        let method: String = match plain_str(method.get()) {
            Some(m) => m.to_owned(),
            None => serde_json::from_str(method.get())
                .map_err(|_| invalid(id.clone(), "\"method\" must be a string"))?,
        };
        // MCP has no positional params: refused here, before any struct deserializer (which
        // would read an array by position) sees them, on every path alike.
        if let Some(error) = env.params.and_then(|p| not_an_object(p.get())) {
            return Err(Rejected { id, error });
        }
        return Ok(match id {
            Some(id) => Incoming::Request(Request {
                id,
                method,
                params: env.params.map(RawValue::to_owned),
            }),
            None => Incoming::Notification(Notification {
                method,
                params: env.params.map(RawValue::to_owned),
            }),
        });
    }
    match (env.result, env.error) {
        (Some(result), None) => match id {
            Some(id) => Ok(Incoming::Response(Response {
                id,
                result: result.to_owned(),
            })),
            None => Err(invalid(None, "a response needs an id")),
        },
        (None, Some(error)) => {
            let error: ErrorObject = serde_json::from_str(error.get())
                .map_err(|e| invalid(id.clone(), format!("malformed error object: {e}")))?;
            Ok(Incoming::Error(ErrorResponse { id, error }))
        }
        _ => Err(invalid(
            id,
            "not a request, notification or response: needs \"method\", or exactly one of \"result\" and \"error\"",
        )),
    }
}

/// Starts `{"jsonrpc":"2.0","id":<id>,` in `buf`.
fn open_with_id(buf: &mut Vec<u8>, id: Option<&RequestId>) {
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    match id {
        Some(RequestId::Number(n)) => {
            buf.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes())
        }
        Some(RequestId::String(s)) => {
            // Strings serialize infallibly into a Vec.
            let _ = serde_json::to_writer(&mut *buf, &**s);
        }
        None => buf.extend_from_slice(b"null"),
    }
}

/// Appends a success response whose result is already serialized (`result` is a JSON object).
///
/// With `result_type` set, `"resultType":<it>` is spliced in as the result's first member, as
/// the modern generation requires of every result; legacy results go out unchanged.
pub fn write_result(buf: &mut Vec<u8>, id: &RequestId, result: &[u8], result_type: Option<&str>) {
    open_with_id(buf, Some(id));
    buf.extend_from_slice(b",\"result\":");
    match (result_type, result.split_first()) {
        (Some(rt), Some((b'{', rest))) => {
            buf.extend_from_slice(b"{\"resultType\":\"");
            buf.extend_from_slice(rt.as_bytes());
            buf.push(b'"');
            if rest.first() != Some(&b'}') {
                buf.push(b',');
            }
            buf.extend_from_slice(rest);
        }
        _ => buf.extend_from_slice(result),
    }
    buf.push(b'}');
}

/// Serializes a success response to a fresh buffer; see [`write_result`]. The result is
/// serialized in place (no intermediate buffer).
///
/// `resultType` goes first in the result object, as [`write_result`] puts it: it is written
/// before the result, whose own opening brace then becomes the comma after it. (Splicing
/// the member in after the result was serialized moved the whole answer and allocated the
/// member: ~500 instructions of every modern call.) A result that is not an object gets no
/// `resultType`, as before.
pub fn result_bytes<T: Serialize + ?Sized>(
    id: &RequestId,
    result: &T,
    result_type: Option<&str>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut buf = Vec::with_capacity(256);
    open_with_id(&mut buf, Some(id));
    buf.extend_from_slice(b",\"result\":");
    let Some(rt) = result_type else {
        serde_json::to_writer(&mut buf, result)?;
        buf.push(b'}');
        return Ok(buf);
    };
    let start = buf.len();
    buf.extend_from_slice(b"{\"resultType\":\"");
    buf.extend_from_slice(rt.as_bytes());
    buf.push(b'"');
    let at = buf.len();
    serde_json::to_writer(&mut buf, result)?;
    match buf.get(at..at + 2) {
        Some(b"{}") => {
            buf.truncate(at);
            buf.push(b'}');
        }
        Some([b'{', _]) => buf[at] = b',',
        _ => {
            buf.drain(start..at);
        }
    }
    buf.push(b'}');
    Ok(buf)
}

/// Serializes an error response.
pub fn error_bytes(id: Option<&RequestId>, error: &ErrorObject) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128);
    open_with_id(&mut buf, id);
    buf.extend_from_slice(b",\"error\":");
    if serde_json::to_writer(&mut buf, error).is_err() {
        buf.extend_from_slice(b"{\"code\":-32603,\"message\":\"unserializable error\"}");
    }
    buf.push(b'}');
    buf
}

/// Serializes a notification.
pub fn notification_bytes<P: Serialize + ?Sized>(
    method: &str,
    params: &P,
) -> Result<Vec<u8>, serde_json::Error> {
    #[derive(Serialize)]
    struct N<'a, P: ?Sized> {
        jsonrpc: &'static str,
        method: &'a str,
        params: &'a P,
    }
    serde_json::to_vec(&N {
        jsonrpc: JSONRPC_VERSION,
        method,
        params,
    })
}

/// Writes `s` as a JSON string, byte for byte as serde_json writes it: for the requests a
/// forwarder writes by hand around serde. Text with nothing to escape (names, methods, W3C
/// headers: nearly all of it) is copied as it is after one look at its bytes; serde_json,
/// which tests and escapes byte by byte, writes the rest.
pub fn write_str(buf: &mut Vec<u8>, s: &str) {
    if needs_escape(s) {
        // Writing into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *buf, s);
    } else {
        buf.reserve(s.len() + 2);
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    }
}

/// Whether JSON writes `s` with escapes: it has what JSON requires escaped, and all that
/// serde_json escapes (a control character, a quote, a backslash).
pub fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Serializes a request.
pub fn request_bytes<P: Serialize + ?Sized>(
    id: &RequestId,
    method: &str,
    params: &P,
) -> Result<Vec<u8>, serde_json::Error> {
    #[derive(Serialize)]
    struct R<'a, P: ?Sized> {
        jsonrpc: &'static str,
        id: &'a RequestId,
        method: &'a str,
        params: &'a P,
    }
    serde_json::to_vec(&R {
        jsonrpc: JSONRPC_VERSION,
        id,
        method,
        params,
    })
}

/// The -32602 for `params` that are present but not a JSON object (an array, a string, a
/// number, a boolean); `None` for an object or `null` (no params). MCP has no positional
/// params, and serde's derived struct deserializers would read an array by position, so
/// [`parse`] and [`params`] refuse them before any deserializer runs. A look at the first
/// byte: nothing is parsed.
pub fn not_an_object(params: &str) -> Option<ErrorObject> {
    let what = match params.trim_start().as_bytes().first() {
        Some(b'{') => return None,
        Some(b'n') if params.trim() == "null" => return None,
        Some(b'[') => "Invalid params: \"params\" must be an object, not an array (MCP has no positional params)",
        Some(b'"') => "Invalid params: \"params\" must be an object, not a string",
        Some(b't' | b'f') => "Invalid params: \"params\" must be an object, not a boolean",
        Some(b'-' | b'0'..=b'9') => "Invalid params: \"params\" must be an object, not a number",
        _ => "Invalid params: \"params\" must be an object",
    };
    Some(ErrorObject::invalid_params(what))
}

/// Deserializes a request's params into `T`, treating absent or `null` params as `{}`. A
/// failure is a -32602 naming the problem; params that are not an object are refused before
/// `T`'s deserializer sees them (see [`not_an_object`]).
pub fn params<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Result<T, ErrorObject> {
    let text = match raw.map(RawValue::get) {
        None => "{}",
        Some(text) => match not_an_object(text) {
            Some(e) => return Err(e),
            None if text.trim_start().starts_with('{') => text,
            // `null`.
            None => "{}",
        },
    };
    serde_json::from_str(text)
        .map_err(|e| ErrorObject::new(code::INVALID_PARAMS, format!("Invalid params: {e}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_string_is_written_as_serde_json_writes_it() {
        for s in [
            "",
            "tools/call",
            "io.modelcontextprotocol/clientCapabilities",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "a \"quoted\" word",
            "back\\slash",
            "line\nbreak",
            "tab\tand\u{1f}unit separator",
            "\u{7f} delete and \u{80} and é and 漢字 and 🦀",
            "/slash/",
        ] {
            let mut ours = Vec::new();
            super::write_str(&mut ours, s);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(s).unwrap(),
                "{s:?}"
            );
        }
    }

    use super::*;

    /// The member written before the result is what splicing it in after the result gave:
    /// the same bytes for objects empty and not, nested ones, strings holding braces, and
    /// results that are not objects (which get no `resultType`).
    #[test]
    fn result_type_written_first_is_what_splicing_it_in_gave() {
        fn spliced(id: &RequestId, result: &serde_json::Value, rt: Option<&str>) -> Vec<u8> {
            let mut buf = Vec::new();
            open_with_id(&mut buf, Some(id));
            buf.extend_from_slice(b",\"result\":");
            let start = buf.len();
            serde_json::to_writer(&mut buf, result).unwrap();
            if let Some(rt) = rt {
                if buf.get(start) == Some(&b'{') {
                    let mut member = format!("\"resultType\":\"{rt}\"").into_bytes();
                    if buf.get(start + 1) != Some(&b'}') {
                        member.push(b',');
                    }
                    buf.splice(start + 1..start + 1, member);
                }
            }
            buf.push(b'}');
            buf
        }
        let results = [
            serde_json::json!({}),
            serde_json::json!({"content": [{"type": "text", "text": "hi"}]}),
            serde_json::json!({"a": {"b": {}}, "c": "}{", "d": []}),
            serde_json::json!({"resultType": "complete"}),
            serde_json::json!({"x": "{}"}),
            serde_json::json!([]),
            serde_json::json!([{}]),
            serde_json::json!("{}"),
            serde_json::json!(null),
            serde_json::json!(7),
            serde_json::json!(true),
        ];
        for id in [RequestId::Number(1), RequestId::String("a\"b".into())] {
            for result in &results {
                for rt in [None, Some("complete"), Some("input_required")] {
                    let written = result_bytes(&id, result, rt).unwrap();
                    assert_eq!(
                        String::from_utf8(written).unwrap(),
                        String::from_utf8(spliced(&id, result, rt)).unwrap(),
                        "{result} with {rt:?}"
                    );
                }
            }
        }
    }

    fn code_of(input: &str) -> i32 {
        parse(input.as_bytes()).unwrap_err().error.code
    }

    #[test]
    fn invalid_json_is_a_parse_error() {
        assert_eq!(code_of("{\"jsonrpc\": \"2.0\","), code::PARSE_ERROR);
        assert_eq!(code_of("not json"), code::PARSE_ERROR);
    }

    #[test]
    fn deep_nesting_is_rejected_without_overflowing_the_stack() {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{{\"a\":{}{}}}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(code_of(&deep), code::PARSE_ERROR);
    }

    #[test]
    fn many_brackets_are_fine_when_shallow_or_inside_strings() {
        // More than MAX_DEPTH brackets in all (the quick count), but never deep.
        let wide = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{{\"a\":[{}],\"s\":\"{}\"}}}}",
            vec!["[]"; 300].join(","),
            "{[".repeat(300)
        );
        assert!(matches!(parse(wide.as_bytes()), Ok(Incoming::Request(_))));
        // Exactly MAX_DEPTH levels pass, one more does not (the message and its params are
        // two of them).
        let nest = |n: usize| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{{\"a\":{}{}}}}}",
                "[".repeat(n - 2),
                "]".repeat(n - 2)
            )
        };
        assert!(parse(nest(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(code_of(&nest(MAX_DEPTH + 1)), code::PARSE_ERROR);
    }

    #[test]
    fn the_bracket_count_adds_up_over_long_messages() {
        // The openers are counted a 255-byte chunk at a time: nesting spread over several
        // chunks (a long member first, whitespace between the brackets) is still seen.
        let nest = |n: usize| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{{\"pad\":\"{}\",\"a\":{}{}}}}}",
                "p".repeat(600),
                "[ \n ".repeat(n - 2),
                "]".repeat(n - 2)
            )
        };
        assert!(parse(nest(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(code_of(&nest(MAX_DEPTH + 1)), code::PARSE_ERROR);
        // The count never wraps: 256 openers in all (a byte's worth), the nesting's and the
        // rest in a string before it, would read as none if it did, and the nesting past
        // MAX_DEPTH would go unseen.
        let dense = |depth: usize| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{{\"s\":\"{}\",\"a\":{}{}}}}}",
                "[".repeat(256 - depth),
                "[".repeat(depth - 2),
                "]".repeat(depth - 2)
            )
        };
        assert!(parse(dense(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(code_of(&dense(MAX_DEPTH + 1)), code::PARSE_ERROR);
    }

    #[test]
    fn escaped_method_names_and_string_ids_are_read_exactly() {
        let m = parse(br#"{"jsonrpc":"2.0","id":"a\"b","method":"tools\/call"}"#).unwrap();
        match m {
            Incoming::Request(r) => {
                assert_eq!(r.method, "tools/call");
                assert_eq!(r.id, RequestId::from("a\"b"));
            }
            other => panic!("{other:?}"),
        }
        let big = parse(br#"{"jsonrpc":"2.0","id":9223372036854775807,"method":"x"}"#).unwrap();
        assert!(matches!(
            big,
            Incoming::Request(Request {
                id: RequestId::Number(i64::MAX),
                ..
            })
        ));
    }

    #[test]
    fn arrays_scalars_and_wrong_versions_are_invalid_requests() {
        assert_eq!(code_of("[]"), code::INVALID_REQUEST);
        assert_eq!(code_of("42"), code::INVALID_REQUEST);
        assert_eq!(code_of("\"x\""), code::INVALID_REQUEST);
        assert_eq!(
            code_of(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            code::INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            code::INVALID_REQUEST
        );
    }

    /// MCP has no positional params: a `params` that is not an object (serde's derived struct
    /// deserializers would read a JSON array by position) is -32602 at the envelope, addressed
    /// to the request's id, and `params()` refuses it too; absent and `null` stay allowed.
    #[test]
    fn params_that_are_not_an_object_are_invalid_params() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code, reason = "only whether it deserializes matters")]
        struct Loose {
            #[serde(default)]
            name: Option<String>,
            #[serde(default)]
            arguments: Option<serde_json::Value>,
        }
        for p in [r#"["echo",{}]"#, "[]", r#""echo""#, "7", "true", "false"] {
            let req = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{p}}}"#);
            let r = parse(req.as_bytes()).expect_err(p);
            assert_eq!(r.error.code, code::INVALID_PARAMS, "{p}");
            assert_eq!(r.id, Some(RequestId::Number(5)), "{p}");
            assert!(r.error.message.contains("must be an object"), "{p}: {r}");
            let spaced = format!(r#"{{"jsonrpc":"2.0","id":"s","method":"x","params":  {p} }}"#);
            let r = parse(spaced.as_bytes()).expect_err(p);
            assert_eq!(r.error.code, code::INVALID_PARAMS, "{p}");
            assert_eq!(r.id, Some(RequestId::from("s")), "{p}");
            let note =
                format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{p}}}"#);
            let r = parse(note.as_bytes()).expect_err(p);
            assert_eq!((r.error.code, r.id), (code::INVALID_PARAMS, None), "{p}");

            for text in [p.to_owned(), format!(" \n{p}")] {
                let raw = RawValue::from_string(text).unwrap();
                let e = params::<Loose>(Some(&raw)).expect_err(p);
                assert_eq!(e.code, code::INVALID_PARAMS, "{p}");
                assert!(e.message.contains("must be an object"), "{p}: {e}");
            }
            let typed = format!(r#"{{"method":"tools/call","params":{p}}}"#);
            assert!(
                serde_json::from_str::<crate::ClientRequest>(&typed).is_err(),
                "typed ClientRequest accepted {p}"
            );
        }
        // Absent and null params are no params.
        for req in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#,
        ] {
            match parse(req.as_bytes()) {
                Ok(Incoming::Request(r)) => assert!(r.params.is_none(), "{req}"),
                other => panic!("{req}: {other:?}"),
            }
        }
        let null = RawValue::from_string("null".to_owned()).unwrap();
        assert!(params::<Loose>(None).is_ok());
        assert!(params::<Loose>(Some(&null)).is_ok());
        let obj = RawValue::from_string(r#"{"name":"echo"}"#.to_owned()).unwrap();
        assert_eq!(
            params::<Loose>(Some(&obj)).unwrap().name.as_deref(),
            Some("echo")
        );
    }

    #[test]
    fn wrong_version_keeps_the_id_for_the_answer() {
        let r = parse(br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#).unwrap_err();
        assert_eq!(r.id, Some(RequestId::from("a")));
    }

    #[test]
    fn messages_are_classified() {
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Incoming::Request(_))
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Incoming::Notification(_))
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Ok(Incoming::Response(_))
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#),
            Ok(Incoming::Error(_))
        ));
    }

    #[test]
    fn result_type_is_spliced_into_modern_results_only() {
        let id = RequestId::Number(3);
        let mut buf = Vec::new();
        write_result(&mut buf, &id, b"{\"a\":1}", Some("complete"));
        assert_eq!(
            std::str::from_utf8(&buf).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete","a":1}}"#
        );
        buf.clear();
        write_result(&mut buf, &id, b"{}", Some("complete"));
        assert_eq!(
            std::str::from_utf8(&buf).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete"}}"#
        );
        buf.clear();
        write_result(&mut buf, &id, b"{}", None);
        assert_eq!(
            std::str::from_utf8(&buf).unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#
        );
    }
}
