//! The context and users toolsets: `get_me` and `search_users`.

use super::{def, search_query, Kind};
use crate::github::{shape, Inner};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use toolyard::{DefinitionError, HandlerError, ToolDef};

/// `get_me` takes nothing.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SearchUsersArgs {
    /// User search query. Examples: 'john smith', 'location:seattle', 'followers:>100'.
    query: String,
    /// Sort users by number of followers or repositories, or when the person joined GitHub.
    #[serde(default)]
    sort: Option<UserSort>,
    /// Sort order.
    #[serde(default)]
    order: Option<super::repos::Order>,
    /// Page number for pagination (min 1).
    #[serde(default)]
    #[schemars(range(min = 1))]
    page: Option<u32>,
    /// Results per page for pagination (min 1, max 100).
    #[serde(default, rename = "perPage")]
    #[schemars(range(min = 1, max = 100))]
    per_page: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum UserSort {
    /// By followers.
    Followers,
    /// By public repositories.
    Repositories,
    /// By join date.
    Joined,
}

impl UserSort {
    fn as_str(self) -> &'static str {
        match self {
            UserSort::Followers => "followers",
            UserSort::Repositories => "repositories",
            UserSort::Joined => "joined",
        }
    }
}

async fn get_me(inner: Arc<Inner>, _a: NoArgs) -> Result<Value, HandlerError> {
    let me = inner.client.get("/user", &[]).await?.value;
    Ok(json!({
        "login": me["login"],
        "id": me["id"],
        "profile_url": me["html_url"],
        "avatar_url": me["avatar_url"],
        "details": {
            "name": shape::text(&me["name"]),
            "company": shape::text(&me["company"]),
            "blog": me["blog"],
            "location": shape::text(&me["location"]),
            "email": me["email"],
            "bio": shape::text(&me["bio"]),
            "public_repos": me["public_repos"],
            "followers": me["followers"],
            "following": me["following"],
            "created_at": me["created_at"],
            "type": me["type"],
        },
    }))
}

async fn search_users(inner: Arc<Inner>, a: SearchUsersArgs) -> Result<Value, HandlerError> {
    let query = search_query(
        super::with_qualifier(&a.query, "type:user"),
        a.sort.map(|s| s.as_str().to_owned()),
        a.order.map(|o| o.as_str().to_owned()),
        a.page,
        a.per_page,
    )?;
    let page = inner.client.get("/search/users", &query).await?;
    let users: Vec<Value> = page.value["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|u| {
                    json!({"login": u["login"], "id": u["id"], "profile_url": u["html_url"],
                        "avatar_url": u["avatar_url"]})
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = json!({
        "total_count": page.value["total_count"],
        "incomplete_results": page.value["incomplete_results"],
        "items": users,
    });
    if let Some(n) = page.next_page {
        out["next_page"] = json!(n);
    }
    Ok(out)
}

pub(super) fn read(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    Ok(vec![
        def(
            inner,
            "get_me",
            "Get my user profile",
            "Get details of the authenticated GitHub user. Use this when a request is about the user's own profile for GitHub. Or when information is missing to build other tool calls.",
            Kind::Read,
            get_me,
        )?,
        def(
            inner,
            "search_users",
            "Search users",
            "Find GitHub users by username, real name, or other profile information. Useful for locating developers, contributors, or team members.",
            Kind::Read,
            search_users,
        )?,
    ])
}
