//! Files as resources: the template `file://{+path}` reads any file under a root (with the
//! same confinement as the tools), as text when it is UTF-8 without NUL bytes, else as a
//! base64 blob. Nothing is listed (a root can hold millions of files); clients read by URI.
//! A subscription to a file is checked like a read of it ([`may_watch`]): change
//! notifications are server-wide, so a caller must not hear of a file it may not read.

use super::errors::{failed, io};
use super::Inner;
use base64::Engine as _;
use std::io::Read;
use std::sync::Arc;
use toolyard::proto::{ResourceContents, ResourceTemplate};
use toolyard::{
    DefinitionError, HandlerError, ResourceFn, ResourceRequest, SubscribeCheckFn, TemplateDef,
};

/// The path a `file://` URI names (percent-decoded).
fn path_of(uri: &str) -> Result<String, HandlerError> {
    uri.strip_prefix("file://")
        .map(crate::uri::percent_decode)
        .ok_or_else(|| failed("not a file:// URI"))
}

fn read(inner: &Inner, request: &ResourceRequest) -> Result<Vec<ResourceContents>, HandlerError> {
    let path = path_of(&request.uri)?;
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

/// Whether a caller whose view is `inner` (the operator's roots, narrowed by its own) may
/// subscribe to `uri`: the path must be under one of those roots, and looking at it through
/// the root's capability must not lead outside (a symlink), as a read would. A file that does
/// not exist yet may be subscribed to: its creation is a change.
fn may_watch(inner: &Inner, uri: &str) -> Result<(), HandlerError> {
    let path = path_of(uri)?;
    let target = inner.roots.resolve(&path)?;
    match target.root.dir.metadata(target.rel()) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&target.shown(), &e)),
    }
}

/// The `file://` template over `inner`'s roots.
pub(crate) fn template(inner: &Arc<Inner>) -> Result<TemplateDef, DefinitionError> {
    let reading = inner.clone();
    let reader: ResourceFn = Arc::new(move |ctx, request| {
        let inner = reading.clone();
        Box::pin(async move {
            let inner = super::scoped(&inner, &ctx).await?;
            crate::tool::blocking(move || read(&inner, &request))
                .await
                .map(Into::into)
        })
    });
    // The same narrowing as a read (`scoped`): the client's roots, asked once per list.
    let checking = inner.clone();
    let check: SubscribeCheckFn = Arc::new(move |ctx, request| {
        let inner = checking.clone();
        Box::pin(async move {
            let inner = super::scoped(&inner, &ctx).await?;
            crate::tool::blocking(move || may_watch(&inner, &request.uri)).await
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
    .map(|t| t.check_subscriptions(check))
}
