//! What the client does when a server asks something of it (elicitation, sampling, roots) or
//! tells it something (progress, log messages, change notifications).
//!
//! The same handlers serve both generations: a legacy server sends `elicitation/create` as a
//! request on the connection; a modern server returns an `InputRequiredResult` and the
//! client retries. Either way the user's function is called once per question.

use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use toolyard_proto::BoxFuture;
use toolyard_proto::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ErrorObject, ListRootsResult, LoggingMessageNotificationParams,
    ProgressNotificationParams, Root, RootsCapability,
};

/// Answers `elicitation/create`.
pub type ElicitHandler =
    Arc<dyn Fn(ElicitRequestParams) -> BoxFuture<Result<ElicitResult, ErrorObject>> + Send + Sync>;
/// Answers `sampling/createMessage`.
pub type SampleHandler = Arc<
    dyn Fn(CreateMessageRequestParams) -> BoxFuture<Result<CreateMessageResult, ErrorObject>>
        + Send
        + Sync,
>;
/// Answers `roots/list`.
pub type RootsHandler =
    Arc<dyn Fn() -> BoxFuture<Result<ListRootsResult, ErrorObject>> + Send + Sync>;

/// A notification from the server, as the client received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The method, e.g. `notifications/tools/list_changed`.
    pub method: String,
    /// The params (`Null` when absent).
    pub params: Value,
}

/// Answers one question a server asks (`elicitation/create`, `sampling/createMessage` or
/// `roots/list`, with its raw params) on behalf of one request: see [`Questions`].
pub type QuestionHandler =
    Arc<dyn Fn(&str, Value) -> BoxFuture<Result<Value, ErrorObject>> + Send + Sync>;

/// Who answers the questions a server asks while one request is in flight, in place of the
/// client's own handlers (a gateway relays them to the caller the request is made for).
///
/// Which request a question belongs to is known for a modern server (the question is part
/// of the request's own `InputRequiredResult`) and over Streamable HTTP (it arrives on the
/// request's response stream). Over stdio a legacy server's question carries no link to a
/// request: it goes to the only request in flight that has `Questions`, or to the newest of
/// them when all of them are in one `group` (e.g. they were made for one downstream
/// session, so any of them reaches the same answerer); otherwise to the client's own
/// handlers, since guessing could hand one caller's question to another.
#[derive(Clone)]
pub struct Questions {
    pub(crate) group: u64,
    pub(crate) handler: QuestionHandler,
}

impl Questions {
    /// Questions for this request go to `handler`; `group` says which other requests'
    /// handlers would reach the same answerer.
    pub fn new(group: u64, handler: QuestionHandler) -> Self {
        Self { group, handler }
    }

    /// True for the methods these handlers answer (`ping` and anything else stay with the
    /// client).
    pub(crate) fn answers(method: &str) -> bool {
        matches!(
            method,
            "elicitation/create" | "sampling/createMessage" | "roots/list"
        )
    }
}

impl std::fmt::Debug for Questions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Questions")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

/// Called with each progress notification.
pub type ProgressCallback = Arc<dyn Fn(&ProgressNotificationParams) + Send + Sync>;
/// Called with each log message.
pub type LogCallback = Arc<dyn Fn(&LoggingMessageNotificationParams) + Send + Sync>;
/// Called with each notification.
pub type NoticeCallback = Arc<dyn Fn(&Notice) + Send + Sync>;

/// The user-supplied reactions of one client.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    pub(crate) elicit: Option<ElicitHandler>,
    pub(crate) sample: Option<SampleHandler>,
    pub(crate) roots: Option<RootsHandler>,
    pub(crate) on_progress: Option<ProgressCallback>,
    pub(crate) on_log: Option<LogCallback>,
    pub(crate) on_notification: Option<NoticeCallback>,
}

impl Handlers {
    /// The capabilities these handlers let the client declare.
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            elicitation: self.elicit.as_ref().map(|_| {
                let mut m = serde_json::Map::new();
                m.insert("form".into(), Value::Object(Default::default()));
                m.insert("url".into(), Value::Object(Default::default()));
                m
            }),
            sampling: self.sample.as_ref().map(|_| Default::default()),
            roots: self.roots.as_ref().map(|_| RootsCapability {
                list_changed: Some(true),
            }),
            ..ClientCapabilities::default()
        }
    }

    /// Answers one question of the server's (`method` with raw `params`), as JSON.
    pub(crate) fn answer(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<Result<Value, ErrorObject>> {
        fn to_value<T: serde::Serialize>(r: Result<T, ErrorObject>) -> Result<Value, ErrorObject> {
            r.and_then(|v| {
                serde_json::to_value(v).map_err(|e| ErrorObject::internal(e.to_string()))
            })
        }
        fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, ErrorObject> {
            serde_json::from_value(params).map_err(|e| ErrorObject::invalid_params(e.to_string()))
        }
        let not_supported = |what: &str| {
            let e = ErrorObject::method_not_found(what);
            Box::pin(async move { Err(e) }) as BoxFuture<_>
        };
        match method {
            "elicitation/create" => match &self.elicit {
                Some(f) => match parse(params) {
                    Ok(p) => {
                        let fut = f(p);
                        Box::pin(async move { to_value(fut.await) })
                    }
                    Err(e) => Box::pin(async move { Err(e) }),
                },
                None => not_supported(method),
            },
            "sampling/createMessage" => match &self.sample {
                Some(f) => match parse(params) {
                    Ok(p) => {
                        let fut = f(p);
                        Box::pin(async move { to_value(fut.await) })
                    }
                    Err(e) => Box::pin(async move { Err(e) }),
                },
                None => not_supported(method),
            },
            "roots/list" => match &self.roots {
                Some(f) => {
                    let fut = f();
                    Box::pin(async move { to_value(fut.await) })
                }
                None => not_supported(method),
            },
            "ping" => Box::pin(async { Ok(Value::Object(Default::default())) }),
            other => not_supported(other),
        }
    }
}

/// Wraps an async function as an [`ElicitHandler`].
pub fn elicit_handler<F, Fut>(f: F) -> ElicitHandler
where
    F: Fn(ElicitRequestParams) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ElicitResult, ErrorObject>> + Send + 'static,
{
    Arc::new(move |p| Box::pin(f(p)))
}

/// Wraps an async function as a [`SampleHandler`].
pub fn sample_handler<F, Fut>(f: F) -> SampleHandler
where
    F: Fn(CreateMessageRequestParams) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<CreateMessageResult, ErrorObject>> + Send + 'static,
{
    Arc::new(move |p| Box::pin(f(p)))
}

/// A [`RootsHandler`] that always lists these roots.
pub fn fixed_roots(roots: Vec<Root>) -> RootsHandler {
    Arc::new(move || {
        let result = ListRootsResult {
            roots: roots.clone(),
            ..Default::default()
        };
        Box::pin(async move { Ok(result) })
    })
}
