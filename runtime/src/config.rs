//! The TOML configuration file of `toolyard serve`.
//!
//! ```toml
//! [server]
//! name = "my-tools"
//! instructions = "Use `motd` first."
//! max_message_bytes = 4194304
//! max_in_flight = 1024
//!
//! [[tools]]            # a tool answering with fixed text
//! name = "motd"
//! description = "Message of the day"
//! text = "Hello!"
//! # audience = ["alice@example.com"]  # only these principals see and use it (any item)
//!
//! [[resources]]
//! uri = "config://motd"
//! name = "motd"
//! mime_type = "text/plain"
//! text = "Hello!"      # or: file = "path/to/file"
//!
//! [[prompts]]
//! name = "greet"
//! description = "Greets someone"
//! template = "Say hello to {name}."
//! arguments = [{ name = "name", required = true }]
//!
//! ```
//!
//! Each crate owns its sections: this one the server's (above), plugin crates theirs (the
//! gateway's `[gateway]` and `[[sources]]`, ...), and the binary composes the file: it names
//! the plugins' sections to [`Config::parse_with`], which still rejects any other unknown
//! section, and hands the same text to each plugin to parse its own. Command-line flags and
//! their `TOOLYARD_*` environment variables override the file.

use crate::builder::ServerBuilder;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolyard_actors::{PromptDef, ResourceDef, ToolDef};
use toolyard_proto::{
    CallToolResult, GetPromptResult, Prompt, PromptArgument, PromptMessage, Resource,
    ResourceContents, Role, Tool,
};

/// A configuration problem, naming the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// `[server]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Server name.
    pub name: Option<String>,
    /// Instructions for the model.
    pub instructions: Option<String>,
    /// Largest accepted message in bytes.
    pub max_message_bytes: Option<usize>,
    /// Requests in flight per connection.
    pub max_in_flight: Option<usize>,
    /// Secret signing modern `requestState`.
    pub state_secret: Option<String>,
}

/// `[[tools]]`: a tool that answers with fixed text.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticTool {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// The text it returns.
    pub text: String,
    /// Only these principals see and call it ([`Audience`](toolyard_actors::Audience));
    /// absent: everyone.
    pub audience: Option<Vec<String>>,
}

/// `[[resources]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticResource {
    /// URI.
    pub uri: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// MIME type.
    pub mime_type: Option<String>,
    /// Inline text.
    pub text: Option<String>,
    /// A file read at each request.
    pub file: Option<PathBuf>,
    /// Only these principals see and read it; absent: everyone.
    pub audience: Option<Vec<String>>,
}

/// `[[prompts]]`: `{arg}` placeholders in `template` are replaced by arguments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplatePrompt {
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// The user message, with `{arg}` placeholders.
    pub template: String,
    /// Arguments.
    #[serde(default)]
    pub arguments: Vec<PromptArgSpec>,
    /// Only these principals see and get it; absent: everyone.
    pub audience: Option<Vec<String>>,
}

/// A prompt argument.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptArgSpec {
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Required?
    #[serde(default)]
    pub required: bool,
}

/// The server's sections of the file. Unknown top-level keys are refused by
/// [`Config::parse_with`] (serde would otherwise skip them: plugin sections share the file).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct Config {
    /// `[server]`.
    #[serde(default)]
    pub server: ServerSection,
    /// `[[tools]]`.
    #[serde(default)]
    pub tools: Vec<StaticTool>,
    /// `[[resources]]`.
    #[serde(default)]
    pub resources: Vec<StaticResource>,
    /// `[[prompts]]`.
    #[serde(default)]
    pub prompts: Vec<TemplatePrompt>,
}

/// The top-level keys [`Config`] owns.
const SECTIONS: [&str; 4] = ["server", "tools", "resources", "prompts"];

impl Config {
    /// Reads and parses a file that holds only the server's sections.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = Self::read(path)?;
        Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Reads a config file's text, for [`Config::parse_with`] and the plugins' parsers.
    pub fn read(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })
    }

    /// Parses TOML text that holds only the server's sections.
    pub fn parse(text: &str) -> Result<Config, String> {
        Self::parse_with(text, &[])
    }

    /// Parses the server's sections of TOML text whose other top-level keys must be among
    /// `plugin_sections` (they are left for the plugin crates that own them to parse).
    pub fn parse_with(text: &str, plugin_sections: &[&str]) -> Result<Config, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(key) = table
            .keys()
            .find(|k| !SECTIONS.contains(&k.as_str()) && !plugin_sections.contains(&k.as_str()))
        {
            let known: Vec<String> = SECTIONS
                .iter()
                .chain(plugin_sections)
                .map(|k| format!("`{k}`"))
                .collect();
            return Err(format!(
                "unknown section `{key}`, expected one of {}",
                known.join(", ")
            ));
        }
        toml::from_str(text).map_err(|e| e.to_string())
    }

    pub(crate) fn apply(&self, mut b: ServerBuilder) -> ServerBuilder {
        if let Some(i) = &self.server.instructions {
            b = b.instructions(i.clone());
        }
        for t in &self.tools {
            let text = t.text.clone();
            let tool = Tool {
                name: t.name.clone(),
                description: Some(t.description.clone()),
                input_schema: toolyard_actors::empty_object_schema(),
                ..Tool::default()
            };
            let def = ToolDef::new(
                tool,
                Arc::new(move |_ctx, _args| {
                    let text = text.clone();
                    Box::pin(async move { Ok(CallToolResult::text(text)) })
                }),
            );
            b = b.try_tool(def.map(|d| match audience_of(t.audience.as_deref()) {
                Some(a) => d.for_audience(a),
                None => d,
            }));
        }
        for r in &self.resources {
            let (uri, mime, text, file) = (
                r.uri.clone(),
                r.mime_type.clone(),
                r.text.clone(),
                r.file.clone(),
            );
            let resource = Resource {
                uri: r.uri.clone(),
                name: r.name.clone(),
                description: r.description.clone(),
                mime_type: r.mime_type.clone(),
                ..Resource::new(r.uri.clone(), r.name.clone())
            };
            let def = ResourceDef::new(
                resource,
                Arc::new(move |_ctx, _req| {
                    let (uri, mime, text, file) =
                        (uri.clone(), mime.clone(), text.clone(), file.clone());
                    Box::pin(async move {
                        let body = match (text, file) {
                            (Some(t), _) => t,
                            (None, Some(f)) => tokio::fs::read_to_string(&f).await?,
                            (None, None) => String::new(),
                        };
                        Ok(vec![ResourceContents::text(uri, mime, body)].into())
                    })
                }),
            );
            b = b.resource(match audience_of(r.audience.as_deref()) {
                Some(a) => def.for_audience(a),
                None => def,
            });
        }
        for p in &self.prompts {
            let template = p.template.clone();
            let prompt = Prompt {
                name: p.name.clone(),
                title: None,
                description: p.description.clone(),
                arguments: Some(
                    p.arguments
                        .iter()
                        .map(|a| PromptArgument {
                            name: a.name.clone(),
                            title: None,
                            description: a.description.clone(),
                            required: Some(a.required),
                        })
                        .collect(),
                ),
                icons: None,
                meta: None,
            };
            let def = PromptDef::new(
                prompt,
                Arc::new(move |_ctx, args| {
                    let mut text = template.clone();
                    for (k, v) in &args {
                        text = text.replace(&format!("{{{k}}}"), v);
                    }
                    Box::pin(async move {
                        Ok(GetPromptResult {
                            description: None,
                            messages: vec![PromptMessage::text(Role::User, text)],
                            meta: None,
                            result_type: None,
                        })
                    })
                }),
            );
            b = b.prompt(match audience_of(p.audience.as_deref()) {
                Some(a) => def.for_audience(a),
                None => def,
            });
        }
        b
    }
}

/// An item's `audience = [..]`: exactly those principals.
fn audience_of(principals: Option<&[String]>) -> Option<toolyard_actors::Audience> {
    principals.map(|p| toolyard_actors::Audience::principals(p.iter().cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = Config::parse("[server]\nnmae = \"x\"\n").unwrap_err();
        assert!(err.contains("nmae"), "{err}");
    }

    #[test]
    fn a_full_file_parses() {
        let c = Config::parse(
            r#"
            [server]
            name = "x"
            [[tools]]
            name = "motd"
            description = "d"
            text = "hi"
            [[prompts]]
            name = "greet"
            template = "Hello {name}"
            arguments = [{ name = "name", required = true }]
            "#,
        )
        .unwrap();
        assert_eq!(c.tools[0].name, "motd");
        assert!(c.prompts[0].arguments[0].required);
    }

    #[test]
    fn unknown_sections_are_rejected_unless_a_plugin_owns_them() {
        let err = Config::parse("[gateway]\nseparator = \".\"\n").unwrap_err();
        assert!(err.contains("unknown section `gateway`"), "{err}");
        let c = Config::parse_with("[gateway]\nseparator = \".\"\n", &["gateway"]).unwrap();
        assert!(c.tools.is_empty());
        let err = Config::parse_with("[gatway]\n", &["gateway"]).unwrap_err();
        assert!(
            err.contains("`gatway`") && err.contains("`gateway`"),
            "{err}"
        );
    }
}
