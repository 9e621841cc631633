//! The MCP semantic conventions' names (development stability; written out here rather
//! than taken from `opentelemetry-semantic-conventions`, which marks its MCP constants as
//! moved) and the error classification.

pub(crate) const MCP_METHOD_NAME: &str = "mcp.method.name";
pub(crate) const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
pub(crate) const MCP_SESSION_ID: &str = "mcp.session.id";
pub(crate) const MCP_RESOURCE_URI: &str = "mcp.resource.uri";
pub(crate) const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub(crate) const GEN_AI_PROMPT_NAME: &str = "gen_ai.prompt.name";
pub(crate) const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub(crate) const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
pub(crate) const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
pub(crate) const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
pub(crate) const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";
pub(crate) const ERROR_TYPE: &str = "error.type";
pub(crate) const SERVER_ADDRESS: &str = "server.address";
pub(crate) const NETWORK_TRANSPORT: &str = "network.transport";
pub(crate) const CLIENT_ADDRESS: &str = "client.address";
pub(crate) const CLIENT_PORT: &str = "client.port";
pub(crate) const NETWORK_PROTOCOL_NAME: &str = "network.protocol.name";
pub(crate) const MESSAGING_SYSTEM: &str = "messaging.system";
pub(crate) const MESSAGING_DESTINATION_NAME: &str = "messaging.destination.name";
pub(crate) const MESSAGING_CONSUMER_GROUP_NAME: &str = "messaging.consumer.group.name";
/// Toolyard's own: the instance that answered a forwarded request (a NATS worker's id, from
/// its `Mcp-Worker` header); no semantic convention names the far side's instance.
pub(crate) const TOOLYARD_ANSWERED_BY: &str = "toolyard.answered_by";

pub(crate) const SERVER_DURATION: &str = "mcp.server.operation.duration";
pub(crate) const CLIENT_DURATION: &str = "mcp.client.operation.duration";
pub(crate) const SESSION_DURATION: &str = "mcp.server.session.duration";

/// `error.type` of a tool result with `isError: true`.
pub(crate) const TOOL_ERROR: &str = "tool_error";
/// A metric's tool name when the name came from a call the server refused (any client
/// could mint a new series per call otherwise; the span keeps the real name).
pub(crate) const OTHER: &str = "_OTHER";

/// The conventions' boundaries for MCP durations, in seconds.
pub(crate) const DURATION_BOUNDARIES: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// JSON-RPC codes that are the caller's fault: the span's status stays unset (the server
/// did its job), though `error.type` names the code.
pub(crate) fn caller_fault(code: i32) -> bool {
    matches!(
        code,
        -32700 // parse error
            | -32600 // invalid request
            | -32601 // method not found
            | -32602 // invalid params (unknown tool, bad arguments)
            | -32002 // resource not found (legacy)
            | -32021 // missing client capability
            | -32022 // unsupported protocol version
            | -32042 // URL elicitation required
    )
}

/// The attribute naming what a method targets.
pub(crate) fn target_attribute(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" => Some(GEN_AI_TOOL_NAME),
        "prompts/get" => Some(GEN_AI_PROMPT_NAME),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            Some(MCP_RESOURCE_URI)
        }
        _ => None,
    }
}

/// The span name: `{method} {target}`, or the method alone. Pushed into a string of the
/// right size: `format!` took ~900 instructions of every traced request (callgrind).
pub(crate) fn span_name(method: &str, target: Option<&str>) -> String {
    match target {
        Some(t) if target_attribute(method).is_some() => {
            let mut name = String::with_capacity(method.len() + 1 + t.len());
            name.push_str(method);
            name.push(' ');
            name.push_str(t);
            name
        }
        _ => method.to_owned(),
    }
}

/// An MCP duration histogram (`name`, seconds, the conventions' boundaries).
pub(crate) fn duration_histogram(
    meter: &opentelemetry::metrics::Meter,
    name: &'static str,
    description: &'static str,
) -> opentelemetry::metrics::Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit("s")
        .with_description(description)
        .with_boundaries(DURATION_BOUNDARIES.to_vec())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_named_after_its_method_and_target_when_the_method_has_one() {
        assert_eq!(span_name("tools/call", Some("echo")), "tools/call echo");
        assert_eq!(span_name("prompts/get", Some("p")), "prompts/get p");
        assert_eq!(span_name("tools/list", Some("ignored")), "tools/list");
        assert_eq!(span_name("tools/call", None), "tools/call");
    }
}
