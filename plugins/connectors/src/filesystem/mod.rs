//! The filesystem connector: the reference filesystem server's tools, confined to the
//! operator's roots (see `roots` for how a path is confined), with a read-only mode that
//! leaves the writing tools out, limits on reads and walks, and files as `file://` resources.

mod edit;
mod errors;
mod list;
mod read;
mod resources;
mod roots;
mod search;
mod walk;
mod watch;
mod write;

pub use watch::{FileWatch, MAX_WATCHED};

use crate::tool::{blocking, confirm, tool, Effect, Text};
use crate::{ConnectorError, FilesystemConfig};
use roots::Roots;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolyard::{Controller, DefinitionError, HandlerError, RequestContext, TemplateDef, ToolDef};

/// The tools that change the filesystem (left out in read-only mode).
pub const WRITE_TOOLS: [&str; 5] = [
    "write_file",
    "edit_file",
    "create_directory",
    "move_file",
    "delete_path",
];

/// The shared state of the tools.
pub(crate) struct Inner {
    pub(crate) roots: Roots,
    pub(crate) max_read_bytes: u64,
    pub(crate) walk: walk::Limits,
    read_only: bool,
    confirm: bool,
    /// This state narrowed by clients' roots, by roots generation (see [`scoped`]).
    scopes: Mutex<HashMap<u64, Arc<Inner>>>,
    /// How often subscribed files are looked at (zero: never).
    watch_interval: Duration,
}

/// The most narrowed views kept (one per client roots list); beyond it they are dropped and
/// asked for again.
const MAX_SCOPES: usize = 256;

impl Inner {
    fn scopes(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Inner>>> {
        self.scopes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This state with other roots.
    fn with_roots(&self, roots: Roots) -> Inner {
        Inner {
            roots,
            max_read_bytes: self.max_read_bytes,
            walk: self.walk,
            read_only: self.read_only,
            confirm: self.confirm,
            scopes: Mutex::default(),
            watch_interval: self.watch_interval,
        }
    }
}

/// The state a request works with: the operator's roots, narrowed to their intersection
/// with the client's when it declares the `roots` capability (legacy generations; a
/// 2026-07-28 caller gets the operator's). The client is asked with `roots/list` once per
/// list: again only after `notifications/roots/list_changed`
/// ([`RequestContext::roots_generation`]). An empty list narrows nothing (the client named
/// no place); a list none of whose roots meets the operator's leaves no directory at all.
/// A client that declares roots and cannot list them gets an error, never the wider set.
pub(crate) async fn scoped(
    base: &Arc<Inner>,
    ctx: &RequestContext,
) -> Result<Arc<Inner>, HandlerError> {
    if ctx.client_capabilities().roots.is_none() {
        return Ok(base.clone());
    }
    let Some(generation) = ctx.roots_generation() else {
        return Ok(base.clone());
    };
    if let Some(hit) = base.scopes().get(&generation) {
        return Ok(hit.clone());
    }
    let listed = ctx.list_roots().await.map_err(|e| {
        HandlerError::failed(format!("the client's roots could not be listed: {e}"))
    })?;
    let scoped = if listed.roots.is_empty() {
        base.clone()
    } else {
        let paths: Vec<PathBuf> = listed
            .roots
            .iter()
            .filter_map(|r| {
                r.uri
                    .strip_prefix("file://localhost")
                    .or_else(|| r.uri.strip_prefix("file://"))
                    .map(|p| PathBuf::from(crate::uri::percent_decode(p)))
            })
            .collect();
        let from = base.clone();
        crate::tool::blocking(move || Ok(Arc::new(from.with_roots(from.roots.narrow(&paths)))))
            .await?
    };
    let mut scopes = base.scopes();
    if scopes.len() >= MAX_SCOPES {
        scopes.clear();
    }
    scopes.insert(generation, scoped.clone());
    Ok(scoped)
}

/// The filesystem connector, a controller of tools.
#[derive(Clone)]
pub struct Filesystem {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filesystem")
            .field("roots", &self.inner.roots.listed())
            .field("read_only", &self.inner.read_only)
            .finish()
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct PathOnly {
    /// The path.
    path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

impl Filesystem {
    /// Opens the roots of `config`; fails if one is not an existing directory.
    pub fn new(config: &FilesystemConfig) -> Result<Self, ConnectorError> {
        let inner = Inner {
            roots: Roots::open(&config.roots)?,
            max_read_bytes: config.max_read_bytes,
            walk: walk::Limits {
                max_depth: config.max_depth.max(1),
                max_entries: config.max_entries.max(1),
                timeout: Duration::from_millis(config.walk_timeout_ms),
            },
            read_only: config.read_only,
            confirm: config.confirm_destructive,
            watch_interval: Duration::from_millis(config.watch_interval_ms),
            scopes: Mutex::default(),
        };
        let fs = Filesystem {
            inner: Arc::new(inner),
        };
        // Every definition is checked once here, so `tools` cannot fail later.
        fs.definitions()?;
        resources::template(&fs.inner)?;
        Ok(fs)
    }

    /// Starts sending `notifications/resources/updated` to `server`'s subscribers of
    /// `file://` URIs when those files change (see `watch`); `None` when
    /// `watch_interval_ms` is 0. Stops when dropped or when the server stops.
    pub fn watch(&self, server: &toolyard::Server) -> Option<FileWatch> {
        if self.inner.watch_interval.is_zero() {
            return None;
        }
        Some(watch::start(
            self.inner.clone(),
            server,
            self.inner.watch_interval,
        ))
    }

    fn definitions(&self) -> Result<Vec<ToolDef>, DefinitionError> {
        let i = &self.inner;
        let mut tools = vec![
            read_tool(i, "read_text_file", READ_TEXT)?,
            read_tool(i, "read_file", "Deprecated: use read_text_file.")?,
            {
                let i = i.clone();
                tool(
                    "read_media_file",
                    "Read an image or audio file. Returns the base64 data and MIME type (other files as an embedded blob resource).",
                    Effect::Read,
                    move |ctx, a: read::PathArgs| {
                        let i = i.clone();
                        async move { let i = scoped(&i, &ctx).await?; blocking(move || read::read_media(&i, &a)).await }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "read_multiple_files",
                    "Read several files at once. Each file's content is shown under its path; a file that fails does not stop the others.",
                    Effect::Read,
                    move |ctx, a: read::ReadManyArgs| {
                        let i = i.clone();
                        async move { let i = scoped(&i, &ctx).await?; blocking(move || read::read_many(&i, &a)).await.map(Text) }
                    },
                )?
            },
            path_tool(
                i,
                "list_directory",
                "List a directory's entries, each prefixed with [FILE] or [DIR].",
                list::list,
            )?,
            {
                let i = i.clone();
                tool(
                    "list_directory_with_sizes",
                    "List a directory's entries with [FILE]/[DIR] prefixes and sizes, sorted by name or size, with totals.",
                    Effect::Read,
                    move |ctx, a: list::SizesArgs| {
                        let i = i.clone();
                        async move { let i = scoped(&i, &ctx).await?; blocking(move || list::list_with_sizes(&i, &a)).await.map(Text) }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "directory_tree",
                    "A recursive tree of a directory as JSON: each entry has name, type (file or directory) and, for directories, children. Depth, entry count and time are limited.",
                    Effect::Read,
                    move |ctx, a: list::TreeArgs| {
                        let i = i.clone();
                        async move { let i = scoped(&i, &ctx).await?; blocking(move || list::tree(&i, &a)).await.map(Text) }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "search_files",
                    "Find files and directories whose path relative to `path` matches a glob (`*.ext` in that directory, `**/*.ext` at any depth). Returns full paths.",
                    Effect::Read,
                    move |ctx, a: search::SearchArgs| {
                        let i = i.clone();
                        async move { let i = scoped(&i, &ctx).await?; blocking(move || search::search(&i, &a)).await.map(Text) }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "grep",
                    "Search file contents for a regular expression under a file or directory. Returns path:line:text for each matching line; binary and oversized files are skipped.",
                    Effect::Read,
                    move |ctx, a: search::GrepArgs| {
                        let i = i.clone();
                        async move { let i = scoped(&i, &ctx).await?; blocking(move || search::grep(&i, &a)).await.map(Text) }
                    },
                )?
            },
            path_tool(
                i,
                "get_file_info",
                "Metadata of a file or directory: size, times, type and permissions.",
                list::info,
            )?,
            {
                let i = i.clone();
                tool(
                    "list_allowed_directories",
                    "The directories this server may access.",
                    Effect::Read,
                    move |ctx, _a: NoArgs| {
                        let i = i.clone();
                        async move {
                            let i = scoped(&i, &ctx).await?;
                            Ok(Text(list::allowed(&i)))
                        }
                    },
                )?
            },
        ];
        if !i.read_only {
            tools.extend(self.write_definitions()?);
        }
        Ok(tools)
    }

    fn write_definitions(&self) -> Result<Vec<ToolDef>, DefinitionError> {
        let i = &self.inner;
        Ok(vec![
            {
                let i = i.clone();
                tool(
                    "write_file",
                    "Create a file or replace its contents entirely. The new contents are written to a temporary file and renamed into place.",
                    Effect::DestructiveIdempotent,
                    move |ctx, a: write::WriteArgs| {
                        let i = i.clone();
                        async move {
                            let i = scoped(&i, &ctx).await?;
                            if i.confirm {
                                confirm(&ctx, format!("write_file {}", a.path)).await?;
                            }
                            blocking(move || write::write(&i, &a)).await.map(Text)
                        }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "edit_file",
                    "Apply text replacements to a file (exact match, or line by line ignoring surrounding whitespace) and return a git-style diff. With dryRun the file is not changed.",
                    Effect::Destructive,
                    move |ctx, a: write::EditArgs| {
                        let i = i.clone();
                        async move {
                            let i = scoped(&i, &ctx).await?;
                            if i.confirm && !a.dry_run {
                                confirm(&ctx, format!("edit_file {}", a.path)).await?;
                            }
                            blocking(move || write::edit_file(&i, &a)).await.map(Text)
                        }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "create_directory",
                    "Create a directory and any missing parents; succeeds if it exists.",
                    Effect::Idempotent,
                    move |ctx, a: PathOnly| {
                        let i = i.clone();
                        async move {
                            let i = scoped(&i, &ctx).await?;
                            blocking(move || write::create_directory(&i, &a.path))
                                .await
                                .map(Text)
                        }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "move_file",
                    "Move or rename a file or directory. Fails if the destination exists.",
                    Effect::Destructive,
                    move |ctx, a: write::MoveArgs| {
                        let i = i.clone();
                        async move {
                            let i = scoped(&i, &ctx).await?;
                            if i.confirm {
                                confirm(
                                    &ctx,
                                    format!("move_file {} -> {}", a.source, a.destination),
                                )
                                .await?;
                            }
                            blocking(move || write::move_file(&i, &a)).await.map(Text)
                        }
                    },
                )?
            },
            {
                let i = i.clone();
                tool(
                    "delete_path",
                    "Delete a file, a symlink (not its target) or an empty directory; with recursive, a directory and everything in it. An allowed root cannot be deleted.",
                    Effect::Destructive,
                    move |ctx, a: write::DeleteArgs| {
                        let i = i.clone();
                        async move {
                            let i = scoped(&i, &ctx).await?;
                            if i.confirm {
                                confirm(&ctx, format!("delete_path {}{}", a.path, if a.recursive { " (recursive)" } else { "" })).await?;
                            }
                            blocking(move || write::delete(&i, &a)).await.map(Text)
                        }
                    },
                )?
            },
        ])
    }
}

const READ_TEXT: &str = "Read a file as text. `head`/`tail` return the first/last N lines; `offset` (1-based line) and `limit` return a window of lines with a header saying which lines of how many. Output is capped by `max_bytes` and the server's limit.";

fn read_tool(i: &Arc<Inner>, name: &str, description: &str) -> Result<ToolDef, DefinitionError> {
    let i = i.clone();
    tool(
        name,
        description,
        Effect::Read,
        move |ctx, a: read::ReadTextArgs| {
            let i = i.clone();
            async move {
                let i = scoped(&i, &ctx).await?;
                blocking(move || read::read_text(&i, &a)).await.map(Text)
            }
        },
    )
}

fn path_tool(
    i: &Arc<Inner>,
    name: &str,
    description: &str,
    f: fn(&Inner, &str) -> Result<String, toolyard::HandlerError>,
) -> Result<ToolDef, DefinitionError> {
    let i = i.clone();
    tool(name, description, Effect::Read, move |ctx, a: PathOnly| {
        let i = i.clone();
        async move {
            let i = scoped(&i, &ctx).await?;
            blocking(move || f(&i, &a.path)).await.map(Text)
        }
    })
}

impl Controller for Filesystem {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        self.definitions().unwrap_or_else(|e| {
            tracing::error!(error = %e, "filesystem connector: a tool definition was refused");
            Vec::new()
        })
    }

    fn templates(self: &Arc<Self>) -> Vec<TemplateDef> {
        match resources::template(&self.inner) {
            Ok(t) => vec![t],
            Err(e) => {
                tracing::error!(error = %e, "filesystem connector: the file:// template was refused");
                Vec::new()
            }
        }
    }
}
