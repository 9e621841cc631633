//! A sampling handler backed by the LLM: a server's `sampling/createMessage` (a legacy
//! server's request, or a modern server's input request, which the MCP client turns into the
//! same call) is answered by the configured chat model.
//!
//! The person running the client stays in charge: the model comes from an allow-list (a
//! server only hints), each server has a token budget and a request rate, and a review hook sees every request
//! (with its `metadata`) before the model does and may refuse it, as the spec asks clients to
//! let users do.

mod mapping;
mod model;

use crate::llm::LlmClient;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolyard_client::SampleHandler;
use toolyard_proto::{
    BoxFuture, CreateMessageRequestParams, CreateMessageResult, ErrorObject, IncludeContext,
};

/// The error code of a refused sampling request (the user's, or the budget's): the spec's
/// "user rejected sampling request".
pub const REJECTED: i32 = -1;

/// What the sampling handler may do.
#[derive(Debug, Clone, Default)]
pub struct SamplerConfig {
    /// The model that answers when no hint names an allowed one.
    pub default_model: String,
    /// The other models a server's hints (or priorities) may pick, from the cheapest and
    /// fastest to the most capable.
    pub allowed_models: Vec<String>,
    /// Tokens each server may use in total (as the model server counts them; the request's
    /// `maxTokens` when it does not), `None` for no limit.
    pub token_budget_per_server: Option<u64>,
    /// Requests each server may make in any 60 seconds, `None` for no limit.
    pub requests_per_minute: Option<u32>,
}

/// The review hook's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// Ask the model.
    Approve,
    /// Refuse, with the reason the server is given.
    Reject(String),
}

/// Sees each request (server name, params) before the model does.
pub type ReviewHook =
    Arc<dyn Fn(&str, &CreateMessageRequestParams) -> BoxFuture<Review> + Send + Sync>;

/// Answers `sampling/createMessage` with a chat model.
pub struct LlmSampler {
    llm: LlmClient,
    config: SamplerConfig,
    review: Option<ReviewHook>,
    used: Mutex<HashMap<String, u64>>,
    recent: Mutex<HashMap<String, VecDeque<Instant>>>,
    warned_context: AtomicBool,
}

impl std::fmt::Debug for LlmSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSampler")
            .field("config", &self.config)
            .field("review", &self.review.is_some())
            .finish_non_exhaustive()
    }
}

impl LlmSampler {
    /// A sampler asking `llm`.
    pub fn new(llm: LlmClient, config: SamplerConfig) -> Self {
        LlmSampler {
            llm,
            config,
            review: None,
            used: Mutex::new(HashMap::new()),
            recent: Mutex::new(HashMap::new()),
            warned_context: AtomicBool::new(false),
        }
    }

    /// With a review hook.
    pub fn with_review(mut self, review: ReviewHook) -> Self {
        self.review = Some(review);
        self
    }

    /// Tokens `server` has used so far.
    pub fn used(&self, server: &str) -> u64 {
        self.used
            .lock()
            .map_or(0, |u| u.get(server).copied().unwrap_or(0))
    }

    /// The handler for the connection named `server`, for `ClientBuilder::on_sample`
    /// ([`ToolHandlers::sampler`](crate::ToolHandlers::sampler) makes one per connection);
    /// budgets are kept per name.
    pub fn handler(self: &Arc<Self>, server: &str) -> SampleHandler {
        let me = self.clone();
        let server = server.to_owned();
        Arc::new(move |params| {
            let me = me.clone();
            let server = server.clone();
            Box::pin(async move { me.create_message(&server, params).await })
        })
    }

    fn remaining(&self, server: &str) -> Option<u64> {
        self.config
            .token_budget_per_server
            .map(|b| b.saturating_sub(self.used(server)))
    }

    /// Counts a request of `server` against its rate; false when it is over.
    fn admit(&self, server: &str) -> bool {
        let Some(limit) = self.config.requests_per_minute else {
            return true;
        };
        let Ok(mut recent) = self.recent.lock() else {
            return false;
        };
        let now = Instant::now();
        let times = recent.entry(server.to_owned()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            times.pop_front();
        }
        if times.len() >= limit as usize {
            return false;
        }
        times.push_back(now);
        true
    }

    fn charge(&self, server: &str, tokens: u64) {
        if let Ok(mut used) = self.used.lock() {
            *used.entry(server.to_owned()).or_default() += tokens;
        }
    }

    /// Answers one request from `server`.
    pub async fn create_message(
        &self,
        server: &str,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ErrorObject> {
        if matches!(
            params.include_context,
            Some(IncludeContext::ThisServer | IncludeContext::AllServers)
        ) && !self.warned_context.swap(true, Ordering::Relaxed)
        {
            tracing::info!(
                server,
                "sampling: includeContext is not supported; sending no context"
            );
        }
        if !self.admit(server) {
            return Err(ErrorObject::new(
                REJECTED,
                format!("`{server}` made too many sampling requests in the last minute"),
            ));
        }
        let mut max_tokens = params.max_tokens;
        if let Some(left) = self.remaining(server) {
            if left == 0 {
                return Err(ErrorObject::new(
                    REJECTED,
                    format!("the sampling token budget of `{server}` is spent"),
                ));
            }
            max_tokens = max_tokens.min(left);
        }
        if let Some(review) = &self.review {
            if let Review::Reject(why) = review(server, &params).await {
                return Err(ErrorObject::new(REJECTED, why));
            }
        }
        let model = model::choose(
            params.model_preferences.as_ref(),
            &self.config.allowed_models,
            &self.config.default_model,
        )
        .to_owned();
        let (mut request, back) = mapping::to_chat(&params, &model)?;
        request.max_tokens = Some(max_tokens);
        let answer = self
            .llm
            .complete(&request, &CancellationToken::new())
            .await
            .map_err(|e| ErrorObject::internal(format!("the model failed: {e}")))?;
        self.charge(server, answer.usage.map_or(max_tokens, |u| u.total_tokens));
        mapping::from_chat(&answer, &model, &back)
    }
}
