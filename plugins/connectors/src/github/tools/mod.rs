//! The tools, under github-mcp-server's names and argument names (its default toolsets:
//! context, repos, issues, pull requests, users). One file per toolset; this one holds the
//! definitions list, the annotations, and the paging helpers they share.
//!
//! Every tool that names a repository passes `owner`/`repo` through
//! [`super::repos::RepoFilter::check`] before anything is sent; searches drop results from
//! repositories the filter refuses.

mod issues;
mod pulls;
mod repos;
mod users;

use super::client::Page;
use super::Inner;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::future::Future;
use std::sync::Arc;
use toolyard::proto::{Tool, ToolAnnotations};
use toolyard::{DefinitionError, HandlerError, Json, ToolDef};

/// What a tool does, as its annotations say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Reads only.
    Read,
    /// Creates something new each call (an issue, a comment, a pull request).
    Create,
    /// Creates, and a second identical call changes nothing more (a branch).
    CreateOnce,
    /// May overwrite what exists (a file, an issue's fields).
    Overwrite,
}

impl Kind {
    fn annotations(self, title: &str) -> ToolAnnotations {
        let (read_only, destructive, idempotent) = match self {
            Kind::Read => (true, false, true),
            Kind::Create => (false, false, false),
            Kind::CreateOnce => (false, false, true),
            Kind::Overwrite => (false, true, false),
        };
        ToolAnnotations {
            title: Some(title.to_owned()),
            read_only_hint: Some(read_only),
            destructive_hint: Some(destructive),
            idempotent_hint: Some(idempotent),
            // GitHub is shared with the world: what is read may come from anyone.
            open_world_hint: Some(true),
        }
    }
}

/// A tool whose handler gets the connector and its typed arguments.
fn def<A, F, Fut>(
    inner: &Arc<Inner>,
    name: &str,
    title: &str,
    description: &str,
    kind: Kind,
    f: F,
) -> Result<ToolDef, DefinitionError>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(Arc<Inner>, A) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, HandlerError>> + Send + 'static,
{
    let tool = Tool {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        input_schema: toolyard::schema_for::<A>(),
        annotations: Some(kind.annotations(title)),
        ..Tool::default()
    };
    let inner = inner.clone();
    ToolDef::from_fn(tool, move |_ctx, a: A| {
        let inner = inner.clone();
        async move { f(inner, a).await.map(Json) }
    })
}

/// Every tool; the writing ones only when `read_only` is off.
pub(crate) fn definitions(
    inner: &Arc<Inner>,
    read_only: bool,
) -> Result<Vec<ToolDef>, DefinitionError> {
    let mut defs = Vec::new();
    defs.extend(users::read(inner)?);
    defs.extend(repos::read(inner)?);
    defs.extend(issues::read(inner)?);
    defs.extend(pulls::read(inner)?);
    if !read_only {
        defs.extend(repos::write(inner)?);
        defs.extend(issues::write(inner)?);
        defs.extend(pulls::write(inner)?);
    }
    Ok(defs)
}

/// The names [`definitions`] gives, writing tools last (for documentation and tests).
#[cfg(test)]
const WRITE_TOOLS: [&str; 5] = [
    "create_or_update_file",
    "create_branch",
    "issue_write",
    "add_issue_comment",
    "create_pull_request",
];

/// `page` and `per_page` query parameters (`perPage` defaults to 30, at most 100).
fn paging(page: Option<u32>, per_page: Option<u32>) -> Vec<(&'static str, String)> {
    vec![
        ("page", page.unwrap_or(1).max(1).to_string()),
        ("per_page", per_page.unwrap_or(30).clamp(1, 100).to_string()),
    ]
}

/// A listing's answer: the shaped (and projected) items, and the next page when there is
/// one.
fn listing(
    page: &Page,
    shape: impl Fn(&Value) -> Value,
    fields: Option<&[String]>,
    allowed: &[&str],
) -> Result<Value, HandlerError> {
    let items: Vec<Value> = page
        .value
        .as_array()
        .map(|a| a.iter().map(&shape).collect())
        .unwrap_or_default();
    let items = super::shape::project(items, fields, allowed)?;
    let mut out = json!({ "items": items });
    if let Some(n) = page.next_page {
        out["next_page"] = json!(n);
    }
    Ok(out)
}

/// A search's answer (`{total_count, incomplete_results, items}` as GitHub and the anchor
/// give it), items from refused repositories dropped, the next page when there is one.
fn search_result(
    inner: &Inner,
    page: &Page,
    repo_of: impl Fn(&Value) -> Option<String>,
    shape: impl Fn(&Value) -> Value,
    fields: Option<&[String]>,
    allowed: &[&str],
) -> Result<Value, HandlerError> {
    let items: Vec<Value> = page.value["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|item| {
                    inner.repos.is_open()
                        || repo_of(item).is_some_and(|full| inner.repos.allows_full_name(&full))
                })
                .map(&shape)
                .collect()
        })
        .unwrap_or_default();
    let items = super::shape::project(items, fields, allowed)?;
    let mut out = json!({
        "total_count": page.value["total_count"],
        "incomplete_results": page.value["incomplete_results"],
        "items": items,
    });
    if let Some(n) = page.next_page {
        out["next_page"] = json!(n);
    }
    Ok(out)
}

/// `owner/name` from an issue search item's `repository_url` (`.../repos/{owner}/{name}`).
fn repo_from_url(url: &str) -> Option<String> {
    let mut parts = url.trim_end_matches('/').rsplit('/');
    let name = parts.next()?;
    let owner = parts.next()?;
    (parts.next()? == "repos").then(|| format!("{owner}/{name}"))
}

/// Adds a qualifier (`is:issue`) to a search query unless it is there already.
fn with_qualifier(query: &str, qualifier: &str) -> String {
    if query
        .split_whitespace()
        .any(|w| w.eq_ignore_ascii_case(qualifier))
    {
        query.to_owned()
    } else {
        format!("{qualifier} {query}")
    }
}

/// Search `sort`/`order` and paging as query parameters.
fn search_query(
    q: String,
    sort: Option<String>,
    order: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
) -> Result<Vec<(&'static str, String)>, HandlerError> {
    if q.trim().is_empty() {
        return Err(HandlerError::invalid_arguments("query is empty"));
    }
    let mut query = vec![("q", q)];
    if let Some(s) = sort {
        query.push(("sort", s));
    }
    if let Some(o) = order {
        query.push(("order", o));
    }
    query.extend(paging(page, per_page));
    Ok(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_search_items_name_their_repository_by_url() {
        assert_eq!(
            repo_from_url("https://api.github.com/repos/org/secret").as_deref(),
            Some("org/secret")
        );
        assert_eq!(
            repo_from_url("https://ghe.example/api/v3/repos/o/r/").as_deref(),
            Some("o/r")
        );
        assert_eq!(repo_from_url("https://x/users/o/r"), None);
    }

    #[test]
    fn qualifiers_are_added_once() {
        assert_eq!(with_qualifier("bug", "is:issue"), "is:issue bug");
        assert_eq!(with_qualifier("bug IS:ISSUE", "is:issue"), "bug IS:ISSUE");
    }

    #[test]
    fn paging_defaults_and_clamps_like_the_anchor() {
        assert_eq!(
            paging(None, None),
            vec![("page", "1".to_owned()), ("per_page", "30".to_owned())]
        );
        assert_eq!(paging(Some(0), Some(1000))[1].1, "100");
    }

    #[test]
    fn write_tools_are_annotated_as_writes() {
        assert_eq!(WRITE_TOOLS.len(), 5);
        let a = Kind::Overwrite.annotations("t");
        assert_eq!(a.read_only_hint, Some(false));
        assert_eq!(a.destructive_hint, Some(true));
        let r = Kind::Read.annotations("t");
        assert_eq!(r.read_only_hint, Some(true));
    }
}
