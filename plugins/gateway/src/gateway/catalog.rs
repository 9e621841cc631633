//! What each source offers, in the server's registry: discovery, installing and unlisting a
//! source's items, following health (and the [`ListingGuard`] that fails listings), and the
//! upstream notices that call for a new discovery.

use super::forward::{forward_complete, forward_prompt, forward_read, forward_tool};
use super::uri::expose_uri;
use super::{lock, Gateway, GatewayError, GatewayInner, Source};
use crate::spec::FailureMode;
use arc_swap::ArcSwap;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use toolyard::{
    CompletionTarget, Layer, PromptDef, ResourceDef, TemplateDef, ToolDef, UriTemplate,
};
use toolyard_client::{ClientError, Notice};
use toolyard_proto::{
    CompleteReference, ErrorObject, Prompt, PromptReference, Resource, ResourceTemplate,
    ResourceTemplateReference, Tool,
};

/// What one source exposes, by exposed name / URI.
#[derive(Debug, Default, Clone)]
pub(super) struct Catalog {
    pub(super) tools: Vec<String>,
    pub(super) resources: Vec<String>,
    pub(super) templates: Vec<String>,
    pub(super) prompts: Vec<String>,
}

/// Sources whose failure mode is `fail` and which are unhealthy: listings fail while any
/// is. Built before the server (it is one of its layers) and shared with the gateway.
#[derive(Clone, Default)]
pub struct ListingGuard {
    failing: Arc<ArcSwap<Vec<String>>>,
}

impl std::fmt::Debug for ListingGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListingGuard")
            .field("failing", &self.failing.load())
            .finish()
    }
}

impl Layer for ListingGuard {
    fn observes(&self, method: &str) -> bool {
        matches!(
            method,
            "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list"
        )
    }

    fn start(&self, info: &toolyard::RequestInfo) -> Result<toolyard::Observe, ErrorObject> {
        // Only listings get here (`observes`).
        let _ = info;
        let failing = self.failing.load();
        if !failing.is_empty() {
            return Err(ErrorObject::internal(format!(
                "source(s) unavailable: {}",
                failing.join(", ")
            ))
            .with_data(json!({ "unavailableSources": failing.as_slice() })));
        }
        Ok(toolyard::Observe::Nothing)
    }
}

impl Gateway {
    /// Lists what the source offers and swaps it into the server's registry.
    pub(super) async fn discover(&self, source: &Arc<Source>) -> Result<(), GatewayError> {
        let name = &source.spec.name;
        let lease = source.pool.lease().await?;
        let discovery_error = |error: ClientError| GatewayError::Discovery {
            name: name.clone(),
            error,
        };
        let caps = lease.session().map(|s| s.capabilities).unwrap_or_default();
        let tools = if caps.tools.is_some() {
            lease.list_all_tools().await.map_err(|e| {
                lease.report(&e);
                discovery_error(e)
            })?
        } else {
            Vec::new()
        };
        let (resources, templates) = if caps.resources.is_some() {
            let resources = lease.list_all_resources().await.map_err(discovery_error)?;
            let templates = match lease.list_all_resource_templates().await {
                Ok(t) => t,
                Err(ClientError::MethodNotFound(_)) => Vec::new(),
                Err(e) => return Err(discovery_error(e)),
            };
            (resources, templates)
        } else {
            (Vec::new(), Vec::new())
        };
        let prompts = if caps.prompts.is_some() {
            lease.list_all_prompts().await.map_err(discovery_error)?
        } else {
            Vec::new()
        };
        drop(lease);
        let completes = caps.completions.is_some();
        self.install(source, tools, resources, templates, prompts, completes);
        Ok(())
    }

    /// Replaces the source's items in the server (removing what disappeared).
    fn install(
        &self,
        source: &Arc<Source>,
        tools: Vec<Tool>,
        resources: Vec<Resource>,
        templates: Vec<ResourceTemplate>,
        prompts: Vec<Prompt>,
        completes: bool,
    ) {
        let server = &self.inner.server;
        // Completers for the exposed names, asking the source with its own names.
        let mut completers = Vec::new();
        let naming = &source.spec.naming;
        let prefix = &source.spec.name;
        let audience = source.spec.audience.as_ref();
        let audience = audience.map(|p| toolyard::Audience::principals(p.iter().cloned()));
        let audience = audience.as_ref();
        let mut catalog = Catalog::default();
        let mut tool_defs = Vec::new();
        for mut tool in tools {
            let upstream = tool.name.clone();
            tool.name = naming.expose(&upstream);
            catalog.tools.push(tool.name.clone());
            let retry = tool
                .annotations
                .as_ref()
                .is_some_and(|a| a.read_only_hint == Some(true) || a.idempotent_hint == Some(true));
            // The byte-level path: the source checks the arguments against its own schema
            // and its result is passed on as it came.
            let def = ToolDef::forwarding(tool, forward_tool(source, upstream, retry));
            tool_defs.push(restrict(def, audience, ToolDef::for_audience));
        }
        let mut resource_defs = Vec::new();
        for mut resource in resources {
            let upstream = resource.uri.clone();
            resource.uri = expose_uri(prefix, &upstream);
            catalog.resources.push(resource.uri.clone());
            let def = ResourceDef::new(resource, forward_read(source));
            resource_defs.push(restrict(def, audience, ResourceDef::for_audience));
        }
        let mut template_defs = Vec::new();
        for mut template in templates {
            if completes {
                if let Ok(parsed) = UriTemplate::parse(&template.uri_template) {
                    let exposed = expose_uri(prefix, &template.uri_template);
                    for var in parsed.variables() {
                        let reference =
                            CompleteReference::ResourceTemplate(ResourceTemplateReference {
                                uri: template.uri_template.clone(),
                            });
                        completers.push((
                            CompletionTarget::Resource(exposed.clone(), var.to_owned()),
                            forward_complete(source, reference, var.to_owned()),
                        ));
                    }
                }
            }
            template.uri_template = expose_uri(prefix, &template.uri_template);
            let exposed = template.uri_template.clone();
            match TemplateDef::new(template, forward_read(source)) {
                Ok(def) => {
                    catalog.templates.push(exposed);
                    template_defs.push(restrict(def, audience, TemplateDef::for_audience));
                }
                Err(e) => tracing::warn!(source = %prefix, error = %e, "upstream template skipped"),
            }
        }
        let mut prompt_defs = Vec::new();
        for mut prompt in prompts {
            let upstream = prompt.name.clone();
            prompt.name = naming.expose(&upstream);
            catalog.prompts.push(prompt.name.clone());
            if completes {
                for arg in prompt.arguments.iter().flatten() {
                    let reference = CompleteReference::Prompt(PromptReference {
                        name: upstream.clone(),
                        title: None,
                    });
                    completers.push((
                        CompletionTarget::Prompt(prompt.name.clone(), arg.name.clone()),
                        forward_complete(source, reference, arg.name.clone()),
                    ));
                }
            }
            let def = PromptDef::new(prompt, forward_prompt(source, upstream));
            prompt_defs.push(restrict(def, audience, PromptDef::for_audience));
        }
        let old = std::mem::replace(&mut *lock(&source.catalog), catalog.clone());
        let gone = |old: &[String], new: &[String]| -> Vec<String> {
            old.iter().filter(|o| !new.contains(o)).cloned().collect()
        };
        let gone_tools = gone(&old.tools, &catalog.tools);
        if !gone_tools.is_empty() {
            server.remove_tools(gone_tools);
        }
        let mut gone_resources = gone(&old.resources, &catalog.resources);
        gone_resources.extend(gone(&old.templates, &catalog.templates));
        if !gone_resources.is_empty() {
            server.remove_resources(gone_resources);
        }
        let gone_prompts = gone(&old.prompts, &catalog.prompts);
        if !gone_prompts.is_empty() {
            server.remove_prompts(gone_prompts);
        }
        if !tool_defs.is_empty() {
            server.add_tools(tool_defs);
        }
        if !resource_defs.is_empty() {
            server.add_resources(resource_defs);
        }
        if !template_defs.is_empty() {
            server.add_templates(template_defs);
        }
        if !prompt_defs.is_empty() {
            server.add_prompts(prompt_defs);
        }
        for (target, complete) in completers {
            server.add_completer(target, complete);
        }
        if !source.listed.swap(true, Ordering::Relaxed) {
            server
                .lifecycle()
                .publish(toolyard::LifecycleEvent::ComponentUp {
                    kind: "source",
                    name: source.spec.name.clone(),
                });
        }
    }

    /// Takes a source's items out of the server (they stay in its catalog for a re-listing).
    pub(super) fn unlist(&self, source: &Source) {
        let catalog = lock(&source.catalog).clone();
        let server = &self.inner.server;
        if !catalog.tools.is_empty() {
            server.remove_tools(catalog.tools);
        }
        let uris: Vec<String> = catalog
            .resources
            .into_iter()
            .chain(catalog.templates)
            .collect();
        if !uris.is_empty() {
            server.remove_resources(uris);
        }
        if !catalog.prompts.is_empty() {
            server.remove_prompts(catalog.prompts);
        }
        if source.listed.swap(false, Ordering::Relaxed) {
            self.publish_down(source, "unhealthy");
        }
    }

    /// Tells the server's lifecycle a source is out (required when its failure mode is
    /// `fail`: the gateway is then not ready).
    pub(super) fn publish_down(&self, source: &Source, why: &str) {
        let reason = source
            .pool
            .health()
            .last_error
            .unwrap_or_else(|| why.to_owned());
        self.inner
            .server
            .lifecycle()
            .publish(toolyard::LifecycleEvent::ComponentDown {
                kind: "source",
                name: source.spec.name.clone(),
                reason,
                required: source.spec.failure_mode == FailureMode::Fail,
            });
    }

    pub(super) fn update_guard(&self) {
        let failing: Vec<String> = lock(&self.inner.sources)
            .values()
            .filter(|s| {
                s.spec.failure_mode == FailureMode::Fail
                    && s.pool.health().state == crate::pool::HealthState::Unhealthy
            })
            .map(|s| s.spec.name.clone())
            .collect();
        if **self.inner.guard.failing.load() != failing {
            self.inner.guard.failing.store(Arc::new(failing));
        }
    }

    /// Follows health: an unhealthy `skip` source leaves the listings and comes back (with
    /// a fresh discovery) once healthy; `fail` sources make listings fail meanwhile.
    pub(super) fn watch_health(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let gateway = Gateway { inner };
                gateway.update_guard();
                let sources: Vec<Arc<Source>> =
                    lock(&gateway.inner.sources).values().cloned().collect();
                for source in sources {
                    if lock(&source.subscriptions).out_of_date() {
                        super::subscriptions::sync(source.clone());
                    }
                    let unhealthy =
                        source.pool.health().state == crate::pool::HealthState::Unhealthy;
                    let listed = source.listed.load(Ordering::Relaxed);
                    if unhealthy && listed && source.spec.failure_mode == FailureMode::Skip {
                        tracing::warn!(source = %source.spec.name, "source unhealthy: its items leave the listings");
                        gateway.unlist(&source);
                    } else if !unhealthy && !listed {
                        let g = gateway.clone();
                        if !source.refresh_queued.swap(true, Ordering::AcqRel) {
                            tokio::spawn(async move {
                                if let Err(e) = g.discover(&source).await {
                                    tracing::debug!(source = %source.spec.name, error = %e, "source still unavailable");
                                }
                                source.refresh_queued.store(false, Ordering::Release);
                            });
                        }
                    }
                }
            }
        });
    }
}

/// Why `name` is not served, when it is one of `source`'s tools that left the listing (an
/// unhealthy `skip` source, or one not reachable yet): a clear error naming the source and
/// its last failure, instead of "Unknown tool".
pub(super) fn explain_missing_tool(source: &Source, name: &str) -> Option<ErrorObject> {
    if source.listed.load(Ordering::Relaxed) {
        return None;
    }
    let naming = &source.spec.naming;
    let ours = lock(&source.catalog).tools.iter().any(|t| t == name)
        || naming.aliases.iter().any(|(_, exposed)| exposed == name)
        || name
            .strip_prefix(naming.prefix.as_str())
            .is_some_and(|rest| rest.starts_with(naming.separator.as_str()));
    if !ours {
        return None;
    }
    let health = source.pool.health();
    let why = match (&health.state, &health.last_error) {
        (crate::pool::HealthState::Unhealthy, Some(e)) => {
            format!(
                "is unhealthy (circuit open after {} crashes; last: {e})",
                health.crashes_in_window
            )
        }
        (crate::pool::HealthState::Unhealthy, None) => "is unhealthy (circuit open)".to_owned(),
        (_, Some(e)) => format!("is not available (last: {e})"),
        (_, None) => "is not available".to_owned(),
    };
    Some(ErrorObject::invalid_params(format!(
        "Tool `{name}` is unavailable: its source `{}` {why}; its tools return once a health \
         probe succeeds",
        source.spec.name
    )))
}

/// `list_changed` from upstream: re-discover (coalesced); `resources/updated`: pass it on
/// with the exposed URI.
pub(super) fn on_upstream_notice(
    gateway: &Weak<GatewayInner>,
    source: &Weak<Source>,
    notice: &Notice,
) {
    let (Some(inner), Some(source)) = (gateway.upgrade(), source.upgrade()) else {
        return;
    };
    match notice.method.as_str() {
        "notifications/tools/list_changed"
        | "notifications/resources/list_changed"
        | "notifications/prompts/list_changed" => {
            // A transient source's process lives for one call: what it lists is what every
            // fresh process lists (some announce a change right after they start), so its
            // notifications would only start another process for nothing.
            if source.spec.lifecycle == crate::spec::Lifecycle::Transient {
                return;
            }
            if source.refresh_queued.swap(true, Ordering::AcqRel) {
                return;
            }
            let gateway = Gateway { inner };
            tokio::spawn(async move {
                // Let a burst of notifications settle into one listing.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Err(e) = gateway.discover(&source).await {
                    tracing::warn!(source = %source.spec.name, error = %e, "refresh after list_changed failed");
                }
                source.refresh_queued.store(false, Ordering::Release);
            });
        }
        "notifications/resources/updated" => {
            if let Some(uri) = notice.params.get("uri").and_then(Value::as_str) {
                inner
                    .server
                    .notify_resource_updated(expose_uri(&source.spec.name, uri));
            }
        }
        _ => {}
    }
}

/// `def` for the source's `audience`, when it has one (`[[sources]] audience`).
fn restrict<D>(
    def: D,
    audience: Option<&toolyard::Audience>,
    with: fn(D, toolyard::Audience) -> D,
) -> D {
    match audience {
        Some(audience) => with(def, audience.clone()),
        None => def,
    }
}
