//! What the model is told about a tool call's result. Chat models read text, so the result
//! becomes one string, faithfully: every text block, a placeholder naming each binary block
//! (its bytes would only waste the context), embedded text resources in full,
//! `structuredContent` as JSON (unless a text block already is that JSON, as servers are
//! asked to send), and `isError` as an `Error:` prefix the model cannot miss.

use toolyard_proto::{CallToolResult, ContentBlock, ResourceContents};

/// The text of a tool result for a `role: "tool"` message.
pub fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => {
                format!("[image: {}, {} bytes of base64]", i.mime_type, i.data.len())
            }
            ContentBlock::Audio(a) => {
                format!("[audio: {}, {} bytes of base64]", a.mime_type, a.data.len())
            }
            ContentBlock::ResourceLink(l) => format!("[resource link: {} ({})]", l.uri, l.name),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::Text(t) => format!("[resource {}]\n{}", t.uri, t.text),
                ResourceContents::Blob(b) => format!("[resource {}: binary]", b.uri),
            },
        });
    }
    if let Some(structured) = &result.structured_content {
        let already = result.content.iter().any(|b| match b {
            ContentBlock::Text(t) => {
                serde_json::from_str::<serde_json::Value>(&t.text)
                    .ok()
                    .as_ref()
                    == Some(structured)
            }
            _ => false,
        });
        if !already {
            parts.push(structured.to_string());
        }
    }
    let text = parts.join("\n");
    if result.failed() {
        format!("Error: {text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_are_prefixed_and_structured_content_is_added_once() {
        assert_eq!(
            result_text(&CallToolResult::error_text("boom")),
            "Error: boom"
        );
        assert_eq!(
            result_text(&CallToolResult::structured(json!({"sum": 3}))),
            r#"{"sum":3}"#
        );
        let mut r = CallToolResult::text("see data");
        r.structured_content = Some(json!({"k": [1, 2]}));
        r.content.push(ContentBlock::image("AAAA", "image/png"));
        assert_eq!(
            result_text(&r),
            "see data\n[image: image/png, 4 bytes of base64]\n{\"k\":[1,2]}"
        );
    }
}
