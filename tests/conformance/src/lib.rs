//! The tools, resources and prompts the official MCP conformance suite expects of a server
//! (`../shared/conformance/SCENARIOS.md`), for both 2025-11-25 and 2026-07-28.

pub mod client_auth;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use toolyard::proto::{
    CallToolResult, ContentBlock, CreateMessageRequestParams, ElicitAction, ElicitRequestParams,
    ErrorObject, GetPromptResult, InputRequest, JsonObject, LoggingLevel, Prompt, PromptArgument,
    PromptMessage, Resource, ResourceContents, ResourceTemplate, Role, SamplingMessage,
    SamplingMessageContent, SamplingMessageContentBlock, TaskSupport, TextContent, Tool,
};
use toolyard::{
    tool_fn, CompletionTarget, Event, HandlerError, PromptDef, RequestContext, ResourceDef, Server,
    ServerBuilder, TemplateDef, ToolDef,
};

/// The 1x1 PNG the suite expects.
pub const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// The WAV the suite expects.
pub const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Deserialize, JsonSchema)]
struct PromptArg {
    /// The prompt to sample with.
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
struct MessageArg {
    /// The message to show the user.
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct NameArg {
    /// Who to greet.
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct ComputeArgs {
    /// How long the computation takes, in seconds.
    #[serde(default)]
    seconds: f64,
    /// A label echoed in the result.
    #[serde(default)]
    label: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct FileArg {
    /// The file to delete.
    filename: String,
}

type R = Result<CallToolResult, HandlerError>;

fn obj(v: serde_json::Value) -> JsonObject {
    match v {
        serde_json::Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

fn text_of(content: &SamplingMessageContent) -> String {
    content
        .blocks()
        .iter()
        .filter_map(|b| match b {
            SamplingMessageContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

fn sampling(text: &str) -> CreateMessageRequestParams {
    CreateMessageRequestParams {
        messages: vec![SamplingMessage {
            role: Role::User,
            content: SamplingMessageContent::Single(SamplingMessageContentBlock::Text(
                TextContent::new(text),
            )),
            meta: None,
        }],
        max_tokens: 100,
        ..Default::default()
    }
}

fn elicit_name() -> ElicitRequestParams {
    ElicitRequestParams::form(
        "What is your name?",
        obj(json!({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})),
    )
}

fn raw_tool(
    name: &str,
    description: &str,
    schema: serde_json::Value,
    f: fn(RequestContext) -> toolyard::BoxFuture<R>,
) -> Result<ToolDef, toolyard::DefinitionError> {
    ToolDef::new(
        Tool {
            name: name.into(),
            description: Some(description.into()),
            input_schema: obj(schema),
            ..Tool::default()
        },
        Arc::new(move |ctx, _args| f(ctx)),
    )
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// The fixture's builder.
pub fn builder() -> ServerBuilder {
    let b = ServerBuilder::new("toolyard-conformance", env!("CARGO_PKG_VERSION")).list_settings(
        toolyard::ListSettings {
            ttl_ms: 300_000,
            ..Default::default()
        },
    );
    let b = legacy_tools(b);
    let b = modern_tools(b);
    let b = task_tools(b.in_memory_tasks());
    let b = resources(b);
    prompts(b)
}

/// Starts the fixture's server.
pub async fn start() -> Result<Server, toolyard::BuildError> {
    let server = builder().start().await?;
    let _ = SERVER.set(server.clone());
    Ok(server)
}

fn legacy_tools(b: ServerBuilder) -> ServerBuilder {
    b.try_tool(tool_fn("test_simple_text", "Returns a simple text response", |_c, _a: NoArgs| async {
        Ok("This is a simple text response for testing.")
    }))
    .try_tool(tool_fn("test_image_content", "Returns an image", |_c, _a: NoArgs| async {
        Ok(ContentBlock::image(PNG, "image/png"))
    }))
    .try_tool(tool_fn("test_audio_content", "Returns audio", |_c, _a: NoArgs| async {
        Ok(ContentBlock::audio(WAV, "audio/wav"))
    }))
    .try_tool(tool_fn("test_embedded_resource", "Returns an embedded resource", |_c, _a: NoArgs| async {
        Ok(ContentBlock::resource(ResourceContents::text(
            "test://embedded-resource",
            Some("text/plain".into()),
            "This is an embedded resource content.",
        )))
    }))
    .try_tool(tool_fn("test_multiple_content_types", "Returns text, an image and a resource", |_c, _a: NoArgs| async {
        Ok(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(PNG, "image/png"),
            ContentBlock::resource(ResourceContents::text(
                "test://mixed-content-resource",
                Some("application/json".into()),
                r#"{"test":"data","value":123}"#,
            )),
        ])
    }))
    .try_tool(tool_fn("test_tool_with_logging", "Logs three messages while running", |ctx: RequestContext, _a: NoArgs| async move {
        for (i, m) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ctx.log(LoggingLevel::Info, Some("conformance"), *m);
        }
        Ok("Tool with logging executed successfully")
    }))
    .try_tool(tool_fn("test_tool_with_progress", "Reports progress 0, 50, 100", |ctx: RequestContext, _a: NoArgs| async move {
        for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ctx.progress(p, Some(100.0), None);
        }
        // Keep the last progress out of the result's write (see the demo's `slow`).
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok("Progress tool executed successfully")
    }))
    .try_tool(tool_fn("test_error_handling", "Always returns an error result", |_c, _a: NoArgs| async {
        Ok(CallToolResult::error_text("This tool intentionally returns an error for testing"))
    }))
    .try_tool(tool_fn("test_sampling", "Samples from the client's model", |ctx: RequestContext, a: PromptArg| async move {
        let r = ctx.sample("sample", sampling(&a.prompt)).await?;
        Ok(format!("LLM response: {}", text_of(&r.content)))
    }))
    .try_tool(tool_fn("test_elicitation", "Elicits a username and email", |ctx: RequestContext, a: MessageArg| async move {
        let schema = obj(json!({"type":"object","properties":{"username":{"type":"string"},"email":{"type":"string"}},"required":["username","email"]}));
        let r = ctx.elicit("user", ElicitRequestParams::form(a.message, schema)).await?;
        Ok(format!("User response: action={}, content={}", json!(r.action), json!(r.content)))
    }))
    .try_tool(tool_fn("test_elicitation_sep1034_defaults", "Elicits with default values (SEP-1034)", |ctx: RequestContext, _a: NoArgs| async move {
        let schema = obj(json!({"type":"object","properties":{
            "name":{"type":"string","default":"John Doe"},
            "age":{"type":"integer","default":30},
            "score":{"type":"number","default":95.5},
            "status":{"type":"string","enum":["active","inactive","pending"],"default":"active"},
            "verified":{"type":"boolean","default":true}},"required":[]}));
        let r = ctx.elicit("defaults", ElicitRequestParams::form("Please review your profile", schema)).await?;
        Ok(format!("Elicitation completed: action={}, content={}", json!(r.action), json!(r.content)))
    }))
    .try_tool(tool_fn("test_elicitation_sep1330_enums", "Elicits with every enum form (SEP-1330)", |ctx: RequestContext, _a: NoArgs| async move {
        let schema = obj(json!({"type":"object","properties":{
            "untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
            "titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
            "legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
            "untitledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"string","enum":["option1","option2","option3"]}},
            "titledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}
        },"required":[]}));
        let r = ctx.elicit("enums", ElicitRequestParams::form("Pick some options", schema)).await?;
        Ok(format!("Elicitation completed: action={}, content={}", json!(r.action), json!(r.content)))
    }))
    .try_tool(raw_tool(
        "json_schema_2020_12_tool",
        "A tool whose JSON Schema 2020-12 input schema must be preserved verbatim",
        json!({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
            "$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
            "properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},
                "contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},
            "allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],
            "if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},
            "then":{"required":["phone"]},
            "else":{"required":["email"]},
            "additionalProperties":false}),
        |_ctx| Box::pin(async { Ok(CallToolResult::text("ok")) }),
    ))
}

fn modern_tools(b: ServerBuilder) -> ServerBuilder {
    b.try_tool(
        raw_tool("test_missing_capability", "Needs the client's sampling capability", json!({"type":"object","properties":{}}), |_ctx| {
            Box::pin(async { Ok(CallToolResult::text("sampling is available")) })
        })
        .map(|t| t.requires_capabilities(obj(json!({"sampling": {}})))),
    )
    .try_tool(tool_fn("test_streaming_elicitation", "Answers without server-to-client requests", |ctx: RequestContext, _a: NoArgs| async move {
        ctx.log(LoggingLevel::Info, None, "streaming");
        Ok("Streaming elicitation tool completed")
    }))
    .try_tool(raw_tool(
        "test_x_mcp_header",
        "Echoes the region argument, which HTTP clients mirror into Mcp-Param-Region",
        json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "level":{"type":"integer"}}}),
        |_ctx| Box::pin(async { Ok(CallToolResult::text("x-mcp-header ok")) }),
    ))
    .try_tool(tool_fn("test_logging_tool", "Logs only when the request asks for a level", |ctx: RequestContext, _a: NoArgs| async move {
        ctx.log(LoggingLevel::Info, Some("conformance"), "a log message");
        Ok("Logging tool completed")
    }))
    .try_tool(tool_fn("test_trigger_tool_change", "Publishes tools/list_changed", |_c, _a: NoArgs| async {
        if let Some(s) = SERVER.get() {
            s.publish(Event::ToolsChanged);
        }
        Ok("tool change published")
    }))
    .try_tool(tool_fn("test_trigger_prompt_change", "Publishes prompts/list_changed", |_c, _a: NoArgs| async {
        if let Some(s) = SERVER.get() {
            s.publish(Event::PromptsChanged);
        }
        Ok("prompt change published")
    }))
    .try_tool(tool_fn("test_input_required_result_elicitation", "Asks for the user's name (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        let r = ctx.elicit("user_name", elicit_name()).await?;
        let name = r.content.as_ref().and_then(|c| c.get("name")).and_then(|v| v.as_str()).unwrap_or("stranger").to_owned();
        Ok(format!("Hello, {name}!"))
    }))
    .try_tool(tool_fn("test_input_required_result_sampling", "Samples (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        let r = ctx.sample("capital", sampling("What is the capital of France?")).await?;
        Ok(format!("LLM response: {}", text_of(&r.content)))
    }))
    .try_tool(tool_fn("test_input_required_result_list_roots", "Lists roots (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        let r = ctx.list_roots().await?;
        Ok(format!("roots: {}", r.roots.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>().join(", ")))
    }))
    .try_tool(tool_fn("test_input_required_result_request_state", "Confirms with state (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        ctx.set_state(&json!({"stage": "confirm"}));
        let r = ctx.elicit("confirm", ElicitRequestParams::form("Confirm?", obj(json!({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})))).await?;
        let stage: Option<serde_json::Value> = ctx.state();
        Ok(format!("state-ok: ok={}, state={}", json!(r.content.and_then(|c| c.get("ok").cloned())), json!(stage)))
    }))
    .try_tool(tool_fn("test_input_required_result_multiple_inputs", "Asks for three inputs at once (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        let answers = ctx.gather(vec![
            ("user_name".into(), InputRequest::Elicit(elicit_name())),
            ("capital".into(), InputRequest::CreateMessage(sampling("What is the capital of France?"))),
            ("roots".into(), InputRequest::ListRoots(Default::default())),
        ]).await?;
        Ok(format!("received {} inputs", answers.len()))
    }))
    .try_tool(tool_fn("test_input_required_result_multi_round", "Asks in two rounds (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        ctx.set_state(&json!({"round": 1}));
        let one = ctx.elicit("step1", ElicitRequestParams::form("Step 1", obj(json!({"type":"object","properties":{"value":{"type":"string"}}})))).await?;
        ctx.set_state(&json!({"round": 2}));
        let two = ctx.elicit("step2", ElicitRequestParams::form("Step 2", obj(json!({"type":"object","properties":{"value":{"type":"string"}}})))).await?;
        Ok(format!("multi-round complete: {} then {}", json!(one.content), json!(two.content)))
    }))
    .try_tool(tool_fn("test_input_required_result_tampered_state", "Rejects tampered state (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        ctx.set_state(&json!({"secret": "value"}));
        let r = ctx.elicit("confirm", elicit_name()).await?;
        Ok(format!("accepted: {}", json!(r.content)))
    }))
    .try_tool(tool_fn("test_input_required_result_capabilities", "Asks only for what the client supports (MRTR)", |ctx: RequestContext, _a: NoArgs| async move {
        let caps = ctx.client_capabilities().clone();
        let mut asks = Vec::new();
        if caps.elicitation.is_some() {
            asks.push(("user_name".to_owned(), InputRequest::Elicit(elicit_name())));
        }
        if caps.sampling.is_some() {
            asks.push(("capital".to_owned(), InputRequest::CreateMessage(sampling("What is the capital of France?"))));
        }
        if asks.is_empty() {
            return Ok("nothing to ask".to_owned());
        }
        let answers = ctx.gather(asks).await?;
        Ok(format!("received {} inputs", answers.len()))
    }))
}

fn confirm_schema() -> JsonObject {
    obj(json!({"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}))
}

/// Sleeps `d`, or fails when the call (or its task) is cancelled.
async fn work(ctx: &RequestContext, d: Duration) -> Result<(), HandlerError> {
    tokio::select! {
        _ = tokio::time::sleep(d) => Ok(()),
        _ = ctx.cancelled() => Err(HandlerError::failed("cancelled")),
    }
}

/// The tasks extension's fixtures (SEP-2663 scenarios `tasks-*`), also reachable as
/// 2025-11-25 task-augmented calls.
fn task_tools(b: ServerBuilder) -> ServerBuilder {
    b.try_tool(tool_fn(
        "greet",
        "Greets someone (never a task)",
        |_c, a: NameArg| async move { Ok(format!("Hello, {}!", a.name)) },
    ))
    .try_tool(
        tool_fn(
            "slow_compute",
            "Computes for `seconds` seconds; a task when the client supports tasks",
            |ctx: RequestContext, a: ComputeArgs| async move {
                work(&ctx, Duration::from_secs_f64(a.seconds.clamp(0.0, 3600.0))).await?;
                Ok(format!(
                    "Computed {} in {}s",
                    a.label.unwrap_or_else(|| "result".into()),
                    a.seconds
                ))
            },
        )
        .map(|t| t.with_task_support(TaskSupport::Optional)),
    )
    .try_tool(
        tool_fn(
            "failing_job",
            "Runs only as a task; fails with a tool error after a second",
            |ctx: RequestContext, _a: NoArgs| async move {
                work(&ctx, Duration::from_secs(1)).await?;
                Err::<String, _>(HandlerError::failed(
                    "The job failed: the input could not be processed",
                ))
            },
        )
        .map(|t| t.with_task_support(TaskSupport::Required)),
    )
    .try_tool(
        tool_fn(
            "protocol_error_job",
            "A task that ends in a JSON-RPC (protocol) error",
            |ctx: RequestContext, _a: NoArgs| async move {
                work(&ctx, Duration::from_millis(200)).await?;
                Err::<String, _>(HandlerError::Protocol(ErrorObject::internal(
                    "The job crashed: internal error",
                )))
            },
        )
        .map(|t| t.with_task_support(TaskSupport::Optional)),
    )
    .try_tool(
        tool_fn(
            "confirm_delete",
            "Asks for confirmation (elicitation) before deleting a file",
            |ctx: RequestContext, a: FileArg| async move {
                let r = ctx
                    .elicit(
                        "confirm_delete",
                        ElicitRequestParams::form(
                            format!("Delete {}?", a.filename),
                            confirm_schema(),
                        ),
                    )
                    .await?;
                let yes = r.action == ElicitAction::Accept
                    && r.content
                        .as_ref()
                        .and_then(|c| c.get("confirm"))
                        .and_then(|v| v.as_bool())
                        == Some(true);
                Ok(if yes {
                    format!("Deleted {}", a.filename)
                } else {
                    format!("Kept {}", a.filename)
                })
            },
        )
        .map(|t| t.with_task_support(TaskSupport::Optional)),
    )
    .try_tool(
        tool_fn(
            "multi_input",
            "Asks two questions at once (elicitation)",
            |ctx: RequestContext, _a: NoArgs| async move {
                let answers = ctx
                    .gather(vec![
                        ("name".into(), InputRequest::Elicit(elicit_name())),
                        (
                            "confirm".into(),
                            InputRequest::Elicit(ElicitRequestParams::form(
                                "Proceed?",
                                confirm_schema(),
                            )),
                        ),
                    ])
                    .await?;
                Ok(format!("received {} inputs", answers.len()))
            },
        )
        .map(|t| t.with_task_support(TaskSupport::Optional)),
    )
    .try_tool(
        tool_fn(
            "test_tool_with_task",
            "Asks for a name (multi-round-trip), then finishes as a task",
            |ctx: RequestContext, _a: NoArgs| async move {
                let r = ctx.elicit("user_name", elicit_name()).await?;
                let name = r
                    .content
                    .as_ref()
                    .and_then(|c| c.get("name"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("stranger")
                    .to_owned();
                ctx.start_task().await;
                work(&ctx, Duration::from_millis(300)).await?;
                Ok(format!("Hello, {name}!"))
            },
        )
        .map(|t| {
            t.with_task_support(TaskSupport::Required)
                .with_deferred_task()
        }),
    )
}

fn text_resource(uri: &str, name: &str, mime: &str, text: &'static str) -> ResourceDef {
    let mut r = Resource::new(uri, name);
    r.title = Some(name.replace('-', " "));
    r.mime_type = Some(mime.into());
    let mime = mime.to_owned();
    ResourceDef::new(
        r,
        Arc::new(move |_ctx, req| {
            let mime = mime.clone();
            Box::pin(
                async move { Ok(vec![ResourceContents::text(req.uri, Some(mime), text)].into()) },
            )
        }),
    )
}

fn resources(b: ServerBuilder) -> ServerBuilder {
    let mut binary = Resource::new("test://static-binary", "static-binary");
    binary.title = Some("Static binary".into());
    binary.mime_type = Some("image/png".into());
    let template = ResourceTemplate {
        uri_template: "test://template/{id}/data".into(),
        name: "template-data".into(),
        title: Some("Template data".into()),
        mime_type: Some("application/json".into()),
        description: Some("Data by id".into()),
        ..Default::default()
    };
    b.resource(text_resource(
        "test://static-text",
        "static-text",
        "text/plain",
        "This is the content of the static text resource.",
    ))
    .resource(ResourceDef::new(
        binary,
        Arc::new(|_ctx, req| {
            Box::pin(async move {
                Ok(vec![ResourceContents::blob(
                    req.uri,
                    Some("image/png".into()),
                    PNG,
                )]
                .into())
            })
        }),
    ))
    .resource(text_resource(
        "test://watched-resource",
        "watched-resource",
        "text/plain",
        "Watched resource content",
    ))
    .try_template(TemplateDef::new(
        template,
        Arc::new(|_ctx, req| {
            Box::pin(async move {
                let id = req.vars.get("id").cloned().unwrap_or_default();
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                Ok(vec![ResourceContents::text(
                    req.uri,
                    Some("application/json".into()),
                    body.to_string(),
                )]
                .into())
            })
        }),
    ))
}

fn prompt(
    name: &str,
    description: &str,
    args: &[(&str, bool)],
    f: toolyard::PromptFn,
) -> PromptDef {
    PromptDef::new(
        Prompt {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            arguments: (!args.is_empty()).then(|| {
                args.iter()
                    .map(|(n, req)| PromptArgument {
                        name: (*n).into(),
                        title: None,
                        description: Some(format!("The {n} argument")),
                        required: Some(*req),
                    })
                    .collect()
            }),
            icons: None,
            meta: None,
        },
        f,
    )
}

fn messages(messages: Vec<PromptMessage>) -> GetPromptResult {
    GetPromptResult {
        description: None,
        messages,
        meta: None,
        result_type: None,
    }
}

fn prompts(b: ServerBuilder) -> ServerBuilder {
    b.prompt(prompt("test_simple_prompt", "A simple prompt", &[], Arc::new(|_c, _a| {
        Box::pin(async { Ok(messages(vec![PromptMessage::text(Role::User, "This is a simple prompt for testing.")])) })
    })))
    .prompt(prompt("test_prompt_with_arguments", "A prompt with two arguments", &[("arg1", true), ("arg2", true)], Arc::new(|_c, a| {
        Box::pin(async move {
            let text = format!("Prompt with arguments: arg1='{}', arg2='{}'", a.get("arg1").cloned().unwrap_or_default(), a.get("arg2").cloned().unwrap_or_default());
            Ok(messages(vec![PromptMessage::text(Role::User, text)]))
        })
    })))
    .prompt(prompt("test_prompt_with_embedded_resource", "A prompt embedding a resource", &[("resourceUri", true)], Arc::new(|_c, a| {
        Box::pin(async move {
            let uri = a.get("resourceUri").cloned().unwrap_or_default();
            Ok(messages(vec![
                PromptMessage { role: Role::User, content: ContentBlock::resource(ResourceContents::text(uri, Some("text/plain".into()), "Embedded resource content for testing.")) },
                PromptMessage::text(Role::User, "Please process the embedded resource above."),
            ]))
        })
    })))
    .prompt(prompt("test_prompt_with_image", "A prompt with an image", &[], Arc::new(|_c, _a| {
        Box::pin(async {
            Ok(messages(vec![
                PromptMessage { role: Role::User, content: ContentBlock::image(PNG, "image/png") },
                PromptMessage::text(Role::User, "Please analyze the image above."),
            ]))
        })
    })))
    .prompt(prompt("test_input_required_result_prompt", "A prompt that asks for context first (MRTR)", &[], Arc::new(|ctx: RequestContext, _a| {
        Box::pin(async move {
            let r = ctx.elicit("user_context", ElicitRequestParams::form("What context should the prompt use?", obj(json!({"type":"object","properties":{"context":{"type":"string"}},"required":["context"]})))).await?;
            let context = r.content.as_ref().and_then(|c| c.get("context")).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            Ok(messages(vec![PromptMessage::text(Role::User, format!("Context: {context}"))]))
        })
    })))
    .completer(
        CompletionTarget::Prompt("test_prompt_with_arguments".into(), "arg1".into()),
        Arc::new(|_, prefix, _| Box::pin(async move {
            ["test", "testValue1", "other"].iter().filter(|v| v.starts_with(&prefix)).map(|v| v.to_string()).collect()
        })),
    )
}
