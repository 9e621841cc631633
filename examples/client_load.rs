//! A load driver built on our MCP [`Client`], measured the way `mcpload` measures servers
//! (`../shared/mcpload`), so its figures compare with mcpload's for the same server: the
//! difference is the client's overhead.
//!
//! Method (as mcpload's): connect (stdio: spawn the command; HTTP: a server already running),
//! handshake with `--protocol` (default 2025-06-18), wait `--settle-ms` (500), send `--warmup`
//! (500) unmeasured calls, then keep `--concurrency` (16) `echo {"message": 64 x "x"}` calls in
//! flight for `--seconds` (5), checking each result's first text equals the message. Calls
//! are numbered in issue order over all loops; the window opens when call `warmup` is issued,
//! no call is issued after it has lasted `--seconds`, and calls/s = measured successes /
//! (last measured completion - window start). One current-thread tokio runtime (one core,
//! like mcpload); pin it with `taskset -c 0`, and pin a stdio server by wrapping its command
//! in `taskset -c 1` (the child inherits our affinity otherwise).
//!
//! ```sh
//! cargo build --release -p toolyard-cli --example client_load
//! taskset -c 0 target/release/examples/client_load --stdio "taskset -c 1 target/release/toolyard serve --stdio --workers 1"
//! taskset -c 0 target/release/examples/client_load --url http://127.0.0.1:8080/mcp --protocol 2026-07-28
//! ```
//!
//! Prints one JSON line: `{transport, server, protocol, concurrency, calls, seconds,
//! calls_per_sec, p50_us, p99_us, errors, first_error, issued, label}` (`calls`: measured
//! successes; `issued`: every call sent, warm-up included).

use clap::Parser;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use toolyard::client::StdioTransport;
use toolyard::client::StreamableHttpTransport;
use toolyard::client::{Client, ClientBuilder, ProtocolChoice};
use toolyard::proto::{ContentBlock, Implementation, ProtocolVersion};

#[derive(Parser)]
#[command(about = "Load an MCP server's echo tool through toolyard's Client, like mcpload")]
struct Args {
    /// Spawn this server command line and speak stdio to it.
    #[arg(long, conflicts_with = "url", required_unless_present = "url")]
    stdio: Option<String>,
    /// A Streamable HTTP endpoint (the server must be running).
    #[arg(long)]
    url: Option<String>,
    /// Calls in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Length of the measurement window, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Unmeasured calls before the window opens.
    #[arg(long, default_value_t = 500)]
    warmup: u64,
    /// 2025-06-18 (or another legacy revision: initialize), 2026-07-28 (modern), or auto.
    #[arg(long, default_value = "2025-06-18")]
    protocol: String,
    /// Bytes of the echoed message.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Pause after the handshake, as mcpload's (it samples idle RSS there).
    #[arg(long, default_value_t = 500)]
    settle_ms: u64,
    /// Free text copied into the JSON line.
    #[arg(long)]
    label: Option<String>,
}

/// Which call to issue next (mcpload's `Gate`, without its count bound).
struct Gate {
    warmup: u64,
    duration: Duration,
    hard_deadline: Instant,
    next: AtomicU64,
    start: OnceLock<Instant>,
}

impl Gate {
    fn next(&self) -> Option<u64> {
        let now = Instant::now();
        if now >= self.hard_deadline || self.start.get().is_some_and(|s| now >= *s + self.duration)
        {
            return None;
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        if seq == self.warmup {
            let _ = self.start.set(now);
        }
        Some(seq)
    }
}

/// What one loop saw.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
    last_done: Option<Instant>,
}

async fn run_loop(client: Client, gate: Arc<Gate>, message: Arc<str>) -> Tally {
    let mut t = Tally::default();
    while let Some(seq) = gate.next() {
        let sent = Instant::now();
        let outcome = match client
            .call_tool("echo", json!({ "message": &*message }))
            .await
        {
            Err(e) => Err(format!("{e}")),
            Ok(r) if r.failed() => Err(format!("isError: {:?}", r.content)),
            Ok(r) => match r.content.first() {
                Some(ContentBlock::Text(text)) if text.text == *message => Ok(()),
                other => Err(format!("wrong echo: {other:?}")),
            },
        };
        let now = Instant::now();
        match outcome {
            Err(e) => {
                t.errors += 1;
                t.first_error.get_or_insert(e);
            }
            Ok(()) if seq >= gate.warmup => {
                let us = now
                    .duration_since(sent)
                    .as_micros()
                    .clamp(1, u32::MAX as u128);
                t.latencies_us.push(us as u32);
                t.last_done = Some(t.last_done.map_or(now, |d| d.max(now)));
            }
            Ok(()) => {}
        }
    }
    t
}

fn quantile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run(args: Args) -> anyhow::Result<Value> {
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    let protocol = match args.protocol.as_str() {
        "auto" => ProtocolChoice::Auto,
        s => match ProtocolVersion::parse(s) {
            Some(v) if v.is_legacy() => ProtocolChoice::Legacy(v),
            Some(_) => ProtocolChoice::Modern,
            None => anyhow::bail!("unknown protocol revision {s:?}"),
        },
    };
    let builder = ClientBuilder::new(Implementation::new("client_load", "0.1")).protocol(protocol);
    let (transport, server, client) = match (&args.stdio, &args.url) {
        (Some(cmd), None) => {
            let t = StdioTransport::from_command_line(cmd)?;
            ("stdio", cmd.clone(), builder.connect(t).await?)
        }
        (None, Some(url)) => (
            "http",
            url.clone(),
            builder.connect(StreamableHttpTransport::new(url)).await?,
        ),
        _ => anyhow::bail!("give exactly one of --stdio and --url"),
    };
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;

    let message: Arc<str> = "x".repeat(args.payload).into();
    let duration = Duration::from_secs_f64(args.seconds);
    let gate = Arc::new(Gate {
        warmup: args.warmup,
        duration,
        // mcpload's bound: at most 60 s of warm-up before the window.
        hard_deadline: Instant::now() + Duration::from_secs(60) + duration,
        next: AtomicU64::new(0),
        start: OnceLock::new(),
    });
    let loops: Vec<_> = (0..args.concurrency)
        .map(|_| tokio::spawn(run_loop(client.clone(), gate.clone(), message.clone())))
        .collect();
    let mut all = Tally::default();
    for handle in loops {
        let t = handle.await?;
        all.latencies_us.extend(t.latencies_us);
        all.errors += t.errors;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
        all.last_done = all.last_done.max(t.last_done);
    }
    let protocol_version = client.protocol_version().map(|v| v.as_str());
    client.close().await;

    let calls = all.latencies_us.len();
    all.latencies_us.sort_unstable();
    let seconds = match (gate.start.get(), all.last_done) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
        _ => 0.0,
    };
    let per_sec = if seconds > 0.0 {
        calls as f64 / seconds
    } else {
        0.0
    };
    Ok(json!({
        "label": args.label,
        "transport": transport,
        "server": server,
        "protocol": protocol_version,
        "concurrency": args.concurrency,
        "calls": calls,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "calls_per_sec": (per_sec * 10.0).round() / 10.0,
        "p50_us": quantile(&all.latencies_us, 0.50),
        "p99_us": quantile(&all.latencies_us, 0.99),
        "errors": all.errors,
        "first_error": all.first_error,
        "issued": gate.next.load(Ordering::Relaxed),
    }))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(run(args))?;
    println!("{report}");
    Ok(())
}
