//! Our own OTLP/HTTP span export: each span written as protobuf where it ends, as it is,
//! not converted to opentelemetry-proto's structs first ([`encode`]), batched and sent by a
//! span processor of our own ([`processor`]) with the workspace's HTTP client ([`traces`]).
//! The server's own spans can skip the SDK's span object and be written from their parts
//! into the same queue (`SpanSink`, `crate::direct`).

mod encode;
mod processor;
mod traces;

pub(crate) use encode::{write_span_attribute, AttrValue, SpanEncoder, SpanHead};
pub(crate) use processor::{EncodingSpanProcessor, Limits, SpanSink};
pub(crate) use traces::HttpSpanSender;
