//! Fleet mode (issue 9, R13): fairness across gateway replicas through a shared Redis, off the
//! hot path.
//!
//! Each replica schedules only its own traffic. A sync loop, run every period P either by the
//! caller ([`Fleet::sync`]) or by a library-owned thread ([`Fleet::start`]), sends ONE pipeline:
//!
//! - `HINCRBY` of this replica's served-cost delta for each of the top K tenants by delta, into
//!   a fleet hash per epoch (`{fairq:<fleet>}:served:<epoch>`, fields `t:<tenant hash>`);
//! - one `HMGET` of the fleet totals of its other queued tenants;
//! - `PEXPIRE` on the hash (two epochs, so the previous one outlives the roll);
//! - a heartbeat `HSET` (field `hb:<replica>` in the same hash, so the expiry covers it).
//!
//! That is at most K + 3 commands per replica per period. The keys share the hash tag
//! `{fairq:<fleet>}`, so they land on one Redis Cluster slot.
//!
//! The weight rule ([`FleetState`], pure, testable without Redis): per tenant, global service
//! since the last sync is G = total − last seen, local service is L = the delta sent; both are
//! smoothed (EWMA) and the tenant's fleet factor becomes `clamp(L/G, 0.02, 1)`, so a tenant served
//! elsewhere is served proportionally less here. [`Engine::set_fleet_factor`] applies it; grants
//! never wait for this module and never call Redis.
//!
//! Failure: on an error or timeout the deltas are kept (sent with the next success) and factors
//! stay. After [`DEGRADE_AFTER_FAILURES`] failures in a row, or when the last success is older than
//! [`FleetConfig::stale_ms`], each factor moves halfway back to 1024 every period: the replica
//! degrades to plain local fairness. A total that goes backwards (failover, expiry, epoch roll)
//! resets that tenant's baseline.

use std::collections::HashMap;
use std::fmt;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult, Value};

use crate::engine::{Engine, FleetTenant, MIN_FLEET_FACTOR};
use crate::identity::TenantKey;

/// A factor of 1024 is the tenant's full weight.
pub const FULL_FLEET_FACTOR: u32 = 1024;
/// Failures in a row after which factors relax back toward full weight.
pub const DEGRADE_AFTER_FAILURES: u32 = 3;
const MS: u64 = 1_000_000;

/// How a replica takes part in a fleet.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Redis URL, e.g. `redis://127.0.0.1:6379/`.
    pub url: String,
    /// Fleet name: every replica of one fleet uses the same one (it forms the hash tag).
    pub fleet: String,
    /// This replica's name, unique in the fleet (heartbeat field).
    pub replica: String,
    /// Sync period P in ms, 50..=500 (default 100). Socket timeouts are P/2.
    pub period_ms: u64,
    /// Most tenants whose deltas one sync sends (K, default 256, 1..=4096).
    pub top_k: usize,
    /// Epoch length in ms (default 5 minutes); keys expire after two epochs.
    pub epoch_ms: u64,
    /// EWMA weight of the newest sample, in (0, 1] (default 0.5).
    pub smoothing: f64,
    /// Data older than this (ms, default 1000) degrades the replica to local fairness.
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
            smoothing: 0.5,
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
        if self.epoch_ms < 1000 {
            return Err(FleetError::Config("epoch_ms must be at least 1000"));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(FleetError::Config("smoothing must be in (0, 1]"));
        }
        if self.stale_ms < self.period_ms {
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
}

/// Why fleet mode could not be set up or a sync failed.
#[derive(Debug)]
pub enum FleetError {
    /// A configuration bound is broken; names it.
    Config(&'static str),
    /// Redis refused, timed out or answered something unexpected.
    Redis(redis::RedisError),
    /// The reply did not have the shape of the pipeline sent.
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
    /// Pipelines sent (one per sync at most).
    pub pipelines: u64,
    /// Syncs attempted.
    pub syncs: u64,
}

/// Exponentially weighted moving average: `prev` moved toward `sample` by `alpha`.
pub fn ewma(prev: f64, sample: f64, alpha: f64) -> f64 {
    prev + alpha * (sample - prev)
}

/// The weight rule: the share of a tenant's fleet-wide service that happens here, `L/G`, clamped
/// to 0.02..=1 and scaled to 1024. No global service (G = 0) gives full weight.
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

/// The last fleet total seen for a tenant, and when.
#[derive(Clone, Copy, Debug)]
struct Baseline {
    epoch: u64,
    total: u64,
    /// Successful sync round it was read in.
    round: u64,
}

/// Local fleet state of one tenant.
#[derive(Clone, Debug, Default)]
struct TenantSync {
    /// The engine's `served_cost` at the last sync.
    last_served: u64,
    /// Served cost not yet added to the fleet total (kept across failed syncs).
    pending: u64,
    baseline: Option<Baseline>,
    ewma_local: f64,
    ewma_global: f64,
    primed: bool,
    /// The engine's factor at the last sync (or the one we set since).
    factor: u32,
    /// Seen in the latest `plan` (tenants that lost their slot are dropped).
    seen: bool,
}

/// What one sync sends: deltas to add, and totals to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncPlan {
    /// Top K tenants by unsent served cost, largest first: (tenant, delta).
    pub increments: Vec<(TenantKey, u64)>,
    /// Other queued tenants whose fleet totals are read.
    pub reads: Vec<TenantKey>,
}

/// The fleet rules without Redis: deltas, baselines, EWMAs, factors, failure and degradation.
#[derive(Debug)]
pub struct FleetState {
    top_k: usize,
    smoothing: f64,
    stale_ns: u64,
    tenants: HashMap<u64, TenantSync>,
    /// Successful syncs so far.
    round: u64,
    planned_once: bool,
    failures: u32,
    last_success: Option<u64>,
}

impl FleetState {
    /// Empty state for K = `top_k`, EWMA weight `smoothing`, staleness limit `stale_ns`.
    pub fn new(top_k: usize, smoothing: f64, stale_ns: u64) -> Self {
        FleetState {
            top_k,
            smoothing,
            stale_ns,
            tenants: HashMap::new(),
            round: 0,
            planned_once: false,
            failures: 0,
            last_success: None,
        }
    }

    /// Folds an engine snapshot in (new served cost becomes pending; tenants that lost their slot
    /// are forgotten) and says what to send.
    pub fn plan(&mut self, snapshot: &[FleetTenant]) -> SyncPlan {
        for t in self.tenants.values_mut() {
            t.seen = false;
        }
        let first = !self.planned_once;
        self.planned_once = true;
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
        }
        self.tenants.retain(|_, t| t.seen);

        let mut increments: Vec<(TenantKey, u64)> = self
            .tenants
            .iter()
            .filter(|(_, t)| t.pending > 0)
            .map(|(&k, t)| (TenantKey::from_hash(k), t.pending))
            .collect();
        increments.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        increments.truncate(self.top_k);
        let mut reads: Vec<TenantKey> = snapshot
            .iter()
            .filter(|ft| ft.queued > 0 && !increments.iter().any(|(k, _)| *k == ft.tenant))
            .map(|ft| ft.tenant)
            .collect();
        reads.sort_unstable();
        SyncPlan { increments, reads }
    }

    /// A sync succeeded: `incremented[i]` is the new total after `plan.increments[i]`,
    /// `read[i]` the total of `plan.reads[i]` (None: no field yet). Returns the factors to set.
    pub fn on_success(
        &mut self,
        plan: &SyncPlan,
        epoch: u64,
        incremented: &[u64],
        read: &[Option<u64>],
        now: u64,
    ) -> Vec<(TenantKey, u32)> {
        self.round += 1;
        self.failures = 0;
        self.last_success = Some(now);
        let mut out = Vec::new();
        let observations = plan
            .increments
            .iter()
            .zip(incremented)
            .map(|(&(k, sent), &total)| (k, sent, total))
            .chain(
                plan.reads
                    .iter()
                    .zip(read)
                    .map(|(&k, total)| (k, 0, total.unwrap_or(0))),
            );
        for (key, sent, total) in observations {
            let Some(t) = self.tenants.get_mut(&key.get()) else {
                continue;
            };
            t.pending -= sent.min(t.pending);
            let previous = t.baseline.replace(Baseline {
                epoch,
                total,
                round: self.round,
            });
            let Some(b) = previous else { continue };
            // Only a reading from the round just before, in the same epoch, and not below it,
            // measures one period; anything else is a new baseline.
            if b.epoch != epoch || b.round + 1 != self.round || total < b.total {
                continue;
            }
            let global = (total - b.total) as f64;
            let local = sent as f64;
            if t.primed {
                t.ewma_local = ewma(t.ewma_local, local, self.smoothing);
                t.ewma_global = ewma(t.ewma_global, global, self.smoothing);
            } else {
                t.ewma_local = local;
                t.ewma_global = global;
                t.primed = true;
            }
            let factor = fleet_factor(t.ewma_local, t.ewma_global);
            if factor != t.factor {
                t.factor = factor;
                out.push((key, factor));
            }
        }
        out
    }

    /// A sync failed: deltas stay pending, factors stay, unless the replica is degraded (too
    /// many failures or stale data), when each moves halfway back to full weight.
    pub fn on_failure(&mut self, now: u64) -> Vec<(TenantKey, u32)> {
        self.failures = self.failures.saturating_add(1);
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

    /// Served cost of `key` not yet added to the fleet total.
    pub fn pending(&self, key: TenantKey) -> Option<u64> {
        self.tenants.get(&key.get()).map(|t| t.pending)
    }
}

type Connector<C> = Box<dyn FnMut() -> RedisResult<C> + Send>;

/// One replica's fleet sync: owns the Redis connection and the [`FleetState`].
pub struct Fleet<C: ConnectionLike = redis::Connection> {
    engine: Arc<Engine>,
    config: FleetConfig,
    connect: Connector<C>,
    conn: Option<C>,
    state: FleetState,
    status: Arc<Mutex<FleetStatus>>,
    snapshot: Vec<FleetTenant>,
}

impl Fleet<redis::Connection> {
    /// A fleet member for `engine`. Connects lazily (at the first sync, and again after an
    /// error), with connect, read and write timeouts of P/2.
    pub fn new(engine: Arc<Engine>, config: FleetConfig) -> Result<Self, FleetError> {
        config.validate()?;
        let client = redis::Client::open(config.url.as_str())?;
        let timeout = config.socket_timeout();
        let connect = move || {
            let conn = client.get_connection_with_timeout(timeout)?;
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            Ok(conn)
        };
        Fleet::with_connector(engine, config, connect)
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
        let state = FleetState::new(config.top_k, config.smoothing, config.stale_ms * MS);
        Ok(Fleet {
            engine,
            config,
            connect: Box::new(connect),
            conn: None,
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

    /// One sync at `now` (monotonic ns): at most one pipeline, blocking up to the socket
    /// timeout (P/2) at worst. Call it every period from a thread where that is fine.
    pub fn sync(&mut self, now: u64) -> Result<(), FleetError> {
        self.snapshot.clear();
        self.engine.fleet_tenants(&mut self.snapshot);
        let plan = self.state.plan(&self.snapshot);
        let epoch = wall_ms() / self.config.epoch_ms;
        let result = self.exchange(&plan, epoch);
        let updates = match &result {
            Ok((incremented, read)) => self.state.on_success(&plan, epoch, incremented, read, now),
            Err(_) => {
                // The connection may be mid-reply: open a fresh one next time.
                self.conn = None;
                self.state.on_failure(now)
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

    /// Sends the plan as one pipeline; returns the totals in plan order.
    fn exchange(
        &mut self,
        plan: &SyncPlan,
        epoch: u64,
    ) -> Result<(Vec<u64>, Vec<Option<u64>>), FleetError> {
        let key = format!("{{fairq:{}}}:served:{epoch}", self.config.fleet);
        let mut pipe = redis::pipe();
        for (tenant, delta) in &plan.increments {
            pipe.cmd("HINCRBY")
                .arg(&key)
                .arg(field(*tenant))
                .arg(*delta);
        }
        if !plan.reads.is_empty() {
            let cmd = pipe.cmd("HMGET").arg(&key);
            for tenant in &plan.reads {
                cmd.arg(field(*tenant));
            }
        }
        pipe.cmd("PEXPIRE").arg(&key).arg(2 * self.config.epoch_ms);
        pipe.cmd("HSET")
            .arg(&key)
            .arg(format!("hb:{}", self.config.replica))
            .arg(wall_ms());
        if self.conn.is_none() {
            self.conn = Some((self.connect)()?);
        }
        let conn = self.conn.as_mut().expect("connected above");
        lock(&self.status).pipelines += 1;
        let replies: Vec<Value> = pipe.query(conn)?;
        let expected = plan.increments.len() + usize::from(!plan.reads.is_empty()) + 2;
        if replies.len() != expected {
            return Err(FleetError::Reply("reply count differs from the pipeline"));
        }
        let mut replies = replies.into_iter();
        let mut incremented = Vec::with_capacity(plan.increments.len());
        for reply in replies.by_ref().take(plan.increments.len()) {
            match reply {
                Value::Int(n) if n >= 0 => incremented.push(n as u64),
                _ => return Err(FleetError::Reply("HINCRBY did not return a count")),
            }
        }
        let mut read = Vec::with_capacity(plan.reads.len());
        if !plan.reads.is_empty() {
            let Some(Value::Array(values)) = replies.next() else {
                return Err(FleetError::Reply("HMGET did not return an array"));
            };
            if values.len() != plan.reads.len() {
                return Err(FleetError::Reply("HMGET returned the wrong count"));
            }
            for v in values {
                read.push(match v {
                    Value::Nil => None,
                    Value::BulkString(b) => std::str::from_utf8(&b)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok()),
                    Value::Int(n) => u64::try_from(n).ok(),
                    _ => return Err(FleetError::Reply("HMGET field is not a count")),
                });
            }
        }
        Ok((incremented, read))
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
pub struct FleetThread<C: ConnectionLike = redis::Connection> {
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

fn field(tenant: TenantKey) -> String {
    format!("t:{:016x}", tenant.get())
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
    fn plan_sends_top_k_deltas_and_reads_other_queued_tenants() {
        let mut s = FleetState::new(2, 1.0, 1000 * MS);
        // First snapshot is a baseline: nothing to send yet.
        let p = s.plan(&[ft("a", 100, 1, 1024), ft("b", 0, 0, 1024)]);
        assert!(p.increments.is_empty());
        assert_eq!(p.reads, vec![key("a")]);
        let p = s.plan(&[
            ft("a", 130, 1, 1024),
            ft("b", 10, 0, 1024),
            ft("c", 50, 2, 1024), // took a slot since: all of it counts
            ft("d", 0, 3, 1024),
        ]);
        assert_eq!(p.increments, vec![(key("c"), 50), (key("a"), 30)]);
        let mut reads = vec![key("d")];
        reads.sort();
        assert_eq!(p.reads, reads);
        // "b" is beyond K: its delta waits, and "c"'s is replaced by nothing new.
        assert_eq!(s.pending(key("b")), Some(10));
    }

    #[test]
    fn weight_rule_uses_global_minus_last_seen_and_local_delta() {
        let mut s = FleetState::new(8, 1.0, 1000 * MS);
        s.plan(&[ft("a", 0, 1, 1024)]);
        // Round 1: baseline only.
        let p = s.plan(&[ft("a", 10, 1, 1024)]);
        assert_eq!(p.increments, vec![(key("a"), 10)]);
        assert!(s.on_success(&p, 7, &[10], &[], MS).is_empty());
        assert_eq!(s.pending(key("a")), Some(0));
        // Round 2: here 10 more, fleet-wide 40 more: L/G = 1/4.
        let p = s.plan(&[ft("a", 20, 1, 1024)]);
        assert_eq!(
            s.on_success(&p, 7, &[50], &[], 2 * MS),
            vec![(key("a"), 256)]
        );
        // Round 3: not served here, queued: read-only, L = 0 -> floor.
        let p = s.plan(&[ft("a", 20, 1, 256)]);
        assert_eq!(p.reads, vec![key("a")]);
        assert_eq!(
            s.on_success(&p, 7, &[], &[Some(90)], 3 * MS),
            vec![(key("a"), MIN_FLEET_FACTOR)]
        );
    }

    #[test]
    fn ewma_smooths_both_rates() {
        let mut s = FleetState::new(8, 0.5, 1000 * MS);
        s.plan(&[ft("a", 0, 1, 1024)]);
        let p = s.plan(&[ft("a", 10, 1, 1024)]);
        s.on_success(&p, 0, &[10], &[], MS);
        let p = s.plan(&[ft("a", 20, 1, 1024)]);
        // First measured period primes: 10/20.
        assert_eq!(
            s.on_success(&p, 0, &[30], &[], 2 * MS),
            vec![(key("a"), 512)]
        );
        let p = s.plan(&[ft("a", 30, 1, 512)]);
        // L: 10 -> 10, G: 20 -> (20 + 10) / 2 = 15: 10/15.
        assert_eq!(
            s.on_success(&p, 0, &[40], &[], 3 * MS),
            vec![(key("a"), 682)]
        );
    }

    #[test]
    fn a_failure_keeps_deltas_and_factors() {
        let mut s = FleetState::new(8, 1.0, 1000 * MS);
        s.plan(&[ft("a", 0, 1, 1024)]);
        let p = s.plan(&[ft("a", 10, 1, 1024)]);
        s.on_success(&p, 0, &[10], &[], MS);
        let p = s.plan(&[ft("a", 20, 1, 1024)]);
        s.on_success(&p, 0, &[40], &[], 2 * MS);
        let p = s.plan(&[ft("a", 25, 1, 341)]);
        assert!(s.on_failure(3 * MS).is_empty());
        assert_eq!(s.consecutive_failures(), 1);
        assert!(!s.degraded(3 * MS));
        // The failed delta is sent with the next one.
        let p2 = s.plan(&[ft("a", 30, 1, 341)]);
        assert_eq!(p.increments, vec![(key("a"), 5)]);
        assert_eq!(p2.increments, vec![(key("a"), 10)]);
        // Measured over both periods: L = 10, G = 70 - 40 = 30.
        assert_eq!(s.on_success(&p2, 0, &[70], &[], 4 * MS), vec![]);
        assert_eq!(s.consecutive_failures(), 0);
    }

    #[test]
    fn three_failures_relax_factors_halfway_each_period() {
        let mut s = FleetState::new(8, 1.0, 1000 * MS);
        s.plan(&[ft("a", 0, 1, 20)]);
        assert!(s.on_failure(MS).is_empty());
        assert!(s.on_failure(2 * MS).is_empty());
        assert_eq!(s.on_failure(3 * MS), vec![(key("a"), 522)]);
        assert!(s.degraded(3 * MS));
        assert_eq!(s.on_failure(4 * MS), vec![(key("a"), 773)]);
    }

    #[test]
    fn stale_data_degrades_at_the_first_failure() {
        let mut s = FleetState::new(8, 1.0, 1000 * MS);
        s.plan(&[ft("a", 0, 1, 100)]);
        let p = s.plan(&[ft("a", 0, 1, 100)]);
        s.on_success(&p, 0, &[], &[Some(5)], 0);
        assert!(!s.degraded(1000 * MS));
        assert!(s.degraded(1001 * MS));
        assert_eq!(s.on_failure(1001 * MS), vec![(key("a"), 562)]);
    }

    #[test]
    fn a_counter_going_backwards_resets_the_baseline() {
        let mut s = FleetState::new(8, 1.0, 1000 * MS);
        s.plan(&[ft("a", 0, 1, 1024)]);
        let p = s.plan(&[ft("a", 10, 1, 1024)]);
        s.on_success(&p, 0, &[1000], &[], MS);
        // Failover lost writes: the total is below the last one seen. New baseline, no factor.
        let p = s.plan(&[ft("a", 20, 1, 1024)]);
        assert!(s.on_success(&p, 0, &[10], &[], 2 * MS).is_empty());
        // Measured from the new baseline: L = 10, G = 20.
        let p = s.plan(&[ft("a", 30, 1, 1024)]);
        assert_eq!(
            s.on_success(&p, 0, &[30], &[], 3 * MS),
            vec![(key("a"), 512)]
        );
        // An epoch roll is a new baseline too, even when the new total is higher.
        let p = s.plan(&[ft("a", 40, 1, 512)]);
        assert!(s.on_success(&p, 1, &[5000], &[], 4 * MS).is_empty());
    }

    #[test]
    fn the_engine_counter_restarting_counts_as_new_service_and_evicted_tenants_are_dropped() {
        let mut s = FleetState::new(8, 1.0, 1000 * MS);
        s.plan(&[ft("a", 100, 1, 1024), ft("b", 0, 1, 1024)]);
        // "a" lost its slot and came back: 7 served since.
        let p = s.plan(&[ft("a", 7, 1, 1024), ft("b", 0, 1, 1024)]);
        assert_eq!(p.increments, vec![(key("a"), 7)]);
        s.plan(&[ft("a", 7, 1, 1024)]);
        assert_eq!(s.tenants_tracked(), 1);
        assert_eq!(s.pending(key("b")), None);
    }
}
