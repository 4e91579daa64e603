//! The public engine: the scheduler core with the features plugged in, and the API a gateway
//! calls. The only `impl Engine`; every method is a thin layer over the core or a feature.

pub use crate::core::FleetTenant;
#[cfg(feature = "fleet")]
pub use crate::limits::MIN_FLEET_FACTOR;

use std::collections::HashMap;

use crate::bulkhead::Bulkheads;
use crate::config::Config;
use crate::core::{Core, CoreAccess};
use crate::features::Features;
use crate::histogram::BUCKETS;
use crate::identity::TenantKey;
use crate::indicators::{FairnessReport, Indicators, TenantIndicators};
use crate::policy::{PolicyState, TickReport};
use crate::sync::{AtomicBool, Ordering};
use crate::types::{
    Completion, ConfigError, Enqueued, Error, Load, NextGrant, Outcome, Reason, Refusal, Request,
    Stats, Ticket,
};

/// A lock-free multi-tenant weighted fair queue. `Send + Sync`: share it with `Arc`.
pub struct Engine {
    config: Config,
    enabled: AtomicBool,
    core: Core<Features>,
    /// The identifiers tenants were given weights or tiers under, by key, for status dumps;
    /// at most `status::MAX_NAMES`. Written by the weight setters only, never on the hot path.
    names: std::sync::Mutex<HashMap<u64, Box<str>>>,
}

impl Engine {
    /// Builds an engine: validates the config and allocates every table up front.
    pub fn new(config: Config) -> Result<Engine, ConfigError> {
        config.validate()?;
        let slots = crate::core::slot_count(config.max_tenants as usize);
        let features = Features {
            indicators: config.indicators.then(|| Indicators::new(slots)),
            policy: PolicyState::new(
                &config.policy,
                crate::core::class_count(config.max_weight_classes),
            ),
            bulkheads: Bulkheads::new(&config.downstream_max_in_flight, config.shedding, slots),
        };
        Ok(Engine {
            enabled: AtomicBool::new(config.enabled),
            core: Core::new(config.core_limits(), features),
            names: std::sync::Mutex::new(HashMap::new()),
            config,
        })
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Turns the engine on or off at run time. Off refuses new requests with `disabled`; what
    /// is already queued still drains through `next_grant`.
    pub fn set_enabled(&self, enabled: bool) {
        // Relaxed: a switch; no data is published through it.
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether new requests are queued.
    pub fn is_enabled(&self) -> bool {
        // Relaxed: see `set_enabled`.
        self.enabled.load(Ordering::Relaxed)
    }

    // ---------------------------------------------------------------- the cycle

    /// `enqueue_at` with the monotonic clock.
    pub fn enqueue(&self, request: &Request) -> Result<Enqueued, Error> {
        self.enqueue_at(request, crate::clock::now_ns())
    }

    /// Holds a refused request in its tenant's queue, or refuses it at once with a reason and
    /// the position it would have had. `now` is monotonic ns.
    pub fn enqueue_at(&self, request: &Request, now: u64) -> Result<Enqueued, Error> {
        self.core.check_request(request)?;
        if !self.is_enabled() {
            return Ok(self.core.refuse_on_arrival(Reason::Disabled, 0));
        }
        if !request.dimension.is_queueable() {
            return Ok(self.core.refuse_on_arrival(Reason::NotQueueable, 0));
        }
        let Some(key) = request.tenant else {
            return Ok(self.core.refuse_on_arrival(Reason::NoTenant, 0));
        };
        self.core.enqueue(key, request, now)
    }

    /// `report_downstream_at` with the monotonic clock.
    pub fn report_downstream(&self, downstream: u32, ok: bool) -> Result<(), Error> {
        self.report_downstream_at(downstream, ok, crate::clock::now_ns())
    }

    /// Reports whether a call to `downstream` (a bulkhead pool, as in `Request::downstream`)
    /// succeeded, at `now`: load shedding judges each pool's error rate from these reports (a
    /// companion of `complete`: call it when the downstream answered, e.g. `ok` for any status
    /// under 500). Lock-free; a no-op while load shedding is off.
    /// `Error::InvalidArgument` when pools are configured and `downstream` names none.
    pub fn report_downstream_at(&self, downstream: u32, ok: bool, now: u64) -> Result<(), Error> {
        let Some(pools) = &self.core.hooks().bulkheads else {
            return Ok(());
        };
        pools.check_downstream(downstream)?;
        let woken = pools.report(downstream, ok, now);
        if !woken.is_empty() {
            self.core.place_unblocked(woken, now);
        }
        Ok(())
    }

    /// The in-flight limit in force for pool `downstream`: its configured bound, unless load
    /// shedding cut it. `None` with no such pool.
    pub fn downstream_limit(&self, downstream: u32) -> Option<u64> {
        self.core.hooks().bulkheads.as_ref()?.limit(downstream)
    }

    /// `next_grant_at` with the monotonic clock.
    pub fn next_grant(&self) -> NextGrant {
        self.next_grant_at(crate::clock::now_ns())
    }

    /// Takes an in-flight permit and releases the next request by weighted fair order among the
    /// tenants whose head is ready. Returns `Expired` for a queued request whose budget ran out
    /// (answer it; it was never granted). Call it until `Empty` or `AtCapacity` after every
    /// enqueue and complete, and when `next_wakeup_ns` passes.
    pub fn next_grant_at(&self, now: u64) -> NextGrant {
        self.core.next_grant(now)
    }

    /// `complete_at` with the monotonic clock.
    pub fn complete(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        actual_cost: Option<u32>,
    ) -> Result<Completion, Error> {
        self.complete_at(ticket, outcome, actual_cost, crate::clock::now_ns())
    }

    /// Ends a grant: gives its permit back, and either ends the ticket (admitted) or puts it back
    /// in its tenant's queue (still refused) if the Retry-After fits its remaining budget.
    /// `actual_cost`, when given, corrects the tenant's charge.
    pub fn complete_at(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        actual_cost: Option<u32>,
        now: u64,
    ) -> Result<Completion, Error> {
        self.core.complete(ticket, outcome, actual_cost, now)
    }

    /// `cancel_at` with the monotonic clock.
    pub fn cancel(&self, ticket: Ticket) -> Result<(), Error> {
        self.cancel_at(ticket, crate::clock::now_ns())
    }

    /// Ends a queued or granted ticket (the client went away). A granted ticket gives its
    /// permit back. Counted as `cancelled`.
    pub fn cancel_at(&self, ticket: Ticket, now: u64) -> Result<(), Error> {
        self.core
            .end_by_caller(ticket, Reason::Cancelled, true, now)
            .map(|_| ())
    }

    /// `withdraw_at` with the monotonic clock.
    pub fn withdraw(&self, ticket: Ticket) -> Result<(), Error> {
        self.withdraw_at(ticket, crate::clock::now_ns())
    }

    /// Cancels a ticket only while it is queued, counted as `cancelled`. A granted ticket answers
    /// `Error::TicketState` and stays granted: for a caller whose grants are taken by other
    /// threads, a grant already handed out is theirs to end (cancel would end it under them).
    pub fn withdraw_at(&self, ticket: Ticket, now: u64) -> Result<(), Error> {
        self.core
            .end_by_caller(ticket, Reason::Cancelled, false, now)
            .map(|_| ())
    }

    /// `expire_at` with the monotonic clock.
    pub fn expire(&self, ticket: Ticket) -> Result<Refusal, Error> {
        self.expire_at(ticket, crate::clock::now_ns())
    }

    /// Ends a queued ticket whose budget the caller's own timer says has run out, counted as
    /// `deadline_exceeded` (the engine finds expired heads only when it reaches them, and not at
    /// all while `max_in_flight` grants are out). A granted ticket is not the queue's to expire:
    /// `Error::TicketState`.
    pub fn expire_at(&self, ticket: Ticket, now: u64) -> Result<Refusal, Error> {
        self.core
            .end_by_caller(ticket, Reason::DeadlineExceeded, false, now)
    }

    /// When a parked tenant may next become ready (monotonic ns), so a caller can set a timer and
    /// call `next_grant` then. `None` when nothing is parked.
    pub fn next_wakeup_ns(&self) -> Option<u64> {
        self.core.next_wakeup_ns()
    }

    // ---------------------------------------------------------------- weights

    /// Sets the weight of the tenant with raw identifier `raw`, at run time.
    pub fn set_weight(&self, raw: &str, weight: u32) -> Result<(), Error> {
        let key = TenantKey::from_raw(raw.as_bytes());
        self.set_weight_key(key, weight)?;
        self.remember_name(key, raw.as_bytes(), false);
        Ok(())
    }

    /// Sets the weight of a tenant by key. A live tenant takes it at its next turn.
    pub fn set_weight_key(&self, key: TenantKey, weight: u32) -> Result<(), Error> {
        self.core.set_weight_key(key, weight)
    }

    /// Replaces the whole weight table (raw id, weight) and the default weight, at run time.
    pub fn replace_weights<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, u32)>,
        default_weight: u32,
    ) -> Result<(), Error> {
        let named: Vec<(&str, u32)> = entries.into_iter().collect();
        let keys: Vec<(u64, u32)> = named
            .iter()
            .map(|&(raw, w)| (TenantKey::from_raw(raw.as_bytes()).get(), w))
            .collect();
        self.replace_weight_keys(&keys, default_weight)?;
        // The names follow the new table: the old one's go.
        for (i, &(raw, _)) in named.iter().enumerate() {
            self.remember_name(TenantKey::from_hash(keys[i].0), raw.as_bytes(), i == 0);
        }
        Ok(())
    }

    /// `replace_weights` with keys already hashed.
    pub fn replace_weight_keys(
        &self,
        entries: &[(u64, u32)],
        default_weight: u32,
    ) -> Result<(), Error> {
        self.core.replace_weight_keys(entries, default_weight)
    }

    /// The weight a tenant gets now: its live slot's, else the table's.
    pub fn weight_of(&self, key: TenantKey) -> u32 {
        self.core.weight_of(key)
    }

    /// The weight of tier `name` (case-insensitive), if the config names it.
    pub fn tier_weight(&self, name: &str) -> Option<u32> {
        self.config.policy.tier_weight(name)
    }

    /// Puts the tenant with raw identifier `raw` in tier `tier`: its weight becomes the tier's.
    pub fn set_tier(&self, raw: &str, tier: &str) -> Result<(), Error> {
        let key = TenantKey::from_raw(raw.as_bytes());
        self.set_tier_key(key, tier)?;
        self.remember_name(key, raw.as_bytes(), false);
        Ok(())
    }

    /// `set_tier` by key.
    pub fn set_tier_key(&self, key: TenantKey, tier: &str) -> Result<(), Error> {
        let weight = self
            .tier_weight(tier)
            .ok_or(Error::InvalidArgument("unknown tier"))?;
        self.set_weight_key(key, weight)
    }

    /// `tick_at` with the monotonic clock.
    pub fn tick(&self) -> TickReport {
        self.tick_at(crate::clock::now_ns())
    }

    /// Runs the slow policies on the caller's thread: starts wait boosts that are due and, once
    /// per feedback period, nudges weights. Call it every second or so; it does nothing when the
    /// boost and the controller are off. O(max_tenants) when they are on; never on the hot path;
    /// a tick that finds another tick running returns at once.
    pub fn tick_at(&self, now: u64) -> TickReport {
        let features = self.core.hooks();
        features
            .policy
            .tick(&self.core, features.indicators.as_ref(), now)
    }

    // ---------------------------------------------------------------- fleet mode

    /// Fleet mode: schedules a live tenant at an *effective weight* `w' = w × factor / 1024`,
    /// `factor` in 20..=1024 (0.02 to 1). A replica whose tenant is also served elsewhere in a
    /// fleet lowers its factor so the fleet as a whole serves it its share. Takes effect at the
    /// tenant's next turn; the slot keeps it until it is reused by another tenant (a new tenant
    /// starts at 1024). Returns whether the tenant holds a slot. Never blocks a grant. The first
    /// call turns the light-tenant lane off for good (`Config::light_lane`): its grants skip the
    /// rotation that effective weights steer.
    pub fn set_fleet_factor(&self, key: TenantKey, factor: u32) -> Result<bool, Error> {
        self.core.set_fleet_factor(key, factor)
    }

    /// Fleet mode: appends every tenant holding a slot to `out` (off the hot path: it scans the
    /// table). `served_cost` only grows while the tenant keeps its slot; a tenant that lost its
    /// slot and came back starts again from 0, which a sync loop must treat as a reset.
    pub fn fleet_tenants(&self, out: &mut Vec<FleetTenant>) {
        self.core.fleet_tenants(out)
    }

    /// Grants and cost units granted to a tenant since it took its slot, if it holds one.
    pub fn tenant_granted(&self, key: TenantKey) -> Option<(u64, u64)> {
        self.core
            .with_tenant(key, |view| (view.granted, view.granted_cost))
    }

    // ---------------------------------------------------------------- reading

    /// A snapshot of gauges and counters. Reads every tenant slot (O(`max_tenants`)): call it
    /// for metrics, not per request.
    pub fn stats(&self) -> Stats {
        self.core.stats()
    }

    /// The three gauges alone, in O(1): cheap enough to read after every change.
    pub fn load(&self) -> Load {
        let s = self.core.load();
        Load {
            queued: s.queued,
            in_flight: s.in_flight,
            tenants: s.tenants,
        }
    }

    /// With seats on (`Config::seats`), the permits (cost units) the grants out hold now, at
    /// most `max_in_flight`; `None` when seats are off (then each grant holds one).
    pub fn seats_in_flight(&self) -> Option<u64> {
        self.core.seats_in_flight()
    }

    /// One tenant's indicators, if it holds a slot (and the indicators are on). Reads the
    /// monotonic clock.
    pub fn tenant_indicators(&self, key: TenantKey) -> Option<TenantIndicators> {
        self.tenant_indicators_at(key, crate::clock::now_ns())
    }

    /// One tenant's indicators at `now` (monotonic ns), if it holds a slot. Lock-free: pins the
    /// slot (so it cannot be reused meanwhile) and reads its atomics.
    pub fn tenant_indicators_at(&self, key: TenantKey, now: u64) -> Option<TenantIndicators> {
        self.indicators()?.tenant_at(&self.core, key, now)
    }

    /// The top `indicator_top_k` tenants by requests and the aggregate over all tenants, at the
    /// monotonic clock's now. Empty when the indicators are off.
    pub fn fairness_report(&self) -> FairnessReport {
        self.fairness_report_at(crate::clock::now_ns())
    }

    /// `fairness_report` at `now`. Scans the tenant table once (O(max_tenants), off the hot
    /// path, no lock).
    pub fn fairness_report_at(&self, now: u64) -> FairnessReport {
        let k = self.config.indicator_top_k as usize;
        self.indicators()
            .map(|i| i.report_at(&self.core, k, now))
            .unwrap_or_default()
    }

    /// Tests and loom models: `(weight, ready tenants, SWRR current weight)` of every weight
    /// class in use. Allocates; not for the hot path.
    #[doc(hidden)]
    pub fn debug_classes(&self) -> Vec<(u32, i64, i64)> {
        self.core.debug_classes()
    }

    /// Debug builds: tenant slots touched so far (the scale test's probe). 0 in release builds.
    #[doc(hidden)]
    pub fn debug_slot_touches(&self) -> u64 {
        self.core.debug_slot_touches()
    }

    // ---------------------------------------------------------------- for status dumps

    /// The core, for the status dump's scan.
    pub(crate) fn core(&self) -> &Core<Features> {
        &self.core
    }

    /// Records `raw` as `key`'s name for status dumps (first clearing them all, with `reset`);
    /// nothing once `status::MAX_NAMES` are kept. Off the hot path: a weight setter's.
    pub(crate) fn remember_name(&self, key: TenantKey, raw: &[u8], reset: bool) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if reset {
            names.clear();
        }
        if names.len() < crate::status::MAX_NAMES || names.contains_key(&key.get()) {
            names.insert(key.get(), String::from_utf8_lossy(raw).into());
        }
    }

    /// The name `key` was given a weight or tier under, if the engine was told.
    pub(crate) fn name_of(&self, key: TenantKey) -> Option<String> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.get(&key.get()).map(|n| n.to_string())
    }

    // ---------------------------------------------------------------- for metrics

    fn indicators(&self) -> Option<&Indicators> {
        self.core.hooks().indicators.as_ref()
    }

    /// The engine-wide wait histogram (bucket counts, sum of waits in ns); `None` with the
    /// indicators off.
    pub(crate) fn wait_histogram(&self) -> Option<([u64; BUCKETS], u64)> {
        self.indicators().map(Indicators::wait_snapshot)
    }

    /// Tenants holding a wait boost now.
    pub(crate) fn boosted_tenants(&self) -> u64 {
        self.core.hooks().policy.boosted()
    }

    /// Grants the starvation guard made out of SWRR order.
    pub(crate) fn guard_grants(&self) -> u64 {
        self.core.hooks().policy.guard_grants()
    }

    /// Per bulkhead pool: its load-shedding gauges and counters. Empty with bulkheads off.
    pub(crate) fn downstream_shedding(&self) -> Vec<crate::shedding::ShedStats> {
        self.core
            .hooks()
            .bulkheads
            .as_ref()
            .map_or_else(Vec::new, Bulkheads::shedding_stats)
    }

    /// Per bulkhead pool: (in flight, tenants blocked, blocks so far). Empty with bulkheads off.
    pub(crate) fn downstream_stats(&self) -> Vec<(u64, u64, u64)> {
        self.core
            .hooks()
            .bulkheads
            .as_ref()
            .map_or_else(Vec::new, Bulkheads::stats)
    }
}
