//! Fairness as numbers: per-tenant wait p95, refusal rate, `fair_share_ratio` and
//! `starvation_window`, kept in a side table indexed by tenant slot and read without locks. A
//! feature of the core's seam (`core/hooks.rs`); `Config::indicators` turns it off.
//!
//! # Definitions
//! All per-tenant indicators are cumulative since the tenant took its slot (a slot is reused by
//! another tenant only after `tenant_idle_ms` idle, and its indicators start again from zero).
//!
//! - **Ready.** A tenant is *ready* while it is in its weight class's ready set: its staged head
//!   can be granted now (Retry-After passed, and, with bulkheads, its downstream pool has room).
//!   A tenant parked in the timing wheel, blocked on its pool, or idle is not ready.
//! - **Wait.** The time from a request's first enqueue to its leaving the queue, by a grant or by
//!   deadline expiry (`deadline_exceeded`). A requeued request is observed again when it leaves
//!   again, with its wait counted from its first enqueue (waiting counts against its budget). `wait_p95` is the 0.95 quantile of
//!   the tenant's fixed-bucket histogram (1 ms … 60 s), interpolated inside its bucket like
//!   Prometheus' `histogram_quantile`.
//! - **Refusal rate.** `refused / requests`, where `requests` counts the tenant's `enqueue` calls
//!   that reached its slot, and `refused` counts those refused on arrival (`queue_full`,
//!   `tenant_queue_full`, `wait_exceeds_budget`) plus queued requests that later ended refused
//!   (`deadline_exceeded`, a requeue that no longer fits). Cancellations are not refusals. Each
//!   request is refused at most once, so the rate is in `[0, 1]`. (`tenant_table_full`,
//!   `no_tenant`, `not_queueable` and `disabled` refusals never reach a slot; they are in the
//!   engine-wide `refused_total` only.)
//! - **fair_share_ratio.** Actual over expected cost units, by weight, among ready tenants. Cost
//!   units are the ones the scheduler charged: a `complete` that corrects a request's cost
//!   corrects both the tenant's granted cost and the service clock.
//!   Every grant of cost `c`, made while the ready tenants' weights sum to `W` (the SWRR total of
//!   that pick), *expects* `c · wᵢ / W` units for each ready tenant `i`. The engine keeps a
//!   global service clock `S = Σ c / W` (fixed point, 2⁻⁴⁰), and a tenant accrues
//!   `expectedᵢ += wᵢ · ΔS` over each stretch it is ready, folded in by its turn holder when it
//!   is granted and when it stops being ready. The ratio is `granted_cost / expected`, defined
//!   once `expected ≥ 1` unit. With unit costs it is actual over expected grants. `wᵢ` is the
//!   tenant's configured weight (tier or `set_weight`), not a feedback-nudged or boosted one,
//!   so the ratio measures service against the policy's intent.
//! - **starvation_window.** A window opens when the tenant becomes ready, and again at each of
//!   its grants while it stays ready; it closes at its next grant or when it stops being ready.
//!   `current` is the age of the open window (0 when not ready); `longest` is the longest window
//!   so far, the open one included. So the window grows only while the tenant is ready and
//!   unserved. Readiness is noticed when the scheduler acts (a `next_grant`, an enqueue, a
//!   completion), so a wheel wake-up adds at most one call's delay.
//!
//! # Cost on the hot path
//! A grant adds one `fetch_add` to the service clock, `Relaxed` stores to the tenant's side-table
//! entry, and one bucket `fetch_add` in its wait histogram, which also feeds the engine-wide one
//! (`histogram.rs`); an enqueue adds one `fetch_add` to the tenant's request count. Nothing
//! allocates.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::core::{CoreAccess, GrantEvent, SlotId, TenantView};
use crate::histogram::{quantile_ns, TenantWaits, BUCKETS};
use crate::identity::TenantKey;
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Ordering};
use crate::table::{Table, Zeroed};

/// `ready_since` of a tenant that is not ready.
const NOT_READY: u64 = u64::MAX;
/// Fixed-point shift of the service clock: `S` counts cost units per weight unit × 2⁴⁰.
const SERVICE_SHIFT: u32 = 40;
/// Fixed-point shift of `expected`: cost units × 2¹⁶.
const EXPECTED_SHIFT: u32 = 16;
/// Shards of the wait sum recorded by callers that do not hold the tenant's turn.
const WAIT_SHARDS: usize = 8;
/// The quantile the wait indicator reports.
const WAIT_QUANTILE: f64 = 0.95;

/// One tenant's fairness state, in the side table. Fields marked *holder* are written only by
/// the thread holding the tenant's turn (see `core/mod.rs`), so plain `Relaxed` loads and stores
/// do; readers of indicators accept a snapshot that may be one event stale. `repr(C)`: the fields
/// a grant writes share one line, ahead of the wait histogram.
#[derive(Default)]
#[repr(C)]
pub(crate) struct TenantFairness {
    /// Holder: when the open starvation window began, or `NOT_READY`, stored inverted so that a
    /// new slot's zeros read as `NOT_READY` (the table is allocated zeroed: `Table::zeroed`).
    /// Read and written through `since` and `set_since`.
    ready_since: AtomicU64,
    /// Holder: the service clock when `expected` was last folded (valid while ready).
    service_mark: AtomicU64,
    /// Holder: expected cost units × 2¹⁶ accrued while ready.
    expected: AtomicU64,
    /// Holder: the longest closed starvation window (ns).
    longest_starved: AtomicU64,
    /// `enqueue` calls that reached this slot.
    requests: AtomicU64,
    /// Of those, the ones refused on arrival (counted on the rare refusal, so a queued request
    /// costs one RMW here, not two).
    arrival_refusals: AtomicU64,
    /// Queued requests that later ended refused (`deadline_exceeded`, requeue refused).
    refused_after_wait: AtomicU64,
    /// Holder, never reset: the waits (ns) it recorded, all tenants of the slot; part of the
    /// engine's `wait_sum_seconds`.
    wait_sum_total: AtomicU64,
    /// The weight class (+1) holding this tenant's wait boost unit; 0 when not boosted
    /// (`policy.rs` owns it; here so a grant touches one line for both).
    pub(crate) boost: AtomicU32,
    /// Waits of this tenant's requests as they left the queue.
    waits: TenantWaits,
}

// SAFETY: atomics (natively each has its integer's in-memory representation; under loom
// `Table::zeroed` builds each element instead) and the histogram's arrays of them; the default is
// all zeros, `ready_since` included (it is stored inverted).
#[allow(unsafe_code)]
unsafe impl Zeroed for TenantFairness {}

impl TenantFairness {
    /// `ready_since` (holder-owned: Relaxed).
    fn since(&self) -> u64 {
        !self.ready_since.load(Ordering::Relaxed)
    }

    fn set_since(&self, since: u64) {
        self.ready_since.store(!since, Ordering::Relaxed);
    }

    /// Starts a new tenant's indicators. Called by the claimer, which owns the slot exclusively.
    pub(crate) fn reset(&self) {
        // Relaxed throughout: the claimer's Release of `counts` publishes these to later pins.
        self.set_since(NOT_READY);
        self.service_mark.store(0, Ordering::Relaxed);
        self.expected.store(0, Ordering::Relaxed);
        self.longest_starved.store(0, Ordering::Relaxed);
        self.requests.store(0, Ordering::Relaxed);
        self.arrival_refusals.store(0, Ordering::Relaxed);
        self.refused_after_wait.store(0, Ordering::Relaxed);
        self.boost.store(0, Ordering::Relaxed);
        self.waits.reset();
    }

    /// An `enqueue` reached the slot.
    #[inline]
    pub(crate) fn on_request(&self) {
        // Relaxed: statistics.
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// That `enqueue` was refused after it reached the slot.
    #[inline]
    pub(crate) fn on_refused_on_arrival(&self) {
        // Relaxed: statistics.
        self.arrival_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// A queued request ended refused (after waiting).
    #[inline]
    pub(crate) fn on_refused_after_wait(&self) {
        // Relaxed: statistics.
        self.refused_after_wait.fetch_add(1, Ordering::Relaxed);
    }

    /// A request left the queue after waiting `waited_ns`.
    #[inline]
    pub(crate) fn on_wait(&self, waited_ns: u64) {
        self.waits.record(waited_ns);
    }

    /// Holder: folds the expected share accrued since the last fold.
    fn fold(&self, service: u64, weight: u64) {
        // Relaxed loads and stores, no RMW: holder-owned fields (see the struct docs).
        let mark = self.service_mark.load(Ordering::Relaxed);
        self.service_mark.store(service, Ordering::Relaxed);
        let accrued = accrued(service.wrapping_sub(mark), weight);
        let expected = self.expected.load(Ordering::Relaxed);
        self.expected
            .store(expected.wrapping_add(accrued), Ordering::Relaxed);
    }

    /// Holder: closes the open starvation window at `now`.
    fn close_window(&self, now: u64, since: u64) {
        let length = now.saturating_sub(since);
        // Relaxed: holder-owned.
        if length > self.longest_starved.load(Ordering::Relaxed) {
            self.longest_starved.store(length, Ordering::Relaxed);
        }
    }

    /// Holder: the tenant joined its class's ready set.
    pub(crate) fn became_ready(&self, now: u64, service: u64) {
        // Relaxed: holder-owned.
        if self.since() == NOT_READY {
            self.service_mark.store(service, Ordering::Relaxed);
            self.set_since(now);
        }
    }

    /// Holder: the tenant left its class's ready set (parked, blocked, idle).
    pub(crate) fn left_ready(&self, now: u64, service: u64, weight: u64) {
        // Relaxed: holder-owned.
        let since = self.since();
        if since != NOT_READY {
            self.fold(service, weight);
            self.close_window(now, since);
            self.set_since(NOT_READY);
        }
    }

    /// Holder: the tenant was granted at `now`; `service` already includes this grant.
    pub(crate) fn granted(&self, now: u64, service: u64, weight: u64) {
        // Relaxed: holder-owned.
        let since = self.since();
        if since == NOT_READY {
            // Not seen becoming ready (cannot happen through the engine): start from here.
            self.service_mark.store(service, Ordering::Relaxed);
        } else {
            self.fold(service, weight);
            self.close_window(now, since);
        }
        // A new window opens: it stays open if the tenant stays ready.
        self.set_since(now);
    }

    /// The open starvation window's start, if the tenant is ready.
    pub(crate) fn ready_since(&self) -> Option<u64> {
        // Relaxed: a snapshot for readers and the policy tick.
        let since = self.since();
        (since != NOT_READY).then_some(since)
    }
}

/// `weight · Δservice`, from 2⁻⁴⁰ per weight unit to 2⁻¹⁶ cost units. `weight` in the units of
/// the SWRR gains (weight × factor, `FACTOR_ONE` = full weight).
fn accrued(delta: u64, weight: u64) -> u64 {
    let units = (u128::from(delta) * u128::from(weight)) >> (SERVICE_SHIFT - EXPECTED_SHIFT);
    u64::try_from(units).unwrap_or(u64::MAX)
}

/// The indicators feature: a side table of per-tenant state, the service clock, and the wait
/// sums recorded by callers that do not hold a tenant's turn.
pub(crate) struct Indicators {
    tenants: Table<TenantFairness>,
    /// `S`: Σ over grants of `cost / W_ready`, fixed point 2⁻⁴⁰. Wraps; only differences are used.
    service: CachePadded<AtomicU64>,
    /// Wait sums of `expire`/`cancel` callers (not the turn holder), sharded.
    wait_sums: Box<[CachePadded<AtomicU64>]>,
}

impl Indicators {
    /// Indicators for a table of `slots` tenant slots.
    pub(crate) fn new(slots: usize) -> Indicators {
        Indicators {
            tenants: Table::zeroed(slots),
            service: CachePadded::new(AtomicU64::new(0)),
            wait_sums: (0..WAIT_SHARDS).map(|_| CachePadded::default()).collect(),
        }
    }

    /// Slot `t`'s entry.
    pub(crate) fn tenant(&self, t: SlotId) -> &TenantFairness {
        &self.tenants[t as usize]
    }

    /// The service clock now.
    fn service_now(&self) -> u64 {
        // Relaxed: a statistic; the turn holder orders its own fold.
        self.service.load(Ordering::Relaxed)
    }

    /// Advances the service clock by `cost` units granted while the ready weight was `total`.
    fn service_advance(&self, cost: i64, total: i64) -> u64 {
        let total = u64::try_from(total).unwrap_or(0).max(1);
        // Two's complement: a negative correction steps the clock back.
        let step = ((i128::from(cost) << SERVICE_SHIFT) / i128::from(total)) as u64;
        // Relaxed: a counter; differences of it are all that is used.
        self.service
            .fetch_add(step, Ordering::Relaxed)
            .wrapping_add(step)
    }

    /// A request of slot `t` left the queue after `waited_ns`. `holder`: the caller holds the
    /// tenant's turn and owns the slot's wait sum; else `spread` picks a shard.
    fn record_wait(&self, t: SlotId, waited_ns: u64, holder: bool, spread: u64) {
        let fair = self.tenant(t);
        fair.on_wait(waited_ns);
        if holder {
            // Relaxed load + store: holder-owned.
            let sum = fair.wait_sum_total.load(Ordering::Relaxed);
            fair.wait_sum_total
                .store(sum.wrapping_add(waited_ns), Ordering::Relaxed);
        } else {
            // Relaxed: statistics.
            self.wait_sums[(spread as usize) % WAIT_SHARDS].fetch_add(waited_ns, Ordering::Relaxed);
        }
    }

    pub(crate) fn claimed(&self, t: SlotId) {
        self.tenant(t).reset();
    }

    pub(crate) fn request(&self, t: SlotId) {
        self.tenant(t).on_request();
    }

    pub(crate) fn refused_on_arrival(&self, t: SlotId) {
        self.tenant(t).on_refused_on_arrival();
    }

    pub(crate) fn refused_after_wait(
        &self,
        t: SlotId,
        waited_ns: u64,
        expired: bool,
        holder: bool,
        spread: u64,
    ) {
        self.tenant(t).on_refused_after_wait();
        if expired {
            self.record_wait(t, waited_ns, holder, spread);
        }
    }

    pub(crate) fn became_ready(&self, t: SlotId, now: u64) {
        self.tenant(t).became_ready(now, self.service_now());
    }

    pub(crate) fn left_ready(&self, t: SlotId, weight: u64, now: u64) {
        self.tenant(t).left_ready(now, self.service_now(), weight);
    }

    pub(crate) fn granted(&self, g: &GrantEvent) {
        let service = self.service_advance(i64::from(g.cost), g.total);
        self.tenant(g.slot).granted(g.now, service, g.weight);
        self.record_wait(g.slot, g.waited_ns, true, 0);
    }

    /// A cost correction moves the service clock like a grant of `delta` units would have.
    pub(crate) fn cost_corrected(&self, delta: i64, total: i64) {
        self.service_advance(delta, total);
    }

    pub(crate) fn prefetch(&self, t: SlotId) {
        if let Some(fair) = self.tenants.get(t as usize) {
            crate::sync::prefetch(fair, 64);
        }
    }

    /// The engine-wide `wait_seconds` histogram: per-bucket counts and the sum of waits (ns).
    /// O(tenant slots), for scrapes, not the hot path.
    pub(crate) fn wait_snapshot(&self) -> ([u64; BUCKETS], u64) {
        let mut counts = [0u64; BUCKETS];
        let mut sum_ns = 0u64;
        for fair in self.tenants.as_slice() {
            fair.waits.add_lifetime_into(&mut counts);
            // Relaxed: a snapshot of statistics.
            sum_ns = sum_ns.wrapping_add(fair.wait_sum_total.load(Ordering::Relaxed));
        }
        for shard in self.wait_sums.iter() {
            sum_ns = sum_ns.wrapping_add(shard.load(Ordering::Relaxed));
        }
        (counts, sum_ns)
    }
}

// ------------------------------------------------------------------ reading indicators

/// One tenant's fairness indicators, cumulative since it took its slot. See the module
/// docs of `indicators.rs` (and `docs/operating.md`) for the exact definitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TenantIndicators {
    /// The tenant.
    pub tenant: TenantKey,
    /// Its configured weight (tier, `set_weight`, or the default).
    pub weight: u32,
    /// The weight the scheduler uses now: the configured one unless the feedback controller
    /// nudged it (a wait boost is not included; see `boosted`).
    pub effective_weight: u32,
    /// Holds a temporary +1 wait boost now.
    pub boosted: bool,
    /// Ready now (its head could be granted).
    pub ready: bool,
    /// `enqueue` calls that reached its slot.
    pub requests: u64,
    /// Refused on arrival or after waiting.
    pub refused: u64,
    /// `refused / requests`; `None` before any request.
    pub refusal_rate: Option<f64>,
    /// Grants made.
    pub granted: u64,
    /// Cost units granted.
    pub granted_cost: u64,
    /// Cost units expected by weight while ready.
    pub expected_cost: f64,
    /// `granted_cost / expected_cost`; `None` until one unit is expected.
    pub fair_share_ratio: Option<f64>,
    /// Waits observed (requests that left the queue).
    pub waits: u64,
    /// 0.95 quantile of the waits, in ns; `None` before any wait.
    pub wait_p95_ns: Option<u64>,
    /// Age of the open starvation window, in ns (0 when not ready).
    pub starvation_current_ns: u64,
    /// Longest starvation window so far, the open one included, in ns.
    pub starvation_longest_ns: u64,
}

/// The smallest and largest value of an indicator over the tenants that have it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinMax {
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl MinMax {
    fn add(slot: &mut Option<MinMax>, value: f64) {
        let entry = slot.get_or_insert(MinMax {
            min: value,
            max: value,
        });
        entry.min = entry.min.min(value);
        entry.max = entry.max.max(value);
    }
}

/// Indicators over every tenant that holds a slot. `None` where no tenant has the indicator.
/// The usual alerts read straight off it: `fair_share_ratio.min < 0.7`,
/// `starvation_current_seconds.max > 30`, `refusal_rate.max - refusal_rate.min > 0.15`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FairnessAggregate {
    /// Tenants holding a slot (active or idle, not yet reused).
    pub tenants: u64,
    /// Over tenants with at least one expected cost unit.
    pub fair_share_ratio: Option<MinMax>,
    /// Wait p95 in seconds, over tenants with at least one wait.
    pub wait_p95_seconds: Option<MinMax>,
    /// Over tenants with at least one request.
    pub refusal_rate: Option<MinMax>,
    /// Open starvation window in seconds, over all tenants (0 when not ready).
    pub starvation_current_seconds: Option<MinMax>,
    /// Longest starvation window in seconds, over all tenants.
    pub starvation_longest_seconds: Option<MinMax>,
}

/// The per-tenant indicators of the top K tenants by requests, plus the aggregate over all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FairnessReport {
    /// At most K tenants, most requests first.
    pub top: Vec<TenantIndicators>,
    /// Over every tenant holding a slot.
    pub aggregate: FairnessAggregate,
}

impl Indicators {
    /// One tenant's indicators at `now` (monotonic ns), if it holds a slot. Lock-free: pins the
    /// slot (so it cannot be reused meanwhile) and reads its atomics.
    pub(crate) fn tenant_at(
        &self,
        core: &impl CoreAccess,
        key: TenantKey,
        now: u64,
    ) -> Option<TenantIndicators> {
        core.with_tenant(key, |view| self.read(&view, now))
    }

    /// The top `k` tenants by requests and the aggregate over all tenants, at `now`. Scans the
    /// tenant table once (O(max_tenants), off the hot path, no lock): slots are read without
    /// pinning, so a slot reused during the scan may show a mixed snapshot for that one tenant.
    pub(crate) fn report_at(&self, core: &impl CoreAccess, k: usize, now: u64) -> FairnessReport {
        let mut aggregate = FairnessAggregate::default();
        // A min-heap of the K largest (requests, slot index): O(n log K), K entries of memory.
        let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::with_capacity(k + 1);
        for t in 0..core.slot_count() as SlotId {
            let Some(view) = core.tenant_view(t) else {
                continue;
            };
            let ind = self.read(&view, now);
            aggregate.tenants += 1;
            if let Some(r) = ind.fair_share_ratio {
                MinMax::add(&mut aggregate.fair_share_ratio, r);
            }
            if let Some(p) = ind.wait_p95_ns {
                MinMax::add(&mut aggregate.wait_p95_seconds, p as f64 / 1e9);
            }
            if let Some(r) = ind.refusal_rate {
                MinMax::add(&mut aggregate.refusal_rate, r);
            }
            MinMax::add(
                &mut aggregate.starvation_current_seconds,
                ind.starvation_current_ns as f64 / 1e9,
            );
            MinMax::add(
                &mut aggregate.starvation_longest_seconds,
                ind.starvation_longest_ns as f64 / 1e9,
            );
            if k > 0 {
                heap.push(Reverse((ind.requests, t)));
                if heap.len() > k {
                    heap.pop();
                }
            }
        }
        let mut picked = heap.into_vec();
        picked.sort_unstable(); // `Reverse`: most requests first
        let top = picked
            .into_iter()
            .filter_map(|Reverse((_, t))| core.tenant_view(t).map(|view| self.read(&view, now)))
            .collect();
        FairnessReport { top, aggregate }
    }

    /// The indicators of the tenant in `view` at `now`.
    pub(crate) fn read(&self, view: &TenantView, now: u64) -> TenantIndicators {
        // Relaxed everywhere: indicators are a snapshot (see the module docs).
        let fair = self.tenant(view.slot);
        let requests = fair.requests.load(Ordering::Relaxed);
        let refused = fair
            .arrival_refusals
            .load(Ordering::Relaxed)
            .saturating_add(fair.refused_after_wait.load(Ordering::Relaxed))
            .min(requests);
        let since = fair.ready_since();
        let mut expected = fair.expected.load(Ordering::Relaxed);
        if since.is_some() {
            let mark = fair.service_mark.load(Ordering::Relaxed);
            expected = expected.saturating_add(accrued(
                self.service_now().wrapping_sub(mark),
                view.effective_weight,
            ));
        }
        let expected_cost = expected as f64 / f64::from(1u32 << EXPECTED_SHIFT);
        let granted_cost = view.granted_cost;
        let counts = fair.waits.counts();
        let current = since.map_or(0, |s| now.saturating_sub(s));
        TenantIndicators {
            tenant: view.key,
            weight: view.weight,
            effective_weight: view.class_weight,
            boosted: fair.boost.load(Ordering::Relaxed) != 0,
            ready: since.is_some(),
            requests,
            refused,
            refusal_rate: (requests > 0).then(|| refused as f64 / requests as f64),
            granted: view.granted,
            granted_cost,
            expected_cost,
            fair_share_ratio: (expected_cost >= 1.0).then(|| granted_cost as f64 / expected_cost),
            waits: counts.iter().sum(),
            wait_p95_ns: quantile_ns(&counts, WAIT_QUANTILE),
            starvation_current_ns: current,
            starvation_longest_ns: fair.longest_starved.load(Ordering::Relaxed).max(current),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accrual_converts_fixed_point() {
        // One grant of cost 1 with W = 4: a weight-1 tenant expects a quarter unit.
        let delta = (1u64 << SERVICE_SHIFT) / 4;
        assert_eq!(accrued(delta, 1), 1 << (EXPECTED_SHIFT - 2));
        assert_eq!(accrued(delta, 4), 1 << EXPECTED_SHIFT);
        assert_eq!(
            accrued(u64::MAX, 10_000),
            ((u128::from(u64::MAX) * 10_000) >> 24) as u64
        );
    }

    #[test]
    fn a_new_side_table_reads_as_not_ready_and_counted_nothing() {
        let indicators = Indicators::new(5);
        for t in 0..5 {
            let f = indicators.tenant(t);
            assert_eq!(f.ready_since(), None);
            assert_eq!(f.requests.load(Ordering::Relaxed), 0);
            assert_eq!(f.boost.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn window_opens_on_ready_and_closes_on_grant_or_leave() {
        let f = TenantFairness::default();
        assert_eq!(f.ready_since(), None);
        f.became_ready(100, 0);
        assert_eq!(f.ready_since(), Some(100));
        f.became_ready(150, 0); // already ready: unchanged
        f.granted(400, 1 << SERVICE_SHIFT, 1);
        assert_eq!(f.longest_starved.load(Ordering::Relaxed), 300);
        assert_eq!(f.ready_since(), Some(400));
        f.left_ready(450, 1 << SERVICE_SHIFT, 1);
        assert_eq!(f.ready_since(), None);
        assert_eq!(f.longest_starved.load(Ordering::Relaxed), 300);
        assert_eq!(f.expected.load(Ordering::Relaxed), 1 << EXPECTED_SHIFT);
    }
}
