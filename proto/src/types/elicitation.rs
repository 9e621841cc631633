//! Elicitation (`elicitation/create`): the server asks the user, through the client, for
//! input by form or by URL.

use super::common::{JsonObject, ResultType};
use super::num;
use super::tasks::TaskMetadata;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Form-mode params: a message and a flat JSON Schema of primitive fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElicitRequestFormParams {
    /// Request metadata (2025-11-25).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Run as a task (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// `"form"`, or absent (form is the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What to show the user.
    pub message: String,
    /// `{"type": "object", "properties": {<name>: PrimitiveSchemaDefinition}, "required"?}`.
    pub requested_schema: JsonObject,
}

/// URL-mode params: the user is sent to a URL to act out of band.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElicitRequestURLParams {
    /// Request metadata (2025-11-25).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Run as a task (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// `"url"`.
    pub mode: String,
    /// Why the user is sent there.
    pub message: String,
    /// Where the user is sent.
    pub url: String,
    /// The id `notifications/elicitation/complete` refers to (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
}

/// Params of `elicitation/create`: URL mode (told apart by its `url`) or form mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ElicitRequestParams {
    /// URL mode.
    Url(ElicitRequestURLParams),
    /// Form mode.
    Form(ElicitRequestFormParams),
}

impl ElicitRequestParams {
    /// A form-mode request.
    pub fn form(message: impl Into<String>, requested_schema: JsonObject) -> Self {
        Self::Form(ElicitRequestFormParams {
            mode: Some("form".into()),
            message: message.into(),
            requested_schema,
            ..ElicitRequestFormParams::default()
        })
    }

    /// A URL-mode request.
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        Self::Url(ElicitRequestURLParams {
            mode: "url".into(),
            message: message.into(),
            url: url.into(),
            ..ElicitRequestURLParams::default()
        })
    }

    /// The message shown to the user.
    pub fn message(&self) -> &str {
        match self {
            Self::Url(p) => &p.message,
            Self::Form(p) => &p.message,
        }
    }
}

/// What the user did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// Submitted or confirmed.
    Accept,
    /// Explicitly declined.
    Decline,
    /// Dismissed without choosing.
    Cancel,
}

/// The client's answer to `elicitation/create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The submitted form data (accept in form mode): strings, integers, booleans or arrays
    /// of strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<JsonObject>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (unused by input responses; kept for symmetry).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}

impl ElicitResult {
    /// An answer with this action and no content.
    pub fn new(action: ElicitAction) -> Self {
        Self {
            action,
            content: None,
            meta: None,
            result_type: None,
        }
    }

    /// The user accepted with this content.
    pub fn accept(content: JsonObject) -> Self {
        Self {
            content: Some(content),
            ..Self::new(ElicitAction::Accept)
        }
    }
}

/// Params of `notifications/elicitation/complete` (2025-11-25).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationCompleteNotificationParams {
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The URL elicitation that completed.
    pub elicitation_id: String,
}

/// The `data` of a -32042 URL-elicitation-required error (2025-11-25).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct URLElicitationRequiredErrorData {
    /// The elicitations to complete before retrying.
    pub elicitations: Vec<ElicitRequestURLParams>,
}

/// `"type": "string"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StringSchemaType {
    /// `"string"`.
    #[default]
    #[serde(rename = "string")]
    String,
}

/// `"type": "boolean"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BooleanSchemaType {
    /// `"boolean"`.
    #[default]
    #[serde(rename = "boolean")]
    Boolean,
}

/// `"type": "array"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ArraySchemaType {
    /// `"array"`.
    #[default]
    #[serde(rename = "array")]
    Array,
}

/// `"type": "number"` or `"integer"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NumberSchemaType {
    /// Any number.
    #[default]
    Number,
    /// Whole numbers only.
    Integer,
}

/// Formats a string field may require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StringFormat {
    /// An email address.
    Email,
    /// A URI.
    Uri,
    /// A date.
    Date,
    /// A date and time.
    DateTime,
}

/// A string field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StringSchema {
    /// `"string"`.
    pub r#type: StringSchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Minimum length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// Maximum length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// Required format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<StringFormat>,
    /// Default value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A number field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumberSchema {
    /// `"number"` or `"integer"`.
    pub r#type: NumberSchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Minimum value.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub minimum: Option<f64>,
    /// Maximum value.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub maximum: Option<f64>,
    /// Default value.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub default: Option<f64>,
}

/// A boolean field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BooleanSchema {
    /// `"boolean"`.
    pub r#type: BooleanSchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Default value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
}

/// A single choice among plain values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UntitledSingleSelectEnumSchema {
    /// `"string"`.
    pub r#type: StringSchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The values.
    pub r#enum: Vec<String>,
    /// Default value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A value with a display title.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TitledEnumOption {
    /// The value.
    pub r#const: String,
    /// Its display title.
    pub title: String,
}

/// A single choice among titled values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TitledSingleSelectEnumSchema {
    /// `"string"`.
    pub r#type: StringSchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The options.
    pub one_of: Vec<TitledEnumOption>,
    /// Default value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// The items of an untitled multi-select: `{"type": "string", "enum": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UntitledEnumItems {
    /// `"string"`.
    pub r#type: StringSchemaType,
    /// The values.
    pub r#enum: Vec<String>,
}

/// A multiple choice among plain values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UntitledMultiSelectEnumSchema {
    /// `"array"`.
    pub r#type: ArraySchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Fewest values to select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    /// Most values to select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// The values.
    pub items: UntitledEnumItems,
    /// Default selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Vec<String>>,
}

/// The items of a titled multi-select: `{"anyOf": [{"const", "title"}, ...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TitledEnumItems {
    /// The options.
    pub any_of: Vec<TitledEnumOption>,
}

/// A multiple choice among titled values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TitledMultiSelectEnumSchema {
    /// `"array"`.
    pub r#type: ArraySchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Fewest values to select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    /// Most values to select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// The options.
    pub items: TitledEnumItems,
    /// Default selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Vec<String>>,
}

/// The deprecated single choice with parallel `enumNames`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LegacyTitledEnumSchema {
    /// `"string"`.
    pub r#type: StringSchemaType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The values.
    pub r#enum: Vec<String>,
    /// Display names, parallel to `enum`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enum_names: Option<Vec<String>>,
    /// Default value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// One field of a form: a primitive schema. Deserialization looks at `type` and at the
/// distinguishing members (`oneOf`, `enumNames`, `enum`, `items.anyOf`); a legacy enum
/// without `enumNames` reads as [`PrimitiveSchemaDefinition::UntitledSingleSelectEnum`].
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum PrimitiveSchemaDefinition {
    /// A string field.
    String(StringSchema),
    /// A number field.
    Number(NumberSchema),
    /// A boolean field.
    Boolean(BooleanSchema),
    /// A single choice among plain values.
    UntitledSingleSelectEnum(UntitledSingleSelectEnumSchema),
    /// A single choice among titled values.
    TitledSingleSelectEnum(TitledSingleSelectEnumSchema),
    /// A multiple choice among plain values.
    UntitledMultiSelectEnum(UntitledMultiSelectEnumSchema),
    /// A multiple choice among titled values.
    TitledMultiSelectEnum(TitledMultiSelectEnumSchema),
    /// The deprecated titled enum.
    LegacyTitledEnum(LegacyTitledEnumSchema),
}

impl<'de> Deserialize<'de> for PrimitiveSchemaDefinition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        use serde_json::{from_value, Value};
        let v = Value::deserialize(d)?;
        let has = |k: &str| v.get(k).is_some();
        let (one_of, enum_names, en) = (has("oneOf"), has("enumNames"), has("enum"));
        let titled_items = v.pointer("/items/anyOf").is_some();
        let ty = v.get("type").and_then(Value::as_str).map(str::to_owned);
        let r = match ty.as_deref() {
            Some("string") if one_of => from_value(v).map(Self::TitledSingleSelectEnum),
            Some("string") if enum_names => from_value(v).map(Self::LegacyTitledEnum),
            Some("string") if en => from_value(v).map(Self::UntitledSingleSelectEnum),
            Some("string") => from_value(v).map(Self::String),
            Some("number") | Some("integer") => from_value(v).map(Self::Number),
            Some("boolean") => from_value(v).map(Self::Boolean),
            Some("array") if titled_items => from_value(v).map(Self::TitledMultiSelectEnum),
            Some("array") => from_value(v).map(Self::UntitledMultiSelectEnum),
            Some(other) => {
                return Err(D::Error::custom(format_args!(
                    "unsupported primitive schema type {other:?}"
                )))
            }
            None => {
                return Err(D::Error::custom(
                    "primitive schema without a string \"type\"",
                ))
            }
        };
        r.map_err(D::Error::custom)
    }
}
