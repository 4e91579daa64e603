//! Loom models of fairq's atomic protocols live in `tests/`; run them with `run.sh`.
//!
//! This library holds what the models share: a tiny engine configuration (sharded-slab's
//! `TinyConfig` idea: two tenants, queues of two, one or two permits), two tenant keys that land
//! in known slots, and [`check`], which runs a model and reports how many executions loom
//! explored and how long it took.
//!
//! The models build their `Engine` *inside* the model closure, so every atomic, the loom
//! stand-in for `WordRing` and the stand-in for `ArcSwap` (see `src/sync.rs` in `fairq`) are
//! fresh loom objects in every execution.

use fairq::{Config, Dimension, Engine, Enqueued, Request, TenantKey, Ticket};

/// A tiny engine: 2 tenant slots, 2 entries per tenant, 4 queued in all, 1 permit, 2 weight
/// classes, and slots reusable as soon as they go idle.
pub fn tiny_config() -> Config {
    Config {
        enabled: true,
        max_tenants: 2,
        tenant_queue_capacity: 2,
        queue_capacity: 4,
        max_in_flight: 1,
        default_weight: 1,
        max_wait_ms: 1_000,
        tenant_idle_ms: 0,
        max_weight_classes: 2,
        ..Config::default()
    }
}

/// Tenant A: its home slot is slot 0 of any table (the key's top bits are 0).
pub fn tenant_a() -> TenantKey {
    TenantKey::from_hash(1)
}

/// Tenant B: its home slot is the last slot of any table (the key's top bits are all 1).
pub fn tenant_b() -> TenantKey {
    TenantKey::from_hash(u64::MAX)
}

/// Tenant C: home slot 0, like A, so its lookup probes A's slot first and reclaims it when A is
/// idle (a claim prefers the first reusable slot of its probe chain).
pub fn tenant_c() -> TenantKey {
    TenantKey::from_hash(2)
}

/// A cost-1 request for `key`, ready at once.
pub fn request(key: TenantKey) -> Request {
    Request::new(key, Dimension::User)
}

/// Enqueues `request` at `now` and returns its ticket; panics if it was refused.
pub fn enqueue(engine: &Engine, request: &Request, now: u64) -> Ticket {
    match engine.enqueue_at(request, now) {
        Ok(Enqueued::Queued { ticket, .. }) => ticket,
        other => panic!("expected the request to be queued, got {other:?}"),
    }
}

/// Runs `model` under loom's exhaustive (preemption-bounded) scheduler and prints how many
/// executions it explored and how long that took, for the closing note and the docs.
///
/// The preemption bound comes from `LOOM_MAX_PREEMPTIONS` (`run.sh` defaults it to 2); loom's
/// other knobs (`LOOM_LOG`, `LOOM_CHECKPOINT_FILE`, `LOOM_MAX_BRANCHES`) work as usual.
/// A failing model panics with the first execution that broke an assertion.
#[cfg(loom)]
pub fn check<F>(name: &str, model: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let executions = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&executions);
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    // One execution of a model runs a few hundred engine atomics (every one a loom branch
    // point), over loom's default cap of 1000; the cap only exists to catch spin loops.
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 100_000;
    }
    let bound = builder.preemption_bound;
    let started = std::time::Instant::now();
    builder.check(move || {
        // std atomic, outside the model: loom does not see (or branch on) this count.
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    println!(
        "loom model {name}: {} executions in {:.2?} (preemption bound {})",
        executions.load(Ordering::Relaxed),
        started.elapsed(),
        bound.map_or("none".to_string(), |b| b.to_string()),
    );
}
