//! The fleet weight rule without Redis (deltas and their batches, rates, factors, failure and
//! degradation), kept apart so it can be tested and fuzzed alone.

use std::collections::{HashMap, HashSet};

use super::{DEGRADE_AFTER_FAILURES, FULL_FLEET_FACTOR, MAX_RATE, RATE_SCALE};
use crate::engine::{FleetTenant, MIN_FLEET_FACTOR};
use crate::identity::TenantKey;

/// Exponentially weighted moving average: `prev` moved toward `sample` by `alpha`.
pub fn ewma(prev: f64, sample: f64, alpha: f64) -> f64 {
    prev + alpha * (sample - prev)
}

/// The weight rule: the share of a tenant's fleet-wide service that happens here, `L/G` (any
/// unit, the same for both), clamped to 0.02..=1 and scaled to 1024. No global service (G = 0)
/// gives full weight.
pub fn fleet_factor(local: f64, global: f64) -> u32 {
    if global <= 0.0 || !global.is_finite() || !local.is_finite() {
        return FULL_FLEET_FACTOR;
    }
    let ratio = (local / global).clamp(0.02, 1.0);
    ((ratio * FULL_FLEET_FACTOR as f64) as u32).clamp(MIN_FLEET_FACTOR, FULL_FLEET_FACTOR)
}

/// Degraded mode: a factor moved halfway back to full weight (rounded up, so it reaches 1024).
pub fn relax_toward_full(factor: u32) -> u32 {
    let f = factor.min(FULL_FLEET_FACTOR);
    f + (FULL_FLEET_FACTOR - f).div_ceil(2)
}

/// A rate in cost units per second as sent to Redis (milli-units per second, bounded).
fn milli(rate: f64) -> u64 {
    if rate.is_finite() && rate > 0.0 {
        ((rate * RATE_SCALE).round() as u64).min(MAX_RATE)
    } else {
        0
    }
}

/// Local fleet state of one tenant.
#[derive(Clone, Debug, Default)]
struct TenantSync {
    /// The engine's `served_cost` at the last sync.
    last_served: u64,
    /// Served cost in no batch yet.
    pending: u64,
    /// Local service rate over the interval before the latest plan, cost units per second.
    rate: f64,
    /// Smoothed local rate (milli-units per second) at the last success.
    ewma_local: f64,
    /// Smoothed fleet rate (milli-units per second) at the last success.
    ewma_fleet: f64,
    /// Both EWMAs hold a sample (else the next one sets them).
    primed: bool,
    /// The engine's factor at the last sync (or the one we set since).
    factor: u32,
    /// Seen in the latest `plan` (tenants that lost their slot are dropped).
    seen: bool,
}

/// Served-cost deltas that Redis adds to the fleet totals at most once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeltaBatch {
    /// Its number: Redis applies it only if it is above the last number it applied for this
    /// replica. Resent unchanged, with the same number, until Redis answers.
    pub seq: u64,
    /// The epoch it was made in: its deltas go to that epoch's hash even when resent later.
    pub epoch: u64,
    /// (tenant, served cost), largest first; at most K.
    pub deltas: Vec<(TenantKey, u64)>,
}

/// What one sync sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncPlan {
    /// This attempt's number: Redis takes its rates only if it is above the last attempt it
    /// took for this replica (a late, older request never overwrites newer rates).
    pub attempt: u64,
    /// Deltas to add, if any (a new batch, or the one in doubt again).
    pub batch: Option<DeltaBatch>,
    /// Local rates to publish, milli-units per second (0: take this replica's rate out), at most
    /// K: tenants whose published rate must go to 0 first, then the fastest.
    pub rates: Vec<(TenantKey, u64)>,
    /// Other queued tenants whose fleet rates are read.
    pub reads: Vec<TenantKey>,
}

/// What Redis answered to a sync ([`parse_sync_reply`](super::parse_sync_reply)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReply {
    /// The batch's deltas were added now (false: none sent, or Redis had applied it already).
    pub batch_applied: bool,
    /// The last batch number Redis had applied for this replica before this request.
    pub last_seq: u64,
    /// The rates were taken (false: Redis had taken a later attempt's).
    pub rates_applied: bool,
    /// The last attempt number Redis had taken for this replica before this request.
    pub last_attempt: u64,
    /// The fleet rate (milli-units per second) of each tenant of `plan.rates`, then of each of
    /// `plan.reads`.
    pub fleet_rates: Vec<u64>,
}

/// The fleet rules without Redis: deltas and their batches, local rates, factors, failure and
/// degradation.
#[derive(Debug)]
pub struct FleetState {
    top_k: usize,
    smoothing: f64,
    period_ns: u64,
    stale_ns: u64,
    tenants: HashMap<u64, TenantSync>,
    /// Tenants whose rate Redis may hold as non-zero for this replica: each must be sent a 0
    /// once it stops being served here (or loses its slot).
    published: HashSet<u64>,
    /// The batch sent and not yet answered: resent unchanged until Redis answers.
    in_doubt: Option<DeltaBatch>,
    /// `in_doubt` was written to a connection at least once (else it can still be merged).
    in_doubt_sent: bool,
    /// Batches Redis answered as applied already (an earlier copy of a resent batch was).
    duplicates_skipped: u64,
    /// Next batch or attempt number; only grows.
    next_number: u64,
    /// `now` of the previous plan: rates are measured between plans.
    last_plan_ns: Option<u64>,
    /// EWMA weight for the latest plan's samples (from the time since the plan before).
    alpha: f64,
    failures: u32,
    last_success: Option<u64>,
}

impl FleetState {
    /// Empty state for K = `top_k`, EWMA weight `smoothing` per period of `period_ns`, and
    /// staleness limit `stale_ns`. Numbers start at 1 (see [`FleetState::number_from`]).
    pub fn new(top_k: usize, smoothing: f64, period_ns: u64, stale_ns: u64) -> Self {
        FleetState {
            top_k,
            smoothing,
            period_ns: period_ns.max(1),
            stale_ns,
            tenants: HashMap::new(),
            published: HashSet::new(),
            in_doubt: None,
            in_doubt_sent: false,
            duplicates_skipped: 0,
            next_number: 1,
            last_plan_ns: None,
            alpha: 1.0,
            failures: 0,
            last_success: None,
        }
    }

    /// Numbers batches and attempts from `first` on (a restarted replica of the same name must
    /// number above its previous run: [`Fleet`](super::Fleet) starts at the wall clock in µs).
    /// Never lowers.
    pub fn number_from(&mut self, first: u64) {
        self.next_number = self.next_number.max(first);
    }

    fn take_number(&mut self) -> u64 {
        let n = self.next_number;
        self.next_number = self.next_number.saturating_add(1);
        n
    }

    /// Folds an engine snapshot taken at `now` (monotonic ns) in: new served cost becomes
    /// pending and a rate sample; tenants that lost their slot are forgotten. Says what to send;
    /// a new batch is made in `epoch` unless one is still in doubt.
    pub fn plan(&mut self, snapshot: &[FleetTenant], now: u64, epoch: u64) -> SyncPlan {
        for t in self.tenants.values_mut() {
            t.seen = false;
        }
        let first = self.last_plan_ns.is_none();
        let elapsed = self.last_plan_ns.map(|t| now.saturating_sub(t));
        self.last_plan_ns = Some(now);
        // The EWMA weight for this sample: `smoothing` per period, so a longer gap weighs more.
        if let Some(e) = elapsed.filter(|&e| e > 0) {
            let periods = e as f64 / self.period_ns as f64;
            self.alpha = 1.0 - (1.0 - self.smoothing).powf(periods);
        }
        for ft in snapshot {
            let t = self
                .tenants
                .entry(ft.tenant.get())
                .or_insert_with(|| TenantSync {
                    // The first snapshot is a baseline (service before fleet mode is not counted);
                    // a tenant that takes a slot later was served only since then.
                    last_served: if first { ft.served_cost } else { 0 },
                    factor: ft.factor,
                    ..TenantSync::default()
                });
            // A counter that went backwards restarted at 0 (the tenant lost its slot).
            let delta = ft
                .served_cost
                .checked_sub(t.last_served)
                .unwrap_or(ft.served_cost);
            t.pending = t.pending.saturating_add(delta);
            t.last_served = ft.served_cost;
            t.factor = ft.factor;
            t.seen = true;
            if let Some(e) = elapsed.filter(|&e| e > 0) {
                t.rate = delta as f64 * 1e9 / e as f64;
            }
        }
        self.tenants.retain(|_, t| t.seen);

        let batch = match &self.in_doubt {
            Some(b) => Some(b.clone()),
            None => {
                let mut deltas: Vec<(TenantKey, u64)> = self
                    .tenants
                    .iter()
                    .filter(|(_, t)| t.pending > 0)
                    .map(|(&k, t)| (TenantKey::from_hash(k), t.pending))
                    .collect();
                deltas.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                deltas.truncate(self.top_k);
                if deltas.is_empty() {
                    None
                } else {
                    for (k, d) in &deltas {
                        if let Some(t) = self.tenants.get_mut(&k.get()) {
                            t.pending -= d;
                        }
                    }
                    let b = DeltaBatch {
                        seq: self.take_number(),
                        epoch,
                        deltas,
                    };
                    self.in_doubt = Some(b.clone());
                    self.in_doubt_sent = false;
                    Some(b)
                }
            }
        };

        // Rates: first the zeros Redis must learn (tenant gone or no longer served here), then
        // the fastest tenants, K in all.
        let mut retract: Vec<TenantKey> = self
            .published
            .iter()
            .filter(|k| self.tenants.get(k).is_none_or(|t| milli(t.rate) == 0))
            .map(|&k| TenantKey::from_hash(k))
            .collect();
        retract.sort_unstable();
        retract.truncate(self.top_k);
        let mut rates: Vec<(TenantKey, u64)> = retract.into_iter().map(|k| (k, 0)).collect();
        let mut live: Vec<(TenantKey, u64)> = self
            .tenants
            .iter()
            .map(|(&k, t)| (TenantKey::from_hash(k), milli(t.rate)))
            .filter(|&(_, r)| r > 0)
            .collect();
        live.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        live.truncate(self.top_k - rates.len());
        rates.extend(live);
        let mut reads: Vec<TenantKey> = snapshot
            .iter()
            .filter(|ft| ft.queued > 0 && !rates.iter().any(|(k, _)| *k == ft.tenant))
            .map(|ft| ft.tenant)
            .collect();
        reads.sort_unstable();
        SyncPlan {
            attempt: self.take_number(),
            batch,
            rates,
            reads,
        }
    }

    /// The plan's request is about to be written to a connection: from now on its batch may
    /// reach Redis even if no answer comes, so it can no longer be merged with later deltas.
    pub fn on_sent(&mut self, plan: &SyncPlan) {
        if plan.batch.is_some() && plan.batch == self.in_doubt {
            self.in_doubt_sent = true;
        }
    }

    /// A sync succeeded with `reply` (already checked to match `plan`). Returns the factors to
    /// set.
    pub fn on_success(
        &mut self,
        plan: &SyncPlan,
        reply: &SyncReply,
        now: u64,
    ) -> Vec<(TenantKey, u32)> {
        self.failures = 0;
        self.last_success = Some(now);
        // Numbers Redis holds that this replica never issued come from an earlier run under the
        // same name: number above them.
        let foreign = |n: u64, next: u64| n >= next;
        if let Some(batch) = &plan.batch {
            if reply.batch_applied || !foreign(reply.last_seq, self.next_number) {
                // Applied now, or by an earlier copy of this same batch: done.
                if !reply.batch_applied {
                    // Sent again and skipped: Redis had applied an earlier copy.
                    self.duplicates_skipped += 1;
                }
                if self.in_doubt.as_ref() == Some(batch) {
                    self.in_doubt = None;
                }
            } else {
                // Skipped for a number of an earlier run: never applied, renumber and resend.
                self.next_number = reply.last_seq.saturating_add(1);
                let seq = self.take_number();
                if let Some(b) = self.in_doubt.as_mut() {
                    b.seq = seq;
                }
                self.in_doubt_sent = false;
            }
        }
        if !reply.rates_applied {
            if foreign(reply.last_attempt, self.next_number) {
                self.next_number = reply.last_attempt.saturating_add(1);
            }
            // The fleet rates do not include ours as sent: no factor from them.
            return Vec::new();
        }
        for &(k, v) in &plan.rates {
            if v == 0 {
                self.published.remove(&k.get());
            } else {
                self.published.insert(k.get());
            }
        }
        let entries = plan
            .rates
            .iter()
            .map(|&(k, v)| (k, Some(v)))
            .chain(plan.reads.iter().map(|&k| (k, None)));
        let mut out = Vec::new();
        for ((key, sent), &fleet) in entries.zip(&reply.fleet_rates) {
            let Some(t) = self.tenants.get_mut(&key.get()) else {
                continue;
            };
            let local = sent.unwrap_or_else(|| milli(t.rate)) as f64;
            if t.primed {
                t.ewma_local = ewma(t.ewma_local, local, self.alpha);
                t.ewma_fleet = ewma(t.ewma_fleet, fleet as f64, self.alpha);
            } else {
                // No service anywhere yet is no sample: the first real one primes both.
                (t.ewma_local, t.ewma_fleet, t.primed) = (local, fleet as f64, fleet > 0);
            }
            let factor = fleet_factor(t.ewma_local, t.ewma_fleet);
            if factor != t.factor {
                t.factor = factor;
                out.push((key, factor));
            }
        }
        out
    }

    /// A sync failed: deltas stay (a batch that may have reached Redis is resent unchanged; one
    /// that never left is merged back), factors stay, unless the replica is degraded (too many
    /// failures or stale data), when each moves halfway back to full weight.
    pub fn on_failure(&mut self, plan: &SyncPlan, now: u64) -> Vec<(TenantKey, u32)> {
        self.failures = self.failures.saturating_add(1);
        // Its rates may have landed: a tenant sent non-zero must be sent a 0 when it stops.
        for &(k, v) in &plan.rates {
            if v > 0 {
                self.published.insert(k.get());
            }
        }
        if !self.in_doubt_sent {
            if let Some(b) = self.in_doubt.take() {
                for (k, d) in b.deltas {
                    // A tenant that lost its slot since keeps its deltas in a fresh entry.
                    let t = self.tenants.entry(k.get()).or_insert_with(|| TenantSync {
                        factor: FULL_FLEET_FACTOR,
                        seen: true,
                        ..TenantSync::default()
                    });
                    t.pending = t.pending.saturating_add(d);
                }
            }
        }
        if !self.degraded(now) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (&k, t) in self.tenants.iter_mut() {
            if t.factor < FULL_FLEET_FACTOR {
                t.factor = relax_toward_full(t.factor);
                out.push((TenantKey::from_hash(k), t.factor));
            }
            // The smoothed rates describe a past that no longer holds: start over after recovery.
            t.primed = false;
        }
        out
    }

    /// Too many failures in a row, or the last success is older than the staleness limit.
    pub fn degraded(&self, now: u64) -> bool {
        self.failures >= DEGRADE_AFTER_FAILURES
            || self
                .last_success
                .is_some_and(|t| now.saturating_sub(t) > self.stale_ns)
    }

    /// Failed syncs since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Tenants with local fleet state.
    pub fn tenants_tracked(&self) -> usize {
        self.tenants.len()
    }

    /// `now` of the last successful sync.
    pub fn last_success(&self) -> Option<u64> {
        self.last_success
    }

    /// Served cost of `key` not yet known to be in the fleet total (pending, or in the batch in
    /// doubt).
    pub fn pending(&self, key: TenantKey) -> Option<u64> {
        let in_doubt = self.in_doubt.as_ref().map_or(0, |b| {
            b.deltas
                .iter()
                .filter(|(k, _)| *k == key)
                .map(|(_, d)| d)
                .sum()
        });
        self.tenants
            .get(&key.get())
            .map(|t| t.pending + in_doubt)
            .or((in_doubt > 0).then_some(in_doubt))
    }

    /// This replica's rate of `key` over the interval before the latest plan, cost units per
    /// second.
    pub fn local_rate(&self, key: TenantKey) -> Option<f64> {
        self.tenants.get(&key.get()).map(|t| t.rate)
    }

    /// Batches sent again whose earlier copy Redis had applied: each was sent twice and
    /// counted once.
    pub fn duplicates_skipped(&self) -> u64 {
        self.duplicates_skipped
    }

    /// The batch sent and not yet answered, if any.
    pub fn in_doubt(&self) -> Option<&DeltaBatch> {
        self.in_doubt.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MS;

    fn ft(name: &str, served: u64, queued: u64, factor: u32) -> FleetTenant {
        FleetTenant {
            tenant: TenantKey::from_raw(name.as_bytes()),
            weight: 1,
            factor,
            served_cost: served,
            queued,
        }
    }

    fn key(name: &str) -> TenantKey {
        TenantKey::from_raw(name.as_bytes())
    }

    /// P = 100 ms, no smoothing unless asked, stale after 1 s.
    fn state(top_k: usize, smoothing: f64) -> FleetState {
        FleetState::new(top_k, smoothing, 100 * MS, 1000 * MS)
    }

    /// A reply in which everything was applied and the fleet rates are `fleet`.
    fn applied(fleet: &[u64]) -> SyncReply {
        SyncReply {
            batch_applied: true,
            last_seq: 0,
            rates_applied: true,
            last_attempt: 0,
            fleet_rates: fleet.to_vec(),
        }
    }

    #[test]
    fn factor_is_local_over_global_clamped() {
        assert_eq!(fleet_factor(10.0, 10.0), 1024);
        assert_eq!(fleet_factor(5.0, 10.0), 512);
        assert_eq!(fleet_factor(1.0, 3.0), 341);
        assert_eq!(fleet_factor(0.0, 10.0), MIN_FLEET_FACTOR);
        assert_eq!(fleet_factor(1.0, 1000.0), MIN_FLEET_FACTOR);
        // More local than global (a reset in between): never above full weight.
        assert_eq!(fleet_factor(20.0, 10.0), 1024);
        // No service anywhere: no evidence, full weight.
        assert_eq!(fleet_factor(0.0, 0.0), 1024);
    }

    #[test]
    fn ewma_moves_by_alpha() {
        assert_eq!(ewma(10.0, 20.0, 0.5), 15.0);
        assert_eq!(ewma(10.0, 20.0, 1.0), 20.0);
    }

    #[test]
    fn relaxing_halves_the_gap_and_reaches_full() {
        assert_eq!(relax_toward_full(20), 522);
        assert_eq!(relax_toward_full(522), 773);
        let mut f = 20;
        for _ in 0..11 {
            f = relax_toward_full(f);
        }
        assert_eq!(f, 1024);
        assert_eq!(relax_toward_full(1024), 1024);
    }

    #[test]
    fn plan_batches_top_k_deltas_publishes_rates_and_reads_other_queued_tenants() {
        let mut s = state(2, 1.0);
        // First snapshot is a baseline: nothing to send yet.
        let p = s.plan(&[ft("a", 100, 1, 1024), ft("b", 0, 0, 1024)], 0, 7);
        assert_eq!(p.batch, None);
        assert!(p.rates.is_empty());
        assert_eq!(p.reads, vec![key("a")]);
        s.on_success(&p, &applied(&[0]), 0);
        // 100 ms later.
        let p = s.plan(
            &[
                ft("a", 130, 1, 1024),
                ft("b", 10, 0, 1024),
                ft("c", 50, 2, 1024), // took a slot since: all of it counts
                ft("d", 0, 3, 1024),
            ],
            100 * MS,
            7,
        );
        let batch = p.batch.clone().unwrap();
        assert_eq!(batch.deltas, vec![(key("c"), 50), (key("a"), 30)]);
        assert_eq!(batch.epoch, 7);
        assert!(p.attempt > batch.seq, "numbers only grow");
        // Rates over the 100 ms, milli-units per second: c 500/s, a 300/s; b (100/s) is beyond K.
        assert_eq!(p.rates, vec![(key("c"), 500_000), (key("a"), 300_000)]);
        assert_eq!(p.reads, vec![key("d")]);
        // "b" is beyond K: its delta waits.
        assert_eq!(s.pending(key("b")), Some(10));
        assert_eq!(
            s.pending(key("c")),
            Some(50),
            "in the batch, not yet answered"
        );
        s.on_success(&p, &applied(&[500_000, 900_000, 1_000]), 101 * MS);
        assert_eq!(s.pending(key("c")), Some(0));
        assert_eq!(s.in_doubt(), None);
    }

    #[test]
    fn factor_is_local_rate_over_fleet_rate() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0]), 0);
        // 10 served here in 100 ms: 100/s. The fleet serves 400/s: a quarter here.
        let p = s.plan(&[ft("a", 10, 1, 1024)], 100 * MS, 0);
        assert_eq!(p.rates, vec![(key("a"), 100_000)]);
        assert_eq!(
            s.on_success(&p, &applied(&[400_000]), 100 * MS),
            vec![(key("a"), 256)]
        );
        // Not served here any more, still queued: a 0 is published, and L = 0 -> floor.
        let p = s.plan(&[ft("a", 10, 1, 256)], 200 * MS, 0);
        assert_eq!(p.rates, vec![(key("a"), 0)]);
        assert_eq!(
            s.on_success(&p, &applied(&[300_000]), 200 * MS),
            vec![(key("a"), MIN_FLEET_FACTOR)]
        );
        // Nothing left to take back: a plain read.
        let p = s.plan(&[ft("a", 10, 1, 20)], 300 * MS, 0);
        assert!(p.rates.is_empty());
        assert_eq!(p.reads, vec![key("a")]);
        // Nobody serves it any more: full weight.
        assert_eq!(
            s.on_success(&p, &applied(&[0]), 300 * MS),
            vec![(key("a"), 1024)]
        );
    }

    #[test]
    fn rates_are_measured_over_time_whatever_the_spacing_of_syncs() {
        // A steady 1000/s, sampled at 50, 500, 130 and 320 ms gaps, with smoothing: the rate
        // stays 1000/s, because each sample is an amount over its own elapsed time.
        let mut s = state(8, 0.5);
        let (mut served, mut now) = (0, 0);
        s.plan(&[ft("a", served, 1, 1024)], now, 0);
        for gap_ms in [50u64, 500, 130, 320, 50, 50] {
            served += gap_ms; // 1 per ms
            now += gap_ms * MS;
            let p = s.plan(&[ft("a", served, 1, 1024)], now, 0);
            assert_eq!(p.rates, vec![(key("a"), 1_000_000)], "after {gap_ms} ms");
            s.on_success(&p, &applied(&[1_000_000]), now);
        }
        assert_eq!(s.local_rate(key("a")), Some(1000.0));
    }

    #[test]
    fn local_and_fleet_rates_are_smoothed_alike_with_a_weight_that_grows_with_the_gap() {
        let mut s = state(8, 0.5);
        let p = s.plan(&[ft("a", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0]), 0);
        // The first measurement primes: 100/s here of 400/s.
        let p = s.plan(&[ft("a", 10, 1, 1024)], 100 * MS, 0);
        assert_eq!(
            s.on_success(&p, &applied(&[400_000]), 100 * MS),
            vec![(key("a"), 256)]
        );
        // One period later, the fleet serves 200/s: half way, 300/s -> 100/300.
        let p = s.plan(&[ft("a", 20, 1, 256)], 200 * MS, 0);
        assert_eq!(
            s.on_success(&p, &applied(&[200_000]), 200 * MS),
            vec![(key("a"), 341)]
        );
        // Two periods later (one sync late), 100/s everywhere: 3/4 of the way, 150/s -> 2/3.
        let p = s.plan(&[ft("a", 40, 1, 341)], 400 * MS, 0);
        assert_eq!(p.rates, vec![(key("a"), 100_000)]);
        assert_eq!(
            s.on_success(&p, &applied(&[100_000]), 400 * MS),
            vec![(key("a"), 682)]
        );
    }

    #[test]
    fn a_batch_in_doubt_is_resent_unchanged_and_later_service_merged_into_the_next() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0]), 0);
        let p1 = s.plan(&[ft("a", 10, 1, 1024)], 100 * MS, 0);
        s.on_success(&p1, &applied(&[100_000, 0]), 100 * MS);
        let p2 = s.plan(&[ft("a", 15, 1, 1024)], 200 * MS, 0);
        let sent = p2.batch.clone().unwrap();
        assert_eq!(sent.deltas, vec![(key("a"), 5)]);
        // Written to the connection, then no answer (a frozen Redis): in doubt.
        s.on_sent(&p2);
        let factor = s.tenants[&key("a").get()].factor;
        assert!(s.on_failure(&p2, 200 * MS).is_empty());
        assert_eq!(s.consecutive_failures(), 1);
        assert!(!s.degraded(200 * MS));
        assert_eq!(s.tenants[&key("a").get()].factor, factor, "factors stay");
        // The next syncs resend the same batch, number and all; new service waits, merged.
        let p3 = s.plan(&[ft("a", 20, 1, 1024)], 300 * MS, 0);
        assert_eq!(p3.batch.as_ref(), Some(&sent));
        assert!(p3.attempt > p2.attempt);
        s.on_sent(&p3);
        s.on_failure(&p3, 300 * MS);
        let p4 = s.plan(&[ft("a", 30, 1, 1024)], 400 * MS, 0);
        assert_eq!(p4.batch.as_ref(), Some(&sent));
        assert_eq!(s.pending(key("a")), Some(20), "5 in doubt + 15 pending");
        // Redis ran the first copy late and skips this one: either way the batch is done.
        s.on_sent(&p4);
        let late = SyncReply {
            batch_applied: false,
            last_seq: sent.seq,
            ..applied(&[100_000])
        };
        s.on_success(&p4, &late, 400 * MS);
        assert_eq!(s.in_doubt(), None);
        assert_eq!(s.consecutive_failures(), 0);
        // The merged rest goes in one new batch.
        let p5 = s.plan(&[ft("a", 30, 1, 1024)], 500 * MS, 0);
        let next = p5.batch.unwrap();
        assert_eq!(next.deltas, vec![(key("a"), 15)]);
        assert!(next.seq > sent.seq);
    }

    #[test]
    fn a_batch_that_never_left_is_merged_back() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0]), 0);
        // No connection (Redis down): nothing was written, so nothing can land late.
        for (i, served) in [(1u64, 5u64), (2, 10), (3, 20)] {
            let p = s.plan(&[ft("a", served, 1, 1024)], i * 100 * MS, 0);
            s.on_failure(&p, i * 100 * MS);
            assert_eq!(s.in_doubt(), None);
        }
        assert_eq!(s.pending(key("a")), Some(20));
        let p = s.plan(&[ft("a", 20, 1, 1024)], 400 * MS, 0);
        assert_eq!(p.batch.unwrap().deltas, vec![(key("a"), 20)]);
    }

    #[test]
    fn three_failures_relax_factors_halfway_each_period() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 20)], 0, 0);
        assert!(s.on_failure(&p, MS).is_empty());
        assert!(s.on_failure(&p, 2 * MS).is_empty());
        assert_eq!(s.on_failure(&p, 3 * MS), vec![(key("a"), 522)]);
        assert!(s.degraded(3 * MS));
        assert_eq!(s.on_failure(&p, 4 * MS), vec![(key("a"), 773)]);
    }

    #[test]
    fn stale_data_degrades_at_the_first_failure() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 100)], 0, 0);
        s.on_success(&p, &applied(&[5]), 0);
        assert!(!s.degraded(1000 * MS));
        assert!(s.degraded(1001 * MS));
        let p = s.plan(&[ft("a", 0, 1, 100)], 1001 * MS, 0);
        assert_eq!(s.on_failure(&p, 1001 * MS), vec![(key("a"), 562)]);
    }

    #[test]
    fn a_tenant_that_loses_its_slot_has_its_rate_taken_back() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 1024), ft("b", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0, 0]), 0);
        let p = s.plan(&[ft("a", 10, 1, 1024), ft("b", 10, 1, 1024)], 100 * MS, 0);
        assert_eq!(p.rates.len(), 2);
        s.on_success(&p, &applied(&[100_000, 100_000]), 100 * MS);
        // "b" lost its slot: its rate goes to 0 in Redis, once acknowledged.
        let p = s.plan(&[ft("a", 20, 1, 1024)], 200 * MS, 0);
        assert_eq!(p.rates, vec![(key("b"), 0), (key("a"), 100_000)]);
        // Lost on the way: sent again.
        s.on_failure(&p, 200 * MS);
        let p = s.plan(&[ft("a", 30, 1, 1024)], 300 * MS, 0);
        assert_eq!(p.rates, vec![(key("b"), 0), (key("a"), 100_000)]);
        s.on_success(&p, &applied(&[0, 100_000]), 300 * MS);
        let p = s.plan(&[ft("a", 40, 1, 1024)], 400 * MS, 0);
        assert_eq!(p.rates, vec![(key("a"), 100_000)]);
        assert_eq!(s.tenants_tracked(), 1);
    }

    #[test]
    fn numbers_an_earlier_run_left_in_redis_are_skipped_over() {
        let mut s = state(8, 1.0);
        s.number_from(1000);
        let p = s.plan(&[ft("a", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0]), 0);
        let p = s.plan(&[ft("a", 10, 1, 1024)], 100 * MS, 0);
        let batch = p.batch.clone().unwrap();
        s.on_sent(&p);
        // Redis holds higher numbers of an earlier run under this name: nothing was taken.
        let reply = SyncReply {
            batch_applied: false,
            last_seq: 5000,
            rates_applied: false,
            last_attempt: 6000,
            fleet_rates: vec![7],
        };
        assert!(s.on_success(&p, &reply, 100 * MS).is_empty());
        let p = s.plan(&[ft("a", 10, 1, 1024)], 200 * MS, 0);
        let again = p.batch.unwrap();
        assert_eq!(again.deltas, batch.deltas, "the same deltas, renumbered");
        assert!(
            again.seq > 5000 && p.attempt > 6000,
            "{again:?} {}",
            p.attempt
        );
    }

    #[test]
    fn the_engine_counter_restarting_counts_as_new_service_and_evicted_tenants_are_dropped() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 100, 1, 1024), ft("b", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0, 0]), 0);
        // "a" lost its slot and came back: 7 served since.
        let p = s.plan(&[ft("a", 7, 1, 1024), ft("b", 0, 1, 1024)], 100 * MS, 0);
        assert_eq!(p.batch.as_ref().unwrap().deltas, vec![(key("a"), 7)]);
        s.on_success(&p, &applied(&[70_000, 0]), 100 * MS);
        s.plan(&[ft("a", 7, 1, 1024)], 200 * MS, 0);
        assert_eq!(s.tenants_tracked(), 1);
        assert_eq!(s.pending(key("b")), None);
    }

    #[test]
    fn the_largest_numbers_in_a_reply_do_not_overflow_the_numbering() {
        let mut s = state(8, 1.0);
        let p = s.plan(&[ft("a", 0, 1, 1024)], 0, 0);
        s.on_success(&p, &applied(&[0]), 0);
        let p = s.plan(&[ft("a", 10, 1, 1024)], 100 * MS, 0);
        s.on_sent(&p);
        let reply = SyncReply {
            batch_applied: false,
            last_seq: u64::MAX,
            rates_applied: false,
            last_attempt: u64::MAX,
            fleet_rates: vec![u64::MAX],
        };
        assert!(s.on_success(&p, &reply, 100 * MS).is_empty());
        let p = s.plan(&[ft("a", 20, 1, 1024)], 200 * MS, 0);
        assert_eq!(p.attempt, u64::MAX);
        assert!(s.on_success(&p, &applied(&[u64::MAX]), 200 * MS).len() <= 1);
    }
}
