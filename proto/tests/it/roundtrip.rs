//! Property-based round trips: for arbitrary values `x` of every type,
//! `from_value(to_value(x)) == x`.

use proptest::collection::{btree_map, vec};
use proptest::option::of;
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Debug;
use toolyard_proto::*;

type S<T> = BoxedStrategy<T>;

fn check<T: Serialize + DeserializeOwned + PartialEq + Debug>(x: &T) -> Result<(), TestCaseError> {
    let v = serde_json::to_value(x).map_err(|e| TestCaseError::fail(format!("serialize: {e}")))?;
    let back: T = serde_json::from_value(v.clone())
        .map_err(|e| TestCaseError::fail(format!("deserialize {v}: {e}")))?;
    prop_assert_eq!(&back, x, "via {}", v);
    Ok(())
}

// ---- leaves ------------------------------------------------------------------------------

fn s() -> S<String> {
    "[a-zA-Z0-9 _:/.é-]{0,8}".boxed()
}
fn os() -> S<Option<String>> {
    of(s()).boxed()
}
fn ob() -> S<Option<bool>> {
    of(any::<bool>()).boxed()
}
fn ou() -> S<Option<u64>> {
    of(any::<u64>()).boxed()
}
fn num() -> S<f64> {
    prop_oneof![
        -1e12..1e12f64,
        (-1000i64..1000).prop_map(|i| i as f64),
        Just(0.5),
        Just(1e300),
    ]
    .boxed()
}
fn onum() -> S<Option<f64>> {
    of(num()).boxed()
}
fn strings() -> S<Vec<String>> {
    vec(s(), 0..3).boxed()
}
fn json() -> S<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        num().prop_map(Value::from),
        s().prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..3).prop_map(Value::Array),
            btree_map(s(), inner, 0..3).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}
/// Any JSON value but `null` (an `Option<Value>` reads `null` as `None`).
fn json_some() -> S<Value> {
    json().prop_filter("not null", |v| !v.is_null()).boxed()
}
fn obj() -> S<JsonObject> {
    btree_map(s(), json(), 0..3)
        .prop_map(|m| m.into_iter().collect())
        .boxed()
}
fn meta() -> S<Option<JsonObject>> {
    of(obj()).boxed()
}
fn request_id() -> S<RequestId> {
    prop_oneof![
        any::<i64>().prop_map(RequestId::Number),
        s().prop_map(|x| RequestId::from(x.as_str())),
    ]
    .boxed()
}
fn progress_token() -> S<ProgressToken> {
    prop_oneof![
        any::<i64>().prop_map(ProgressToken::Number),
        s().prop_map(ProgressToken::String),
    ]
    .boxed()
}
fn result_type() -> S<Option<ResultType>> {
    of(prop_oneof![
        Just(ResultType::Complete),
        Just(ResultType::InputRequired)
    ])
    .boxed()
}
fn cache_scope() -> S<Option<CacheScope>> {
    of(prop_oneof![
        Just(CacheScope::Public),
        Just(CacheScope::Private)
    ])
    .boxed()
}
fn role() -> S<Role> {
    prop_oneof![Just(Role::User), Just(Role::Assistant)].boxed()
}
fn level() -> S<LoggingLevel> {
    prop_oneof![
        Just(LoggingLevel::Debug),
        Just(LoggingLevel::Info),
        Just(LoggingLevel::Notice),
        Just(LoggingLevel::Warning),
        Just(LoggingLevel::Error),
        Just(LoggingLevel::Critical),
        Just(LoggingLevel::Alert),
        Just(LoggingLevel::Emergency),
    ]
    .boxed()
}

// ---- common and capabilities -------------------------------------------------------------

fn icon() -> S<Icon> {
    (s(), os(), of(strings()), os())
        .prop_map(|(src, mime_type, sizes, theme)| Icon {
            src,
            mime_type,
            sizes,
            theme,
        })
        .boxed()
}
fn icons() -> S<Option<Vec<Icon>>> {
    of(vec(icon(), 0..2)).boxed()
}
fn implementation() -> S<Implementation> {
    (s(), os(), s(), os(), icons(), os())
        .prop_map(
            |(name, title, version, description, icons, website_url)| Implementation {
                name,
                title,
                version,
                description,
                icons,
                website_url,
            },
        )
        .boxed()
}
fn list_changed() -> S<ListChangedCapability> {
    ob().prop_map(|list_changed| ListChangedCapability { list_changed })
        .boxed()
}
fn client_capabilities() -> S<ClientCapabilities> {
    (
        of(obj()),
        of(ob().prop_map(|list_changed| RootsCapability { list_changed })),
        of(obj()),
        of(obj()),
        of(obj()),
        of(obj()),
    )
        .prop_map(
            |(experimental, roots, sampling, elicitation, tasks, extensions)| ClientCapabilities {
                experimental,
                roots,
                sampling,
                elicitation,
                tasks,
                extensions,
            },
        )
        .boxed()
}
fn server_capabilities() -> S<ServerCapabilities> {
    (
        of(obj()),
        of(obj()),
        of(obj()),
        of(list_changed()),
        of(
            (ob(), ob()).prop_map(|(subscribe, list_changed)| ResourcesCapability {
                subscribe,
                list_changed,
            }),
        ),
        of(list_changed()),
        of(obj()),
        of(obj()),
    )
        .prop_map(
            |(experimental, logging, completions, prompts, resources, tools, tasks, extensions)| {
                ServerCapabilities {
                    experimental,
                    logging,
                    completions,
                    prompts,
                    resources,
                    tools,
                    tasks,
                    extensions,
                }
            },
        )
        .boxed()
}

// ---- base, content and resources ---------------------------------------------------------

fn request_params() -> S<RequestParams> {
    meta().prop_map(|meta| RequestParams { meta }).boxed()
}
fn notification_params() -> S<NotificationParams> {
    meta().prop_map(|meta| NotificationParams { meta }).boxed()
}
fn empty_result() -> S<EmptyResult> {
    (meta(), result_type())
        .prop_map(|(meta, result_type)| EmptyResult { meta, result_type })
        .boxed()
}
fn annotations() -> S<Annotations> {
    (of(vec(role(), 0..3)), onum(), os())
        .prop_map(|(audience, priority, last_modified)| Annotations {
            audience,
            priority,
            last_modified,
        })
        .boxed()
}
fn text_content() -> S<TextContent> {
    (s(), of(annotations()), meta())
        .prop_map(|(text, annotations, meta)| TextContent {
            text,
            annotations,
            meta,
        })
        .boxed()
}
fn image_content() -> S<ImageContent> {
    (s(), s(), of(annotations()), meta())
        .prop_map(|(data, mime_type, annotations, meta)| ImageContent {
            data,
            mime_type,
            annotations,
            meta,
        })
        .boxed()
}
fn audio_content() -> S<AudioContent> {
    (s(), s(), of(annotations()), meta())
        .prop_map(|(data, mime_type, annotations, meta)| AudioContent {
            data,
            mime_type,
            annotations,
            meta,
        })
        .boxed()
}
fn resource_link() -> S<ResourceLink> {
    (
        (s(), s(), os(), os(), os()),
        (ou(), of(annotations()), icons(), meta()),
    )
        .prop_map(
            |((uri, name, title, description, mime_type), (size, annotations, icons, meta))| {
                ResourceLink {
                    uri,
                    name,
                    title,
                    description,
                    mime_type,
                    size,
                    annotations,
                    icons,
                    meta,
                }
            },
        )
        .boxed()
}
fn text_resource_contents() -> S<TextResourceContents> {
    (s(), os(), s(), meta())
        .prop_map(|(uri, mime_type, text, meta)| TextResourceContents {
            uri,
            mime_type,
            text,
            meta,
        })
        .boxed()
}
fn blob_resource_contents() -> S<BlobResourceContents> {
    (s(), os(), s(), meta())
        .prop_map(|(uri, mime_type, blob, meta)| BlobResourceContents {
            uri,
            mime_type,
            blob,
            meta,
        })
        .boxed()
}
fn resource_contents() -> S<ResourceContents> {
    prop_oneof![
        text_resource_contents().prop_map(ResourceContents::Text),
        blob_resource_contents().prop_map(ResourceContents::Blob),
    ]
    .boxed()
}
fn embedded_resource() -> S<EmbeddedResource> {
    (resource_contents(), of(annotations()), meta())
        .prop_map(|(resource, annotations, meta)| EmbeddedResource {
            resource,
            annotations,
            meta,
        })
        .boxed()
}
fn content_block() -> S<ContentBlock> {
    prop_oneof![
        text_content().prop_map(ContentBlock::Text),
        image_content().prop_map(ContentBlock::Image),
        audio_content().prop_map(ContentBlock::Audio),
        resource_link().prop_map(ContentBlock::ResourceLink),
        embedded_resource().prop_map(ContentBlock::Resource),
    ]
    .boxed()
}
fn resource() -> S<Resource> {
    (
        (s(), s(), os(), os(), os()),
        (ou(), of(annotations()), icons(), meta()),
    )
        .prop_map(
            |((uri, name, title, description, mime_type), (size, annotations, icons, meta))| {
                Resource {
                    uri,
                    name,
                    title,
                    description,
                    mime_type,
                    size,
                    annotations,
                    icons,
                    meta,
                }
            },
        )
        .boxed()
}
fn resource_template() -> S<ResourceTemplate> {
    (
        (s(), s(), os(), os()),
        (os(), of(annotations()), icons(), meta()),
    )
        .prop_map(
            |((uri_template, name, title, description), (mime_type, annotations, icons, meta))| {
                ResourceTemplate {
                    uri_template,
                    name,
                    title,
                    description,
                    mime_type,
                    annotations,
                    icons,
                    meta,
                }
            },
        )
        .boxed()
}
fn resource_request_params() -> S<ResourceRequestParams> {
    (meta(), s())
        .prop_map(|(meta, uri)| ResourceRequestParams { meta, uri })
        .boxed()
}
fn input_responses() -> S<Option<InputResponses>> {
    of(obj()).boxed()
}
fn read_resource_request_params() -> S<ReadResourceRequestParams> {
    (meta(), s(), input_responses(), os())
        .prop_map(
            |(meta, uri, input_responses, request_state)| ReadResourceRequestParams {
                meta,
                uri,
                input_responses,
                request_state,
            },
        )
        .boxed()
}
fn list_resources_result() -> S<ListResourcesResult> {
    (
        vec(resource(), 0..2),
        os(),
        ou(),
        cache_scope(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(resources, next_cursor, ttl_ms, cache_scope, meta, result_type)| {
                ListResourcesResult {
                    resources,
                    next_cursor,
                    ttl_ms,
                    cache_scope,
                    meta,
                    result_type,
                }
            },
        )
        .boxed()
}
fn list_resource_templates_result() -> S<ListResourceTemplatesResult> {
    (
        vec(resource_template(), 0..2),
        os(),
        ou(),
        cache_scope(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(resource_templates, next_cursor, ttl_ms, cache_scope, meta, result_type)| {
                ListResourceTemplatesResult {
                    resource_templates,
                    next_cursor,
                    ttl_ms,
                    cache_scope,
                    meta,
                    result_type,
                }
            },
        )
        .boxed()
}
fn read_resource_result() -> S<ReadResourceResult> {
    (
        vec(resource_contents(), 0..3),
        ou(),
        cache_scope(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(contents, ttl_ms, cache_scope, meta, result_type)| ReadResourceResult {
                contents,
                ttl_ms,
                cache_scope,
                meta,
                result_type,
            },
        )
        .boxed()
}

// ---- tools and tasks ---------------------------------------------------------------------

fn task_metadata() -> S<TaskMetadata> {
    ou().prop_map(|ttl| TaskMetadata { ttl }).boxed()
}
fn task_support() -> S<TaskSupport> {
    prop_oneof![
        Just(TaskSupport::Forbidden),
        Just(TaskSupport::Optional),
        Just(TaskSupport::Required),
    ]
    .boxed()
}
fn tool_annotations() -> S<ToolAnnotations> {
    (os(), ob(), ob(), ob(), ob())
        .prop_map(
            |(title, read_only_hint, destructive_hint, idempotent_hint, open_world_hint)| {
                ToolAnnotations {
                    title,
                    read_only_hint,
                    destructive_hint,
                    idempotent_hint,
                    open_world_hint,
                }
            },
        )
        .boxed()
}
fn tool_execution() -> S<ToolExecution> {
    of(task_support())
        .prop_map(|task_support| ToolExecution { task_support })
        .boxed()
}
fn tool() -> S<Tool> {
    (
        (s(), os(), os(), obj(), of(obj())),
        (
            of(tool_annotations()),
            icons(),
            of(tool_execution()),
            meta(),
        ),
    )
        .prop_map(
            |(
                (name, title, description, input_schema, output_schema),
                (annotations, icons, execution, meta),
            )| {
                Tool {
                    name,
                    title,
                    description,
                    input_schema,
                    output_schema,
                    annotations,
                    icons,
                    execution,
                    meta,
                }
            },
        )
        .boxed()
}
fn call_tool_request_params() -> S<CallToolRequestParams> {
    (
        meta(),
        s(),
        of(obj()),
        input_responses(),
        os(),
        of(task_metadata()),
    )
        .prop_map(
            |(meta, name, arguments, input_responses, request_state, task)| CallToolRequestParams {
                meta,
                name,
                arguments,
                input_responses,
                request_state,
                task,
            },
        )
        .boxed()
}
fn call_tool_result() -> S<CallToolResult> {
    (
        vec(content_block(), 0..3),
        of(json_some()),
        ob(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(content, structured_content, is_error, meta, result_type)| CallToolResult {
                content,
                structured_content,
                is_error,
                meta,
                result_type,
            },
        )
        .boxed()
}
fn list_tools_result() -> S<ListToolsResult> {
    (
        vec(tool(), 0..2),
        os(),
        ou(),
        cache_scope(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(tools, next_cursor, ttl_ms, cache_scope, meta, result_type)| ListToolsResult {
                tools,
                next_cursor,
                ttl_ms,
                cache_scope,
                meta,
                result_type,
            },
        )
        .boxed()
}
fn task_status() -> S<TaskStatus> {
    prop_oneof![
        Just(TaskStatus::Working),
        Just(TaskStatus::InputRequired),
        Just(TaskStatus::Completed),
        Just(TaskStatus::Failed),
        Just(TaskStatus::Cancelled),
    ]
    .boxed()
}
fn task() -> S<Task> {
    (s(), task_status(), os(), s(), s(), ou(), ou())
        .prop_map(
            |(task_id, status, status_message, created_at, last_updated_at, ttl, poll_interval)| {
                Task {
                    task_id,
                    status,
                    status_message,
                    created_at,
                    last_updated_at,
                    ttl,
                    poll_interval,
                }
            },
        )
        .boxed()
}
fn get_task_request_params() -> S<GetTaskRequestParams> {
    (meta(), s())
        .prop_map(|(meta, task_id)| GetTaskRequestParams { meta, task_id })
        .boxed()
}
fn get_task_result() -> S<GetTaskResult> {
    (task(), meta(), result_type())
        .prop_map(|(task, meta, result_type)| GetTaskResult {
            task,
            meta,
            result_type,
        })
        .boxed()
}
fn get_task_payload_result() -> S<GetTaskPayloadResult> {
    (
        meta(),
        result_type(),
        btree_map("p_[a-z]{0,4}", json(), 0..3),
    )
        .prop_map(|(meta, result_type, payload)| GetTaskPayloadResult {
            meta,
            result_type,
            payload: payload.into_iter().collect(),
        })
        .boxed()
}
fn create_task_result() -> S<CreateTaskResult> {
    (task(), meta(), result_type())
        .prop_map(|(task, meta, result_type)| CreateTaskResult {
            task,
            meta,
            result_type,
        })
        .boxed()
}
fn list_tasks_result() -> S<ListTasksResult> {
    (vec(task(), 0..2), os(), meta(), result_type())
        .prop_map(|(tasks, next_cursor, meta, result_type)| ListTasksResult {
            tasks,
            next_cursor,
            meta,
            result_type,
        })
        .boxed()
}
fn task_status_notification_params() -> S<TaskStatusNotificationParams> {
    (meta(), task())
        .prop_map(|(meta, task)| TaskStatusNotificationParams { meta, task })
        .boxed()
}
fn task_augmented_request_params() -> S<TaskAugmentedRequestParams> {
    (meta(), of(task_metadata()))
        .prop_map(|(meta, task)| TaskAugmentedRequestParams { meta, task })
        .boxed()
}
fn related_task_metadata() -> S<RelatedTaskMetadata> {
    s().prop_map(|task_id| RelatedTaskMetadata { task_id })
        .boxed()
}

// ---- prompts and completion --------------------------------------------------------------

fn prompt_argument() -> S<PromptArgument> {
    (s(), os(), os(), ob())
        .prop_map(|(name, title, description, required)| PromptArgument {
            name,
            title,
            description,
            required,
        })
        .boxed()
}
fn prompt() -> S<Prompt> {
    (
        s(),
        os(),
        os(),
        of(vec(prompt_argument(), 0..2)),
        icons(),
        meta(),
    )
        .prop_map(
            |(name, title, description, arguments, icons, meta)| Prompt {
                name,
                title,
                description,
                arguments,
                icons,
                meta,
            },
        )
        .boxed()
}
fn prompt_message() -> S<PromptMessage> {
    (role(), content_block())
        .prop_map(|(role, content)| PromptMessage { role, content })
        .boxed()
}
fn string_map() -> S<std::collections::BTreeMap<String, String>> {
    btree_map(s(), s(), 0..3).boxed()
}
fn get_prompt_request_params() -> S<GetPromptRequestParams> {
    (meta(), s(), of(string_map()), input_responses(), os())
        .prop_map(|(meta, name, arguments, input_responses, request_state)| {
            GetPromptRequestParams {
                meta,
                name,
                arguments,
                input_responses,
                request_state,
            }
        })
        .boxed()
}
fn get_prompt_result() -> S<GetPromptResult> {
    (os(), vec(prompt_message(), 0..3), meta(), result_type())
        .prop_map(
            |(description, messages, meta, result_type)| GetPromptResult {
                description,
                messages,
                meta,
                result_type,
            },
        )
        .boxed()
}
fn list_prompts_result() -> S<ListPromptsResult> {
    (
        vec(prompt(), 0..2),
        os(),
        ou(),
        cache_scope(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(prompts, next_cursor, ttl_ms, cache_scope, meta, result_type)| ListPromptsResult {
                prompts,
                next_cursor,
                ttl_ms,
                cache_scope,
                meta,
                result_type,
            },
        )
        .boxed()
}
fn prompt_reference() -> S<PromptReference> {
    (s(), os())
        .prop_map(|(name, title)| PromptReference { name, title })
        .boxed()
}
fn resource_template_reference() -> S<ResourceTemplateReference> {
    s().prop_map(|uri| ResourceTemplateReference { uri })
        .boxed()
}
fn complete_reference() -> S<CompleteReference> {
    prop_oneof![
        prompt_reference().prop_map(CompleteReference::Prompt),
        resource_template_reference().prop_map(CompleteReference::ResourceTemplate),
    ]
    .boxed()
}
fn complete_request_params() -> S<CompleteRequestParams> {
    (
        meta(),
        complete_reference(),
        (s(), s()).prop_map(|(name, value)| CompleteArgument { name, value }),
        of(of(string_map()).prop_map(|arguments| CompleteContext { arguments })),
    )
        .prop_map(|(meta, r, argument, context)| CompleteRequestParams {
            meta,
            r#ref: r,
            argument,
            context,
        })
        .boxed()
}
fn complete_result() -> S<CompleteResult> {
    ((strings(), ou(), ob()), meta(), result_type())
        .prop_map(
            |((values, total, has_more), meta, result_type)| CompleteResult {
                completion: Completion {
                    values,
                    total,
                    has_more,
                },
                meta,
                result_type,
            },
        )
        .boxed()
}

// ---- sampling ----------------------------------------------------------------------------

fn tool_use_content() -> S<ToolUseContent> {
    (s(), s(), obj(), meta())
        .prop_map(|(id, name, input, meta)| ToolUseContent {
            id,
            name,
            input,
            meta,
        })
        .boxed()
}
fn tool_result_content() -> S<ToolResultContent> {
    (
        s(),
        vec(content_block(), 0..2),
        of(json_some()),
        ob(),
        meta(),
    )
        .prop_map(
            |(tool_use_id, content, structured_content, is_error, meta)| ToolResultContent {
                tool_use_id,
                content,
                structured_content,
                is_error,
                meta,
            },
        )
        .boxed()
}
fn sampling_block() -> S<SamplingMessageContentBlock> {
    prop_oneof![
        text_content().prop_map(SamplingMessageContentBlock::Text),
        image_content().prop_map(SamplingMessageContentBlock::Image),
        audio_content().prop_map(SamplingMessageContentBlock::Audio),
        tool_use_content().prop_map(SamplingMessageContentBlock::ToolUse),
        tool_result_content().prop_map(SamplingMessageContentBlock::ToolResult),
    ]
    .boxed()
}
fn sampling_content() -> S<SamplingMessageContent> {
    prop_oneof![
        sampling_block().prop_map(SamplingMessageContent::Single),
        vec(sampling_block(), 0..3).prop_map(SamplingMessageContent::Multiple),
    ]
    .boxed()
}
fn sampling_message() -> S<SamplingMessage> {
    (role(), sampling_content(), meta())
        .prop_map(|(role, content, meta)| SamplingMessage {
            role,
            content,
            meta,
        })
        .boxed()
}
fn model_preferences() -> S<ModelPreferences> {
    (
        of(vec(os().prop_map(|name| ModelHint { name }), 0..2)),
        onum(),
        onum(),
        onum(),
    )
        .prop_map(
            |(hints, cost_priority, speed_priority, intelligence_priority)| ModelPreferences {
                hints,
                cost_priority,
                speed_priority,
                intelligence_priority,
            },
        )
        .boxed()
}
fn include_context() -> S<IncludeContext> {
    prop_oneof![
        Just(IncludeContext::None),
        Just(IncludeContext::ThisServer),
        Just(IncludeContext::AllServers),
    ]
    .boxed()
}
fn tool_choice() -> S<ToolChoice> {
    of(prop_oneof![
        Just(ToolChoiceMode::Auto),
        Just(ToolChoiceMode::Required),
        Just(ToolChoiceMode::None),
    ])
    .prop_map(|mode| ToolChoice { mode })
    .boxed()
}
fn create_message_request_params() -> S<CreateMessageRequestParams> {
    (
        (
            meta(),
            of(task_metadata()),
            vec(sampling_message(), 0..3),
            of(model_preferences()),
        ),
        (os(), of(include_context()), onum(), any::<u64>()),
        (
            of(strings()),
            of(obj()),
            of(vec(tool(), 0..2)),
            of(tool_choice()),
        ),
    )
        .prop_map(
            |(
                (meta, task, messages, model_preferences),
                (system_prompt, include_context, temperature, max_tokens),
                (stop_sequences, metadata, tools, tool_choice),
            )| CreateMessageRequestParams {
                meta,
                task,
                messages,
                model_preferences,
                system_prompt,
                include_context,
                temperature,
                max_tokens,
                stop_sequences,
                metadata,
                tools,
                tool_choice,
            },
        )
        .boxed()
}
fn create_message_result() -> S<CreateMessageResult> {
    (role(), sampling_content(), s(), os(), meta(), result_type())
        .prop_map(
            |(role, content, model, stop_reason, meta, result_type)| CreateMessageResult {
                role,
                content,
                model,
                stop_reason,
                meta,
                result_type,
            },
        )
        .boxed()
}

// ---- elicitation -------------------------------------------------------------------------

fn elicit_form_params() -> S<ElicitRequestFormParams> {
    (meta(), of(task_metadata()), os(), s(), obj())
        .prop_map(
            |(meta, task, mode, message, requested_schema)| ElicitRequestFormParams {
                meta,
                task,
                mode,
                message,
                requested_schema,
            },
        )
        .boxed()
}
fn elicit_url_params() -> S<ElicitRequestURLParams> {
    (meta(), of(task_metadata()), s(), s(), s(), os())
        .prop_map(
            |(meta, task, mode, message, url, elicitation_id)| ElicitRequestURLParams {
                meta,
                task,
                mode,
                message,
                url,
                elicitation_id,
            },
        )
        .boxed()
}
fn elicit_params() -> S<ElicitRequestParams> {
    prop_oneof![
        elicit_form_params().prop_map(ElicitRequestParams::Form),
        elicit_url_params().prop_map(ElicitRequestParams::Url),
    ]
    .boxed()
}
fn elicit_action() -> S<ElicitAction> {
    prop_oneof![
        Just(ElicitAction::Accept),
        Just(ElicitAction::Decline),
        Just(ElicitAction::Cancel),
    ]
    .boxed()
}
fn elicit_result() -> S<ElicitResult> {
    (elicit_action(), of(obj()), meta(), result_type())
        .prop_map(|(action, content, meta, result_type)| ElicitResult {
            action,
            content,
            meta,
            result_type,
        })
        .boxed()
}
fn elicitation_complete_params() -> S<ElicitationCompleteNotificationParams> {
    (meta(), s())
        .prop_map(
            |(meta, elicitation_id)| ElicitationCompleteNotificationParams {
                meta,
                elicitation_id,
            },
        )
        .boxed()
}
fn url_elicitation_required_data() -> S<URLElicitationRequiredErrorData> {
    vec(elicit_url_params(), 0..2)
        .prop_map(|elicitations| URLElicitationRequiredErrorData { elicitations })
        .boxed()
}
fn string_format() -> S<StringFormat> {
    prop_oneof![
        Just(StringFormat::Email),
        Just(StringFormat::Uri),
        Just(StringFormat::Date),
        Just(StringFormat::DateTime),
    ]
    .boxed()
}
fn string_schema() -> S<StringSchema> {
    (os(), os(), ou(), ou(), of(string_format()), os())
        .prop_map(
            |(title, description, min_length, max_length, format, default)| StringSchema {
                r#type: StringSchemaType::String,
                title,
                description,
                min_length,
                max_length,
                format,
                default,
            },
        )
        .boxed()
}
fn number_schema() -> S<NumberSchema> {
    (
        prop_oneof![
            Just(NumberSchemaType::Number),
            Just(NumberSchemaType::Integer)
        ],
        os(),
        os(),
        onum(),
        onum(),
        onum(),
    )
        .prop_map(
            |(r#type, title, description, minimum, maximum, default)| NumberSchema {
                r#type,
                title,
                description,
                minimum,
                maximum,
                default,
            },
        )
        .boxed()
}
fn boolean_schema() -> S<BooleanSchema> {
    (os(), os(), ob())
        .prop_map(|(title, description, default)| BooleanSchema {
            r#type: BooleanSchemaType::Boolean,
            title,
            description,
            default,
        })
        .boxed()
}
fn titled_option() -> S<TitledEnumOption> {
    (s(), s())
        .prop_map(|(c, title)| TitledEnumOption { r#const: c, title })
        .boxed()
}
fn untitled_single() -> S<UntitledSingleSelectEnumSchema> {
    (os(), os(), strings(), os())
        .prop_map(
            |(title, description, e, default)| UntitledSingleSelectEnumSchema {
                r#type: StringSchemaType::String,
                title,
                description,
                r#enum: e,
                default,
            },
        )
        .boxed()
}
fn titled_single() -> S<TitledSingleSelectEnumSchema> {
    (os(), os(), vec(titled_option(), 0..3), os())
        .prop_map(
            |(title, description, one_of, default)| TitledSingleSelectEnumSchema {
                r#type: StringSchemaType::String,
                title,
                description,
                one_of,
                default,
            },
        )
        .boxed()
}
fn untitled_multi() -> S<UntitledMultiSelectEnumSchema> {
    (os(), os(), ou(), ou(), strings(), of(strings()))
        .prop_map(|(title, description, min_items, max_items, e, default)| {
            UntitledMultiSelectEnumSchema {
                r#type: ArraySchemaType::Array,
                title,
                description,
                min_items,
                max_items,
                items: UntitledEnumItems {
                    r#type: StringSchemaType::String,
                    r#enum: e,
                },
                default,
            }
        })
        .boxed()
}
fn titled_multi() -> S<TitledMultiSelectEnumSchema> {
    (
        os(),
        os(),
        ou(),
        ou(),
        vec(titled_option(), 0..3),
        of(strings()),
    )
        .prop_map(
            |(title, description, min_items, max_items, any_of, default)| {
                TitledMultiSelectEnumSchema {
                    r#type: ArraySchemaType::Array,
                    title,
                    description,
                    min_items,
                    max_items,
                    items: TitledEnumItems { any_of },
                    default,
                }
            },
        )
        .boxed()
}
fn legacy_enum(names: S<Option<Vec<String>>>) -> S<LegacyTitledEnumSchema> {
    (os(), os(), strings(), names, os())
        .prop_map(
            |(title, description, e, enum_names, default)| LegacyTitledEnumSchema {
                r#type: StringSchemaType::String,
                title,
                description,
                r#enum: e,
                enum_names,
                default,
            },
        )
        .boxed()
}
fn primitive_schema() -> S<PrimitiveSchemaDefinition> {
    use PrimitiveSchemaDefinition as P;
    prop_oneof![
        string_schema().prop_map(P::String),
        number_schema().prop_map(P::Number),
        boolean_schema().prop_map(P::Boolean),
        untitled_single().prop_map(P::UntitledSingleSelectEnum),
        titled_single().prop_map(P::TitledSingleSelectEnum),
        untitled_multi().prop_map(P::UntitledMultiSelectEnum),
        titled_multi().prop_map(P::TitledMultiSelectEnum),
        // Without enumNames a legacy enum is indistinguishable from an untitled one.
        legacy_enum(strings().prop_map(Some).boxed()).prop_map(P::LegacyTitledEnum),
    ]
    .boxed()
}

// ---- roots, logging, notifications, lifecycle, discover ----------------------------------

fn root() -> S<Root> {
    (s(), os(), meta())
        .prop_map(|(uri, name, meta)| Root { uri, name, meta })
        .boxed()
}
fn list_roots_result() -> S<ListRootsResult> {
    (vec(root(), 0..3), meta(), result_type())
        .prop_map(|(roots, meta, result_type)| ListRootsResult {
            roots,
            meta,
            result_type,
        })
        .boxed()
}
fn set_level_params() -> S<SetLevelRequestParams> {
    (meta(), level())
        .prop_map(|(meta, level)| SetLevelRequestParams { meta, level })
        .boxed()
}
fn logging_message_params() -> S<LoggingMessageNotificationParams> {
    (meta(), level(), os(), json())
        .prop_map(
            |(meta, level, logger, data)| LoggingMessageNotificationParams {
                meta,
                level,
                logger,
                data,
            },
        )
        .boxed()
}
fn cancelled_params() -> S<CancelledNotificationParams> {
    (meta(), of(request_id()), os())
        .prop_map(|(meta, request_id, reason)| CancelledNotificationParams {
            meta,
            request_id,
            reason,
        })
        .boxed()
}
fn progress_params() -> S<ProgressNotificationParams> {
    (meta(), progress_token(), num(), onum(), os())
        .prop_map(
            |(meta, progress_token, progress, total, message)| ProgressNotificationParams {
                meta,
                progress_token,
                progress,
                total,
                message,
            },
        )
        .boxed()
}
fn resource_updated_params() -> S<ResourceUpdatedNotificationParams> {
    (meta(), s())
        .prop_map(|(meta, uri)| ResourceUpdatedNotificationParams { meta, uri })
        .boxed()
}
fn initialize_request_params() -> S<InitializeRequestParams> {
    (meta(), s(), client_capabilities(), implementation())
        .prop_map(
            |(meta, protocol_version, capabilities, client_info)| InitializeRequestParams {
                meta,
                protocol_version,
                capabilities,
                client_info,
            },
        )
        .boxed()
}
fn initialize_result() -> S<InitializeResult> {
    (
        s(),
        server_capabilities(),
        implementation(),
        os(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(protocol_version, capabilities, server_info, instructions, meta, result_type)| {
                InitializeResult {
                    protocol_version,
                    capabilities,
                    server_info,
                    instructions,
                    meta,
                    result_type,
                }
            },
        )
        .boxed()
}
fn discover_result() -> S<DiscoverResult> {
    (
        strings(),
        server_capabilities(),
        os(),
        ou(),
        cache_scope(),
        meta(),
        result_type(),
    )
        .prop_map(
            |(
                supported_versions,
                capabilities,
                instructions,
                ttl_ms,
                cache_scope,
                meta,
                result_type,
            )| {
                DiscoverResult {
                    supported_versions,
                    capabilities,
                    instructions,
                    ttl_ms,
                    cache_scope,
                    meta,
                    result_type,
                }
            },
        )
        .boxed()
}
fn paginated_params() -> S<PaginatedRequestParams> {
    (meta(), os())
        .prop_map(|(meta, cursor)| PaginatedRequestParams { meta, cursor })
        .boxed()
}
fn paginated_result() -> S<PaginatedResult> {
    (os(), meta(), result_type())
        .prop_map(|(next_cursor, meta, result_type)| PaginatedResult {
            next_cursor,
            meta,
            result_type,
        })
        .boxed()
}

// ---- mrtr and subscriptions --------------------------------------------------------------

fn input_request() -> S<InputRequest> {
    prop_oneof![
        elicit_params().prop_map(InputRequest::Elicit),
        create_message_request_params().prop_map(InputRequest::CreateMessage),
        of(request_params()).prop_map(InputRequest::ListRoots),
    ]
    .boxed()
}
fn input_requests() -> S<InputRequests> {
    btree_map(s(), input_request(), 0..3).boxed()
}
fn input_response() -> S<InputResponse> {
    prop_oneof![
        elicit_result().prop_map(InputResponse::Elicit),
        create_message_result().prop_map(InputResponse::CreateMessage),
        list_roots_result().prop_map(InputResponse::ListRoots),
    ]
    .boxed()
}
fn input_required_result() -> S<InputRequiredResult> {
    (of(input_requests()), os(), meta(), result_type())
        .prop_map(
            |(input_requests, request_state, meta, result_type)| InputRequiredResult {
                input_requests,
                request_state,
                meta,
                result_type,
            },
        )
        .boxed()
}
fn input_response_request_params() -> S<InputResponseRequestParams> {
    (meta(), input_responses(), os())
        .prop_map(
            |(meta, input_responses, request_state)| InputResponseRequestParams {
                meta,
                input_responses,
                request_state,
            },
        )
        .boxed()
}
fn input_required_or_call_tool() -> S<InputRequiredOr<CallToolResult>> {
    prop_oneof![
        input_required_result().prop_map(|r| InputRequiredOr::InputRequired(InputRequiredResult {
            result_type: Some(ResultType::InputRequired),
            ..r
        })),
        call_tool_result().prop_map(|r| InputRequiredOr::Complete(CallToolResult {
            result_type: Some(ResultType::Complete),
            ..r
        })),
    ]
    .boxed()
}
fn subscription_filter() -> S<SubscriptionFilter> {
    (ob(), ob(), ob(), of(strings()))
        .prop_map(
            |(
                tools_list_changed,
                prompts_list_changed,
                resources_list_changed,
                resource_subscriptions,
            )| {
                SubscriptionFilter {
                    tools_list_changed,
                    prompts_list_changed,
                    resources_list_changed,
                    resource_subscriptions,
                    task_ids: None,
                }
            },
        )
        .boxed()
}
fn listen_params() -> S<SubscriptionsListenRequestParams> {
    (meta(), subscription_filter())
        .prop_map(|(meta, notifications)| SubscriptionsListenRequestParams {
            meta,
            notifications,
        })
        .boxed()
}
fn listen_result() -> S<SubscriptionsListenResult> {
    (meta(), result_type())
        .prop_map(|(meta, result_type)| SubscriptionsListenResult { meta, result_type })
        .boxed()
}
fn acknowledged_params() -> S<SubscriptionsAcknowledgedNotificationParams> {
    (meta(), subscription_filter())
        .prop_map(
            |(meta, notifications)| SubscriptionsAcknowledgedNotificationParams {
                meta,
                notifications,
            },
        )
        .boxed()
}

// ---- messages ----------------------------------------------------------------------------

fn client_request() -> S<ClientRequest> {
    use ClientRequest as C;
    prop_oneof![
        initialize_request_params().prop_map(C::Initialize),
        of(request_params()).prop_map(C::Ping),
        request_params().prop_map(C::Discover),
        of(paginated_params()).prop_map(C::ListTools),
        call_tool_request_params().prop_map(C::CallTool),
        of(paginated_params()).prop_map(C::ListResources),
        of(paginated_params()).prop_map(C::ListResourceTemplates),
        read_resource_request_params().prop_map(C::ReadResource),
        resource_request_params().prop_map(C::Subscribe),
        resource_request_params().prop_map(C::Unsubscribe),
        of(paginated_params()).prop_map(C::ListPrompts),
        get_prompt_request_params().prop_map(C::GetPrompt),
        complete_request_params().prop_map(C::Complete),
        set_level_params().prop_map(C::SetLevel),
        listen_params().prop_map(C::SubscriptionsListen),
        get_task_request_params().prop_map(C::GetTask),
        get_task_request_params().prop_map(C::GetTaskPayload),
        get_task_request_params().prop_map(C::CancelTask),
        of(paginated_params()).prop_map(C::ListTasks),
    ]
    .boxed()
}
fn server_request() -> S<ServerRequest> {
    use ServerRequest as R;
    prop_oneof![
        of(request_params()).prop_map(R::Ping),
        elicit_params().prop_map(R::Elicit),
        create_message_request_params().prop_map(R::CreateMessage),
        of(request_params()).prop_map(R::ListRoots),
        get_task_request_params().prop_map(R::GetTask),
        get_task_request_params().prop_map(R::GetTaskPayload),
        get_task_request_params().prop_map(R::CancelTask),
        of(paginated_params()).prop_map(R::ListTasks),
    ]
    .boxed()
}
fn client_notification() -> S<ClientNotification> {
    use ClientNotification as N;
    prop_oneof![
        cancelled_params().prop_map(N::Cancelled),
        of(notification_params()).prop_map(N::Initialized),
        progress_params().prop_map(N::Progress),
        of(notification_params()).prop_map(N::RootsListChanged),
        task_status_notification_params().prop_map(N::TaskStatus),
    ]
    .boxed()
}
fn server_notification() -> S<ServerNotification> {
    use ServerNotification as N;
    prop_oneof![
        cancelled_params().prop_map(N::Cancelled),
        progress_params().prop_map(N::Progress),
        logging_message_params().prop_map(N::LoggingMessage),
        resource_updated_params().prop_map(N::ResourceUpdated),
        of(notification_params()).prop_map(N::ResourceListChanged),
        of(notification_params()).prop_map(N::PromptListChanged),
        of(notification_params()).prop_map(N::ToolListChanged),
        acknowledged_params().prop_map(N::SubscriptionsAcknowledged),
        elicitation_complete_params().prop_map(N::ElicitationComplete),
        task_status_notification_params().prop_map(N::TaskStatus),
    ]
    .boxed()
}
fn error_object() -> S<ErrorObject> {
    (any::<i32>(), s(), of(json_some()))
        .prop_map(|(code, message, data)| {
            let e = ErrorObject::new(code, message);
            match data {
                Some(d) => e.with_data(d),
                None => e,
            }
        })
        .boxed()
}
fn error_response() -> S<JsonRpcErrorResponse> {
    (of(request_id()), error_object())
        .prop_map(|(id, error)| JsonRpcErrorResponse::new(id, error))
        .boxed()
}

macro_rules! roundtrips {
    ($($name:ident: $ty:ty = $strategy:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            $(
                #[test]
                fn $name(x in $strategy) {
                    check::<$ty>(&x)?;
                }
            )*
        }
    };
}

roundtrips! {
    // common and capabilities
    icon_rt: Icon = icon();
    implementation_rt: Implementation = implementation();
    progress_token_rt: ProgressToken = progress_token();
    role_rt: Role = role();
    logging_level_rt: LoggingLevel = level();
    result_type_rt: Option<ResultType> = result_type();
    cache_scope_rt: Option<CacheScope> = cache_scope();
    client_capabilities_rt: ClientCapabilities = client_capabilities();
    server_capabilities_rt: ServerCapabilities = server_capabilities();
    // base and content
    request_params_rt: RequestParams = request_params();
    notification_params_rt: NotificationParams = notification_params();
    empty_result_rt: EmptyResult = empty_result();
    annotations_rt: Annotations = annotations();
    text_content_rt: TextContent = text_content();
    image_content_rt: ImageContent = image_content();
    audio_content_rt: AudioContent = audio_content();
    resource_link_rt: ResourceLink = resource_link();
    embedded_resource_rt: EmbeddedResource = embedded_resource();
    content_block_rt: ContentBlock = content_block();
    // resources
    text_resource_contents_rt: TextResourceContents = text_resource_contents();
    blob_resource_contents_rt: BlobResourceContents = blob_resource_contents();
    resource_contents_rt: ResourceContents = resource_contents();
    resource_rt: Resource = resource();
    resource_template_rt: ResourceTemplate = resource_template();
    resource_request_params_rt: ResourceRequestParams = resource_request_params();
    read_resource_request_params_rt: ReadResourceRequestParams = read_resource_request_params();
    list_resources_result_rt: ListResourcesResult = list_resources_result();
    list_resource_templates_result_rt: ListResourceTemplatesResult = list_resource_templates_result();
    read_resource_result_rt: ReadResourceResult = read_resource_result();
    // tools
    tool_annotations_rt: ToolAnnotations = tool_annotations();
    tool_execution_rt: ToolExecution = tool_execution();
    tool_rt: Tool = tool();
    call_tool_request_params_rt: CallToolRequestParams = call_tool_request_params();
    call_tool_result_rt: CallToolResult = call_tool_result();
    list_tools_result_rt: ListToolsResult = list_tools_result();
    // prompts and completion
    prompt_argument_rt: PromptArgument = prompt_argument();
    prompt_rt: Prompt = prompt();
    prompt_message_rt: PromptMessage = prompt_message();
    get_prompt_request_params_rt: GetPromptRequestParams = get_prompt_request_params();
    get_prompt_result_rt: GetPromptResult = get_prompt_result();
    list_prompts_result_rt: ListPromptsResult = list_prompts_result();
    prompt_reference_rt: PromptReference = prompt_reference();
    resource_template_reference_rt: ResourceTemplateReference = resource_template_reference();
    complete_reference_rt: CompleteReference = complete_reference();
    complete_request_params_rt: CompleteRequestParams = complete_request_params();
    complete_result_rt: CompleteResult = complete_result();
    // sampling
    tool_use_content_rt: ToolUseContent = tool_use_content();
    tool_result_content_rt: ToolResultContent = tool_result_content();
    sampling_block_rt: SamplingMessageContentBlock = sampling_block();
    sampling_content_rt: SamplingMessageContent = sampling_content();
    sampling_message_rt: SamplingMessage = sampling_message();
    model_preferences_rt: ModelPreferences = model_preferences();
    include_context_rt: IncludeContext = include_context();
    tool_choice_rt: ToolChoice = tool_choice();
    create_message_request_params_rt: CreateMessageRequestParams = create_message_request_params();
    create_message_result_rt: CreateMessageResult = create_message_result();
    // elicitation
    elicit_form_params_rt: ElicitRequestFormParams = elicit_form_params();
    elicit_url_params_rt: ElicitRequestURLParams = elicit_url_params();
    elicit_params_rt: ElicitRequestParams = elicit_params();
    elicit_result_rt: ElicitResult = elicit_result();
    elicitation_complete_params_rt: ElicitationCompleteNotificationParams = elicitation_complete_params();
    url_elicitation_required_data_rt: URLElicitationRequiredErrorData = url_elicitation_required_data();
    string_schema_rt: StringSchema = string_schema();
    number_schema_rt: NumberSchema = number_schema();
    boolean_schema_rt: BooleanSchema = boolean_schema();
    untitled_single_rt: UntitledSingleSelectEnumSchema = untitled_single();
    titled_single_rt: TitledSingleSelectEnumSchema = titled_single();
    untitled_multi_rt: UntitledMultiSelectEnumSchema = untitled_multi();
    titled_multi_rt: TitledMultiSelectEnumSchema = titled_multi();
    legacy_enum_rt: LegacyTitledEnumSchema = legacy_enum(of(strings()).boxed());
    primitive_schema_rt: PrimitiveSchemaDefinition = primitive_schema();
    // roots, logging, notifications
    root_rt: Root = root();
    list_roots_result_rt: ListRootsResult = list_roots_result();
    set_level_params_rt: SetLevelRequestParams = set_level_params();
    logging_message_params_rt: LoggingMessageNotificationParams = logging_message_params();
    cancelled_params_rt: CancelledNotificationParams = cancelled_params();
    progress_params_rt: ProgressNotificationParams = progress_params();
    resource_updated_params_rt: ResourceUpdatedNotificationParams = resource_updated_params();
    // lifecycle, discover, pagination
    initialize_request_params_rt: InitializeRequestParams = initialize_request_params();
    initialize_result_rt: InitializeResult = initialize_result();
    discover_result_rt: DiscoverResult = discover_result();
    paginated_params_rt: PaginatedRequestParams = paginated_params();
    paginated_result_rt: PaginatedResult = paginated_result();
    // mrtr and subscriptions
    input_request_rt: InputRequest = input_request();
    input_requests_rt: InputRequests = input_requests();
    input_response_rt: InputResponse = input_response();
    input_required_result_rt: InputRequiredResult = input_required_result();
    input_response_request_params_rt: InputResponseRequestParams = input_response_request_params();
    input_required_or_rt: InputRequiredOr<CallToolResult> = input_required_or_call_tool();
    subscription_filter_rt: SubscriptionFilter = subscription_filter();
    listen_params_rt: SubscriptionsListenRequestParams = listen_params();
    listen_result_rt: SubscriptionsListenResult = listen_result();
    acknowledged_params_rt: SubscriptionsAcknowledgedNotificationParams = acknowledged_params();
    // tasks
    task_status_rt: TaskStatus = task_status();
    task_rt: Task = task();
    task_metadata_rt: TaskMetadata = task_metadata();
    related_task_metadata_rt: RelatedTaskMetadata = related_task_metadata();
    task_augmented_params_rt: TaskAugmentedRequestParams = task_augmented_request_params();
    get_task_request_params_rt: GetTaskRequestParams = get_task_request_params();
    get_task_result_rt: GetTaskResult = get_task_result();
    get_task_payload_result_rt: GetTaskPayloadResult = get_task_payload_result();
    create_task_result_rt: CreateTaskResult = create_task_result();
    list_tasks_result_rt: ListTasksResult = list_tasks_result();
    task_status_params_rt: TaskStatusNotificationParams = task_status_notification_params();
    // messages
    client_request_rt: JsonRpcRequest<ClientRequest> =
        (request_id(), client_request()).prop_map(|(id, r)| JsonRpcRequest::new(id, r));
    server_request_rt: JsonRpcRequest<ServerRequest> =
        (request_id(), server_request()).prop_map(|(id, r)| JsonRpcRequest::new(id, r));
    client_notification_rt: JsonRpcNotification<ClientNotification> =
        client_notification().prop_map(JsonRpcNotification::new);
    server_notification_rt: JsonRpcNotification<ServerNotification> =
        server_notification().prop_map(JsonRpcNotification::new);
    result_response_rt: JsonRpcResultResponse<CallToolResult> =
        (request_id(), call_tool_result()).prop_map(|(id, r)| JsonRpcResultResponse::new(id, r));
    error_response_rt: JsonRpcErrorResponse = error_response();
    unsupported_version_data_rt: UnsupportedProtocolVersionErrorData =
        (strings(), s()).prop_map(|(supported, requested)| UnsupportedProtocolVersionErrorData { supported, requested });
    missing_capability_data_rt: MissingRequiredClientCapabilityErrorData =
        client_capabilities().prop_map(|required_capabilities| MissingRequiredClientCapabilityErrorData { required_capabilities });
}
