//! The tool list, korotovsky's names and descriptions: read tools always; the search tool
//! only with a user token (Slack refuses `search.messages` to bot tokens); posting and
//! reactions only where the operator named channels, and never in read-only mode.

use super::directory::{ChannelsArgs, UsersSearchArgs};
use super::messages::{AddMessageArgs, HistoryArgs, ReactionArgs, RepliesArgs, SearchArgs};
use super::Inner;
use crate::tool::{tool, Effect};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::sync::Arc;
use toolyard::proto::{Tool, ToolAnnotations};
use toolyard::{DefinitionError, HandlerError, IntoCallToolResult, RequestContext, ToolDef};

/// A tool that adds something others will see (a message): not read-only, not destructive,
/// not idempotent (posting twice posts twice), open world (it reaches people).
fn additive<A, R, F, Fut>(name: &str, description: &str, f: F) -> Result<ToolDef, DefinitionError>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: IntoCallToolResult,
    F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
{
    let tool = Tool {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        input_schema: toolyard::schema_for::<A>(),
        annotations: Some(ToolAnnotations {
            title: None,
            read_only_hint: Some(false),
            destructive_hint: Some(false),
            idempotent_hint: Some(false),
            open_world_hint: Some(true),
        }),
        ..Tool::default()
    };
    ToolDef::from_fn(tool, f)
}

/// Clones `inner` into a handler calling `$method`.
macro_rules! handler {
    ($inner:expr, |$i:ident, $a:ident: $ty:ty| $body:expr) => {{
        let inner = $inner.clone();
        move |_ctx, $a: $ty| {
            let $i = inner.clone();
            async move { $body }
        }
    }};
}

pub(crate) fn definitions(inner: &Arc<Inner>) -> Result<Vec<ToolDef>, DefinitionError> {
    let mut tools = vec![
        tool(
            "conversations_history",
            "Get messages from the channel (or DM) by channel_id, the last row/column in the response is used as 'cursor' parameter for pagination if not empty",
            Effect::Read,
            handler!(inner, |i, a: HistoryArgs| i.history(a).await),
        )?,
        tool(
            "conversations_replies",
            "Get a thread of messages posted to a conversation by channelID and thread_ts, the last row/column in the response is used as 'cursor' parameter for pagination if not empty",
            Effect::Read,
            handler!(inner, |i, a: RepliesArgs| i.replies(a).await),
        )?,
        tool(
            "channels_list",
            "Get list of channels (CSV: ID, Name, Topic, Purpose, MemberCount; the last row/column is the cursor for the next page if not empty)",
            Effect::Read,
            handler!(inner, |i, a: ChannelsArgs| i.channels_list(a).await),
        )?,
        tool(
            "users_search",
            "Search for users by name, email, or display name. Returns CSV with UserID, UserName, RealName, DisplayName, Email, Title and DMChannelID (if known).",
            Effect::Read,
            handler!(inner, |i, a: UsersSearchArgs| i.users_search(a).await),
        )?,
    ];
    if inner.search_offered {
        tools.push(tool(
            "conversations_search_messages",
            "Search messages in a public channel, private channel, or direct message (DM, or IM) conversation using filters. All filters are optional, if not provided then search_query is required.",
            Effect::Read,
            handler!(inner, |i, a: SearchArgs| i.search(a).await),
        )?);
    }
    if inner.read_only {
        return Ok(tools);
    }
    if inner.post.offered() {
        tools.push(additive(
            "conversations_add_message",
            "Add a message to a public channel, private channel, or direct message (DM, or IM) conversation by channel_id and thread_ts. Only channels the operator allows; links are not unfurled unless their hosts are allowed.",
            handler!(inner, |i, a: AddMessageArgs| i.add_message(a).await),
        )?);
    }
    if inner.react.offered() {
        tools.push(tool(
            "reactions_add",
            "Add an emoji reaction to a message in a public channel, private channel, or direct message (DM, or IM) conversation.",
            Effect::Idempotent,
            handler!(inner, |i, a: ReactionArgs| i.react(a, true).await),
        )?);
        tools.push(tool(
            "reactions_remove",
            "Remove an emoji reaction from a message in a public channel, private channel, or direct message (DM, or IM) conversation.",
            Effect::DestructiveIdempotent,
            handler!(inner, |i, a: ReactionArgs| i.react(a, false).await),
        )?);
    }
    Ok(tools)
}
