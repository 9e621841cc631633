//! A request's `_meta` as written to the wire: the caller's members, the request options'
//! and the client's own (progress token; in the modern generation the protocol version,
//! capabilities, client info and log level), serialized without copying the params.
//!
//! The request is written by hand around serde: the client's modern identity is the same
//! for every request, so its members are rendered once per client and copied as bytes (run
//! through serde's map serializer, its long constant names were escape-scanned per request:
//! about 4% of a forwarding gateway's instructions per call).

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use toolyard_proto::jsonrpc::write_str;
use toolyard_proto::{
    meta, ClientCapabilities, Implementation, LoggingLevel, ProtocolVersion, RequestId,
};

/// A request's params with our `_meta` in place of the caller's, serialized without
/// copying the params (tool arguments can be large).
pub(super) struct WithMeta<'a> {
    pub(super) params: &'a Map<String, Value>,
    /// A `tools/call`'s name and arguments held apart (the byte-level forwarding path).
    pub(super) call: Option<&'a RawCall<'a>>,
    pub(super) meta: &'a OurMeta<'a>,
}

/// A `tools/call`'s name and its arguments as JSON text, held apart from the request's other
/// params: the byte-level forwarding path writes the arguments as they came and builds no
/// map for the name (a tree node and two strings of every forwarded call). Passed by
/// reference: each async layer of a request carries it, and the boxed request futures stay
/// under the size glibc serves from its thread cache.
pub(crate) struct RawCall<'a> {
    pub(crate) name: &'a str,
    pub(crate) arguments: &'a RawValue,
}

/// Writes `"key":value,` (serde escapes both).
fn member<V: serde::Serialize + ?Sized>(
    out: &mut Vec<u8>,
    key: &str,
    value: &V,
) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *out, key)?;
    out.push(b':');
    serde_json::to_writer(&mut *out, value)?;
    out.push(b',');
    Ok(())
}

/// The JSON-RPC request `{"jsonrpc":"2.0","id":..,"method":..,"params":..}` with `params`'
/// `_meta` ours, sized once for what it will hold.
pub(super) fn request_body(
    id: &RequestId,
    method: &str,
    params: &WithMeta<'_>,
) -> serde_json::Result<Vec<u8>> {
    let tail = params
        .meta
        .modern
        .as_ref()
        .map_or(0, |m| m.identity.tail.len());
    let call = params
        .call
        .map_or(0, |c| c.name.len() + c.arguments.get().len());
    let mut out = Vec::with_capacity(192 + method.len() + call + tail);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    serde_json::to_writer(&mut out, id)?;
    out.extend_from_slice(b",\"method\":");
    write_str(&mut out, method);
    out.extend_from_slice(b",\"params\":");
    params.write(&mut out)?;
    out.push(b'}');
    Ok(out)
}

impl WithMeta<'_> {
    fn write(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        for (k, v) in self.params {
            if k != "_meta" && !(self.call.is_some() && (k == "arguments" || k == "name")) {
                member(out, k, v)?;
            }
        }
        if let Some(call) = self.call {
            out.extend_from_slice(b"\"name\":");
            write_str(out, call.name);
            out.push(b',');
            out.extend_from_slice(b"\"arguments\":");
            out.extend_from_slice(call.arguments.get().as_bytes());
            out.push(b',');
        }
        out.extend_from_slice(b"\"_meta\":");
        self.meta.write(out)?;
        out.push(b'}');
        Ok(())
    }
}

/// A request's `_meta`: the caller's members, then the request options' (which win), then
/// ours (which win over both): the progress token, and in the modern generation the
/// protocol version, capabilities, client info and log level. Written straight to the
/// wire, without building a map per request.
pub(super) struct OurMeta<'a> {
    pub(super) caller: Option<&'a Map<String, Value>>,
    pub(super) extra: Option<&'a Map<String, Value>>,
    pub(super) progress_token: &'a RequestId,
    /// An observer's span context (`traceparent`, `tracestate`), replacing the caller's.
    pub(super) trace: Option<(&'a str, Option<&'a str>)>,
    pub(super) modern: Option<ModernMeta<'a>>,
}

pub(super) struct ModernMeta<'a> {
    pub(super) identity: &'a ModernIdentity,
    pub(super) log_level: Option<LoggingLevel>,
}

/// The client's protocol version, capabilities and identity as `_meta` members, rendered once
/// per client (`,"…protocolVersion":"2026-07-28","…clientCapabilities":{…},"…clientInfo":{…}`).
pub(super) struct ModernIdentity {
    tail: Box<[u8]>,
}

impl ModernIdentity {
    pub(super) fn of(capabilities: &ClientCapabilities, info: &Implementation) -> Self {
        let mut tail = Vec::with_capacity(256);
        // Serializing these plain structs into a Vec cannot fail.
        let _ = (|| -> serde_json::Result<()> {
            tail.push(b',');
            member(
                &mut tail,
                meta::PROTOCOL_VERSION,
                ProtocolVersion::V2026_07_28.as_str(),
            )?;
            member(&mut tail, meta::CLIENT_CAPABILITIES, capabilities)?;
            member(&mut tail, meta::CLIENT_INFO, info)?;
            Ok(())
        })();
        // `member` leaves a trailing comma.
        tail.pop();
        ModernIdentity {
            tail: tail.into_boxed_slice(),
        }
    }
}

impl OurMeta<'_> {
    fn is_ours(&self, key: &str) -> bool {
        key == "progressToken"
            || (self.trace.is_some() && matches!(key, "traceparent" | "tracestate"))
            || (self.modern.is_some()
                && matches!(
                    key,
                    meta::PROTOCOL_VERSION
                        | meta::CLIENT_CAPABILITIES
                        | meta::CLIENT_INFO
                        | meta::LOG_LEVEL
                ))
    }
}

impl OurMeta<'_> {
    fn write(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        let extra_has = |k: &str| self.extra.is_some_and(|e| e.contains_key(k));
        for (k, v) in self.caller.into_iter().flatten() {
            if !self.is_ours(k) && !extra_has(k) {
                member(out, k, v)?;
            }
        }
        for (k, v) in self.extra.into_iter().flatten() {
            if !self.is_ours(k) {
                member(out, k, v)?;
            }
        }
        out.extend_from_slice(b"\"progressToken\":");
        serde_json::to_writer(&mut *out, self.progress_token)?;
        if let Some((parent, state)) = self.trace {
            out.extend_from_slice(b",\"traceparent\":");
            write_str(out, parent);
            if let Some(state) = state.filter(|s| !s.is_empty()) {
                out.extend_from_slice(b",\"tracestate\":");
                write_str(out, state);
            }
        }
        if let Some(m) = &self.modern {
            out.extend_from_slice(&m.identity.tail);
            if let Some(level) = &m.log_level {
                out.push(b',');
                write_str(out, meta::LOG_LEVEL);
                out.push(b':');
                serde_json::to_writer(&mut *out, level)?;
            }
        }
        out.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn our_meta_members_win_and_no_key_is_written_twice() {
        let caller = obj(serde_json::json!({ "a": 1, "x": "caller", "progressToken": "theirs" }));
        let extra = obj(serde_json::json!({ "x": "extra", "traceparent": "00-1-2-01" }));
        let params = obj(serde_json::json!({ "name": "echo", "_meta": caller }));
        let id = RequestId::Number(7);
        let identity = ModernIdentity::of(
            &ClientCapabilities::default(),
            &Implementation::new("t", "1"),
        );
        let meta = OurMeta {
            caller: Some(&caller),
            extra: Some(&extra),
            progress_token: &id,
            trace: None,
            modern: Some(ModernMeta {
                identity: &identity,
                log_level: None,
            }),
        };
        let body = request_body(
            &RequestId::Number(1),
            "tools/call",
            &WithMeta {
                params: &params,
                call: None,
                meta: &meta,
            },
        )
        .unwrap_or_default();
        let request: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(request["method"], "tools/call");
        assert_eq!(request["jsonrpc"], "2.0");
        let text = request["params"].to_string();
        assert_eq!(text.matches("\"x\"").count(), 1, "{text}");
        assert_eq!(text.matches("progressToken").count(), 1, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        let m = &v["_meta"];
        assert_eq!(v["name"], "echo");
        assert_eq!(m["a"], 1);
        assert_eq!(m["x"], "extra");
        assert_eq!(m["traceparent"], "00-1-2-01");
        assert_eq!(m["progressToken"], 7);
        assert_eq!(m[meta::PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(m[meta::CLIENT_INFO]["name"], "t");
        assert!(m[meta::CLIENT_CAPABILITIES].is_object(), "{text}");
        assert!(m.get(meta::LOG_LEVEL).is_none());
    }

    #[test]
    fn a_request_is_valid_json_with_raw_arguments_trace_and_log_level() {
        // A raw call's name and arguments win over any in `params`, written once.
        let params = obj(serde_json::json!({ "name": "not this", "arguments": {"ignored": 1} }));
        let args =
            RawValue::from_string(r#"{"message":"hi \u00e9"}"#.to_owned()).unwrap_or_default();
        let id = RequestId::String("a\"b".into());
        let identity = ModernIdentity::of(
            &ClientCapabilities::default(),
            &Implementation::new("t", "1"),
        );
        let meta = OurMeta {
            caller: None,
            extra: None,
            progress_token: &id,
            trace: Some((
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                Some("k=v"),
            )),
            modern: Some(ModernMeta {
                identity: &identity,
                log_level: Some(LoggingLevel::Debug),
            }),
        };
        let body = request_body(
            &id,
            "tools/call",
            &WithMeta {
                params: &params,
                call: Some(&RawCall {
                    name: "e\"cho",
                    arguments: &args,
                }),
                meta: &meta,
            },
        )
        .unwrap_or_default();
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v["id"], "a\"b", "{}", String::from_utf8_lossy(&body));
        assert_eq!(v["params"]["name"], "e\"cho");
        assert_eq!(v["params"]["arguments"]["message"], "hi \u{e9}");
        let text = String::from_utf8_lossy(&body);
        assert_eq!(text.matches("\"name\"").count(), 2, "{text}"); // params' and clientInfo's
        let m = &v["params"]["_meta"];
        assert_eq!(m["progressToken"], "a\"b");
        assert_eq!(m["tracestate"], "k=v");
        assert_eq!(m[meta::LOG_LEVEL], "debug");
        assert_eq!(m[meta::PROTOCOL_VERSION], "2026-07-28");
    }
}
