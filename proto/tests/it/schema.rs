//! Serialized values of the main types validate against the official JSON Schemas of both
//! revisions, and our 2025-11-25 fixtures validate and round-trip.

use crate::examples::{legacy_checks, run_all};
use crate::{data_dir, examples, load};
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::OnceLock;
use toolyard_proto::*;

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

fn schema(revision: &str) -> &'static Value {
    static MODERN_SCHEMA: OnceLock<Value> = OnceLock::new();
    static LEGACY_SCHEMA: OnceLock<Value> = OnceLock::new();
    let cell = if revision == MODERN {
        &MODERN_SCHEMA
    } else {
        &LEGACY_SCHEMA
    };
    cell.get_or_init(|| load(&data_dir(revision).join("schema.json")))
}

/// Validates `instance` against `#/$defs/<def>` of a revision's schema.
fn validate(revision: &str, def: &str, instance: &Value) -> Result<(), String> {
    let root = schema(revision);
    if root["$defs"].get(def).is_none() {
        return Err(format!("{revision} has no definition {def}"));
    }
    let mut with_ref = root.clone();
    with_ref["$ref"] = json!(format!("#/$defs/{def}"));
    let validator = jsonschema::validator_for(&with_ref)
        .map_err(|e| format!("{revision} schema does not compile: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} (at {})", e.instance_path))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{revision} {def}: {}\n    instance: {instance}",
            errors.join("; ")
        ))
    }
}

/// Which schemas a sample is checked against.
#[derive(Clone, Copy)]
enum Revs {
    Both,
    Modern,
    Legacy,
}

struct Samples(Vec<(&'static str, Value, Revs)>);

impl Samples {
    fn add<T: Serialize>(&mut self, def: &'static str, revs: Revs, value: T) {
        let v = serde_json::to_value(value).expect("serializes");
        self.0.push((def, v, revs));
    }
}

/// The `_meta` every modern request carries.
fn modern_meta() -> JsonObject {
    let v = json!({
        meta::PROTOCOL_VERSION: "2026-07-28",
        meta::CLIENT_CAPABILITIES: {"elicitation": {"form": {}}},
        meta::CLIENT_INFO: {"name": "test-client", "version": "0.1.0"},
        meta::LOG_LEVEL: "info",
        meta::PROGRESS_TOKEN: "tok-1",
    });
    obj(v)
}

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn icon() -> Icon {
    Icon {
        src: "https://example.com/i.png".into(),
        mime_type: Some("image/png".into()),
        sizes: Some(vec!["48x48".into()]),
        theme: Some("dark".into()),
    }
}

fn annotations() -> Annotations {
    Annotations {
        audience: Some(vec![Role::User, Role::Assistant]),
        priority: Some(0.5),
        last_modified: Some("2025-01-12T15:00:58Z".into()),
    }
}

fn tool() -> Tool {
    Tool {
        title: Some("Weather".into()),
        output_schema: Some(obj(json!({"type": "object", "properties": {"t": {"type": "number"}}}))),
        annotations: Some(ToolAnnotations {
            title: Some("Weather".into()),
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            idempotent_hint: Some(true),
            open_world_hint: Some(true),
        }),
        icons: Some(vec![icon()]),
        meta: Some(obj(json!({"x": 1}))),
        ..Tool::new(
            "get_weather",
            obj(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})),
        )
        .with_description("Weather by city")
    }
}

fn content_blocks() -> Vec<(&'static str, ContentBlock)> {
    vec![
        (
            "TextContent",
            ContentBlock::Text(TextContent {
                annotations: Some(annotations()),
                meta: Some(obj(json!({"k": "v"}))),
                ..TextContent::new("hello")
            }),
        ),
        ("ImageContent", ContentBlock::image("AA==", "image/png")),
        ("AudioContent", ContentBlock::audio("AA==", "audio/wav")),
        (
            "ResourceLink",
            ContentBlock::ResourceLink(ResourceLink {
                title: Some("Main".into()),
                description: Some("entry point".into()),
                mime_type: Some("text/x-rust".into()),
                size: Some(42),
                annotations: Some(annotations()),
                icons: Some(vec![icon()]),
                ..ResourceLink::new("file:///main.rs", "main.rs")
            }),
        ),
        (
            "EmbeddedResource",
            ContentBlock::resource(ResourceContents::text(
                "file:///a.txt",
                Some("text/plain".into()),
                "a",
            )),
        ),
        (
            "EmbeddedResource",
            ContentBlock::resource(ResourceContents::blob("file:///a.bin", None, "AA==")),
        ),
    ]
}

fn primitive_schemas() -> Vec<(&'static str, PrimitiveSchemaDefinition)> {
    use PrimitiveSchemaDefinition as P;
    let option = |c: &str, t: &str| TitledEnumOption {
        r#const: c.into(),
        title: t.into(),
    };
    vec![
        (
            "StringSchema",
            P::String(StringSchema {
                title: Some("Email".into()),
                description: Some("Your email".into()),
                min_length: Some(3),
                max_length: Some(50),
                format: Some(StringFormat::Email),
                default: Some("a@b.c".into()),
                ..StringSchema::default()
            }),
        ),
        (
            "NumberSchema",
            P::Number(NumberSchema {
                r#type: NumberSchemaType::Integer,
                minimum: Some(0.0),
                maximum: Some(10.5),
                default: Some(3.0),
                ..NumberSchema::default()
            }),
        ),
        (
            "BooleanSchema",
            P::Boolean(BooleanSchema {
                default: Some(true),
                ..BooleanSchema::default()
            }),
        ),
        (
            "UntitledSingleSelectEnumSchema",
            P::UntitledSingleSelectEnum(UntitledSingleSelectEnumSchema {
                r#enum: vec!["a".into(), "b".into()],
                default: Some("a".into()),
                ..Default::default()
            }),
        ),
        (
            "TitledSingleSelectEnumSchema",
            P::TitledSingleSelectEnum(TitledSingleSelectEnumSchema {
                one_of: vec![option("#f00", "Red"), option("#0f0", "Green")],
                ..Default::default()
            }),
        ),
        (
            "UntitledMultiSelectEnumSchema",
            P::UntitledMultiSelectEnum(UntitledMultiSelectEnumSchema {
                min_items: Some(1),
                max_items: Some(2),
                items: UntitledEnumItems {
                    r#type: StringSchemaType::String,
                    r#enum: vec!["a".into(), "b".into()],
                },
                default: Some(vec!["a".into()]),
                ..Default::default()
            }),
        ),
        (
            "TitledMultiSelectEnumSchema",
            P::TitledMultiSelectEnum(TitledMultiSelectEnumSchema {
                items: TitledEnumItems {
                    any_of: vec![option("a", "A")],
                },
                ..Default::default()
            }),
        ),
        (
            "LegacyTitledEnumSchema",
            P::LegacyTitledEnum(LegacyTitledEnumSchema {
                r#enum: vec!["a".into()],
                enum_names: Some(vec!["A".into()]),
                ..Default::default()
            }),
        ),
    ]
}

fn sampling_params() -> CreateMessageRequestParams {
    CreateMessageRequestParams {
        messages: vec![
            SamplingMessage::text(Role::User, "Weather in Paris?"),
            SamplingMessage {
                role: Role::Assistant,
                content: SamplingMessageContent::Multiple(vec![
                    SamplingMessageContentBlock::ToolUse(ToolUseContent {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        input: obj(json!({"city": "Paris"})),
                        meta: None,
                    }),
                ]),
                meta: None,
            },
            SamplingMessage {
                role: Role::User,
                content: SamplingMessageContent::Single(SamplingMessageContentBlock::ToolResult(
                    ToolResultContent {
                        tool_use_id: "call_1".into(),
                        content: vec![ContentBlock::text("18C")],
                        structured_content: Some(json!({"t": 18})),
                        is_error: Some(false),
                        meta: None,
                    },
                )),
                meta: None,
            },
        ],
        model_preferences: Some(ModelPreferences {
            hints: Some(vec![ModelHint {
                name: Some("claude".into()),
            }]),
            cost_priority: Some(0.3),
            speed_priority: Some(1.0),
            intelligence_priority: Some(0.0),
        }),
        system_prompt: Some("Be brief.".into()),
        include_context: Some(IncludeContext::ThisServer),
        temperature: Some(0.7),
        max_tokens: 100,
        stop_sequences: Some(vec!["\n\n".into()]),
        metadata: Some(obj(json!({"k": "v"}))),
        tools: Some(vec![tool()]),
        tool_choice: Some(ToolChoice {
            mode: Some(ToolChoiceMode::Required),
        }),
        ..Default::default()
    }
}

fn form_params() -> ElicitRequestParams {
    let mut properties = JsonObject::new();
    for (i, (_, s)) in primitive_schemas().into_iter().enumerate() {
        properties.insert(format!("f{i}"), serde_json::to_value(s).expect("schema"));
    }
    ElicitRequestParams::form(
        "Fill in",
        obj(json!({"type": "object", "properties": properties, "required": ["f0"]})),
    )
}

fn task() -> Task {
    Task {
        task_id: "t-1".into(),
        status: TaskStatus::InputRequired,
        status_message: Some("waiting".into()),
        created_at: "2025-11-25T10:30:00Z".into(),
        last_updated_at: "2025-11-25T10:31:00Z".into(),
        ttl: None,
        poll_interval: Some(500),
    }
}

fn samples() -> Samples {
    use Revs::*;
    let mut s = Samples(Vec::new());
    let complete = Some(ResultType::Complete);
    let ttl = Some(60_000);
    let scope = Some(CacheScope::Public);

    // Common and capabilities.
    s.add(
        "Implementation",
        Both,
        Implementation {
            title: Some("T".into()),
            description: Some("d".into()),
            icons: Some(vec![icon()]),
            website_url: Some("https://example.com".into()),
            ..Implementation::new("n", "1.0.0")
        },
    );
    s.add(
        "ClientCapabilities",
        Both,
        ClientCapabilities {
            roots: Some(RootsCapability::default()),
            sampling: Some(obj(json!({"tools": {}}))),
            elicitation: Some(obj(json!({"form": {}, "url": {}}))),
            experimental: Some(obj(json!({"x": {}}))),
            extensions: Some(obj(json!({"io.modelcontextprotocol/ui": {}}))),
            tasks: None,
        },
    );
    s.add(
        "ServerCapabilities",
        Both,
        ServerCapabilities {
            logging: Some(JsonObject::new()),
            completions: Some(JsonObject::new()),
            prompts: Some(ListChangedCapability {
                list_changed: Some(true),
            }),
            resources: Some(ResourcesCapability {
                subscribe: Some(true),
                list_changed: Some(false),
            }),
            tools: Some(ListChangedCapability::default()),
            ..Default::default()
        },
    );

    // Content.
    for (def, block) in content_blocks() {
        s.add(def, Both, &block);
        s.add("ContentBlock", Both, &block);
    }
    s.add("Annotations", Both, annotations());
    s.add(
        "TextResourceContents",
        Both,
        ResourceContents::text("file:///a", None, "x"),
    );
    s.add(
        "BlobResourceContents",
        Both,
        ResourceContents::blob("file:///a", Some("a/b".into()), "AA=="),
    );

    // Tools.
    s.add("Tool", Both, tool());
    s.add(
        "Tool",
        Legacy,
        Tool {
            execution: Some(ToolExecution {
                task_support: Some(TaskSupport::Optional),
            }),
            ..tool()
        },
    );
    s.add(
        "CallToolRequestParams",
        Modern,
        CallToolRequestParams {
            meta: Some(modern_meta()),
            name: "get_weather".into(),
            arguments: Some(obj(json!({"city": "Paris"}))),
            input_responses: Some(obj(json!({"k": {"action": "decline"}}))),
            request_state: Some("s".into()),
            task: None,
        },
    );
    s.add(
        "CallToolRequestParams",
        Legacy,
        CallToolRequestParams {
            name: "get_weather".into(),
            task: Some(TaskMetadata { ttl: Some(1000) }),
            meta: Some(obj(json!({"progressToken": 3}))),
            ..Default::default()
        },
    );
    for r in [
        CallToolResult::text("ok"),
        CallToolResult::error_text("bad"),
        CallToolResult::structured(json!({"t": 21.5})),
        CallToolResult::new(content_blocks().into_iter().map(|(_, b)| b).collect()),
    ] {
        s.add(
            "CallToolResult",
            Both,
            CallToolResult {
                result_type: complete,
                ..r
            },
        );
    }
    s.add(
        "ListToolsResult",
        Both,
        ListToolsResult {
            tools: vec![tool()],
            next_cursor: Some("c".into()),
            ttl_ms: ttl,
            cache_scope: scope,
            meta: Some(obj(
                json!({meta::SERVER_INFO: {"name": "s", "version": "1"}}),
            )),
            result_type: complete,
        },
    );

    // Resources.
    let resource = Resource {
        title: Some("R".into()),
        description: Some("d".into()),
        mime_type: Some("text/plain".into()),
        size: Some(1),
        annotations: Some(annotations()),
        icons: Some(vec![icon()]),
        ..Resource::new("file:///r", "r")
    };
    s.add("Resource", Both, &resource);
    let template = ResourceTemplate {
        uri_template: "file:///{path}".into(),
        name: "files".into(),
        mime_type: Some("text/plain".into()),
        ..Default::default()
    };
    s.add("ResourceTemplate", Both, &template);
    s.add(
        "ListResourcesResult",
        Both,
        ListResourcesResult {
            resources: vec![resource],
            ttl_ms: ttl,
            cache_scope: scope,
            result_type: complete,
            ..Default::default()
        },
    );
    s.add(
        "ListResourceTemplatesResult",
        Both,
        ListResourceTemplatesResult {
            resource_templates: vec![template],
            next_cursor: Some("n".into()),
            ttl_ms: ttl,
            cache_scope: Some(CacheScope::Private),
            result_type: complete,
            ..Default::default()
        },
    );
    s.add(
        "ReadResourceRequestParams",
        Both,
        ReadResourceRequestParams {
            meta: Some(modern_meta()),
            uri: "file:///r".into(),
            ..Default::default()
        },
    );
    s.add(
        "ReadResourceResult",
        Both,
        ReadResourceResult {
            ttl_ms: Some(0),
            cache_scope: scope,
            result_type: complete,
            ..ReadResourceResult::new(vec![
                ResourceContents::text("file:///r", Some("text/plain".into()), "hi"),
                ResourceContents::blob("file:///b", None, "AA=="),
            ])
        },
    );
    s.add(
        "SubscribeRequestParams",
        Legacy,
        SubscribeRequestParams {
            meta: None,
            uri: "file:///r".into(),
        },
    );
    s.add(
        "UnsubscribeRequestParams",
        Legacy,
        UnsubscribeRequestParams {
            meta: None,
            uri: "file:///r".into(),
        },
    );

    // Prompts and completion.
    let prompt = Prompt {
        name: "review".into(),
        title: Some("Review".into()),
        description: Some("d".into()),
        arguments: Some(vec![PromptArgument {
            name: "code".into(),
            title: Some("Code".into()),
            description: Some("the code".into()),
            required: Some(true),
        }]),
        icons: Some(vec![icon()]),
        meta: None,
    };
    s.add("Prompt", Both, &prompt);
    s.add(
        "ListPromptsResult",
        Both,
        ListPromptsResult {
            prompts: vec![prompt],
            ttl_ms: ttl,
            cache_scope: scope,
            result_type: complete,
            ..Default::default()
        },
    );
    s.add(
        "GetPromptRequestParams",
        Both,
        GetPromptRequestParams {
            meta: Some(modern_meta()),
            name: "review".into(),
            arguments: Some([("code".to_owned(), "x".to_owned())].into()),
            ..Default::default()
        },
    );
    s.add(
        "GetPromptResult",
        Both,
        GetPromptResult {
            description: Some("d".into()),
            messages: content_blocks()
                .into_iter()
                .map(|(_, content)| PromptMessage {
                    role: Role::User,
                    content,
                })
                .chain([PromptMessage::text(Role::Assistant, "ok")])
                .collect(),
            result_type: complete,
            ..Default::default()
        },
    );
    for r in [
        CompleteReference::Prompt(PromptReference {
            name: "review".into(),
            title: Some("R".into()),
        }),
        CompleteReference::ResourceTemplate(ResourceTemplateReference {
            uri: "file:///{p}".into(),
        }),
    ] {
        s.add(
            "CompleteRequestParams",
            Both,
            CompleteRequestParams {
                meta: Some(modern_meta()),
                r#ref: r,
                argument: CompleteArgument {
                    name: "language".into(),
                    value: "py".into(),
                },
                context: Some(CompleteContext {
                    arguments: Some([("a".to_owned(), "b".to_owned())].into()),
                }),
            },
        );
    }
    s.add(
        "CompleteResult",
        Both,
        CompleteResult {
            completion: Completion {
                values: vec!["python".into()],
                total: Some(1),
                has_more: Some(false),
            },
            result_type: complete,
            meta: None,
        },
    );

    // Sampling, elicitation, roots.
    s.add("CreateMessageRequestParams", Both, sampling_params());
    s.add(
        "SamplingMessage",
        Both,
        SamplingMessage::text(Role::User, "hi"),
    );
    s.add(
        "CreateMessageResult",
        Both,
        CreateMessageResult {
            role: Role::Assistant,
            content: SamplingMessageContentBlock::text("Paris").into(),
            model: "m".into(),
            stop_reason: Some("endTurn".into()),
            meta: None,
            result_type: None,
        },
    );
    for (def, p) in primitive_schemas() {
        s.add(def, Both, &p);
        s.add("PrimitiveSchemaDefinition", Both, &p);
    }
    s.add("ElicitRequestParams", Both, form_params());
    if let ElicitRequestParams::Form(f) = form_params() {
        s.add("ElicitRequestFormParams", Both, f);
    }
    s.add(
        "ElicitRequestURLParams",
        Modern,
        ElicitRequestParams::url("Go", "https://x.example/k"),
    );
    if let ElicitRequestParams::Url(u) = ElicitRequestParams::url("Go", "https://x.example/k") {
        let legacy = ElicitRequestURLParams {
            elicitation_id: Some("e-1".into()),
            ..u
        };
        s.add("ElicitRequestURLParams", Legacy, &legacy);
        s.add("ElicitRequestParams", Legacy, &legacy);
        s.add(
            "URLElicitationRequiredError",
            Legacy,
            JsonRpcErrorResponse::new(
                Some(RequestId::from(2)),
                ErrorObject::new(
                    error::code::URL_ELICITATION_REQUIRED,
                    "URL elicitation required",
                )
                .with_data(
                    serde_json::to_value(URLElicitationRequiredErrorData {
                        elicitations: vec![legacy],
                    })
                    .expect("data"),
                ),
            ),
        );
    }
    s.add(
        "ElicitResult",
        Both,
        ElicitResult::accept(obj(
            json!({"name": "octocat", "age": 30, "ok": true, "tags": ["a"]}),
        )),
    );
    s.add(
        "ElicitResult",
        Both,
        ElicitResult::new(ElicitAction::Cancel),
    );
    s.add("Root", Both, Root::new("file:///home", "home"));
    s.add(
        "ListRootsResult",
        Both,
        ListRootsResult {
            roots: vec![Root::new("file:///a", "a")],
            ..Default::default()
        },
    );

    // Notifications and logging.
    s.add(
        "CancelledNotificationParams",
        Both,
        CancelledNotificationParams {
            meta: None,
            request_id: Some(RequestId::from("r-1")),
            reason: Some("user".into()),
        },
    );
    s.add(
        "ProgressNotificationParams",
        Both,
        ProgressNotificationParams {
            meta: None,
            progress_token: ProgressToken::String("t".into()),
            progress: 0.5,
            total: Some(1.0),
            message: Some("half".into()),
        },
    );
    s.add(
        "ResourceUpdatedNotificationParams",
        Both,
        ResourceUpdatedNotificationParams {
            meta: Some(obj(json!({meta::SUBSCRIPTION_ID: "listen-1"}))),
            uri: "file:///r".into(),
        },
    );
    s.add(
        "LoggingMessageNotificationParams",
        Both,
        LoggingMessageNotificationParams {
            logger: Some("db".into()),
            ..LoggingMessageNotificationParams::new(LoggingLevel::Warning, json!({"error": "x"}))
        },
    );
    s.add(
        "SetLevelRequestParams",
        Legacy,
        SetLevelRequestParams {
            meta: None,
            level: LoggingLevel::Debug,
        },
    );
    s.add(
        "PaginatedRequestParams",
        Both,
        PaginatedRequestParams {
            meta: Some(modern_meta()),
            cursor: Some("c".into()),
        },
    );

    // Lifecycle (legacy) and discover (modern).
    let init = InitializeRequestParams {
        meta: None,
        protocol_version: "2025-11-25".into(),
        capabilities: ClientCapabilities {
            roots: Some(RootsCapability {
                list_changed: Some(true),
            }),
            tasks: Some(obj(json!({"list": {}, "cancel": {}}))),
            ..Default::default()
        },
        client_info: Implementation::new("c", "1"),
    };
    s.add("InitializeRequestParams", Legacy, &init);
    s.add(
        "InitializeResult",
        Legacy,
        InitializeResult {
            protocol_version: "2025-11-25".into(),
            capabilities: ServerCapabilities {
                tools: Some(ListChangedCapability {
                    list_changed: Some(true),
                }),
                tasks: Some(obj(json!({"requests": {"tools": {"call": {}}}}))),
                ..Default::default()
            },
            server_info: Implementation::new("s", "1"),
            instructions: Some("use it".into()),
            ..Default::default()
        },
    );
    s.add(
        "DiscoverResult",
        Modern,
        DiscoverResult {
            supported_versions: vec!["2026-07-28".into(), "2025-11-25".into()],
            capabilities: ServerCapabilities::default(),
            instructions: Some("hi".into()),
            ttl_ms: ttl,
            cache_scope: scope,
            meta: Some(obj(
                json!({meta::SERVER_INFO: {"name": "s", "version": "1"}}),
            )),
            result_type: complete,
        },
    );

    // MRTR and subscriptions (modern).
    let mut requests = InputRequests::new();
    requests.insert("login".into(), InputRequest::Elicit(form_params()));
    requests.insert(
        "capital".into(),
        InputRequest::CreateMessage(sampling_params()),
    );
    requests.insert("roots".into(), InputRequest::ListRoots(None));
    requests.insert(
        "roots2".into(),
        InputRequest::ListRoots(Some(RequestParams::default())),
    );
    s.add("InputRequests", Modern, &requests);
    s.add(
        "InputRequiredResult",
        Modern,
        InputRequiredResult {
            input_requests: Some(requests),
            request_state: Some("state".into()),
            meta: None,
            result_type: Some(ResultType::InputRequired),
        },
    );
    s.add(
        "CreateMessageRequest",
        Modern,
        InputRequest::CreateMessage(sampling_params()),
    );
    s.add(
        "ElicitRequest",
        Modern,
        InputRequest::Elicit(ElicitRequestParams::url("m", "https://u")),
    );
    s.add("ListRootsRequest", Modern, InputRequest::ListRoots(None));
    let responses = obj(json!({
        "a": ElicitResult::new(ElicitAction::Decline),
        "b": ListRootsResult::default(),
    }));
    s.add("InputResponses", Modern, &responses);
    s.add(
        "InputResponseRequestParams",
        Modern,
        InputResponseRequestParams {
            meta: Some(modern_meta()),
            input_responses: Some(responses),
            request_state: Some("state".into()),
        },
    );
    let filter = SubscriptionFilter {
        tools_list_changed: Some(true),
        prompts_list_changed: Some(false),
        resources_list_changed: Some(true),
        resource_subscriptions: Some(vec!["file:///r".into()]),
        task_ids: None,
    };
    s.add("SubscriptionFilter", Modern, &filter);
    s.add(
        "SubscriptionsListenRequestParams",
        Modern,
        SubscriptionsListenRequestParams {
            meta: Some(modern_meta()),
            notifications: filter.clone(),
        },
    );
    s.add(
        "SubscriptionsAcknowledgedNotificationParams",
        Modern,
        SubscriptionsAcknowledgedNotificationParams {
            meta: Some(obj(json!({meta::SUBSCRIPTION_ID: 7}))),
            notifications: filter.clone(),
        },
    );
    s.add(
        "SubscriptionsListenResult",
        Modern,
        SubscriptionsListenResult {
            meta: Some(obj(json!({meta::SUBSCRIPTION_ID: "listen-1"}))),
            result_type: complete,
        },
    );

    // Tasks (legacy).
    s.add("Task", Legacy, task());
    s.add(
        "Task",
        Legacy,
        Task {
            ttl: Some(1000),
            status: TaskStatus::Working,
            ..task()
        },
    );
    s.add("TaskMetadata", Legacy, TaskMetadata { ttl: Some(5) });
    s.add(
        "RelatedTaskMetadata",
        Legacy,
        RelatedTaskMetadata {
            task_id: "t".into(),
        },
    );
    s.add(
        "TaskAugmentedRequestParams",
        Legacy,
        TaskAugmentedRequestParams {
            meta: None,
            task: Some(TaskMetadata::default()),
        },
    );
    s.add(
        "CreateTaskResult",
        Legacy,
        CreateTaskResult {
            task: task(),
            meta: None,
            result_type: None,
        },
    );
    s.add(
        "GetTaskResult",
        Legacy,
        GetTaskResult {
            task: task(),
            meta: None,
            result_type: None,
        },
    );
    s.add(
        "CancelTaskResult",
        Legacy,
        CancelTaskResult {
            task: Task {
                status: TaskStatus::Cancelled,
                ..task()
            },
            meta: None,
            result_type: None,
        },
    );
    s.add(
        "GetTaskPayloadResult",
        Legacy,
        GetTaskPayloadResult {
            payload: obj(json!({"content": [{"type": "text", "text": "done"}]})),
            ..Default::default()
        },
    );
    s.add(
        "ListTasksResult",
        Legacy,
        ListTasksResult {
            tasks: vec![task()],
            next_cursor: Some("n".into()),
            ..Default::default()
        },
    );
    s.add(
        "TaskStatusNotificationParams",
        Legacy,
        TaskStatusNotificationParams {
            meta: None,
            task: task(),
        },
    );

    // Messages.
    let modern_req = |r: ClientRequest| JsonRpcRequest::new(1, r);
    s.add(
        "CallToolRequest",
        Modern,
        modern_req(ClientRequest::CallTool(CallToolRequestParams {
            meta: Some(modern_meta()),
            name: "t".into(),
            ..Default::default()
        })),
    );
    s.add(
        "DiscoverRequest",
        Modern,
        modern_req(ClientRequest::Discover(RequestParams {
            meta: Some(modern_meta()),
        })),
    );
    s.add(
        "ListToolsRequest",
        Both,
        modern_req(ClientRequest::ListTools(Some(PaginatedRequestParams {
            meta: Some(modern_meta()),
            cursor: None,
        }))),
    );
    s.add(
        "ListToolsRequest",
        Legacy,
        modern_req(ClientRequest::ListTools(None)),
    );
    s.add(
        "SubscriptionsListenRequest",
        Modern,
        modern_req(ClientRequest::SubscriptionsListen(
            SubscriptionsListenRequestParams {
                meta: Some(modern_meta()),
                notifications: filter,
            },
        )),
    );
    s.add(
        "InitializeRequest",
        Legacy,
        JsonRpcRequest::new("init", ClientRequest::Initialize(init)),
    );
    s.add(
        "PingRequest",
        Legacy,
        JsonRpcRequest::new(2, ClientRequest::Ping(None)),
    );
    s.add(
        "SetLevelRequest",
        Legacy,
        JsonRpcRequest::new(
            2,
            ClientRequest::SetLevel(SetLevelRequestParams {
                meta: None,
                level: LoggingLevel::Info,
            }),
        ),
    );
    s.add(
        "GetTaskRequest",
        Legacy,
        JsonRpcRequest::new(
            2,
            ClientRequest::GetTask(GetTaskRequestParams {
                meta: None,
                task_id: "t".into(),
            }),
        ),
    );
    s.add(
        "ListTasksRequest",
        Legacy,
        JsonRpcRequest::new(2, ServerRequest::ListTasks(None)),
    );
    s.add(
        "ElicitRequest",
        Legacy,
        JsonRpcRequest::new(3, ServerRequest::Elicit(form_params())),
    );
    s.add(
        "CreateMessageRequest",
        Legacy,
        JsonRpcRequest::new(3, ServerRequest::CreateMessage(sampling_params())),
    );
    s.add(
        "ListRootsRequest",
        Legacy,
        JsonRpcRequest::new(4, ServerRequest::ListRoots(None)),
    );
    s.add(
        "JSONRPCRequest",
        Both,
        JsonRpcRequest::new(4, ServerRequest::Ping(None)),
    );
    s.add(
        "InitializedNotification",
        Legacy,
        JsonRpcNotification::new(ClientNotification::Initialized(None)),
    );
    s.add(
        "RootsListChangedNotification",
        Legacy,
        JsonRpcNotification::new(ClientNotification::RootsListChanged(None)),
    );
    s.add(
        "ProgressNotification",
        Both,
        JsonRpcNotification::new(ServerNotification::Progress(ProgressNotificationParams {
            meta: None,
            progress_token: ProgressToken::Number(1),
            progress: 1.0,
            total: None,
            message: None,
        })),
    );
    s.add(
        "ToolListChangedNotification",
        Both,
        JsonRpcNotification::new(ServerNotification::ToolListChanged(None)),
    );
    s.add(
        "ElicitationCompleteNotification",
        Legacy,
        JsonRpcNotification::new(ServerNotification::ElicitationComplete(
            ElicitationCompleteNotificationParams {
                meta: None,
                elicitation_id: "e-1".into(),
            },
        )),
    );
    s.add(
        "TaskStatusNotification",
        Legacy,
        JsonRpcNotification::new(ServerNotification::TaskStatus(
            TaskStatusNotificationParams {
                meta: None,
                task: task(),
            },
        )),
    );
    s.add(
        "JSONRPCNotification",
        Both,
        JsonRpcNotification::new(ServerNotification::PromptListChanged(Some(
            NotificationParams::default(),
        ))),
    );
    s.add(
        "CallToolResultResponse",
        Modern,
        JsonRpcResultResponse::new(
            1,
            CallToolResult {
                result_type: complete,
                ..CallToolResult::text("x")
            },
        ),
    );
    s.add(
        "CallToolResultResponse",
        Modern,
        JsonRpcResultResponse::new(
            1,
            InputRequiredOr::<CallToolResult>::InputRequired(InputRequiredResult {
                request_state: Some("s".into()),
                result_type: Some(ResultType::InputRequired),
                ..Default::default()
            }),
        ),
    );
    s.add(
        "JSONRPCResultResponse",
        Both,
        JsonRpcResultResponse::new(
            1,
            EmptyResult {
                meta: None,
                result_type: complete,
            },
        ),
    );
    s.add(
        "UnsupportedProtocolVersionError",
        Modern,
        JsonRpcErrorResponse::new(
            Some(RequestId::from(1)),
            ErrorObject::unsupported_version("1999-01-01"),
        ),
    );
    s.add(
        "MissingRequiredClientCapabilityError",
        Modern,
        JsonRpcErrorResponse::new(
            Some(RequestId::from(1)),
            ErrorObject::missing_capability(json!({"elicitation": {}})),
        ),
    );
    s.add(
        "JSONRPCErrorResponse",
        Both,
        JsonRpcErrorResponse::new(None, ErrorObject::internal("boom")),
    );
    s
}

#[test]
fn representative_values_validate_against_both_schemas() {
    let mut failures = Vec::new();
    let mut count = 0;
    for (def, value, revs) in samples().0 {
        let revisions: &[&str] = match revs {
            Revs::Both => &[MODERN, LEGACY],
            Revs::Modern => &[MODERN],
            Revs::Legacy => &[LEGACY],
        };
        for rev in revisions {
            count += 1;
            if let Err(e) = validate(rev, def, &value) {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} validations failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn validation_rejects_what_it_should() {
    // A guard against a validator that accepts everything.
    assert!(validate(
        MODERN,
        "CallToolResult",
        &json!({"content": "nope", "resultType": "complete"})
    )
    .is_err());
    assert!(validate(LEGACY, "Task", &json!({"taskId": "t"})).is_err());
    // Modern results must carry resultType; the server splices it in, so a bare one fails.
    let bare = serde_json::to_value(CallToolResult::text("x")).expect("serializes");
    assert!(validate(MODERN, "CallToolResult", &bare).is_err());
}

#[test]
fn official_2026_07_28_examples_validate_against_their_schema() {
    // The examples and the schema agree with each other (a check on the test data itself).
    let mut failures = Vec::new();
    for (folder, path, value) in examples(MODERN) {
        // The roots/list example carries an id the schema's input-request shape ignores.
        if let Err(e) = validate(MODERN, &folder, &value) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn legacy_fixtures_validate_and_round_trip() {
    let mut failures = Vec::new();
    for (folder, path, value) in examples(LEGACY) {
        if let Err(e) = validate(LEGACY, &folder, &value) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let folders = run_all(LEGACY, legacy_checks);
    assert!(
        folders.len() >= 8,
        "too few 2025-11-25 fixtures: {folders:?}"
    );
}
