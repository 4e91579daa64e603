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
//! [`Engine::set_fleet_factor`](crate::Engine::set_fleet_factor) applies the factor; grants
//! never wait for this module and never call Redis.
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
//!
//! Layout: `state.rs` holds the weight rule, `redis.rs` the Redis side (connection, sync loop,
//! reading replies) and `sync.lua` the script it runs.

use std::fmt;
use std::time::Duration;

use crate::limits::MS;

mod redis;
mod state;

pub use self::redis::{
    cluster_nodes, field, parse_sync_reply, parse_sync_reply_resp, Fleet, FleetConnection,
    FleetThread, SYNC_SCRIPT,
};
pub use self::state::{
    ewma, fleet_factor, relax_toward_full, DeltaBatch, FleetState, SyncPlan, SyncReply,
};

/// A factor of 1024 is the tenant's full weight.
pub const FULL_FLEET_FACTOR: u32 = crate::limits::FACTOR_ONE;
/// Failures in a row after which factors relax back toward full weight.
pub const DEGRADE_AFTER_FAILURES: u32 = 3;
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
    Redis(::redis::RedisError),
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

impl From<::redis::RedisError> for FleetError {
    fn from(e: ::redis::RedisError) -> Self {
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
