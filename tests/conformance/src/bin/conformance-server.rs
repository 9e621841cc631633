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
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = toolyard_conformance::start().await?;
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
