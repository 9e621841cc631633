//! The OAuth side of the conformance client: which [`OAuthClient`] configuration each auth
//! scenario of the official MCP conformance suite needs. The suite hands credentials over
//! in `MCP_CONFORMANCE_CONTEXT` (pre-registered clients, a private key, an ID token); every
//! other auth scenario starts from nothing (discovery, then dynamic registration or a
//! Client ID Metadata Document). Authorization is headless: the suite's authorization
//! server redirects at once, and [`HeadlessRedirect`] reads the code from the redirect.

use anyhow::Context as _;
use serde_json::Value;
use std::sync::Arc;
use toolyard::client::oauth::{
    CrossAppAccess, Grant, HeadlessRedirect, JwtAssertion, OAuthClient, PreRegisteredClient,
    SigningKey,
};
use toolyard::client::AuthProvider;

/// The Client ID Metadata Document URL the suite expects (`auth/basic-cimd`). Nothing is
/// served there: the suite's authorization server does not fetch it.
pub const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The redirect URI the suite's reference client uses; the headless handler never listens
/// on it, it only reads the code from the redirect.
const REDIRECT_URI: &str = "http://localhost:3000/callback";

/// The auth provider for `scenario` against the MCP server at `server_url`, or `None` for
/// scenarios without authorization. `context` is the parsed `MCP_CONFORMANCE_CONTEXT`.
// Async for its callers' sake: some scenarios will need discovery before the provider exists.
#[allow(clippy::unused_async)]
pub async fn oauth_for_scenario(
    scenario: &str,
    context: Option<Value>,
    server_url: &str,
) -> anyhow::Result<Option<Arc<dyn AuthProvider>>> {
    if !scenario.starts_with("auth/") {
        return Ok(None);
    }
    let context = context.unwrap_or(Value::Null);
    let field = |name: &str| context.get(name).and_then(Value::as_str).map(str::to_owned);
    let required = |name: &str| {
        field(name).with_context(|| format!("{scenario}: MCP_CONFORMANCE_CONTEXT lacks {name}"))
    };

    let mut builder = OAuthClient::builder(server_url)
        .client_name("toolyard-conformance-client")
        .redirect_uri(REDIRECT_URI)
        .authorization_handler(Arc::new(HeadlessRedirect::new()));
    if let Some(client_id) = field("client_id") {
        builder =
            builder.pre_registered(PreRegisteredClient::new(client_id, field("client_secret")));
    }
    if let Some(pem) = field("private_key_pem") {
        let key = SigningKey::from_pem(&pem, field("signing_algorithm").as_deref())
            .with_context(|| format!("{scenario}: the private key"))?;
        builder = builder.signing_key(key);
    }
    builder = match scenario {
        "auth/basic-cimd" => builder.client_metadata_url(CLIENT_METADATA_URL),
        "auth/client-credentials-jwt" | "auth/client-credentials-basic" => {
            builder.grant(Grant::ClientCredentials)
        }
        "auth/cross-app-access-complete-flow" | "auth/enterprise-managed-authorization" => builder
            .grant(Grant::CrossApp(CrossAppAccess {
                idp_token_endpoint: required("idp_token_endpoint")?,
                id_token: required("idp_id_token")?,
                idp_client_id: required("idp_client_id")?,
                idp_client_secret: field("idp_client_secret"),
            })),
        "auth/wif-jwt-bearer" => {
            builder.grant(Grant::JwtBearer(JwtAssertion(required("valid_jwt")?)))
        }
        _ => builder,
    };
    let client = builder
        .build()
        .with_context(|| format!("{scenario}: configuring the OAuth client"))?;
    Ok(Some(Arc::new(client)))
}
