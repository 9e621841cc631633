//! Typed messages: method-keyed enums for each direction, the JSON-RPC envelopes around
//! them, the method names, and the `data` of MCP's typed errors.
//!
//! The server's hot path parses with [`crate::jsonrpc::parse`] and deserializes params by
//! method; these types serve clients and tests.

use super::base::{NotificationParams, RequestParams};
use super::capabilities::ClientCapabilities;
use super::completion::CompleteRequestParams;
use super::elicitation::{ElicitRequestParams, ElicitationCompleteNotificationParams};
use super::lifecycle::InitializeRequestParams;
use super::logging::{LoggingMessageNotificationParams, SetLevelRequestParams};
use super::notifications::{
    CancelledNotificationParams, ProgressNotificationParams, ResourceUpdatedNotificationParams,
};
use super::pagination::PaginatedRequestParams;
use super::prompts::GetPromptRequestParams;
use super::resources::{
    ReadResourceRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use super::sampling::CreateMessageRequestParams;
use super::subscriptions::{
    SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenRequestParams,
};
use super::tasks::{
    CancelTaskRequestParams, GetTaskPayloadRequestParams, GetTaskRequestParams,
    TaskStatusNotificationParams,
};
use super::tools::CallToolRequestParams;
use crate::error::ErrorObject;
use crate::jsonrpc::{RequestId, JSONRPC_VERSION};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Method names of both revisions.
pub mod method {
    /// `initialize` (legacy).
    pub const INITIALIZE: &str = "initialize";
    /// `ping` (legacy).
    pub const PING: &str = "ping";
    /// `server/discover` (2026-07-28).
    pub const SERVER_DISCOVER: &str = "server/discover";
    /// `tools/list`.
    pub const TOOLS_LIST: &str = "tools/list";
    /// `tools/call`.
    pub const TOOLS_CALL: &str = "tools/call";
    /// `resources/list`.
    pub const RESOURCES_LIST: &str = "resources/list";
    /// `resources/templates/list`.
    pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
    /// `resources/read`.
    pub const RESOURCES_READ: &str = "resources/read";
    /// `resources/subscribe` (legacy).
    pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
    /// `resources/unsubscribe` (legacy).
    pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
    /// `prompts/list`.
    pub const PROMPTS_LIST: &str = "prompts/list";
    /// `prompts/get`.
    pub const PROMPTS_GET: &str = "prompts/get";
    /// `completion/complete`.
    pub const COMPLETION_COMPLETE: &str = "completion/complete";
    /// `logging/setLevel` (legacy).
    pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
    /// `subscriptions/listen` (2026-07-28).
    pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
    /// `tasks/get` (2025-11-25).
    pub const TASKS_GET: &str = "tasks/get";
    /// `tasks/result` (2025-11-25).
    pub const TASKS_RESULT: &str = "tasks/result";
    /// `tasks/cancel` (2025-11-25).
    pub const TASKS_CANCEL: &str = "tasks/cancel";
    /// `tasks/list` (2025-11-25).
    pub const TASKS_LIST: &str = "tasks/list";
    /// `tasks/update` (tasks extension, 2026-07-28).
    pub const TASKS_UPDATE: &str = "tasks/update";
    /// `elicitation/create`.
    pub const ELICITATION_CREATE: &str = "elicitation/create";
    /// `sampling/createMessage`.
    pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
    /// `roots/list`.
    pub const ROOTS_LIST: &str = "roots/list";
    /// `notifications/initialized` (legacy).
    pub const NOTIFICATIONS_INITIALIZED: &str = "notifications/initialized";
    /// `notifications/cancelled`.
    pub const NOTIFICATIONS_CANCELLED: &str = "notifications/cancelled";
    /// `notifications/progress`.
    pub const NOTIFICATIONS_PROGRESS: &str = "notifications/progress";
    /// `notifications/message`.
    pub const NOTIFICATIONS_MESSAGE: &str = "notifications/message";
    /// `notifications/resources/updated`.
    pub const NOTIFICATIONS_RESOURCES_UPDATED: &str = "notifications/resources/updated";
    /// `notifications/resources/list_changed`.
    pub const NOTIFICATIONS_RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
    /// `notifications/prompts/list_changed`.
    pub const NOTIFICATIONS_PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
    /// `notifications/tools/list_changed`.
    pub const NOTIFICATIONS_TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
    /// `notifications/roots/list_changed` (legacy).
    pub const NOTIFICATIONS_ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
    /// `notifications/subscriptions/acknowledged` (2026-07-28).
    pub const NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED: &str =
        "notifications/subscriptions/acknowledged";
    /// `notifications/elicitation/complete` (2025-11-25).
    pub const NOTIFICATIONS_ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";
    /// `notifications/tasks/status` (2025-11-25).
    pub const NOTIFICATIONS_TASKS_STATUS: &str = "notifications/tasks/status";
    /// `notifications/tasks` (tasks extension, 2026-07-28): a task's full state, on the
    /// `subscriptions/listen` streams that asked for its id.
    pub const NOTIFICATIONS_TASKS: &str = "notifications/tasks";

    /// Which generation of the protocol has a client-to-server request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Generation {
        /// Both: the session-based revisions and 2026-07-28.
        Both,
        /// Only the session-based revisions (2025-11-25 and older): 2026-07-28 removed it.
        Legacy,
        /// Only 2026-07-28.
        Modern,
    }

    /// The params field a request's `Mcp-Name` HTTP header mirrors (SEP-2243).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum NameField {
        /// `name` (tools, prompts).
        Name,
        /// `uri` (resources).
        Uri,
        /// `taskId` (tasks).
        TaskId,
    }

    /// What the server needs to know of a client-to-server request method, in one place: the
    /// request gate, the direct launch and the HTTP edge all read this table.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Spec {
        /// The method name.
        pub name: &'static str,
        /// Which generation has it.
        pub generation: Generation,
        /// Served by a handler (tools, resources, prompts, completion) with no connection
        /// state, so a transport may launch it without a hop through the connection actor.
        pub handled: bool,
        /// The field `Mcp-Name` mirrors, if the method has one.
        pub mcp_name: Option<NameField>,
    }

    const fn spec(
        name: &'static str,
        generation: Generation,
        handled: bool,
        mcp_name: Option<NameField>,
    ) -> Spec {
        Spec {
            name,
            generation,
            handled,
            mcp_name,
        }
    }

    /// Every client-to-server request method the server knows (custom methods aside).
    // Hot methods first: lookups scan in order, and `tools/call` is most requests.
    pub const CLIENT_REQUESTS: &[Spec] = &[
        spec(TOOLS_CALL, Generation::Both, true, Some(NameField::Name)),
        spec(TOOLS_LIST, Generation::Both, true, None),
        spec(RESOURCES_READ, Generation::Both, true, Some(NameField::Uri)),
        spec(PROMPTS_GET, Generation::Both, true, Some(NameField::Name)),
        spec(COMPLETION_COMPLETE, Generation::Both, true, None),
        spec(RESOURCES_LIST, Generation::Both, true, None),
        spec(RESOURCES_TEMPLATES_LIST, Generation::Both, true, None),
        spec(PROMPTS_LIST, Generation::Both, true, None),
        spec(INITIALIZE, Generation::Legacy, false, None),
        spec(PING, Generation::Legacy, false, None),
        spec(LOGGING_SET_LEVEL, Generation::Legacy, false, None),
        spec(RESOURCES_SUBSCRIBE, Generation::Legacy, false, None),
        spec(RESOURCES_UNSUBSCRIBE, Generation::Legacy, false, None),
        spec(TASKS_LIST, Generation::Legacy, false, None),
        spec(TASKS_RESULT, Generation::Legacy, false, None),
        spec(SERVER_DISCOVER, Generation::Modern, false, None),
        spec(SUBSCRIPTIONS_LISTEN, Generation::Modern, false, None),
        spec(TASKS_GET, Generation::Both, false, Some(NameField::TaskId)),
        spec(
            TASKS_CANCEL,
            Generation::Both,
            false,
            Some(NameField::TaskId),
        ),
        // The tasks extension of 2026-07-28; a legacy session reaches the router with it too,
        // which answers by the task it names.
        spec(
            TASKS_UPDATE,
            Generation::Both,
            false,
            Some(NameField::TaskId),
        ),
    ];

    /// The table entry of a client-to-server request method; `None` for a custom method.
    pub fn client_request(name: &str) -> Option<&'static Spec> {
        CLIENT_REQUESTS.iter().find(|s| s.name == name)
    }

    /// Whether 2026-07-28 removed `name`.
    pub fn removed_in_modern(name: &str) -> bool {
        client_request(name).is_some_and(|s| s.generation == Generation::Legacy)
    }

    /// Whether only 2026-07-28 has `name`.
    pub fn modern_only(name: &str) -> bool {
        client_request(name).is_some_and(|s| s.generation == Generation::Modern)
    }

    /// Whether a transport may launch `name` straight to its handler ([`Spec::handled`]).
    pub fn handled(name: &str) -> bool {
        client_request(name).is_some_and(|s| s.handled)
    }
}

method_enum! {
    /// A request from client to server, of either revision.
    pub enum ClientRequest {
        /// `initialize` (legacy).
        Initialize(InitializeRequestParams) = "initialize",
        /// `ping` (legacy).
        Ping(Option<RequestParams>) = "ping",
        /// `server/discover` (2026-07-28).
        Discover(RequestParams) = "server/discover",
        /// `tools/list`.
        ListTools(Option<PaginatedRequestParams>) = "tools/list",
        /// `tools/call`.
        CallTool(CallToolRequestParams) = "tools/call",
        /// `resources/list`.
        ListResources(Option<PaginatedRequestParams>) = "resources/list",
        /// `resources/templates/list`.
        ListResourceTemplates(Option<PaginatedRequestParams>) = "resources/templates/list",
        /// `resources/read`.
        ReadResource(ReadResourceRequestParams) = "resources/read",
        /// `resources/subscribe` (legacy).
        Subscribe(SubscribeRequestParams) = "resources/subscribe",
        /// `resources/unsubscribe` (legacy).
        Unsubscribe(UnsubscribeRequestParams) = "resources/unsubscribe",
        /// `prompts/list`.
        ListPrompts(Option<PaginatedRequestParams>) = "prompts/list",
        /// `prompts/get`.
        GetPrompt(GetPromptRequestParams) = "prompts/get",
        /// `completion/complete`.
        Complete(CompleteRequestParams) = "completion/complete",
        /// `logging/setLevel` (legacy).
        SetLevel(SetLevelRequestParams) = "logging/setLevel",
        /// `subscriptions/listen` (2026-07-28).
        SubscriptionsListen(SubscriptionsListenRequestParams) = "subscriptions/listen",
        /// `tasks/get` (2025-11-25).
        GetTask(GetTaskRequestParams) = "tasks/get",
        /// `tasks/result` (2025-11-25).
        GetTaskPayload(GetTaskPayloadRequestParams) = "tasks/result",
        /// `tasks/cancel` (2025-11-25).
        CancelTask(CancelTaskRequestParams) = "tasks/cancel",
        /// `tasks/list` (2025-11-25).
        ListTasks(Option<PaginatedRequestParams>) = "tasks/list",
    }
}

method_enum! {
    /// A request from server to client (legacy revisions; 2026-07-28 uses input requests).
    pub enum ServerRequest {
        /// `ping`.
        Ping(Option<RequestParams>) = "ping",
        /// `elicitation/create`.
        Elicit(ElicitRequestParams) = "elicitation/create",
        /// `sampling/createMessage`.
        CreateMessage(CreateMessageRequestParams) = "sampling/createMessage",
        /// `roots/list`.
        ListRoots(Option<RequestParams>) = "roots/list",
        /// `tasks/get` (2025-11-25).
        GetTask(GetTaskRequestParams) = "tasks/get",
        /// `tasks/result` (2025-11-25).
        GetTaskPayload(GetTaskPayloadRequestParams) = "tasks/result",
        /// `tasks/cancel` (2025-11-25).
        CancelTask(CancelTaskRequestParams) = "tasks/cancel",
        /// `tasks/list` (2025-11-25).
        ListTasks(Option<PaginatedRequestParams>) = "tasks/list",
    }
}

method_enum! {
    /// A notification from client to server.
    pub enum ClientNotification {
        /// `notifications/cancelled`.
        Cancelled(CancelledNotificationParams) = "notifications/cancelled",
        /// `notifications/initialized` (legacy).
        Initialized(Option<NotificationParams>) = "notifications/initialized",
        /// `notifications/progress` (legacy).
        Progress(ProgressNotificationParams) = "notifications/progress",
        /// `notifications/roots/list_changed` (legacy).
        RootsListChanged(Option<NotificationParams>) = "notifications/roots/list_changed",
        /// `notifications/tasks/status` (2025-11-25).
        TaskStatus(TaskStatusNotificationParams) = "notifications/tasks/status",
    }
}

method_enum! {
    /// A notification from server to client.
    pub enum ServerNotification {
        /// `notifications/cancelled`.
        Cancelled(CancelledNotificationParams) = "notifications/cancelled",
        /// `notifications/progress`.
        Progress(ProgressNotificationParams) = "notifications/progress",
        /// `notifications/message`.
        LoggingMessage(LoggingMessageNotificationParams) = "notifications/message",
        /// `notifications/resources/updated`.
        ResourceUpdated(ResourceUpdatedNotificationParams) = "notifications/resources/updated",
        /// `notifications/resources/list_changed`.
        ResourceListChanged(Option<NotificationParams>) = "notifications/resources/list_changed",
        /// `notifications/prompts/list_changed`.
        PromptListChanged(Option<NotificationParams>) = "notifications/prompts/list_changed",
        /// `notifications/tools/list_changed`.
        ToolListChanged(Option<NotificationParams>) = "notifications/tools/list_changed",
        /// `notifications/subscriptions/acknowledged` (2026-07-28).
        SubscriptionsAcknowledged(SubscriptionsAcknowledgedNotificationParams) = "notifications/subscriptions/acknowledged",
        /// `notifications/elicitation/complete` (2025-11-25).
        ElicitationComplete(ElicitationCompleteNotificationParams) = "notifications/elicitation/complete",
        /// `notifications/tasks/status` (2025-11-25).
        TaskStatus(TaskStatusNotificationParams) = "notifications/tasks/status",
    }
}

/// A JSON-RPC request around a method-keyed enum (`R` is e.g. [`ClientRequest`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcRequest<R> {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// The request id.
    pub id: RequestId,
    /// `method` and `params`.
    #[serde(flatten)]
    pub request: R,
}

impl<R> JsonRpcRequest<R> {
    /// A request with this id.
    pub fn new(id: impl Into<RequestId>, request: R) -> Self {
        Self {
            jsonrpc: JSONRPC_VERSION.into(),
            id: id.into(),
            request,
        }
    }
}

/// A JSON-RPC notification around a method-keyed enum (`N` is e.g. [`ServerNotification`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcNotification<N> {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// `method` and `params`.
    #[serde(flatten)]
    pub notification: N,
}

impl<N> JsonRpcNotification<N> {
    /// A notification.
    pub fn new(notification: N) -> Self {
        Self {
            jsonrpc: JSONRPC_VERSION.into(),
            notification,
        }
    }
}

/// A JSON-RPC success response carrying a typed result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcResultResponse<T> {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// The id of the request answered.
    pub id: RequestId,
    /// The result.
    pub result: T,
}

impl<T> JsonRpcResultResponse<T> {
    /// A response to the request with this id.
    pub fn new(id: impl Into<RequestId>, result: T) -> Self {
        Self {
            jsonrpc: JSONRPC_VERSION.into(),
            id: id.into(),
            result,
        }
    }
}

/// A JSON-RPC error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcErrorResponse {
    /// `"2.0"`.
    pub jsonrpc: String,
    /// The id of the request answered; absent when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<RequestId>,
    /// The error.
    pub error: ErrorObject,
}

impl JsonRpcErrorResponse {
    /// An error response to the request with this id.
    pub fn new(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self {
            jsonrpc: JSONRPC_VERSION.into(),
            id,
            error,
        }
    }
}

/// The `data` of a -32022 unsupported-protocol-version error (2026-07-28).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnsupportedProtocolVersionErrorData {
    /// The versions the server supports.
    pub supported: Vec<String>,
    /// The version the client asked for.
    pub requested: String,
}

/// The `data` of a -32021 missing-required-client-capability error (2026-07-28).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MissingRequiredClientCapabilityErrorData {
    /// The capabilities the request needs.
    pub required_capabilities: ClientCapabilities,
}
