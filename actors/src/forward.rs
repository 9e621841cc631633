//! The byte-level forwarding path: a tool whose handler passes the call on to another
//! server (a gateway source, a NATS worker) gets the caller's arguments as the raw JSON text
//! they arrived in and returns the upstream's result as raw JSON text, which the server
//! writes back with one splice (the upstream's `resultType` out, the forwarder's `_meta`
//! in). No typed parse of the arguments or the result, no re-serialisation: the bytes are
//! tokenised once to find the few members that matter (`isError`, `resultType`, `_meta`)
//! and copied once.

use crate::context::RequestContext;
use crate::error::HandlerError;
use crate::exec::Judge;
use crate::middleware::Outcome;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::Arc;
use toolyard_proto::{BoxFuture, CallToolResult};

/// The handler of a forwarding tool: the caller's raw arguments in, the upstream's raw
/// result out.
pub type ForwardFn = Arc<
    dyn Fn(RequestContext, RawArgs) -> BoxFuture<Result<RawResult, HandlerError>> + Send + Sync,
>;

/// A `tools/call`'s arguments exactly as the caller sent them: a JSON object (the server
/// checked that much), or none.
#[derive(Debug, Clone)]
pub struct RawArgs(pub(crate) Option<Box<RawValue>>);

impl RawArgs {
    /// Arguments from JSON text; `None` when absent or `null`. Refuses what is not an
    /// object.
    pub fn new(raw: Option<Box<RawValue>>) -> Result<Self, HandlerError> {
        let raw = raw.filter(|r| r.get().trim_start() != "null");
        match &raw {
            Some(r) if !r.get().trim_start().starts_with('{') => Err(
                HandlerError::invalid_arguments("the arguments must be a JSON object"),
            ),
            _ => Ok(RawArgs(raw)),
        }
    }

    /// The arguments' JSON text (`{}` when the caller sent none).
    pub fn get(&self) -> &str {
        self.0.as_deref().map_or("{}", RawValue::get)
    }

    /// The arguments' JSON text, owned (`{}` when the caller sent none).
    pub fn into_raw(self) -> Box<RawValue> {
        self.0.unwrap_or_else(|| {
            RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| Box::<RawValue>::default())
        })
    }

    /// The arguments parsed (for a handler that must look inside after all).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.get())
            .unwrap_or_else(|_| serde_json::Value::Object(serde_json::Map::new()))
    }
}

/// Why an upstream's answer cannot be passed on.
#[derive(Debug, thiserror::Error)]
pub enum RawResultError {
    /// The result is not a JSON object.
    #[error("the upstream's result is not a JSON object: {0}")]
    NotAnObject(String),
}

/// A tool result as JSON text, ready to be written as the response's `result`.
///
/// The text is a JSON object by construction: it is only ever made of members of an object
/// serde_json has just parsed, keys written escaped, and `_meta` values that are
/// `RawValue`s themselves, or serialised by serde_json. So it is not parsed again to check
/// it (`RawValue::from_string` did that for every forwarded result: a third pass over its
/// bytes, ~1 500 instructions of a forwarded call), and the server writes it into the
/// response as it is (`Judge::raw_json`).
#[derive(Debug, Clone)]
pub struct RawResult {
    text: String,
    failed: bool,
    kind: Option<Kind>,
}

/// The members of a JSON object in order, values left as raw text. Keys borrow from the
/// input unless they contain escapes.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// A member's name, borrowed from the input unless it has escapes (serde's own `Cow<str>`
/// always copies: a `String` per member of every forwarded result).
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A `resultType` as the forwarder needs it: the revision's values without a copy, any
/// other kept as it came.
#[derive(Debug, Clone)]
enum Kind {
    Known(&'static str),
    Other(String),
}

impl Kind {
    fn of(raw: &RawValue) -> Option<Kind> {
        const KNOWN: [&str; 3] = ["complete", "input_required", "task"];
        let text = raw.get();
        if let Some(k) = KNOWN.iter().find(|k| {
            text.len() == k.len() + 2 && text.starts_with('"') && text[1..text.len() - 1] == ***k
        }) {
            return Some(Kind::Known(k));
        }
        serde_json::from_str::<String>(text).ok().map(Kind::Other)
    }

    fn as_str(&self) -> &str {
        match self {
            Kind::Known(k) => k,
            Kind::Other(k) => k,
        }
    }
}

/// Writes `"key":`. Keys rarely need escaping (this runs for every member of every forwarded
/// result): only those that do go through serde_json.
fn push_key(out: &mut String, key: &str) {
    if key.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // A `&str` always serialises.
        if let Ok(quoted) = serde_json::to_string(key) {
            out.push_str(&quoted);
        }
    } else {
        out.push('"');
        out.push_str(key);
        out.push('"');
    }
    out.push(':');
}

impl RawResult {
    /// The upstream's `result` member, passed on: its `resultType` dropped (our server writes
    /// its own), `meta` entries merged into its `_meta` (replacing members of the same name),
    /// everything else copied as it came.
    pub fn from_upstream(
        result: &str,
        meta: &[(&str, &RawValue)],
    ) -> Result<RawResult, RawResultError> {
        let members: Members<'_> =
            serde_json::from_str(result).map_err(|e| RawResultError::NotAnObject(e.to_string()))?;
        Ok(RawResult::from_members(&members, meta))
    }

    /// The result made of an object's members.
    fn from_members(members: &Members<'_>, meta: &[(&str, &RawValue)]) -> RawResult {
        // Each member's key and value, its quotes, colon and comma; room for ours.
        let len: usize = members
            .0
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum();
        let mut out = String::with_capacity(len + 64 * meta.len());
        out.push('{');
        let mut failed = false;
        let mut kind = None;
        let mut meta_written = meta.is_empty();
        for (key, value) in &members.0 {
            match key.as_ref() {
                "resultType" => {
                    kind = Kind::of(value);
                    continue;
                }
                "isError" => failed = value.get() == "true",
                "_meta" if !meta.is_empty() => {
                    meta_written = true;
                    if out.len() > 1 {
                        out.push(',');
                    }
                    push_key(&mut out, "_meta");
                    merge_meta(&mut out, value, meta);
                    continue;
                }
                _ => {}
            }
            if out.len() > 1 {
                out.push(',');
            }
            push_key(&mut out, key);
            out.push_str(value.get());
        }
        if !meta_written {
            if out.len() > 1 {
                out.push(',');
            }
            push_key(&mut out, "_meta");
            write_members(&mut out, std::iter::empty(), meta);
        }
        out.push('}');
        RawResult {
            text: out,
            failed,
            kind,
        }
    }

    /// A failed call's result (`isError: true`) with this text.
    pub fn error_text(message: impl Into<String>) -> RawResult {
        let result = CallToolResult::error_text(message);
        let text = serde_json::to_string(&result).unwrap_or_else(|_| {
            r#"{"content":[{"type":"text","text":"error"}],"isError":true}"#.to_owned()
        });
        RawResult {
            text,
            failed: true,
            kind: None,
        }
    }

    /// Whether the tool reported failure (`isError: true`).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The upstream's `resultType`, if it had one (`input_required` asks the forwarder to
    /// run an input round).
    pub fn result_type(&self) -> Option<&str> {
        self.kind.as_ref().map(Kind::as_str)
    }

    /// The result's JSON text.
    pub fn get(&self) -> &str {
        &self.text
    }

    /// The typed result (for a wrapper that needs it; the forwarding path never does).
    pub fn to_call_tool_result(&self) -> Result<CallToolResult, RawResultError> {
        serde_json::from_str(&self.text).map_err(|e| RawResultError::NotAnObject(e.to_string()))
    }
}

/// Writes the upstream's `_meta` object with `ours` merged in (ours win).
fn merge_meta(out: &mut String, upstream: &RawValue, ours: &[(&str, &RawValue)]) {
    match serde_json::from_str::<Members<'_>>(upstream.get()) {
        Ok(theirs) => write_members(
            out,
            theirs
                .0
                .iter()
                .filter(|(k, _)| !ours.iter().any(|(o, _)| *o == k.as_ref()))
                .map(|(k, v)| (k.as_ref(), *v)),
            ours,
        ),
        // Not an object: ours replace it.
        Err(_) => write_members(out, std::iter::empty(), ours),
    }
}

fn write_members<'a>(
    out: &mut String,
    theirs: impl Iterator<Item = (&'a str, &'a RawValue)>,
    ours: &'a [(&'a str, &'a RawValue)],
) {
    out.push('{');
    let mut first = true;
    for (k, v) in theirs.chain(ours.iter().map(|(k, v)| (*k, *v))) {
        if !first {
            out.push(',');
        }
        first = false;
        push_key(out, k);
        out.push_str(v.get());
    }
    out.push('}');
}

/// Read straight out of a response being parsed (`{"result": …}` as a `RawResult` field):
/// the result's bytes are tokenised once, where taking it as a `RawValue` first and then
/// [`RawResult::from_upstream`] went over them twice. No `_meta` is spliced in.
impl<'de> Deserialize<'de> for RawResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(RawResult::from_members(&Members::deserialize(d)?, &[]))
    }
}

/// Serialised as the JSON it is. The server's own answer does not come here (it writes
/// [`RawResult::get`] as it is); this is for whoever serialises a result in another way
/// (a task's stored result, a `to_value`), and pays for a checked copy.
impl Serialize for RawResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RawValue::from_string(self.text.clone())
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

impl Judge for RawResult {
    fn outcome(&self) -> Outcome {
        if self.failed {
            Outcome::ToolError
        } else {
            Outcome::Ok
        }
    }

    fn raw_json(&self) -> Option<&str> {
        Some(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn the_upstreams_result_type_is_dropped_and_everything_else_kept_verbatim() {
        let r = RawResult::from_upstream(
            r#"{"content":[{"type":"text","text":"hi \u00e9"}],"resultType":"complete","structuredContent":{"a": 1}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(
            r.get(),
            r#"{"content":[{"type":"text","text":"hi \u00e9"}],"structuredContent":{"a": 1}}"#
        );
        assert_eq!(r.result_type(), Some("complete"));
        assert!(!r.failed());
    }

    #[test]
    fn our_meta_is_merged_into_the_upstreams_and_wins_a_clash() {
        let source = raw(r#"{"name":"a"}"#);
        let r = RawResult::from_upstream(
            r#"{"content":[],"isError":true,"_meta":{"x":1,"io.toolyard/source":{"name":"inner"}}}"#,
            &[("io.toolyard/source", &source)],
        )
        .unwrap();
        assert!(r.failed());
        let v: serde_json::Value = serde_json::from_str(r.get()).unwrap();
        assert_eq!(v["_meta"]["x"], 1);
        assert_eq!(v["_meta"]["io.toolyard/source"]["name"], "a");
        assert_eq!(r.get().matches("io.toolyard/source").count(), 1);
    }

    #[test]
    fn our_meta_is_added_when_the_upstream_has_none() {
        let source = raw(r#"{"name":"a"}"#);
        let r = RawResult::from_upstream(r#"{}"#, &[("s", &source)]).unwrap();
        assert_eq!(r.get(), r#"{"_meta":{"s":{"name":"a"}}}"#);
    }

    #[test]
    fn a_key_that_needs_escaping_is_written_escaped() {
        let r = RawResult::from_upstream(r#"{"a\"b":1,"c\\d":2}"#, &[]).unwrap();
        let v: serde_json::Value = serde_json::from_str(r.get()).unwrap();
        assert_eq!(v["a\"b"], 1);
        assert_eq!(v["c\\d"], 2);
    }

    #[test]
    fn result_types_are_read_whether_known_or_escaped() {
        for (raw, want) in [
            (r#"{"resultType":"input_required"}"#, "input_required"),
            (r#"{"resultType":"task"}"#, "task"),
            (r#"{"resultType":"somethingNew"}"#, "somethingNew"),
            (r#"{"resultType":"compl\u0065te"}"#, "complete"),
        ] {
            let r = RawResult::from_upstream(raw, &[]).unwrap();
            assert_eq!(r.result_type(), Some(want), "{raw}");
            assert_eq!(r.get(), "{}");
        }
    }

    #[test]
    fn a_raw_result_serialises_as_the_json_it_holds_and_is_written_as_it_is() {
        let source = raw(r#"{"name":"a"}"#);
        let r = RawResult::from_upstream(
            r#"{"content":[{"type":"text","text":"x"}],"resultType":"complete"}"#,
            &[("s", &source)],
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"content":[{"type":"text","text":"x"}],"_meta":{"s":{"name":"a"}}})
        );
        assert_eq!(r.raw_json(), Some(r.get()));
        let failed = RawResult::error_text("boom");
        assert!(failed.failed());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(failed.get()).unwrap()["isError"],
            true
        );
    }

    #[test]
    fn a_result_read_inside_a_response_is_the_one_from_upstream_gives() {
        #[derive(Deserialize)]
        struct Response {
            result: RawResult,
        }
        for result in [
            r#"{"content":[{"type":"text","text":"hi \u00e9"}],"resultType":"complete","isError":true}"#,
            r#"{"a\"b":1,"_meta":{"x":[1,2]},"resultType":"input_required"}"#,
            "{}",
        ] {
            let response = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{result}}}"#);
            let read: Response = serde_json::from_slice(response.as_bytes()).unwrap();
            let want = RawResult::from_upstream(result, &[]).unwrap();
            assert_eq!(read.result.get(), want.get(), "{result}");
            assert_eq!(read.result.failed(), want.failed());
            assert_eq!(read.result.result_type(), want.result_type());
        }
        assert!(serde_json::from_str::<Response>(r#"{"result":[1]}"#).is_err());
    }

    #[test]
    fn a_result_that_is_not_an_object_is_refused() {
        assert!(RawResult::from_upstream("[1]", &[]).is_err());
        assert!(RawResult::from_upstream("{", &[]).is_err());
    }

    #[test]
    fn arguments_that_are_not_an_object_are_refused_and_null_is_none() {
        assert!(RawArgs::new(Some(raw("[1]"))).is_err());
        assert_eq!(RawArgs::new(Some(raw("null"))).unwrap().get(), "{}");
        assert_eq!(
            RawArgs::new(Some(raw(r#"{"a":1}"#))).unwrap().get(),
            r#"{"a":1}"#
        );
    }
}
