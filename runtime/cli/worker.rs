//! `toolyard worker`: serve tools on a NATS bus (the `toolyard-nats` crate's [`Worker`]):
//! the demo set unless `--no-demo`, plus the config file's `[[tools]]`, `[[resources]]`,
//! `[[prompts]]`, connectors and `[[sources]]`. Sources (third-party MCP servers) run under
//! the gateway plugin as they do under `toolyard serve`, their tools named
//! `<source>__<tool>`; a worker with sources leaves the demo set out, as `serve` does, and
//! SIGHUP re-reads them. The catalog entry is put once the sources started, and again when
//! a source's tools change. SIGTERM or Ctrl-C drains: the worker leaves its queue group (new
//! requests go to the other workers), those already delivered or in flight finish within the
//! drain deadline, the catalog entry is deleted, then the sources stop.

use crate::config_file::ConfigFile;
use std::path::PathBuf;
use toolyard::{Limits, ServerBuilder};
use toolyard_nats::Worker;

#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    /// The NATS server, e.g. nats://127.0.0.1:4222 (comma-separate a cluster's URLs);
    /// without it, the config file's `[nats] url`.
    #[arg(long, env = "TOOLYARD_NATS")]
    nats: Option<String>,
    #[command(flatten)]
    nats_auth: crate::nats_auth::NatsAuthArgs,
    /// The pool's user as a principal (with a tenant): its user token is the principal's
    /// (docs/nats.md "The caller's principal"), so a gateway of that tenant with
    /// `[nats] user_pools` sends this principal's calls here, e.g. a user's own tools behind
    /// a shared gateway. Instead of --nats-user.
    #[arg(
        long,
        env = "TOOLYARD_NATS_PRINCIPAL",
        value_name = "PRINCIPAL",
        conflicts_with = "nats_user"
    )]
    nats_principal: Option<String>,
    /// The name callers address this worker's tools by (a subject token: [A-Za-z0-9_-]+);
    /// every worker with the same name shares the load.
    #[arg(long, env = "TOOLYARD_WORKER_NAME")]
    name: String,
    /// A TOML config file: its `[[tools]]`, `[[resources]]`, `[[prompts]]`, connectors and
    /// `[[sources]]` are served.
    #[arg(long, env = "TOOLYARD_CONFIG")]
    config: Option<PathBuf>,
    /// Leave out the built-in demo set (left out anyway when the config has [[sources]]).
    #[arg(long)]
    no_demo: bool,
    /// Requests served at once.
    #[arg(long, env = "TOOLYARD_CONCURRENCY", default_value_t = 64)]
    concurrency: usize,
    /// Requests that may wait in the worker for a slot (default: as many as --concurrency,
    /// at least 64); each can be cancelled, and its caller can tell a busy worker from a
    /// dead one. One more is refused at once as busy (-32015, not started), which a gateway
    /// re-issues with a backoff within the call's deadline.
    #[arg(long, env = "TOOLYARD_WAITING")]
    waiting: Option<usize>,
    /// Notifications (progress, logs) a request may have waiting to be published; past it,
    /// newer ones are dropped until they drain (the answer never is), so a tool reporting
    /// faster than the bus takes it cannot grow the worker without limit.
    #[arg(long, env = "TOOLYARD_NOTIFICATION_BACKLOG", default_value_t = 512)]
    notification_backlog: usize,
    /// The largest request body this worker reads from a claim (a request too large for the
    /// bus, docs/nats.md), at most 64 MiB: it holds each body while its request is in
    /// flight. A larger one is answered -32012.
    #[arg(long, env = "TOOLYARD_MAX_CLAIMED_REQUEST_BYTES", default_value_t = toolyard_nats::MAX_CLAIM_BYTES)]
    max_claimed_request_bytes: usize,
    /// Seconds in-flight requests get to finish after SIGTERM / Ctrl-C.
    #[arg(long, env = "TOOLYARD_DRAIN_SECONDS", default_value_t = 10)]
    drain_seconds: u64,
    /// Secret that signs modern requestState: give every worker of a name the same one, so a
    /// multi-round-trip retry may land on any of them. Without it, the workers of a name
    /// share one kept on the bus (KV bucket TY_STATE_KEYS), written by the first to start.
    #[arg(long, env = "TOOLYARD_STATE_SECRET", hide_env_values = true)]
    state_secret: Option<String>,
    /// Tokio worker threads (1 = a single-threaded runtime). More threads run more of a
    /// worker's requests at once, but for tools that await more than they compute, one
    /// thread serves more calls with half the CPU per call (benches/README.md, stop 35): run
    /// one worker per core instead.
    #[arg(long, env = "TOOLYARD_WORKERS", default_value_t = 1)]
    workers: usize,
    /// Log filter (tracing syntax), written to stderr.
    #[arg(long, env = "TOOLYARD_LOG", default_value = "warn")]
    log: String,
    /// Serve `/healthz` and `/readyz` over HTTP on this address (e.g. 0.0.0.0:8081), for an
    /// orchestrator's probes: `/readyz` is 200 only while the worker serves on the bus (not
    /// while it waits for the NATS server, has lost it, or drains).
    #[arg(long, env = "TOOLYARD_HEALTH", value_name = "ADDR")]
    health: Option<std::net::SocketAddr>,
    #[command(flatten)]
    telemetry: crate::telemetry::TelemetryArgs,
}

impl WorkerArgs {
    /// The `[nats]` section with the scope flags in place of its own: `--nats-principal`
    /// names the pool's user by the principal's token.
    fn pool(&self, section: &toolyard_nats::NatsSection) -> toolyard_nats::NatsSection {
        let mut section = self.nats_auth.scoped(section);
        if let Some(principal) = &self.nats_principal {
            section.user = Some(toolyard_nats::principal_token(principal));
        }
        section
    }
}

pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
    crate::telemetry::init_logging(&args.log);
    let file = match &args.config {
        Some(path) => ConfigFile::load(path)?,
        None => ConfigFile::default(),
    };
    let base_dir = crate::config_dir(args.config.as_deref());
    let url = args
        .nats
        .clone()
        .or_else(|| file.nats.nats.url.clone())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no NATS server to serve on: give --nats URL, or `[nats] url` in the config file"
            )
        })?;
    // Resolved before anything starts: a bad source is a config error, reported at once.
    let specs = file
        .gateway
        .resolve_sources(&base_dir)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // So is a scope that is no subject token (before waiting for the bus).
    args.pool(&file.nats.nats).scope()?;
    let runtime = crate::runtime(args.workers)?;
    runtime.block_on(async move {
        let config = file.server;
        let nats_section = file.nats.nats.clone();
        let name = config
            .server
            .name
            .clone()
            .unwrap_or_else(|| format!("toolyard-worker-{}", args.name));
        let telemetry = args.telemetry.install(&name, false, &file.telemetry)?;
        let mut builder = telemetry.layer(ServerBuilder::new(name, env!("CARGO_PKG_VERSION")));
        let gateway_config = !specs.is_empty();
        if !args.no_demo && !gateway_config {
            builder = toolyard_demo::demo(builder);
        }
        // As under `serve`: the guard fails listings while a `fail` source is down, and the
        // capability names what the gateway does not relay.
        let guard = toolyard_gateway::ListingGuard::default();
        if gateway_config {
            builder = builder.layer(std::sync::Arc::new(guard.clone()));
            let (name, what) = toolyard_gateway::not_relayed_capability();
            builder = builder.experimental(name, what);
        }
        builder = builder.config(&config).limits(Limits::default());
        // The built-in connectors serve from workers as from `serve`.
        #[cfg(feature = "connectors")]
        let watchers = {
            let (b, watchers) = file.connectors.install_watched(builder)?;
            builder = b;
            watchers
        };
        // An empty flag or variable says nothing (the config file's secret then counts).
        if let Some(secret) = args
            .state_secret
            .clone()
            .filter(|s| !s.is_empty())
            .or(config.server.state_secret.clone())
        {
            builder = builder.state_secret(&secret, std::time::Duration::from_secs(600));
        }
        let server = builder.start().await?;
        #[cfg(feature = "connectors")]
        let _watching = watchers.start(&server);
        // The sources start before the worker, so its first catalog entry has their tools.
        let gateway = if gateway_config {
            Some(crate::start_sources(&server, guard, specs, args.config.clone()).await?)
        } else {
            None
        };
        let auth = args.nats_auth.over(&nats_section, &base_dir);
        let client =
            toolyard_nats::connect_with(&url, &format!("ty-worker-{}", args.name), auth.options()?)
                .await?;
        // The `[nats]` section's prefix and catalog replicas apply to workers too: a worker
        // and its gateways must agree on the prefix.
        let mut worker_config = args.pool(&nats_section).worker(&args.name)?;
        worker_config.concurrency = args.concurrency.max(1);
        worker_config.waiting = args.waiting;
        worker_config.notification_backlog = args.notification_backlog.max(1);
        worker_config.max_claimed_request_bytes = args.max_claimed_request_bytes;
        worker_config.drain_timeout = std::time::Duration::from_secs(args.drain_seconds);
        // Change events on a connection of their own: any client may publish on their
        // subject, and async-nats ends a connection on a message whose headers it cannot
        // parse, which must not take the requests' connection with it (docs/nats.md,
        // "Change events").
        let events_client = toolyard_nats::connect_with(
            &url,
            &format!("ty-worker-{}-events", args.name),
            auth.options()?,
        )
        .await?;
        let events =
            toolyard_nats::EventRelay::start(server.clone(), events_client, &worker_config.prefix)
                .await?;
        // Durable task jobs on a connection of their own too: anything on the bus may
        // publish to the work queue, and a job async-nats cannot parse, redelivered every
        // `ack_wait`, must not take the requests' connection down each time.
        let jobs_client = if worker_config.tasks {
            toolyard_nats::connect_with(
                &url,
                &format!("ty-worker-{}-jobs", args.name),
                auth.options()?,
            )
            .await?
        } else {
            client.clone()
        };
        // Probes answer from the start: alive while it waits for the bus, ready once it
        // serves (not ready from here on: `start_when_reachable` says so when called).
        let starting = Worker::start_when_reachable(&server, &client, &jobs_client, &worker_config);
        let health = match args.health {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                    anyhow::anyhow!("cannot listen for health probes on {addr}: {e}")
                })?;
                let app = toolyard::http::health_router(server.clone());
                Some(tokio::spawn(
                    async move { axum::serve(listener, app).await },
                ))
            }
            None => None,
        };
        // A worker started before its broker waits for it (async-nats keeps connecting, and
        // says why it cannot), as one that loses it does; SIGTERM ends the wait.
        let worker = tokio::select! {
            worker = starting => Some(worker?),
            () = crate::terminated() => None,
            _ = tokio::signal::ctrl_c() => None,
        };
        let mut stopped = None;
        if let Some(worker) = worker {
            eprintln!(
                "toolyard: worker `{}` serving on {}",
                args.name,
                toolyard_nats::without_credentials(&url)
            );
            // A pool that finds an overlapping one joined before it stops taking requests
            // (`Worker::gave_way`): it drains and exits non-zero, saying which.
            let gave_way = tokio::select! {
                () = crate::terminated() => None,
                _ = tokio::signal::ctrl_c() => None,
                why = worker.gave_way() => Some(why),
            };
            // Calls in flight may be using the sources: they stop after the drain.
            worker.shutdown().await;
            stopped = gave_way;
        }
        events.shutdown();
        if let Some(health) = health {
            health.abort();
        }
        if let Some(gateway) = gateway {
            gateway.shutdown().await;
        }
        server.shutdown();
        telemetry.shutdown().await;
        match stopped {
            Some(why) => Err(why.into()),
            None => anyhow::Ok(()),
        }
    })
}
