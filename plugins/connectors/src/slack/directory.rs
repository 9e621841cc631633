//! Channels and users: the `channels_list` and `users_search` tools and the
//! `slack://{workspace}/channels` and `slack://{workspace}/users` CSV directories. All read
//! Slack on demand, page by page, and stop at their caps; nothing is crawled at start-up,
//! and every page read teaches the name caches.

use super::client::next_cursor;
use super::csv::Table;
use super::Inner;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use toolyard::proto::{Resource, ResourceContents, ResourceTemplate};
use toolyard::{
    DefinitionError, HandlerError, ResourceDef, ResourceFn, ResourceRequest, TemplateDef,
};

const CHANNEL_HEADER: [&str; 6] = ["ID", "Name", "Topic", "Purpose", "MemberCount", "Cursor"];
const USER_HEADER: [&str; 3] = ["UserID", "UserName", "RealName"];
const SEARCH_HEADER: [&str; 7] = [
    "UserID",
    "UserName",
    "RealName",
    "DisplayName",
    "Email",
    "Title",
    "DMChannelID",
];
const VALID_TYPES: [&str; 4] = ["public_channel", "private_channel", "im", "mpim"];

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ChannelsArgs {
    /// Comma-separated channel types. Allowed values: 'mpim', 'im', 'public_channel',
    /// 'private_channel'. Example: 'public_channel,private_channel,im'
    channel_types: String,
    /// Type of sorting. Allowed values: 'popularity' - sort by number of members/participants
    /// in each channel (within the page).
    #[serde(default)]
    sort: Option<String>,
    /// The maximum number of items to return. Must be an integer between 1 and 1000
    /// (maximum 999).
    #[serde(default)]
    #[schemars(range(min = 1, max = 999))]
    limit: Option<u32>,
    /// Cursor for pagination. Use the value of the last row and column in the response as
    /// next_cursor field returned from the previous request.
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct UsersSearchArgs {
    /// Search query - matches against real name, display name, username, or email.
    query: String,
    /// Maximum number of results to return (1-100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

/// How a conversation is named in the CSV: `#name`, or `@user` for a DM.
fn shown_name(inner: &Inner, c: &Value) -> String {
    if c["is_im"] == true {
        let user = c["user"].as_str().unwrap_or("");
        let name = inner
            .names
            .user(user)
            .map_or_else(|| user.to_owned(), |u| u.name);
        return format!("@{name}");
    }
    let name = c["name"].as_str().unwrap_or("");
    if c["is_mpim"] == true {
        format!("@{name}")
    } else {
        format!("#{name}")
    }
}

fn channel_row(inner: &Inner, table: &mut Table, c: &Value) {
    let id = c["id"].as_str().unwrap_or("");
    let members = c["num_members"]
        .as_u64()
        .map(|n| n.to_string())
        .unwrap_or_else(|| "0".to_owned());
    table.row(&[
        id,
        &shown_name(inner, c),
        c["topic"]["value"].as_str().unwrap_or(""),
        c["purpose"]["value"].as_str().unwrap_or(""),
        &members,
        "",
    ]);
}

impl Inner {
    pub(crate) async fn channels_list(&self, a: ChannelsArgs) -> Result<Table, HandlerError> {
        let mut types: Vec<&str> = a
            .channel_types
            .split(',')
            .map(str::trim)
            .filter(|t| VALID_TYPES.contains(t))
            .collect();
        if types.is_empty() {
            types = vec!["public_channel", "private_channel"];
        }
        let limit = a.limit.unwrap_or(100).clamp(1, 999);
        let mut params = vec![
            ("types", types.join(",")),
            ("limit", limit.to_string()),
            ("exclude_archived", "true".to_owned()),
        ];
        params.extend(a.cursor.filter(|c| !c.is_empty()).map(|c| ("cursor", c)));
        let v = self.client.read("conversations.list", &params).await?;
        let mut channels = v["channels"].as_array().cloned().unwrap_or_default();
        self.names.learn_channels(&channels);
        if a.sort.as_deref().unwrap_or("popularity") == "popularity" {
            channels.sort_by_key(|c| std::cmp::Reverse(c["num_members"].as_u64().unwrap_or(0)));
        }
        let mut table = Table::new(&CHANNEL_HEADER);
        for c in &channels {
            channel_row(self, &mut table, c);
        }
        table.set_cursor(next_cursor(&v));
        Ok(table)
    }

    pub(crate) async fn users_search(&self, a: UsersSearchArgs) -> Result<Table, HandlerError> {
        let query = a.query.trim().to_lowercase();
        if query.is_empty() {
            return Err(HandlerError::invalid_arguments("query is empty"));
        }
        let limit = a.limit.unwrap_or(10).clamp(1, 100) as usize;
        let mut table = Table::new(&SEARCH_HEADER);
        let mut cursor: Option<String> = None;
        for _ in 0..self.max_pages {
            let mut params = vec![("limit", "200".to_owned())];
            params.extend(cursor.take().map(|c| ("cursor", c)));
            let v = self.client.read("users.list", &params).await?;
            let members = v["members"].as_array().cloned().unwrap_or_default();
            self.names.learn_users(&members);
            for u in &members {
                if u["deleted"] == true {
                    continue;
                }
                let p = &u["profile"];
                let field = |v: &Value| v.as_str().unwrap_or("").to_owned();
                let (name, real, display, email, title) = (
                    field(&u["name"]),
                    u["real_name"]
                        .as_str()
                        .or_else(|| p["real_name"].as_str())
                        .unwrap_or("")
                        .to_owned(),
                    field(&p["display_name"]),
                    field(&p["email"]),
                    field(&p["title"]),
                );
                let hit = [&name, &real, &display, &email]
                    .iter()
                    .any(|f| f.to_lowercase().contains(&query));
                if !hit {
                    continue;
                }
                let id = field(&u["id"]);
                let dm = self.names.cached_dm(&id).unwrap_or_default();
                table.row(&[&id, &name, &real, &display, &email, &title, &dm]);
                if table.rows() >= limit {
                    return Ok(table);
                }
            }
            cursor = next_cursor(&v);
            if cursor.is_none() {
                break;
            }
        }
        Ok(table)
    }

    /// A directory: `conversations.list` or `users.list` pages until the end or the cap; a
    /// capped directory's last row carries the cursor to go on with (`channels_list`).
    async fn directory(&self, users: bool) -> Result<String, HandlerError> {
        let (method, key) = if users {
            ("users.list", "members")
        } else {
            ("conversations.list", "channels")
        };
        let mut table = Table::new(if users { &USER_HEADER } else { &CHANNEL_HEADER });
        let mut cursor: Option<String> = None;
        loop {
            let mut params = vec![("limit", "200".to_owned())];
            if !users {
                params.push(("types", "public_channel,private_channel".to_owned()));
                params.push(("exclude_archived", "true".to_owned()));
            }
            params.extend(cursor.take().map(|c| ("cursor", c)));
            let v = self.client.read(method, &params).await?;
            let items = v[key].as_array().cloned().unwrap_or_default();
            if users {
                self.names.learn_users(&items);
            } else {
                self.names.learn_channels(&items);
            }
            for item in &items {
                if table.rows() >= self.directory_max_rows {
                    break;
                }
                if users {
                    let f = |k: &str| item[k].as_str().unwrap_or("").to_owned();
                    let real = item["real_name"]
                        .as_str()
                        .or_else(|| item["profile"]["real_name"].as_str())
                        .unwrap_or("");
                    table.row(&[&f("id"), &f("name"), real]);
                } else {
                    channel_row(self, &mut table, item);
                }
            }
            cursor = next_cursor(&v);
            if cursor.is_none() || table.rows() >= self.directory_max_rows {
                break;
            }
        }
        if !users {
            table.set_cursor(cursor);
        }
        Ok(table.into_text())
    }

    async fn read_directory(
        &self,
        request: &ResourceRequest,
        users: bool,
    ) -> Result<Vec<ResourceContents>, HandlerError> {
        if let (Some(ws), Some(asked)) = (&self.workspace, request.vars.get("workspace")) {
            if ws != asked {
                return Err(HandlerError::failed(format!(
                    "this connector serves the Slack workspace `{ws}`, not `{asked}`"
                )));
            }
        }
        let text = self.directory(users).await?;
        Ok(vec![ResourceContents::text(
            request.uri.clone(),
            Some("text/csv".to_owned()),
            text,
        )])
    }
}

fn reader(inner: &Arc<Inner>, users: bool) -> ResourceFn {
    let inner = inner.clone();
    Arc::new(move |_ctx, request| {
        let inner = inner.clone();
        Box::pin(async move { inner.read_directory(&request, users).await.map(Into::into) })
    })
}

fn what(users: bool) -> (&'static str, &'static str, &'static str) {
    if users {
        (
            "users",
            "Directory of Slack users",
            "A CSV directory of the workspace's users (UserID, UserName, RealName), read on demand.",
        )
    } else {
        (
            "channels",
            "Directory of Slack channels",
            "A CSV directory of the workspace's channels (ID, Name, Topic, Purpose, MemberCount), read on demand.",
        )
    }
}

/// The directories as resources at `slack://{workspace}/…` (a configured workspace).
pub(crate) fn resources(inner: &Arc<Inner>, workspace: &str) -> Vec<ResourceDef> {
    [false, true]
        .into_iter()
        .map(|users| {
            let (kind, title, description) = what(users);
            let mut resource = Resource::new(format!("slack://{workspace}/{kind}"), title);
            resource.description = Some(description.to_owned());
            resource.mime_type = Some("text/csv".to_owned());
            ResourceDef::new(resource, reader(inner, users))
        })
        .collect()
}

/// The directories as templates `slack://{workspace}/…`.
pub(crate) fn templates(inner: &Arc<Inner>) -> Result<Vec<TemplateDef>, DefinitionError> {
    [false, true]
        .into_iter()
        .map(|users| {
            let (kind, title, description) = what(users);
            TemplateDef::new(
                ResourceTemplate {
                    uri_template: format!("slack://{{workspace}}/{kind}"),
                    name: format!("slack-{kind}"),
                    title: Some(title.to_owned()),
                    description: Some(description.to_owned()),
                    mime_type: Some("text/csv".to_owned()),
                    annotations: None,
                    icons: None,
                    meta: None,
                },
                reader(inner, users),
            )
        })
        .collect()
}
