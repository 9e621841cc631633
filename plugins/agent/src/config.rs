//! The agent's sections of the config file, `[agent]` (with `[agent.sampling]`) and the
//! `[[clients]]` it calls tools on, and how the model, the endpoint and the key are settled
//! from the file, the command line and the environment variables users already have
//! (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_ENDPOINT`,
//! `OPENAI_API_VERSION`): a flag wins over the file, the file over the environment.
//!
//! ```toml
//! [agent]
//! model = "gpt-4o-mini"
//! base_url = "http://localhost:11434/v1"   # any OpenAI-compatible server; default OpenAI
//! api_key = "${OPENAI_API_KEY}"            # a literal, or one ${VAR}
//! tools = ["demo/echo", "files/*"]         # the allow-list; all tools when absent
//!
//! [agent.sampling]                          # answer servers' sampling with the model
//! models = ["gpt-4o-mini", "gpt-4o"]       # what they may pick, cheapest first; else `model`
//! token_budget = 20000                      # per server
//! requests_per_minute = 10                  # per server
//!
//! [[clients]]
//! name = "demo"
//! command = "toolyard"
//! args = ["serve", "--stdio"]
//! ```

use crate::llm::{Endpoint, LlmOptions, MaxTokensField};
use serde::Deserialize;
use std::time::Duration;
use toolyard_client::ClientEntry;

/// The agent's sections of a config file. Unknown top-level keys belong to other crates and
/// are left alone; unknown keys inside these sections are refused.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgentConfig {
    /// `[agent]`.
    #[serde(default)]
    pub agent: AgentSection,
    /// `[[clients]]`: the MCP servers whose tools the agent may call.
    #[serde(default)]
    pub clients: Vec<ClientEntry>,
}

/// Which URL shape and credential header to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// OpenAI or any compatible server: `{base_url}/chat/completions`, a bearer key.
    Openai,
    /// Azure OpenAI: the deployments URL with `api-version` (or the v1 URL when
    /// `api_version = "v1"`), an `api-key` header.
    Azure,
}

/// `[agent]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// The model (for Azure's deployments URL, the deployment when `azure_deployment` is
    /// not set).
    pub model: Option<String>,
    /// `openai` (the default) or `azure`.
    pub provider: Option<Provider>,
    /// The base URL of an OpenAI-compatible server.
    pub base_url: Option<String>,
    /// The key: a literal or `${VAR}`. Secret: never printed.
    pub api_key: Option<String>,
    /// Azure: the resource URL, e.g. `https://my-res.openai.azure.com`.
    pub azure_endpoint: Option<String>,
    /// Azure: the deployment.
    pub azure_deployment: Option<String>,
    /// Azure: the `api-version`, or `v1` for the v1 URL.
    pub api_version: Option<String>,
    /// `max_tokens` (default) or `max_completion_tokens`.
    pub max_tokens_field: Option<String>,
    /// Tokens per answer at most.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Sent first in every request.
    pub system_prompt: Option<String>,
    /// Model requests per prompt at most.
    pub max_turns: Option<usize>,
    /// Tool calls at once at most.
    pub max_parallel_calls: Option<usize>,
    /// Stream answers (default true).
    pub stream: Option<bool>,
    /// Seconds to wait for the model's answer to start (and between streamed pieces).
    pub timeout_secs: Option<u64>,
    /// Repeats after 429/5xx.
    pub max_retries: Option<u32>,
    /// The allow-list: `server/tool`, `server/*` or `tool`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// `[agent.sampling]`: answer servers' sampling requests with the model.
    pub sampling: Option<SamplingSection>,
}

impl std::fmt::Debug for AgentSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSection")
            .field("model", &self.model)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "(hidden)"))
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

/// `[agent.sampling]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingSection {
    /// Models servers' hints or priorities may pick, from the cheapest and fastest to the
    /// most capable (the agent's model answers otherwise).
    #[serde(default)]
    pub models: Vec<String>,
    /// Tokens per server at most.
    pub token_budget: Option<u64>,
    /// Requests per server in any 60 seconds at most.
    pub requests_per_minute: Option<u32>,
}

/// What the command line overrides.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--model`.
    pub model: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
}

/// The model and where to reach it, settled.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    /// The model.
    pub model: String,
    /// The endpoint with its credential.
    pub endpoint: Endpoint,
    /// Timeouts, retries, the token-limit field.
    pub options: LlmOptions,
}

impl AgentConfig {
    /// The top-level keys this crate owns.
    pub const SECTIONS: [&'static str; 2] = ["agent", "clients"];

    /// Parses the agent's sections of a whole config file's TOML text.
    pub fn parse(text: &str) -> Result<AgentConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Settles the model, endpoint and key; `env` reads an environment variable.
    pub fn model_settings(
        &self,
        overrides: &Overrides,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ModelSettings, String> {
        let a = &self.agent;
        let model = overrides
            .model
            .clone()
            .or_else(|| a.model.clone())
            .ok_or("no model: set `model` in [agent] or pass --model")?;
        let key = match &a.api_key {
            Some(k) => Some(expand(k, env)?),
            None => None,
        };
        let base_url = overrides.base_url.clone().or_else(|| a.base_url.clone());
        let azure_endpoint = a
            .azure_endpoint
            .clone()
            .or_else(|| env("AZURE_OPENAI_ENDPOINT"));
        // Azure when the file says so, or when nothing names another server and Azure's
        // variables are there.
        let other_server = base_url.is_some() || env("OPENAI_BASE_URL").is_some();
        let azure = match a.provider {
            Some(p) => p == Provider::Azure,
            None => {
                !other_server
                    && (a.azure_endpoint.is_some()
                        || (azure_endpoint.is_some()
                            && env("AZURE_OPENAI_API_KEY").is_some()
                            && env("OPENAI_API_KEY").is_none()))
            }
        };
        let endpoint = if azure {
            let resource = azure_endpoint
                .ok_or("Azure OpenAI needs `azure_endpoint` in [agent] or AZURE_OPENAI_ENDPOINT")?;
            let key = key
                .or_else(|| env("AZURE_OPENAI_API_KEY"))
                .ok_or("Azure OpenAI needs `api_key` in [agent] or AZURE_OPENAI_API_KEY")?;
            let version = a.api_version.clone().or_else(|| env("OPENAI_API_VERSION"));
            if version.as_deref() == Some("v1") {
                Endpoint::azure_v1(&resource, key)
            } else {
                let deployment = a.azure_deployment.clone().unwrap_or_else(|| model.clone());
                Endpoint::azure_deployment(resource, deployment, version, key)
            }
        } else {
            let base_url = base_url
                .or_else(|| env("OPENAI_BASE_URL"))
                .unwrap_or_else(|| crate::llm::OPENAI_BASE_URL.to_owned());
            Endpoint::compatible(base_url, key.or_else(|| env("OPENAI_API_KEY")))
        };
        let mut options = LlmOptions::default();
        match a.max_tokens_field.as_deref() {
            None | Some("max_tokens") => {}
            Some("max_completion_tokens") => {
                options.max_tokens_field = MaxTokensField::MaxCompletionTokens;
            }
            Some(other) => {
                return Err(format!(
                    "[agent] max_tokens_field must be `max_tokens` or `max_completion_tokens`, not `{other}`"
                ))
            }
        }
        if let Some(s) = a.timeout_secs {
            options.idle_timeout = Duration::from_secs(s);
        }
        if let Some(r) = a.max_retries {
            options.max_retries = r;
        }
        Ok(ModelSettings {
            model,
            endpoint,
            options,
        })
    }
}

/// A literal, or one whole `${VAR}`.
fn expand(value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
        Some(var) => {
            env(var).ok_or_else(|| format!("[agent] api_key names ${{{var}}}, which is not set"))
        }
        None => Ok(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Credential, UrlShape};
    use std::collections::HashMap;

    fn settle(
        toml_text: &str,
        vars: &[(&str, &str)],
        o: &Overrides,
    ) -> Result<ModelSettings, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        AgentConfig::parse(toml_text)?.model_settings(o, &|k| vars.get(k).cloned())
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_the_environment() {
        let s = settle(
            "[agent]\nmodel = \"file-model\"\nbase_url = \"http://file/v1\"\napi_key = \"${MY_KEY}\"\n",
            &[("MY_KEY", "k1"), ("OPENAI_BASE_URL", "http://env/v1"), ("OPENAI_API_KEY", "k2")],
            &Overrides { model: Some("flag-model".into()), base_url: None },
        )
        .unwrap();
        assert_eq!(s.model, "flag-model");
        assert_eq!(s.endpoint.chat_url(), "http://file/v1/chat/completions");
        assert_eq!(s.endpoint.credential, Credential::Bearer("k1".into()));
        let s = settle(
            "[agent]\nmodel = \"m\"\n",
            &[
                ("OPENAI_BASE_URL", "http://env/v1"),
                ("OPENAI_API_KEY", "k2"),
            ],
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(s.endpoint.chat_url(), "http://env/v1/chat/completions");
        assert_eq!(s.endpoint.credential, Credential::Bearer("k2".into()));
    }

    #[test]
    fn azures_variables_select_the_deployments_url_or_v1() {
        let vars = [
            ("AZURE_OPENAI_ENDPOINT", "https://r.openai.azure.com"),
            ("AZURE_OPENAI_API_KEY", "az"),
        ];
        let s = settle(
            "[agent]\nmodel = \"gpt-4o\"\n",
            &vars,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            s.endpoint.shape,
            UrlShape::AzureDeployment {
                resource_url: "https://r.openai.azure.com".into(),
                deployment: "gpt-4o".into(),
                api_version: "2024-10-21".into()
            }
        );
        assert_eq!(s.endpoint.credential, Credential::ApiKey("az".into()));
        let s = settle(
            "[agent]\nmodel = \"gpt-4o\"\nprovider = \"azure\"\napi_version = \"v1\"\n",
            &vars,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            s.endpoint.chat_url(),
            "https://r.openai.azure.com/openai/v1/chat/completions"
        );
    }

    #[test]
    fn a_missing_model_or_variable_and_a_typo_are_clear_errors() {
        assert!(settle("", &[], &Overrides::default())
            .unwrap_err()
            .contains("no model"));
        let e = settle(
            "[agent]\nmodel = \"m\"\napi_key = \"${NOPE}\"\n",
            &[],
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("${NOPE}"), "{e}");
        let e = AgentConfig::parse("[agent]\nmodle = \"m\"\n").unwrap_err();
        assert!(e.contains("modle"), "{e}");
        assert!(!format!(
            "{:?}",
            AgentConfig::parse("[agent]\napi_key = \"sk-secret\"\n").unwrap()
        )
        .contains("sk-secret"));
    }
}
