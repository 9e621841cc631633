//! The reading tools: `read_text_file` (whole, `head`, `tail`, or an `offset`/`limit` line
//! window, always under a byte cap), `read_media_file` and `read_multiple_files`. Files are
//! streamed: a window or a head never loads more than the cap, a tail reads from the end.

use super::errors::{failed, invalid, io};
use super::roots::Target;
use super::Inner;
use base64::Engine as _;
use schemars::JsonSchema;
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use toolyard::proto::{CallToolResult, ContentBlock, EmbeddedResource, ResourceContents};
use toolyard::HandlerError;

/// `read_text_file` / `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ReadTextArgs {
    /// The file.
    pub(crate) path: String,
    /// Only the first N lines.
    #[serde(default)]
    pub(crate) head: Option<u64>,
    /// Only the last N lines.
    #[serde(default)]
    pub(crate) tail: Option<u64>,
    /// The first line to return (1 = the first line of the file).
    #[serde(default)]
    pub(crate) offset: Option<u64>,
    /// How many lines to return from `offset`.
    #[serde(default)]
    pub(crate) limit: Option<u64>,
    /// Return at most this many bytes (the server's own cap applies too).
    #[serde(default)]
    pub(crate) max_bytes: Option<u64>,
}

/// `read_media_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct PathArgs {
    /// The path.
    pub(crate) path: String,
}

/// `read_multiple_files`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ReadManyArgs {
    /// The files; a failure on one does not stop the others.
    #[schemars(length(min = 1))]
    pub(crate) paths: Vec<String>,
}

/// Opens a regular file beneath its root.
fn open_file(target: &Target<'_>) -> Result<(cap_std::fs::File, u64), HandlerError> {
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
    Ok((file, meta.len()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `read_text_file`.
pub(crate) fn read_text(inner: &Inner, a: &ReadTextArgs) -> Result<String, HandlerError> {
    if a.head.is_some() && a.tail.is_some() {
        return Err(invalid(
            "Cannot specify both head and tail parameters simultaneously",
        ));
    }
    let windowed = a.offset.is_some() || a.limit.is_some();
    if windowed && (a.head.is_some() || a.tail.is_some()) {
        return Err(invalid("offset/limit cannot be combined with head or tail"));
    }
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    let cap = a
        .max_bytes
        .map_or(inner.max_read_bytes, |m| m.min(inner.max_read_bytes));
    let (file, size) = open_file(&target)?;
    let fail = |e: std::io::Error| io(&shown, &e);
    if let Some(n) = a.head {
        let (lines, truncated) = head(file, n, cap).map_err(fail)?;
        return Ok(with_cap_note(lines, truncated, cap));
    }
    if let Some(n) = a.tail {
        let (lines, truncated) = tail(file, size, n, cap).map_err(fail)?;
        return Ok(with_cap_note(lines, truncated, cap));
    }
    if windowed {
        let first = a.offset.unwrap_or(1).max(1);
        let count = a.limit.unwrap_or(u64::MAX);
        return window(file, first, count, cap).map_err(fail);
    }
    let mut buf = Vec::new();
    file.take(cap).read_to_end(&mut buf).map_err(fail)?;
    let mut out = text(&buf);
    if size > cap {
        out.push_str(&format!(
            "\n[truncated: showing {cap} of {size} bytes; read the rest with offset/limit]"
        ));
    }
    Ok(out)
}

fn with_cap_note(mut out: String, truncated: bool, cap: u64) -> String {
    if truncated {
        out.push_str(&format!("\n[truncated at {cap} bytes]"));
    }
    out
}

/// A line without its terminator.
fn strip_eol(line: &mut Vec<u8>) {
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
}

/// The first `n` lines, joined by `\n`, and whether the cap cut them.
fn head(file: cap_std::fs::File, n: u64, cap: u64) -> std::io::Result<(String, bool)> {
    let mut reader = BufReader::new(file);
    let mut out: Vec<u8> = Vec::new();
    let mut line = Vec::new();
    for i in 0..n {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        strip_eol(&mut line);
        if i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(&line);
        if out.len() as u64 > cap {
            out.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
            return Ok((text(&out), true));
        }
    }
    Ok((text(&out), false))
}

/// The last `n` lines, read backwards from the end in blocks.
fn tail(
    mut file: cap_std::fs::File,
    size: u64,
    n: u64,
    cap: u64,
) -> std::io::Result<(String, bool)> {
    if n == 0 || size == 0 {
        return Ok((String::new(), false));
    }
    const BLOCK: u64 = 64 * 1024;
    let mut end = size;
    let mut buf: Vec<u8> = Vec::new();
    // A final newline ends the last line; it does not start an empty one.
    let mut newlines_needed = n;
    let mut truncated = false;
    loop {
        let start = end.saturating_sub(BLOCK);
        let len = usize::try_from(end - start).unwrap_or(0);
        let mut block = vec![0u8; len];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block)?;
        block.extend_from_slice(&buf);
        buf = block;
        end = start;
        let trailing = usize::from(buf.last() == Some(&b'\n'));
        let body = &buf[..buf.len() - trailing];
        let found = body.iter().filter(|b| **b == b'\n').count() as u64;
        if found >= newlines_needed || start == 0 {
            break;
        }
        if buf.len() as u64 > cap {
            truncated = true;
            break;
        }
    }
    newlines_needed = n;
    let trailing = usize::from(buf.last() == Some(&b'\n'));
    let body = &buf[..buf.len() - trailing];
    let mut from = 0;
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == newlines_needed {
                from = i + 1;
                break;
            }
        }
    }
    let mut slice = &body[from..];
    if slice.len() as u64 > cap {
        let cut = slice.len() - usize::try_from(cap).unwrap_or(slice.len());
        slice = &slice[cut..];
        truncated = true;
    }
    let out = text(slice).replace("\r\n", "\n");
    Ok((out, truncated))
}

/// Lines `first ..< first + count` (1-based), with a header that says which of how many.
fn window(file: cap_std::fs::File, first: u64, count: u64, cap: u64) -> std::io::Result<String> {
    let mut reader = BufReader::new(file);
    let mut out: Vec<u8> = Vec::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut last = 0u64;
    let mut truncated = false;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        if number < first || number - first >= count || truncated {
            continue;
        }
        strip_eol(&mut line);
        if (out.len() + line.len() + 1) as u64 > cap {
            truncated = true;
            continue;
        }
        if last != 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(&line);
        last = number;
    }
    let header = if last == 0 {
        format!("[no lines from line {first}; the file has {number} lines]")
    } else {
        format!("[showing lines {first}-{last} of {number}]")
    };
    let mut result = format!("{header}\n{}", text(&out));
    if truncated {
        result.push_str(&format!(
            "\n[truncated at {cap} bytes; continue with offset={}]",
            last + 1
        ));
    }
    Ok(result)
}

/// The MIME type of a media file, by extension.
pub(crate) fn mime_of(path: &str) -> &'static str {
    let ext = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" => "image/bmp",
        "svg" => "image/svg+xml",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "ogg" => "audio/ogg",
        "flac" => "audio/flac",
        _ => "application/octet-stream",
    }
}

/// `read_media_file`: an image or audio block, or an embedded blob resource.
pub(crate) fn read_media(inner: &Inner, a: &PathArgs) -> Result<CallToolResult, HandlerError> {
    let target = inner.roots.resolve(&a.path)?;
    let shown = target.shown();
    let (file, size) = open_file(&target)?;
    if size > inner.max_read_bytes {
        return Err(failed(format!(
            "{shown} is {size} bytes, over the limit of {} bytes",
            inner.max_read_bytes
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(inner.max_read_bytes)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&shown, &e))?;
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let mime = mime_of(&shown);
    let block = if mime.starts_with("image/") {
        ContentBlock::image(data, mime)
    } else if mime.starts_with("audio/") {
        ContentBlock::audio(data, mime)
    } else {
        ContentBlock::Resource(EmbeddedResource::new(ResourceContents::blob(
            format!("file://{shown}"),
            Some(mime.to_owned()),
            data,
        )))
    };
    Ok(CallToolResult::new(vec![block]))
}

/// `read_multiple_files`: each file's text under its path, or its error.
pub(crate) fn read_many(inner: &Inner, a: &ReadManyArgs) -> Result<String, HandlerError> {
    if a.paths.is_empty() {
        return Err(invalid("paths: at least one path is needed"));
    }
    let parts: Vec<String> = a
        .paths
        .iter()
        .map(|p| {
            let args = ReadTextArgs {
                path: p.clone(),
                head: None,
                tail: None,
                offset: None,
                limit: None,
                max_bytes: None,
            };
            match read_text(inner, &args) {
                Ok(content) => format!("{p}:\n{content}\n"),
                Err(e) => format!("{p}: Error - {e}"),
            }
        })
        .collect();
    Ok(parts.join("\n---\n"))
}
