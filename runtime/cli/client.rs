//! `toolyard client`: one MCP operation against a server, for people and scripts (like the
//! Inspector's CLI mode). The result is JSON on stdout; errors go to stderr with a non-zero
//! exit code (1 for any failure, including a tool that answered `isError: true`).

use anyhow::{bail, Context};
use serde_json::Value;
use std::time::Duration;
use toolyard::proto::{Implementation, ProtocolVersion};
use toolyard_client::StdioTransport;
use toolyard_client::{ClientBuilder, ProtocolChoice, Transport};

#[derive(clap::Args, Debug)]
pub(crate) struct ClientArgs {
    /// Spawn this command line and speak over its stdin/stdout, e.g. "npx -y pkg".
    #[arg(
        long,
        value_name = "COMMAND",
        conflicts_with = "url",
        required_unless_present = "url"
    )]
    stdio: Option<String>,
    /// The server's URL: a Streamable HTTP endpoint (`/mcp`) or a 2024-11-05 HTTP+SSE
    /// endpoint (`/sse`); which one is found out (a refused POST falls back to HTTP+SSE).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Use only the 2024-11-05 HTTP+SSE transport for --url.
    #[arg(long, requires = "url", conflicts_with = "streamable_http")]
    sse: bool,
    /// Use only Streamable HTTP for --url (no fallback to HTTP+SSE).
    #[arg(long, requires = "url")]
    streamable_http: bool,
    /// An extra HTTP header, `Name: value`; repeatable.
    #[arg(long = "header", value_name = "HEADER", requires = "url")]
    headers: Vec<String>,
    /// A bearer token for HTTP.
    #[arg(long, env = "TOOLYARD_CLIENT_TOKEN", requires = "url")]
    bearer_token: Option<String>,
    /// An environment variable for the spawned server, `NAME=value`; repeatable (of ours
    /// the server gets only PATH, HOME, the proxy and TLS trust-store variables, and what
    /// --inherit-env names).
    #[arg(long = "env", value_name = "NAME=VALUE", requires = "stdio")]
    envs: Vec<String>,
    /// One of our environment variables to pass on to the spawned server; repeatable.
    #[arg(long = "inherit-env", value_name = "NAME", requires = "stdio")]
    inherit_env: Vec<String>,
    /// Do not pass on the proxy and TLS trust-store variables (HTTPS_PROXY, SSL_CERT_FILE,
    /// ...) to the spawned server.
    #[arg(long, requires = "stdio")]
    no_inherit_env_defaults: bool,
    /// Speak this protocol revision instead of probing (e.g. 2025-11-25, 2026-07-28).
    #[arg(long, value_name = "VERSION")]
    protocol: Option<String>,
    /// Request timeout in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    #[command(flatten)]
    telemetry: crate::telemetry::TelemetryArgs,
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// What the server is: protocol version, info, capabilities.
    Info,
    /// List every tool.
    Tools,
    /// Call a tool.
    Call {
        /// The tool.
        name: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// List every resource.
    Resources,
    /// List every resource template.
    Templates,
    /// Read a resource.
    Read {
        /// The resource URI.
        uri: String,
    },
    /// List every prompt.
    Prompts,
    /// Get a prompt.
    GetPrompt {
        /// The prompt.
        name: String,
        /// The arguments, a JSON object of strings.
        #[arg(long, default_value = "{}")]
        args: String,
    },
}

fn transport(args: &ClientArgs) -> anyhow::Result<Box<dyn Transport>> {
    if let Some(line) = &args.stdio {
        let mut t = StdioTransport::from_command_line(line)
            .with_context(|| format!("cannot parse the command line {line:?}"))?
            .inherit_env_vars(&args.inherit_env)
            .inherit_env_defaults(!args.no_inherit_env_defaults);
        for kv in &args.envs {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv:?} is not NAME=VALUE"))?;
            t = t.env(k, v);
        }
        return Ok(Box::new(t));
    }
    let url = args
        .url
        .clone()
        .context("give --stdio COMMAND or --url URL")?;
    http_transport(args, url)
}

fn http_transport(args: &ClientArgs, url: String) -> anyhow::Result<Box<dyn Transport>> {
    let mut headers = Vec::new();
    for h in &args.headers {
        let (k, v) = h
            .split_once(':')
            .with_context(|| format!("--header {h:?} is not `Name: value`"))?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    if let Some(token) = &args.bearer_token {
        headers.push(("Authorization".into(), format!("Bearer {token}")));
    }
    if args.sse {
        let mut t = toolyard_client::SseTransport::new(url);
        for (k, v) in headers {
            t = t.header(k, v);
        }
        Ok(Box::new(t))
    } else {
        let mut t =
            toolyard_client::StreamableHttpTransport::auto(url).sse_fallback(!args.streamable_http);
        for (k, v) in headers {
            t = t.header(k, v);
        }
        Ok(Box::new(t))
    }
}

fn object(text: &str, what: &str) -> anyhow::Result<Value> {
    let v: Value =
        serde_json::from_str(text).with_context(|| format!("{what} is not valid JSON"))?;
    if !v.is_object() {
        bail!("{what} must be a JSON object");
    }
    Ok(v)
}

pub(crate) async fn run(args: ClientArgs) -> anyhow::Result<()> {
    let protocol = match args.protocol.as_deref() {
        None => ProtocolChoice::Auto,
        Some(v) => match ProtocolVersion::parse(v) {
            Some(ProtocolVersion::V2026_07_28) => ProtocolChoice::Modern,
            Some(legacy) => ProtocolChoice::Legacy(legacy),
            None => bail!("unknown protocol version {v:?}"),
        },
    };
    let protocol = if args.sse && args.protocol.is_none() {
        ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05)
    } else {
        protocol
    };
    let telemetry = args
        .telemetry
        .install("toolyard-cli", false, &Default::default())?;
    let client = ClientBuilder::new(Implementation::new(
        "toolyard-cli",
        env!("CARGO_PKG_VERSION"),
    ))
    .protocol(protocol)
    .request_timeout(Duration::from_millis(args.timeout_ms))
    .handshake_timeout(Duration::from_millis(args.timeout_ms))
    .connect_boxed(transport(&args)?)
    .await
    .context("connecting to the server")?;
    let outcome = act(&client, &args.action).await;
    client.close().await;
    telemetry.shutdown().await;
    let (value, failed) = outcome?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    if failed {
        bail!("the tool reported an error (isError: true)");
    }
    Ok(())
}

async fn act(client: &toolyard_client::Client, action: &Action) -> anyhow::Result<(Value, bool)> {
    let json = |v: &dyn erased::Json| v.to_value();
    Ok(match action {
        Action::Info => {
            let s = client.session().context("no session")?;
            (
                serde_json::json!({
                    "protocolVersion": s.protocol_version.as_str(),
                    "serverInfo": s.server_info,
                    "capabilities": s.capabilities,
                    "instructions": s.instructions,
                }),
                false,
            )
        }
        Action::Tools => (
            serde_json::json!({ "tools": json(&client.list_all_tools().await?) }),
            false,
        ),
        Action::Call { name, args } => {
            let result = client.call_tool(name, object(args, "--args")?).await?;
            (json(&result), result.failed())
        }
        Action::Resources => (
            serde_json::json!({ "resources": json(&client.list_all_resources().await?) }),
            false,
        ),
        Action::Templates => (
            serde_json::json!({ "resourceTemplates": json(&client.list_all_resource_templates().await?) }),
            false,
        ),
        Action::Read { uri } => (json(&client.read_resource(uri).await?), false),
        Action::Prompts => (
            serde_json::json!({ "prompts": json(&client.list_all_prompts().await?) }),
            false,
        ),
        Action::GetPrompt { name, args } => (
            json(&client.get_prompt(name, object(args, "--args")?).await?),
            false,
        ),
    })
}

mod erased {
    /// Serializes anything serializable without naming its type at the call site.
    pub(crate) trait Json {
        fn to_value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_value(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
        }
    }
}
