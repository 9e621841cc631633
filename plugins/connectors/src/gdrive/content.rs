//! A file's content: what `read_file_content`, `download_file_content` and the
//! `gdrive:///{id}` resource return.
//!
//! Google Docs are exported as Markdown (or plain text), Sheets as CSV, Slides as plain
//! text; other text files are read with `alt=media` in byte windows (`offset`,
//! `max_length`) fetched with an HTTP `Range`, cut on UTF-8 character boundaries, with the
//! next offset to continue from. An export has no ranges: it is read whole (within
//! `max_bytes`) and windowed here. Drive refuses exports over 10 MB
//! (`exportSizeLimitExceeded`): a Doc then falls back to plain text, which is often much
//! smaller, and anything else is a clear error. Downloads are capped by `max_bytes` before
//! a byte is fetched when Drive tells the size.

use super::client::{DriveError, File, SHORTCUT};
use super::Inner;
use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolyard::proto::{CallToolResult, ContentBlock, ResourceContents};
use toolyard::{HandlerError, IntoCallToolResult};

const DOC: &str = "application/vnd.google-apps.document";
const SHEET: &str = "application/vnd.google-apps.spreadsheet";
const SLIDES: &str = "application/vnd.google-apps.presentation";
const DRAWING: &str = "application/vnd.google-apps.drawing";
const FOLDER: &str = "application/vnd.google-apps.folder";
const GOOGLE: &str = "application/vnd.google-apps.";

/// The text rendering asked of `read_file_content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Format {
    /// Markdown (Google Docs).
    Markdown,
    /// Plain text (Docs, Slides, text files).
    Text,
    /// CSV (Sheets: the first sheet).
    Csv,
}

/// How a file's text is had.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// `files.export` in this MIME type, then the fallback on the 10 MB limit.
    Export(&'static str, Option<&'static str>),
    /// `alt=media`, with ranges.
    Media,
}

/// Whether a MIME type is text that reads as UTF-8.
pub(crate) fn is_text(mime: &str) -> bool {
    let mime = mime.split(';').next().unwrap_or_default().trim();
    mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/sql"
                | "application/x-sh"
                | "application/ld+json"
        )
}

/// How `file` is read as text in `format`, or why it cannot be.
fn plan(file: &File, format: Option<Format>) -> Result<Plan, HandlerError> {
    let mime = file.mime_type.as_str();
    let wrong = |allowed: &str| {
        HandlerError::invalid_arguments(format!(
            "`{}` is a {} and reads as {allowed}",
            file.name,
            kind(mime)
        ))
    };
    match mime {
        DOC => match format {
            None | Some(Format::Markdown) => Ok(Plan::Export("text/markdown", Some("text/plain"))),
            Some(Format::Text) => Ok(Plan::Export("text/plain", None)),
            Some(Format::Csv) => Err(wrong("markdown or text")),
        },
        SHEET => match format {
            None | Some(Format::Csv) => Ok(Plan::Export("text/csv", None)),
            Some(_) => Err(wrong("csv (the first sheet)")),
        },
        SLIDES => match format {
            None | Some(Format::Text) => Ok(Plan::Export("text/plain", None)),
            Some(_) => Err(wrong("text")),
        },
        FOLDER => Err(HandlerError::failed(format!(
            "`{}` is a folder: list it with search_files(query: \"'{}' in parents\")",
            file.name, file.id
        ))),
        DRAWING => Err(HandlerError::failed(format!(
            "`{}` is a Google Drawing, not text: download_file_content with export_mime_type \"image/png\" returns it as an image",
            file.name
        ))),
        m if m.starts_with(GOOGLE) => Err(HandlerError::failed(format!(
            "`{}` is a {} ({m}), which Drive cannot export as text",
            file.name,
            kind(m)
        ))),
        m if is_text(m) => Ok(Plan::Media),
        m => Err(HandlerError::failed(format!(
            "`{}` is {m}, not text: download_file_content returns its bytes",
            file.name
        ))),
    }
}

/// A MIME type in words.
fn kind(mime: &str) -> &'static str {
    match mime {
        DOC => "Google Doc",
        SHEET => "Google Sheet",
        SLIDES => "Google Slides presentation",
        DRAWING => "Google Drawing",
        FOLDER => "folder",
        _ if mime.starts_with(GOOGLE) => "Google Workspace file",
        _ => "file",
    }
}

/// `read_file_content`'s answer: the text and where it sits in the whole.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileContent {
    /// The file read (the target, when `file_id` was a shortcut).
    pub file_id: String,
    /// Its name.
    pub name: String,
    /// Its MIME type.
    pub mime_type: String,
    /// The MIME type Drive exported it as (Google Docs, Sheets, Slides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exported_as: Option<String>,
    /// The shortcut that was followed, if `file_id` was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via_shortcut: Option<String>,
    /// The byte offset this text starts at.
    pub offset: u64,
    /// Pass as `offset` for the rest; absent when this is the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// The whole text's size in bytes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Something to know about how this was read (a fallback taken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The text.
    pub content: String,
}

impl IntoCallToolResult for FileContent {
    fn into_call_tool_result(self) -> CallToolResult {
        let mut text = self.content.clone();
        if let Some(next) = self.next_offset {
            let total = self
                .total_bytes
                .map(|t| format!(" of {t}"))
                .unwrap_or_default();
            text.push_str(&format!(
                "\n\n[truncated: bytes {}-{next}{total} shown; call again with offset={next} for more]",
                self.offset
            ));
        }
        if let Some(note) = &self.note {
            text.push_str(&format!("\n\n[{note}]"));
        }
        let mut result = CallToolResult::text(text);
        result.structured_content = serde_json::to_value(&self).ok();
        result
    }
}

/// The text of `chunk` (bytes from a UTF-8 text) without a character cut at its start or,
/// unless `at_end`, at its end: `(bytes skipped at the start, text, bytes consumed)`.
pub(crate) fn utf8_window(chunk: &[u8], at_end: bool) -> (usize, String, usize) {
    let skip = chunk
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count();
    let rest = &chunk[skip..];
    let mut cut = rest.len();
    if !at_end {
        for i in (rest.len().saturating_sub(4)..rest.len()).rev() {
            let b = rest[i];
            if (b & 0xC0) == 0x80 {
                continue;
            }
            if b >= 0xC0 {
                let need = if b >= 0xF0 {
                    4
                } else if b >= 0xE0 {
                    3
                } else {
                    2
                };
                if rest.len() - i < need {
                    cut = i;
                }
            }
            break;
        }
        if cut == 0 {
            cut = rest.len();
        }
    }
    let text = String::from_utf8_lossy(&rest[..cut]).into_owned();
    (skip, text, skip + cut)
}

/// `max_length` as the connector allows it.
fn window_len(inner: &Inner, max_length: Option<u64>) -> u64 {
    max_length
        .unwrap_or(super::DEFAULT_MAX_LENGTH)
        .clamp(1, inner.max_bytes)
}

/// `read_file_content`.
pub(crate) async fn read(
    inner: &Inner,
    file_id: &str,
    format: Option<Format>,
    offset: u64,
    max_length: Option<u64>,
) -> Result<FileContent, HandlerError> {
    let (file, shortcut) = inner.drive.resolve(file_id).await?;
    let plan = plan(&file, format)?;
    let len = window_len(inner, max_length);
    let mut content = FileContent {
        file_id: file.id.clone(),
        name: file.name.clone(),
        mime_type: file.mime_type.clone(),
        exported_as: None,
        via_shortcut: shortcut.map(|s| s.id),
        offset,
        next_offset: None,
        total_bytes: None,
        note: None,
        content: String::new(),
    };
    let body = match plan {
        Plan::Export(mime, fallback) => {
            let reply = match (inner.drive.export(&file.id, mime).await, fallback) {
                (Err(DriveError::ExportTooLarge { .. }), Some(fallback)) => {
                    content.note = Some(format!(
                        "the {mime} export is over Drive's 10 MB export limit; exported as {fallback} instead"
                    ));
                    content.exported_as = Some(fallback.to_owned());
                    inner.drive.export(&file.id, fallback).await
                }
                (other, _) => {
                    content.exported_as = Some(mime.to_owned());
                    other
                }
            }
            .map_err(|e| export_error(e, inner.max_bytes))?;
            reply.body
        }
        Plan::Media => {
            let reply = match inner
                .drive
                .media(&file.id, Some((offset, offset + len - 1)))
                .await
            {
                Err(DriveError::PastEnd) => {
                    content.total_bytes = file.bytes();
                    return Ok(content);
                }
                other => other?,
            };
            if reply.status.as_u16() == 206 {
                let total = reply
                    .header("content-range")
                    .and_then(|r| r.rsplit('/').next())
                    .and_then(|t| t.parse::<u64>().ok())
                    .or_else(|| file.bytes());
                let got = reply.body.len() as u64;
                let at_end = match total {
                    Some(t) => offset + got >= t,
                    None => got < len,
                };
                let (_, text, used) = utf8_window(&reply.body, at_end);
                content.total_bytes = total;
                content.next_offset = (!at_end).then_some(offset + used as u64);
                content.content = text;
                return Ok(content);
            }
            // The range was ignored: the whole file came back.
            reply.body
        }
    };
    let total = body.len() as u64;
    content.total_bytes = Some(total);
    if offset >= total {
        return Ok(content);
    }
    let start = offset as usize;
    let end = (offset + len).min(total) as usize;
    let at_end = end as u64 == total;
    let (_, text, used) = utf8_window(&body[start..end], at_end);
    content.next_offset = (!at_end).then_some(offset + used as u64);
    content.content = text;
    Ok(content)
}

/// An export's error in words that say what to do.
fn export_error(e: DriveError, max_bytes: u64) -> HandlerError {
    match e {
        DriveError::ExportTooLarge { mime } => HandlerError::failed(format!(
            "Google Drive cannot export this file as {mime}: Drive exports at most 10 MB (exportSizeLimitExceeded). Split the document in Google Drive, or open it there"
        )),
        DriveError::Api(crate::http::ApiError::TooLarge { .. }) => HandlerError::failed(format!(
            "the export is larger than this connector's max_bytes ({max_bytes} bytes); exports cannot be read in ranges, so raise `max_bytes` to read it"
        )),
        other => other.into(),
    }
}

/// The bytes of `file` (exported as `export` when Google-native), within `max_bytes`.
async fn bytes_of(
    inner: &Inner,
    file: &File,
    export: Option<&str>,
) -> Result<(Vec<u8>, String), HandlerError> {
    if file.mime_type.starts_with(GOOGLE) {
        let Some(mime) = export else {
            return Err(HandlerError::invalid_arguments(format!(
                "`{}` is a {}: give export_mime_type (e.g. application/pdf, text/plain, text/csv, image/png, or an Office type such as application/vnd.openxmlformats-officedocument.wordprocessingml.document)",
                file.name,
                kind(&file.mime_type)
            )));
        };
        let reply = inner
            .drive
            .export(&file.id, mime)
            .await
            .map_err(|e| export_error(e, inner.max_bytes))?;
        return Ok((reply.body, mime.to_owned()));
    }
    if let Some(size) = file.bytes().filter(|s| *s > inner.max_bytes) {
        return Err(HandlerError::failed(format!(
            "`{}` is {size} bytes, over this connector's max_bytes ({} bytes); a text file can be read in windows with read_file_content(offset, max_length)",
            file.name, inner.max_bytes
        )));
    }
    let reply = inner.drive.media(&file.id, None).await?;
    Ok((reply.body, file.mime_type.clone()))
}

/// `download_file_content`: the bytes as an embedded blob resource with their MIME type.
pub(crate) async fn download(
    inner: &Inner,
    file_id: &str,
    export: Option<&str>,
) -> Result<CallToolResult, HandlerError> {
    let (file, _) = inner.drive.resolve(file_id).await?;
    if file.mime_type == FOLDER {
        return Err(HandlerError::failed(format!(
            "`{}` is a folder, which has no content",
            file.name
        )));
    }
    let (bytes, mime) = bytes_of(inner, &file, export).await?;
    let summary = format!("{} ({mime}, {} bytes)", file.name, bytes.len());
    let blob = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(CallToolResult::new(vec![
        ContentBlock::text(summary),
        ContentBlock::resource(ResourceContents::blob(
            super::uri(&file.id),
            Some(mime),
            blob,
        )),
    ]))
}

/// The `gdrive:///{id}` resource: Docs as Markdown, Sheets as CSV, Slides as text, Drawings
/// as PNG, text files as text, anything else as a base64 blob.
pub(crate) async fn resource(
    inner: &Inner,
    uri: &str,
    file_id: &str,
) -> Result<Vec<ResourceContents>, HandlerError> {
    let (file, _) = inner.drive.resolve(file_id).await?;
    let export = match file.mime_type.as_str() {
        DOC => Some("text/markdown"),
        SHEET => Some("text/csv"),
        SLIDES => Some("text/plain"),
        DRAWING => Some("image/png"),
        FOLDER | SHORTCUT => {
            return Err(HandlerError::failed(format!(
                "`{}` is a {}, which has no content",
                file.name,
                kind(&file.mime_type)
            )))
        }
        m if m.starts_with(GOOGLE) => {
            return Err(HandlerError::failed(format!(
                "`{}` is a {m}, which Drive cannot export",
                file.name
            )))
        }
        _ => None,
    };
    let (bytes, mime) = bytes_of(inner, &file, export).await?;
    if is_text(&mime) {
        if let Ok(text) = String::from_utf8(bytes.clone()) {
            return Ok(vec![ResourceContents::text(uri, Some(mime), text)]);
        }
    }
    let blob = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(vec![ResourceContents::blob(uri, Some(mime), blob)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mime: &str) -> File {
        File {
            id: "x".into(),
            name: "n".into(),
            mime_type: mime.into(),
            ..File::default()
        }
    }

    #[test]
    fn workspace_files_export_as_markdown_csv_and_text() {
        assert_eq!(
            plan(&file(DOC), None).unwrap(),
            Plan::Export("text/markdown", Some("text/plain"))
        );
        assert_eq!(
            plan(&file(DOC), Some(Format::Text)).unwrap(),
            Plan::Export("text/plain", None)
        );
        assert_eq!(
            plan(&file(SHEET), None).unwrap(),
            Plan::Export("text/csv", None)
        );
        assert_eq!(
            plan(&file(SLIDES), None).unwrap(),
            Plan::Export("text/plain", None)
        );
        assert!(plan(&file(SHEET), Some(Format::Markdown)).is_err());
        assert_eq!(plan(&file("text/plain"), None).unwrap(), Plan::Media);
        assert_eq!(plan(&file("application/json"), None).unwrap(), Plan::Media);
        assert!(plan(&file("application/pdf"), None).is_err());
        assert!(plan(&file(FOLDER), None).is_err());
    }

    #[test]
    fn a_window_never_cuts_a_character() {
        let text = "aé€😀b".as_bytes(); // 1 + 2 + 3 + 4 + 1 bytes
                                        // Ends inside 😀: the partial character is left for the next window.
        let (skip, t, used) = utf8_window(&text[..8], false);
        assert_eq!((skip, t.as_str(), used), (0, "aé€", 6));
        // Starts inside é: the continuation byte is skipped.
        let (skip, t, used) = utf8_window(&text[2..], true);
        assert_eq!((skip, t.as_str(), used), (1, "€😀b", 9));
        // A window too small for one character still moves on.
        let (_, t, used) = utf8_window(&text[6..7], false);
        assert_eq!(used, 1);
        assert!(!t.is_empty());
    }
}
