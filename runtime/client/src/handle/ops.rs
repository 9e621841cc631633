//! The typed per-method operations of a [`Client`]: tools, resources, prompts, completion,
//! `ping`, the log level, and following a listing's cursors. Thin wrappers over the
//! request plumbing, one per MCP method.

use super::client::{lock, Client};
use super::request::{to_value, Era, RequestOptions};
use crate::error::ClientError;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use toolyard_proto::{
    CallToolResult, CompleteRequestParams, CompleteResult, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel, Prompt,
    ReadResourceResult, Resource, ResourceTemplate, Tool,
};

impl Client {
    /// Tells the server the roots changed (`notifications/roots/list_changed`).
    pub async fn notify_roots_changed(&self) -> Result<(), ClientError> {
        self.notify("notifications/roots/list_changed", Map::new())
            .await
    }

    /// `tools/list`, one page.
    pub async fn list_tools(&self, cursor: Option<String>) -> Result<ListToolsResult, ClientError> {
        let mut result: ListToolsResult = self
            .typed(
                "tools/list",
                cursor_params(cursor),
                &RequestOptions::default(),
            )
            .await?;
        self.learn_tools(&mut result.tools);
        Ok(result)
    }

    /// Every tool, following cursors.
    pub async fn list_all_tools(&self) -> Result<Vec<Tool>, ClientError> {
        self.all_pages(
            "tools/list",
            |cursor| self.list_tools(cursor),
            |p: ListToolsResult| (p.tools, p.next_cursor),
        )
        .await
    }

    /// `tools/call`. A tool's failure is a result with `isError: true`, not an `Err`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ClientError> {
        self.call_tool_with(name, arguments, &RequestOptions::default())
            .await
    }

    /// `tools/call` with options (timeout, progress callback, `_meta`).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        opts: &RequestOptions,
    ) -> Result<CallToolResult, ClientError> {
        let mut params = Map::new();
        params.insert("name".into(), name.into());
        match arguments {
            Value::Null => {}
            args @ Value::Object(_) => {
                params.insert("arguments".into(), args);
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "tool arguments must be an object, not {other}"
                )))
            }
        }
        self.typed("tools/call", params, opts).await
    }

    /// `tools/call` on the byte-level path: `arguments` (a JSON object's text) are written
    /// into the request as they are, and the result comes back as the server's JSON text,
    /// unparsed (a gateway passes both through; see `toolyard::RawResult`).
    pub async fn call_tool_raw(
        &self,
        name: &str,
        arguments: &RawValue,
        opts: &RequestOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let call = super::meta::RawCall { name, arguments };
        self.request_raw_with("tools/call", Map::new(), Some(&call), opts)
            .await
    }

    /// `tools/call`, with a tool's `isError` result turned into [`ClientError::ToolCall`].
    pub async fn call_tool_ok(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ClientError> {
        let result = self.call_tool(name, arguments).await?;
        if result.failed() {
            let message = result
                .content
                .iter()
                .filter_map(|c| match c {
                    toolyard_proto::ContentBlock::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(ClientError::ToolCall {
                name: name.to_owned(),
                message,
            });
        }
        Ok(result)
    }

    /// `resources/list`, one page.
    pub async fn list_resources(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourcesResult, ClientError> {
        self.typed(
            "resources/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every resource, following cursors.
    pub async fn list_all_resources(&self) -> Result<Vec<Resource>, ClientError> {
        self.all_pages(
            "resources/list",
            |cursor| self.list_resources(cursor),
            |p: ListResourcesResult| (p.resources, p.next_cursor),
        )
        .await
    }

    /// `resources/templates/list`, one page.
    pub async fn list_resource_templates(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourceTemplatesResult, ClientError> {
        self.typed(
            "resources/templates/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every resource template, following cursors.
    pub async fn list_all_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ClientError> {
        self.all_pages(
            "resources/templates/list",
            |cursor| self.list_resource_templates(cursor),
            |p: ListResourceTemplatesResult| (p.resource_templates, p.next_cursor),
        )
        .await
    }

    /// `resources/read`.
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ClientError> {
        self.read_resource_with(uri, &RequestOptions::default())
            .await
    }

    /// `resources/read` with options (timeout, progress, who answers the server's
    /// questions).
    pub async fn read_resource_with(
        &self,
        uri: &str,
        opts: &RequestOptions,
    ) -> Result<ReadResourceResult, ClientError> {
        let mut params = Map::new();
        params.insert("uri".into(), uri.into());
        self.typed("resources/read", params, opts).await
    }

    /// `prompts/list`, one page.
    pub async fn list_prompts(
        &self,
        cursor: Option<String>,
    ) -> Result<ListPromptsResult, ClientError> {
        self.typed(
            "prompts/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every prompt, following cursors.
    pub async fn list_all_prompts(&self) -> Result<Vec<Prompt>, ClientError> {
        self.all_pages(
            "prompts/list",
            |cursor| self.list_prompts(cursor),
            |p: ListPromptsResult| (p.prompts, p.next_cursor),
        )
        .await
    }

    /// Follows a listing's cursors to the end; a cursor the server repeats is an error
    /// (it would loop forever).
    async fn all_pages<P, T, Fut>(
        &self,
        method: &str,
        page: impl Fn(Option<String>) -> Fut,
        split: impl Fn(P) -> (Vec<T>, Option<String>),
    ) -> Result<Vec<T>, ClientError>
    where
        Fut: std::future::Future<Output = Result<P, ClientError>>,
    {
        let mut all = Vec::new();
        let mut cursor = None;
        let mut seen = std::collections::HashSet::new();
        loop {
            let (items, next) = split(page(cursor).await?);
            all.extend(items);
            match next {
                Some(c) if seen.insert(c.clone()) => cursor = Some(c),
                Some(c) => {
                    return Err(ClientError::Protocol(format!(
                        "{method} repeated the cursor {c:?}"
                    )))
                }
                None => return Ok(all),
            }
        }
    }

    /// `prompts/get`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<GetPromptResult, ClientError> {
        self.get_prompt_with(name, arguments, &RequestOptions::default())
            .await
    }

    /// `prompts/get` with options.
    pub async fn get_prompt_with(
        &self,
        name: &str,
        arguments: Value,
        opts: &RequestOptions,
    ) -> Result<GetPromptResult, ClientError> {
        let mut params = Map::new();
        params.insert("name".into(), name.into());
        if !arguments.is_null() {
            params.insert("arguments".into(), arguments);
        }
        self.typed("prompts/get", params, opts).await
    }

    /// `completion/complete`.
    pub async fn complete(
        &self,
        params: CompleteRequestParams,
    ) -> Result<CompleteResult, ClientError> {
        let Value::Object(params) = to_value(&params) else {
            return Err(ClientError::Protocol(
                "unserializable completion params".into(),
            ));
        };
        self.typed("completion/complete", params, &RequestOptions::default())
            .await
    }

    /// `ping` (legacy; a modern server has none, so this sends `server/discover`).
    pub async fn ping(&self) -> Result<(), ClientError> {
        if self.is_modern() {
            self.round_trip(
                "server/discover",
                &Map::new(),
                &RequestOptions::default(),
                Era::Modern,
            )
            .await
            .map(drop)
        } else {
            self.round_trip(
                "ping",
                &Map::new(),
                &RequestOptions::default(),
                Era::Negotiated,
            )
            .await
            .map(drop)
        }
    }

    /// Asks for log messages at `level` and above: `logging/setLevel` (legacy), or the
    /// `logLevel` `_meta` key on every later request (modern).
    pub async fn set_log_level(&self, level: LoggingLevel) -> Result<(), ClientError> {
        if self.is_modern() {
            *lock(&self.inner.log_level) = Some(level);
            return Ok(());
        }
        let mut params = Map::new();
        params.insert("level".into(), to_value(&level));
        self.round_trip(
            "logging/setLevel",
            &params,
            &RequestOptions::default(),
            Era::Negotiated,
        )
        .await
        .map(drop)
    }
}

pub(super) fn cursor_params(cursor: Option<String>) -> Map<String, Value> {
    let mut params = Map::new();
    if let Some(c) = cursor {
        params.insert("cursor".into(), c.into());
    }
    params
}
