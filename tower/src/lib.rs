//! # fairq-tower
//!
//! A [`tower::Layer`](tower_layer::Layer) that puts a [`fairq::Engine`] in front of an HTTP
//! service: axum, hyper (through `hyper_util::service::TowerToHyperService`) and tonic take it
//! as they take any layer.
//!
//! Each request is named a tenant (a function of the request, or the user → team → API key
//! resolver). Without a limiter, every request is queued under its tenant and at most
//! `max_in_flight` run at once, admitted by weight; with a [`Limiter`], the requests it allows
//! pass untouched and only those it refuses are queued, re-checked when granted, and requeued if
//! it still refuses. A queued request is held (no thread, no polling) until its grant, then runs
//! the inner service while holding its permit; the permit goes back when the response **body**
//! ends. A request whose client goes away while it waits (its future is dropped) is cancelled.
//! The budget, `min(max_wait_ms, timeout)`, is enforced by a timer per waiting request.
//!
//! A refusal is answered `429 Too Many Requests` with `Retry-After` (none for `no_tenant`: sent
//! again, the request is refused again), `x-fair-queue-position`, `x-fair-queue-wait-ms` and a
//! JSON body:
//!
//! ```json
//! {"error": {"type": "rate_limited", "message": "fair queue refused the request: tenant_queue_full",
//!   "details": {"fair_queue": {"tenant_dimension": "user", "reason": "tenant_queue_full",
//!   "position": 65, "wait_ms": 0}}}}
//! ```
//!
//! A response to a request that went through the queue carries `x-fair-queue-position`,
//! `x-fair-queue-wait-ms` and `x-fair-queue-estimated-wait-ms`, and the inner service finds an
//! [`Admission`] in the request's extensions. The engine's Prometheus text is served at an
//! optional path.
//!
//! One dispatcher task per layer drives the engine: it takes grants whenever a request is
//! queued, a permit comes back, or the engine's `next_wakeup_ns` passes, and wakes each granted
//! request. It is spawned on the Tokio runtime of the first request.
//!
//! ```no_run
//! use std::sync::Arc;
//! use axum::{routing::get, Router};
//! use fairq::{Config, Engine};
//! use fairq_tower::FairQueueLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Arc::new(Engine::new(Config { enabled: true, max_in_flight: 4, ..Config::default() })?);
//! engine.set_weight("acme", 3)?;
//! let fair = FairQueueLayer::builder(engine)
//!     .tenant(|req: &http::request::Parts| {
//!         req.headers.get("x-tenant")?.to_str().ok().map(str::to_owned)
//!     })
//!     .metrics_path("/metrics")
//!     .build()?;
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(fair);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod body;
mod dispatch;
mod response;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fairq::{
    Completion, Dimension, Engine, Enqueued, Identity, Reason, Request as FairRequest,
    TenantDimension, TenantKey,
};
use http::request::Parts;
use http::{Request, Response};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

pub use body::FairBody;
use dispatch::{Event, Shared, Waiter};

/// What a [`Limiter`] says about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let it through now.
    Allow,
    /// Refused by `dimension`; it may pass after `retry_after`.
    Refuse {
        /// The limit that refused it: `User`, `ApiKey`, `Team` and `Model` refusals are queued,
        /// the others are answered 429 at once (`not_queueable`).
        dimension: Dimension,
        /// When the limit expects to let it through.
        retry_after: Duration,
    },
}

/// A per-tenant limit in front of the queue: called on arrival, and again when a queued request
/// is granted (a refusal then puts it back in its queue, within its budget).
pub trait Limiter: Send + Sync + 'static {
    /// Decides for a request of `tenant` (`None`: the request names no tenant).
    fn check(&self, tenant: Option<TenantKey>, request: &Parts) -> Decision;
}

impl<F> Limiter for F
where
    F: Fn(Option<TenantKey>, &Parts) -> Decision + Send + Sync + 'static,
{
    fn check(&self, tenant: Option<TenantKey>, request: &Parts) -> Decision {
        self(tenant, request)
    }
}

/// Put into the request's extensions when a queued request is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Its 1-based place in its tenant's queue when it was (re)queued.
    pub position: u32,
    /// How long it waited.
    pub waited: Duration,
    /// The wait the queue estimated when it was (re)queued.
    pub estimated_wait: Duration,
    /// The budget left for later stages (its total timeout or `max_wait_ms`, less the wait).
    pub remaining_budget: Duration,
}

type TenantFn = dyn Fn(&Parts) -> Option<(TenantDimension, TenantKey)> + Send + Sync;

/// Why [`FairQueueLayerBuilder::build`] failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(&'static str);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for BuildError {}

/// Builds a [`FairQueueLayer`]: [`FairQueueLayer::builder`].
pub struct FairQueueLayerBuilder {
    engine: Arc<Engine>,
    tenant: Option<Arc<TenantFn>>,
    limiter: Option<Arc<dyn Limiter>>,
    metrics_path: Option<String>,
    timeout: Option<Duration>,
}

impl FairQueueLayerBuilder {
    /// The tenant is the raw identifier `f` returns (hashed, never kept), in the engine's
    /// configured `tenant_dimension`; `None` or an empty identifier means the request names no
    /// tenant (429 `no_tenant`).
    pub fn tenant<F, T>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<T> + Send + Sync + 'static,
        T: AsRef<[u8]>,
    {
        let dimension = self.engine.config().tenant_dimension;
        self.tenant = Some(Arc::new(move |parts: &Parts| {
            f(parts)
                .filter(|raw| !raw.as_ref().is_empty())
                .map(|raw| (dimension, TenantKey::from_raw(raw.as_ref())))
        }));
        self
    }

    /// The tenant comes from the identifiers the request carries: the engine's configured
    /// `tenant_dimension` first, then user, team, API key (a placeholder team is not one).
    pub fn identity<F>(mut self, f: F) -> Self
    where
        F: for<'a> Fn(&'a Parts) -> Identity<'a> + Send + Sync + 'static,
    {
        let preferred = self.engine.config().tenant_dimension;
        self.tenant = Some(Arc::new(move |parts: &Parts| f(parts).resolve(preferred)));
        self
    }

    /// Queue only what `limiter` refuses (without one, every request is queued and at most
    /// `max_in_flight` run at once).
    pub fn limiter(mut self, limiter: impl Limiter) -> Self {
        self.limiter = Some(Arc::new(limiter));
        self
    }

    /// Serve the engine's Prometheus text on `GET path` (it starts with `/`).
    pub fn metrics_path(mut self, path: impl Into<String>) -> Self {
        self.metrics_path = Some(path.into());
        self
    }

    /// Every request's total timeout: its budget is the smaller of this and `max_wait_ms`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<FairQueueLayer, BuildError> {
        let tenant = self.tenant.ok_or(BuildError(
            "no tenant source: call tenant(...) or identity(...)",
        ))?;
        if let Some(path) = &self.metrics_path {
            if !path.starts_with('/') {
                return Err(BuildError("metrics_path must start with '/'"));
            }
        }
        let max_wait = Duration::from_millis(self.engine.config().max_wait_ms);
        let budget = match self.timeout {
            Some(t) if t.is_zero() => return Err(BuildError("timeout must be above 0")),
            Some(t) => t.min(max_wait),
            None => max_wait,
        };
        Ok(FairQueueLayer {
            shared: Shared::new(
                self.engine,
                tenant,
                self.limiter,
                self.metrics_path,
                self.timeout,
                budget,
            ),
        })
    }
}

/// The layer. Cloning it shares the engine, the dispatcher and the waiting requests.
#[derive(Clone)]
pub struct FairQueueLayer {
    shared: Arc<Shared>,
}

impl FairQueueLayer {
    /// Starts a layer around `engine` (built `enabled`, with `max_in_flight` permits).
    pub fn builder(engine: Arc<Engine>) -> FairQueueLayerBuilder {
        FairQueueLayerBuilder {
            engine,
            tenant: None,
            limiter: None,
            metrics_path: None,
            timeout: None,
        }
    }

    /// The engine (stats, weights, on/off at run time).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// Requests waiting for their grant now.
    pub fn waiting(&self) -> usize {
        self.shared.waiting()
    }
}

impl fmt::Debug for FairQueueLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairQueueLayer")
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for FairQueueLayer {
    type Service = FairQueue<S>;

    fn layer(&self, inner: S) -> FairQueue<S> {
        FairQueue {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`FairQueueLayer`] wraps around `S`.
#[derive(Clone)]
pub struct FairQueue<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> fmt::Debug for FairQueue<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairQueue")
            .field("waiting", &self.shared.waiting())
            .finish_non_exhaustive()
    }
}

/// The future of [`FairQueue::call`].
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<FairBody<B>>, E>> + Send + 'static>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for FairQueue<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
{
    type Response = Response<FairBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    /// Always ready: requests wait in the queue, and the inner service's readiness is awaited
    /// once a request is admitted.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // poll_ready does not drive the inner service, so any clone will do: the request's
        // future drives its own to readiness once admitted.
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        shared.ensure_dispatcher();
        Box::pin(handle(shared, inner, request))
    }
}

async fn call_inner<S, B, R>(mut inner: S, request: Request<B>) -> Result<Response<R>, S::Error>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(request).await
}

/// One request through the queue.
async fn handle<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    inner: S,
    request: Request<ReqBody>,
) -> Result<Response<FairBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = bytes::Bytes>,
{
    if let Some(path) = &shared.metrics_path {
        if request.method() == http::Method::GET && request.uri().path() == path {
            return Ok(response::metrics(&shared.engine));
        }
    }
    let (mut parts, body) = request.into_parts();
    let resolved = (shared.tenant)(&parts);
    let tenant_dimension = resolved.map_or(shared.engine.config().tenant_dimension, |r| r.0);
    let tenant = resolved.map(|r| r.1);
    let (dimension, mut retry_after) = match &shared.limiter {
        None => (queue_dimension(tenant_dimension), Duration::ZERO),
        Some(limiter) => match limiter.check(tenant, &parts) {
            Decision::Allow => {
                let request = Request::from_parts(parts, body);
                return Ok(call_inner(inner, request).await?.map(FairBody::passed));
            }
            Decision::Refuse {
                dimension,
                retry_after,
            } => (dimension, retry_after),
        },
    };
    let (mut waiter, mut events) = Waiter::register(shared.clone());
    let fair_request = FairRequest {
        tenant,
        dimension,
        user_data: waiter.id(),
        cost: 1,
        retry_after_ns: duration_ns(retry_after),
        timeout_ns: shared.timeout.map_or(0, duration_ns),
        downstream: 0,
    };
    let ticket = match shared.engine.enqueue(&fair_request) {
        Ok(Enqueued::Queued { ticket, .. }) => ticket,
        Ok(Enqueued::Refused(refusal)) => {
            drop(waiter);
            if refusal.reason == Reason::Disabled && shared.limiter.is_none() {
                // Off: behave as without the layer (with a limiter, its refusal stands).
                let request = Request::from_parts(parts, body);
                return Ok(call_inner(inner, request).await?.map(FairBody::passed));
            }
            return Ok(response::refusal(refusal, tenant_dimension, retry_after));
        }
        Err(error) => {
            drop(waiter);
            return Ok(response::internal_error(&error.to_string()));
        }
    };
    waiter.queued(ticket);
    shared.wake();

    let deadline = Instant::now() + shared.budget;
    let mut timer_fired = false;
    loop {
        let event = tokio::select! {
            event = &mut events => event,
            () = tokio::time::sleep_until(deadline), if !timer_fired => {
                timer_fired = true;
                match shared.engine.expire(ticket) {
                    Ok(refusal) => {
                        waiter.ended();
                        return Ok(response::refusal(refusal, tenant_dimension, retry_after));
                    }
                    // Granted or ended meanwhile: that event is on its way.
                    Err(_) => continue,
                }
            }
        };
        let (grant, mut permit) = match event {
            Ok(Event::Granted(grant, permit)) => (grant, permit),
            Ok(Event::Refused(refusal)) => {
                return Ok(response::refusal(refusal, tenant_dimension, retry_after));
            }
            Err(_closed) => {
                return Ok(response::internal_error("fair queue dispatcher stopped"));
            }
        };
        if let Some(limiter) = &shared.limiter {
            if let Decision::Refuse {
                retry_after: again, ..
            } = limiter.check(tenant, &parts)
            {
                // Still refused: back into its queue under the same ticket, within its budget.
                retry_after = again;
                events = waiter.requeue();
                match permit.requeue(duration_ns(retry_after)) {
                    Ok(Completion::Requeued { .. }) => continue,
                    Ok(Completion::Refused(refusal)) => {
                        waiter.ended();
                        return Ok(response::refusal(refusal, tenant_dimension, retry_after));
                    }
                    Ok(Completion::Completed) | Err(_) => {
                        waiter.ended();
                        return Ok(response::internal_error("fair queue requeue failed"));
                    }
                }
            }
        }
        let admission = Admission {
            position: grant.position,
            waited: Duration::from_nanos(grant.waited_ns),
            estimated_wait: Duration::from_nanos(grant.estimated_wait_ns),
            remaining_budget: Duration::from_nanos(grant.remaining_budget_ns),
        };
        parts.extensions.insert(admission);
        permit.admit();
        let request = Request::from_parts(parts, body);
        // An error drops the permit here: admitted, so it completes.
        let response = call_inner(inner, request).await?;
        let (mut head, body) = response.into_parts();
        response::granted_headers(&mut head.headers, &admission);
        return Ok(Response::from_parts(head, FairBody::held(body, permit)));
    }
}

/// The refusal dimension for a request queued without a limiter: its tenant's own dimension.
fn queue_dimension(tenant: TenantDimension) -> Dimension {
    match tenant {
        TenantDimension::User => Dimension::User,
        TenantDimension::ApiKey => Dimension::ApiKey,
        TenantDimension::Team => Dimension::Team,
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
