//! `toolyard probe URL`: one HTTP GET of a health endpoint, exit 0 only on a 2xx answer.
//!
//! The image has no shell, curl or wget, so a container healthcheck (compose's, a swarm
//! service's) can only run the binary itself. `toolyard client ... info` checks a server that
//! speaks MCP; a worker's `--health` port and a gateway's `/readyz` speak plain HTTP, and their
//! 503 bodies say what is down, which this prints for `docker inspect` to show.

use anyhow::{bail, Context};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct ProbeArgs {
    /// The endpoint, e.g. http://127.0.0.1:8081/readyz (a worker's --health) or
    /// http://127.0.0.1:8080/readyz (a gateway).
    #[arg(value_name = "URL")]
    url: String,
    /// Give up (and fail) after this long: connecting, and the whole answer.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    timeout_ms: u64,
}

/// GETs the URL: the body goes to stdout on success; a non-2xx status, a refused connection
/// or the timeout is an error naming the URL (and the status and body when there was one).
pub(crate) async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let timeout = Duration::from_millis(args.timeout_ms);
    let http = reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        // A probe asks the process it is beside: a proxy from the environment would ask
        // someone else.
        .no_proxy()
        .build()
        .context("build the HTTP client")?;
    let answer = http
        .get(&args.url)
        .send()
        .await
        .with_context(|| format!("GET {}", args.url))?;
    let status = answer.status();
    let body = answer
        .text()
        .await
        .with_context(|| format!("GET {}: read the body", args.url))?;
    if !status.is_success() {
        bail!("GET {} answered {status}: {}", args.url, body.trim());
    }
    println!("{}", body.trim_end());
    Ok(())
}
