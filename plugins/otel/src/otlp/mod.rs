//! Our own OTLP/HTTP span exporter: the SDK's spans written as protobuf as they are, not
//! converted to opentelemetry-proto's structs first (see [`encode`]).

mod encode;
mod traces;

pub(crate) use traces::HttpSpanExporter;
