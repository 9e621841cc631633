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
        Self::of_text(raw.get())
    }

    /// [`of`](Self::of) for a value's JSON text.
    fn of_text(text: &str) -> Option<Kind> {
        const KNOWN: [&str; 3] = ["complete", "input_required", "task"];
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
    if toolyard_proto::jsonrpc::needs_escape(key) {
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

    /// [`from_upstream`](Self::from_upstream) for a result already known to be JSON (the
    /// `result` member of a parsed response). Its top-level members are found in one pass
    /// over the bytes (`TopLevel`) instead of tokenising the result again with serde: a
    /// forwarded call's result was otherwise read twice, once by the response's parse and
    /// once here (~2 850 instructions of ~32 000 per call through the stdio gateway,
    /// callgrind). What that pass cannot settle (a `_meta` of the upstream's to merge, a
    /// key written with escapes) takes the full read.
    pub fn from_upstream_value(
        result: &RawValue,
        meta: &[(&str, &RawValue)],
    ) -> Result<RawResult, RawResultError> {
        match TopLevel::scan(result.get()).map(|t| t.passed_on(meta)) {
            Some(r) => Ok(r),
            None => Self::from_upstream(result.get(), meta),
        }
    }

    /// The result made of an object's members.
    fn from_members(members: &Members<'_>, meta: &[(&str, &RawValue)]) -> RawResult {
        // Each member's key and value, its quotes, colon and comma; room for ours.
        let len: usize = members
            .0
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum();
        let mut out = String::with_capacity(len + meta_len(meta));
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
            let has_members = out.len() > 1;
            push_meta_member(&mut out, has_members, meta);
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

/// What one pass over a result object's bytes finds at its top level: its `resultType`
/// member (where it is, and its value), its `isError` value, and whether it has a `_meta`
/// or a key written with escapes (then `None`: the full read decides). Valid JSON only
/// (a [`RawValue`]'s text): the pass trusts the structure and only tracks strings and depth.
struct TopLevel<'a> {
    /// The object's text, outer whitespace trimmed.
    body: &'a str,
    /// The bytes of `"resultType":"..."` and the comma that joins it to its neighbours, as
    /// a range to cut out.
    result_type: Option<(std::ops::Range<usize>, Kind)>,
    failed: bool,
}

impl<'a> TopLevel<'a> {
    fn scan(text: &'a str) -> Option<TopLevel<'a>> {
        let body = text.trim_ascii();
        let b = body.as_bytes();
        if b.first() != Some(&b'{') || b.last() != Some(&b'}') {
            return None;
        }
        let mut found = TopLevel {
            body,
            result_type: None,
            failed: false,
        };
        // The comma after the previous top-level member; a first-member `resultType` whose
        // cut waits for the comma after it.
        let mut last_comma: Option<usize> = None;
        let mut pending_cut: Option<(usize, usize, Kind)> = None;
        let (mut depth, mut i) = (0usize, 0usize);
        let mut expecting_key = false;
        while i < b.len() {
            match b[i] {
                b'"' if depth == 1 && expecting_key => {
                    expecting_key = false;
                    let key_start = i;
                    let close = i + 1 + quote_or_escape(b.get(i + 1..)?)?;
                    if b[close] != b'"' {
                        // A key with escapes.
                        return None;
                    }
                    let key = &body[i + 1..close];
                    let value = skip_ws(b, close + 1);
                    if b.get(value) != Some(&b':') {
                        return None;
                    }
                    let value = skip_ws(b, value + 1);
                    match key {
                        "_meta" => return None,
                        "isError" => {
                            found.failed = b[value..].starts_with(b"true");
                            i = value;
                            continue;
                        }
                        "resultType" => {
                            if pending_cut.is_some() || found.result_type.is_some() {
                                return None;
                            }
                            if b.get(value) != Some(&b'"') {
                                return None;
                            }
                            let end = value + 1 + string_end(b.get(value + 1..)?)?;
                            let kind = Kind::of_text(&body[value..=end])?;
                            match last_comma {
                                // Cut from the comma before it.
                                Some(comma) => {
                                    found.result_type = Some((comma..end + 1, kind));
                                }
                                // The first member: cut up to the comma after it.
                                None => pending_cut = Some((key_start, end + 1, kind)),
                            }
                            i = end + 1;
                            continue;
                        }
                        _ => {
                            i = value;
                            continue;
                        }
                    }
                }
                b'"' => i += 1 + string_end(b.get(i + 1..)?)?,
                b'{' | b'[' => {
                    depth += 1;
                    expecting_key = depth == 1;
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                b',' if depth == 1 => {
                    if let Some((start, _, kind)) = pending_cut.take() {
                        found.result_type = Some((start..i + 1, kind));
                    }
                    last_comma = Some(i);
                    expecting_key = true;
                }
                _ => {}
            }
            i += 1;
        }
        if let Some((start, end, kind)) = pending_cut {
            // The only member.
            found.result_type = Some((start..end, kind));
        }
        Some(found)
    }

    /// The result passed on: `resultType` cut out, `meta` appended as its `_meta`.
    fn passed_on(self, meta: &[(&str, &RawValue)]) -> RawResult {
        let body = self.body;
        let mut out = String::with_capacity(body.len() + meta_len(meta));
        let kind = match self.result_type {
            Some((cut, kind)) => {
                out.push_str(&body[..cut.start]);
                out.push_str(&body[cut.end..body.len() - 1]);
                Some(kind)
            }
            None => {
                out.push_str(&body[..body.len() - 1]);
                None
            }
        };
        if !meta.is_empty() {
            let has_members = !out[1..].trim_ascii().is_empty();
            push_meta_member(&mut out, has_members, meta);
        }
        out.push('}');
        RawResult {
            text: out,
            failed: self.failed,
            kind,
        }
    }
}

/// The offset of the first `"` or `\` in `b` (vectorised: a result's long text values are
/// skipped many bytes at a time).
fn quote_or_escape(b: &[u8]) -> Option<usize> {
    memchr::memchr2(b'"', b'\\', b)
}

/// The offset of the `"` that closes a JSON string whose contents start at `b[0]`.
fn string_end(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        i += quote_or_escape(b.get(i..)?)?;
        if b[i] == b'"' {
            return Some(i);
        }
        // An escape: skip the backslash and what it escapes.
        i += 2;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
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

/// The room `"_meta":{ours}` takes after a result's members (with its comma and the
/// result's closing brace): reserved whole up front, the result is written without a
/// reallocation (a guess of 64 bytes per member made one on every call through a stdio
/// gateway, whose `io.toolyard/source` member is longer: ~250 instructions, callgrind).
fn meta_len(meta: &[(&str, &RawValue)]) -> usize {
    let members: usize = meta.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum();
    members + ",\"_meta\":{}}".len()
}

/// Writes `"_meta":{ours}` as the last member of an object being written (after a comma
/// when it has members before it).
fn push_meta_member(out: &mut String, has_members: bool, meta: &[(&str, &RawValue)]) {
    if has_members {
        out.push(',');
    }
    push_key(out, "_meta");
    write_members(out, std::iter::empty(), meta);
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

    /// The one pass gives what the full read gives, member for member, `isError` and
    /// `resultType` included, whether it settles a result itself or hands it to the full read.
    #[test]
    fn a_result_with_our_meta_is_written_into_the_room_reserved_for_it() {
        let source = raw(r#"{"name":"a-longer-source-name","elapsedMs":1234.567891}"#);
        let meta = [("io.toolyard/source", &*source)];
        for result in [
            r#"{"content":[{"type":"text","text":"hi"}]}"#,
            r#"{"content":[],"resultType":"complete"}"#,
            "{}",
        ] {
            for r in [
                RawResult::from_upstream_value(&raw(result), &meta).unwrap(),
                RawResult::from_upstream(result, &meta).unwrap(),
            ] {
                // The room is the upstream's text (a `resultType` cut out of it is left
                // over) and ours; grown on the way, the text would have doubled its room.
                assert!(
                    r.text.capacity() <= r.text.len() + 32,
                    "{result}: {} bytes in {}",
                    r.text.len(),
                    r.text.capacity()
                );
            }
        }
    }

    #[test]
    fn a_result_passed_on_as_it_came_equals_the_full_read() {
        let source = raw(r#"{"name":"a","elapsedMs":0.5}"#);
        for result in [
            r#"{"content":[{"type":"text","text":"hi"}]}"#,
            r#" { "content" : [ ] , "structuredContent" : {"n": 1} } "#,
            "{}",
            " {  } ",
            r#"{"content":[{"type":"text","text":"a \"_meta\" in a string"}]}"#,
            r#"{"content":[],"isError":true}"#,
            r#"{"content":[],"isError":false,"_meta":{"x":1}}"#,
            r#"{"content":[],"resultType":"complete"}"#,
            r#"{"content":[],"\u005fmeta":{"x":1}}"#,
            r#"{"content":[],"is\u0045rror":true}"#,
            r#"{"content":[{"type":"text","text":"\u00e9"}]}"#,
            r#"{"resultType":"complete","content":[]}"#,
            r#"{ "resultType" : "complete" , "content":[] }"#,
            r#"{"content":[],"resultType":"complete","structuredContent":{"a":1}}"#,
            r#"{"content":[],"resultType":"input_required"}"#,
            r#"{"resultType":"complete"}"#,
            r#"{"resultType":"somethingNew","isError":true}"#,
            r#"{"resultType":"compl\u0065te","content":[]}"#,
            r#"{"resultType":"complete","resultType":"task"}"#,
            r#"{"resultType":7,"content":[]}"#,
            r#"{"content":[],"structuredContent":{"resultType":"nested","isError":true,"_meta":1}}"#,
            r#"{"content":[{"type":"text","text":"\",\"resultType\":\"x\"}\\"}],"isError":false}"#,
            r#"{"isError":true,"isError":false}"#,
            r#"{"a\"b":1}"#,
            r#"{"list":[{"resultType":"x"},"resultType",["isError"]],"isError":true}"#,
        ] {
            for meta in [&[][..], &[("io.toolyard/source", &*source)][..]] {
                let fast = RawResult::from_upstream_value(&raw(result), meta).unwrap();
                let full = RawResult::from_upstream(result, meta).unwrap();
                let parsed = |r: &RawResult| serde_json::from_str::<serde_json::Value>(r.get());
                assert_eq!(parsed(&fast).unwrap(), parsed(&full).unwrap(), "{result}");
                assert_eq!(fast.failed(), full.failed(), "{result}");
                assert_eq!(fast.result_type(), full.result_type(), "{result}");
            }
        }
        // Taken as it came: the text is the upstream's, ours appended.
        let r = RawResult::from_upstream_value(&raw(r#"{"content":[]}"#), &[("s", &*raw("1"))])
            .unwrap();
        assert_eq!(r.get(), r#"{"content":[],"_meta":{"s":1}}"#);
        assert!(RawResult::from_upstream_value(&raw("[1]"), &[]).is_err());
    }

    /// The results upstreams usually send take the one pass; what it cannot settle does not.
    #[test]
    fn usual_results_take_the_one_pass_and_a_meta_or_an_escaped_key_the_full_read() {
        for usual in [
            r#"{"content":[{"type":"text","text":"hi"}]}"#,
            r#"{"resultType":"complete","content":[{"type":"text","text":"hi"}]}"#,
            r#"{"content":[],"resultType":"complete"}"#,
            r#"{"content":[],"isError":true}"#,
        ] {
            assert!(TopLevel::scan(usual).is_some(), "{usual}");
        }
        for unusual in [
            r#"{"content":[],"_meta":{"x":1}}"#,
            r#"{"content":[],"\u005fmeta":{"x":1}}"#,
            r#"{"resultType":"complete","resultType":"task"}"#,
            "[1]",
        ] {
            assert!(TopLevel::scan(unusual).is_none(), "{unusual}");
        }
    }

    /// Any JSON object (keys and strings drawn to collide with the members the one pass
    /// looks for, nested, escaped, compact or pretty) gives what the full read gives.
    mod one_pass_equals_the_full_read {
        use super::*;
        use proptest::prelude::*;
        use serde_json::{Map, Value};

        fn text() -> BoxedStrategy<String> {
            prop_oneof![
                Just("resultType".to_owned()),
                Just("isError".to_owned()),
                Just("_meta".to_owned()),
                Just("complete".to_owned()),
                Just("input_required".to_owned()),
                Just("\"resultType\":\"x\"".to_owned()),
                "[a-z\"\\\\ \u{1}é,:{}\\[\\]]{0,6}",
            ]
            .boxed()
        }

        fn value() -> BoxedStrategy<Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i32>().prop_map(Value::from),
                text().prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    proptest::collection::vec((text(), inner), 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
                ]
            })
            .boxed()
        }

        proptest! {
            #[test]
            fn for_any_object(
                members in proptest::collection::vec((text(), value()), 0..6),
                pretty in any::<bool>(),
                with_meta in any::<bool>(),
            ) {
                let object = Value::Object(members.into_iter().collect::<Map<_, _>>());
                let result = if pretty {
                    serde_json::to_string_pretty(&object).unwrap()
                } else {
                    object.to_string()
                };
                let source = raw(r#"{"name":"a"}"#);
                let ours = [("io.toolyard/source", &*source)];
                let meta: &[(&str, &RawValue)] = if with_meta { &ours } else { &[] };
                let full = RawResult::from_upstream(&result, meta).unwrap();
                let fast = RawResult::from_upstream_value(&raw(&result), meta).unwrap();
                let parsed = |r: &RawResult| serde_json::from_str::<Value>(r.get()).unwrap();
                prop_assert_eq!(parsed(&fast), parsed(&full), "{}", result);
                prop_assert_eq!(fast.failed(), full.failed(), "{}", result);
                prop_assert_eq!(fast.result_type(), full.result_type(), "{}", result);
            }
        }
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
