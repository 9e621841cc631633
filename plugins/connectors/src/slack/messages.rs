//! The message tools, korotovsky-compatible: `conversations_history`,
//! `conversations_replies`, `conversations_search_messages`, `conversations_add_message`,
//! `reactions_add` and `reactions_remove`. Messages come back as the anchor's CSV
//! (`MsgID,UserID,UserName,RealName,Channel,ThreadTs,Text,Time,Cursor`), the next page's
//! cursor in the last row. Writes pass the channel gate first and post with unfurling off
//! unless allow-listed.

use super::client::next_cursor;
use super::csv::{civil, date, days_from_civil, ts_to_rfc3339, Table};
use super::policy::{escape_plain, markdown_to_mrkdwn, unfurl_allowed};
use super::Inner;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};
use toolyard::HandlerError;

const MESSAGE_HEADER: [&str; 9] = [
    "MsgID", "UserID", "UserName", "RealName", "Channel", "ThreadTs", "Text", "Time", "Cursor",
];

/// Messages without `limit`: the anchor's numeric default.
const DEFAULT_COUNT: u32 = 50;
/// Messages per page of a time window (the anchor's).
const WINDOW_COUNT: u32 = 100;

/// Subtypes that are channel activity rather than conversation (left out unless
/// `include_activity_messages`). Bot messages, file shares and thread broadcasts stay.
const ACTIVITY: [&str; 16] = [
    "channel_join",
    "channel_leave",
    "channel_topic",
    "channel_purpose",
    "channel_name",
    "channel_archive",
    "channel_unarchive",
    "group_join",
    "group_leave",
    "group_topic",
    "group_purpose",
    "group_name",
    "group_archive",
    "group_unarchive",
    "pinned_item",
    "unpinned_item",
];

/// `limit`'s schema: the anchor's string (`"1d"`, `"50"`), or a plain number of messages.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "only its schema is used")]
enum LimitArg {
    Text(String),
    Count(u32),
}

/// A string, or a number given where the anchor takes a string (`limit: 50`).
fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => {
            return Err(serde::de::Error::custom(
                "limit must be a string such as \"1d\" or \"50\"",
            ))
        }
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct HistoryArgs {
    /// ID of the channel in format Cxxxxxxxxxx or its name starting with #... or @... aka
    /// #general or @username_dm.
    channel_id: String,
    /// If true, the response will include activity messages such as 'channel_join' or
    /// 'channel_leave'. Default is boolean false.
    #[serde(default)]
    include_activity_messages: bool,
    /// Cursor for pagination. Use the value of the last row and column in the response as
    /// next_cursor field returned from the previous request.
    #[serde(default)]
    cursor: Option<String>,
    /// Limit of messages to fetch in format of maximum ranges of time (e.g. 1d - 1 day, 1w -
    /// 1 week, 30d - 30 days, 90d - 90 days which is a default limit for free tier history)
    /// or number of messages (e.g. 50). Must be empty when 'cursor' is provided.
    #[serde(default, deserialize_with = "string_or_number")]
    #[schemars(with = "Option<LimitArg>")]
    limit: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct RepliesArgs {
    /// ID of the channel in format Cxxxxxxxxxx or its name starting with #... or @... aka
    /// #general or @username_dm.
    channel_id: String,
    /// Unique identifier of either a thread's parent message or a message in the thread. ts
    /// must be the timestamp in format 1234567890.123456 of an existing message with 0 or
    /// more replies.
    thread_ts: String,
    /// If true, the response will include activity messages such as 'channel_join' or
    /// 'channel_leave'. Default is boolean false.
    #[serde(default)]
    include_activity_messages: bool,
    /// Cursor for pagination. Use the value of the last row and column in the response as
    /// next_cursor field returned from the previous request.
    #[serde(default)]
    cursor: Option<String>,
    /// Limit of messages to fetch in format of maximum ranges of time (e.g. 1d - 1 day, 1w -
    /// 1 week, 30d - 30 days) or number of messages (e.g. 50). Must be empty when 'cursor'
    /// is provided.
    #[serde(default, deserialize_with = "string_or_number")]
    #[schemars(with = "Option<LimitArg>")]
    limit: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AddMessageArgs {
    /// ID of the channel in format Cxxxxxxxxxx or its name starting with #... or @... aka
    /// #general or @username_dm.
    channel_id: String,
    /// Unique identifier of either a thread's parent message or a message in the thread
    /// (format 1234567890.123456). Optional: without it the message is added to the channel
    /// itself, otherwise to the thread.
    #[serde(default)]
    thread_ts: Option<String>,
    /// Message payload in specified content_type format. Example: 'Hello, world!' for
    /// text/plain or '# Hello, world!' for text/markdown.
    payload: String,
    /// Content type of the message. Default is 'text/markdown'. Allowed values:
    /// 'text/markdown', 'text/plain'.
    #[serde(default)]
    content_type: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SearchArgs {
    /// Search query to filter messages. Example: 'marketing report' or full URL of Slack
    /// message e.g. 'https://slack.com/archives/C1234567890/p1234567890123456', then the tool
    /// will return a single message matching given URL, herewith all other parameters will
    /// be ignored.
    #[serde(default)]
    search_query: Option<String>,
    /// Filter messages in a specific channel by its ID or name. Example: 'C1234567890' or
    /// '#general'. If not provided, all channels will be searched.
    #[serde(default)]
    filter_in_channel: Option<String>,
    /// Filter messages in a direct message (DM) or multi-person direct message (MPIM)
    /// conversation by its ID or name. Example: 'D1234567890' or '@username_dm'.
    #[serde(default)]
    filter_in_im_or_mpim: Option<String>,
    /// Filter messages with a specific user by their ID or display name in threads and DMs.
    /// Example: 'U1234567890' or '@username'.
    #[serde(default)]
    filter_users_with: Option<String>,
    /// Filter messages from a specific user by their ID or display name. Example:
    /// 'U1234567890' or '@username'.
    #[serde(default)]
    filter_users_from: Option<String>,
    /// Filter messages sent before a specific date in format 'YYYY-MM-DD' (or 'Today',
    /// 'Yesterday').
    #[serde(default)]
    filter_date_before: Option<String>,
    /// Filter messages sent after a specific date in format 'YYYY-MM-DD' (or 'Today',
    /// 'Yesterday').
    #[serde(default)]
    filter_date_after: Option<String>,
    /// Filter messages sent on a specific date in format 'YYYY-MM-DD' (or 'Today',
    /// 'Yesterday').
    #[serde(default)]
    filter_date_on: Option<String>,
    /// Filter messages sent during a specific period: 'YYYY-MM-DD', a month ('July'), a year,
    /// 'Yesterday' or 'Today'.
    #[serde(default)]
    filter_date_during: Option<String>,
    /// If true, the response will include only messages from threads. Default is boolean
    /// false.
    #[serde(default)]
    filter_threads_only: bool,
    /// Cursor for pagination. Use the value of the last row and column in the response as
    /// next_cursor field returned from the previous request.
    #[serde(default)]
    cursor: Option<String>,
    /// The maximum number of items to return. Must be an integer between 1 and 100.
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ReactionArgs {
    /// ID of the channel in format Cxxxxxxxxxx or its name starting with #... or @... aka
    /// #general or @username_dm.
    channel_id: String,
    /// Timestamp of the message, in format 1234567890.123456.
    timestamp: String,
    /// The name of the emoji (without colons). Example: 'thumbsup', 'heart', 'rocket'.
    emoji: String,
}

fn bad(message: impl Into<String>) -> HandlerError {
    HandlerError::invalid_arguments(message.into())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// What a `limit` asks for: a count, and for a time window its oldest and latest `ts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) count: u32,
    pub(crate) oldest: Option<String>,
    pub(crate) latest: Option<String>,
}

/// The anchor's `limit`: `Nd`, `Nw`, `Nm` (days, weeks, months back from the start of today,
/// UTC), or a number of messages; absent, 50 messages.
pub(crate) fn parse_limit(limit: Option<&str>, now: i64) -> Result<Window, HandlerError> {
    let limit = limit.map(str::trim).filter(|l| !l.is_empty());
    let Some(limit) = limit else {
        return Ok(Window {
            count: DEFAULT_COUNT,
            oldest: None,
            latest: None,
        });
    };
    if let Some(unit) = limit
        .chars()
        .last()
        .filter(|c| matches!(c, 'd' | 'w' | 'm'))
    {
        let n: i64 = limit[..limit.len() - 1]
            .parse()
            .ok()
            .filter(|n| *n > 0 && *n < 100_000)
            .ok_or_else(|| {
                bad(format!(
                    "invalid duration limit {limit:?}: must be a positive integer followed by 'd', 'w', or 'm'"
                ))
            })?;
        let today = now.div_euclid(86_400);
        let oldest_day = match unit {
            'd' => today - n + 1,
            'w' => today - n * 7 + 1,
            _ => {
                let (y, m, d) = civil(today);
                let months = y * 12 + i64::from(m) - 1 - n;
                days_from_civil(
                    months.div_euclid(12),
                    (months.rem_euclid(12) + 1) as u32,
                    d.min(28),
                )
            }
        };
        return Ok(Window {
            count: WINDOW_COUNT,
            oldest: Some(format!("{}.000000", oldest_day * 86_400)),
            latest: Some(format!("{now}.000000")),
        });
    }
    let count: u32 = limit.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
        bad(format!(
            "invalid limit {limit:?}: a number of messages (50) or a time range (1d, 1w, 30d, 1m)"
        ))
    })?;
    Ok(Window {
        count,
        oldest: None,
        latest: None,
    })
}

fn check_ts(name: &str, ts: &str) -> Result<(), HandlerError> {
    let ok = ts.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && a.chars().chain(b.chars()).all(|c| c.is_ascii_digit())
    });
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{name} must be a timestamp in format 1234567890.123456"
        )))
    }
}

impl Inner {
    /// The page size history and replies may ask for under the budget.
    fn page_count(&self, w: &Window) -> u32 {
        w.count.clamp(1, self.history.page_cap())
    }

    /// Rows for `messages` in `channel` (as shown; `None`: each message's own
    /// `channel.name`, as search matches carry it), authors' names filled from the cache after
    /// looking up a few unknown ones.
    async fn message_table(
        &self,
        messages: &[Value],
        channel: Option<&str>,
        activity: bool,
        cursor: Option<String>,
    ) -> Table {
        let kept: Vec<&Value> = messages
            .iter()
            .filter(|m| activity || !m["subtype"].as_str().is_some_and(|s| ACTIVITY.contains(&s)))
            .collect();
        self.names
            .fill_users(
                &self.client,
                kept.iter()
                    .filter_map(|m| m["user"].as_str().map(str::to_owned)),
            )
            .await;
        let mut table = Table::new(&MESSAGE_HEADER);
        for m in kept {
            let ts = m["ts"].as_str().unwrap_or("");
            let user = m["user"]
                .as_str()
                .or_else(|| m["bot_id"].as_str())
                .unwrap_or("");
            let known = self.names.user(user);
            let user_name = known
                .as_ref()
                .map(|u| u.name.clone())
                .or_else(|| m["username"].as_str().map(str::to_owned))
                .unwrap_or_else(|| user.to_owned());
            let real_name = known
                .map(|u| u.real_name)
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| user_name.clone());
            let own = m["channel"]["name"]
                .as_str()
                .map(|n| format!("#{n}"))
                .or_else(|| m["channel"]["id"].as_str().map(str::to_owned))
                .unwrap_or_default();
            table.row(&[
                ts,
                user,
                &user_name,
                &real_name,
                channel.unwrap_or(&own),
                m["thread_ts"].as_str().unwrap_or(""),
                m["text"].as_str().unwrap_or(""),
                &ts_to_rfc3339(ts),
                "",
            ]);
        }
        table.set_cursor(cursor);
        table
    }

    pub(crate) async fn history(&self, a: HistoryArgs) -> Result<Table, HandlerError> {
        let window = parse_limit(a.limit.as_deref(), now_secs())?;
        let channel = self.names.conversation(&self.client, &a.channel_id).await?;
        let mut params = vec![
            ("channel", channel.clone()),
            ("limit", self.page_count(&window).to_string()),
            ("inclusive", "false".to_owned()),
        ];
        params.extend(window.oldest.map(|o| ("oldest", o)));
        params.extend(window.latest.map(|l| ("latest", l)));
        params.extend(a.cursor.filter(|c| !c.is_empty()).map(|c| ("cursor", c)));
        let v = self.client.read("conversations.history", &params).await?;
        let more = v["has_more"] == true;
        let cursor = next_cursor(&v).filter(|_| more);
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        Ok(self
            .message_table(
                &messages,
                Some(&channel),
                a.include_activity_messages,
                cursor,
            )
            .await)
    }

    pub(crate) async fn replies(&self, a: RepliesArgs) -> Result<Table, HandlerError> {
        check_ts("thread_ts", &a.thread_ts)?;
        let window = parse_limit(a.limit.as_deref(), now_secs())?;
        let channel = self.names.conversation(&self.client, &a.channel_id).await?;
        let mut params = vec![
            ("channel", channel.clone()),
            ("ts", a.thread_ts.clone()),
            ("limit", self.page_count(&window).to_string()),
            ("inclusive", "false".to_owned()),
        ];
        params.extend(window.oldest.map(|o| ("oldest", o)));
        params.extend(window.latest.map(|l| ("latest", l)));
        params.extend(a.cursor.filter(|c| !c.is_empty()).map(|c| ("cursor", c)));
        let v = self.client.read("conversations.replies", &params).await?;
        let more = v["has_more"] == true;
        let cursor = next_cursor(&v).filter(|_| more);
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        Ok(self
            .message_table(
                &messages,
                Some(&channel),
                a.include_activity_messages,
                cursor,
            )
            .await)
    }

    /// A message by its permalink (`…/archives/C123/p1712345678123456[?thread_ts=…]`).
    async fn permalink(&self, url: &str) -> Result<Table, HandlerError> {
        let path = url.split("/archives/").nth(1).unwrap_or("");
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let mut parts = path.split('/');
        let (Some(channel), Some(p)) = (parts.next(), parts.next()) else {
            return Err(bad(
                "a Slack permalink looks like https://x.slack.com/archives/C123/p1712345678123456",
            ));
        };
        let digits = p.trim_start_matches('p');
        if !super::resolve::looks_like_id(channel)
            || digits.len() < 7
            || !digits.chars().all(|c| c.is_ascii_digit())
        {
            return Err(bad(
                "a Slack permalink looks like https://x.slack.com/archives/C123/p1712345678123456",
            ));
        }
        let ts = format!(
            "{}.{}",
            &digits[..digits.len() - 6],
            &digits[digits.len() - 6..]
        );
        let thread = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("thread_ts="))
            .map(str::to_owned);
        let v = match &thread {
            Some(t) => {
                self.client
                    .read(
                        "conversations.replies",
                        &[
                            ("channel", channel.to_owned()),
                            ("ts", t.clone()),
                            ("latest", ts.clone()),
                            ("oldest", ts.clone()),
                            ("inclusive", "true".to_owned()),
                            ("limit", "1".to_owned()),
                        ],
                    )
                    .await?
            }
            None => {
                self.client
                    .read(
                        "conversations.history",
                        &[
                            ("channel", channel.to_owned()),
                            ("latest", ts.clone()),
                            ("oldest", ts.clone()),
                            ("inclusive", "true".to_owned()),
                            ("limit", "1".to_owned()),
                        ],
                    )
                    .await?
            }
        };
        let messages: Vec<Value> = v["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter(|m| m["ts"] == ts.as_str())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(self
            .message_table(&messages, Some(channel), true, None)
            .await)
    }

    /// `in:#name` for a channel filter.
    async fn channel_filter(&self, raw: &str) -> Result<String, HandlerError> {
        let raw = raw.trim();
        if let Some(name) = raw.strip_prefix('#') {
            return Ok(format!("#{name}"));
        }
        if super::resolve::looks_like_id(raw) {
            return Ok(format!(
                "#{}",
                self.names.channel_name(&self.client, raw).await?
            ));
        }
        Err(bad(format!(
            "invalid channel format: {raw:?} (C1234567890 or #general)"
        )))
    }

    /// `<@U123>` for a user filter.
    async fn user_filter(&self, raw: &str) -> Result<String, HandlerError> {
        let raw = raw.trim().trim_start_matches("<@").trim_end_matches('>');
        let name = raw.strip_prefix('@').unwrap_or(raw);
        let name = if super::resolve::looks_like_id(name) {
            name
        } else {
            name.strip_suffix("_dm").unwrap_or(name)
        };
        let id = self.names.user_id(&self.client, name).await?;
        Ok(format!("<@{id}>"))
    }

    pub(crate) async fn search(&self, a: SearchArgs) -> Result<Table, HandlerError> {
        let query = a.search_query.as_deref().unwrap_or("").trim().to_owned();
        if query.contains("slack.com/archives/") {
            return self.permalink(&query).await;
        }
        let mut terms: Vec<String> = query.split_whitespace().map(str::to_owned).collect();
        if a.filter_threads_only {
            terms.push("is:thread".to_owned());
        }
        if let Some(c) = a
            .filter_in_channel
            .as_deref()
            .filter(|c| !c.trim().is_empty())
        {
            terms.push(format!("in:{}", self.channel_filter(c).await?));
        } else if let Some(u) = a
            .filter_in_im_or_mpim
            .as_deref()
            .filter(|c| !c.trim().is_empty())
        {
            terms.push(format!("in:{}", self.user_filter(u).await?));
        }
        if let Some(u) = a
            .filter_users_with
            .as_deref()
            .filter(|c| !c.trim().is_empty())
        {
            terms.push(format!("with:{}", self.user_filter(u).await?));
        }
        if let Some(u) = a
            .filter_users_from
            .as_deref()
            .filter(|c| !c.trim().is_empty())
        {
            terms.push(format!("from:{}", self.user_filter(u).await?));
        }
        terms.extend(date_filters(
            a.filter_date_before.as_deref(),
            a.filter_date_after.as_deref(),
            a.filter_date_on.as_deref(),
            a.filter_date_during.as_deref(),
            now_secs(),
        )?);
        if terms.is_empty() {
            return Err(bad("give search_query or at least one filter"));
        }
        let page: u32 = match a.cursor.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
            None => 1,
            Some(c) => c
                .strip_prefix("page:")
                .and_then(|n| n.parse().ok())
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| bad("cursor is not one this tool gave"))?,
        };
        let count = a.limit.unwrap_or(20).clamp(1, 100);
        let v = self
            .client
            .read(
                "search.messages",
                &[
                    ("query", terms.join(" ")),
                    ("count", count.to_string()),
                    ("page", page.to_string()),
                    ("highlight", "false".to_owned()),
                ],
            )
            .await?;
        let m = &v["messages"];
        let pages = m["paging"]["pages"]
            .as_u64()
            .or_else(|| m["pagination"]["page_count"].as_u64())
            .unwrap_or(1);
        let matches = m["matches"].as_array().cloned().unwrap_or_default();
        let cursor =
            (u64::from(page) < pages && !matches.is_empty()).then(|| format!("page:{}", page + 1));
        // Each match carries its channel and, in its permalink, its thread.
        let rows: Vec<Value> = matches
            .into_iter()
            .map(|mut hit| {
                let thread = hit["permalink"]
                    .as_str()
                    .and_then(|p| p.split("thread_ts=").nth(1))
                    .map(|t| t.split('&').next().unwrap_or(t).to_owned());
                if let Some(t) = thread {
                    hit["thread_ts"] = json!(t);
                }
                hit
            })
            .collect();
        Ok(self.message_table(&rows, None, true, cursor).await)
    }

    pub(crate) async fn add_message(&self, a: AddMessageArgs) -> Result<Table, HandlerError> {
        let content_type = a.content_type.as_deref().unwrap_or("text/markdown");
        let markdown = match content_type {
            "text/markdown" => true,
            "text/plain" => false,
            _ => {
                return Err(bad(
                    "content_type must be either 'text/plain' or 'text/markdown'",
                ))
            }
        };
        if a.payload.trim().is_empty() {
            return Err(bad("payload is empty"));
        }
        if let Some(t) = a.thread_ts.as_deref().filter(|t| !t.is_empty()) {
            check_ts("thread_ts", t)?;
        }
        let channel = self
            .post
            .admit(
                "conversations_add_message",
                &self.names,
                &self.client,
                &a.channel_id,
            )
            .await?;
        let text = if markdown {
            markdown_to_mrkdwn(&a.payload)
        } else {
            escape_plain(&a.payload)
        };
        let unfurl = unfurl_allowed(&a.payload, &self.unfurl_hosts)
            && unfurl_allowed(&text, &self.unfurl_hosts);
        let mut body = json!({
            "channel": channel,
            "text": text,
            "mrkdwn": markdown,
            "unfurl_links": unfurl,
            "unfurl_media": unfurl,
        });
        if let Some(t) = a.thread_ts.filter(|t| !t.is_empty()) {
            body["thread_ts"] = json!(t);
        }
        let v = self.client.write("chat.postMessage", &body).await?;
        let mut message = v["message"].clone();
        if message["ts"].is_null() {
            message["ts"] = v["ts"].clone();
        }
        if message["text"].is_null() {
            message["text"] = json!(text);
        }
        let shown = v["channel"].as_str().unwrap_or(&channel).to_owned();
        Ok(self
            .message_table(&[message], Some(&shown), true, None)
            .await)
    }

    pub(crate) async fn react(&self, a: ReactionArgs, add: bool) -> Result<String, HandlerError> {
        check_ts("timestamp", &a.timestamp)?;
        let emoji = a.emoji.trim().trim_matches(':').to_owned();
        if emoji.is_empty() || emoji.contains(char::is_whitespace) {
            return Err(bad(
                "emoji is the emoji's name without colons, e.g. thumbsup",
            ));
        }
        let tool = if add {
            "reactions_add"
        } else {
            "reactions_remove"
        };
        let channel = self
            .react
            .admit(tool, &self.names, &self.client, &a.channel_id)
            .await?;
        let method = if add {
            "reactions.add"
        } else {
            "reactions.remove"
        };
        self.client
            .write(
                method,
                &json!({"channel": channel, "timestamp": a.timestamp, "name": emoji}),
            )
            .await?;
        Ok(if add {
            format!("Added :{emoji}: to message {} in {channel}", a.timestamp)
        } else {
            format!(
                "Removed :{emoji}: from message {} in {channel}",
                a.timestamp
            )
        })
    }
}

/// One date: `YYYY-MM-DD`, `today` or `yesterday` (UTC).
fn one_date(text: &str, now: i64) -> Option<String> {
    let lower = text.trim().to_lowercase();
    let today = now.div_euclid(86_400);
    match lower.as_str() {
        "today" => return Some(date(today)),
        "yesterday" => return Some(date(today - 1)),
        _ => {}
    }
    let mut parts = lower.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, u32, u32) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then(|| format!("{y:04}-{m:02}-{d:02}"))
}

/// Slack's `before:`, `after:`, `on:` and `during:` modifiers from the anchor's filters.
fn date_filters(
    before: Option<&str>,
    after: Option<&str>,
    on: Option<&str>,
    during: Option<&str>,
    now: i64,
) -> Result<Vec<String>, HandlerError> {
    let given = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let (before, after, on, during) = (given(before), given(after), given(on), given(during));
    let parse = |name: &str, v: &str| {
        one_date(v, now).ok_or_else(|| {
            bad(format!(
                "invalid '{name}' date {v:?}: use YYYY-MM-DD, Today or Yesterday"
            ))
        })
    };
    if let Some(on) = on {
        if before.is_some() || after.is_some() || during.is_some() {
            return Err(bad("'on' cannot be combined with other date filters"));
        }
        return Ok(vec![format!("on:{}", parse("on", &on)?)]);
    }
    if let Some(during) = during {
        if before.is_some() || after.is_some() {
            return Err(bad("'during' cannot be combined with 'before' or 'after'"));
        }
        let value = one_date(&during, now).unwrap_or_else(|| during.to_lowercase());
        if !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(bad(format!(
                "invalid 'during' value {during:?}: a date, a month (July) or a year"
            )));
        }
        return Ok(vec![format!("during:{value}")]);
    }
    let mut out = Vec::new();
    if let Some(a) = &after {
        out.push(format!("after:{}", parse("after", a)?));
    }
    if let Some(b) = &before {
        out.push(format!("before:{}", parse("before", b)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_712_345_678; // 2024-04-05T19:34:38Z

    #[test]
    fn limit_is_a_count_or_a_window_from_the_start_of_today() {
        assert_eq!(parse_limit(None, NOW).unwrap().count, 50);
        assert_eq!(parse_limit(Some("15"), NOW).unwrap().count, 15);
        let w = parse_limit(Some("1d"), NOW).unwrap();
        assert_eq!(w.count, 100);
        let start = days_from_civil(2024, 4, 5) * 86_400;
        assert_eq!(w.oldest, Some(format!("{start}.000000")));
        assert_eq!(w.latest, Some(format!("{NOW}.000000")));
        let w = parse_limit(Some("1w"), NOW).unwrap();
        assert_eq!(
            w.oldest,
            Some(format!("{}.000000", days_from_civil(2024, 3, 30) * 86_400))
        );
        let w = parse_limit(Some("2m"), NOW).unwrap();
        assert_eq!(
            w.oldest,
            Some(format!("{}.000000", days_from_civil(2024, 2, 5) * 86_400))
        );
        for bad in ["0d", "xd", "-3", "abc", "0"] {
            assert!(parse_limit(Some(bad), NOW).is_err(), "{bad}");
        }
    }

    #[test]
    fn date_filters_become_slack_modifiers() {
        assert_eq!(
            date_filters(Some("2024-04-01"), Some("yesterday"), None, None, NOW).unwrap(),
            vec!["after:2024-04-04", "before:2024-04-01"]
        );
        assert_eq!(
            date_filters(None, None, None, Some("July"), NOW).unwrap(),
            vec!["during:july"]
        );
        assert!(date_filters(None, None, Some("today"), Some("July"), NOW).is_err());
        assert!(date_filters(Some("04/01/2024"), None, None, None, NOW).is_err());
    }

    #[test]
    fn timestamps_are_checked() {
        assert!(check_ts("ts", "1712345678.123456").is_ok());
        for bad in ["1712345678", "abc.def", ".1", "1."] {
            assert!(check_ts("ts", bad).is_err(), "{bad}");
        }
    }
}
