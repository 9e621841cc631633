//! Repository contents and issues as resources, under github-mcp-server's `repo://` URIs:
//!
//! - `repo://{owner}/{repo}/contents/{+path}` (the default branch),
//! - `repo://{owner}/{repo}/refs/heads/{branch}/contents/{+path}`,
//! - `repo://{owner}/{repo}/refs/tags/{tag}/contents/{+path}`,
//! - `repo://{owner}/{repo}/sha/{sha}/contents/{+path}`,
//! - `repo://{owner}/{repo}/refs/pull/{prNumber}/head/contents/{+path}`,
//! - `repo://{owner}/{repo}/issues/{issue_number}` (this connector's own: the issue as
//!   Markdown, sanitised).
//!
//! The anchor writes the path as `{/path*}`; `{+path}` matches the same URIs here (a path of
//! several segments). Nothing is listed (a repository can hold millions of files); clients
//! read by URI. The repository filter and name checks apply as for the tools.

use super::contents::{self, Contents};
use super::{sanitize, Inner};
use base64::Engine as _;
use std::sync::Arc;
use toolyard::proto::{ResourceContents, ResourceTemplate};
use toolyard::{DefinitionError, HandlerError, ResourceFn, ResourceRequest, TemplateDef};

/// How a contents template names the git reference.
#[derive(Debug, Clone, Copy)]
enum RefKind {
    Default,
    Branch,
    Tag,
    Sha,
    Pull,
}

fn var<'a>(request: &'a ResourceRequest, name: &str) -> Result<&'a str, HandlerError> {
    request
        .vars
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| HandlerError::failed(format!("the URI names no {name}")))
}

async fn read_contents(
    inner: &Inner,
    request: &ResourceRequest,
    kind: RefKind,
) -> Result<Vec<ResourceContents>, HandlerError> {
    let owner = var(request, "owner")?;
    let repo = var(request, "repo")?;
    inner.repos.check(owner, repo)?;
    let path = var(request, "path")?;
    let reference = match kind {
        RefKind::Default => None,
        RefKind::Branch => Some(format!("refs/heads/{}", var(request, "branch")?)),
        RefKind::Tag => Some(format!("refs/tags/{}", var(request, "tag")?)),
        RefKind::Sha => Some(var(request, "sha")?.to_owned()),
        RefKind::Pull => {
            let n = var(request, "prNumber")?;
            if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
                return Err(HandlerError::failed("prNumber is not a number"));
            }
            Some(format!("refs/pull/{n}/head"))
        }
    };
    match contents::read(inner, owner, repo, path, reference.as_deref()).await? {
        Contents::Dir(entries) => {
            let listing = entries
                .iter()
                .map(|e| {
                    format!(
                        "{} {}",
                        e["type"].as_str().unwrap_or("?"),
                        e["path"].as_str().unwrap_or("?")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            Ok(vec![ResourceContents::text(
                request.uri.clone(),
                Some("text/directory".to_owned()),
                listing,
            )])
        }
        Contents::File { bytes, .. } => match contents::as_text(&bytes) {
            Some(text) => Ok(vec![ResourceContents::text(
                request.uri.clone(),
                Some("text/plain".to_owned()),
                sanitize::invisible(text),
            )]),
            None => Ok(vec![ResourceContents::blob(
                request.uri.clone(),
                Some("application/octet-stream".to_owned()),
                base64::engine::general_purpose::STANDARD.encode(&bytes),
            )]),
        },
    }
}

async fn read_issue(
    inner: &Inner,
    request: &ResourceRequest,
) -> Result<Vec<ResourceContents>, HandlerError> {
    let owner = var(request, "owner")?;
    let repo = var(request, "repo")?;
    inner.repos.check(owner, repo)?;
    let number = var(request, "issue_number")?;
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
        return Err(HandlerError::failed("issue_number is not a number"));
    }
    let issue = inner
        .client
        .get(&format!("/repos/{owner}/{repo}/issues/{number}"), &[])
        .await?
        .value;
    let text = format!(
        "# {} (#{number})\n\nstate: {} · author: {} · created: {}\n\n{}\n",
        sanitize::markdown(issue["title"].as_str().unwrap_or("")),
        issue["state"].as_str().unwrap_or("?"),
        issue["user"]["login"].as_str().unwrap_or("?"),
        issue["created_at"].as_str().unwrap_or("?"),
        sanitize::markdown(issue["body"].as_str().unwrap_or("")),
    );
    Ok(vec![ResourceContents::text(
        request.uri.clone(),
        Some("text/markdown".to_owned()),
        text,
    )])
}

fn template(
    inner: &Arc<Inner>,
    uri: &str,
    name: &str,
    description: &str,
    kind: Option<RefKind>,
) -> Result<TemplateDef, DefinitionError> {
    let inner = inner.clone();
    let reader: ResourceFn = Arc::new(move |_ctx, request| {
        let inner = inner.clone();
        Box::pin(async move {
            match kind {
                Some(k) => read_contents(&inner, &request, k).await,
                None => read_issue(&inner, &request).await,
            }
            .map(Into::into)
        })
    });
    TemplateDef::new(
        ResourceTemplate {
            uri_template: uri.to_owned(),
            name: name.to_owned(),
            title: None,
            description: Some(description.to_owned()),
            mime_type: None,
            annotations: None,
            icons: None,
            meta: None,
        },
        reader,
    )
}

/// The `repo://` templates.
pub(crate) fn templates(inner: &Arc<Inner>) -> Result<Vec<TemplateDef>, DefinitionError> {
    Ok(vec![
        template(
            inner,
            "repo://{owner}/{repo}/contents/{+path}",
            "Repository Content",
            "A file or directory of a repository on its default branch.",
            Some(RefKind::Default),
        )?,
        template(
            inner,
            "repo://{owner}/{repo}/refs/heads/{branch}/contents/{+path}",
            "Repository Content for specific branch",
            "A file or directory of a repository on a branch.",
            Some(RefKind::Branch),
        )?,
        template(
            inner,
            "repo://{owner}/{repo}/refs/tags/{tag}/contents/{+path}",
            "Repository Content for specific tag",
            "A file or directory of a repository at a tag.",
            Some(RefKind::Tag),
        )?,
        template(
            inner,
            "repo://{owner}/{repo}/sha/{sha}/contents/{+path}",
            "Repository Content for specific commit",
            "A file or directory of a repository at a commit.",
            Some(RefKind::Sha),
        )?,
        template(
            inner,
            "repo://{owner}/{repo}/refs/pull/{prNumber}/head/contents/{+path}",
            "Repository Content for specific pull request",
            "A file or directory of a repository at a pull request's head.",
            Some(RefKind::Pull),
        )?,
        template(
            inner,
            "repo://{owner}/{repo}/issues/{issue_number}",
            "Repository Issue",
            "An issue as Markdown (title, state, author, body; hidden HTML and invisible characters removed).",
            None,
        )?,
    ])
}
