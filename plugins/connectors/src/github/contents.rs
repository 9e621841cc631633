//! Reading a repository path through the contents API (`GET /repos/{o}/{r}/contents/{path}`),
//! shared by `get_file_contents` and the `repo://` resources: a directory is its entries, a
//! file its decoded bytes. Files over the contents API's 1 MB limit come back without
//! content (`encoding: "none"`) and are fetched again as raw bytes
//! (`Accept: application/vnd.github.raw+json`), within the body cap.

use super::client::encode_path;
use super::Inner;
use base64::Engine as _;
use serde_json::{json, Value};
use toolyard::HandlerError;

/// What a path holds.
#[derive(Debug)]
pub(crate) enum Contents {
    /// A directory's entries (`{type, name, path, size, sha}` each).
    Dir(Vec<Value>),
    /// A file.
    File {
        path: String,
        sha: String,
        bytes: Vec<u8>,
    },
}

/// Reads `path` of `owner/repo` at `reference` (a branch, tag, SHA or `refs/...`; the
/// default branch when `None`). The caller has checked the repository.
pub(crate) async fn read(
    inner: &Inner,
    owner: &str,
    repo: &str,
    path: &str,
    reference: Option<&str>,
) -> Result<Contents, HandlerError> {
    let encoded = encode_path(path)?;
    let api_path = if encoded.is_empty() {
        format!("/repos/{owner}/{repo}/contents")
    } else {
        format!("/repos/{owner}/{repo}/contents/{encoded}")
    };
    let query: Vec<(&str, String)> = reference
        .filter(|r| !r.is_empty())
        .map(|r| vec![("ref", r.to_owned())])
        .unwrap_or_default();
    let value = inner.client.get(&api_path, &query).await?.value;
    if let Some(entries) = value.as_array() {
        return Ok(Contents::Dir(
            entries
                .iter()
                .map(|e| {
                    json!({"type": e["type"], "name": e["name"], "path": e["path"],
                        "size": e["size"], "sha": e["sha"]})
                })
                .collect(),
        ));
    }
    let kind = value["type"].as_str().unwrap_or("");
    if kind != "file" {
        return Err(HandlerError::failed(format!(
            "{path} is a {} (only files and directories can be read)",
            if kind.is_empty() {
                "thing GitHub did not describe"
            } else {
                kind
            }
        )));
    }
    let sha = value["sha"].as_str().unwrap_or("").to_owned();
    let shown = value["path"].as_str().unwrap_or(path).to_owned();
    let bytes = match (value["encoding"].as_str(), value["content"].as_str()) {
        (Some("base64"), Some(content)) => {
            let compact: String = content.chars().filter(|c| !c.is_whitespace()).collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|_| {
                    HandlerError::failed("GitHub sent file contents that are not valid base64")
                })?
        }
        _ => {
            // Over the contents API's size limit: the raw bytes instead.
            inner
                .client
                .get_raw(&api_path, &query, "application/vnd.github.raw+json")
                .await?
                .body
                .to_vec()
        }
    };
    Ok(Contents::File {
        path: shown,
        sha,
        bytes,
    })
}

/// File bytes as text when they are UTF-8 without NUL bytes.
pub(crate) fn as_text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}
