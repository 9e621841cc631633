//! A request's `_meta` as written to the wire: the caller's members, the request options'
//! and the client's own (progress token; in the modern generation the protocol version,
//! capabilities, client info and log level), serialized without copying the params.

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use toolyard_proto::{
    meta, ClientCapabilities, Implementation, LoggingLevel, ProtocolVersion, RequestId,
};

/// A request's params with our `_meta` in place of the caller's, serialized without
/// copying the params (tool arguments can be large).
pub(super) struct WithMeta<'a> {
    pub(super) params: &'a Map<String, Value>,
    /// A `tools/call`'s arguments as JSON text (the byte-level forwarding path).
    pub(super) arguments: Option<&'a RawValue>,
    pub(super) meta: &'a OurMeta<'a>,
}

impl serde::Serialize for WithMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.params {
            if k != "_meta" && !(k == "arguments" && self.arguments.is_some()) {
                map.serialize_entry(k, v)?;
            }
        }
        if let Some(arguments) = self.arguments {
            map.serialize_entry("arguments", arguments)?;
        }
        map.serialize_entry("_meta", self.meta)?;
        map.end()
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

/// The client's capabilities and identity, serialized once per client.
pub(super) struct ModernIdentity {
    capabilities: Box<RawValue>,
    info: Box<RawValue>,
}

impl ModernIdentity {
    pub(super) fn of(capabilities: &ClientCapabilities, info: &Implementation) -> Self {
        // Serializing these plain structs cannot fail; `null` would be the fallback.
        let raw =
            |v: serde_json::Result<String>| v.and_then(RawValue::from_string).unwrap_or_default();
        ModernIdentity {
            capabilities: raw(serde_json::to_string(capabilities)),
            info: raw(serde_json::to_string(info)),
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

impl serde::Serialize for OurMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        let extra_has = |k: &str| self.extra.is_some_and(|e| e.contains_key(k));
        for (k, v) in self.caller.into_iter().flatten() {
            if !self.is_ours(k) && !extra_has(k) {
                map.serialize_entry(k, v)?;
            }
        }
        for (k, v) in self.extra.into_iter().flatten() {
            if !self.is_ours(k) {
                map.serialize_entry(k, v)?;
            }
        }
        map.serialize_entry("progressToken", self.progress_token)?;
        if let Some((parent, state)) = self.trace {
            map.serialize_entry("traceparent", parent)?;
            if let Some(state) = state.filter(|s| !s.is_empty()) {
                map.serialize_entry("tracestate", state)?;
            }
        }
        if let Some(m) = &self.modern {
            map.serialize_entry(
                meta::PROTOCOL_VERSION,
                ProtocolVersion::V2026_07_28.as_str(),
            )?;
            map.serialize_entry(meta::CLIENT_CAPABILITIES, &*m.identity.capabilities)?;
            map.serialize_entry(meta::CLIENT_INFO, &*m.identity.info)?;
            if let Some(level) = &m.log_level {
                map.serialize_entry(meta::LOG_LEVEL, level)?;
            }
        }
        map.end()
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
        let text = serde_json::to_string(&WithMeta {
            params: &params,
            arguments: None,
            meta: &meta,
        })
        .unwrap_or_default();
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
}
