//! Files as resources: the template `file://{+path}` reads any file under a root (with the
//! same confinement as the tools), as text when it is UTF-8 without NUL bytes, else as a
//! base64 blob. Nothing is listed (a root can hold millions of files); clients read by URI.

use super::errors::{failed, io};
use super::Inner;
use base64::Engine as _;
use std::io::Read;
use std::sync::Arc;
use toolyard::proto::{ResourceContents, ResourceTemplate};
use toolyard::{DefinitionError, HandlerError, ResourceFn, ResourceRequest, TemplateDef};

fn read(inner: &Inner, request: &ResourceRequest) -> Result<Vec<ResourceContents>, HandlerError> {
    let path = request
        .uri
        .strip_prefix("file://")
        .map(crate::uri::percent_decode)
        .ok_or_else(|| failed("not a file:// URI"))?;
    let target = inner.roots.resolve(&path)?;
    let shown = target.shown();
    let file = target
        .root
        .dir
        .open(target.rel())
        .map_err(|e| io(&shown, &e))?;
    let meta = file.metadata().map_err(|e| io(&shown, &e))?;
    if meta.is_dir() {
        return Err(failed(format!("{shown} is a directory")));
    }
    if meta.len() > inner.max_read_bytes {
        return Err(failed(format!(
            "{shown} is {} bytes, over the limit of {} bytes",
            meta.len(),
            inner.max_read_bytes
        )));
    }
    let mut bytes = Vec::new();
    file.take(inner.max_read_bytes)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&shown, &e))?;
    let mime = super::read::mime_of(&shown);
    if !bytes.contains(&0) {
        if let Ok(text) = String::from_utf8(bytes.clone()) {
            let mime = if mime == "application/octet-stream" {
                "text/plain"
            } else {
                mime
            };
            return Ok(vec![ResourceContents::text(
                request.uri.clone(),
                Some(mime.to_owned()),
                text,
            )]);
        }
    }
    Ok(vec![ResourceContents::blob(
        request.uri.clone(),
        Some(mime.to_owned()),
        base64::engine::general_purpose::STANDARD.encode(&bytes),
    )])
}

/// The `file://` template over `inner`'s roots.
pub(crate) fn template(inner: &Arc<Inner>) -> Result<TemplateDef, DefinitionError> {
    let inner = inner.clone();
    let reader: ResourceFn = Arc::new(move |ctx, request| {
        let inner = inner.clone();
        Box::pin(async move {
            let inner = super::scoped(&inner, &ctx).await?;
            crate::tool::blocking(move || read(&inner, &request)).await
        })
    });
    TemplateDef::new(
        ResourceTemplate {
            uri_template: "file://{+path}".to_owned(),
            name: "file".to_owned(),
            title: Some("A file under an allowed directory".to_owned()),
            description: Some(
                "Any file under the allowed directories, by absolute path (file:///srv/data/a.txt)."
                    .to_owned(),
            ),
            mime_type: None,
            annotations: None,
            icons: None,
            meta: None,
        },
        reader,
    )
}
