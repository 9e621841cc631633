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
//! [gateway]            # the plugin host's gateway (see `host::config`)
//! separator = "__"
//! admin_token = "${TOOLYARD_ADMIN_TOKEN}"
//! failure_mode = "skip"
//!
//! [[sources]]          # an upstream MCP server: `plugin`, `command` or `url`
//! name = "time"
//! command = "uvx"
//! args = ["mcp-server-time"]
//! lifecycle = "transient"
//! ```
//!
//! Command-line flags and their `TOOLYARD_*` environment variables override the file.

use crate::builder::ServerBuilder;
use crate::host::{GatewaySection, SourceConfig, SourceError, SourceSpec};
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

/// The whole file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// `[gateway]`.
    #[serde(default)]
    pub gateway: GatewaySection,
    /// `[[sources]]`.
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
}

impl Config {
    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Resolves `[[sources]]` (plugin manifests, `${VAR}`, commands on `PATH`) into specs;
    /// `base_dir` is the config file's directory, against which `plugin`, `cwd` and relative
    /// commands are resolved. Every problem is reported at once.
    pub fn resolve_sources(&self, base_dir: &Path) -> Result<Vec<SourceSpec>, SourceError> {
        crate::host::resolve_all(&self.sources, base_dir, &self.gateway)
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Config, String> {
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
            b = b.try_tool(ToolDef::new(
                tool,
                Arc::new(move |_ctx, _args| {
                    let text = text.clone();
                    Box::pin(async move { Ok(CallToolResult::text(text)) })
                }),
            ));
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
            b = b.resource(ResourceDef::new(
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
                        Ok(vec![ResourceContents::text(uri, mime, body)])
                    })
                }),
            ));
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
            b = b.prompt(PromptDef::new(
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
            ));
        }
        b
    }
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
    fn gateway_and_sources_parse_and_reject_unknown_keys() {
        let c = Config::parse(
            r#"
            [gateway]
            separator = "."
            [[sources]]
            name = "time"
            command = "uvx"
            args = ["mcp-server-time"]
            "#,
        )
        .unwrap();
        assert_eq!(c.gateway.separator, ".");
        assert_eq!(c.sources[0].command.as_deref(), Some("uvx"));
        assert_eq!(Config::parse("").unwrap().gateway.separator, "__");
        let err = Config::parse("[gateway]\nseperator = \".\"\n").unwrap_err();
        assert!(err.contains("seperator"), "{err}");
        let err = Config::parse("[[sources]]\nname = \"x\"\ncomand = \"npx\"\n").unwrap_err();
        assert!(err.contains("comand"), "{err}");
    }
}
