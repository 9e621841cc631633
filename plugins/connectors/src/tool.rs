//! Building a connector's tools: typed arguments, the schema from their type, behaviour
//! hints, and blocking work (file and SQLite I/O) moved off the async threads.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use std::future::Future;
use toolyard::proto::{Tool, ToolAnnotations};
use toolyard::{DefinitionError, HandlerError, IntoCallToolResult, RequestContext, ToolDef};

/// What a tool does to its environment, as the `annotations` hints say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(all(feature = "filesystem", feature = "fetch", feature = "sqlite")),
    allow(dead_code, reason = "each connector uses some of the effects")
)]
pub(crate) enum Effect {
    /// Reads only.
    Read,
    /// Creates or changes, and calling again changes nothing more.
    Idempotent,
    /// May destroy or overwrite what exists.
    Destructive,
    /// May destroy, and calling again is harmless.
    DestructiveIdempotent,
    /// Reads from the open world (the web).
    Egress,
}

impl Effect {
    fn annotations(self) -> ToolAnnotations {
        let (read_only, destructive, idempotent) = match self {
            Effect::Read | Effect::Egress => (true, false, true),
            Effect::Idempotent => (false, false, true),
            Effect::Destructive => (false, true, false),
            Effect::DestructiveIdempotent => (false, true, true),
        };
        ToolAnnotations {
            title: None,
            read_only_hint: Some(read_only),
            destructive_hint: Some(destructive),
            idempotent_hint: Some(idempotent),
            open_world_hint: Some(self == Effect::Egress),
        }
    }
}

/// A tool taking `A`, described by `description`, with the hints of `effect`.
pub(crate) fn tool<A, R, F, Fut>(
    name: &str,
    description: &str,
    effect: Effect,
    f: F,
) -> Result<ToolDef, DefinitionError>
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
        annotations: Some(effect.annotations()),
        ..Tool::default()
    };
    ToolDef::from_fn(tool, f)
}

#[cfg(any(feature = "filesystem", feature = "sqlite", feature = "fetch"))]
/// Runs blocking work on tokio's blocking pool; a panic in it is a tool error, not a crash.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, HandlerError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, HandlerError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(outcome) => outcome,
        Err(_) => Err(HandlerError::failed(
            "internal error: the operation did not complete",
        )),
    }
}

/// A text result shaped as the reference servers shape theirs: the text as content and as
/// `structuredContent: {"content": text}`.
#[cfg(any(feature = "filesystem", feature = "fetch"))]
#[derive(Debug, Clone)]
pub(crate) struct Text(pub(crate) String);

#[cfg(any(feature = "filesystem", feature = "fetch"))]
impl IntoCallToolResult for Text {
    fn into_call_tool_result(self) -> toolyard::proto::CallToolResult {
        let mut result = toolyard::proto::CallToolResult::text(self.0.clone());
        result.structured_content = Some(serde_json::json!({ "content": self.0 }));
        result
    }
}

/// Asks the user to allow a destructive call (elicitation; a multi-round-trip input request
/// for a 2026-07-28 caller). A decline, a cancel, or a client that cannot be asked stops the
/// call before it changes anything.
#[cfg(any(feature = "filesystem", feature = "sqlite", feature = "postgres"))]
pub(crate) async fn confirm(ctx: &RequestContext, what: String) -> Result<(), HandlerError> {
    use toolyard::proto::{ElicitAction, ElicitRequestParams, JsonObject};
    let mut schema = JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), serde_json::json!({}));
    let asked = ctx
        .elicit(
            "confirm",
            ElicitRequestParams::form(format!("Allow this change? {what}"), schema),
        )
        .await;
    match asked {
        Ok(answer) if answer.action == ElicitAction::Accept => Ok(()),
        Ok(answer) => Err(HandlerError::failed(format!(
            "not done: the user did not allow it ({:?}): {what}",
            answer.action
        ))),
        Err(toolyard::InputError::MissingCapability(_)) => Err(HandlerError::failed(
            "not done: this server asks the user before destructive calls, and the client cannot be asked (no elicitation capability)",
        )),
        Err(e) => Err(HandlerError::from(e)),
    }
}
