//! `toolyard agent`: a model with the tools of the config file's `[[clients]]`, from the
//! command line. One prompt streams the answer to stdout, with tool calls and results on
//! stderr so the answer can be piped; without a prompt, a terminal gets an interactive
//! session that keeps its history (and piped stdin is read as the prompt). Tool calls that
//! are not read-only, and servers' sampling requests, are asked about on the terminal unless
//! `--yes`; tools' questions (elicitation) are asked there too.

use crate::config_file::ConfigFile;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use toolyard::proto::{ElicitAction, ElicitRequestParams, ElicitResult, Implementation};
use toolyard_agent::config::Overrides;
use toolyard_agent::llm::{LlmClient, Message};
use toolyard_agent::{
    Agent, AgentEvent, AgentHooks, AgentOptions, CancellationToken, LlmSampler, PendingCall,
    Review, SamplerConfig, StopReason, ToolHandlers, Toolbox,
};

#[derive(clap::Args, Debug)]
pub(crate) struct AgentArgs {
    /// The config file: `[agent]` (model, base_url, api_key, ...) and the MCP servers as
    /// `[[clients]]` (see the README). Without it: no tools, the model from --model.
    #[arg(long, env = "TOOLYARD_CONFIG")]
    config: Option<PathBuf>,
    /// The model (overrides `[agent] model`).
    #[arg(long)]
    model: Option<String>,
    /// An OpenAI-compatible base URL, e.g. http://localhost:11434/v1 (overrides
    /// `[agent] base_url` and OPENAI_BASE_URL).
    #[arg(long)]
    base_url: Option<String>,
    /// Run tool calls that are not read-only, and answer servers' sampling, without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Model requests per prompt at most (overrides `[agent] max_turns`; default 8).
    #[arg(long)]
    max_turns: Option<usize>,
    #[command(flatten)]
    telemetry: crate::telemetry::TelemetryArgs,
    /// Log filter (tracing syntax), written to stderr.
    #[arg(long, env = "TOOLYARD_LOG", default_value = "warn")]
    log: String,
    /// The prompt; without it, an interactive session (or stdin, when it is not a terminal).
    prompt: Option<String>,
}

/// Runs the command on its own runtime.
pub(crate) fn main(args: AgentArgs) -> anyhow::Result<std::process::ExitCode> {
    crate::telemetry::init_logging(&args.log);
    let runtime = crate::runtime(2)?;
    let outcome = runtime.block_on(run(args));
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    outcome
}

/// Serialises what is asked on the terminal (two tools may ask at once).
static TERMINAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Asks one line on the terminal; `None` when stdin is not one (or is closed).
async fn ask(question: String) -> Option<String> {
    if !std::io::stdin().is_terminal() {
        return None;
    }
    let _turn = TERMINAL.lock().await;
    tokio::task::spawn_blocking(move || {
        eprint!("{question}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_owned()),
        }
    })
    .await
    .ok()
    .flatten()
}

async fn yes_or_no(question: String) -> bool {
    match ask(format!("{question} [y/N] ")).await {
        Some(a) => matches!(a.trim(), "y" | "Y" | "yes"),
        None => {
            eprintln!("{question} -> declined (stdin is not a terminal; --yes allows it)");
            false
        }
    }
}

/// Asks for each field of a form on the terminal; declines what cannot be asked.
async fn elicit(params: ElicitRequestParams) -> ElicitResult {
    let form = match params {
        ElicitRequestParams::Form(f) => f,
        ElicitRequestParams::Url(u) => {
            eprintln!("[question] {} (open {})", u.message, u.url);
            return ElicitResult::new(ElicitAction::Decline);
        }
    };
    if !std::io::stdin().is_terminal() {
        eprintln!(
            "[question] {} -> declined (stdin is not a terminal)",
            form.message
        );
        return ElicitResult::new(ElicitAction::Decline);
    }
    eprintln!("[question] {}", form.message);
    let mut content = serde_json::Map::new();
    let properties = form
        .requested_schema
        .get("properties")
        .and_then(|p| p.as_object())
        .cloned()
        .unwrap_or_default();
    for (name, schema) in properties {
        let what = schema
            .get("description")
            .and_then(|d| d.as_str())
            .unwrap_or(&name)
            .to_owned();
        let Some(answer) = ask(format!("  {what}: ")).await else {
            return ElicitResult::new(ElicitAction::Cancel);
        };
        let value = match schema.get("type").and_then(|t| t.as_str()) {
            Some("integer" | "number" | "boolean") => {
                serde_json::from_str(&answer).unwrap_or(serde_json::Value::String(answer))
            }
            _ => serde_json::Value::String(answer),
        };
        content.insert(name, value);
    }
    ElicitResult::accept(content)
}

fn shorten(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    match one_line.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &one_line[..i]),
        None => one_line,
    }
}

fn print_event(event: &AgentEvent, streamed: &Mutex<bool>) {
    match event {
        AgentEvent::Text(t) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(t.as_bytes());
            let _ = out.flush();
            if let Ok(mut s) = streamed.lock() {
                *s = !t.ends_with('\n');
            }
        }
        AgentEvent::ToolCall {
            server,
            tool,
            arguments,
            ..
        } => eprintln!("[tool] {server}/{tool} {arguments}"),
        AgentEvent::ToolResult {
            server,
            tool,
            is_error,
            text,
            ..
        } => {
            let kind = if *is_error { "error" } else { "result" };
            let name = if server.is_empty() {
                tool.clone()
            } else {
                format!("{server}/{tool}")
            };
            eprintln!("[{kind}] {name}: {}", shorten(text, 400));
        }
        AgentEvent::Progress {
            server,
            tool,
            params,
        } => {
            let total = params.total.map(|t| format!("/{t}")).unwrap_or_default();
            let message = params.message.as_deref().unwrap_or("");
            eprintln!(
                "[progress] {server}/{tool} {}{total} {message}",
                params.progress
            );
        }
        AgentEvent::ToolsChanged(count) => eprintln!("[tools] the tools changed: {count} now"),
        AgentEvent::TurnStarted(_) | AgentEvent::Usage(_) => {}
    }
}

async fn run(args: AgentArgs) -> anyhow::Result<std::process::ExitCode> {
    let file = match &args.config {
        Some(path) => ConfigFile::load(path)?,
        None => ConfigFile::default(),
    };
    // Before any MCP client is built, so their requests are observed too.
    let telemetry = args
        .telemetry
        .install("toolyard-agent", false, &file.telemetry)?;
    let outcome = run_with(args, file.agent, telemetry.is_active()).await;
    telemetry.shutdown().await;
    outcome
}

async fn run_with(
    args: AgentArgs,
    config: toolyard_agent::config::AgentConfig,
    observed: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let settings = config
        .model_settings(
            &Overrides {
                model: args.model.clone(),
                base_url: args.base_url.clone(),
            },
            &|name| std::env::var(name).ok(),
        )
        .map_err(|e| match &args.config {
            Some(p) => anyhow::anyhow!("invalid config file {}: {e}", p.display()),
            None => anyhow::anyhow!(e),
        })?;
    let mut llm = LlmClient::new(settings.endpoint.clone(), settings.options.clone())?;
    #[cfg(feature = "otel")]
    if observed {
        llm = llm.with_observer(Arc::new(genai_otel::OtelGenAi::global()));
    }
    #[cfg(not(feature = "otel"))]
    let _ = (observed, &mut llm);
    let section = &config.agent;
    let yes = args.yes;
    let sampler = section.sampling.as_ref().map(|s| {
        let mut sampler = LlmSampler::new(
            llm.clone(),
            SamplerConfig {
                default_model: settings.model.clone(),
                allowed_models: s.models.clone(),
                token_budget_per_server: s.token_budget,
                requests_per_minute: s.requests_per_minute,
            },
        );
        if !yes {
            sampler = sampler.with_review(Arc::new(
                |server: &str, p: &toolyard::proto::CreateMessageRequestParams| {
                    let question = format!(
                        "[sampling] `{server}` asks the model for up to {} tokens; allow?",
                        p.max_tokens
                    );
                    Box::pin(async move {
                        if yes_or_no(question).await {
                            Review::Approve
                        } else {
                            Review::Reject("the user declined the sampling request".into())
                        }
                    })
                },
            ));
        }
        Arc::new(sampler)
    });
    let handlers = ToolHandlers {
        elicit: Some(toolyard::client::elicit_handler(|p| async move {
            Ok(elicit(p).await)
        })),
        sampler,
    };
    let toolbox = if config.clients.is_empty() {
        Toolbox::default()
    } else {
        Toolbox::connect(
            &config.clients,
            Implementation::new("toolyard-agent", env!("CARGO_PKG_VERSION")),
            &handlers,
            &section.tools,
        )
        .await?
    };
    let mut options = AgentOptions::new(settings.model.clone());
    options.system_prompt.clone_from(&section.system_prompt);
    options.temperature = section.temperature;
    options.max_tokens = section.max_tokens;
    options.stream = section.stream.unwrap_or(true);
    if let Some(t) = args.max_turns.or(section.max_turns) {
        options.max_turns = t;
    }
    if let Some(p) = section.max_parallel_calls {
        options.max_parallel_calls = p;
    }
    let streamed = Arc::new(Mutex::new(false));
    let printed = streamed.clone();
    let hooks = AgentHooks {
        on_event: Some(Arc::new(move |e: &AgentEvent| print_event(e, &printed))),
        confirm: (!yes).then(|| -> toolyard_agent::ConfirmCallback {
            Arc::new(|p: PendingCall| {
                Box::pin(yes_or_no(format!(
                    "[confirm] run {}/{} {}?",
                    p.server, p.tool, p.arguments
                )))
            })
        }),
    };
    let agent = Agent::new(llm, toolbox.clone(), options).with_hooks(hooks);
    let current = Arc::new(Mutex::new(CancellationToken::new()));
    let interrupt = current.clone();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if let Ok(token) = interrupt.lock() {
                token.cancel();
            }
        }
    });
    let interactive = args.prompt.is_none() && std::io::stdin().is_terminal();
    let outcome = if interactive {
        session(&agent, &current, &streamed).await
    } else {
        let prompt = match args.prompt {
            Some(p) => p,
            None => tokio::task::spawn_blocking(|| {
                std::io::read_to_string(std::io::stdin()).unwrap_or_default()
            })
            .await
            .unwrap_or_default(),
        };
        let mut history = vec![Message::user(prompt)];
        let cancel = current.lock().map(|t| t.clone()).unwrap_or_default();
        one_turn(&agent, &mut history, &cancel, &streamed).await
    };
    toolbox.close().await;
    outcome
}

/// One prompt's run; prints how it ended when that is not a plain answer.
async fn one_turn(
    agent: &Agent,
    history: &mut Vec<Message>,
    cancel: &CancellationToken,
    streamed: &Mutex<bool>,
) -> anyhow::Result<std::process::ExitCode> {
    let result = agent.run(history, cancel).await;
    if streamed
        .lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or(false)
    {
        println!();
    }
    match result {
        Ok(outcome) => {
            let u = outcome.usage;
            if u.total_tokens > 0 {
                eprintln!(
                    "[usage] {} tokens ({} prompt, {} completion) in {} model requests",
                    u.total_tokens, u.prompt_tokens, u.completion_tokens, outcome.turns
                );
            }
            if outcome.stop == StopReason::MaxTurns {
                eprintln!(
                    "[stopped] the model still wanted tools after {} turns (--max-turns)",
                    outcome.turns
                );
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(toolyard_agent::AgentError::Cancelled) => {
            eprintln!("[cancelled]");
            Ok(std::process::ExitCode::from(130))
        }
        Err(e) => Err(e.into()),
    }
}

/// The interactive session: one prompt per line, with the conversation's history; `/reset`
/// forgets it, `/exit` or end of input ends.
async fn session(
    agent: &Agent,
    current: &Mutex<CancellationToken>,
    streamed: &Mutex<bool>,
) -> anyhow::Result<std::process::ExitCode> {
    eprintln!(
        "toolyard agent: {} tools; /reset forgets the conversation, /exit ends",
        agent.toolbox().tools().len()
    );
    let mut history = Vec::new();
    while let Some(line) = ask("> ".into()).await {
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.clear();
                continue;
            }
            _ => {}
        }
        let cancel = CancellationToken::new();
        if let Ok(mut c) = current.lock() {
            c.clone_from(&cancel);
        }
        let before = history.len();
        history.push(Message::user(line));
        if let Err(e) = one_turn(agent, &mut history, &cancel, streamed).await {
            eprintln!("error: {e:#}");
            // A failed prompt leaves no half a turn behind.
            history.truncate(before);
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The agent's GenAI spans and metrics on the OpenTelemetry providers `--otel-endpoint`
/// installed: the crate reports operations through its `GenAiObserver` seam, and this turns
/// them into spans with the GenAI semantic conventions' attributes, plus the
/// `gen_ai.client.operation.duration` and `gen_ai.client.token.usage` histograms for chats.
#[cfg(feature = "otel")]
mod genai_otel {
    use std::time::Instant;
    use toolyard_agent::{GenAiObserver, GenAiSpan, Operation, Outcome, TraceContext};
    use toolyard_otel::opentelemetry::global::{BoxedSpan, BoxedTracer};
    use toolyard_otel::opentelemetry::metrics::Histogram;
    use toolyard_otel::opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer};
    use toolyard_otel::opentelemetry::{global, Array, Context, KeyValue, StringValue, Value};

    /// The conventions' boundaries for `gen_ai.client.operation.duration`, in seconds.
    const DURATION_BOUNDARIES: [f64; 14] = [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ];
    /// The conventions' boundaries for `gen_ai.client.token.usage`.
    const TOKEN_BOUNDARIES: [f64; 14] = [
        1.0,
        4.0,
        16.0,
        64.0,
        256.0,
        1024.0,
        4096.0,
        16384.0,
        65536.0,
        262_144.0,
        1_048_576.0,
        4_194_304.0,
        16_777_216.0,
        67_108_864.0,
    ];

    /// Observes the agent on the global providers.
    pub(crate) struct OtelGenAi {
        tracer: BoxedTracer,
        duration: Histogram<f64>,
        tokens: Histogram<u64>,
    }

    impl OtelGenAi {
        pub(crate) fn global() -> Self {
            let meter = global::meter(toolyard_otel::SCOPE);
            OtelGenAi {
                tracer: global::tracer(toolyard_otel::SCOPE),
                duration: meter
                    .f64_histogram("gen_ai.client.operation.duration")
                    .with_unit("s")
                    .with_description("GenAI operation duration")
                    .with_boundaries(DURATION_BOUNDARIES.to_vec())
                    .build(),
                tokens: meter
                    .u64_histogram("gen_ai.client.token.usage")
                    .with_unit("{token}")
                    .with_description("Number of input and output tokens used")
                    .with_boundaries(TOKEN_BOUNDARIES.to_vec())
                    .build(),
            }
        }
    }

    fn text(key: &'static str, value: &str) -> KeyValue {
        KeyValue::new(key, value.to_owned())
    }

    impl GenAiObserver for OtelGenAi {
        fn start(
            &self,
            operation: &Operation<'_>,
            parent: Option<&TraceContext>,
        ) -> Box<dyn GenAiSpan> {
            let mut attributes = vec![text("gen_ai.operation.name", operation.name())];
            // Chats are measured; `point` is what their metric points carry.
            let mut point = None;
            let kind = match *operation {
                Operation::InvokeAgent {
                    agent,
                    provider,
                    model,
                } => {
                    attributes.push(text("gen_ai.agent.name", agent));
                    attributes.push(text("gen_ai.provider.name", provider));
                    attributes.push(text("gen_ai.request.model", model));
                    SpanKind::Internal
                }
                Operation::Chat {
                    provider,
                    model,
                    server_address,
                    server_port,
                    stream,
                    max_tokens,
                    temperature,
                    stop_sequences,
                } => {
                    let mut common = vec![
                        text("gen_ai.operation.name", "chat"),
                        text("gen_ai.provider.name", provider),
                        text("gen_ai.request.model", model),
                    ];
                    if let Some(a) = server_address {
                        common.push(text("server.address", a));
                    }
                    if let Some(p) = server_port {
                        common.push(KeyValue::new("server.port", i64::from(p)));
                    }
                    attributes.extend(common.iter().skip(1).cloned());
                    // Deprecated in favour of `gen_ai.provider.name`, still what many
                    // backends read.
                    attributes.push(text("gen_ai.system", provider));
                    attributes.push(KeyValue::new("gen_ai.request.stream", stream));
                    if let Some(m) = max_tokens {
                        attributes.push(KeyValue::new(
                            "gen_ai.request.max_tokens",
                            i64::try_from(m).unwrap_or(i64::MAX),
                        ));
                    }
                    if let Some(t) = temperature {
                        attributes.push(KeyValue::new("gen_ai.request.temperature", t));
                    }
                    if !stop_sequences.is_empty() {
                        attributes.push(KeyValue::new(
                            "gen_ai.request.stop_sequences",
                            strings(stop_sequences.iter().map(String::as_str)),
                        ));
                    }
                    point = Some(common);
                    SpanKind::Client
                }
                Operation::ExecuteTool {
                    tool,
                    call_id,
                    description,
                    server,
                } => {
                    attributes.push(text("gen_ai.tool.name", tool));
                    attributes.push(text("gen_ai.tool.call.id", call_id));
                    attributes.push(text("gen_ai.tool.type", "extension"));
                    if let Some(d) = description {
                        attributes.push(text("gen_ai.tool.description", d));
                    }
                    attributes.push(text("mcp.server", server));
                    SpanKind::Internal
                }
            };
            let parent = toolyard_otel::parent_context(
                parent.map(|p| p.traceparent.as_str()),
                parent.and_then(|p| p.tracestate.as_deref()),
            );
            let span = self
                .tracer
                .span_builder(operation.span_name())
                .with_kind(kind)
                .with_attributes(attributes)
                .start_with_context(&self.tracer, &parent);
            let cx = Context::new().with_remote_span_context(span.span_context().clone());
            let context =
                toolyard_otel::traceparent_of(&cx).map(|(traceparent, tracestate)| TraceContext {
                    traceparent,
                    tracestate,
                });
            Box::new(OtelSpan {
                span,
                context,
                metrics: point.map(|p| Metrics {
                    point: p,
                    duration: self.duration.clone(),
                    tokens: self.tokens.clone(),
                    started: Instant::now(),
                }),
            })
        }
    }

    fn strings<'a>(items: impl Iterator<Item = &'a str>) -> Value {
        Value::Array(Array::String(
            items.map(|s| StringValue::from(s.to_owned())).collect(),
        ))
    }

    struct Metrics {
        point: Vec<KeyValue>,
        duration: Histogram<f64>,
        tokens: Histogram<u64>,
        started: Instant,
    }

    struct OtelSpan {
        span: BoxedSpan,
        context: Option<TraceContext>,
        metrics: Option<Metrics>,
    }

    impl GenAiSpan for OtelSpan {
        fn context(&self) -> Option<TraceContext> {
            self.context.clone()
        }

        fn finish(self: Box<Self>, outcome: &Outcome<'_>) {
            let OtelSpan {
                mut span, metrics, ..
            } = *self;
            let mut extra = Vec::new();
            if let Some(m) = outcome.response_model {
                extra.push(text("gen_ai.response.model", m));
            }
            if let Some(id) = outcome.response_id {
                span.set_attribute(text("gen_ai.response.id", id));
            }
            if !outcome.finish_reasons.is_empty() {
                span.set_attribute(KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    strings(outcome.finish_reasons.iter().copied()),
                ));
            }
            let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            if let Some(u) = outcome.usage {
                span.set_attribute(KeyValue::new(
                    "gen_ai.usage.input_tokens",
                    tokens(u.prompt_tokens),
                ));
                span.set_attribute(KeyValue::new(
                    "gen_ai.usage.output_tokens",
                    tokens(u.completion_tokens),
                ));
            }
            if let Some(e) = outcome.error_type {
                extra.push(text("error.type", e));
                span.set_status(Status::error(e.to_owned()));
            }
            for kv in &extra {
                span.set_attribute(kv.clone());
            }
            if let Some(m) = metrics {
                let mut point = m.point;
                point.extend(extra);
                m.duration.record(m.started.elapsed().as_secs_f64(), &point);
                if let Some(u) = outcome.usage {
                    for (kind, n) in [("input", u.prompt_tokens), ("output", u.completion_tokens)] {
                        let mut p = point.clone();
                        p.push(text("gen_ai.token.type", kind));
                        m.tokens.record(n, &p);
                    }
                }
            }
            span.end();
        }
    }
}
