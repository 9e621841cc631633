//! Embedding a Toolyard server in another tokio program: the typed client talks to it through
//! the in-memory transport (no sockets; real JSON on the same edge code as stdio).

use serde_json::json;
use toolyard::client::ClientBuilder;
use toolyard::proto::{ContentBlock, Implementation};
use toolyard::{tool_fn, MemoryTransport, ServerBuilder};

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
    let client = ClientBuilder::new(Implementation::new("embedder", "1.0"))
        .connect(MemoryTransport::new(&server))
        .await?;
    let result = client.call_tool("greet", json!({"name": "world"})).await?;
    for block in &result.content {
        if let ContentBlock::Text(t) = block {
            println!("{}", t.text);
        }
    }
    Ok(())
}
