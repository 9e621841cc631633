//! The pull requests toolset: `pull_request_read` (one tool, a `method` per read),
//! `list_pull_requests`, `search_pull_requests`; writing: `create_pull_request`.

use super::issues::{search_issues_or_pulls, SearchIssuesArgs};
use super::{def, listing, paging, Kind};
use crate::github::{sanitize, shape, Inner};
use reqwest::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use toolyard::{DefinitionError, HandlerError, ToolDef};

/// The read `pull_request_read` performs.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum PullReadMethod {
    /// Get details of a specific pull request.
    Get,
    /// Get the diff of a pull request.
    GetDiff,
    /// Get combined commit status of the head commit.
    GetStatus,
    /// Get the list of files changed.
    GetFiles,
    /// Get the review comments (comments on lines of the diff).
    GetReviewComments,
    /// Get the reviews.
    GetReviews,
    /// Get the comments (the conversation, not review comments).
    GetComments,
    /// Get check runs for the head commit.
    GetCheckRuns,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct PullReadArgs {
    /// Action to specify what pull request data needs to be retrieved from GitHub: get, get_diff, get_status, get_files, get_review_comments, get_reviews, get_comments, get_check_runs.
    method: PullReadMethod,
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Pull request number
    #[serde(rename = "pullNumber")]
    pull_number: u64,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
}

const PULL_FIELDS: [&str; 25] = [
    "number",
    "title",
    "body",
    "state",
    "draft",
    "merged",
    "mergeable_state",
    "html_url",
    "user",
    "labels",
    "assignees",
    "requested_reviewers",
    "merged_by",
    "head",
    "base",
    "additions",
    "deletions",
    "changed_files",
    "commits",
    "comments",
    "created_at",
    "updated_at",
    "closed_at",
    "merged_at",
    "milestone",
];

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum PullState {
    /// Open.
    Open,
    /// Closed (merged or not).
    Closed,
    /// Both.
    All,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub(super) enum PullSort {
    /// By creation.
    #[serde(rename = "created")]
    Created,
    /// By last update.
    #[serde(rename = "updated")]
    Updated,
    /// By comment count.
    #[serde(rename = "popularity")]
    Popularity,
    /// By age, filtering out ones updated in the last month.
    #[serde(rename = "long-running")]
    LongRunning,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ListPullsArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Filter by state
    #[serde(default)]
    state: Option<PullState>,
    /// Filter by head user/org and branch
    #[serde(default)]
    head: Option<String>,
    /// Filter by base branch
    #[serde(default)]
    base: Option<String>,
    /// Sort by
    #[serde(default)]
    sort: Option<PullSort>,
    /// Sort direction
    #[serde(default)]
    direction: Option<super::repos::Order>,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
    /// Subset of fields to return for each pull request. If omitted, all fields are returned; omitting 'body' drops the largest per-result data.
    #[serde(default)]
    fields: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct CreatePullArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// PR title
    title: String,
    /// Branch containing changes, or owner:branch for a fork
    head: String,
    /// Base branch name to merge into, e.g. main
    base: String,
    /// PR description; Markdown supported
    #[serde(default)]
    body: Option<String>,
    /// Create as draft PR
    #[serde(default)]
    draft: Option<bool>,
    /// Allow maintainer edits
    #[serde(default)]
    maintainer_can_modify: Option<bool>,
    /// GitHub usernames or ORG/team-slug team reviewers to request reviews from
    #[serde(default)]
    reviewers: Option<Vec<String>>,
}

fn enum_str<T: Copy>(v: T, f: fn(T) -> &'static str) -> String {
    f(v).to_owned()
}

async fn pull_request_read(inner: Arc<Inner>, a: PullReadArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let repo = format!("/repos/{}/{}", a.owner, a.repo);
    let pull = format!("{repo}/pulls/{}", a.pull_number);
    let pages = paging(a.page, a.per_page);
    let head_sha = || async {
        let pr = inner.client.get(&pull, &[]).await?.value;
        pr["head"]["sha"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| HandlerError::failed("GitHub did not give the pull request's head SHA"))
    };
    match a.method {
        PullReadMethod::Get => Ok(shape::pull(&inner.client.get(&pull, &[]).await?.value)),
        PullReadMethod::GetDiff => {
            let raw = inner
                .client
                .get_raw(&pull, &[], "application/vnd.github.diff")
                .await?;
            let diff = String::from_utf8_lossy(&raw.body);
            Ok(json!({"diff": sanitize::invisible(&diff)}))
        }
        PullReadMethod::GetStatus => {
            let sha = head_sha().await?;
            let status = inner
                .client
                .get(&format!("{repo}/commits/{sha}/status"), &[])
                .await?
                .value;
            let statuses: Vec<Value> = status["statuses"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .map(|x| json!({"context": x["context"], "state": x["state"],
                            "description": shape::text(&x["description"]), "target_url": x["target_url"]}))
                        .collect()
                })
                .unwrap_or_default();
            Ok(
                json!({"state": status["state"], "sha": sha, "total_count": status["total_count"],
                "statuses": statuses}),
            )
        }
        PullReadMethod::GetFiles => {
            let page = inner.client.get(&format!("{pull}/files"), &pages).await?;
            listing(&page, shape::file, None, &[])
        }
        PullReadMethod::GetReviewComments => {
            let page = inner
                .client
                .get(&format!("{pull}/comments"), &pages)
                .await?;
            listing(&page, shape::comment, None, &[])
        }
        PullReadMethod::GetReviews => {
            let page = inner.client.get(&format!("{pull}/reviews"), &pages).await?;
            listing(&page, shape::comment, None, &[])
        }
        PullReadMethod::GetComments => {
            let page = inner
                .client
                .get(&format!("{repo}/issues/{}/comments", a.pull_number), &pages)
                .await?;
            listing(&page, shape::comment, None, &[])
        }
        PullReadMethod::GetCheckRuns => {
            let sha = head_sha().await?;
            let runs = inner
                .client
                .get(&format!("{repo}/commits/{sha}/check-runs"), &pages)
                .await?;
            let list: Vec<Value> = runs.value["check_runs"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .map(|x| {
                            json!({"id": x["id"], "name": x["name"], "status": x["status"],
                            "conclusion": x["conclusion"], "html_url": x["html_url"],
                            "started_at": x["started_at"], "completed_at": x["completed_at"]})
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut out = json!({"total_count": runs.value["total_count"], "check_runs": list});
            if let Some(n) = runs.next_page {
                out["next_page"] = json!(n);
            }
            Ok(out)
        }
    }
}

async fn list_pull_requests(inner: Arc<Inner>, a: ListPullsArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let mut query = Vec::new();
    if let Some(s) = a.state {
        query.push((
            "state",
            enum_str(s, |s| match s {
                PullState::Open => "open",
                PullState::Closed => "closed",
                PullState::All => "all",
            }),
        ));
    }
    if let Some(h) = a.head.filter(|h| !h.is_empty()) {
        query.push(("head", h));
    }
    if let Some(b) = a.base.filter(|b| !b.is_empty()) {
        query.push(("base", b));
    }
    if let Some(s) = a.sort {
        query.push((
            "sort",
            enum_str(s, |s| match s {
                PullSort::Created => "created",
                PullSort::Updated => "updated",
                PullSort::Popularity => "popularity",
                PullSort::LongRunning => "long-running",
            }),
        ));
    }
    if let Some(d) = a.direction {
        query.push(("direction", d.as_str().to_owned()));
    }
    query.extend(paging(a.page, a.per_page));
    let page = inner
        .client
        .get(&format!("/repos/{}/{}/pulls", a.owner, a.repo), &query)
        .await?;
    listing(&page, shape::pull, a.fields.as_deref(), &PULL_FIELDS)
}

async fn search_pull_requests(
    inner: Arc<Inner>,
    a: SearchIssuesArgs,
) -> Result<Value, HandlerError> {
    search_issues_or_pulls(&inner, a, "is:pr").await
}

async fn create_pull_request(inner: Arc<Inner>, a: CreatePullArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let mut body = json!({"title": a.title, "head": a.head, "base": a.base});
    if let Some(b) = a.body {
        body["body"] = Value::String(b);
    }
    if let Some(d) = a.draft {
        body["draft"] = Value::Bool(d);
    }
    if let Some(m) = a.maintainer_can_modify {
        body["maintainer_can_modify"] = Value::Bool(m);
    }
    let repo = format!("/repos/{}/{}", a.owner, a.repo);
    let created = inner
        .client
        .write(Method::POST, &format!("{repo}/pulls"), &body)
        .await?;
    let mut out =
        json!({"id": created["id"], "number": created["number"], "url": created["html_url"]});
    let reviewers = a.reviewers.unwrap_or_default();
    if !reviewers.is_empty() {
        let number = created["number"].as_u64().ok_or_else(|| {
            HandlerError::failed("GitHub created the pull request but did not give its number")
        })?;
        let (teams, users): (Vec<String>, Vec<String>) =
            reviewers.into_iter().partition(|r| r.contains('/'));
        let teams: Vec<String> = teams
            .into_iter()
            .filter_map(|t| t.split_once('/').map(|(_, slug)| slug.to_owned()))
            .collect();
        let requested = inner
            .client
            .write(
                Method::POST,
                &format!("{repo}/pulls/{number}/requested_reviewers"),
                &json!({"reviewers": users, "team_reviewers": teams}),
            )
            .await;
        out["reviewers_requested"] = match requested {
            Ok(_) => Value::Bool(true),
            // The pull request exists: say why the reviewers are missing instead of failing.
            Err(e) => Value::String(format!("not requested: {e}")),
        };
    }
    Ok(out)
}

pub(super) fn read(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![
        def(inner, "pull_request_read", "Get details for a single pull request",
            "Get information on a specific pull request in GitHub repository. method: get, get_diff, get_status, get_files, get_review_comments, get_reviews, get_comments, get_check_runs.",
            Kind::Read, pull_request_read)?,
        def(inner, "list_pull_requests", "List pull requests",
            "List pull requests in a GitHub repository. If the user specifies an author, then DO NOT use this tool and use the search_pull_requests tool instead.",
            Kind::Read, list_pull_requests)?,
        def(inner, "search_pull_requests", "Search pull requests",
            "Search for pull requests in GitHub repositories using issues search syntax already scoped to is:pr.",
            Kind::Read, search_pull_requests)?,
    ])
}

pub(super) fn write(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![def(
        inner,
        "create_pull_request",
        "Open new pull request",
        "Create a new pull request in a GitHub repository.",
        Kind::Create,
        create_pull_request,
    )?])
}
