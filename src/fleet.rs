//! Fleet mode: fairness across gateway replicas through a shared Redis, off the hot path.
//!
//! Each replica schedules only its own traffic. A sync loop, run every period P either by the
//! caller ([`Fleet::sync`]) or by a library-owned thread ([`Fleet::start`]), makes ONE round trip
//! per period: an `EVALSHA` of [`SYNC_SCRIPT`] (loaded once with `SCRIPT LOAD`, loaded again when
//! Redis answers `NOSCRIPT`), which atomically
//!
//! - adds this replica's served-cost deltas (a numbered batch, at most K tenants) to the fleet
//!   totals, **exactly once**: Redis keeps the number of the last batch it applied per replica and
//!   skips a batch that is not newer, so a batch resent after a timeout, or a timed-out one that
//!   Redis runs late, is never counted twice;
//! - publishes this replica's served-cost *rate* per tenant (cost units per second over the time
//!   since its previous sync), and keeps per tenant the fleet's sum of the rates every live
//!   replica published;
//! - returns that fleet rate for each tenant sent and each other queued tenant here.
//!
//! The weight rule ([`FleetState`], pure, testable without Redis): the local rate L and the fleet
//! rate G are smoothed (an EWMA whose weight grows with the time since the previous sync) and a
//! tenant's fleet factor is `clamp(L/G, 0.02, 1)`, so a tenant served elsewhere is served
//! proportionally less here. Both are rates over time, not amounts per own period, so replicas
//! whose periods differ (or drift) measure the same thing: a replica that syncs 5× slower adds a
//! steady rate to the sum, not a lump every fifth period of the others.
//! [`Engine::set_fleet_factor`] applies the factor; grants never wait for this module and never
//! call Redis.
//!
//! Keys, all under the hash tag `{fairq:<fleet>}` (one Redis Cluster slot):
//! `…:served:<epoch>` (hash: fleet totals `t:<key>`, heartbeats `hb:<replica>`, last batch
//! numbers `seq:<replica>`), `…:rates` (hash: fleet rate per tenant, milli-units per second),
//! `…:rates:<replica>` (hash: that replica's published rates and its last attempt number) and
//! `…:replicas` (sorted set: each replica's liveness deadline). A replica whose deadline passed
//! (it stopped syncing) has its rates taken out of the sums by the next replica that syncs.
//!
//! Failure: on an error or timeout the unsent deltas are kept and factors stay. A batch that may
//! have reached Redis is resent unchanged (same number) until Redis answers; service in the
//! meantime is merged into the next batch. A batch that certainly did not leave (no connection)
//! is merged back. After [`DEGRADE_AFTER_FAILURES`] failures in a row, or when the last success
//! is older than [`FleetConfig::stale_ms`], each factor moves halfway back to 1024 every period:
//! the replica degrades to plain local fairness.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult, Value};

use crate::engine::{Engine, FleetTenant, MIN_FLEET_FACTOR};
use crate::identity::TenantKey;

/// A factor of 1024 is the tenant's full weight.
pub const FULL_FLEET_FACTOR: u32 = crate::limits::FACTOR_ONE;
/// Failures in a row after which factors relax back toward full weight.
pub const DEGRADE_AFTER_FAILURES: u32 = 3;
use crate::limits::MS;
/// Rates travel as integers, in thousandths of a cost unit per second.
const RATE_SCALE: f64 = 1000.0;
/// Largest rate sent (milli-units/s): Lua numbers are doubles, exact and printed as integers
/// well below this.
const MAX_RATE: u64 = 1 << 40;

/// How a replica takes part in a fleet.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Redis URL, e.g. `redis://127.0.0.1:6379/`. Redis Cluster: `redis+cluster://h1:p1,h2:p2/`,
    /// or several URLs separated by commas (`redis://h1:p1/,redis://h2:p2/`), the seed nodes.
    pub url: String,
    /// Fleet name: every replica of one fleet uses the same one (it forms the hash tag).
    pub fleet: String,
    /// This replica's name, unique in the fleet (heartbeat field, batch numbers, rates).
    pub replica: String,
    /// Sync period P in ms, 50..=500 (default 100). Socket timeouts are P/2. Replicas of one
    /// fleet may use different periods.
    pub period_ms: u64,
    /// Most tenants whose deltas one sync sends, and most whose rates it publishes (K, default
    /// 256, 1..=4096).
    pub top_k: usize,
    /// Epoch length in ms (default 5 minutes); keys expire after two epochs.
    pub epoch_ms: u64,
    /// EWMA weight of the newest local and fleet rates, in (0, 1] (default 0.7), per period P: a
    /// sync that comes later or earlier than P gives them more or less weight. Higher settles
    /// faster after traffic moves between replicas (the fleet harness: 0.6 s at 0.7, 0.9-1.1 s
    /// at 0.5) with a little more jitter in the factors.
    pub smoothing: f64,
    /// Data older than this (ms, default 1000) degrades the replica to local fairness. A replica
    /// silent for longer than this or 3 P, whichever is larger, counts as gone: its rates leave
    /// the fleet's sums.
    pub stale_ms: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            url: "redis://127.0.0.1:6379/".into(),
            fleet: "default".into(),
            replica: "replica".into(),
            period_ms: 100,
            top_k: 256,
            epoch_ms: 5 * 60 * 1000,
            smoothing: 0.7,
            stale_ms: 1000,
        }
    }
}

impl FleetConfig {
    /// Checks every bound; names the first one broken.
    pub fn validate(&self) -> Result<(), FleetError> {
        if !(50..=500).contains(&self.period_ms) {
            return Err(FleetError::Config("period_ms must be in 50..=500"));
        }
        if !(1..=4096).contains(&self.top_k) {
            return Err(FleetError::Config("top_k must be in 1..=4096"));
        }
        if !(1000..=u64::MAX / 4).contains(&self.epoch_ms) {
            return Err(FleetError::Config("epoch_ms must be at least 1000"));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(FleetError::Config("smoothing must be in (0, 1]"));
        }
        if self.stale_ms < self.period_ms || self.stale_ms > u64::MAX / 4 / MS {
            return Err(FleetError::Config("stale_ms must be at least period_ms"));
        }
        if self.fleet.is_empty() || self.replica.is_empty() {
            return Err(FleetError::Config("fleet and replica must not be empty"));
        }
        Ok(())
    }

    fn socket_timeout(&self) -> Duration {
        Duration::from_millis(self.period_ms / 2)
    }

    /// How long after its last sync a replica counts as gone (its rates leave the sums).
    fn alive_ms(&self) -> u64 {
        self.stale_ms.max(3 * self.period_ms)
    }
}

/// Why fleet mode could not be set up or a sync failed.
#[derive(Debug)]
pub enum FleetError {
    /// A configuration bound is broken; names it.
    Config(&'static str),
    /// Redis refused, timed out or answered something unexpected.
    Redis(redis::RedisError),
    /// The reply did not have the shape of the request sent.
    Reply(&'static str),
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::Config(s) => write!(f, "invalid fleet config: {s}"),
            FleetError::Redis(e) => write!(f, "redis: {e}"),
            FleetError::Reply(s) => write!(f, "unexpected redis reply: {s}"),
        }
    }
}

impl std::error::Error for FleetError {}

impl From<redis::RedisError> for FleetError {
    fn from(e: redis::RedisError) -> Self {
        FleetError::Redis(e)
    }
}

/// Where a replica's sync loop stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetStatus {
    /// `now` (monotonic ns) of the last successful sync, if any.
    pub last_sync_ns: Option<u64>,
    /// Failed syncs since the last success.
    pub consecutive_failures: u32,
    /// Factors are relaxing back to full weight (too many failures or stale data).
    pub degraded: bool,
    /// Tenants with local fleet state.
    pub tenants_tracked: usize,
    /// Sync requests sent (one `EVALSHA` round trip per sync; a second one only in a sync that
    /// found the script missing, after a Redis restart or failover).
    pub pipelines: u64,
    /// Syncs attempted.
    pub syncs: u64,
}

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

/// What Redis answered to a sync ([`parse_sync_reply`]).
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
    /// number above its previous run: [`Fleet`] starts at the wall clock in µs). Never lowers.
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

/// The Lua script of one sync (see the module doc). KEYS: the batch epoch's hash, the fleet
/// rates, this replica's rates, the replica deadlines. ARGV: replica, attempt, batch number (0:
/// no batch), counts of deltas, rates and reads, key expiry (ms), liveness (ms), then the
/// deltas (field, amount), rates (field, milli-units/s) and reads (field). A key of the wrong
/// type fails it before any write; every number read from Redis that is not one this script
/// could have written (not a number, NaN, infinite, negative, 2^53 or more) reads as 0, and a
/// total that cannot be incremented restarts from the delta, so garbage in a field never fails
/// it halfway. Replies `{applied, last seq, rates taken, last attempt, fleet rate…}`.
pub const SYNC_SCRIPT: &str = r#"
-- A number this script wrote, or 0: nil, NaN, infinities, negatives and anything from 2^53 on
-- (not exact as a Lua number) read as 0.
local function num(v)
  local n = tonumber(v)
  if n == nil or n ~= n or n < 0 or n >= 9007199254740992 then return 0 end
  return n
end
local function int(v) return string.format('%d', v) end
local replica, attempt, seq = ARGV[1], num(ARGV[2]), num(ARGV[3])
local nd, nr, nq = num(ARGV[4]), num(ARGV[5]), num(ARGV[6])
local keep, alive = ARGV[7], num(ARGV[8])
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and kind ~= (key == KEYS[4] and 'zset' or 'hash') then
    return redis.error_reply('fairq: ' .. key .. ' holds a ' .. kind)
  end
end
local time = redis.call('TIME')
local now = num(time[1]) * 1000 + math.floor(num(time[2]) / 1000)
local i = 9
local last_seq = num(redis.call('HGET', KEYS[1], 'seq:' .. replica))
local applied = 0
if seq > last_seq then
  for _ = 1, nd do
    -- A field that is not an integer (or would overflow) restarts from this delta, instead of
    -- failing the script halfway through the batch.
    local r = redis.pcall('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
    if type(r) == 'table' and r.err then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
    i = i + 2
  end
  redis.call('HSET', KEYS[1], 'seq:' .. replica, ARGV[3])
  applied = 1
else
  i = i + 2 * nd
end
redis.call('HSET', KEYS[1], 'hb:' .. replica, int(now))
redis.call('PEXPIRE', KEYS[1], keep)
local function add(field, by)
  if by ~= 0 then
    local sum = num(redis.call('HGET', KEYS[2], field)) + by
    if sum > 0 then redis.call('HSET', KEYS[2], field, int(sum))
    else redis.call('HDEL', KEYS[2], field) end
  end
end
local last_attempt = num(redis.call('HGET', KEYS[3], 'attempt'))
local taken = 0
if attempt > last_attempt then
  for _ = 1, nr do
    local field, rate = ARGV[i], num(ARGV[i + 1])
    add(field, rate - num(redis.call('HGET', KEYS[3], field)))
    if rate > 0 then redis.call('HSET', KEYS[3], field, int(rate))
    else redis.call('HDEL', KEYS[3], field) end
    i = i + 2
  end
  redis.call('HSET', KEYS[3], 'attempt', ARGV[2])
  taken = 1
else
  i = i + 2 * nr
end
redis.call('PEXPIRE', KEYS[3], keep)
redis.call('ZADD', KEYS[4], now + alive, replica)
local prefix = string.sub(KEYS[3], 1, #KEYS[3] - #replica)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 4)) do
  local key = prefix .. gone
  local kv = redis.call('HGETALL', key)
  for j = 1, #kv, 2 do
    if kv[j] ~= 'attempt' then add(kv[j], -num(kv[j + 1])) end
  end
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[4], gone)
end
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('PEXPIRE', KEYS[4], keep)
local out = {applied, last_seq, taken, last_attempt}
local first = 9 + 2 * nd
for j = 0, nr - 1 do
  out[#out + 1] = num(redis.call('HGET', KEYS[2], ARGV[first + 2 * j]))
end
for j = 0, nq - 1 do
  out[#out + 1] = num(redis.call('HGET', KEYS[2], ARGV[first + 2 * nr + j]))
end
return out
"#;

/// Reads the reply to a sync that sent `entries` = rates + reads tenants: an array of
/// `4 + entries` non-negative integers. Any other shape, type or a negative number is an error
/// (the sync then counts as failed); it never panics, whatever Redis (or a fuzzer) returns.
#[doc(hidden)]
pub fn parse_sync_reply(reply: &Value, entries: usize) -> Result<SyncReply, FleetError> {
    let Value::Array(items) = reply else {
        return Err(FleetError::Reply("the sync script did not return an array"));
    };
    if items.len() != entries.saturating_add(4) {
        return Err(FleetError::Reply(
            "the sync script returned the wrong count",
        ));
    }
    let mut numbers = Vec::with_capacity(items.len());
    for item in items {
        numbers.push(match item {
            Value::Int(n) => u64::try_from(*n)
                .map_err(|_| FleetError::Reply("the sync script returned a negative number"))?,
            _ => return Err(FleetError::Reply("the sync script returned a non-integer")),
        });
    }
    let flag = |n: u64| match n {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(FleetError::Reply(
            "the sync script returned a flag other than 0 or 1",
        )),
    };
    Ok(SyncReply {
        batch_applied: flag(numbers[0])?,
        last_seq: numbers[1],
        rates_applied: flag(numbers[2])?,
        last_attempt: numbers[3],
        fleet_rates: numbers.split_off(4),
    })
}

/// [`parse_sync_reply`] of a raw RESP reply (for fuzzing the whole read path): bytes Redis could
/// send, or any others.
#[doc(hidden)]
pub fn parse_sync_reply_resp(resp: &[u8], entries: usize) -> Result<SyncReply, FleetError> {
    let value = redis::parse_redis_value(resp)?;
    if let Value::ServerError(e) = &value {
        return Err(FleetError::Redis(e.clone().into()));
    }
    parse_sync_reply(&value, entries)
}

/// The connection fleet mode syncs over: one Redis, or a Redis Cluster (the `redis` crate's
/// cluster client: it follows `MOVED` after a failover or a resharding).
pub enum FleetConnection {
    /// One Redis server.
    Single(redis::Connection),
    /// A Redis Cluster; every fleet key lives in the slot of the fleet's hash tag. Boxed: a
    /// cluster connection is several times the size of a plain one.
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl ConnectionLike for FleetConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            FleetConnection::Single(c) => c.req_packed_command(cmd),
            FleetConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            FleetConnection::Single(c) => c.req_packed_commands(cmd, offset, count),
            FleetConnection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            FleetConnection::Single(c) => c.get_db(),
            FleetConnection::Cluster(c) => c.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            FleetConnection::Single(c) => c.check_connection(),
            FleetConnection::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            FleetConnection::Single(c) => c.is_open(),
            FleetConnection::Cluster(c) => c.is_open(),
        }
    }
}

/// The Redis Cluster seed nodes a URL names, or `None` for a single server: a
/// `redis+cluster://host:port[,host:port…][/]` URL, or several URLs separated by commas.
pub fn cluster_nodes(url: &str) -> Option<Vec<String>> {
    let url = url.trim();
    if let Some(rest) = url.strip_prefix("redis+cluster://") {
        let hosts = rest.trim_end_matches('/');
        return Some(
            hosts
                .split(',')
                .map(|h| format!("redis://{}/", h.trim()))
                .collect(),
        );
    }
    url.contains(',')
        .then(|| url.split(',').map(|u| u.trim().to_string()).collect())
}

type Connector<C> = Box<dyn FnMut() -> RedisResult<C> + Send>;

/// One replica's fleet sync: owns the Redis connection and the [`FleetState`].
pub struct Fleet<C: ConnectionLike = FleetConnection> {
    engine: Arc<Engine>,
    config: FleetConfig,
    connect: Connector<C>,
    conn: Option<C>,
    /// The sync script's SHA1 as Redis named it at `SCRIPT LOAD`; None: load it first.
    script_sha: Option<String>,
    state: FleetState,
    status: Arc<Mutex<FleetStatus>>,
    snapshot: Vec<FleetTenant>,
}

impl Fleet<FleetConnection> {
    /// A fleet member for `engine`. Connects lazily (at the first sync, and again after an
    /// error), with connect, read and write timeouts of P/2; to a Redis Cluster when the URL
    /// names one ([`cluster_nodes`]).
    pub fn new(engine: Arc<Engine>, config: FleetConfig) -> Result<Self, FleetError> {
        config.validate()?;
        let timeout = config.socket_timeout();
        match cluster_nodes(&config.url) {
            Some(nodes) => {
                let client = redis::cluster::ClusterClient::builder(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    // One retry: enough to follow a MOVED after a failover; the whole request
                    // stays within the response timeout.
                    .retries(1)
                    .min_retry_wait(1)
                    .max_retry_wait(timeout.as_millis() as u64 / 4 + 1)
                    .build()?;
                Fleet::with_connector(engine, config, move || {
                    client
                        .get_connection()
                        .map(|c| FleetConnection::Cluster(Box::new(c)))
                })
            }
            None => {
                let client = redis::Client::open(config.url.as_str())?;
                Fleet::with_connector(engine, config, move || {
                    let conn = client.get_connection_with_timeout(timeout)?;
                    conn.set_read_timeout(Some(timeout))?;
                    conn.set_write_timeout(Some(timeout))?;
                    Ok(FleetConnection::Single(conn))
                })
            }
        }
    }
}

impl<C: ConnectionLike> Fleet<C> {
    /// A fleet member that opens its connections with `connect` (tests wrap the connection).
    pub fn with_connector(
        engine: Arc<Engine>,
        config: FleetConfig,
        connect: impl FnMut() -> RedisResult<C> + Send + 'static,
    ) -> Result<Self, FleetError> {
        config.validate()?;
        let mut state = FleetState::new(
            config.top_k,
            config.smoothing,
            config.period_ms * MS,
            config.stale_ms * MS,
        );
        // Above every number an earlier run of this replica used (it counted from its own start).
        state.number_from(wall_us());
        Ok(Fleet {
            engine,
            config,
            connect: Box::new(connect),
            conn: None,
            script_sha: None,
            state,
            status: Arc::new(Mutex::new(FleetStatus::default())),
            snapshot: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The rules' state (for inspection).
    pub fn state(&self) -> &FleetState {
        &self.state
    }

    /// Where the loop stands.
    pub fn status(&self) -> FleetStatus {
        lock(&self.status).clone()
    }

    /// One sync at `now` (monotonic ns): one round trip, blocking up to the socket timeout
    /// (P/2) at worst. Call it every period from a thread where that is fine; the rates are
    /// measured over the time between calls, so the calls need not be evenly spaced.
    pub fn sync(&mut self, now: u64) -> Result<(), FleetError> {
        self.snapshot.clear();
        self.engine.fleet_tenants(&mut self.snapshot);
        let epoch = wall_ms() / self.config.epoch_ms;
        let plan = self.state.plan(&self.snapshot, now, epoch);
        let result = self.exchange(&plan);
        let updates = match &result {
            Ok(reply) => self.state.on_success(&plan, reply, now),
            Err(_) => {
                // The connection may be mid-reply: open a fresh one next time.
                self.conn = None;
                self.state.on_failure(&plan, now)
            }
        };
        for (key, factor) in updates {
            // Ok(false): the tenant lost its slot since the snapshot; nothing to scale.
            let _ = self.engine.set_fleet_factor(key, factor);
        }
        let mut status = lock(&self.status);
        status.syncs += 1;
        status.last_sync_ns = self.state.last_success();
        status.consecutive_failures = self.state.consecutive_failures();
        status.degraded = self.state.degraded(now);
        status.tenants_tracked = self.state.tenants_tracked();
        drop(status);
        result.map(|_| ())
    }

    /// The `EVALSHA` of one sync.
    fn command(&self, plan: &SyncPlan, sha: &str) -> redis::Cmd {
        let tag = format!("{{fairq:{}}}", self.config.fleet);
        // A batch goes to the hash of the epoch it was made in (also when resent after a roll).
        let epoch = plan
            .batch
            .as_ref()
            .map_or_else(|| wall_ms() / self.config.epoch_ms, |b| b.epoch);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha)
            .arg(4)
            .arg(format!("{tag}:served:{epoch}"))
            .arg(format!("{tag}:rates"))
            .arg(format!("{tag}:rates:{}", self.config.replica))
            .arg(format!("{tag}:replicas"));
        let deltas = plan.batch.as_ref().map_or(&[][..], |b| &b.deltas[..]);
        cmd.arg(&self.config.replica)
            .arg(plan.attempt)
            .arg(plan.batch.as_ref().map_or(0, |b| b.seq))
            .arg(deltas.len())
            .arg(plan.rates.len())
            .arg(plan.reads.len())
            .arg(self.config.epoch_ms.saturating_mul(2))
            .arg(self.config.alive_ms());
        for &(k, d) in deltas {
            cmd.arg(field(k)).arg(d.min(i64::MAX as u64));
        }
        for &(k, r) in &plan.rates {
            cmd.arg(field(k)).arg(r);
        }
        for &k in &plan.reads {
            cmd.arg(field(k));
        }
        cmd
    }

    /// Sends the plan (loading the script first where Redis lacks it); returns Redis's answer.
    fn exchange(&mut self, plan: &SyncPlan) -> Result<SyncReply, FleetError> {
        if self.conn.is_none() {
            self.conn = Some((self.connect)()?);
        }
        let entries = plan.rates.len() + plan.reads.len();
        // At most two rounds: a second only when Redis lost the script (restart, failover).
        for round in 0..2 {
            let conn = self.conn.as_mut().expect("connected above");
            let sha = match &self.script_sha {
                Some(sha) => sha.clone(),
                None => {
                    let sha: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(SYNC_SCRIPT)
                        .query(conn)?;
                    self.script_sha = Some(sha.clone());
                    sha
                }
            };
            let cmd = self.command(plan, &sha);
            self.state.on_sent(plan);
            lock(&self.status).pipelines += 1;
            let conn = self.conn.as_mut().expect("connected above");
            match cmd.query::<Value>(conn) {
                Ok(reply) => return parse_sync_reply(&reply, entries),
                Err(e)
                    if round == 0
                        && e.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    // Nothing ran: load the script and send again.
                    self.script_sha = None;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FleetError::Reply(
            "the sync script is missing right after loading it",
        ))
    }
}

impl<C: ConnectionLike + Send + 'static> Fleet<C> {
    /// Starts a library-owned sync thread (start it after `fork()`): it syncs every period with
    /// ±10% jitter, at a fixed rate (a slow sync shortens the wait after it), until
    /// [`FleetThread::stop`].
    pub fn start(mut self) -> std::io::Result<FleetThread<C>> {
        let (stop, stopped) = mpsc::channel::<()>();
        let status = Arc::clone(&self.status);
        let period_ns = self.config.period_ms * MS;
        let mut seed = crate::clock::now_ns() ^ (u64::from(std::process::id()) << 32) | 1;
        let handle = std::thread::Builder::new()
            .name("fairq-fleet".into())
            .spawn(move || {
                loop {
                    // Fixed rate: the next sync is due a (jittered) period after this one began,
                    // not after it ended, so a sync that waits out its timeout does not stretch
                    // the period (3 failures then take 3 periods, not 3 × 1.5).
                    let began = crate::clock::now_ns();
                    let _ = self.sync(began);
                    let due = began + jittered(period_ns, &mut seed);
                    let wait = due.saturating_sub(crate::clock::now_ns());
                    match stopped.recv_timeout(Duration::from_nanos(wait)) {
                        Err(mpsc::RecvTimeoutError::Timeout) => continue,
                        _ => break,
                    }
                }
                self
            })?;
        Ok(FleetThread {
            stop,
            handle,
            status,
        })
    }
}

/// A running library-owned sync thread.
pub struct FleetThread<C: ConnectionLike = FleetConnection> {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<Fleet<C>>,
    status: Arc<Mutex<FleetStatus>>,
}

impl<C: ConnectionLike> FleetThread<C> {
    /// Where the loop stands.
    pub fn status(&self) -> FleetStatus {
        lock(&self.status).clone()
    }

    /// Stops the thread (waits for a sync in progress, at most the socket timeout) and gives the
    /// fleet back.
    pub fn stop(self) -> Fleet<C> {
        let _ = self.stop.send(());
        match self.handle.join() {
            Ok(fleet) => fleet,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// `period` ± 10%, from a xorshift generator.
fn jittered(period_ns: u64, seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let span = period_ns / 5;
    period_ns - period_ns / 10 + if span == 0 { 0 } else { *seed % (span + 1) }
}

/// A tenant's field in the fleet hashes.
pub fn field(tenant: TenantKey) -> String {
    format!("t:{:016x}", tenant.get())
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}

fn lock(status: &Mutex<FleetStatus>) -> std::sync::MutexGuard<'_, FleetStatus> {
    // A panic while holding it left plain data behind: still readable.
    status.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn jitter_stays_within_ten_percent() {
        let mut seed = 12345;
        for _ in 0..1000 {
            let w = jittered(100 * MS, &mut seed);
            assert!((90 * MS..=110 * MS).contains(&w), "{w}");
        }
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
    fn replies_of_the_wrong_shape_are_errors() {
        let ok = Value::Array(vec![
            Value::Int(1),
            Value::Int(9),
            Value::Int(0),
            Value::Int(3),
            Value::Int(42),
        ]);
        assert_eq!(
            parse_sync_reply(&ok, 1).unwrap(),
            SyncReply {
                batch_applied: true,
                last_seq: 9,
                rates_applied: false,
                last_attempt: 3,
                fleet_rates: vec![42],
            }
        );
        assert!(parse_sync_reply(&ok, 2).is_err(), "count");
        assert!(parse_sync_reply(&Value::Nil, 0).is_err());
        let negative = Value::Array(vec![Value::Int(-1); 4]);
        assert!(parse_sync_reply(&negative, 0).is_err());
        let flag = Value::Array(vec![
            Value::Int(2),
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
        ]);
        assert!(parse_sync_reply(&flag, 0).is_err());
        let text = Value::Array(vec![Value::BulkString(b"1".to_vec()); 4]);
        assert!(parse_sync_reply(&text, 0).is_err());
        assert!(parse_sync_reply(&Value::Array(vec![]), usize::MAX).is_err());
        // RESP: an error reply, a truncated one, a huge count.
        assert!(parse_sync_reply_resp(b"-NOSCRIPT No matching script\r\n", 0).is_err());
        assert!(parse_sync_reply_resp(b"*5\r\n:1\r\n", 1).is_err());
        assert!(parse_sync_reply_resp(b"*999999999999\r\n", 0).is_err());
        assert_eq!(
            parse_sync_reply_resp(b"*5\r\n:1\r\n:9\r\n:0\r\n:3\r\n:42\r\n", 1).unwrap(),
            parse_sync_reply(&ok, 1).unwrap()
        );
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

    mod garbage {
        use super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Nil),
                any::<i64>().prop_map(Value::Int),
                prop::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
                any::<f64>().prop_map(Value::Double),
                any::<bool>().prop_map(Value::Boolean),
                "[ -~]{0,16}".prop_map(Value::SimpleString),
                Just(Value::Okay),
            ];
            leaf.prop_recursive(3, 64, 12, |inner| {
                prop::collection::vec(inner, 0..12).prop_map(Value::Array)
            })
        }

        proptest! {
            /// Whatever Redis returns, reading it is an answer or an error, never a panic; an
            /// answer always has one fleet rate per entry.
            #[test]
            fn any_reply_value_reads_without_panicking(v in value(), entries in 0usize..10) {
                if let Ok(reply) = parse_sync_reply(&v, entries) {
                    prop_assert_eq!(reply.fleet_rates.len(), entries);
                }
            }

            #[test]
            fn any_resp_bytes_read_without_panicking(
                bytes in prop::collection::vec(any::<u8>(), 0..256),
                entries in 0usize..10,
            ) {
                if let Ok(reply) = parse_sync_reply_resp(&bytes, entries) {
                    prop_assert_eq!(reply.fleet_rates.len(), entries);
                }
            }

            /// Integer replies of any size: huge numbers are taken as they are (u64), never
            /// wrapped; negative ones are refused.
            #[test]
            fn any_integers_read_or_are_refused(ns in prop::collection::vec(any::<i64>(), 4..10)) {
                let v = Value::Array(ns.iter().copied().map(Value::Int).collect());
                match parse_sync_reply(&v, ns.len() - 4) {
                    Ok(r) => {
                        prop_assert!(ns.iter().all(|&n| n >= 0));
                        prop_assert_eq!(r.last_seq, ns[1] as u64);
                        prop_assert_eq!(r.fleet_rates, ns[4..].iter().map(|&n| n as u64).collect::<Vec<_>>());
                    }
                    Err(_) => prop_assert!(
                        ns.iter().any(|&n| n < 0) || ns[0] > 1 || ns[2] > 1
                    ),
                }
            }
        }
    }
}
