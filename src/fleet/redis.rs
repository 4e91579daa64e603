//! The Redis side of fleet mode: the sync script, reading its replies, the connection and the
//! sync loop that feeds [`FleetState`] and sets the engine's factors.

use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult, Value};

use super::{FleetConfig, FleetError, FleetState, FleetStatus, SyncPlan, SyncReply};
use crate::engine::{Engine, FleetTenant};
use crate::identity::TenantKey;
use crate::limits::MS;

/// The Lua script of one sync (see the [module doc](super)). KEYS: the batch epoch's hash, the
/// fleet rates, this replica's rates, the replica deadlines. ARGV: replica, attempt, batch number
/// (0: no batch), counts of deltas, rates and reads, key expiry (ms), liveness (ms), then the
/// deltas (field, amount), rates (field, milli-units/s) and reads (field). A key of the wrong
/// type fails it before any write; every number read from Redis that is not one this script
/// could have written (not a number, NaN, infinite, negative, 2^53 or more) reads as 0, and a
/// total that cannot be incremented restarts from the delta, so garbage in a field never fails
/// it halfway. Replies `{applied, last seq, rates taken, last attempt, fleet rate…}`.
pub const SYNC_SCRIPT: &str = include_str!("sync.lua");

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

    #[test]
    fn jitter_stays_within_ten_percent() {
        let mut seed = 12345;
        for _ in 0..1000 {
            let w = jittered(100 * MS, &mut seed);
            assert!((90 * MS..=110 * MS).contains(&w), "{w}");
        }
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
