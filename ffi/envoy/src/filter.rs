//! The HTTP filter: Envoy's hooks, per filter configuration and per stream.
//!
//! Threads: configurations are made and destroyed on Envoy's main thread; each stream's hooks run
//! on the worker that owns it. The only things another thread touches are a waiting request's
//! [`Waiter`] (atomics) and its scheduler, whose commit Envoy allows from any thread.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, Weak};

use fairq::{Dimension, Engine, Reason, Request, TenantDimension, TenantKey, Ticket};

use crate::abi::{self, ConfigEnvoy, EnvoyBuffer, FilterEnvoy, ModuleBuffer, ModuleHeader};
use crate::admission::{Admission, Ended, Info, Queue, Waiter, Wake};
use crate::config::Settings;
use crate::stats::{Pending, Stats};
use crate::status;

/// A stream's Envoy scheduler: wakes its worker from any thread.
pub struct Sched(abi::Scheduler);

// SAFETY: Envoy documents the scheduler's commit as safe from any thread (a no-op once the
// stream is gone), and the pointer is deleted once, by `Drop`, when no thread holds it.
unsafe impl Send for Sched {}
// SAFETY: as above; `&Sched` only commits.
unsafe impl Sync for Sched {}

impl Wake for Sched {
    fn wake(&self) {
        // SAFETY: a live scheduler (deleted only in Drop); commit is thread-safe.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_commit(self.0, 0) }
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        // SAFETY: made by scheduler_new, deleted once here.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(self.0) }
    }
}

/// An engine's queue, and what its requests owe Envoy's stats.
pub struct Shared {
    queue: Arc<Queue<Sched>>,
    pending: Pending,
}

/// One engine per distinct configuration per process (by `config::engine_key`): a reload that
/// keeps the filter's configuration keeps its engine, with the permits and queues in it.
static SHARED: Mutex<Vec<(Vec<u8>, Weak<Shared>)>> = Mutex::new(Vec::new());

fn shared(key: Vec<u8>, settings: &Settings) -> Result<Arc<Shared>, String> {
    // Main thread, at configuration time only.
    let mut all = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(_, s)| s.strong_count() > 0);
    if let Some(s) = all
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, s)| s.upgrade())
    {
        return Ok(s);
    }
    let engine = Engine::new(settings.engine.clone()).map_err(|e| e.to_string())?;
    for (id, w) in &settings.weights {
        engine
            .set_weight(id, *w)
            .map_err(|e| format!("weights: \"{id}\": {e}"))?;
    }
    let shared = Arc::new(Shared {
        queue: Queue::new(engine, settings.ticks).map_err(|e| e.to_string())?,
        pending: Pending::default(),
    });
    all.push((key, Arc::downgrade(&shared)));
    Ok(shared)
}

/// A filter configuration: its settings, the shared queue and its stats.
pub struct FilterConfig {
    settings: Settings,
    shared: Arc<Shared>,
    stats: Stats,
}

impl FilterConfig {
    pub fn new(envoy: ConfigEnvoy, text: &[u8]) -> Result<FilterConfig, String> {
        let settings = crate::config::parse(text)?;
        let shared = shared(crate::config::engine_key(text), &settings)?;
        let stats = Stats::define(envoy)?;
        Ok(FilterConfig {
            settings,
            shared,
            stats,
        })
    }

    fn update(&self) {
        self.stats
            .update(&self.shared.queue.engine, &self.shared.pending);
    }

    fn granted(&self, dimension: Dimension, waited_ns: u64) {
        self.stats
            .granted(&self.shared.pending, dimension, waited_ns);
    }

    fn refused(&self, dimension: Dimension, reason: Reason) {
        Stats::refused(&self.shared.pending, dimension, reason);
    }
}

impl Drop for FilterConfig {
    /// A configuration replaced by a reload takes the counts still owed to Envoy with it.
    fn drop(&mut self) {
        self.stats.flush(&self.shared.pending);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing held.
    Idle,
    /// Queued, headers paused; the waiter says when it ended.
    Waiting,
    /// Proceeding with a permit, returned when the stream ends.
    Running,
}

/// One stream.
pub struct Filter {
    config: *const FilterConfig,
    phase: Phase,
    ticket: Ticket,
    waiter: Option<Arc<Waiter<Sched>>>,
    dimension: Dimension,
    pool: u32,
    /// Set when the request waited: its place and wait go on the response.
    waited: Option<Info>,
    /// Whether its upstream answered below 500 (shedding on).
    upstream_ok: Option<bool>,
}

fn header<'a>(filter: FilterEnvoy, kind: u32, name: &str) -> Option<&'a [u8]> {
    let mut out = EnvoyBuffer::EMPTY;
    // SAFETY: the filter pointer is live for this hook; Envoy writes `out`, whose bytes stay
    // valid until the hook returns (no header is set before they are used).
    let found = unsafe {
        abi::envoy_dynamic_module_callback_http_get_header(
            filter,
            kind,
            ModuleBuffer::of(name.as_bytes()),
            &mut out,
            0,
            std::ptr::null_mut(),
        )
    };
    // SAFETY: as above.
    let bytes = unsafe { out.bytes() };
    (found && !bytes.is_empty()).then_some(bytes)
}

fn dimension_of(d: TenantDimension) -> Dimension {
    match d {
        TenantDimension::User => Dimension::User,
        TenantDimension::Team => Dimension::Team,
        TenantDimension::ApiKey => Dimension::ApiKey,
    }
}

impl Filter {
    pub fn new(config: *const FilterConfig) -> Filter {
        Filter {
            config,
            phase: Phase::Idle,
            ticket: Ticket(0),
            waiter: None,
            dimension: Dimension::User,
            pool: 0,
            waited: None,
            upstream_ok: None,
        }
    }

    fn config<'a>(&self) -> &'a FilterConfig {
        // SAFETY: Envoy keeps a stream's filter configuration alive until the stream's filter
        // is destroyed.
        unsafe { &*self.config }
    }

    /// The tenant: the first non-empty header in the order preferred, user, team, api key.
    fn tenant(&mut self, filter: FilterEnvoy) -> Option<TenantKey> {
        let s = &self.config().settings;
        let order = [
            s.preferred,
            TenantDimension::User,
            TenantDimension::Team,
            TenantDimension::ApiKey,
        ];
        for d in order {
            let name = match d {
                TenantDimension::User => &s.tenant.user,
                TenantDimension::Team => &s.tenant.team,
                TenantDimension::ApiKey => &s.tenant.api_key,
            };
            if let Some(value) = name
                .as_deref()
                .and_then(|n| header(filter, abi::REQUEST_HEADER, n))
            {
                self.dimension = dimension_of(d);
                return Some(TenantKey::from_raw(value));
            }
        }
        self.dimension = dimension_of(s.preferred);
        None
    }

    /// The tier header moves the tenant to the tier it names (when it is not there already).
    fn apply_tier(&self, filter: FilterEnvoy, key: TenantKey) {
        let cfg = self.config();
        let Some(name) = cfg.settings.tier_header.as_deref() else {
            return;
        };
        let Some(tier) = header(filter, abi::REQUEST_HEADER, name) else {
            return;
        };
        let Ok(tier) = std::str::from_utf8(tier) else {
            return;
        };
        let engine = &cfg.shared.queue.engine;
        if let Some(w) = engine.tier_weight(tier) {
            if engine.weight_of(key) != w {
                let _ = engine.set_tier_key(key, tier);
            }
        }
    }

    fn pool_of(&self, filter: FilterEnvoy) -> u32 {
        let s = &self.config().settings;
        if s.pools.is_empty() {
            return s.default_pool;
        }
        let mut out = EnvoyBuffer::EMPTY;
        // SAFETY: live filter pointer; Envoy writes `out`, valid until the hook returns.
        let found =
            unsafe { abi::envoy_dynamic_module_callback_http_get_cluster_name(filter, &mut out) };
        // SAFETY: as above.
        let cluster = if found { unsafe { out.bytes() } } else { &[] };
        s.pools
            .iter()
            .find(|(name, _)| name.as_bytes() == cluster)
            .map_or(s.default_pool, |(_, i)| *i)
    }

    pub fn on_request_headers(&mut self, filter: FilterEnvoy) -> u32 {
        if self.phase != Phase::Idle {
            return abi::HEADERS_CONTINUE;
        }
        if let Some(path) = self.config().settings.status_path.as_deref() {
            let (p, query) =
                status::split(header(filter, abi::REQUEST_HEADER, ":path").unwrap_or(&[]));
            if p == path.as_bytes() {
                self.status(filter, query);
                return abi::HEADERS_STOP_ITERATION;
            }
        }
        let tenant = self.tenant(filter);
        if let Some(key) = tenant {
            self.apply_tier(filter, key);
        }
        self.pool = self.pool_of(filter);
        let request = Request {
            tenant,
            dimension: self.dimension,
            downstream: self.pool,
            ..Request::new(TenantKey::from_hash(1), self.dimension)
        };
        let cfg = self.config();
        let admission = cfg.shared.queue.admit(request, || {
            // SAFETY: the filter pointer is live (this hook); the scheduler is deleted by Sched.
            Sched(unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(filter) })
        });
        let status = match admission {
            Admission::Now(ticket) => {
                self.ticket = ticket;
                self.phase = Phase::Running;
                cfg.granted(self.dimension, 0);
                abi::HEADERS_CONTINUE
            }
            Admission::Wait(ticket, waiter) => {
                self.ticket = ticket;
                self.waiter = Some(waiter);
                self.phase = Phase::Waiting;
                abi::HEADERS_STOP_ALL_AND_WATERMARK
            }
            Admission::Refused(reason, info) => {
                self.refuse(filter, reason, info);
                abi::HEADERS_STOP_ITERATION
            }
        };
        cfg.update();
        status
    }

    /// The worker's turn after another thread ended this request's ticket.
    pub fn on_scheduled(&mut self, filter: FilterEnvoy) {
        if self.phase != Phase::Waiting {
            return; // resumed already, or a late wake-up
        }
        let Some(waiter) = self.waiter.clone() else {
            return;
        };
        match waiter.ended() {
            Ended::Queued => {}
            Ended::Granted(info) => {
                self.phase = Phase::Running;
                self.waited = Some(info);
                self.waiter = None;
                self.config().granted(self.dimension, info.waited_ns);
                self.config().update();
                // SAFETY: live filter pointer on its own worker; the headers were paused.
                unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(filter) };
            }
            Ended::Refused(reason, info) => {
                self.phase = Phase::Idle;
                self.waiter = None;
                self.config().update();
                self.refuse(filter, reason, info);
            }
        }
    }

    pub fn on_response_headers(&mut self, filter: FilterEnvoy) -> u32 {
        if self.phase != Phase::Running {
            return abi::CONTINUE;
        }
        if self.config().settings.shedding {
            let status = header(filter, abi::RESPONSE_HEADER, ":status")
                .and_then(|s| std::str::from_utf8(s).ok()?.parse::<u32>().ok());
            self.upstream_ok = status.map(|s| s < 500);
        }
        if let Some(info) = self.waited {
            let values = [
                ("x-fair-queue-position", u64::from(info.position)),
                ("x-fair-queue-wait-ms", info.waited_ns / 1_000_000),
                (
                    "x-fair-queue-estimated-wait-ms",
                    info.estimated_wait_ns / 1_000_000,
                ),
            ];
            for (name, value) in values {
                let value = value.to_string();
                // SAFETY: live filter pointer; the buffers live for the call (Envoy copies).
                unsafe {
                    abi::envoy_dynamic_module_callback_http_set_header(
                        filter,
                        abi::RESPONSE_HEADER,
                        ModuleBuffer::of(name.as_bytes()),
                        ModuleBuffer::of(value.as_bytes()),
                    )
                };
            }
        }
        abi::CONTINUE
    }

    /// The stream ends (completed, reset, or its client went away): whatever it holds goes back
    /// once. Called from stream_complete and again from destroy; the second call finds nothing.
    pub fn finish(&mut self) {
        let cfg = self.config();
        match self.phase {
            Phase::Waiting => {
                if let Some(w) = self.waiter.take() {
                    cfg.shared.queue.leave(self.ticket, &w);
                    match w.ended() {
                        // Granted as the client left: counted as the grant it was.
                        Ended::Granted(_) => cfg.granted(self.dimension, 0),
                        // Refused before the answer went out: counted as that refusal.
                        Ended::Refused(reason, _) => cfg.refused(self.dimension, reason),
                        Ended::Queued => cfg.refused(self.dimension, Reason::Cancelled),
                    }
                }
            }
            Phase::Running => {
                let verdict = self.upstream_ok.map(|ok| (self.pool, ok));
                cfg.shared.queue.finish(self.ticket, verdict);
            }
            Phase::Idle => return,
        }
        self.phase = Phase::Idle;
        cfg.update();
    }

    /// Answers a request for `status_path` with the status dump (neither queued nor counted).
    fn status(&self, filter: FilterEnvoy, query: &[u8]) {
        let reply = status::answer(&self.config().shared.queue.engine, query);
        let headers = [
            ModuleHeader::new(b"content-type", reply.content_type.as_bytes()),
            ModuleHeader::new(b"cache-control", b"no-store"),
        ];
        // SAFETY: live filter pointer on its worker; every buffer outlives the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                filter,
                reply.status,
                headers.as_ptr(),
                headers.len(),
                ModuleBuffer::of(reply.body.as_bytes()),
                ModuleBuffer::of(b"fairq_status"),
            )
        };
    }

    /// Answers with the refusal: status, Retry-After, the x-fair-queue-* headers, JSON body.
    fn refuse(&self, filter: FilterEnvoy, reason: Reason, info: Info) {
        let cfg = self.config();
        cfg.refused(self.dimension, reason);
        let wait_ms = info.waited_ns / 1_000_000;
        let hint_ns = info.estimated_wait_ns.max(info.waited_ns);
        let retry_s = hint_ns.div_ceil(1_000_000_000).max(1);
        // The NGINX module's body, field for field.
        let body = format!(
            "{{\"error\": {{\"type\": \"rate_limited\", \"message\": \"fair queue refused the \
             request: {r}\", \"details\": {{\"fair_queue\": {{\"tenant_dimension\": \"{d}\", \
             \"reason\": \"{r}\", \"position\": {p}, \"wait_ms\": {wait_ms}}}}}}}}}\n",
            r = reason.as_str(),
            d = self.dimension.as_str(),
            p = info.position,
        );
        // No Retry-After when sending the request again cannot help (it names no tenant).
        let retry = reason
            .retry_can_help()
            .then(|| ("retry-after", retry_s.to_string()));
        let values = [
            ("x-fair-queue-reason", reason.as_str().to_string()),
            ("x-fair-queue-position", info.position.to_string()),
            ("x-fair-queue-wait-ms", wait_ms.to_string()),
            (
                "x-fair-queue-estimated-wait-ms",
                (info.estimated_wait_ns / 1_000_000).to_string(),
            ),
            ("content-type", "application/json".to_string()),
        ];
        let headers: Vec<ModuleHeader> = retry
            .iter()
            .chain(&values)
            .map(|(k, v)| ModuleHeader::new(k.as_bytes(), v.as_bytes()))
            .collect();
        let details = format!("fairq_{}", reason.as_str());
        // SAFETY: live filter pointer on its worker; every buffer outlives the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                filter,
                u32::from(cfg.settings.refusal_status),
                headers.as_ptr(),
                headers.len(),
                ModuleBuffer::of(body.as_bytes()),
                ModuleBuffer::of(details.as_bytes()),
            )
        };
    }
}

/// Runs a hook body; a panic is logged and answered with `fallback` instead of unwinding into
/// Envoy.
pub fn guard<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            abi::log(abi::LOG_ERROR, "fairq: a filter hook panicked; see stderr");
            fallback
        }
    }
}

/// The module pointer Envoy hands back: a boxed value.
pub fn boxed<T>(value: T) -> *const c_void {
    Box::into_raw(Box::new(value)) as *const c_void
}
