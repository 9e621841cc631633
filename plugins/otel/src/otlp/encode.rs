//! A batch of finished spans written as an OTLP `ExportTraceServiceRequest` in protobuf,
//! straight from the SDK's [`SpanData`].
//!
//! Why not opentelemetry-otlp's encoding: it first converts every span into
//! opentelemetry-proto's message structs (each attribute key and string value copied into a
//! new `String`), has prost encode them (every nested message's length computed again at
//! each level above it), then drops them. That was ~14 000 instructions per span on the
//! exporter's thread (callgrind, `benches/callgrind.sh stdio-full`): more than the whole
//! request it describes. Here each field is written once, from the span as it is, each
//! nested message after room for its length (one byte; two for a span, three for a batch). The field numbers and the way each value is written follow opentelemetry-proto's
//! conversion (`opentelemetry_proto::transform::trace`), and the test beside this file
//! checks that decoding our bytes gives exactly the messages that conversion builds.

use crate::wall_clock::unix_nanos;
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;
use prost::encoding::WireType;

/// `SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`: the flags say whether the parent is remote.
const HAS_IS_REMOTE: u32 = 0x100;
/// `SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const IS_REMOTE: u32 = 0x200;

/// The `Resource` message of a pipeline and its schema URL, written once (the resource does
/// not change between batches) and copied into every request.
#[derive(Debug, Clone, Default)]
pub(crate) struct EncodedResource {
    /// The `Resource` message's body (its attributes).
    body: Vec<u8>,
    schema_url: String,
}

impl EncodedResource {
    pub(crate) fn new(resource: &Resource) -> EncodedResource {
        let mut w = Writer::default();
        for (key, value) in resource.iter() {
            w.message(1, |w| w.key_value(key.as_str(), value));
        }
        EncodedResource {
            body: w.buf,
            schema_url: resource
                .schema_url()
                .map(ToOwned::to_owned)
                .unwrap_or_default(),
        }
    }
}

/// Spans written as OTLP `Span` messages, grouped by instrumentation scope (in the order the
/// scopes first appeared in the batch's life: it is emptied and reused), ready to be framed
/// as a request: what a batch holds between the
/// spans' end and their export. Written span by span as they end
/// ([`push`](Self::push)), so a span is read once and never kept.
#[derive(Debug, Default)]
pub(crate) struct EncodedBatch {
    /// Each scope and its spans: `ScopeSpans.spans` fields, key and length included.
    scopes: Vec<(InstrumentationScope, Vec<u8>)>,
    spans: usize,
}

/// An attribute's value as [`SpanParts`] carries it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttrValue<'a> {
    Str(&'a str),
    Int(i64),
}

/// A span written from its parts rather than from the SDK's [`SpanData`]: what the server's
/// direct span path (`crate::direct`) writes without building a span object, field by
/// field in their numbers' order ([`SpanEncoder::new`] the head, then each attribute, then
/// [`SpanEncoder::finish`]). Written exactly as a `SpanData` with the same parts is (the
/// direct path's test checks it): no events, no dropped counts, links without attributes.
pub(crate) struct SpanHead<'a> {
    pub(crate) context: &'a SpanContext,
    /// The parent's context, when it has a valid one.
    pub(crate) parent: Option<&'a SpanContext>,
    /// The name, in pieces written one after the other.
    pub(crate) name: &'a [&'a str],
    pub(crate) kind: SpanKind,
    /// Nanoseconds since the Unix epoch.
    pub(crate) start: u64,
    /// Nanoseconds since the Unix epoch.
    pub(crate) end: u64,
}

/// See [`SpanHead`]: a `Span` message's body being written into a buffer of the caller's.
pub(crate) struct SpanEncoder {
    w: Writer,
    remote_parent: bool,
    flags: u8,
}

impl SpanEncoder {
    /// Starts a span's body in `buf` (emptied first) with its fields up to its attributes.
    pub(crate) fn new(mut buf: Vec<u8>, head: &SpanHead<'_>) -> SpanEncoder {
        buf.clear();
        let mut w = Writer { buf };
        let cx = head.context;
        // The fixed-size fields go in as arrays, one copy each, rather than key, length and
        // value one push at a time (~100 instructions of every span). The ids are never
        // empty (16 and 8 bytes), so always written, as `bytes` would.
        let mut ids = [0u8; 28];
        ids[..2].copy_from_slice(&[0x0a, 16]);
        ids[2..18].copy_from_slice(&cx.trace_id().to_bytes());
        ids[18..20].copy_from_slice(&[0x12, 8]);
        ids[20..].copy_from_slice(&cx.span_id().to_bytes());
        w.buf.extend_from_slice(&ids);
        w.trace_state(cx.trace_state());
        if let Some(parent) = head.parent {
            w.bytes(4, &parent.span_id().to_bytes());
        }
        let name_len: usize = head.name.iter().map(|p| p.len()).sum();
        if name_len > 0 {
            push_key(&mut w.buf, 5, WireType::LengthDelimited);
            push_varint(&mut w.buf, name_len as u64);
            for piece in head.name {
                w.buf.extend_from_slice(piece.as_bytes());
            }
        }
        let kind = span_kind(&head.kind);
        if head.start != 0 && head.end != 0 {
            // Kind (never 0), start and end: 20 bytes.
            let mut times = [0u8; 20];
            times[..3].copy_from_slice(&[0x30, kind as u8, 0x39]);
            times[3..11].copy_from_slice(&head.start.to_le_bytes());
            times[11] = 0x41;
            times[12..].copy_from_slice(&head.end.to_le_bytes());
            w.buf.extend_from_slice(&times);
        } else {
            w.varint(6, kind);
            w.fixed64(7, head.start);
            w.fixed64(8, head.end);
        }
        SpanEncoder {
            w,
            remote_parent: head.parent.is_some_and(SpanContext::is_remote),
            flags: cx.trace_flags().to_u8(),
        }
    }

    /// One attribute, in the order the span carries them.
    pub(crate) fn attribute(&mut self, key: &str, value: AttrValue<'_>) {
        self.w.span_attribute(key, value);
    }

    /// Attributes written before by [`write_span_attribute`], as they were written.
    pub(crate) fn written_attributes(&mut self, written: &[u8]) {
        self.w.buf.extend_from_slice(written);
    }

    /// The links, the status and the flags: the span's body, complete.
    pub(crate) fn finish(mut self, links: &[SpanContext], status: &Status) -> Vec<u8> {
        for lcx in links {
            self.w.message(13, |w| {
                w.bytes(1, &lcx.trace_id().to_bytes());
                w.bytes(2, &lcx.span_id().to_bytes());
                w.trace_state(lcx.trace_state());
                w.fixed32(6, flags(lcx.is_remote(), lcx.trace_flags().to_u8()));
            });
        }
        let flags = flags(self.remote_parent, self.flags);
        if *status == Status::Unset {
            // An empty `Status` (key, length 0) and the flags (never 0; field 16's key takes
            // two bytes): one copy.
            let mut tail = [0x7a, 0x00, 0x85, 0x01, 0, 0, 0, 0];
            tail[4..].copy_from_slice(&flags.to_le_bytes());
            self.w.buf.extend_from_slice(&tail);
        } else {
            self.w.message(15, |w| write_status(w, status));
            self.w.fixed32(16, flags);
        }
        self.w.buf
    }
}

/// One of a span's attributes written at the end of `buf`, as [`SpanEncoder::attribute`]
/// writes it: for attributes many spans share, written once and copied in with
/// [`SpanEncoder::written_attributes`].
pub(crate) fn write_span_attribute(buf: &mut Vec<u8>, key: &str, value: AttrValue<'_>) {
    let mut w = Writer {
        buf: std::mem::take(buf),
    };
    w.span_attribute(key, value);
    *buf = w.buf;
}

impl EncodedBatch {
    /// Writes `span` into the batch.
    pub(crate) fn push(&mut self, span: &SpanData) {
        self.push_with(&span.instrumentation_scope, |w| w.span(span));
    }

    /// Writes a span's body written elsewhere ([`SpanEncoder`]) into the batch, under
    /// `scope`.
    pub(crate) fn push_encoded(&mut self, scope: &InstrumentationScope, body: &[u8]) {
        self.push_with(scope, |w| w.buf.extend_from_slice(body));
    }

    fn push_with(&mut self, scope: &InstrumentationScope, body: impl FnOnce(&mut Writer)) {
        // A batch holds a handful of scopes at most: a list beats a hash map here.
        let at = match self.scopes.iter().position(|(s, _)| same_scope(s, scope)) {
            Some(at) => at,
            None => {
                self.scopes.push((scope.clone(), Vec::new()));
                self.scopes.len() - 1
            }
        };
        let mut w = Writer {
            buf: std::mem::take(&mut self.scopes[at].1),
        };
        // A span like the server's takes 300-400 bytes: two bytes of length.
        w.message_sized(2, 2, body);
        self.scopes[at].1 = w.buf;
        self.spans += 1;
    }

    /// How many spans it holds.
    pub(crate) fn len(&self) -> usize {
        self.spans
    }

    /// Empty again, its buffers kept for the next spans.
    pub(crate) fn clear(&mut self) {
        for (_, buf) in &mut self.scopes {
            buf.clear();
        }
        self.spans = 0;
    }

    /// The request body: one `ResourceSpans` holding one `ScopeSpans` per instrumentation
    /// scope that has spans.
    pub(crate) fn request(&self, resource: &EncodedResource) -> Vec<u8> {
        let spans: usize = self.scopes.iter().map(|(_, b)| b.len()).sum();
        let mut w = Writer {
            buf: Vec::with_capacity(resource.body.len() + 64 * (self.scopes.len() + 1) + spans),
        };
        // ExportTraceServiceRequest.resource_spans
        w.message_sized(1, 3, |w| {
            // ResourceSpans.resource
            w.message(1, |w| w.buf.extend_from_slice(&resource.body));
            for (scope, spans) in self.scopes.iter().filter(|(_, b)| !b.is_empty()) {
                // ResourceSpans.scope_spans
                w.message_sized(2, 3, |w| {
                    w.message(1, |w| {
                        w.string(1, scope.name());
                        w.string(2, scope.version().unwrap_or_default());
                        w.attributes(3, scope.attributes());
                    });
                    w.buf.extend_from_slice(spans);
                    w.string(3, scope.schema_url().unwrap_or_default());
                });
            }
            w.string(3, &resource.schema_url);
        });
        w.buf
    }
}

/// `a == b`, answered without comparing the names' text when both are the same `'static`
/// name with nothing else set (the server's own scope, cloned into the batch, met at
/// every span).
fn same_scope(a: &InstrumentationScope, b: &InstrumentationScope) -> bool {
    let bare = |s: &InstrumentationScope| {
        s.version().is_none() && s.schema_url().is_none() && s.attributes().next().is_none()
    };
    let (x, y) = (a.name(), b.name());
    if std::ptr::eq(x, y) && bare(a) && bare(b) {
        return true;
    }
    a == b
}

/// The request body for `spans` (what [`EncodedBatch`] makes of them).
#[cfg(test)]
pub(crate) fn encode_spans(resource: &EncodedResource, spans: &[SpanData]) -> Vec<u8> {
    let mut batch = EncodedBatch::default();
    for span in spans {
        batch.push(span);
    }
    batch.request(resource)
}

/// A varint, pushed in place: the one-byte case (most keys, most lengths) is one comparison
/// and one push. prost's own writer goes through `BufMut` a byte at a time, which was ~460
/// instructions of every span.
fn push_varint(buf: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        buf.push((value as u8) | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}

/// A field's key: its number and wire type.
fn push_key(buf: &mut Vec<u8>, field: u32, wire_type: WireType) {
    push_varint(buf, u64::from(field << 3 | wire_type as u32));
}

fn flags(parent_is_remote: bool, trace_flags: u8) -> u32 {
    u32::from(trace_flags) | HAS_IS_REMOTE | if parent_is_remote { IS_REMOTE } else { 0 }
}

/// Protobuf out, proto3 style: a scalar field at its default value is left out, as prost
/// leaves it out, and the fields come in the order of their numbers, as prost writes them (so
/// the bytes are prost's own, which the test checks).
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// A nested message (or any length-delimited field) whose length fits one byte, as most
    /// do (see [`Writer::message_sized`]).
    fn message(&mut self, field: u32, body: impl FnOnce(&mut Writer)) {
        self.message_sized(field, 1, body);
    }

    /// A nested message: its body is written after room for a length of `guess` bytes, and
    /// moved along only when its length turns out to need another number of bytes (a span
    /// takes two, a batch three).
    fn message_sized(&mut self, field: u32, guess: usize, body: impl FnOnce(&mut Writer)) {
        push_key(&mut self.buf, field, WireType::LengthDelimited);
        let at = self.buf.len();
        if guess == 1 {
            self.buf.push(0);
        } else {
            self.buf.resize(at + guess, 0);
        }
        body(self);
        let len = (self.buf.len() - at - guess) as u64;
        if guess == 1 && len < 0x80 {
            self.buf[at] = len as u8;
            return;
        }
        // The length written after the body, then moved into the room left for it.
        let end = self.buf.len();
        push_varint(&mut self.buf, len);
        if self.buf.len() - end == guess {
            self.buf.copy_within(end.., at);
            self.buf.truncate(end);
        } else {
            let length = self.buf.split_off(end);
            self.buf.splice(at..at + guess, length);
        }
    }

    fn bytes(&mut self, field: u32, value: &[u8]) {
        if !value.is_empty() {
            self.bytes_always(field, value);
        }
    }

    fn bytes_always(&mut self, field: u32, value: &[u8]) {
        push_key(&mut self.buf, field, WireType::LengthDelimited);
        push_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(value);
    }

    /// A span's or a link's `trace_state` (field 3): the empty one, as most are, without
    /// writing its (empty) header first.
    fn trace_state(&mut self, state: &TraceState) {
        if *state != TraceState::NONE {
            self.string(3, &state.header());
        }
    }

    fn string(&mut self, field: u32, value: &str) {
        self.bytes(field, value.as_bytes());
    }

    fn varint(&mut self, field: u32, value: u64) {
        if value != 0 {
            push_key(&mut self.buf, field, WireType::Varint);
            push_varint(&mut self.buf, value);
        }
    }

    fn fixed64(&mut self, field: u32, value: u64) {
        if value != 0 {
            push_key(&mut self.buf, field, WireType::SixtyFourBit);
            self.buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn fixed32(&mut self, field: u32, value: u32) {
        if value != 0 {
            push_key(&mut self.buf, field, WireType::ThirtyTwoBit);
            self.buf.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// A `Span.attributes` field.
    fn span_attribute(&mut self, key: &str, value: AttrValue<'_>) {
        let short = match value {
            AttrValue::Str(s) => Short::Str(s.as_bytes()),
            AttrValue::Int(i) => Short::Int(i),
        };
        if !self.short_attribute(9, key.as_bytes(), short) {
            self.message(9, |w| {
                w.string(1, key);
                w.message(2, |w| match value {
                    AttrValue::Str(s) => w.any_string(s),
                    AttrValue::Int(i) => w.any_int(i),
                });
            });
        }
    }

    /// A `KeyValue`'s body: the value is always there (a message field that is set), and so
    /// is its one-of member, even when it holds a default (`""`, `0`, `false`).
    fn key_value(&mut self, key: &str, value: &Value) {
        self.string(1, key);
        self.message(2, |w| w.any_value(value));
    }

    /// An `AnyValue`'s body: its one-of member, written even when it holds a default.
    fn any_value(&mut self, value: &Value) {
        match value {
            Value::String(s) => self.any_string(s.as_str()),
            Value::Bool(b) => self.any_bool(*b),
            Value::I64(i) => self.any_int(*i),
            Value::F64(f) => self.any_double(*f),
            Value::Array(array) => self.message(5, |w| w.array(array)),
            // A kind of value this encoder does not know: an empty `AnyValue`, as
            // opentelemetry-proto writes one.
            _ => {}
        }
    }

    fn any_string(&mut self, s: &str) {
        self.bytes_always(1, s.as_bytes());
    }

    fn any_bool(&mut self, b: bool) {
        push_key(&mut self.buf, 2, WireType::Varint);
        push_varint(&mut self.buf, u64::from(b));
    }

    /// int64 on the wire: two's complement in ten bytes when negative.
    fn any_int(&mut self, i: i64) {
        push_key(&mut self.buf, 3, WireType::Varint);
        push_varint(&mut self.buf, i as u64);
    }

    fn any_double(&mut self, f: f64) {
        push_key(&mut self.buf, 4, WireType::SixtyFourBit);
        self.buf.extend_from_slice(&f.to_le_bytes());
    }

    /// An `ArrayValue`'s body: each element an `AnyValue` of its own.
    fn array(&mut self, array: &Array) {
        match array {
            Array::Bool(v) => v.iter().for_each(|b| self.message(1, |w| w.any_bool(*b))),
            Array::I64(v) => v.iter().for_each(|i| self.message(1, |w| w.any_int(*i))),
            Array::F64(v) => v.iter().for_each(|f| self.message(1, |w| w.any_double(*f))),
            Array::String(v) => v
                .iter()
                .for_each(|s| self.message(1, |w| w.any_string(s.as_str()))),
            _ => {}
        }
    }

    fn attributes<'a>(&mut self, field: u32, attributes: impl IntoIterator<Item = &'a KeyValue>) {
        for kv in attributes {
            if !self.short_key_value(field, kv) {
                self.message(field, |w| w.key_value(kv.key.as_str(), &kv.value));
            }
        }
    }

    /// A `KeyValue` field whose every length fits one byte, as a span's attributes nearly
    /// always do: its size is known before it is written, so it is written in one go, with
    /// no room left for a length and nothing moved after (the general path costs about
    /// twice as much). `false`, with nothing written, for anything longer, an empty key
    /// (left out, proto3 style) or another kind of value.
    fn short_key_value(&mut self, field: u32, kv: &KeyValue) -> bool {
        let value = match &kv.value {
            Value::String(v) => Short::Str(v.as_str().as_bytes()),
            Value::I64(i) => Short::Int(*i),
            Value::Bool(b) => Short::Bool(*b),
            _ => return false,
        };
        self.short_attribute(field, kv.key.as_str().as_bytes(), value)
    }

    /// [`short_key_value`](Self::short_key_value) of a key and a value as they are. The
    /// fixed-size pieces go in as arrays the compiler copies inline, so a string attribute
    /// is two variable-length copies (its key, its text) and four bytes twice.
    fn short_attribute(&mut self, field: u32, key: &[u8], value: Short<'_>) -> bool {
        // The `AnyValue`'s body: its one-of member's key and, for a string, its length,
        // then the string's bytes; for a scalar, its value as a varint.
        let mut scalar = [0u8; 11];
        let (any, scalar_len) = match value {
            Short::Str(text) => {
                if text.len() >= 0x80 {
                    return false;
                }
                (2 + text.len(), 0)
            }
            // int64: two's complement, ten bytes when negative.
            Short::Int(i) => {
                scalar[0] = 0x18;
                let mut v = i as u64;
                let mut n = 1;
                while v >= 0x80 {
                    scalar[n] = (v as u8) | 0x80;
                    v >>= 7;
                    n += 1;
                }
                scalar[n] = v as u8;
                (n + 1, n + 1)
            }
            Short::Bool(b) => {
                scalar[0] = 0x10;
                scalar[1] = u8::from(b);
                (2, 2)
            }
        };
        // `KeyValue.key` (key byte, length, bytes) and `KeyValue.value` (key byte, length,
        // the `AnyValue`).
        let body = 2 + key.len() + 2 + any;
        if field >= 16 || key.is_empty() || body >= 0x80 {
            return false;
        }
        self.buf.reserve(2 + body);
        self.buf.extend_from_slice(&[
            (field << 3) as u8 | WireType::LengthDelimited as u8,
            body as u8,
            0x0a,
            key.len() as u8,
        ]);
        self.buf.extend_from_slice(key);
        match value {
            Short::Str(text) => {
                self.buf
                    .extend_from_slice(&[0x12, any as u8, 0x0a, text.len() as u8]);
                self.buf.extend_from_slice(text);
            }
            Short::Int(_) | Short::Bool(_) => {
                self.buf.extend_from_slice(&[0x12, any as u8]);
                for b in &scalar[..scalar_len] {
                    self.buf.push(*b);
                }
            }
        }
        true
    }

    /// A `Span`'s body.
    fn span(&mut self, span: &SpanData) {
        let cx = &span.span_context;
        self.bytes(1, &cx.trace_id().to_bytes());
        self.bytes(2, &cx.span_id().to_bytes());
        self.trace_state(cx.trace_state());
        if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
            self.bytes(4, &span.parent_span_id.to_bytes());
        }
        self.string(5, &span.name);
        self.varint(6, span_kind(&span.span_kind));
        self.fixed64(7, unix_nanos(span.start_time));
        self.fixed64(8, unix_nanos(span.end_time));
        self.attributes(9, &span.attributes);
        self.varint(10, u64::from(span.dropped_attributes_count));
        for event in span.events.iter() {
            self.message(11, |w| {
                w.fixed64(1, unix_nanos(event.timestamp));
                w.string(2, &event.name);
                w.attributes(3, &event.attributes);
                w.varint(4, u64::from(event.dropped_attributes_count));
            });
        }
        self.varint(12, u64::from(span.events.dropped_count));
        for link in span.links.iter() {
            let lcx = &link.span_context;
            self.message(13, |w| {
                w.bytes(1, &lcx.trace_id().to_bytes());
                w.bytes(2, &lcx.span_id().to_bytes());
                w.trace_state(lcx.trace_state());
                w.attributes(4, &link.attributes);
                w.varint(5, u64::from(link.dropped_attributes_count));
                w.fixed32(6, flags(lcx.is_remote(), lcx.trace_flags().to_u8()));
            });
        }
        self.varint(14, u64::from(span.links.dropped_count));
        self.message(15, |w| write_status(w, &span.status));
        self.fixed32(
            16,
            flags(span.parent_span_is_remote, cx.trace_flags().to_u8()),
        );
    }
}

/// A `Status`'s body (always there, as opentelemetry-proto sets it).
fn write_status(w: &mut Writer, status: &Status) {
    if let Status::Error { description } = status {
        w.string(2, description);
    }
    w.varint(
        3,
        match status {
            Status::Unset => 0,
            Status::Ok => 1,
            Status::Error { .. } => 2,
        },
    );
}

/// A value [`Writer::short_attribute`] writes.
#[derive(Clone, Copy)]
enum Short<'a> {
    Str(&'a [u8]),
    Int(i64),
    Bool(bool),
}

fn span_kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry::StringValue;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message;
    use std::borrow::Cow;
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    fn context(trace: u128, span: u64, remote: bool, state: &str) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::SAMPLED,
            remote,
            state.parse::<TraceState>().unwrap(),
        )
    }

    /// Spans with every kind of field set and unset: all kinds of value, array and status,
    /// events, links, a remote parent, none, two scopes interleaved, a long attribute (a
    /// length that takes more than one byte) and empty strings.
    fn spans() -> Vec<SpanData> {
        let toolyard = InstrumentationScope::builder("toolyard")
            .with_version("1.2.3")
            .with_attributes([KeyValue::new("scope.attr", 7_i64)])
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .build();
        let other = InstrumentationScope::builder("other").build();
        let t0 = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let mut events = SpanEvents::default();
        events.events.push(opentelemetry::trace::Event::new(
            "retry",
            t0 + Duration::from_micros(3),
            vec![KeyValue::new("attempt", 2_i64)],
            1,
        ));
        events.dropped_count = 4;
        let mut links = SpanLinks::default();
        links.links.push(Link::new(
            context(0xabc, 0xdef, true, "k=v"),
            vec![KeyValue::new("why", "transport")],
            2,
        ));
        links.dropped_count = 1;
        let base = SpanData {
            span_context: context(
                0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
                0x1112_1314_1516_1718,
                false,
                "",
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed("tools/call echo"),
            start_time: t0,
            end_time: t0 + Duration::from_micros(42),
            attributes: vec![
                KeyValue::new("mcp.method.name", "tools/call"),
                KeyValue::new("jsonrpc.request.id", String::from("7")),
                KeyValue::new("client.port", 40_123_i64),
                KeyValue::new("negative", -5_i64),
                KeyValue::new("ratio", 0.25_f64),
                KeyValue::new("flag", true),
                KeyValue::new("off", false),
                KeyValue::new("empty", ""),
                KeyValue::new("long", "x".repeat(300)),
                // Around the one-byte lengths: 127 and 128 bytes of value, a body of 127.
                KeyValue::new("s127", "y".repeat(127)),
                KeyValue::new("s128", "y".repeat(128)),
                KeyValue::new("k", "z".repeat(120)),
                KeyValue::new("k", "z".repeat(121)),
                KeyValue::new("", "keyless"),
                KeyValue::new("min", i64::MIN),
                KeyValue::new("k".repeat(130), 1_i64),
                KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("ints", Value::Array(Array::I64(vec![1, -1, 0]))),
                KeyValue::new("floats", Value::Array(Array::F64(vec![1.5, 0.0]))),
                KeyValue::new(
                    "strings",
                    Value::Array(Array::String(vec![
                        StringValue::from("a"),
                        StringValue::from(""),
                    ])),
                ),
            ],
            dropped_attributes_count: 3,
            events,
            links,
            status: Status::error("JSON-RPC error -32603"),
            instrumentation_scope: toolyard,
        };
        let mut child = base.clone();
        child.span_context = context(
            0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
            0x99,
            true,
            "a=1,b=2",
        );
        child.parent_span_id = SpanId::from(0x1112_1314_1516_1718);
        child.parent_span_is_remote = true;
        child.span_kind = SpanKind::Client;
        child.attributes.truncate(1);
        child.dropped_attributes_count = 0;
        child.events = SpanEvents::default();
        child.links = SpanLinks::default();
        child.status = Status::Ok;
        child.instrumentation_scope = other;
        let mut plain = base.clone();
        plain.span_kind = SpanKind::Internal;
        plain.status = Status::Unset;
        plain.name = Cow::Owned(String::new());
        plain.start_time = UNIX_EPOCH;
        plain.end_time = UNIX_EPOCH;
        let mut producer = plain.clone();
        producer.span_kind = SpanKind::Producer;
        let mut consumer = plain.clone();
        consumer.span_kind = SpanKind::Consumer;
        // Many attributes: a span whose own length takes two bytes, and one whose length
        // takes three (and so do the batch's, around it).
        let mut big = base.clone();
        big.attributes = (0..200)
            .map(|i| KeyValue::new(format!("k{i}"), i64::from(i)))
            .collect();
        let mut huge = base.clone();
        huge.attributes = (0..2000)
            .map(|i| KeyValue::new(format!("k{i}"), i64::from(i)))
            .collect();
        vec![base, child, plain, producer, consumer, big, huge]
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_service_name("toolyard-test")
            .with_attributes([
                KeyValue::new("deployment.environment", "ci"),
                KeyValue::new("host.cores", 2_i64),
            ])
            .with_schema_url([], "https://opentelemetry.io/schemas/1.29.0")
            .build()
    }

    #[test]
    fn decoding_the_bytes_gives_what_opentelemetry_proto_builds_from_the_same_spans() {
        let resource = resource();
        let spans = spans();
        let ours = encode_spans(&EncodedResource::new(&resource), &spans);
        let decoded = ExportTraceServiceRequest::decode(ours.as_slice()).unwrap();
        let theirs = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(&resource),
            ),
        };
        assert_eq!(decoded, theirs);
        // And byte for byte what prost writes from those messages: same fields, same order.
        assert_eq!(ours, theirs.encode_to_vec());
    }

    #[test]
    fn a_batch_emptied_and_filled_again_writes_what_a_new_batch_writes() {
        let resource = EncodedResource::new(&resource());
        let spans = spans();
        let mut batch = EncodedBatch::default();
        for span in &spans {
            batch.push(span);
        }
        batch.clear();
        assert_eq!(batch.len(), 0);
        // Only the last span's scope has spans now: the others are left out of the request.
        batch.push(&spans[0]);
        assert_eq!(
            batch.request(&resource),
            encode_spans(&resource, &spans[..1])
        );
        for span in &spans[1..] {
            batch.push(span);
        }
        assert_eq!(batch.request(&resource), encode_spans(&resource, &spans));
    }

    #[test]
    fn an_empty_batch_and_an_empty_resource_still_make_a_valid_request() {
        let ours = encode_spans(
            &EncodedResource::new(&Resource::builder_empty().build()),
            &[],
        );
        let decoded = ExportTraceServiceRequest::decode(ours.as_slice()).unwrap();
        assert_eq!(decoded.resource_spans.len(), 1);
        assert!(decoded.resource_spans[0].scope_spans.is_empty());
        assert!(decoded.resource_spans[0].resource.is_some());
    }
}
