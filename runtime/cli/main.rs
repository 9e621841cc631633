//! The `toolyard` binary: a thin command line over the library.

// The doc comments of the argument structs are clap's `--help` text, written for a terminal
// (bare URLs, `[::1]`), not for rustdoc.
#![allow(rustdoc::bare_urls, rustdoc::broken_intra_doc_links)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use config_file::ConfigFile;
use std::path::PathBuf;
use toolyard::{Limits, ServerBuilder, StdioOptions};

#[cfg(feature = "agent")]
mod agent;
mod client;
mod config_file;
#[cfg(feature = "nats")]
mod nats_auth;
mod probe;
mod telemetry;
#[cfg(feature = "nats")]
mod worker;

/// Messages are many small allocations handed between tasks and threads, which glibc's
/// allocator serves slowly (its free lists consolidate on every larger request).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Toolyard: an actor-based runtime for the Model Context Protocol.
#[derive(Parser, Debug)]
#[command(name = "toolyard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the demo tools, resources and prompts plus whatever the config file adds.
    Serve(Box<ServeArgs>),
    /// Run one MCP operation against a server and print the result as JSON.
    Client(Box<client::ClientArgs>),
    /// Ask a model (OpenAI, Azure OpenAI or any compatible server) with the tools of the
    /// config file's [[clients]]: one prompt, or an interactive session.
    #[cfg(feature = "agent")]
    Agent(Box<agent::AgentArgs>),
    /// Serve tools on a NATS bus, as one of any number of workers sharing the load.
    #[cfg(feature = "nats")]
    Worker(Box<worker::WorkerArgs>),
    /// GET an HTTP health endpoint (a worker's --health, a gateway's /readyz) and exit 0
    /// only on a 2xx answer: the container healthcheck of an image with no shell or curl.
    Probe(probe::ProbeArgs),
    /// The orphan watchdog (started by Toolyard itself; see `toolyard::client::orphans`).
    #[command(name = toolyard_client::orphans::WATCHDOG_ARG, hide = true)]
    ReapOrphans,
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Serve one connection on stdin/stdout (newline-delimited JSON-RPC).
    #[arg(long, conflicts_with = "http")]
    stdio: bool,
    /// Serve Streamable HTTP (and HTTP+SSE) on this address; the default transport.
    #[arg(long, env = "TOOLYARD_HTTP", value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Host names the HTTP server answers to (DNS-rebinding protection); repeatable.
    /// Default for a loopback address: localhost, 127.0.0.1, [::1].
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Allowed Origin values (scheme://host); repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// Origins browsers may call from (CORS), e.g. https://app.example.com, or * ; repeatable.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// Static bearer tokens HTTP clients must send; repeatable.
    #[arg(
        long = "bearer-token",
        env = "TOOLYARD_BEARER_TOKEN",
        hide_env_values = true
    )]
    bearer_tokens: Vec<String>,
    /// OAuth 2.1 resource server: this server's canonical URI (the token audience, RFC 8707),
    /// e.g. https://mcp.example.com/mcp. Needs --oauth-issuer and --oauth-jwks.
    #[arg(long, env = "TOOLYARD_OAUTH_RESOURCE", requires_all = ["oauth_issuer", "oauth_jwks"])]
    oauth_resource: Option<String>,
    /// OAuth: the authorization server's issuer identifier tokens must carry.
    #[arg(long, env = "TOOLYARD_OAUTH_ISSUER")]
    oauth_issuer: Option<String>,
    /// OAuth: the issuer's keys, a JWKS file path or an https URL.
    #[arg(long, env = "TOOLYARD_OAUTH_JWKS")]
    oauth_jwks: Option<String>,
    /// OAuth: a scope every request needs; repeatable.
    #[arg(long = "oauth-required-scope", value_name = "SCOPE")]
    oauth_required_scopes: Vec<String>,
    /// OAuth: scopes one tool needs, as TOOL=SCOPE; repeatable.
    #[arg(long = "oauth-tool-scope", value_name = "TOOL=SCOPE")]
    oauth_tool_scopes: Vec<String>,
    /// Largest HTTP request body, in bytes.
    #[arg(long, env = "TOOLYARD_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Live legacy HTTP sessions at most.
    #[arg(long, env = "TOOLYARD_MAX_SESSIONS", default_value_t = 10_000)]
    max_sessions: usize,
    /// Seconds after which an idle legacy HTTP session is closed.
    #[arg(long, env = "TOOLYARD_SESSION_IDLE_SECONDS", default_value_t = 1800)]
    session_idle_seconds: u64,
    /// Seconds in-flight HTTP requests get to finish after SIGTERM / Ctrl-C.
    #[arg(long, env = "TOOLYARD_DRAIN_SECONDS", default_value_t = 10)]
    drain_seconds: u64,
    /// A TOML config file (see the README); flags and TOOLYARD_* variables override it.
    #[arg(long, env = "TOOLYARD_CONFIG")]
    config: Option<PathBuf>,
    /// Server name reported in serverInfo.
    #[arg(long, env = "TOOLYARD_NAME")]
    name: Option<String>,
    /// Largest accepted message, in bytes.
    #[arg(long, env = "TOOLYARD_MAX_MESSAGE_BYTES")]
    max_message_bytes: Option<usize>,
    /// Requests in flight per connection before new ones are refused.
    #[arg(long, env = "TOOLYARD_MAX_IN_FLIGHT")]
    max_in_flight: Option<usize>,
    /// Secret that signs modern requestState (share it between replicas). Without it, gateways
    /// on a NATS bus (`--nats`) share one kept there (KV bucket TY_STATE_KEYS).
    #[arg(long, env = "TOOLYARD_STATE_SECRET", hide_env_values = true)]
    state_secret: Option<String>,
    /// Leave out the built-in demo set.
    #[arg(long)]
    no_demo: bool,
    /// Also serve the tools of the workers on this NATS bus (`toolyard worker`), as
    /// NAME__tool; the demo set is then left out.
    #[cfg(feature = "nats")]
    #[arg(long, env = "TOOLYARD_NATS", value_name = "URL")]
    nats: Option<String>,
    #[cfg(feature = "nats")]
    #[command(flatten)]
    nats_auth: nats_auth::NatsAuthArgs,
    /// Tokio worker threads (1 = a single-threaded runtime). Default: 1 with --stdio (one
    /// connection: a second thread only made it slower, 220k against 370k calls/s at c=16
    /// in benches/README.md, stop 35), 2 over HTTP.
    #[arg(long, env = "TOOLYARD_WORKERS")]
    workers: Option<usize>,
    /// Log filter (tracing syntax), written to stderr.
    #[arg(long, env = "TOOLYARD_LOG", default_value = "warn")]
    log: String,
    /// Serve `GET /metrics` in the Prometheus text format (the MCP duration histograms and
    /// the rest of the OpenTelemetry metrics), with or without an OTLP endpoint.
    #[arg(long)]
    prometheus: bool,
    #[command(flatten)]
    telemetry: telemetry::TelemetryArgs,
}

/// Errors are one line on stderr, `error: <message>: <cause>: ...`, and exit 1, whatever
/// `RUST_BACKTRACE` says: backtraces are for panics, not for a config mistake or a refused
/// connection.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::ReapOrphans) {
        // The stdio servers this process starts (gateway sources, `client --stdio`) are
        // stopped even if it is killed outright.
        if let Ok(me) = std::env::current_exe() {
            toolyard_client::orphans::reap_orphans_with(me);
        }
    }
    match cli.command {
        Command::ReapOrphans => Ok(toolyard_client::orphans::run_watchdog()),
        Command::Serve(args) => serve(*args).map(|()| std::process::ExitCode::SUCCESS),
        #[cfg(feature = "nats")]
        Command::Worker(args) => worker::run(*args).map(|()| std::process::ExitCode::SUCCESS),
        #[cfg(feature = "agent")]
        Command::Agent(args) => agent::main(*args),
        Command::Probe(args) => {
            let runtime = runtime(1)?;
            runtime
                .block_on(probe::run(args))
                .map(|()| std::process::ExitCode::SUCCESS)
        }
        Command::Client(args) => {
            telemetry::init_logging(
                &std::env::var("TOOLYARD_LOG").unwrap_or_else(|_| "warn".into()),
            );
            let runtime = runtime(1)?;
            let outcome = runtime.block_on(client::run(*args));
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            outcome.map(|()| std::process::ExitCode::SUCCESS)
        }
    }
}

/// The directory a config file's relative paths are read from: the file's own (the working
/// directory without a file).
pub(crate) fn config_dir(config: Option<&std::path::Path>) -> PathBuf {
    config
        .and_then(std::path::Path::parent)
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The Tokio runtime of every command: for one thread a current-thread runtime, for more a
/// multi-thread one. One thread is the default where one connection carries the
/// requests (stdio, a worker's NATS connection): on a multi-thread runtime a task woken by
/// the running task runs right after it (tokio's LIFO slot), so the task that writes the
/// answers (the stdio writer, async-nats' connection task), woken by each answer, wrote each
/// answer alone; on a current-thread runtime it runs after every request that was ready and
/// writes their answers in one (benches/README.md, stop 35).
pub(crate) fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
    .context("starting the tokio runtime")
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    telemetry::init_logging(&args.log);
    let file = match &args.config {
        Some(path) => ConfigFile::load(path)?,
        None => ConfigFile::default(),
    };
    let ConfigFile {
        server: config,
        gateway: gateway_file,
        #[cfg(feature = "nats")]
            nats: nats_file,
        telemetry: telemetry_file,
        #[cfg(feature = "connectors")]
        connectors,
        // `serve` does not run the agent; its sections are only checked.
        #[cfg(feature = "agent")]
            agent: _,
    } = file;
    #[cfg(feature = "nats")]
    let nats_url = args.nats.clone().or(nats_file.nats.url.clone());
    // A scope that is no subject token, or user pools without a tenant, is reported before
    // waiting for the bus.
    #[cfg(feature = "nats")]
    if nats_url.is_some() {
        args.nats_auth.scoped(&nats_file.nats).remote()?;
    }
    let runtime = runtime(args.workers.unwrap_or(if args.stdio { 1 } else { 2 }))?;
    runtime.block_on(async move {
        let name = args
            .name
            .clone()
            .or(config.server.name.clone())
            .unwrap_or_else(|| "toolyard".into());
        let telemetry = args
            .telemetry
            .install(&name, args.prometheus, &telemetry_file)?;
        let mut builder = telemetry.layer(ServerBuilder::new(name, env!("CARGO_PKG_VERSION")));
        // A gateway serves its sources, not the demo.
        let gateway_config = !gateway_file.sources.is_empty();
        #[cfg(feature = "nats")]
        let nats_gateway = nats_url.is_some();
        #[cfg(not(feature = "nats"))]
        let nats_gateway = false;
        if !args.no_demo && !gateway_config && !nats_gateway {
            builder = toolyard_demo::demo(builder);
        }
        let base_dir = config_dir(args.config.as_deref());
        let specs = gateway_file
            .resolve_sources(&base_dir)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let guard = toolyard_gateway::ListingGuard::default();
        if gateway_config {
            builder = builder.layer(std::sync::Arc::new(guard.clone()));
            let (name, what) = toolyard_gateway::not_relayed_capability();
            builder = builder.experimental(name, what);
        }
        builder = builder.config(&config);
        #[cfg(feature = "connectors")]
        let watchers = {
            let (b, watchers) = connectors.install_watched(builder)?;
            builder = b;
            watchers
        };
        let mut limits = Limits::default();
        if let Some(n) = args.max_in_flight.or(config.server.max_in_flight) {
            limits.max_in_flight = n;
        }
        builder = builder.limits(limits);
        // An empty flag or variable says nothing (the config file's secret then counts).
        if let Some(secret) = args
            .state_secret
            .clone()
            .filter(|s| !s.is_empty())
            .or(config.server.state_secret.clone())
        {
            builder = builder.state_secret(&secret, std::time::Duration::from_secs(600));
        }
        // The bus comes first: with durable tasks, the server's task store lives on it.
        #[cfg(feature = "nats")]
        let nats_client = match &nats_url {
            Some(url) => {
                let auth = args.nats_auth.over(&nats_file.nats, &base_dir);
                let client =
                    toolyard_nats::connect_with(url, "ty-gateway", auth.options()?).await?;
                // Change events, the catalog's watch and the durable task store (which
                // follows its bucket) on a connection of their own: any client may publish
                // events, anything allowed to write the buckets may put there, and
                // async-nats ends a connection on a message whose headers it cannot parse,
                // which must not end the calls in flight (docs/nats.md, "Change events").
                let watch_client =
                    toolyard_nats::connect_with(url, "ty-gateway-watch", auth.options()?).await?;
                let remote = args.nats_auth.scoped(&nats_file.nats).remote()?;
                let store = if remote.durable_tasks {
                    // Opened in the background: a gateway started before its broker serves
                    // at once (not ready until the bus and the catalog are there).
                    let store = toolyard_nats::NatsTaskStore::opening(
                        &watch_client,
                        remote.catalog_replicas,
                    );
                    builder = builder.tasks(std::sync::Arc::new(store.clone()));
                    Some(store)
                } else {
                    None
                };
                Some((client, watch_client, remote, store))
            }
            None => None,
        };
        let server = builder.start().await?;
        // Connectors that watch for changes (Drive's poller) run while the server does.
        #[cfg(feature = "connectors")]
        let _watching = watchers.start(&server);
        #[cfg(feature = "nats")]
        let _nats = match nats_client {
            Some((client, watch_client, remote, store)) => {
                // Task changes made elsewhere (a worker finishing one) reach our listeners.
                let following = match store {
                    Some(store) => Some(store.follow(server.clone()).await),
                    None => None,
                };
                // Change events raised here reach every gateway's subscribers, and theirs ours.
                let events = toolyard_nats::EventRelay::start(
                    server.clone(),
                    watch_client.clone(),
                    &remote.prefix,
                )
                .await?;
                Some((
                    toolyard_nats::RemoteTools::start_with_watch(
                        server.clone(),
                        client,
                        watch_client,
                        remote,
                    )
                    .await?,
                    events,
                    following,
                ))
            }
            None => None,
        };
        let gateway = if gateway_config {
            Some(start_sources(&server, guard, specs, args.config.clone()).await?)
        } else {
            None
        };
        let admin = match (&gateway, gateway_file.gateway.admin_token()?) {
            (Some(g), Some(token)) => Some((
                g.clone(),
                token,
                base_dir.clone(),
                gateway_file.gateway.clone(),
            )),
            _ => None,
        };
        if args.stdio {
            let mut options = StdioOptions::default();
            if let Some(n) = args.max_message_bytes.or(config.server.max_message_bytes) {
                options.max_message_bytes = n;
            }
            // SIGTERM ends a stdio server too, and the gateway's sources with it (stdin EOF
            // is the usual end; a supervisor may signal instead).
            tokio::select! {
                served = toolyard::serve_stdio(&server, options) => served?,
                () = terminated() => tracing::info!("SIGTERM: stopping"),
            }
        } else {
            serve_http(&server, &args, admin, telemetry.metrics_router()).await?;
        }
        if let Some(gateway) = gateway {
            gateway.shutdown().await;
        }
        server.shutdown();
        telemetry.shutdown().await;
        Ok::<_, anyhow::Error>(())
    })?;
    // Blocking stdin reads may still hold a runtime thread; do not wait for them.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(())
}

/// The gateway's admin API: gateway, token, base directory, `[gateway]` section.
type Admin = (
    toolyard_gateway::Gateway,
    String,
    PathBuf,
    toolyard_gateway::GatewaySection,
);

/// Resolves on SIGTERM (never where there is none).
pub(crate) async fn terminated() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
        return;
    }
    std::future::pending::<()>().await
}

/// Re-reads the config file on SIGHUP and makes the gateway's sources match it.
/// The gateway over `server` with the config file's sources (`serve` and `worker`): they
/// start side by side, so start-up takes as long as the slowest one; one failing stops the
/// ones started and fails the start. With a config file, SIGHUP reloads the sources.
pub(crate) async fn start_sources(
    server: &toolyard::Server,
    guard: toolyard_gateway::ListingGuard,
    specs: Vec<toolyard_gateway::SourceSpec>,
    config: Option<PathBuf>,
) -> anyhow::Result<toolyard_gateway::Gateway> {
    let gateway = toolyard_gateway::Gateway::new(server, guard);
    let started = futures_util::future::join_all(specs.into_iter().map(|spec| {
        let gateway = gateway.clone();
        async move {
            let name = spec.name.clone();
            gateway
                .add_source(spec)
                .await
                .with_context(|| format!("starting source `{name}`"))
        }
    }))
    .await;
    for outcome in started {
        if let Err(e) = outcome {
            gateway.shutdown().await;
            return Err(e);
        }
    }
    if let Some(path) = config {
        reload_on_sighup(gateway.clone(), path);
    }
    Ok(gateway)
}

fn reload_on_sighup(gateway: toolyard_gateway::Gateway, path: PathBuf) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            return;
        };
        while hup.recv().await.is_some() {
            let base_dir = config_dir(Some(&path));
            let specs = match ConfigFile::load(&path)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    c.gateway
                        .resolve_sources(&base_dir)
                        .map_err(|e| e.to_string())
                }) {
                Ok(specs) => specs,
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: the config file is invalid; keeping the running sources");
                    continue;
                }
            };
            let errors = gateway.apply(specs).await;
            for e in &errors {
                tracing::error!(error = %e, "SIGHUP: a source could not be applied");
            }
            tracing::info!(sources = ?gateway.names(), failed = errors.len(), "SIGHUP: configuration reloaded");
        }
    });
    #[cfg(not(unix))]
    let _ = (gateway, path);
}

async fn serve_http(
    server: &toolyard::Server,
    args: &ServeArgs,
    admin: Option<Admin>,
    metrics: Option<axum::Router>,
) -> anyhow::Result<()> {
    let addr = args
        .http
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8080)));
    let mut security = if addr.ip().is_loopback() {
        toolyard::http::Security::loopback()
    } else {
        toolyard::http::Security::open()
    };
    if !args.allow_hosts.is_empty() {
        security.allowed_hosts = args.allow_hosts.clone();
    }
    if !args.allow_origins.is_empty() {
        security.allowed_origins = args.allow_origins.clone();
    }
    security.bearer_tokens = args.bearer_tokens.clone();
    if let (Some(resource), Some(issuer), Some(jwks)) =
        (&args.oauth_resource, &args.oauth_issuer, &args.oauth_jwks)
    {
        let source = if jwks.starts_with("https://") || jwks.starts_with("http://") {
            toolyard::http::JwksSource::Url(jwks.clone())
        } else {
            toolyard::http::JwksSource::File(jwks.into())
        };
        let mut oauth = toolyard::http::OAuthConfig::new(resource, issuer, source);
        oauth.required_scopes = args.oauth_required_scopes.clone();
        for pair in &args.oauth_tool_scopes {
            let Some((tool, scope)) = pair.split_once('=') else {
                anyhow::bail!("--oauth-tool-scope wants TOOL=SCOPE, got `{pair}`");
            };
            oauth
                .tool_scopes
                .entry(tool.to_owned())
                .or_default()
                .push(scope.to_owned());
        }
        oauth.scopes_supported = oauth
            .required_scopes
            .iter()
            .chain(oauth.tool_scopes.values().flatten())
            .cloned()
            .collect();
        oauth.scopes_supported.sort();
        oauth.scopes_supported.dedup();
        security.oauth = Some(oauth);
    }
    if !args.cors_origins.is_empty() {
        security = security.with_cors(args.cors_origins.clone());
    }
    let http = toolyard::http::HttpConfig {
        max_body_bytes: args.max_body_bytes,
        max_sessions: args.max_sessions,
        session_idle_timeout: std::time::Duration::from_secs(args.session_idle_seconds),
        security,
        extra_routes: match (
            admin.map(|(gateway, token, base_dir, section)| {
                toolyard_gateway::admin_router(gateway, token, base_dir, section)
            }),
            metrics,
        ) {
            (Some(admin), Some(metrics)) => Some(admin.merge(metrics)),
            (admin, metrics) => admin.or(metrics),
        },
        ..Default::default()
    };
    // Bound before it says so: the line names the port a `:0` picked, and a port in use is
    // an error without a "serving" line before it.
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    eprintln!("toolyard: serving MCP on http://{bound}/mcp");
    toolyard::http::serve_http_on(
        server.clone(),
        listener,
        http,
        std::time::Duration::from_secs(args.drain_seconds),
    )
    .await?;
    Ok(())
}
