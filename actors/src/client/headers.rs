//! The HTTP headers a modern request mirrors from its body: `Mcp-Name`, and `Mcp-Param-*`
//! for the arguments a tool's schema marks with `x-mcp-header`.

use crate::tool::HeaderParam;
use base64::Engine;
use toolyard_proto::JsonObject;

/// A header value for `text`: as is when it is visible ASCII without surrounding spaces,
/// otherwise the `=?base64?...?=` form the transport spec defines.
pub(crate) fn header_value(text: &str) -> String {
    let plain = !text.is_empty()
        && text.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !(text.starts_with("=?") && text.ends_with("?="));
    if plain || text.is_empty() {
        text.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
        )
    }
}

/// The `x-mcp-header` arguments of a tool; annotations that cannot be a header name are
/// ignored (the tool stays callable).
pub(crate) fn tool_header_params(schema: &JsonObject) -> Vec<HeaderParam> {
    crate::tool::header_params(schema)
        .into_iter()
        .filter(|p| {
            !p.header.is_empty()
                && p.header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ascii_stays_plain() {
        assert_eq!(header_value("us-east-1"), "us-east-1");
    }

    #[test]
    fn non_ascii_and_padded_values_are_base64() {
        assert_eq!(header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_value(" x"), "=?base64?IHg=?=");
        assert_eq!(header_value("a\nb"), "=?base64?YQpi?=");
    }
}
