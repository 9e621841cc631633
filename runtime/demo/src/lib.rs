//! The built-in demo set `toolyard serve` serves: a small tool, resource and prompt of every
//! kind, so any MCP client can exercise the whole protocol against the binary.
//!
//! Its own crate so the binary, the tests and the benches share it without putting it in
//! `toolyard`'s public API.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use toolyard::proto::{
    CallToolResult, CreateMessageRequestParams, ElicitAction, ElicitRequestParams, GetPromptResult,
    JsonObject, LoggingLevel, Prompt, PromptArgument, PromptMessage, Resource, ResourceContents,
    ResourceTemplate, Role, SamplingMessage, SamplingMessageContent, SamplingMessageContentBlock,
    TaskSupport, TextContent,
};
use toolyard::Json;
use toolyard::{tool_fn, ServerBuilder};
use toolyard::{
    CompletionTarget, HandlerError, PromptDef, RequestContext, ResourceDef, TemplateDef,
};

/// A 1x1 PNG.
pub const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

#[derive(Deserialize, JsonSchema)]
struct SlowArgs {
    /// How many steps to take.
    steps: u32,
    /// Milliseconds per step.
    delay_ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Deserialize, JsonSchema)]
struct SummarizeArgs {
    /// The text to summarize.
    text: String,
    /// Milliseconds to wait before asking the model (to overlap other calls).
    #[serde(default)]
    delay_ms: u64,
}

fn text_of(content: &SamplingMessageContent) -> String {
    content
        .blocks()
        .iter()
        .filter_map(|b| match b {
            SamplingMessageContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn slow(ctx: RequestContext, a: SlowArgs) -> Result<String, HandlerError> {
    let total = f64::from(a.steps);
    // Progress is reported as each step starts, so the last notification never shares a
    // write with the result (some clients drop a progress that arrives with its response).
    for step in 0..a.steps {
        ctx.progress(f64::from(step), Some(total), Some("working"));
        ctx.log(
            LoggingLevel::Info,
            Some("slow"),
            format!("step {} of {}", step + 1, a.steps),
        );
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(a.delay_ms)) => {}
            _ = ctx.cancelled() => return Err(HandlerError::failed("cancelled")),
        }
    }
    Ok(format!("done after {} steps", a.steps))
}

async fn ask_name(ctx: RequestContext, _a: NoArgs) -> Result<String, HandlerError> {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert(
        "properties".into(),
        serde_json::json!({"name": {"type": "string", "description": "Your name"}}),
    );
    schema.insert("required".into(), serde_json::json!(["name"]));
    let answer = ctx
        .elicit(
            "name",
            ElicitRequestParams::form("What is your name?", schema),
        )
        .await?;
    match (answer.action, answer.content) {
        (ElicitAction::Accept, Some(c)) => {
            let name = c.get("name").and_then(|v| v.as_str()).unwrap_or("stranger");
            Ok(format!("Hello, {name}!"))
        }
        (action, _) => Ok(format!("No name given ({action:?}).")),
    }
}

async fn summarize(ctx: RequestContext, a: SummarizeArgs) -> Result<String, HandlerError> {
    if a.delay_ms > 0 {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(a.delay_ms)) => {}
            _ = ctx.cancelled() => return Err(HandlerError::failed("cancelled")),
        }
    }
    let params = CreateMessageRequestParams {
        messages: vec![SamplingMessage {
            role: Role::User,
            content: SamplingMessageContent::Single(SamplingMessageContentBlock::Text(
                TextContent::new(format!("Summarize: {}", a.text)),
            )),
            meta: None,
        }],
        max_tokens: 100,
        ..Default::default()
    };
    let answer = ctx.sample("summary", params).await?;
    Ok(format!("Summary: {}", text_of(&answer.content)))
}

async fn list_roots(ctx: RequestContext, _a: NoArgs) -> Result<String, HandlerError> {
    let roots = ctx.list_roots().await?;
    Ok(roots
        .roots
        .iter()
        .map(|r| r.uri.as_str())
        .collect::<Vec<_>>()
        .join("\n"))
}

fn static_resource(
    uri: &str,
    name: &str,
    mime: &str,
    contents: fn(&str) -> ResourceContents,
) -> ResourceDef {
    let mut resource = Resource::new(uri, name);
    resource.mime_type = Some(mime.into());
    ResourceDef::new(
        resource,
        Arc::new(move |_ctx, req| Box::pin(async move { Ok(vec![contents(&req.uri)].into()) })),
    )
}

/// Adds the demo set to a builder.
pub fn demo(builder: ServerBuilder) -> ServerBuilder {
    let mut user = ResourceTemplate {
        uri_template: "demo://users/{id}".into(),
        name: "user".into(),
        description: Some("A user record by id".into()),
        mime_type: Some("application/json".into()),
        ..Default::default()
    };
    user.title = Some("User".into());
    let users = TemplateDef::new(
        user,
        Arc::new(|_ctx, req| {
            Box::pin(async move {
                let id = req.vars.get("id").cloned().unwrap_or_default();
                let body = serde_json::json!({"id": id, "name": format!("user {id}")});
                Ok(vec![ResourceContents::text(
                    req.uri,
                    Some("application/json".into()),
                    body.to_string(),
                )]
                .into())
            })
        }),
    );
    let greet = PromptDef::new(
        Prompt {
            name: "greet".into(),
            title: Some("Greeting".into()),
            description: Some("Greets someone by name".into()),
            arguments: Some(vec![PromptArgument {
                name: "name".into(),
                title: None,
                description: Some("Who to greet".into()),
                required: Some(true),
            }]),
            icons: None,
            meta: None,
        },
        Arc::new(|_ctx, args| {
            Box::pin(async move {
                let name = args.get("name").cloned().unwrap_or_default();
                Ok(GetPromptResult {
                    description: Some("A greeting".into()),
                    messages: vec![PromptMessage::text(
                        Role::User,
                        format!("Please greet {name} warmly."),
                    )],
                    meta: None,
                    result_type: None,
                })
            })
        }),
    );
    let review = PromptDef::new(
        Prompt {
            name: "code_review".into(),
            title: Some("Code review".into()),
            description: Some("Asks for a review of a piece of code".into()),
            arguments: Some(vec![
                PromptArgument {
                    name: "code".into(),
                    title: None,
                    description: Some("The code".into()),
                    required: Some(true),
                },
                PromptArgument {
                    name: "language".into(),
                    title: None,
                    description: Some("Its language".into()),
                    required: Some(false),
                },
            ]),
            icons: None,
            meta: None,
        },
        Arc::new(|_ctx, args| {
            Box::pin(async move {
                let code = args.get("code").cloned().unwrap_or_default();
                let lang = args
                    .get("language")
                    .cloned()
                    .unwrap_or_else(|| "code".into());
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::text(
                        Role::User,
                        format!("Review this {lang}:\n\n{code}"),
                    )],
                    meta: None,
                    result_type: None,
                })
            })
        }),
    );
    let mut b = builder
        .instructions("Toolyard's demo server: every kind of tool, resource and prompt.")
        .in_memory_tasks()
        .try_tool(tool_fn(
            "echo",
            "Returns the message unchanged",
            |_ctx, a: EchoArgs| async move { Ok(a.message) },
        ))
        .try_tool(
            tool_fn("add", "Adds two numbers", |_ctx, a: AddArgs| async move {
                Ok(Json(Sum { sum: a.a + a.b }))
            })
            .map(|t| t.with_output_schema(toolyard::schema_for::<Sum>())),
        )
        .try_tool(tool_fn(
            "slow",
            "Counts steps slowly, reporting progress and logs; cancellable",
            slow,
        ))
        .try_tool(
            tool_fn(
                "slow_task",
                "Like `slow`, but runs as a task for clients that support tasks \
                     (poll tasks/get, cancel with tasks/cancel)",
                slow,
            )
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(tool_fn(
            "ask_name",
            "Asks the user for their name (elicitation)",
            ask_name,
        ))
        .try_tool(
            tool_fn(
                "ask_name_task",
                "Like `ask_name`, but runs as a task for clients that support tasks (the \
                     question shows in tasks/get, the answer goes in with tasks/update)",
                ask_name,
            )
            .map(|t| t.with_task_support(TaskSupport::Optional)),
        )
        .try_tool(tool_fn(
            "summarize",
            "Asks the client's model to summarize a text (sampling)",
            summarize,
        ))
        .try_tool(tool_fn(
            "list_roots",
            "Lists the client's roots",
            list_roots,
        ))
        .try_tool(tool_fn(
            "whoami",
            "Says who the server's transport authenticated you as (an OAuth token's subject), \
                 or that you are anonymous",
            |ctx: RequestContext, _a: NoArgs| async move {
                Ok(ctx.principal().unwrap_or("anonymous").to_owned())
            },
        ))
        .try_tool(tool_fn(
            "fail",
            "Always fails with an error result",
            |_ctx, _a: NoArgs| async move {
                // A log line inside a request: with telemetry, a record in its trace.
                tracing::warn!(tool = "fail", "failed, as it always does");
                Ok(CallToolResult::error_text("this tool always fails"))
            },
        ))
        .resource(static_resource(
            "demo://readme",
            "readme",
            "text/markdown",
            |uri| {
                ResourceContents::text(
                    uri,
                    Some("text/markdown".into()),
                    "# Toolyard demo\n\nAn MCP runtime built from actors.",
                )
            },
        ))
        .resource(static_resource("demo://logo", "logo", "image/png", |uri| {
            ResourceContents::blob(uri, Some("image/png".into()), PNG_1X1)
        }))
        .try_template(users)
        .prompt(greet)
        .prompt(review);
    b = b.completer(
        CompletionTarget::Prompt("code_review".into(), "language".into()),
        Arc::new(|_ctx, prefix, _args| {
            Box::pin(async move {
                ["rust", "python", "typescript", "go"]
                    .iter()
                    .filter(|l| l.starts_with(&prefix))
                    .map(|l| l.to_string())
                    .collect()
            })
        }),
    );
    b
}
