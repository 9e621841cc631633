//! The HTTP headers a modern request mirrors from its body (SEP-2243): `Mcp-Name`, and
//! `Mcp-Param-*` for the arguments a tool's schema marks with `x-mcp-header`. Server and
//! client read the same annotations, so the mapping lives here, once.

use crate::JsonObject;
use base64::Engine;

/// An argument mirrored into an `Mcp-Param-{header}` HTTP header (`x-mcp-header`).
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderParam {
    /// The chain of `properties` keys from the schema root to the argument.
    pub path: Vec<String>,
    /// The `{name}` of `Mcp-Param-{name}`.
    pub header: String,
}

/// Collects `x-mcp-header` annotations reachable through `properties` chains only, as the
/// server reads them: leniently, since it only checks the headers a client did send.
pub fn header_params(schema: &JsonObject) -> Vec<HeaderParam> {
    fn walk(schema: &JsonObject, path: &mut Vec<String>, out: &mut Vec<HeaderParam>) {
        let Some(serde_json::Value::Object(props)) = schema.get("properties") else {
            return;
        };
        for (key, sub) in props {
            let serde_json::Value::Object(sub) = sub else {
                continue;
            };
            path.push(key.clone());
            if let Some(serde_json::Value::String(h)) = sub.get("x-mcp-header") {
                out.push(HeaderParam {
                    path: path.clone(),
                    header: h.clone(),
                });
            }
            walk(sub, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

/// A header value for `text`: as is when it is visible ASCII without surrounding spaces,
/// otherwise the `=?base64?...?=` form the transport spec defines.
pub fn header_value(text: &str) -> String {
    let visible = text.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let padded = text.starts_with(' ') || text.ends_with(' ');
    let looks_encoded = text.starts_with("=?") && text.ends_with("?=");
    if visible && !padded && !looks_encoded {
        text.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
        )
    }
}

/// The `x-mcp-header` arguments of a tool, or why its annotations are invalid (SEP-2243: a
/// header name is a non-empty HTTP token, unique without regard to case, on a string,
/// integer or boolean argument). A tool with an invalid annotation must not be called: the server would reject
/// every call, or worse, route on a header the client cannot send faithfully.
pub fn tool_header_params(schema: &JsonObject) -> Result<Vec<HeaderParam>, String> {
    fn walk(
        schema: &JsonObject,
        path: &mut Vec<String>,
        out: &mut Vec<HeaderParam>,
    ) -> Result<(), String> {
        let Some(serde_json::Value::Object(props)) = schema.get("properties") else {
            return Ok(());
        };
        for (key, sub) in props {
            let serde_json::Value::Object(sub) = sub else {
                continue;
            };
            path.push(key.clone());
            if let Some(h) = sub.get("x-mcp-header") {
                let name = h
                    .as_str()
                    .ok_or_else(|| format!("x-mcp-header of `{key}` is not a string"))?;
                if name.is_empty() {
                    return Err(format!("x-mcp-header of `{key}` is empty"));
                }
                if !name.bytes().all(is_token_char) {
                    return Err(format!("x-mcp-header {name:?} is not a valid header name"));
                }
                let primitive = match sub.get("type") {
                    None => true,
                    Some(serde_json::Value::String(t)) => {
                        // Not `number`: a float has no one text form both sides agree on.
                        matches!(t.as_str(), "string" | "integer" | "boolean")
                    }
                    Some(_) => false,
                };
                if !primitive {
                    return Err(format!(
                        "x-mcp-header {name:?} is on `{key}`, which is not a string, integer or boolean"
                    ));
                }
                if out.iter().any(|p| p.header.eq_ignore_ascii_case(name)) {
                    return Err(format!("x-mcp-header {name:?} is used twice"));
                }
                out.push(HeaderParam {
                    path: path.clone(),
                    header: name.to_owned(),
                });
            }
            walk(sub, path, out)?;
            path.pop();
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// An HTTP token character (RFC 9110 `tchar`).
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(v: serde_json::Value) -> JsonObject {
        match v {
            serde_json::Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn invalid_header_annotations_are_refused() {
        for props in [
            serde_json::json!({"a": {"type": "string", "x-mcp-header": ""}}),
            serde_json::json!({"a": {"type": "object", "x-mcp-header": "A"}}),
            serde_json::json!({"a": {"type": "number", "x-mcp-header": "A"}}),
            serde_json::json!({"a": {"type": "string", "x-mcp-header": 7}}),
            serde_json::json!({"a": {"type": "string", "x-mcp-header": "A B"}}),
            serde_json::json!({"a": {"type": "string", "x-mcp-header": "A:B"}}),
            serde_json::json!({"a": {"type": "string", "x-mcp-header": "Région"}}),
            serde_json::json!({"a": {"type": "string", "x-mcp-header": "R"}, "b": {"type": "string", "x-mcp-header": "r"}}),
        ] {
            let s = schema(serde_json::json!({"type": "object", "properties": props}));
            assert!(tool_header_params(&s).is_err(), "{props}");
        }
        let ok = schema(
            serde_json::json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}),
        );
        assert_eq!(tool_header_params(&ok).unwrap()[0].header, "Region");
    }

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
