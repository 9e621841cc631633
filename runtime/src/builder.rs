//! [`ServerBuilder`]: assembling a server from controllers, closures and dynamic definitions.

use crate::controller::Controller;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use toolyard_actors::{
    CompleteFn, CompletionTarget, DefinitionError, HandlerError, IntoCallToolResult, Layer, Layers,
    Limits, ListSettings, MethodFn, PromptDef, RequestContext, ResourceDef, Server, ServerConfig,
    StateSealer, TaskSettings, TaskStore, TemplateDef, ToolDef,
};
use toolyard_proto::{Implementation, JsonObject, Tool};

/// Building a server failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A definition is invalid.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// Two definitions share a name.
    #[error("duplicate {kind} `{name}`")]
    Duplicate {
        /// tool, prompt, resource.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// The actors did not start.
    #[error(transparent)]
    Start(#[from] toolyard_actors::StartError),
    /// The HTTP transport's OAuth settings are unusable.
    #[cfg(feature = "http")]
    #[error(transparent)]
    OAuth(#[from] crate::http::OAuthConfigError),
}

/// The JSON Schema (2020-12) of `T`, as a JSON object.
pub fn schema_for<T: JsonSchema>() -> JsonObject {
    schema_object_for::<T>()
}

#[doc(hidden)]
pub fn schema_object_for<T: JsonSchema>() -> JsonObject {
    let settings = schemars::generate::SchemaSettings::draft2020_12();
    let schema = settings.into_generator().into_root_schema_for::<T>();
    match serde_json::to_value(schema) {
        Ok(serde_json::Value::Object(mut m)) => {
            // `title` repeats the Rust type name; tools are described by their own fields.
            m.remove("title");
            if !m.contains_key("type") {
                m.insert("type".into(), "object".into());
            }
            m
        }
        _ => toolyard_actors::empty_object_schema(),
    }
}

/// A tool from a closure taking typed arguments; `inputSchema` comes from `A`'s JsonSchema.
pub fn tool_fn<A, R, F, Fut>(
    name: &str,
    description: &str,
    f: F,
) -> Result<ToolDef, DefinitionError>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: IntoCallToolResult,
    F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
{
    let tool = Tool {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        input_schema: schema_for::<A>(),
        ..Tool::default()
    };
    ToolDef::from_fn(tool, f)
}

/// Shell-style glob: `*` matches any run of characters, `?` one character.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// Assembles a server.
pub struct ServerBuilder {
    config: ServerConfig,
    errors: Vec<BuildError>,
    layers: Vec<Arc<dyn Layer>>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("name", &self.config.info.name)
            .finish()
    }
}

impl ServerBuilder {
    /// A server called `name`, version `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        ServerBuilder {
            config: ServerConfig::new(Implementation::new(name, version)),
            errors: Vec::new(),
            layers: Vec::new(),
        }
    }

    /// Instructions for the model using the server.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.config.instructions = Some(text.into());
        self
    }

    /// Adds `name` to `capabilities.experimental` (e.g. a gateway saying what it does not
    /// relay).
    pub fn experimental(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.config
            .experimental
            .get_or_insert_with(Default::default)
            .insert(name.into(), value);
        self
    }

    /// Adds a tool. A name given twice is an error, unless each of its definitions has an
    /// audience ([`ToolDef::for_audience`]): then they are alternatives, and each caller
    /// gets the first that admits it (docs/semantics.md, "Who may see what").
    pub fn tool(mut self, tool: ToolDef) -> Self {
        let mut same = self
            .config
            .tools
            .iter()
            .filter(|t| t.tool().name == tool.tool().name)
            .peekable();
        let alternatives = tool.has_audience() && same.clone().all(ToolDef::has_audience);
        if same.peek().is_some() && !alternatives {
            self.errors.push(BuildError::Duplicate {
                kind: "tool",
                name: tool.tool().name.clone(),
            });
        }
        self.config.tools.push(tool);
        self
    }

    /// Adds a tool, or records its definition error (reported by [`ServerBuilder::start`]).
    pub fn try_tool(self, tool: Result<ToolDef, DefinitionError>) -> Self {
        match tool {
            Ok(t) => self.tool(t),
            Err(e) => {
                let mut s = self;
                s.errors.push(e.into());
                s
            }
        }
    }

    /// Adds a static resource.
    pub fn resource(mut self, resource: ResourceDef) -> Self {
        self.config.resources.push(resource);
        self
    }

    /// Adds a resource template.
    pub fn template(mut self, template: TemplateDef) -> Self {
        self.config.templates.push(template);
        self
    }

    /// Adds a resource template, or records its definition error.
    pub fn try_template(mut self, template: Result<TemplateDef, DefinitionError>) -> Self {
        match template {
            Ok(t) => self.config.templates.push(t),
            Err(e) => self.errors.push(e.into()),
        }
        self
    }

    /// Adds a prompt.
    pub fn prompt(mut self, prompt: PromptDef) -> Self {
        self.config.prompts.push(prompt);
        self
    }

    /// Adds an argument completer.
    pub fn completer(mut self, target: CompletionTarget, f: CompleteFn) -> Self {
        self.config.completers.push((target, f));
        self
    }

    /// Adds a custom JSON-RPC method.
    pub fn method(mut self, name: impl Into<String>, f: MethodFn) -> Self {
        self.config.methods.push((name.into(), f));
        self
    }

    /// Adds everything a controller defines.
    pub fn controller<C: Controller>(self, controller: C) -> Self {
        self.controller_arc(Arc::new(controller))
    }

    /// Adds everything a shared controller defines.
    pub fn controller_arc<C: Controller>(self, controller: Arc<C>) -> Self {
        self.controller_arc_for_audience(controller, None)
    }

    /// Adds everything a controller defines, for `audience` when given
    /// ([`Audience`](toolyard_actors::Audience)): its tools, resources, templates and prompts
    /// are then listed and served to those callers alone.
    pub fn controller_for_audience<C: Controller>(
        self,
        controller: C,
        audience: Option<toolyard_actors::Audience>,
    ) -> Self {
        self.controller_arc_for_audience(Arc::new(controller), audience)
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    fn controller_arc_for_audience<C: Controller>(
        mut self,
        controller: Arc<C>,
        audience: Option<toolyard_actors::Audience>,
    ) -> Self {
        let Some(audience) = audience else {
            for t in controller.tools() {
                self = self.tool(t);
            }
            self.config.resources.extend(controller.resources());
            self.config.templates.extend(controller.templates());
            self.config.prompts.extend(controller.prompts());
            return self;
        };
        for t in controller.tools() {
            self = self.tool(t.for_audience(audience.clone()));
        }
        let resources = controller.resources().into_iter();
        let templates = controller.templates().into_iter();
        let prompts = controller.prompts().into_iter();
        (self.config.resources).extend(resources.map(|d| d.for_audience(audience.clone())));
        (self.config.templates).extend(templates.map(|d| d.for_audience(audience.clone())));
        (self.config.prompts).extend(prompts.map(|d| d.for_audience(audience.clone())));
        self
    }

    /// Exposes the tools of a service whose method names match one of `globs` (e.g.
    /// `["search", "get_*"]`), named `<service>_<method>` so services cannot collide.
    pub fn expose<C: Controller>(mut self, service: &str, controller: C, globs: &[&str]) -> Self {
        let controller = Arc::new(controller);
        for mut t in controller.tools() {
            let name = t.tool().name.clone();
            if globs.iter().any(|g| glob_match(g, &name)) {
                t.rename(format!("{service}_{name}"));
                self = self.tool(t);
            }
        }
        self
    }

    /// Adds a middleware layer (outermost first).
    pub fn layer(mut self, layer: Arc<dyn Layer>) -> Self {
        self.layers.push(layer);
        self
    }

    /// Publishes a [`LifecycleEvent::ToolInvoked`](crate::LifecycleEvent::ToolInvoked) for
    /// every tool call on the server's lifecycle stream ([`Server::lifecycle`]); a layer,
    /// placed where this is called among the others.
    pub fn tool_events(mut self) -> Self {
        self.layers.push(self.config.lifecycle.tool_events());
        self
    }

    /// Connection limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config.limits = limits;
        self
    }

    /// Pagination and caching of lists.
    pub fn list_settings(mut self, list: ListSettings) -> Self {
        self.config.list = list;
        self
    }

    /// The secret that signs modern `requestState` (replicas behind one load balancer must
    /// share it); without it a random per-process key is used. An empty secret is no secret
    /// (its key is public: anyone could seal state the server trusts): it is ignored, with a
    /// warning, as an empty `TOOLYARD_STATE_SECRET` is.
    pub fn state_secret(mut self, secret: &str, ttl: Duration) -> Self {
        if secret.is_empty() {
            tracing::warn!("an empty state secret is ignored: requestState is sealed with a random key of this process");
            self.config.sealer = StateSealer::random(ttl);
        } else {
            self.config.sealer = StateSealer::from_secret(secret, ttl);
        }
        self
    }

    /// Offers tasks, kept in `store`: the tasks extension (`io.modelcontextprotocol/tasks`) for
    /// 2026-07-28 callers and the experimental tasks of 2025-11-25. Tools opt in with
    /// [`ToolDef::with_task_support`].
    pub fn tasks(mut self, store: Arc<dyn TaskStore>) -> Self {
        self.config.tasks = Some(store);
        self
    }

    /// Offers tasks kept in this process's memory ([`toolyard_actors::InMemoryTaskStore`]).
    pub fn in_memory_tasks(self) -> Self {
        self.tasks(Arc::new(toolyard_actors::InMemoryTaskStore::default()))
    }

    /// How tasks run (retention, polling interval).
    pub fn task_settings(mut self, settings: TaskSettings) -> Self {
        self.config.task_settings = settings;
        self
    }

    /// Adds the tools, resources and prompts a config file declares.
    pub fn config(self, config: &crate::Config) -> Self {
        config.apply(self)
    }

    /// Starts the server's actors.
    pub async fn start(mut self) -> Result<Server, BuildError> {
        if let Some(e) = self.errors.into_iter().next() {
            return Err(e);
        }
        self.config.layers = Layers::new(self.layers);
        Ok(Server::start(self.config).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        assert!(glob_match("get_*", "get_user"));
        assert!(glob_match("search", "search"));
        assert!(!glob_match("search", "search2"));
        assert!(glob_match("*", ""));
        assert!(glob_match("g?t", "get"));
        assert!(!glob_match("get_*", "set_user"));
    }
}
