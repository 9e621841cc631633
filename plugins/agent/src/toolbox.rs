//! The tools an agent offers the model: every tool of every MCP connection (or those an
//! allow-list names), each under a valid function name (see `names`), with its input schema
//! as the function's parameters, and the way back from a function name to the connection and
//! MCP tool that owns it.
//!
//! A server that sends `notifications/tools/list_changed` marks the toolbox changed, and the
//! agent lists again before its next model request (never while a turn's calls run, so a
//! call always goes to the tool the model saw). A legacy session gets these notifications
//! unasked; a modern (2026-07-28) server sends them only on a `subscriptions/listen`
//! stream, so the toolbox opens one (`toolsListChanged`) on each modern connection whose
//! server declares `tools.listChanged`, and keeps it open as long as the toolbox lives.

use crate::error::AgentError;
use crate::llm::FunctionTool;
use crate::names::function_names;
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use toolyard_client::{Client, ClientRegistry, Subscription};
use toolyard_proto::{SubscriptionFilter, Tool};

/// The most tools one chat request may carry (OpenAI's `array_above_max_length`).
pub const MAX_TOOLS: usize = 128;

/// One tool as the agent offers it.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    /// The connection that owns it.
    pub server: String,
    /// The function name the model sees.
    pub function: String,
    /// The MCP tool.
    pub tool: Tool,
}

impl ToolInfo {
    /// Whether the server says the tool changes nothing (`readOnlyHint`).
    pub fn read_only(&self) -> bool {
        self.tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false)
    }
}

/// The tools of a set of connections, and the connections.
#[derive(Debug, Clone, Default)]
pub struct Toolbox {
    clients: Vec<(String, Client)>,
    tools: Vec<ToolInfo>,
    allow: Vec<String>,
    /// Set when a server said its tools changed.
    changed: Arc<AtomicBool>,
    /// The modern connections' `subscriptions/listen` streams (closed when dropped).
    subscriptions: Arc<Vec<Subscription>>,
}

/// Whether an allow-list entry (`server/tool`, `server/*` or `tool`) names this tool.
fn allows(entry: &str, server: &str, tool: &str) -> bool {
    match entry.split_once('/') {
        Some((s, "*")) => s == server,
        Some((s, t)) => s == server && t == tool,
        None => entry == tool,
    }
}

impl Toolbox {
    /// The tools of every connection of `registry`, limited to `allow` when it is not empty.
    pub async fn from_registry(
        registry: &ClientRegistry,
        allow: &[String],
    ) -> Result<Toolbox, AgentError> {
        let clients = registry
            .names()
            .iter()
            .filter_map(|n| registry.get(n).map(|c| (n.clone(), c.clone())))
            .collect();
        Self::from_clients(clients, allow).await
    }

    /// The tools of these named connections, limited to `allow` when it is not empty.
    pub async fn from_clients(
        clients: Vec<(String, Client)>,
        allow: &[String],
    ) -> Result<Toolbox, AgentError> {
        // Listening starts before the listing, so no change falls between the two.
        let receivers: Vec<_> = clients.iter().map(|(_, c)| c.notifications()).collect();
        let subscriptions = listen_for_changes(&clients).await;
        let tools = list(&clients, allow, true).await?;
        let changed = Arc::new(AtomicBool::new(false));
        for mut receiver in receivers {
            let changed = changed.clone();
            tokio::spawn(async move {
                loop {
                    match receiver.recv().await {
                        Ok(n) if n.method == "notifications/tools/list_changed" => {
                            changed.store(true, Ordering::Release);
                        }
                        Ok(_) => {}
                        // Missed notifications may have been a change.
                        Err(RecvError::Lagged(_)) => changed.store(true, Ordering::Release),
                        Err(RecvError::Closed) => break,
                    }
                }
            });
        }
        Ok(Toolbox {
            clients,
            tools,
            allow: allow.to_vec(),
            changed,
            subscriptions: Arc::new(subscriptions),
        })
    }

    /// Whether a server said its tools changed since they were listed.
    pub fn tools_changed(&self) -> bool {
        self.changed.load(Ordering::Acquire)
    }

    /// The same connections' tools, listed again. An allow-list entry that no longer names
    /// a tool is not an error here: the tool went away.
    pub async fn refresh(&self) -> Result<Toolbox, AgentError> {
        self.changed.store(false, Ordering::Release);
        let tools = list(&self.clients, &self.allow, false).await?;
        Ok(Toolbox {
            clients: self.clients.clone(),
            tools,
            allow: self.allow.clone(),
            changed: self.changed.clone(),
            subscriptions: self.subscriptions.clone(),
        })
    }

    /// The tools, in connection order.
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// The tool the model calls `function`; a model that uses a tool's MCP name instead
    /// (`files.read` for `files_read`) is understood when that name is unambiguous.
    pub fn resolve(&self, function: &str) -> Option<&ToolInfo> {
        self.tools
            .iter()
            .find(|t| t.function == function)
            .or_else(|| {
                let mut by_mcp_name = self.tools.iter().filter(|t| t.tool.name == function);
                match (by_mcp_name.next(), by_mcp_name.next()) {
                    (Some(only), None) => Some(only),
                    _ => None,
                }
            })
    }

    /// The connection named `server`.
    pub fn client(&self, server: &str) -> Option<&Client> {
        self.clients
            .iter()
            .find(|(n, _)| n == server)
            .map(|(_, c)| c)
    }

    /// Closes every connection.
    pub async fn close(&self) {
        futures_util::future::join_all(self.clients.iter().map(|(_, c)| c.close())).await;
    }

    /// The functions for a chat request.
    pub fn functions(&self) -> Vec<FunctionTool> {
        self.tools
            .iter()
            .map(|t| FunctionTool {
                name: t.function.clone(),
                description: t.tool.description.clone().or_else(|| t.tool.title.clone()),
                parameters: parameters(&t.tool.input_schema),
            })
            .collect()
    }
}

/// Opens a `subscriptions/listen` for tool-list changes on every modern connection whose
/// server announces them. A server that refuses costs only the refresh: it is logged, and
/// the agent keeps the tools it listed.
async fn listen_for_changes(clients: &[(String, Client)]) -> Vec<Subscription> {
    let wanted = clients.iter().filter(|(_, c)| {
        c.is_modern()
            && c.session().is_some_and(|s| {
                s.capabilities
                    .tools
                    .as_ref()
                    .and_then(|t| t.list_changed)
                    .unwrap_or(false)
            })
    });
    let opened = futures_util::future::join_all(wanted.map(|(name, c)| async move {
        let filter = SubscriptionFilter {
            tools_list_changed: Some(true),
            ..SubscriptionFilter::default()
        };
        c.subscribe(filter).await.map_err(|e| (name, e))
    }))
    .await;
    opened
        .into_iter()
        .filter_map(|r| match r {
            Ok(s) => Some(s),
            Err((server, error)) => {
                tracing::warn!(server, %error, "cannot follow this server's tool changes");
                None
            }
        })
        .collect()
}

/// Lists the tools of `clients` that `allow` lets through (all when it is empty), under
/// function names; `strict` makes an entry that names no tool an error.
async fn list(
    clients: &[(String, Client)],
    allow: &[String],
    strict: bool,
) -> Result<Vec<ToolInfo>, AgentError> {
    let listings = futures_util::future::join_all(clients.iter().map(|(name, c)| async move {
        c.list_all_tools()
            .await
            .map_err(|source| AgentError::ListTools {
                server: name.clone(),
                source,
            })
    }))
    .await;
    let mut found: Vec<(String, Tool)> = Vec::new();
    for ((name, _), listing) in clients.iter().zip(listings) {
        for tool in listing? {
            if allow.is_empty() || allow.iter().any(|a| allows(a, name, &tool.name)) {
                found.push((name.clone(), tool));
            }
        }
    }
    if let Some(unmatched) = allow
        .iter()
        .find(|a| strict && !found.iter().any(|(s, t)| allows(a, s, &t.name)))
    {
        return Err(AgentError::UnmatchedAllowEntry(unmatched.clone()));
    }
    if found.len() > MAX_TOOLS {
        return Err(AgentError::TooManyTools {
            count: found.len(),
            limit: MAX_TOOLS,
        });
    }
    let pairs: Vec<(&str, &str)> = found
        .iter()
        .map(|(s, t)| (s.as_str(), t.name.as_str()))
        .collect();
    let functions = function_names(&pairs);
    Ok(found
        .into_iter()
        .zip(functions)
        .map(|((server, tool), function)| ToolInfo {
            server,
            function,
            tool,
        })
        .collect())
}

/// An input schema as function parameters: local `$ref`s inlined and `$defs` dropped (see
/// [`schema`](crate::schema); several providers refuse references), `$schema` dropped (some
/// refuse it), and `type`/`properties` present (some refuse an object schema without them).
/// `strict` mode is not asked for, since it needs every property required.
pub(crate) fn parameters(schema: &Map<String, Value>) -> Value {
    let (mut s, _) = crate::schema::inline_refs(schema);
    s.remove("$schema");
    s.entry("type").or_insert_with(|| "object".into());
    if s.get("type") == Some(&Value::from("object")) {
        s.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Value::Object(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_entries_name_a_tool_a_server_or_a_bare_tool() {
        assert!(allows("fs/read", "fs", "read"));
        assert!(!allows("fs/read", "git", "read"));
        assert!(allows("fs/*", "fs", "write"));
        assert!(allows("read", "git", "read"));
    }

    #[test]
    fn a_function_resolves_by_its_name_or_by_an_unambiguous_mcp_name() {
        let info = |server: &str, tool: &str, function: &str| ToolInfo {
            server: server.into(),
            function: function.into(),
            tool: Tool::new(tool, Map::new()),
        };
        let toolbox = Toolbox {
            allow: Vec::new(),
            changed: Arc::default(),
            subscriptions: Arc::default(),
            clients: Vec::new(),
            tools: vec![
                info("fs", "files.read", "files_read"),
                info("a", "echo", "echo_00000001"),
                info("b", "echo", "echo_00000002"),
            ],
        };
        let server = |f: &str| toolbox.resolve(f).map(|t| t.server.as_str());
        assert_eq!(server("files_read"), Some("fs"));
        assert_eq!(server("files.read"), Some("fs"));
        assert_eq!(server("echo_00000002"), Some("b"));
        assert_eq!(server("echo"), None, "two servers have `echo`");
    }

    #[test]
    fn schemas_lose_dollar_schema_and_gain_properties() {
        let mut m = Map::new();
        m.insert(
            "$schema".into(),
            "https://json-schema.org/draft/2020-12/schema".into(),
        );
        m.insert("type".into(), "object".into());
        assert_eq!(
            parameters(&m),
            serde_json::json!({"type": "object", "properties": {}})
        );
    }
}
