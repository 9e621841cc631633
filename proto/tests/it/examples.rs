//! Every official 2026-07-28 example deserializes into the type of its folder's name and
//! serializes back to the same JSON.

use crate::{examples, roundtrip};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use toolyard_proto::*;

/// One check of an example.
pub(crate) type Check = fn(&Value) -> Result<(), String>;

/// Round-trips as `T`.
fn rt<T: DeserializeOwned + Serialize>(v: &Value) -> Result<(), String> {
    roundtrip::<T>(v).map(drop)
}

/// A content struct on its own: the example carries the `type` tag the enclosing enum
/// writes, so it is checked and removed before round-tripping the struct.
fn tagged<T: DeserializeOwned + Serialize>(v: &Value, tag: &str) -> Result<(), String> {
    let mut obj = v.as_object().cloned().ok_or("not an object")?;
    match obj.remove("type") {
        Some(t) if t == json!(tag) => {}
        other => return Err(format!("expected \"type\": {tag:?}, found {other:?}")),
    }
    rt::<T>(&Value::Object(obj))
}

/// The `roots/list` example carries an `id` but no `jsonrpc` (an input request with an id).
#[derive(Serialize, Deserialize)]
struct IdInputRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<RequestId>,
    #[serde(flatten)]
    request: InputRequest,
}

/// The error `data` of a typed error response, as `T`.
fn error_data<T: DeserializeOwned + Serialize>(v: &Value) -> Result<(), String> {
    let r = roundtrip::<JsonRpcErrorResponse>(v)?;
    let data = r.error.data.ok_or("error without data")?;
    rt::<T>(&data)
}

type ClientReq = JsonRpcRequest<ClientRequest>;
type ServerReq = JsonRpcRequest<ServerRequest>;
type ClientNote = JsonRpcNotification<ClientNotification>;
type ServerNote = JsonRpcNotification<ServerNotification>;

macro_rules! checks {
    ($($f:expr),* $(,)?) => {
        Some(vec![$($f as Check),*])
    };
}

/// The checks of a 2026-07-28 example folder; `None` for a folder without a mapping.
fn checks(folder: &str) -> Option<Vec<Check>> {
    match folder {
        "AudioContent" => checks![
            |v: &Value| tagged::<AudioContent>(v, "audio"),
            rt::<ContentBlock>,
            rt::<SamplingMessageContentBlock>,
        ],
        "BlobResourceContents" => checks![
            rt::<BlobResourceContents>,
            |v: &Value| match roundtrip::<ResourceContents>(v)? {
                ResourceContents::Blob(_) => Ok(()),
                other => Err(format!("read as {other:?}")),
            },
        ],
        "BooleanSchema" => checks![rt::<BooleanSchema>, |v: &Value| match roundtrip::<
            PrimitiveSchemaDefinition,
        >(v)?
        {
            PrimitiveSchemaDefinition::Boolean(_) => Ok(()),
            other => Err(format!("read as {other:?}")),
        },],
        "CallToolRequest" => checks![rt::<ClientReq>],
        "CallToolRequestParams" => checks![rt::<CallToolRequestParams>],
        "CallToolResult" => checks![rt::<CallToolResult>, rt::<InputRequiredOr<CallToolResult>>],
        "CallToolResultResponse" => checks![
            rt::<JsonRpcResultResponse<CallToolResult>>,
            rt::<JsonRpcResultResponse<InputRequiredOr<CallToolResult>>>,
        ],
        "CancelledNotification" => checks![rt::<ClientNote>, rt::<ServerNote>],
        "CancelledNotificationParams" => checks![rt::<CancelledNotificationParams>],
        "ClientCapabilities" => checks![rt::<ClientCapabilities>],
        "CompleteRequest" => checks![rt::<ClientReq>],
        "CompleteRequestParams" => checks![rt::<CompleteRequestParams>],
        "CompleteResult" => checks![rt::<CompleteResult>],
        "CompleteResultResponse" => checks![rt::<JsonRpcResultResponse<CompleteResult>>],
        "CreateMessageRequest" => checks![rt::<InputRequest>],
        "CreateMessageRequestParams" => checks![rt::<CreateMessageRequestParams>],
        "CreateMessageResult" => checks![rt::<CreateMessageResult>, rt::<InputResponse>],
        "DiscoverRequest" => checks![rt::<ClientReq>],
        "DiscoverResult" => checks![rt::<DiscoverResult>],
        "DiscoverResultResponse" => checks![rt::<JsonRpcResultResponse<DiscoverResult>>],
        "ElicitRequest" => checks![rt::<InputRequest>],
        "ElicitRequestFormParams" => {
            checks![
                rt::<ElicitRequestFormParams>,
                |v: &Value| match roundtrip::<ElicitRequestParams>(v)? {
                    ElicitRequestParams::Form(_) => Ok(()),
                    other => Err(format!("read as {other:?}")),
                },
            ]
        }
        "ElicitRequestURLParams" => {
            checks![
                rt::<ElicitRequestURLParams>,
                |v: &Value| match roundtrip::<ElicitRequestParams>(v)? {
                    ElicitRequestParams::Url(_) => Ok(()),
                    other => Err(format!("read as {other:?}")),
                },
            ]
        }
        "ElicitResult" => checks![rt::<ElicitResult>, rt::<InputResponse>],
        "EmbeddedResource" => checks![
            |v: &Value| tagged::<EmbeddedResource>(v, "resource"),
            rt::<ContentBlock>,
        ],
        "GetPromptRequest" => checks![rt::<ClientReq>],
        "GetPromptRequestParams" => checks![rt::<GetPromptRequestParams>],
        "GetPromptResult" => checks![rt::<GetPromptResult>],
        "GetPromptResultResponse" => checks![
            rt::<JsonRpcResultResponse<GetPromptResult>>,
            rt::<JsonRpcResultResponse<InputRequiredOr<GetPromptResult>>>,
        ],
        "HeaderMismatchError" => checks![rt::<JsonRpcErrorResponse>],
        "ImageContent" => checks![
            |v: &Value| tagged::<ImageContent>(v, "image"),
            rt::<ContentBlock>,
            rt::<SamplingMessageContentBlock>,
        ],
        "InputRequests" => checks![rt::<InputRequests>],
        "InputRequiredResult" => checks![rt::<InputRequiredResult>, |v: &Value| match roundtrip::<
            InputRequiredOr<CallToolResult>,
        >(v)?
        {
            InputRequiredOr::InputRequired(_) => Ok(()),
            other => Err(format!("read as {other:?}")),
        },],
        "InputResponses" => checks![rt::<InputResponses>, |v: &Value| {
            let responses: InputResponses =
                serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
            for (key, value) in &responses {
                rt::<InputResponse>(value).map_err(|e| format!("{key}: {e}"))?;
            }
            match input_response::<ElicitResult>(&responses, "github_login") {
                Some(Ok(r)) if r.action == ElicitAction::Accept => Ok(()),
                other => Err(format!("github_login read as {other:?}")),
            }
        }],
        "InternalError" | "InvalidParamsError" | "MethodNotFoundError" | "ParseError" => {
            checks![rt::<ErrorObject>]
        }
        "ListPromptsRequest" => checks![rt::<ClientReq>],
        "ListPromptsResult" => checks![rt::<ListPromptsResult>],
        "ListPromptsResultResponse" => checks![rt::<JsonRpcResultResponse<ListPromptsResult>>],
        "ListResourceTemplatesRequest" => checks![rt::<ClientReq>],
        "ListResourceTemplatesResult" => checks![rt::<ListResourceTemplatesResult>],
        "ListResourceTemplatesResultResponse" => {
            checks![rt::<JsonRpcResultResponse<ListResourceTemplatesResult>>]
        }
        "ListResourcesRequest" => checks![rt::<ClientReq>],
        "ListResourcesResult" => checks![rt::<ListResourcesResult>],
        "ListResourcesResultResponse" => {
            checks![rt::<JsonRpcResultResponse<ListResourcesResult>>]
        }
        "ListRootsRequest" => checks![rt::<IdInputRequest>],
        "ListRootsResult" => checks![rt::<ListRootsResult>, rt::<InputResponse>],
        "ListToolsRequest" => checks![rt::<ClientReq>],
        "ListToolsResult" => checks![rt::<ListToolsResult>],
        "ListToolsResultResponse" => checks![rt::<JsonRpcResultResponse<ListToolsResult>>],
        "LoggingMessageNotification" => checks![rt::<ServerNote>],
        "LoggingMessageNotificationParams" => checks![rt::<LoggingMessageNotificationParams>],
        "MissingRequiredClientCapabilityError" => checks![
            rt::<JsonRpcErrorResponse>,
            error_data::<MissingRequiredClientCapabilityErrorData>,
        ],
        "ModelPreferences" => checks![rt::<ModelPreferences>],
        "NumberSchema" => checks![rt::<NumberSchema>, rt::<PrimitiveSchemaDefinition>],
        "PaginatedRequestParams" => checks![rt::<PaginatedRequestParams>],
        "ProgressNotification" => checks![rt::<ServerNote>, rt::<ClientNote>],
        "ProgressNotificationParams" => checks![rt::<ProgressNotificationParams>],
        "PromptListChangedNotification" => checks![rt::<ServerNote>],
        "ReadResourceRequest" => checks![rt::<ClientReq>],
        "ReadResourceResult" => checks![rt::<ReadResourceResult>],
        "ReadResourceResultResponse" => checks![
            rt::<JsonRpcResultResponse<ReadResourceResult>>,
            rt::<JsonRpcResultResponse<InputRequiredOr<ReadResourceResult>>>,
        ],
        "Resource" => checks![rt::<Resource>],
        "ResourceLink" => checks![
            |v: &Value| tagged::<ResourceLink>(v, "resource_link"),
            rt::<ContentBlock>,
        ],
        "ResourceListChangedNotification" => checks![rt::<ServerNote>],
        "ResourceUpdatedNotification" => checks![rt::<ServerNote>],
        "ResourceUpdatedNotificationParams" => checks![rt::<ResourceUpdatedNotificationParams>],
        "Root" => checks![rt::<Root>],
        "SamplingMessage" => checks![rt::<SamplingMessage>],
        "ServerCapabilities" => checks![rt::<ServerCapabilities>],
        "StringSchema" => checks![rt::<StringSchema>, |v: &Value| match roundtrip::<
            PrimitiveSchemaDefinition,
        >(v)?
        {
            PrimitiveSchemaDefinition::String(_) => Ok(()),
            other => Err(format!("read as {other:?}")),
        },],
        "SubscriptionsAcknowledgedNotification" => checks![rt::<ServerNote>],
        "SubscriptionsListenRequest" => checks![rt::<ClientReq>],
        "SubscriptionsListenResult" => checks![rt::<SubscriptionsListenResult>],
        "SubscriptionsListenResultResponse" => {
            checks![rt::<JsonRpcResultResponse<SubscriptionsListenResult>>]
        }
        "TextContent" => checks![
            |v: &Value| tagged::<TextContent>(v, "text"),
            rt::<ContentBlock>,
            rt::<SamplingMessageContentBlock>,
        ],
        "TextResourceContents" => checks![
            rt::<TextResourceContents>,
            |v: &Value| match roundtrip::<ResourceContents>(v)? {
                ResourceContents::Text(_) => Ok(()),
                other => Err(format!("read as {other:?}")),
            },
        ],
        "TitledMultiSelectEnumSchema" => {
            checks![
                rt::<TitledMultiSelectEnumSchema>,
                |v: &Value| match roundtrip::<PrimitiveSchemaDefinition>(v)? {
                    PrimitiveSchemaDefinition::TitledMultiSelectEnum(_) => Ok(()),
                    other => Err(format!("read as {other:?}")),
                },
            ]
        }
        "TitledSingleSelectEnumSchema" => checks![
            rt::<TitledSingleSelectEnumSchema>,
            |v: &Value| match roundtrip::<PrimitiveSchemaDefinition>(v)? {
                PrimitiveSchemaDefinition::TitledSingleSelectEnum(_) => Ok(()),
                other => Err(format!("read as {other:?}")),
            },
        ],
        "Tool" => checks![rt::<Tool>],
        "ToolListChangedNotification" => checks![rt::<ServerNote>],
        "ToolResultContent" => checks![
            |v: &Value| tagged::<ToolResultContent>(v, "tool_result"),
            rt::<SamplingMessageContentBlock>,
        ],
        "ToolUseContent" => checks![
            |v: &Value| tagged::<ToolUseContent>(v, "tool_use"),
            rt::<SamplingMessageContentBlock>,
        ],
        "UnsupportedProtocolVersionError" => checks![
            rt::<JsonRpcErrorResponse>,
            error_data::<UnsupportedProtocolVersionErrorData>,
        ],
        "UntitledMultiSelectEnumSchema" => checks![
            rt::<UntitledMultiSelectEnumSchema>,
            |v: &Value| match roundtrip::<PrimitiveSchemaDefinition>(v)? {
                PrimitiveSchemaDefinition::UntitledMultiSelectEnum(_) => Ok(()),
                other => Err(format!("read as {other:?}")),
            },
        ],
        "UntitledSingleSelectEnumSchema" => checks![
            rt::<UntitledSingleSelectEnumSchema>,
            |v: &Value| match roundtrip::<PrimitiveSchemaDefinition>(v)? {
                PrimitiveSchemaDefinition::UntitledSingleSelectEnum(_) => Ok(()),
                other => Err(format!("read as {other:?}")),
            },
        ],
        _ => None,
    }
}

/// The checks of our 2025-11-25 fixtures (`tests/data/2025-11-25/examples`).
pub(crate) fn legacy_checks(folder: &str) -> Option<Vec<Check>> {
    match folder {
        "InitializeRequest" | "CallToolRequest" => checks![rt::<ClientReq>],
        "InitializeResult" => checks![rt::<InitializeResult>],
        "ListToolsResult" => checks![rt::<ListToolsResult>],
        "CallToolResult" => checks![rt::<CallToolResult>],
        "ElicitRequest" | "CreateMessageRequest" => checks![rt::<ServerReq>],
        "ReadResourceResult" => checks![rt::<ReadResourceResult>],
        "ProgressNotification" | "TaskStatusNotification" => {
            checks![rt::<ServerNote>, rt::<ClientNote>]
        }
        "CreateTaskResult" => checks![rt::<CreateTaskResult>],
        "GetTaskResult" => checks![rt::<GetTaskResult>],
        _ => None,
    }
}

/// Runs every check of every example of `revision`; returns the folders seen.
pub(crate) fn run_all(revision: &str, table: fn(&str) -> Option<Vec<Check>>) -> BTreeSet<String> {
    let mut failures = Vec::new();
    let mut folders = BTreeSet::new();
    for (folder, path, value) in examples(revision) {
        folders.insert(folder.clone());
        match table(&folder) {
            None => failures.push(format!("{folder}: no Rust type mapped to this folder")),
            Some(checks) => {
                for check in checks {
                    if let Err(e) = check(&value) {
                        failures.push(format!("{}: {e}", path.display()));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    folders
}

#[test]
fn every_official_2026_07_28_example_round_trips() {
    let folders = run_all("2026-07-28", checks);
    assert_eq!(
        folders.len(),
        88,
        "the official example set changed: {folders:?}"
    );
}

#[test]
fn absent_and_empty_params_both_round_trip() {
    for v in [
        json!({"method": "roots/list"}),
        json!({"method": "roots/list", "params": {}}),
    ] {
        let r: InputRequest = roundtrip(&v).expect("roots/list");
        assert!(matches!(r, InputRequest::ListRoots(_)));
    }
    for v in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": "x", "method": "tools/list", "params": {"cursor": "c"}}),
    ] {
        roundtrip::<JsonRpcRequest<ClientRequest>>(&v).expect("client request");
    }
    for v in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "params": {}}),
    ] {
        roundtrip::<JsonRpcNotification<ClientNotification>>(&v).expect("client notification");
    }
    let missing = serde_json::from_value::<ClientRequest>(json!({"method": "tools/call"}));
    assert!(missing.is_err(), "tools/call needs params");
    let unknown = serde_json::from_value::<ClientRequest>(json!({"method": "nope"}));
    assert!(unknown.unwrap_err().to_string().contains("unknown method"));
}

#[test]
fn constructors_build_the_documented_shapes() {
    assert_eq!(
        serde_json::to_value(CallToolResult::text("hi")).unwrap(),
        json!({"content": [{"type": "text", "text": "hi"}]})
    );
    assert_eq!(
        serde_json::to_value(CallToolResult::error_text("bad")).unwrap(),
        json!({"content": [{"type": "text", "text": "bad"}], "isError": true})
    );
    let structured = CallToolResult::structured(json!({"a": 1}));
    assert_eq!(structured.content[0].as_text(), Some("{\"a\":1}"));
    assert_eq!(structured.structured_content, Some(json!({"a": 1})));
    assert_eq!(
        serde_json::to_value(ContentBlock::resource(ResourceContents::blob(
            "file:///x",
            Some("image/png".into()),
            "AA=="
        )))
        .unwrap(),
        json!({"type": "resource", "resource": {"uri": "file:///x", "mimeType": "image/png", "blob": "AA=="}})
    );
    assert_eq!(
        serde_json::to_value(ContentBlock::image("AA==", "image/png")).unwrap(),
        json!({"type": "image", "data": "AA==", "mimeType": "image/png"})
    );
    assert_eq!(
        serde_json::to_value(ContentBlock::resource_link(ResourceLink::new(
            "file:///a",
            "a"
        )))
        .unwrap(),
        json!({"type": "resource_link", "uri": "file:///a", "name": "a"})
    );
    assert_eq!(ClientRequest::Ping(None).method(), method::PING);
    assert!(ServerNotification::knows(
        method::NOTIFICATIONS_TASKS_STATUS
    ));
    // Whole floats go out as integers, as the reference implementation writes them.
    let p = ProgressNotificationParams {
        meta: None,
        progress_token: ProgressToken::Number(1),
        progress: 50.0,
        total: Some(100.5),
        message: None,
    };
    assert_eq!(
        serde_json::to_string(&p).unwrap(),
        r#"{"progressToken":1,"progress":50,"total":100.5}"#
    );
}
