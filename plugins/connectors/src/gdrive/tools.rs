//! The tools, under the names and argument names of Google's hosted Drive MCP server:
//! `search_files`, `list_recent_files`, `get_file_metadata`, `read_file_content` and
//! `download_file_content`. Lists page with an opaque `cursor` (Drive's `nextPageToken`).

use super::client::{File, ListRequest};
use super::content::{self, Format};
use super::{query, Inner};
use crate::tool::{tool, Effect};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use toolyard::{DefinitionError, HandlerError, Json, ToolDef};

/// The most results one page may have.
const MAX_PAGE: u32 = 100;

#[derive(Debug, Deserialize, JsonSchema)]
struct SearchArgs {
    /// Free text (searched in names and contents), or a Drive query expression such as
    /// `name contains 'plan' and modifiedTime > '2024-01-01'` or `'FOLDER_ID' in parents`:
    /// a query starting with a field and an operator, `'…' in`, `not ` or `(` is used as is.
    #[serde(default)]
    query: String,
    /// Results per page (1-100; default the connector's).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    page_size: Option<u32>,
    /// `next_cursor` of a previous answer, for the next page (same query).
    #[serde(default)]
    cursor: Option<String>,
    /// Only files in this shared drive.
    #[serde(default)]
    drive_id: Option<String>,
    /// Only files of this MIME type (e.g. `application/vnd.google-apps.document`).
    #[serde(default)]
    mime_type: Option<String>,
    /// Sort keys, e.g. `modifiedTime desc` or `name`.
    #[serde(default)]
    order_by: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct RecentArgs {
    /// Results per page (1-100; default the connector's).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    page_size: Option<u32>,
    /// `next_cursor` of a previous answer, for the next page.
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct FileArgs {
    /// The file's id (from search_files).
    file_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ReadArgs {
    /// The file's id (from search_files). Shortcuts are followed.
    file_id: String,
    /// `markdown` (Docs, the default), `text` (Docs, Slides, text files) or `csv` (Sheets).
    #[serde(default)]
    format: Option<Format>,
    /// The byte offset to start at (`next_offset` of a previous answer); default 0.
    #[serde(default)]
    offset: Option<u64>,
    /// The most bytes of text to return; default 100,000 (at most the connector's max_bytes).
    #[serde(default)]
    #[schemars(range(min = 1))]
    max_length: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct DownloadArgs {
    /// The file's id (from search_files). Shortcuts are followed.
    file_id: String,
    /// For Google Docs, Sheets, Slides and Drawings: the format to export to (e.g.
    /// `application/pdf`, `text/csv`, `image/png`).
    #[serde(default, alias = "exportMimeType")]
    export_mime_type: Option<String>,
}

/// A page of files.
#[derive(Debug, Serialize, JsonSchema)]
struct Files {
    /// The files, with ids to pass to the other tools.
    files: Vec<File>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    /// Drive did not search every corpus (results may be missing).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    incomplete_search: bool,
}

/// Metadata of a file, and of the shortcut that led to it.
#[derive(Debug, Serialize, JsonSchema)]
struct Metadata {
    /// The file (the target, when `file_id` was a shortcut).
    file: File,
    /// The shortcut `file_id` named, if it was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    shortcut: Option<File>,
}

fn page_size(inner: &Inner, asked: Option<u32>) -> u32 {
    asked.unwrap_or(inner.page_size).clamp(1, MAX_PAGE)
}

fn not_blank(name: &str, value: Option<String>) -> Result<Option<String>, HandlerError> {
    match value {
        Some(v) if v.trim().is_empty() => {
            Err(HandlerError::invalid_arguments(format!("{name} is empty")))
        }
        other => Ok(other),
    }
}

impl Inner {
    async fn search(&self, a: SearchArgs) -> Result<Files, HandlerError> {
        let q = query::build(&a.query, a.mime_type.as_deref())
            .map_err(HandlerError::invalid_arguments)?;
        if let Some(order) = &a.order_by {
            query::check_order_by(order).map_err(HandlerError::invalid_arguments)?;
        }
        let request = ListRequest {
            q,
            page_size: page_size(self, a.page_size),
            page_token: not_blank("cursor", a.cursor)?,
            drive_id: not_blank("drive_id", a.drive_id)?,
            order_by: a.order_by,
        };
        self.page(&request).await
    }

    async fn recent(&self, a: RecentArgs) -> Result<Files, HandlerError> {
        let request = ListRequest {
            q: "trashed = false".into(),
            page_size: page_size(self, a.page_size),
            page_token: not_blank("cursor", a.cursor)?,
            drive_id: None,
            order_by: Some("recency desc".into()),
        };
        self.page(&request).await
    }

    async fn page(&self, request: &ListRequest) -> Result<Files, HandlerError> {
        let list = self.drive.list(request).await?;
        Ok(Files {
            files: list.files,
            next_cursor: list.next_page_token.filter(|t| !t.is_empty()),
            incomplete_search: list.incomplete_search,
        })
    }

    async fn metadata(&self, a: FileArgs) -> Result<Metadata, HandlerError> {
        let (file, shortcut) = self.drive.resolve(a.file_id.trim()).await?;
        Ok(Metadata { file, shortcut })
    }
}

/// The connector's tools over `inner`.
pub(crate) fn definitions(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    let mut tools = Vec::new();
    let i = inner.clone();
    tools.push(tool(
        "search_files",
        "Search Google Drive (shared drives included) by free text or a Drive query expression. Returns files with id, name, mimeType and modifiedTime; pass next_cursor as cursor for more.",
        Effect::Read,
        move |_ctx, a: SearchArgs| {
            let i = i.clone();
            async move { i.search(a).await.map(Json) }
        },
    )?);
    let i = inner.clone();
    tools.push(tool(
        "list_recent_files",
        "List the most recently used files in Google Drive, newest first; pass next_cursor as cursor for more.",
        Effect::Read,
        move |_ctx, a: RecentArgs| {
            let i = i.clone();
            async move { i.recent(a).await.map(Json) }
        },
    )?);
    let i = inner.clone();
    tools.push(tool(
        "get_file_metadata",
        "Get a Google Drive file's metadata (name, type, size, owners, folders, link); a shortcut is followed to its target.",
        Effect::Read,
        move |_ctx, a: FileArgs| {
            let i = i.clone();
            async move { i.metadata(a).await.map(Json) }
        },
    )?);
    let i = inner.clone();
    tools.push(tool(
        "read_file_content",
        "Read a Google Drive file as text: Docs as Markdown, Sheets as CSV, Slides as text, text files as they are. Long files come in windows: pass next_offset as offset for more.",
        Effect::Read,
        move |_ctx, a: ReadArgs| {
            let i = i.clone();
            async move {
                content::read(
                    &i,
                    a.file_id.trim(),
                    a.format,
                    a.offset.unwrap_or(0),
                    a.max_length,
                )
                .await
            }
        },
    )?);
    let i = inner.clone();
    tools.push(tool(
        "download_file_content",
        "Download a Google Drive file's bytes as a base64 blob with its MIME type (Google Docs, Sheets, Slides and Drawings need export_mime_type). Prefer read_file_content for text.",
        Effect::Read,
        move |_ctx, a: DownloadArgs| {
            let i = i.clone();
            async move {
                let export = not_blank("export_mime_type", a.export_mime_type)?;
                content::download(&i, a.file_id.trim(), export.as_deref()).await
            }
        },
    )?);
    Ok(tools)
}
