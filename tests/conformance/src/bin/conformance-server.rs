//! `conformance-server`: the fixture the official MCP conformance suite tests against.

use clap::Parser;

/// Serves the conformance fixture.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Serve one connection on stdin/stdout.
    #[arg(long, conflicts_with = "http")]
    stdio: bool,
    /// Serve Streamable HTTP on this address (path /mcp).
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Serve on this NATS bus as a worker named `conformance` (`toolyard worker`'s wire),
    /// for the suite to test through a gateway (`toolyard serve --nats`).
    #[arg(long, value_name = "URL", conflicts_with_all = ["stdio", "http"])]
    nats: Option<String>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = toolyard_conformance::start().await?;
    if let Some(url) = args.nats {
        let client = toolyard_nats::connect(&url, "conformance-worker").await?;
        let worker = toolyard_nats::Worker::start(
            server.clone(),
            client,
            toolyard_nats::WorkerConfig::new("conformance"),
        )
        .await?;
        eprintln!("conformance-server: serving on {url} as `conformance`");
        tokio::signal::ctrl_c().await?;
        worker.shutdown().await;
        server.shutdown();
        return Ok(());
    }
    match (args.stdio, args.http) {
        (true, _) => toolyard::serve_stdio(&server, Default::default()).await?,
        (false, Some(addr)) => {
            toolyard::http::serve_http(
                server.clone(),
                addr,
                Default::default(),
                std::time::Duration::from_secs(5),
            )
            .await?
        }
        (false, None) => anyhow::bail!("choose a transport: --stdio or --http ADDR"),
    }
    server.shutdown();
    Ok(())
}
