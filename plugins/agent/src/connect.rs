//! Connecting the agent's MCP servers from `[[clients]]` entries with handlers for what their
//! tools ask. A server only elicits or samples when the client declared it can answer, and a
//! client declares what its own handlers answer, so the agent connects the servers itself
//! (the same entries a `ClientRegistry` reads) instead of taking a registry's clients, which
//! declare nothing. A [`Toolbox`] built from a `ClientRegistry` works for every tool that
//! does not ask.

use crate::error::AgentError;
use crate::sampling::LlmSampler;
use crate::toolbox::Toolbox;
use std::sync::Arc;
use std::time::Duration;
use toolyard_client::{
    Client, ClientBuilder, ClientEntry, ClientRegistry, ElicitHandler, ProtocolChoice,
};
use toolyard_proto::{Implementation, ProtocolVersion};

/// Who answers what the tools ask.
#[derive(Clone, Default)]
pub struct ToolHandlers {
    /// Answers elicitation (a legacy server's request, or a modern server's input request);
    /// without it the client does not declare elicitation and tools cannot ask.
    pub elicit: Option<ElicitHandler>,
    /// Answers sampling with the model, with a budget per connection name.
    pub sampler: Option<Arc<LlmSampler>>,
}

impl std::fmt::Debug for ToolHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHandlers")
            .field("elicit", &self.elicit.is_some())
            .field("sampler", &self.sampler.is_some())
            .finish()
    }
}

fn settings(entry: &ClientEntry) -> Result<(ProtocolChoice, Option<u64>), AgentError> {
    let (protocol, timeout) = match entry {
        ClientEntry::Stdio {
            protocol,
            timeout_ms,
            ..
        }
        | ClientEntry::Auto {
            protocol,
            timeout_ms,
            ..
        }
        | ClientEntry::Http {
            protocol,
            timeout_ms,
            ..
        } => (protocol.as_deref(), *timeout_ms),
        ClientEntry::Sse { timeout_ms, .. } => {
            return Ok((
                ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05),
                *timeout_ms,
            ))
        }
    };
    let choice = match protocol {
        None => ProtocolChoice::Auto,
        Some(v) => match ProtocolVersion::parse(v) {
            Some(ProtocolVersion::V2026_07_28) => ProtocolChoice::Modern,
            Some(legacy) => ProtocolChoice::Legacy(legacy),
            None => {
                return Err(AgentError::Config(format!(
                    "connection `{}`: unknown protocol version {v:?}",
                    entry.name()
                )))
            }
        },
    };
    Ok((choice, timeout))
}

async fn connect_one(
    entry: &ClientEntry,
    info: Implementation,
    handlers: &ToolHandlers,
) -> Result<Client, AgentError> {
    let (protocol, timeout) = settings(entry)?;
    let mut builder = ClientBuilder::new(info).protocol(protocol);
    if let Some(ms) = timeout {
        builder = builder.request_timeout(Duration::from_millis(ms));
    }
    if let Some(elicit) = &handlers.elicit {
        builder = builder.on_elicit(elicit.clone());
    }
    if let Some(sampler) = &handlers.sampler {
        builder = builder.on_sample(sampler.handler(entry.name()));
    }
    let transport = entry
        .transport()
        .map_err(|e| AgentError::Config(e.to_string()))?;
    builder
        .connect_boxed(transport)
        .await
        .map_err(|source| AgentError::Connect {
            server: entry.name().to_owned(),
            source,
        })
}

impl Toolbox {
    /// Connects every entry (concurrently) with `handlers`, and offers their tools (limited
    /// to `allow` when it is not empty). If one cannot be reached, the others are closed.
    pub async fn connect(
        entries: &[ClientEntry],
        info: Implementation,
        handlers: &ToolHandlers,
        allow: &[String],
    ) -> Result<Toolbox, AgentError> {
        ClientRegistry::validate(entries).map_err(|e| AgentError::Config(e.to_string()))?;
        let attempts = entries.iter().map(|e| {
            let info = info.clone();
            async move {
                connect_one(e, info, handlers)
                    .await
                    .map(|c| (e.name().to_owned(), c))
            }
        });
        let mut clients = Vec::new();
        let mut failure = None;
        for r in futures_util::future::join_all(attempts).await {
            match r {
                Ok(c) => clients.push(c),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            futures_util::future::join_all(clients.iter().map(|(_, c)| c.close())).await;
            return Err(e);
        }
        match Toolbox::from_clients(clients.clone(), allow).await {
            Ok(t) => Ok(t),
            Err(e) => {
                futures_util::future::join_all(clients.iter().map(|(_, c)| c.close())).await;
                Err(e)
            }
        }
    }
}
