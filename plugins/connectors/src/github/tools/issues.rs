//! The issues toolset: `issue_read` (one tool, a `method` per read), `list_issues` (over
//! GraphQL with cursor pagination, as the anchor does), `search_issues`; writing:
//! `issue_write` (`create` / `update`) and `add_issue_comment` (a comment and/or a
//! reaction).

use super::{
    def, listing, paging, repo_from_url, search_query, search_result, with_qualifier, Kind,
};
use crate::github::{shape, Inner};
use reqwest::Method;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use toolyard::{DefinitionError, HandlerError, ToolDef};

/// The read `issue_read` performs.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum IssueReadMethod {
    /// Get issue details.
    Get,
    /// Get issue comments.
    GetComments,
    /// Get sub-issues (children) of the issue.
    GetSubIssues,
    /// Get the parent issue, if this issue is a sub-issue of another.
    GetParent,
    /// Get labels assigned to the issue.
    GetLabels,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct IssueReadArgs {
    /// The read operation to perform on a single issue: get, get_comments, get_sub_issues, get_parent, get_labels.
    method: IssueReadMethod,
    /// The owner of the repository
    owner: String,
    /// The name of the repository
    repo: String,
    /// The number of the issue
    issue_number: u64,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
}

const ISSUE_FIELDS: [&str; 10] = [
    "number",
    "title",
    "body",
    "state",
    "user",
    "labels",
    "assignees",
    "comments",
    "created_at",
    "updated_at",
];

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub(super) enum IssueStateFilter {
    /// Open issues.
    #[serde(rename = "OPEN")]
    Open,
    /// Closed issues.
    #[serde(rename = "CLOSED")]
    Closed,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub(super) enum IssueOrderField {
    /// By creation time.
    #[serde(rename = "CREATED_AT")]
    CreatedAt,
    /// By last update.
    #[serde(rename = "UPDATED_AT")]
    UpdatedAt,
    /// By number of comments.
    #[serde(rename = "COMMENTS")]
    Comments,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub(super) enum Direction {
    /// Ascending.
    #[serde(rename = "ASC")]
    Asc,
    /// Descending.
    #[serde(rename = "DESC")]
    Desc,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ListIssuesArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Filter by state, by default both open and closed issues are returned when not provided
    #[serde(default)]
    state: Option<IssueStateFilter>,
    /// Filter by labels
    #[serde(default)]
    labels: Option<Vec<String>>,
    /// Order issues by field. If provided, the 'direction' also needs to be provided.
    #[serde(default, rename = "orderBy")]
    order_by: Option<IssueOrderField>,
    /// Order direction. If provided, the 'orderBy' also needs to be provided.
    #[serde(default)]
    direction: Option<Direction>,
    /// Filter by date (ISO 8601 timestamp)
    #[serde(default)]
    since: Option<String>,
    /// Cursor for pagination. Use the endCursor from the previous response's pageInfo.
    #[serde(default)]
    after: Option<String>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
    /// Subset of fields to return for each issue (number, title, body, state, user, labels, assignees, comments, created_at, updated_at). If omitted, all fields are returned.
    #[serde(default)]
    fields: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SearchIssuesArgs {
    /// Search query using GitHub issues search syntax
    query: String,
    /// Optional repository owner. If provided with repo, only issues for this repository are listed.
    #[serde(default)]
    owner: Option<String>,
    /// Optional repository name. If provided with owner, only issues for this repository are listed.
    #[serde(default)]
    repo: Option<String>,
    /// Sort field by number of matches of categories, defaults to best match
    #[serde(default)]
    sort: Option<String>,
    /// Sort order
    #[serde(default)]
    order: Option<super::repos::Order>,
    /// Page number for pagination (min 1)
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100)
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
    /// Subset of fields to return for each issue. If omitted, all fields are returned.
    #[serde(default)]
    fields: Option<Vec<String>>,
}

/// The write `issue_write` performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum IssueWriteMethod {
    /// Creates a new issue.
    Create,
    /// Updates an existing issue.
    Update,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct IssueWriteArgs {
    /// Write operation to perform on a single issue: 'create' creates a new issue, 'update' updates an existing issue.
    method: IssueWriteMethod,
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Issue number to update
    #[serde(default)]
    issue_number: Option<u64>,
    /// Issue title
    #[serde(default)]
    title: Option<String>,
    /// Issue body content
    #[serde(default)]
    body: Option<String>,
    /// Usernames to assign to this issue
    #[serde(default)]
    assignees: Option<Vec<String>>,
    /// Labels to apply to this issue
    #[serde(default)]
    labels: Option<Vec<String>>,
    /// Milestone number
    #[serde(default)]
    milestone: Option<u64>,
    /// Type of this issue. Only use if the repository has issue types configured.
    #[serde(default, rename = "type")]
    issue_type: Option<String>,
    /// New state
    #[serde(default)]
    state: Option<IssueState>,
    /// Reason for the state change. Ignored unless state is changed.
    #[serde(default)]
    state_reason: Option<StateReason>,
    /// Issue number that this issue is a duplicate of (not supported here: close with state_reason 'duplicate').
    #[serde(default)]
    duplicate_of: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum IssueState {
    /// Open.
    Open,
    /// Closed.
    Closed,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum StateReason {
    /// Done.
    Completed,
    /// Won't do.
    NotPlanned,
    /// A duplicate.
    Duplicate,
    /// Opened again.
    Reopened,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct AddIssueCommentArgs {
    /// Repository owner
    owner: String,
    /// Repository name
    repo: String,
    /// Issue number to comment on or react to
    issue_number: u64,
    /// Comment content. Required unless reaction is provided.
    #[serde(default)]
    body: Option<String>,
    /// Emoji reaction to add (+1, -1, laugh, confused, heart, hooray, rocket, eyes). Required unless body is provided.
    #[serde(default)]
    reaction: Option<Reaction>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub(super) enum Reaction {
    /// 👍
    #[serde(rename = "+1")]
    PlusOne,
    /// 👎
    #[serde(rename = "-1")]
    MinusOne,
    /// 😄
    #[serde(rename = "laugh")]
    Laugh,
    /// 😕
    #[serde(rename = "confused")]
    Confused,
    /// ❤️
    #[serde(rename = "heart")]
    Heart,
    /// 🎉
    #[serde(rename = "hooray")]
    Hooray,
    /// 🚀
    #[serde(rename = "rocket")]
    Rocket,
    /// 👀
    #[serde(rename = "eyes")]
    Eyes,
}

fn to_str<T: Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

async fn issue_read(inner: Arc<Inner>, a: IssueReadArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let base = format!("/repos/{}/{}/issues/{}", a.owner, a.repo, a.issue_number);
    match a.method {
        IssueReadMethod::Get => Ok(shape::issue(&inner.client.get(&base, &[]).await?.value)),
        IssueReadMethod::GetComments => {
            let page = inner
                .client
                .get(&format!("{base}/comments"), &paging(a.page, a.per_page))
                .await?;
            listing(&page, shape::comment, None, &[])
        }
        IssueReadMethod::GetSubIssues => {
            let page = inner
                .client
                .get(&format!("{base}/sub_issues"), &paging(a.page, a.per_page))
                .await?;
            listing(&page, shape::issue, None, &[])
        }
        IssueReadMethod::GetParent => {
            let parent = inner
                .client
                .get(&format!("{base}/parent"), &[])
                .await?
                .value;
            // The parent may live in another repository: only shown when that one is allowed.
            let full = parent["repository_url"].as_str().and_then(repo_from_url);
            if !inner.repos.is_open() && !full.is_some_and(|f| inner.repos.allows_full_name(&f)) {
                return Err(HandlerError::failed(
                    "the parent issue is in a repository this server may not access",
                ));
            }
            Ok(shape::issue(&parent))
        }
        IssueReadMethod::GetLabels => {
            let page = inner
                .client
                .get(&format!("{base}/labels"), &paging(a.page, a.per_page))
                .await?;
            listing(
                &page,
                |l| {
                    json!({"name": shape::text(&l["name"]), "color": l["color"],
                    "description": shape::text(&l["description"])})
                },
                None,
                &[],
            )
        }
    }
}

const LIST_ISSUES_QUERY: &str = "query ListIssues($owner: String!, $repo: String!, $states: [IssueState!], $labels: [String!], $first: Int!, $after: String, $orderBy: IssueOrder, $since: DateTime) {
  repository(owner: $owner, name: $repo) {
    issues(first: $first, after: $after, states: $states, labels: $labels, orderBy: $orderBy, filterBy: {since: $since}) {
      nodes {
        number title body state stateReason url createdAt updatedAt closedAt
        author { login }
        labels(first: 100) { nodes { name } }
        assignees(first: 100) { nodes { login } }
        comments { totalCount }
      }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      totalCount
    }
  }
}";

async fn list_issues(inner: Arc<Inner>, a: ListIssuesArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let full = format!("{}/{}", a.owner, a.repo);
    let states = match a.state {
        Some(s) => json!([to_str(s)]),
        None => json!(["OPEN", "CLOSED"]),
    };
    let order_by = json!({
        "field": a.order_by.map_or_else(|| "CREATED_AT".to_owned(), to_str),
        "direction": a.direction.map_or_else(|| "DESC".to_owned(), to_str),
    });
    let variables = json!({
        "owner": a.owner,
        "repo": a.repo,
        "states": states,
        "labels": a.labels.filter(|l| !l.is_empty()),
        "first": a.per_page.unwrap_or(30).clamp(1, 100),
        "after": a.after.filter(|c| !c.is_empty()),
        "orderBy": order_by,
        "since": a.since.filter(|s| !s.is_empty()),
    });
    let data = inner.client.graphql(LIST_ISSUES_QUERY, variables).await?;
    let issues = &data["repository"]["issues"];
    if issues.is_null() {
        return Err(HandlerError::failed(format!(
            "GitHub found no repository {full}"
        )));
    }
    let nodes: Vec<Value> = issues["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .map(|i| {
                    json!({
                        "number": i["number"],
                        "title": shape::text(&i["title"]),
                        "body": shape::text(&i["body"]),
                        "state": i["state"],
                        "state_reason": i["stateReason"],
                        "html_url": i["url"],
                        "user": {"login": i["author"]["login"]},
                        "labels": i["labels"]["nodes"].as_array().map(|l| l.iter().map(|x| shape::text(&x["name"])).collect::<Vec<_>>()),
                        "assignees": i["assignees"]["nodes"].as_array().map(|l| l.iter().map(|x| x["login"].clone()).collect::<Vec<_>>()),
                        "comments": i["comments"]["totalCount"],
                        "created_at": i["createdAt"],
                        "updated_at": i["updatedAt"],
                        "closed_at": i["closedAt"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let nodes = shape::project(nodes, a.fields.as_deref(), &ISSUE_FIELDS)?;
    Ok(json!({
        "issues": nodes,
        "pageInfo": issues["pageInfo"],
        "totalCount": issues["totalCount"],
    }))
}

async fn search_issues(inner: Arc<Inner>, a: SearchIssuesArgs) -> Result<Value, HandlerError> {
    search_issues_or_pulls(&inner, a, "is:issue").await
}

/// `search_issues` and `search_pull_requests`: the same search, scoped by `qualifier`.
pub(super) async fn search_issues_or_pulls(
    inner: &Inner,
    a: SearchIssuesArgs,
    qualifier: &str,
) -> Result<Value, HandlerError> {
    let mut q = with_qualifier(&a.query, qualifier);
    match (&a.owner, &a.repo) {
        (Some(owner), Some(repo)) => {
            inner.repos.check(owner, repo)?;
            q = format!("repo:{owner}/{repo} {q}");
        }
        (Some(owner), None) => {
            crate::github::repos::valid_owner(owner)?;
            q = format!("user:{owner} {q}");
        }
        _ => {}
    }
    let query = search_query(
        q,
        a.sort,
        a.order.map(|o| o.as_str().to_owned()),
        a.page,
        a.per_page,
    )?;
    let page = inner.client.get("/search/issues", &query).await?;
    let mut allowed = ISSUE_FIELDS.to_vec();
    allowed.push("html_url");
    allowed.push("repository");
    search_result(
        inner,
        &page,
        |i| i["repository_url"].as_str().and_then(repo_from_url),
        |i| {
            let mut out = shape::issue(i);
            out["repository"] = i["repository_url"]
                .as_str()
                .and_then(repo_from_url)
                .map_or(Value::Null, Value::String);
            out
        },
        a.fields.as_deref(),
        &allowed,
    )
}

async fn issue_write(inner: Arc<Inner>, a: IssueWriteArgs) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    if a.duplicate_of.is_some() {
        return Err(HandlerError::invalid_arguments(
            "duplicate_of is not supported by this server; close the issue with state 'closed' and state_reason 'duplicate', and name the original in a comment",
        ));
    }
    let mut body = serde_json::Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.to_owned(), v);
        }
    };
    put("title", a.title.map(Value::String));
    put("body", a.body.map(Value::String));
    put("assignees", a.assignees.map(|v| json!(v)));
    put("labels", a.labels.map(|v| json!(v)));
    put("milestone", a.milestone.map(|v| json!(v)));
    put("type", a.issue_type.map(Value::String));
    put("state", a.state.map(|s| json!(s_state(s))));
    put("state_reason", a.state_reason.map(|r| json!(s_reason(r))));
    let answer = match a.method {
        IssueWriteMethod::Create => {
            let titled = body
                .get("title")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.trim().is_empty());
            if !titled {
                return Err(HandlerError::invalid_arguments(
                    "title is required to create an issue",
                ));
            }
            inner
                .client
                .write(
                    Method::POST,
                    &format!("/repos/{}/{}/issues", a.owner, a.repo),
                    &Value::Object(body),
                )
                .await?
        }
        IssueWriteMethod::Update => {
            let n = a.issue_number.ok_or_else(|| {
                HandlerError::invalid_arguments("issue_number is required to update an issue")
            })?;
            inner
                .client
                .write(
                    Method::PATCH,
                    &format!("/repos/{}/{}/issues/{n}", a.owner, a.repo),
                    &Value::Object(body),
                )
                .await?
        }
    };
    Ok(json!({"id": answer["id"], "number": answer["number"], "url": answer["html_url"]}))
}

fn s_state(s: IssueState) -> &'static str {
    match s {
        IssueState::Open => "open",
        IssueState::Closed => "closed",
    }
}

fn s_reason(r: StateReason) -> &'static str {
    match r {
        StateReason::Completed => "completed",
        StateReason::NotPlanned => "not_planned",
        StateReason::Duplicate => "duplicate",
        StateReason::Reopened => "reopened",
    }
}

async fn add_issue_comment(
    inner: Arc<Inner>,
    a: AddIssueCommentArgs,
) -> Result<Value, HandlerError> {
    inner.repos.check(&a.owner, &a.repo)?;
    let body = a.body.filter(|b| !b.trim().is_empty());
    if body.is_none() && a.reaction.is_none() {
        return Err(HandlerError::invalid_arguments(
            "at least one of body or reaction is required",
        ));
    }
    let base = format!("/repos/{}/{}/issues/{}", a.owner, a.repo, a.issue_number);
    let mut out = json!({});
    if let Some(text) = body {
        let c = inner
            .client
            .write(
                Method::POST,
                &format!("{base}/comments"),
                &json!({"body": text}),
            )
            .await?;
        out["comment"] = json!({"id": c["id"], "url": c["html_url"]});
    }
    if let Some(reaction) = a.reaction {
        let r = inner
            .client
            .write(
                Method::POST,
                &format!("{base}/reactions"),
                &json!({"content": reaction}),
            )
            .await?;
        out["reaction"] = json!({"id": r["id"], "content": r["content"]});
    }
    Ok(out)
}

pub(super) fn read(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![
        def(inner, "issue_read", "Get issue details",
            "Get information about a specific issue in a GitHub repository. method: get (details), get_comments, get_sub_issues, get_parent, get_labels. Titles, bodies and comments are sanitised (hidden HTML and invisible characters removed).",
            Kind::Read, issue_read)?,
        def(inner, "list_issues", "List issues",
            "List issues in a GitHub repository. For pagination, use the 'endCursor' from the previous response's 'pageInfo' in the 'after' parameter.",
            Kind::Read, list_issues)?,
        def(inner, "search_issues", "Search issues",
            "Search for issues in GitHub repositories using issues search syntax already scoped to is:issue.",
            Kind::Read, search_issues)?,
    ])
}

pub(super) fn write(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![
        def(inner, "issue_write", "Create or update issue.",
            "Create a new or update an existing issue in a GitHub repository.",
            Kind::Overwrite, issue_write)?,
        def(inner, "add_issue_comment", "Add comment to issue or pull request",
            "Add a comment and/or reaction to a specific issue in a GitHub repository. Use this tool with pull requests as well (pass the pull request number as issue_number). At least one of body or reaction is required.",
            Kind::Create, add_issue_comment)?,
    ])
}
