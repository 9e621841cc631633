//! Content blocks: what prompts, tool results and resources carry.

use super::common::{Icon, JsonObject, Role};
use super::num;
use super::resources::ResourceContents;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Hints for how a client uses or displays an object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// Who the object is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<Role>>,
    /// Importance, from 0 (optional) to 1 (required).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::opt_f64"
    )]
    pub priority: Option<f64>,
    /// ISO 8601 timestamp of the last modification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// Text content (`"type": "text"`, carried by [`ContentBlock::Text`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TextContent {
    /// The text.
    pub text: String,
    /// Display hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

impl TextContent {
    /// Text content without annotations.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }
}

/// Image content (`"type": "image"`, carried by [`ContentBlock::Image`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageContent {
    /// Base64-encoded image data.
    pub data: String,
    /// The image's MIME type.
    pub mime_type: String,
    /// Display hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// Audio content (`"type": "audio"`, carried by [`ContentBlock::Audio`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AudioContent {
    /// Base64-encoded audio data.
    pub data: String,
    /// The audio's MIME type.
    pub mime_type: String,
    /// Display hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// A link to a resource the client may read (`"type": "resource_link"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLink {
    /// The resource's URI.
    pub uri: String,
    /// Programmatic name.
    pub name: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the resource is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its size in bytes, before any encoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Display hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Icons for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

impl ResourceLink {
    /// A link with a URI and a name.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            name: name.into(),
            ..Self::default()
        }
    }
}

/// A resource's contents embedded in a message (`"type": "resource"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedResource {
    /// The contents.
    pub resource: ResourceContents,
    /// Display hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

impl EmbeddedResource {
    /// Embeds contents without annotations.
    pub fn new(resource: ResourceContents) -> Self {
        Self {
            resource,
            annotations: None,
            meta: None,
        }
    }
}

/// One block of content in a prompt message or tool result, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type")]
pub enum ContentBlock {
    /// `"text"`.
    #[serde(rename = "text")]
    Text(TextContent),
    /// `"image"`.
    #[serde(rename = "image")]
    Image(ImageContent),
    /// `"audio"`.
    #[serde(rename = "audio")]
    Audio(AudioContent),
    /// `"resource_link"`.
    #[serde(rename = "resource_link")]
    ResourceLink(ResourceLink),
    /// `"resource"`.
    #[serde(rename = "resource")]
    Resource(EmbeddedResource),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(TextContent::new(text))
    }

    /// An image block from base64 data and a MIME type.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image(ImageContent {
            data: data.into(),
            mime_type: mime_type.into(),
            annotations: None,
            meta: None,
        })
    }

    /// An audio block from base64 data and a MIME type.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio(AudioContent {
            data: data.into(),
            mime_type: mime_type.into(),
            annotations: None,
            meta: None,
        })
    }

    /// An embedded resource block.
    pub fn resource(contents: ResourceContents) -> Self {
        Self::Resource(EmbeddedResource::new(contents))
    }

    /// A resource link block.
    pub fn resource_link(link: ResourceLink) -> Self {
        Self::ResourceLink(link)
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(&t.text),
            _ => None,
        }
    }

    /// The wire tag of this block (`"text"`, `"image"`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Image(_) => "image",
            Self::Audio(_) => "audio",
            Self::ResourceLink(_) => "resource_link",
            Self::Resource(_) => "resource",
        }
    }
}

impl From<TextContent> for ContentBlock {
    fn from(c: TextContent) -> Self {
        Self::Text(c)
    }
}

impl From<ImageContent> for ContentBlock {
    fn from(c: ImageContent) -> Self {
        Self::Image(c)
    }
}

impl From<AudioContent> for ContentBlock {
    fn from(c: AudioContent) -> Self {
        Self::Audio(c)
    }
}

impl From<ResourceLink> for ContentBlock {
    fn from(c: ResourceLink) -> Self {
        Self::ResourceLink(c)
    }
}

impl From<EmbeddedResource> for ContentBlock {
    fn from(c: EmbeddedResource) -> Self {
        Self::Resource(c)
    }
}
