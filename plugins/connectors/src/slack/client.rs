//! The Slack Web API client: `{base}/{method}` with the token as `Authorization: Bearer`,
//! reads as GET with query parameters (retried once on a 5xx), writes as POST with a JSON
//! body (never repeated), each behind its method's budget (`limits`), and Slack's envelope
//! read: every method answers HTTP 200 with `{ok, error?, response_metadata: {next_cursor}}`,
//! so `ok: false` becomes a tool error naming Slack's code with a hint for the common ones.
//! The token never reaches a message: errors name the method and Slack's code only.

use super::limits::Limiter;
use crate::actor::{StateError, Supervised};
use crate::http::{Api, ApiError};
use crate::Secret;
use serde_json::Value;
use std::time::Duration;
use toolyard::HandlerError;

/// Why a Slack call failed, in the words the tool error uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SlackError {
    /// The transport's failure (timeout, cap, 429, 5xx, unreadable body).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The connector's state actor failed with this call.
    #[error(transparent)]
    State(#[from] StateError),
    /// `ok: false`: Slack's code, and what the connector knows about it.
    #[error("Slack refused {method}: {code}{}", hint(.code, .needed.as_deref(), .provided.as_deref()))]
    Refused {
        method: String,
        code: String,
        needed: Option<String>,
        provided: Option<String>,
    },
    /// This client's own budget for the method is spent for longer than it waits.
    #[error("rate limited: {method} is over this connector's budget for Slack's rate tier; retry in {} s", ceil_secs(*.retry_in))]
    Budget { method: String, retry_in: Duration },
}

/// Whole seconds, rounded up (a wait of 0.2 s is "1 s", never "0 s").
fn ceil_secs(d: Duration) -> u64 {
    (d.as_secs_f64().ceil() as u64).max(1)
}

impl From<SlackError> for HandlerError {
    fn from(e: SlackError) -> HandlerError {
        HandlerError::failed(e.to_string())
    }
}

/// What to do about the common codes (Slack's own descriptions, shortened).
fn hint(code: &str, needed: Option<&str>, provided: Option<&str>) -> String {
    let text = match code {
        "invalid_auth" | "not_authed" => {
            "the token was not accepted; check `token` in [connectors.slack]".to_owned()
        }
        "token_revoked" => {
            "the token has been revoked; install the app again or issue a new token".to_owned()
        }
        "token_expired" => "the token has expired; refresh it or issue a new one".to_owned(),
        "account_inactive" => "the token's user or bot has been deactivated".to_owned(),
        "not_in_channel" => {
            "the app is not a member of this channel; invite it with /invite @app".to_owned()
        }
        "channel_not_found" => {
            "no such channel, or the token cannot see it (a private channel the app is not in)"
                .to_owned()
        }
        "missing_scope" => format!(
            "the token lacks a scope: needs `{}`{}; add it to the app and reinstall",
            needed.unwrap_or("?"),
            provided.map(|p| format!(", has `{p}`")).unwrap_or_default()
        ),
        "ratelimited" => "Slack is rate limiting this app; retry in a minute".to_owned(),
        "not_allowed_token_type" => {
            "this method needs another kind of token (search needs a user token, xoxp-)".to_owned()
        }
        "is_archived" => "the channel is archived".to_owned(),
        "msg_too_long" => "the message is too long (Slack's limit is 40,000 characters)".to_owned(),
        "no_text" => "the message is empty".to_owned(),
        "already_reacted" => "that reaction is already there".to_owned(),
        "no_reaction" => "there is no such reaction to remove".to_owned(),
        "invalid_name" => "no emoji by that name (give it without colons)".to_owned(),
        "message_not_found" | "thread_not_found" => "no message with that timestamp".to_owned(),
        "invalid_cursor" => {
            "the cursor is not valid (it may have expired); start again without it".to_owned()
        }
        "user_not_found" => "no such user".to_owned(),
        _ => return String::new(),
    };
    format!(" ({text})")
}

/// The client.
pub(crate) struct Client {
    api: Api,
    base: String,
    token: Secret,
    /// The per-method buckets: the connector's state, owned by its actor.
    limiter: Supervised<Limiter>,
    max_wait: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// `response_metadata.next_cursor`, absent when empty (the last page).
pub(crate) fn next_cursor(v: &Value) -> Option<String> {
    v["response_metadata"]["next_cursor"]
        .as_str()
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
}

impl Client {
    pub(crate) fn new(
        api: Api,
        base: &str,
        token: Secret,
        limiter: impl Fn() -> Limiter + Send + Sync + 'static,
        max_wait: Duration,
    ) -> Self {
        Client {
            api,
            base: base.trim_end_matches('/').to_owned(),
            token,
            limiter: Supervised::new("slack", limiter),
            max_wait,
        }
    }

    /// The connector's state actor (its rate buckets).
    pub(crate) fn state(&self) -> &Supervised<Limiter> {
        &self.limiter
    }

    /// Waits for `method`'s token, or says how long it would be.
    async fn budget(&self, method: &str) -> Result<(), SlackError> {
        let (name, max_wait) = (method.to_owned(), self.max_wait);
        let taken = self
            .limiter
            .call(move |l| l.acquire(&name, max_wait))
            .await?;
        match taken {
            Ok(wait) if wait.is_zero() => Ok(()),
            Ok(wait) => {
                tracing::debug!(
                    method,
                    wait_ms = wait.as_millis() as u64,
                    "slack: waiting for the method's budget"
                );
                tokio::time::sleep(wait).await;
                Ok(())
            }
            Err(retry_in) => Err(SlackError::Budget {
                method: method.to_owned(),
                retry_in,
            }),
        }
    }

    /// A read: GET `{base}/{method}?params`.
    pub(crate) async fn read(
        &self,
        method: &str,
        params: &[(&str, String)],
    ) -> Result<Value, SlackError> {
        self.budget(method).await?;
        let url = format!("{}/{method}", self.base);
        let token = self.token.expose();
        let reply = self
            .api
            .send(true, |c| c.get(&url).bearer_auth(token).query(params))
            .await?;
        envelope(method, reply)
    }

    /// A write: POST `{base}/{method}` with a JSON body; never sent twice.
    pub(crate) async fn write(&self, method: &str, body: &Value) -> Result<Value, SlackError> {
        self.budget(method).await?;
        let url = format!("{}/{method}", self.base);
        let token = self.token.expose();
        let body = body.to_string();
        let reply = self
            .api
            .send(false, |c| {
                c.post(&url)
                    .bearer_auth(token)
                    .header("content-type", "application/json; charset=utf-8")
                    .body(body.clone())
            })
            .await?;
        envelope(method, reply)
    }
}

/// Slack's envelope: the body when `ok` is true, else Slack's code.
fn envelope(method: &str, reply: crate::http::Reply) -> Result<Value, SlackError> {
    let parsed = serde_json::from_slice::<Value>(&reply.body).ok();
    if let Some(Value::Bool(false)) = parsed.as_ref().map(|v| &v["ok"]) {
        let v = parsed.unwrap_or_default();
        let text = |k: &str| v[k].as_str().map(str::to_owned);
        return Err(SlackError::Refused {
            method: method.to_owned(),
            code: text("error").unwrap_or_else(|| "unknown_error".to_owned()),
            needed: text("needed"),
            provided: text("provided"),
        });
    }
    let reply = reply.error_for_status()?;
    let v: Value = reply.json()?;
    match v["ok"] {
        Value::Bool(true) => Ok(v),
        _ => Err(SlackError::Api(ApiError::Malformed {
            service: "Slack",
            message: format!("{method} answered without the `ok` field of the Web API"),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_codes_get_a_hint_and_missing_scope_names_the_scope() {
        let e = SlackError::Refused {
            method: "conversations.history".into(),
            code: "missing_scope".into(),
            needed: Some("channels:history".into()),
            provided: Some("chat:write".into()),
        };
        assert_eq!(
            e.to_string(),
            "Slack refused conversations.history: missing_scope (the token lacks a scope: needs `channels:history`, has `chat:write`; add it to the app and reinstall)"
        );
        let e = SlackError::Refused {
            method: "chat.postMessage".into(),
            code: "some_new_code".into(),
            needed: None,
            provided: None,
        };
        assert_eq!(
            e.to_string(),
            "Slack refused chat.postMessage: some_new_code"
        );
        let e = SlackError::Budget {
            method: "conversations.history".into(),
            retry_in: Duration::from_millis(59_500),
        };
        assert!(e.to_string().contains("retry in 60 s"), "{e}");
    }

    #[test]
    fn an_empty_next_cursor_is_the_last_page() {
        let v: Value = serde_json::json!({"response_metadata": {"next_cursor": ""}});
        assert_eq!(next_cursor(&v), None);
        let v: Value = serde_json::json!({"response_metadata": {"next_cursor": "dXNlcjpVMDYx"}});
        assert_eq!(next_cursor(&v).as_deref(), Some("dXNlcjpVMDYx"));
    }
}
