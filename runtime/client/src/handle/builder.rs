//! [`ClientBuilder`]: a client's identity, generation, timeouts and handlers, and
//! `connect`, which starts the actor and the transport and runs the handshake. Configuration
//! and start-up only; the running handle is elsewhere.

use super::client::{lock, Client, Inner};
use super::handshake::ProtocolChoice;
use super::meta::ModernIdentity;
use crate::actor::ClientActor;
use crate::cache::ResponseCache;
use crate::error::ClientError;
use crate::handlers::{ElicitHandler, Handlers, Notice, RootsHandler, SampleHandler};
use crate::pending::PendingTable;
use crate::transport::{EventSink, LateLink, Transport, TransportLink};
use arc_swap::ArcSwap;
use ractor::Actor;
use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use toolyard_proto::{ClientCapabilities, Implementation, ProgressNotificationParams};

/// Builds a [`Client`]: identity, generation, timeouts and the handlers for what servers ask.
pub struct ClientBuilder {
    info: Implementation,
    protocol: ProtocolChoice,
    request_timeout: Duration,
    max_request_timeout: Duration,
    handshake_timeout: Duration,
    probe_timeout: Duration,
    max_input_rounds: usize,
    cache: bool,
    capabilities: ClientCapabilities,
    handlers: Handlers,
    observer: Option<Arc<dyn crate::RequestObserver>>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("info", &self.info)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// A client that introduces itself as `info`.
    pub fn new(info: Implementation) -> Self {
        Self {
            info,
            protocol: ProtocolChoice::Auto,
            request_timeout: Duration::from_secs(30),
            max_request_timeout: Duration::from_secs(600),
            handshake_timeout: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(5),
            max_input_rounds: 8,
            cache: true,
            capabilities: ClientCapabilities::default(),
            handlers: Handlers::default(),
            observer: crate::observe::default_observer(),
        }
    }

    /// Chooses the generation (default: probe, then fall back).
    pub fn protocol(mut self, protocol: ProtocolChoice) -> Self {
        self.protocol = protocol;
        self
    }

    /// How long a request may wait for its answer (default 30 s); each progress
    /// notification restarts the wait.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The longest a request may take however much progress it reports (default 10 min).
    pub fn max_request_timeout(mut self, timeout: Duration) -> Self {
        self.max_request_timeout = timeout;
        self
    }

    /// How long the handshake may take (default 30 s): a server that is not ready by then
    /// fails `connect`.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long to wait for an answer to the `server/discover` probe before deciding the
    /// server is legacy (default 5 s).
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// How many input rounds one modern request may take (default 8).
    pub fn max_input_rounds(mut self, rounds: usize) -> Self {
        self.max_input_rounds = rounds;
        self
    }

    /// Turns the response cache off (it honours `ttlMs` when on, the default).
    pub fn cache(mut self, on: bool) -> Self {
        self.cache = on;
        self
    }

    /// Extra capabilities to declare (e.g. `extensions`); the handlers add theirs.
    pub fn capabilities(mut self, capabilities: ClientCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Answers elicitation (declares the `elicitation` capability).
    pub fn on_elicit(mut self, handler: ElicitHandler) -> Self {
        self.handlers.elicit = Some(handler);
        self
    }

    /// Answers sampling (declares the `sampling` capability).
    pub fn on_sample(mut self, handler: SampleHandler) -> Self {
        self.handlers.sample = Some(handler);
        self
    }

    /// Answers `roots/list` (declares the `roots` capability).
    pub fn on_roots(mut self, handler: RootsHandler) -> Self {
        self.handlers.roots = Some(handler);
        self
    }

    /// Called with every progress notification.
    pub fn on_progress(
        mut self,
        f: impl Fn(&ProgressNotificationParams) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.on_progress = Some(Arc::new(f));
        self
    }

    /// Called with every log message the server sends.
    pub fn on_log(
        mut self,
        f: impl Fn(&toolyard_proto::LoggingMessageNotificationParams) + Send + Sync + 'static,
    ) -> Self {
        self.handlers.on_log = Some(Arc::new(f));
        self
    }

    /// Called with every notification the server sends.
    pub fn on_notification(mut self, f: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        self.handlers.on_notification = Some(Arc::new(f));
        self
    }

    /// Observes every request this client sends (telemetry); replaces the process-wide
    /// default ([`set_default_observer`](crate::set_default_observer)).
    pub fn observe(mut self, observer: Arc<dyn crate::RequestObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Starts the transport, the client actor and the handshake.
    pub async fn connect(self, transport: impl Transport) -> Result<Client, ClientError> {
        self.connect_boxed(Box::new(transport)).await
    }

    /// [`connect`](Self::connect) for a boxed transport.
    pub async fn connect_boxed(self, transport: Box<dyn Transport>) -> Result<Client, ClientError> {
        let (notices, _) = broadcast::channel(256);
        let response_headers = Arc::new(ArcSwap::from_pointee(Vec::new()));
        let cache = Arc::new(Mutex::new(ResponseCache::default()));
        let mut handlers = self.handlers.clone();
        // The cache forgets what a change notification makes stale, before user callbacks run.
        let user_hook = handlers.on_notification.take();
        let cache_hook = cache.clone();
        handlers.on_notification = Some(Arc::new(move |n: &Notice| {
            lock(&cache_hook).invalidate(&n.method, &n.params);
            if let Some(f) = &user_hook {
                f(n);
            }
        }));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let actor = ClientActor {
            closed: closed.clone(),
            handlers,
            notices: notices.clone(),
            response_headers: response_headers.clone(),
            name: self.info.name.clone(),
        };
        // The actor first: the transport reports straight into its mailbox (responses
        // straight to their callers, through the pending table).
        let link = Arc::new(LateLink::default());
        let table = PendingTable::start();
        let (actor_ref, _) = Actor::spawn(
            None,
            actor,
            (link.clone() as Arc<dyn TransportLink>, table.clone()),
        )
        .await
        .map_err(|e| {
            ClientError::Initialization(format!("could not start the client actor: {e}"))
        })?;
        let started = tokio::time::timeout(
            self.handshake_timeout,
            transport.start(EventSink::client(actor_ref.clone(), table.clone())),
        )
        .await
        .map_err(|_| ClientError::Initialization("the transport did not start in time".into()))
        .and_then(|started| started.map_err(ClientError::from));
        match started {
            Ok(started) => link.set(started),
            Err(e) => {
                actor_ref.stop(None);
                return Err(e);
            }
        }
        let mut capabilities = self.capabilities.clone();
        let declared = self.handlers.capabilities();
        capabilities.elicitation = capabilities.elicitation.or(declared.elicitation);
        capabilities.sampling = capabilities.sampling.or(declared.sampling);
        capabilities.roots = capabilities.roots.or(declared.roots);
        let client = Client {
            inner: Arc::new(Inner {
                actor: actor_ref,
                link,
                pending: table,
                closed,
                next_id: AtomicI64::new(0),
                modern_identity: ModernIdentity::of(&capabilities, &self.info),
                info: self.info,
                capabilities,
                handlers: self.handlers,
                session: ArcSwap::from_pointee(None),
                protocol: self.protocol,
                request_timeout: self.request_timeout,
                max_request_timeout: self.max_request_timeout,
                handshake_timeout: self.handshake_timeout,
                probe_timeout: self.probe_timeout,
                max_input_rounds: self.max_input_rounds,
                use_cache: self.cache,
                cache,
                tool_headers: Mutex::new(HashMap::new()),
                response_headers,
                log_level: Mutex::new(None),
                reinit: tokio::sync::Mutex::new(()),
                notices,
                observer: self.observer,
            }),
        };
        match client.handshake().await {
            Ok(()) => Ok(client),
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
    }
}
