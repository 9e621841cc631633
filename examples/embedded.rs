//! Embedding a Toolyard server in another tokio program through the in-memory transport.

use serde_json::json;
use toolyard::{tool_fn, MemoryClient, ServerBuilder};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = ServerBuilder::new("embedded", "1.0")
        .try_tool(tool_fn(
            "greet",
            "Greets someone",
            |_ctx, a: Greet| async move { Ok(format!("Hello, {}!", a.name)) },
        ))
        .start()
        .await?;
    let client = MemoryClient::connect(&server).await?;
    client.initialize(json!({})).await?;
    let result = client
        .request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "world"}}),
        )
        .await?;
    println!("{}", result["content"][0]["text"]);
    Ok(())
}
