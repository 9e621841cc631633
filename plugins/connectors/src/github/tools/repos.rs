//! The repos toolset: `get_file_contents`, `list_branches`, `list_tags`, `list_commits`,
//! `get_commit`, `search_repositories`, `search_code`; writing: `create_or_update_file`,
//! `create_branch`.

use super::{def, listing, paging, search_query, search_result, Kind};
use crate::github::client::encode_path;
use crate::github::contents::{self, Contents};
use crate::github::{sanitize, shape, Inner};
use base64::Engine as _;
use reqwest::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use toolyard::{DefinitionError, HandlerError, ToolDef};

/// Sort order.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Order {
    /// Ascending.
    Asc,
    /// Descending.
    Desc,
}

impl Order {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Order::Asc => "asc",
            Order::Desc => "desc",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct GetFileContentsArgs {
    /// Repository owner (username or organization)
    owner: String,
    /// Repository name
    repo: String,
    /// Path to file/directory
    #[serde(default = "root")]
    #[schemars(default = "root")]
    path: String,
    /// Accepts optional git refs such as `refs/tags/{tag}`, `refs/heads/{branch}` or `refs/pull/{pr_number}/head`
    #[serde(default, rename = "ref")]
    reference: Option<String>,
    /// Accepts optional commit SHA. If specified, it will be used instead of ref
    #[serde(default)]
    sha: Option<String>,
}

fn root() -> String {
    "/".to_owned()
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct RepoPageArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
}

const COMMIT_FIELDS: [&str; 7] = [
    "sha",
    "html_url",
    "commit",
    "author",
    "committer",
    "stats",
    "files",
];

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ListCommitsArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Commit SHA, branch or tag name to list commits of. If not provided, uses the default branch of the repository. If a commit SHA is provided, will list commits up to that SHA.
    #[serde(default)]
    sha: Option<String>,
    /// Only commits containing this file path will be returned
    #[serde(default)]
    path: Option<String>,
    /// Author username or email address to filter commits by
    #[serde(default)]
    author: Option<String>,
    /// Only commits after this date will be returned (ISO 8601 format: YYYY-MM-DDTHH:MM:SSZ or YYYY-MM-DD)
    #[serde(default)]
    since: Option<String>,
    /// Only commits before this date will be returned (ISO 8601 format: YYYY-MM-DDTHH:MM:SSZ or YYYY-MM-DD)
    #[serde(default)]
    until: Option<String>,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
    /// Subset of commit fields to return for each commit (sha, html_url, commit, author, committer, stats, files). If omitted, all fields are returned.
    #[serde(default)]
    fields: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct GetCommitArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Commit SHA, branch name, or tag name
    sha: String,
    /// Whether to include file diffs and stats in the response. Default is true.
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    include_diff: bool,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub(super) enum RepoSort {
    /// By stars.
    #[serde(rename = "stars")]
    Stars,
    /// By forks.
    #[serde(rename = "forks")]
    Forks,
    /// By issues labelled help-wanted.
    #[serde(rename = "help-wanted-issues")]
    HelpWanted,
    /// By last update.
    #[serde(rename = "updated")]
    Updated,
}

impl RepoSort {
    fn as_str(self) -> &'static str {
        match self {
            RepoSort::Stars => "stars",
            RepoSort::Forks => "forks",
            RepoSort::HelpWanted => "help-wanted-issues",
            RepoSort::Updated => "updated",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SearchRepositoriesArgs {
    /// Repository search query. Examples: 'machine learning in:name stars:>1000 language:python', 'topic:react', 'user:facebook'. Supports advanced search syntax for precise filtering.
    query: String,
    /// Sort repositories by field, defaults to best match
    #[serde(default)]
    sort: Option<RepoSort>,
    /// Sort order
    #[serde(default)]
    order: Option<Order>,
    /// Return minimal repository information (default: true). When false, returns full GitHub API repository objects.
    #[serde(default = "yes")]
    #[schemars(default = "yes")]
    minimal_output: bool,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
}

const CODE_FIELDS: [&str; 5] = ["name", "path", "sha", "repository", "text_matches"];

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SearchCodeArgs {
    /// Search query (GitHub code search REST). Qualifiers: `repo:owner/repo`, `org:`, `user:`, `language:`, `path:`, `filename:`, `extension:`.
    query: String,
    /// Sort field ('indexed' only)
    #[serde(default)]
    sort: Option<String>,
    /// Sort order for results
    #[serde(default)]
    order: Option<Order>,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
    /// Subset of fields to return for each code search result (name, path, sha, repository, text_matches). If omitted, all fields are returned.
    #[serde(default)]
    fields: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct CreateOrUpdateFileArgs {
    /// Repository owner (username or organization)
    owner: String,
    /// Repository name
    repo: String,
    /// Path where to create/update the file
    path: String,
    /// Content of the file
    content: String,
    /// Commit message
    message: String,
    /// Branch to create/update the file in
    branch: String,
    /// The blob SHA of the file being replaced (required when the file exists).
    #[serde(default)]
    sha: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct CreateBranchArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Name for new branch
    branch: String,
    /// Source branch (defaults to repo default)
    #[serde(default)]
    from_branch: Option<String>,
}

async fn get_file_contents(
    inner: Arc<Inner>,
    a: GetFileContentsArgs,
) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let reference = a.sha.as_deref().or(a.reference.as_deref());
    match contents::read(&inner, &a.owner, &a.repo, &a.path, reference).await? {
        Contents::Dir(entries) => Ok(json!({"type": "dir", "path": a.path, "entries": entries})),
        Contents::File { path, sha, bytes } => {
            let size = bytes.len();
            Ok(match contents::as_text(&bytes) {
                Some(text) => json!({"type": "file", "path": path, "sha": sha, "size": size,
                    "encoding": "utf-8", "content": sanitize::invisible(text)}),
                None => json!({"type": "file", "path": path, "sha": sha, "size": size,
                    "encoding": "base64",
                    "content": base64::engine::general_purpose::STANDARD.encode(&bytes)}),
            })
        }
    }
}

async fn list_branches(inner: Arc<Inner>, a: RepoPageArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let page = inner
        .client
        .get(
            &format!("/repos/{}/{}/branches", a.owner, a.repo),
            &paging(a.page, a.per_page),
        )
        .await?;
    listing(
        &page,
        |b| json!({"name": b["name"], "commit": {"sha": b["commit"]["sha"]}, "protected": b["protected"]}),
        None,
        &[],
    )
}

async fn list_tags(inner: Arc<Inner>, a: RepoPageArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let page = inner
        .client
        .get(
            &format!("/repos/{}/{}/tags", a.owner, a.repo),
            &paging(a.page, a.per_page),
        )
        .await?;
    listing(
        &page,
        |t| json!({"name": t["name"], "commit": {"sha": t["commit"]["sha"]}}),
        None,
        &[],
    )
}

async fn list_commits(inner: Arc<Inner>, a: ListCommitsArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let mut query = Vec::new();
    for (k, v) in [
        ("sha", a.sha),
        ("path", a.path),
        ("author", a.author),
        ("since", a.since),
        ("until", a.until),
    ] {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            query.push((k, v));
        }
    }
    query.extend(paging(a.page, a.per_page));
    let page = inner
        .client
        .get(&format!("/repos/{}/{}/commits", a.owner, a.repo), &query)
        .await?;
    listing(
        &page,
        |c| shape::commit(c, false),
        a.fields.as_deref(),
        &COMMIT_FIELDS,
    )
}

async fn get_commit(inner: Arc<Inner>, a: GetCommitArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let sha = encode_path(&a.sha)?;
    if sha.is_empty() {
        return Err(HandlerError::invalid_arguments("sha is empty"));
    }
    let value = inner
        .client
        .get(
            &format!("/repos/{}/{}/commits/{sha}", a.owner, a.repo),
            &paging(a.page, a.per_page),
        )
        .await?
        .value;
    let mut out = shape::commit(&value, a.include_diff);
    if !a.include_diff {
        if let Some(map) = out.as_object_mut() {
            map.remove("stats");
        }
    }
    Ok(out)
}

async fn search_repositories(
    inner: Arc<Inner>,
    a: SearchRepositoriesArgs,
) -> Result<Value, HandlerError> {
    let query = search_query(
        a.query,
        a.sort.map(|s| s.as_str().to_owned()),
        a.order.map(|o| o.as_str().to_owned()),
        a.page,
        a.per_page,
    )?;
    let page = inner.client.get("/search/repositories", &query).await?;
    let minimal = a.minimal_output;
    search_result(
        &inner,
        &page,
        |r| r["full_name"].as_str().map(str::to_owned),
        |r| {
            if minimal {
                shape::repo(r)
            } else {
                let mut full = r.clone();
                full["description"] = shape::text(&r["description"]);
                full
            }
        },
        None,
        &[],
    )
}

async fn search_code(inner: Arc<Inner>, a: SearchCodeArgs) -> Result<Value, HandlerError> {
    let query = search_query(
        a.query,
        a.sort,
        a.order.map(|o| o.as_str().to_owned()),
        a.page,
        a.per_page,
    )?;
    let page = inner.client.get("/search/code", &query).await?;
    search_result(
        &inner,
        &page,
        |c| c["repository"]["full_name"].as_str().map(str::to_owned),
        |c| {
            let mut item = json!({"name": c["name"], "path": c["path"], "sha": c["sha"],
                "repository": c["repository"]["full_name"]});
            if let Some(matches) = c["text_matches"].as_array() {
                item["text_matches"] = Value::Array(
                    matches
                        .iter()
                        .map(|m| {
                            json!({"fragment": m["fragment"].as_str().map(sanitize::invisible),
                            "property": m["property"]})
                        })
                        .collect(),
                );
            }
            item
        },
        a.fields.as_deref(),
        &CODE_FIELDS,
    )
}

async fn create_or_update_file(
    inner: Arc<Inner>,
    a: CreateOrUpdateFileArgs,
) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let path = encode_path(&a.path)?;
    if path.is_empty() {
        return Err(HandlerError::invalid_arguments("path names no file"));
    }
    let mut body = json!({
        "message": a.message,
        "content": base64::engine::general_purpose::STANDARD.encode(a.content.as_bytes()),
        "branch": a.branch,
    });
    if let Some(sha) = a.sha {
        body["sha"] = Value::String(sha);
    }
    let answer = inner
        .client
        .write(
            Method::PUT,
            &format!("/repos/{}/{}/contents/{path}", a.owner, a.repo),
            &body,
        )
        .await?;
    Ok(json!({
        "content": {"name": answer["content"]["name"], "path": answer["content"]["path"],
            "sha": answer["content"]["sha"], "html_url": answer["content"]["html_url"]},
        "commit": {"sha": answer["commit"]["sha"], "html_url": answer["commit"]["html_url"]},
    }))
}

async fn create_branch(inner: Arc<Inner>, a: CreateBranchArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let branch = a.branch.trim();
    if branch.is_empty() || encode_path(branch).is_err() || branch.contains(char::is_whitespace) {
        return Err(HandlerError::invalid_arguments(
            "branch is not a valid branch name",
        ));
    }
    let from = match a.from_branch.filter(|b| !b.trim().is_empty()) {
        Some(b) => b,
        None => inner
            .client
            .get(&format!("/repos/{}/{}", a.owner, a.repo), &[])
            .await?
            .value["default_branch"]
            .as_str()
            .ok_or_else(|| {
                HandlerError::failed("GitHub did not say the repository's default branch")
            })?
            .to_owned(),
    };
    let from_ref = encode_path(&from)?;
    let source = inner
        .client
        .get(
            &format!("/repos/{}/{}/git/ref/heads/{from_ref}", a.owner, a.repo),
            &[],
        )
        .await?
        .value;
    let sha = source["object"]["sha"]
        .as_str()
        .ok_or_else(|| HandlerError::failed(format!("GitHub did not give the SHA of {from}")))?;
    let created = inner
        .client
        .write(
            Method::POST,
            &format!("/repos/{}/{}/git/refs", a.owner, a.repo),
            &json!({"ref": format!("refs/heads/{branch}"), "sha": sha}),
        )
        .await?;
    Ok(json!({"ref": created["ref"], "sha": created["object"]["sha"], "from": from}))
}

pub(super) fn read(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![
        def(inner, "get_file_contents", "Get file or directory contents",
            "Get the contents of a file or directory from a GitHub repository. Text files come back as UTF-8 text (invisible and BiDi control characters removed), binary files as base64.",
            Kind::Read, get_file_contents)?,
        def(inner, "list_branches", "List branches",
            "List branches in a GitHub repository.", Kind::Read, list_branches)?,
        def(inner, "list_tags", "List tags",
            "List git tags in a GitHub repository.", Kind::Read, list_tags)?,
        def(inner, "list_commits", "List commits",
            "Get list of commits of a branch in a GitHub repository. Returns at least 30 results per page by default, but can return more if specified using the perPage parameter (up to 100).",
            Kind::Read, list_commits)?,
        def(inner, "get_commit", "Get commit details",
            "Get details for a commit from a GitHub repository.", Kind::Read, get_commit)?,
        def(inner, "search_repositories", "Search repositories",
            "Find GitHub repositories by name, description, readme, topics, or other metadata.",
            Kind::Read, search_repositories)?,
        def(inner, "search_code", "Search code",
            "Fast and precise code search across GitHub repositories using GitHub's native search engine. Best for finding exact symbols, functions, classes, or specific code patterns.",
            Kind::Read, search_code)?,
    ])
}

pub(super) fn write(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![
        def(inner, "create_or_update_file", "Create or update file",
            "Create or update a single file in a GitHub repository. If updating, you must provide the SHA of the file you want to update.",
            Kind::Overwrite, create_or_update_file)?,
        def(inner, "create_branch", "Create branch",
            "Create a new branch in a GitHub repository.", Kind::CreateOnce, create_branch)?,
    ])
}
