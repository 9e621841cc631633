//! `conformance-server`: the fixture the official MCP conformance suite tests against.

use clap::Parser;

/// Serves the conformance fixture.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Serve one connection on stdin/stdout.
    #[arg(long)]
    stdio: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.stdio {
        anyhow::bail!("choose a transport: --stdio (--http ADDR arrives with the HTTP transport)");
    }
    let server = toolyard_conformance::start().await?;
    toolyard::serve_stdio(&server, Default::default()).await?;
    server.shutdown();
    Ok(())
}
