//! Where a chat-completions request goes and how it authenticates. OpenAI, Azure OpenAI and
//! the compatible servers (vLLM, Ollama, llama.cpp, LM Studio) differ only in the URL shape and
//! the credential header, so one enum of URL shapes plus one of credentials covers all of them
//! without a client per provider.

use std::fmt;

/// OpenAI's API.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// The Azure OpenAI `api-version` used when none is configured (the current GA one).
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";

/// How the request proves who it is.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// No credential (a local server).
    None,
    /// `Authorization: Bearer <token>` (OpenAI, compatible servers, Azure with Entra ID or v1).
    Bearer(String),
    /// `api-key: <key>` (Azure OpenAI keys).
    ApiKey(String),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets are never printed.
        f.write_str(match self {
            Credential::None => "None",
            Credential::Bearer(_) => "Bearer(..)",
            Credential::ApiKey(_) => "ApiKey(..)",
        })
    }
}

/// The URL shape of a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlShape {
    /// `{base_url}/chat/completions`: OpenAI, Azure's v1 URL
    /// (`https://{res}.openai.azure.com/openai/v1`), any compatible server.
    Compatible {
        /// The base URL, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`.
        base_url: String,
    },
    /// Azure OpenAI's classic deployments URL:
    /// `{resource}/openai/deployments/{deployment}/chat/completions?api-version={v}`.
    AzureDeployment {
        /// The resource URL, e.g. `https://my-res.openai.azure.com`.
        resource_url: String,
        /// The deployment name (it selects the model; `model` in the body is ignored).
        deployment: String,
        /// The `api-version` query parameter.
        api_version: String,
    },
}

/// Where and how to send chat-completions requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL shape.
    pub shape: UrlShape,
    /// The credential.
    pub credential: Credential,
}

impl Endpoint {
    /// OpenAI's API with an API key.
    pub fn openai(api_key: impl Into<String>) -> Self {
        Self::compatible(OPENAI_BASE_URL, Some(api_key.into()))
    }

    /// Any OpenAI-compatible server at `base_url` (the URL `/chat/completions` is appended
    /// to), with a bearer key when it wants one. Azure's v1 URL is one of these.
    pub fn compatible(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Endpoint {
            shape: UrlShape::Compatible {
                base_url: base_url.into(),
            },
            credential: api_key.map_or(Credential::None, Credential::Bearer),
        }
    }

    /// Azure OpenAI's v1 URL (`{resource}/openai/v1`, no `api-version`), with an `api-key`.
    pub fn azure_v1(resource_url: &str, api_key: impl Into<String>) -> Self {
        Endpoint {
            shape: UrlShape::Compatible {
                base_url: format!("{}/openai/v1", resource_url.trim_end_matches('/')),
            },
            credential: Credential::ApiKey(api_key.into()),
        }
    }

    /// Azure OpenAI's classic deployments URL with an `api-key`; `api_version` defaults to
    /// [`AZURE_DEFAULT_API_VERSION`].
    pub fn azure_deployment(
        resource_url: impl Into<String>,
        deployment: impl Into<String>,
        api_version: Option<String>,
        api_key: impl Into<String>,
    ) -> Self {
        Endpoint {
            shape: UrlShape::AzureDeployment {
                resource_url: resource_url.into(),
                deployment: deployment.into(),
                api_version: api_version.unwrap_or_else(|| AZURE_DEFAULT_API_VERSION.to_owned()),
            },
            credential: Credential::ApiKey(api_key.into()),
        }
    }

    /// The URL chat-completions requests are POSTed to.
    pub fn chat_url(&self) -> String {
        match &self.shape {
            UrlShape::Compatible { base_url } => {
                format!("{}/chat/completions", base_url.trim_end_matches('/'))
            }
            UrlShape::AzureDeployment {
                resource_url,
                deployment,
                api_version,
            } => format!(
                "{}/openai/deployments/{}/chat/completions?api-version={}",
                resource_url.trim_end_matches('/'),
                encode_segment(deployment),
                encode_segment(api_version)
            ),
        }
    }

    /// The GenAI semantic conventions' `gen_ai.provider.name`: `azure.ai.openai` for Azure's
    /// URL or key, else `openai` (the protocol every compatible server speaks).
    pub fn provider_name(&self) -> &'static str {
        match (&self.shape, &self.credential) {
            (UrlShape::AzureDeployment { .. }, _) | (_, Credential::ApiKey(_)) => "azure.ai.openai",
            _ => "openai",
        }
    }

    /// The credential header, if any.
    pub(crate) fn auth_header(&self) -> Option<(&'static str, String)> {
        match &self.credential {
            Credential::None => None,
            Credential::Bearer(t) => Some(("authorization", format!("Bearer {t}"))),
            Credential::ApiKey(k) => Some(("api-key", k.clone())),
        }
    }
}

/// Percent-encodes what may not stand in a path segment or a query value as is.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_url_shape_is_built_as_the_provider_documents_it() {
        assert_eq!(
            Endpoint::openai("k").chat_url(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            Endpoint::compatible("http://localhost:11434/v1/", None).chat_url(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(
            Endpoint::azure_v1("https://r.openai.azure.com/", "k").chat_url(),
            "https://r.openai.azure.com/openai/v1/chat/completions"
        );
        let classic = Endpoint::azure_deployment("https://r.openai.azure.com", "gpt 4o", None, "k");
        assert_eq!(
            classic.chat_url(),
            "https://r.openai.azure.com/openai/deployments/gpt%204o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(classic.auth_header(), Some(("api-key", "k".to_owned())));
        assert!(!format!("{classic:?}").contains("\"k\""));
    }
}
