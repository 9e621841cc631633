//! The caller's principal across the bus: who called, for the worker's tool.
//!
//! A gateway that authenticated its caller (OAuth, a bearer token) knows a principal that a
//! tool served in-process reads with [`RequestContext::principal`]; served by a worker, the
//! same tool would see none. So a gateway sends it: the request's subject carries a token
//! made from it in the user position (`{prefix}.req.{tenant}.{token}.{server}...`, the
//! design's "stable, token-safe handle" of the principal), and the `Mcp-Principal` header
//! carries the principal itself. A worker takes the header only when the subject's user
//! token is the header's token: who may publish on `{prefix}.req.*.{token}.>` is who may act
//! as that principal, so NATS publish permissions, the bus's whole authorization plane,
//! decide it (give gateways the right to publish for every user, a backend only for its
//! own). The token is a hash (no principal in a subject, where monitoring and permissions
//! would show it; any length and any bytes fit one token).
//!
//! [`RequestContext::principal`]: toolyard::RequestContext::principal

use crate::wire;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::Arc;

/// The user token of a request made for `principal`: `p` and the first 16 bytes of the
/// SHA-256 of its UTF-8 bytes, in lowercase hex (`p` + 32 hex digits: a subject token,
/// never `_`). Computable with any SHA-256 tool, for NATS permissions and user pools.
pub fn principal_token(principal: &str) -> String {
    let digest = Sha256::digest(principal.as_bytes());
    let mut token = String::with_capacity(33);
    token.push('p');
    for byte in &digest[..16] {
        // Writing to a `String` cannot fail.
        let _ = write!(token, "{byte:02x}");
    }
    token
}

/// What a worker makes of a request's `Mcp-Principal` header (`header`) on `subject`: the
/// principal when the subject's user token is made from it, none without the header, and
/// why not otherwise (a header mismatch: whoever sent it may not act as that principal).
pub(crate) fn of_request(
    subject: &str,
    prefix: &str,
    header: Option<&str>,
) -> Result<Option<Arc<str>>, String> {
    let Some(principal) = header else {
        return Ok(None);
    };
    match wire::request_user_token(subject, prefix) {
        Some(token) if token == principal_token(principal) => Ok(Some(principal.into())),
        Some(token) => Err(format!(
            "Mcp-Principal is not the principal of the subject's user token '{token}' (a principal's requests carry `{}`)",
            principal_token(principal)
        )),
        None => Err("the subject is not a request subject".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principals_token_is_one_subject_token_whatever_the_principal() {
        for principal in [
            "alice",
            "alice@example.com",
            "auth0|5f7c.8a",
            "",
            "a b\tc",
            "ünïcødé",
            &"x".repeat(10_000),
        ] {
            let token = principal_token(principal);
            assert!(wire::token_safe(&token) && token != "_", "{token}");
            assert_eq!(token.len(), 33);
            assert_eq!(token, principal_token(principal), "stable");
        }
        assert_ne!(principal_token("alice"), principal_token("Alice"));
        // SHA-256("alice") = 2bd806c9 7f0e00af 1a1fc332 8fa763a9 269723c8 ...
        assert_eq!(
            principal_token("alice"),
            "p2bd806c97f0e00af1a1fc3328fa763a9"
        );
    }

    #[test]
    fn a_worker_takes_the_principal_only_on_its_own_users_subject() {
        let token = principal_token("alice@example.com");
        let on = |user: &str| format!("mcp.v1.req.acme.{user}.calc.tools.call.echo");
        assert_eq!(
            of_request(&on(&token), "mcp.v1", Some("alice@example.com")).unwrap(),
            Some(Arc::from("alice@example.com"))
        );
        assert_eq!(of_request(&on("_"), "mcp.v1", None).unwrap(), None);
        assert_eq!(of_request(&on(&token), "mcp.v1", None).unwrap(), None);
        for forged in [on("_"), on("bob"), on(&principal_token("mallory"))] {
            let why = of_request(&forged, "mcp.v1", Some("alice@example.com")).unwrap_err();
            assert!(why.contains("Mcp-Principal"), "{why}");
        }
        assert!(of_request("elsewhere.calc", "mcp.v1", Some("alice@example.com")).is_err());
    }
}
