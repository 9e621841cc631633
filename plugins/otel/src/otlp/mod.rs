//! Our own OTLP/HTTP span export: each span written as protobuf where it ends, as it is,
//! not converted to opentelemetry-proto's structs first ([`encode`]), batched and sent by a
//! span processor of our own ([`processor`]) with the workspace's HTTP client ([`traces`]).

mod encode;
mod processor;
mod traces;

pub(crate) use processor::{EncodingSpanProcessor, Limits};
pub(crate) use traces::HttpSpanSender;
