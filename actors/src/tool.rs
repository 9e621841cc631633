//! Tool definitions: the protocol description, the handler, and the compiled input schema.

use crate::context::RequestContext;
use crate::error::HandlerError;
use crate::exec::Judge;
use crate::forward::{ForwardFn, RawArgs};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use toolyard_proto::headers::{header_params, HeaderParam};
use toolyard_proto::{CallToolResult, ContentBlock, JsonObject, TaskSupport, Tool, ToolExecution};

pub use toolyard_proto::BoxFuture;

/// The handler of a tool.
pub type ToolFn = Arc<
    dyn Fn(RequestContext, ToolArgs) -> BoxFuture<Result<CallToolResult, HandlerError>>
        + Send
        + Sync,
>;

/// A tool's arguments, validated against its input schema.
#[derive(Debug, Clone)]
pub struct ToolArgs(pub(crate) serde_json::Value);

impl ToolArgs {
    /// Wraps arguments (an object).
    pub fn new(value: serde_json::Value) -> Self {
        ToolArgs(value)
    }
    /// Deserializes the arguments into `T`; a mismatch is an argument error naming the problem.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        T::deserialize(&self.0).map_err(|e| HandlerError::invalid_arguments(e.to_string()))
    }
    /// The arguments as JSON.
    pub fn value(&self) -> &serde_json::Value {
        &self.0
    }
    /// The arguments as JSON, owned (a forwarding tool passes them on without a copy).
    pub fn into_value(self) -> serde_json::Value {
        self.0
    }
}

/// How a tool's code is called: with parsed arguments returning a typed result, or, for a
/// tool that forwards to another server, with the raw bytes both ways (`crate::forward`).
#[derive(Clone)]
pub(crate) enum Handler {
    Typed(ToolFn),
    Forwarding(ForwardFn),
}

/// An invalid tool definition.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    /// The input or output schema does not compile.
    #[error("tool `{tool}`: invalid {which} schema: {reason}")]
    Schema {
        /// The tool.
        tool: String,
        /// `input` or `output`.
        which: &'static str,
        /// Why.
        reason: String,
    },
    /// A resource URI template does not parse.
    #[error("invalid URI template `{0}`: {1}")]
    Template(String, String),
}

/// A tool: its description, handler and validators.
pub struct ToolDef {
    pub(crate) tool: Tool,
    pub(crate) handler: Handler,
    /// Compiled on first use: compiling checks the schema against its meta-schema, which
    /// costs ~1 ms and ~1.5 MiB per tool at startup for servers with many tools.
    pub(crate) validator: std::sync::OnceLock<Result<jsonschema::Validator, String>>,
    pub(crate) required_capabilities: Option<JsonObject>,
    pub(crate) header_params: Vec<HeaderParam>,
    /// `execution.taskSupport`, `None` when forbidden (the hot path checks only this).
    pub(crate) task_support: Option<TaskSupport>,
    /// The handler decides when the task starts (`RequestContext::start_task`).
    pub(crate) deferred_task: bool,
    /// Check arguments against the input schema before the handler runs (off for tools
    /// whose handler forwards to a server that checks them itself).
    pub(crate) validate_args: bool,
    /// Who may see and call it (`None`: everyone).
    pub(crate) audience: Option<crate::Audience>,
}

impl std::fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.tool.name)
            .finish()
    }
}

/// The default input schema of a tool without arguments.
pub fn empty_object_schema() -> JsonObject {
    let mut m = JsonObject::new();
    m.insert("type".into(), "object".into());
    m.insert(
        "properties".into(),
        serde_json::Value::Object(JsonObject::new()),
    );
    m
}

impl ToolDef {
    /// A tool from its protocol description and a handler. The input schema is compiled on
    /// the first call (see [`ToolDef::check_schema`] to do it now); its `$schema` picks the
    /// draft (2020-12 when absent).
    pub fn new(tool: Tool, handler: ToolFn) -> Result<Self, DefinitionError> {
        Ok(ToolDef {
            header_params: header_params(&tool.input_schema),
            task_support: crate::tasks::effective_support(
                tool.execution.as_ref().and_then(|e| e.task_support),
            ),
            deferred_task: false,
            tool,
            handler: Handler::Typed(handler),
            validator: std::sync::OnceLock::new(),
            required_capabilities: None,
            validate_args: true,
            audience: None,
        })
    }

    /// A tool that forwards its calls to another server on the byte-level path: the
    /// handler gets the caller's arguments as raw JSON and returns the upstream's result as
    /// raw JSON ([`RawResult`](crate::RawResult)), so neither is parsed into types nor
    /// serialised again. The arguments are not checked against the schema (the upstream
    /// checks them against its own, in whatever dialect it uses); [`ToolDef::map_handler`]
    /// still works, at the cost of a typed parse of the result.
    pub fn forwarding(tool: Tool, handler: ForwardFn) -> Self {
        ToolDef {
            header_params: header_params(&tool.input_schema),
            task_support: crate::tasks::effective_support(
                tool.execution.as_ref().and_then(|e| e.task_support),
            ),
            deferred_task: false,
            tool,
            handler: Handler::Forwarding(handler),
            validator: std::sync::OnceLock::new(),
            required_capabilities: None,
            validate_args: false,
            audience: None,
        }
    }

    /// Leaves argument checking to the handler: for tools that forward to another server
    /// (the gateway), which validates against its own schema, in whatever JSON Schema
    /// dialect it uses.
    pub fn without_validation(mut self) -> Self {
        self.validate_args = false;
        self
    }

    fn compiled(&self) -> &Result<jsonschema::Validator, String> {
        self.validator.get_or_init(|| {
            let schema = serde_json::Value::Object(self.tool.input_schema.clone());
            jsonschema::validator_for(&schema).map_err(|e| e.to_string())
        })
    }

    /// Compiles the input schema now, failing on an invalid one.
    pub fn check_schema(self) -> Result<Self, DefinitionError> {
        match self.compiled() {
            Ok(_) => Ok(self),
            Err(reason) => Err(DefinitionError::Schema {
                tool: self.tool.name.clone(),
                which: "input",
                reason: reason.clone(),
            }),
        }
    }

    /// A tool from a closure taking typed arguments.
    pub fn from_fn<A, R, F, Fut>(tool: Tool, f: F) -> Result<Self, DefinitionError>
    where
        A: DeserializeOwned + Send + 'static,
        R: IntoCallToolResult,
        F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler: ToolFn = Arc::new(move |ctx, args: ToolArgs| {
            let f = f.clone();
            Box::pin(async move {
                let a: A = args.parse()?;
                f(ctx, a)
                    .await
                    .map(IntoCallToolResult::into_call_tool_result)
            })
        });
        Self::new(tool, handler)
    }

    /// Declares client capabilities the tool needs (e.g. `{"elicitation": {}}`); callers
    /// without them get -32021 before the tool runs.
    pub fn requires_capabilities(mut self, required: JsonObject) -> Self {
        self.required_capabilities = Some(required);
        self
    }

    /// Shows and runs the tool only for callers `audience` admits ([`Audience`](crate::Audience)):
    /// anyone else does not see it listed, and calling it answers as an unknown tool does.
    pub fn for_audience(mut self, audience: crate::Audience) -> Self {
        self.audience = Some(audience);
        self
    }

    /// Whether it is only for some callers ([`ToolDef::for_audience`]).
    pub fn has_audience(&self) -> bool {
        self.audience.is_some()
    }

    /// Whether a caller with `principal` may see and call the tool (everyone may, unless
    /// it has an audience).
    pub fn admits(&self, principal: Option<&str>) -> bool {
        crate::audience::Audienced::admits(self, principal)
    }

    /// Declares whether calls may run as tasks (`execution.taskSupport`): `Optional` and
    /// `Required` tools answer a caller that declared the tasks extension (2026-07-28) with a
    /// task handle, and a 2025-11-25 caller that sent `params.task` with `{task}`; `Required`
    /// tools refuse other callers (-32021 naming the extension, or -32601 for 2025-11-25). Needs
    /// a task store on the server (`ServerConfig::tasks`); without one, calls run as usual.
    pub fn with_task_support(mut self, support: TaskSupport) -> Self {
        self.tool.execution = Some(ToolExecution {
            task_support: Some(support),
        });
        self.task_support = crate::tasks::effective_support(Some(support));
        self
    }

    /// For a task-capable tool called by a tasks-extension caller: instead of creating the task
    /// before the handler starts, run the handler as an ordinary request (multi-round-trip
    /// input included) until it calls [`RequestContext::start_task`]. A handler that returns
    /// without calling it answers the request directly.
    pub fn with_deferred_task(mut self) -> Self {
        self.deferred_task = true;
        self
    }

    /// Whether the handler decides when its task starts ([`with_deferred_task`](Self::with_deferred_task)).
    pub fn defers_task(&self) -> bool {
        self.deferred_task
    }

    /// The tool's task support, if it is not forbidden.
    pub fn task_support(&self) -> Option<TaskSupport> {
        self.task_support
    }

    /// Renames the tool (e.g. to prefix it with its service's name).
    pub fn rename(&mut self, name: impl Into<String>) {
        self.tool.name = name.into();
    }

    /// Sets the output schema; results must then carry matching `structuredContent`.
    pub fn with_output_schema(mut self, schema: JsonObject) -> Self {
        self.tool.output_schema = Some(schema);
        self
    }

    /// Arguments the HTTP transport mirrors into `Mcp-Param-*` headers.
    pub fn header_params(&self) -> &[HeaderParam] {
        &self.header_params
    }

    /// Wraps the handler (telemetry, auditing): `wrap` gets the current one and returns
    /// its replacement; the definition (schema, validation, task support) is unchanged.
    ///
    /// A forwarding tool's handler is first made a typed one (its raw result parsed), so the
    /// wrapper sees what it expects.
    pub fn map_handler(mut self, wrap: impl FnOnce(ToolFn) -> ToolFn) -> Self {
        let typed = match self.handler {
            Handler::Typed(f) => f,
            Handler::Forwarding(f) => typed_from_forwarding(f),
        };
        self.handler = Handler::Typed(wrap(typed));
        self
    }

    /// The protocol description.
    pub fn tool(&self) -> &Tool {
        &self.tool
    }

    /// Checks arguments against the input schema; the error names the offending field.
    pub(crate) fn validate(&self, args: &serde_json::Value) -> Result<(), HandlerError> {
        if !self.validate_args {
            return Ok(());
        }
        let v = match self.compiled() {
            Ok(v) => v,
            Err(reason) => {
                return Err(HandlerError::Protocol(
                    toolyard_proto::ErrorObject::internal(format!(
                        "tool `{}` has an invalid input schema: {reason}",
                        self.tool.name
                    )),
                ))
            }
        };
        if v.is_valid(args) {
            return Ok(());
        }
        let problems: Vec<String> = v
            .iter_errors(args)
            .take(5)
            .map(|e| {
                let path = e.instance_path.to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        Err(HandlerError::invalid_arguments(problems.join("; ")))
    }
}

/// A forwarding handler behind the typed interface: the arguments serialised, the result
/// parsed.
fn typed_from_forwarding(f: ForwardFn) -> ToolFn {
    Arc::new(move |ctx, args: ToolArgs| {
        let f = f.clone();
        Box::pin(async move {
            let text = serde_json::value::to_raw_value(&args.0)
                .map_err(|e| HandlerError::invalid_arguments(e.to_string()))?;
            let raw = RawArgs::new(Some(text))?;
            let result = f(ctx, raw).await?;
            result
                .to_call_tool_result()
                .map_err(|e| HandlerError::failed(e.to_string()))
        })
    })
}

/// What a tool may return.
pub trait IntoCallToolResult {
    /// Converts into the protocol result.
    fn into_call_tool_result(self) -> CallToolResult;
}

impl IntoCallToolResult for CallToolResult {
    fn into_call_tool_result(self) -> CallToolResult {
        self
    }
}

impl IntoCallToolResult for String {
    fn into_call_tool_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl IntoCallToolResult for &'static str {
    fn into_call_tool_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl IntoCallToolResult for ContentBlock {
    fn into_call_tool_result(self) -> CallToolResult {
        Vec::from([self]).into_call_tool_result()
    }
}

impl IntoCallToolResult for Vec<ContentBlock> {
    fn into_call_tool_result(self) -> CallToolResult {
        let mut r = CallToolResult::text("");
        r.content = self;
        r
    }
}

impl IntoCallToolResult for () {
    fn into_call_tool_result(self) -> CallToolResult {
        Vec::new().into_call_tool_result()
    }
}

/// Structured output: serialized into `structuredContent` (and a text copy for clients that
/// only read content). Tools returning `Json<T>` with `T: JsonSchema` declare `outputSchema`.
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoCallToolResult for Json<T> {
    fn into_call_tool_result(self) -> CallToolResult {
        match serde_json::to_value(&self.0) {
            Ok(v) => CallToolResult::structured(v),
            Err(e) => CallToolResult::error_text(format!("result not serializable: {e}")),
        }
    }
}

impl Judge for CallToolResult {
    fn outcome(&self) -> crate::middleware::Outcome {
        if self.is_error == Some(true) {
            crate::middleware::Outcome::ToolError
        } else {
            crate::middleware::Outcome::Ok
        }
    }
}

impl crate::audience::Audienced for ToolDef {
    fn audience(&self) -> Option<&crate::Audience> {
        self.audience.as_ref()
    }
    fn listed_alike(&self, other: &Self) -> bool {
        self.tool == other.tool
            && self.task_support == other.task_support
            && self.required_capabilities == other.required_capabilities
    }
}
