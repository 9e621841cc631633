//! Multi-round-trip requests (2026-07-28): a server that needs input answers with an
//! [`InputRequiredResult`]; the client retries with `inputResponses` and `requestState`.

use super::base::RequestParams;
use super::common::{JsonObject, ResultType};
use super::elicitation::{ElicitRequestParams, ElicitResult};
use super::roots::ListRootsResult;
use super::sampling::{CreateMessageRequestParams, CreateMessageResult};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

method_enum! {
    /// Something the server needs from the client before it can answer.
    pub enum InputRequest {
        /// Ask the user (`elicitation/create`).
        Elicit(ElicitRequestParams) = "elicitation/create",
        /// Sample the client's model (`sampling/createMessage`).
        CreateMessage(CreateMessageRequestParams) = "sampling/createMessage",
        /// List the client's roots (`roots/list`; params optional).
        ListRoots(Option<RequestParams>) = "roots/list",
    }
}

/// The server's input requests, by key of its choosing.
pub type InputRequests = BTreeMap<String, InputRequest>;

/// The client's answers, by the keys of the input requests: each an [`ElicitResult`],
/// [`CreateMessageResult`] or [`ListRootsResult`] (see [`input_response`]).
pub type InputResponses = serde_json::Map<String, serde_json::Value>;

/// One answer to an input request (told apart by `action` / `model` / `roots`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum InputResponse {
    /// The answer to `elicitation/create`.
    Elicit(ElicitResult),
    /// The answer to `sampling/createMessage`.
    CreateMessage(CreateMessageResult),
    /// The answer to `roots/list`.
    ListRoots(ListRootsResult),
}

/// Reads the answer under `key` as `T`: `None` when there is none, `Some(Err)` when it does
/// not have `T`'s shape.
pub fn input_response<T: DeserializeOwned>(
    responses: &InputResponses,
    key: &str,
) -> Option<Result<T, serde_json::Error>> {
    responses.get(key).map(|v| T::deserialize(v))
}

/// The result of a request the server cannot finish without input (`resultType:
/// "input_required"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult {
    /// What the server needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<InputRequests>,
    /// Opaque state the client sends back unchanged with its retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (the server splices in `input_required`).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}

/// The members of a retried request's params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputResponseRequestParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Answers to the server's input requests, by key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<InputResponses>,
    /// The opaque state the server returned with its input requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
}

/// A modern result as a client reads it: input required, or the method's own result.
/// Deserialization looks at `resultType`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum InputRequiredOr<T> {
    /// `resultType: "input_required"`.
    InputRequired(InputRequiredResult),
    /// Any other result type.
    Complete(T),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for InputRequiredOr<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let v = serde_json::Value::deserialize(d)?;
        let input_required =
            v.get("resultType").and_then(serde_json::Value::as_str) == Some("input_required");
        if input_required {
            serde_json::from_value(v).map(Self::InputRequired)
        } else {
            serde_json::from_value(v).map(Self::Complete)
        }
        .map_err(D::Error::custom)
    }
}
