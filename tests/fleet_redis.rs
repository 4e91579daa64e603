//! Fleet mode against a real `redis-server` (Debian package `redis-server`), started by each test
//! on 127.0.0.1 at a free port without persistence, and killed after. Run with
//! `cargo test --features fleet --test fleet_redis`.
#![cfg(feature = "fleet")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis_server::RedisServer;
use common::*;
use fairq::fleet::{Fleet, FleetConfig};
use fairq::{Config, Engine, Outcome};
use redis::{ConnectionLike, RedisResult, Value};

/// Counts round trips: a pipeline is one `req_packed_commands`; a single command would be one
/// `req_packed_command`.
struct Counting {
    inner: redis::Connection,
    pipelines: Arc<AtomicU64>,
    singles: Arc<AtomicU64>,
}

impl ConnectionLike for Counting {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.singles.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.pipelines.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.inner.check_connection()
    }

    fn is_open(&self) -> bool {
        self.inner.is_open()
    }
}

fn config(server: &RedisServer, fleet: &str, replica: &str) -> FleetConfig {
    FleetConfig {
        url: server.url(),
        fleet: fleet.into(),
        replica: replica.into(),
        smoothing: 1.0,
        ..FleetConfig::default()
    }
}

fn new_engine() -> Arc<Engine> {
    Arc::new(engine(Config {
        max_in_flight: 64,
        ..Config::default()
    }))
}

/// Queues `n` requests of `tenant` and serves them all (cost 1 each), nothing else queued. The
/// tenant keeps its slot (and its place in the sync's view) while idle.
fn serve(engine: &Engine, tenant: &str, n: usize, now: u64) {
    for _ in 0..n {
        queued(engine, &request(tenant), now);
    }
    for _ in 0..n {
        let g = granted(engine, now);
        assert_eq!(g.tenant, key(tenant));
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
    }
}

fn fleet_hash(server: &RedisServer, fleet: &str) -> Vec<(String, String)> {
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{fairq:{fleet}}}:served:*"))
        .query(&mut con)
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut con).unwrap();
    assert!(ttl > 0, "the fleet hash expires with its epoch");
    redis::cmd("HGETALL").arg(&keys[0]).query(&mut con).unwrap()
}

fn field_of(hash: &[(String, String)], name: &str) -> Option<u64> {
    let field = format!("t:{:016x}", key(name).get());
    hash.iter()
        .find(|(f, _)| *f == field)
        .map(|(_, v)| v.parse().unwrap())
}

#[test]
fn each_sync_is_one_pipeline_and_adds_served_cost_to_the_fleet_hash() {
    let server = RedisServer::start();
    let engine = new_engine();
    let pipelines = Arc::new(AtomicU64::new(0));
    let singles = Arc::new(AtomicU64::new(0));
    let (p, s, client) = (
        pipelines.clone(),
        singles.clone(),
        redis::Client::open(server.url()).unwrap(),
    );
    let mut fleet =
        Fleet::with_connector(engine.clone(), config(&server, "count", "r1"), move || {
            Ok(Counting {
                inner: client.get_connection()?,
                pipelines: p.clone(),
                singles: s.clone(),
            })
        })
        .unwrap();

    serve(&engine, "a", 3, 0);
    fleet.sync(MS).unwrap(); // baseline
    for round in 1..=5u64 {
        serve(&engine, "a", 4, round * 100 * MS);
        serve(&engine, "b", 2, round * 100 * MS);
        fleet.sync(round * 100 * MS + MS).unwrap();
    }
    assert_eq!(
        pipelines.load(Ordering::Relaxed),
        6,
        "one pipeline per sync"
    );
    assert_eq!(
        singles.load(Ordering::Relaxed),
        0,
        "nothing outside the pipeline"
    );
    let status = fleet.status();
    assert_eq!(status.pipelines, 6);
    assert_eq!(status.consecutive_failures, 0);
    assert!(!status.degraded);
    assert_eq!(status.tenants_tracked, 2);
    assert_eq!(status.last_sync_ns, Some(501 * MS));

    let hash = fleet_hash(&server, "count");
    assert_eq!(field_of(&hash, "a"), Some(20));
    assert_eq!(field_of(&hash, "b"), Some(10));
    assert!(
        hash.iter().any(|(f, _)| f == "hb:r1"),
        "heartbeat: {hash:?}"
    );
    // The only replica serves all of both tenants: full weight.
    let snapshot = factors(&engine);
    assert!(snapshot.iter().all(|&(_, f)| f == 1024), "{snapshot:?}");
}

fn factors(engine: &Engine) -> Vec<(fairq::TenantKey, u32)> {
    let mut out = Vec::new();
    engine.fleet_tenants(&mut out);
    out.iter().map(|t| (t.tenant, t.factor)).collect()
}

fn factor_of(engine: &Engine, name: &str) -> u32 {
    factors(engine)
        .into_iter()
        .find(|(k, _)| *k == key(name))
        .map(|(_, f)| f)
        .unwrap()
}

#[test]
fn a_tenant_served_on_two_replicas_gets_half_its_weight_on_each() {
    let server = RedisServer::start();
    let (e1, e2) = (new_engine(), new_engine());
    let mut f1 = Fleet::new(e1.clone(), config(&server, "two", "r1")).unwrap();
    let mut f2 = Fleet::new(e2.clone(), config(&server, "two", "r2")).unwrap();
    for round in 0..6u64 {
        let now = round * 100 * MS;
        serve(&e1, "a", 10, now);
        serve(&e2, "a", 10, now);
        serve(&e1, "b", 10, now);
        f1.sync(now + MS).unwrap();
        f2.sync(now + 2 * MS).unwrap();
    }
    // "a": each replica serves half of the fleet's service of it. "b" only lives on r1.
    assert_eq!(factor_of(&e1, "a"), 512);
    assert_eq!(factor_of(&e2, "a"), 512);
    assert_eq!(factor_of(&e1, "b"), 1024);
    let hash = fleet_hash(&server, "two");
    assert_eq!(field_of(&hash, "a"), Some(100));
    assert!(hash.iter().any(|(f, _)| f == "hb:r1") && hash.iter().any(|(f, _)| f == "hb:r2"));
}

#[test]
fn a_dead_redis_keeps_deltas_degrades_to_local_weights_and_recovers() {
    let server = RedisServer::start();
    let (e1, e2) = (new_engine(), new_engine());
    let mut f1 = Fleet::new(e1.clone(), config(&server, "dead", "r1")).unwrap();
    let mut f2 = Fleet::new(e2.clone(), config(&server, "dead", "r2")).unwrap();
    for round in 0..4u64 {
        let now = round * 100 * MS;
        serve(&e1, "a", 10, now);
        serve(&e2, "a", 30, now);
        f1.sync(now + MS).unwrap();
        f2.sync(now + 2 * MS).unwrap();
    }
    assert_eq!(factor_of(&e1, "a"), 256);

    let port = server.stop();
    let mut now = 400 * MS;
    for failures in 1..=4u32 {
        serve(&e1, "a", 5, now); // grants keep flowing without Redis
        let started = Instant::now();
        assert!(f1.sync(now).is_err());
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "bounded by P/2"
        );
        let status = f1.status();
        assert_eq!(status.consecutive_failures, failures);
        assert_eq!(status.degraded, failures >= 3);
        now += 100 * MS;
    }
    // Two degraded periods: 256 -> 640 -> 832.
    assert_eq!(factor_of(&e1, "a"), 832);
    assert_eq!(f1.state().pending(key("a")), Some(20));

    // Redis comes back empty (a failover that lost everything): the kept deltas land, the
    // counter went backwards so "a" gets a new baseline, then the rule takes over again.
    let server = RedisServer::start_on(port);
    // r2's connection died with the old server: its next sync fails once, then reconnects.
    assert!(f2.sync(now).is_err());
    f1.sync(now).unwrap();
    assert_eq!(f1.status().consecutive_failures, 0);
    assert!(!f1.status().degraded);
    assert_eq!(field_of(&fleet_hash(&server, "dead"), "a"), Some(20));
    for round in 0..2u64 {
        let t = now + (round + 1) * 100 * MS;
        serve(&e1, "a", 10, t);
        serve(&e2, "a", 10, t);
        f1.sync(t + MS).unwrap();
        f2.sync(t + 2 * MS).unwrap();
    }
    assert_eq!(factor_of(&e1, "a"), 512);
}

#[test]
fn the_library_thread_syncs_every_period_until_stopped() {
    let server = RedisServer::start();
    let engine = new_engine();
    serve(&engine, "a", 3, 0);
    let cfg = FleetConfig {
        period_ms: 50,
        ..config(&server, "thread", "r1")
    };
    let thread = Fleet::new(engine.clone(), cfg).unwrap().start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while thread.status().syncs < 4 {
        assert!(Instant::now() < deadline, "{:?}", thread.status());
        std::thread::sleep(Duration::from_millis(10));
    }
    let fleet = thread.stop();
    let status = fleet.status();
    assert_eq!(status.consecutive_failures, 0);
    assert!(status.last_sync_ns.is_some());
    assert_eq!(status.pipelines, status.syncs);
    let syncs = status.syncs;
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(fleet.status().syncs, syncs, "stopped");
}

#[test]
fn a_paused_redis_never_blocks_grants_and_the_thread_degrades() {
    let server = RedisServer::start();
    let engine = new_engine();
    serve(&engine, "a", 3, 0);
    // P = 200 ms: a sync waits up to a 100 ms socket timeout on the frozen Redis.
    let cfg = FleetConfig {
        period_ms: 200,
        ..config(&server, "paused", "r1")
    };
    let thread = Fleet::new(engine.clone(), cfg).unwrap().start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while thread.status().syncs < 2 {
        assert!(Instant::now() < deadline, "{:?}", thread.status());
        std::thread::sleep(Duration::from_millis(10));
    }
    server.signal("-STOP");
    // Grants keep flowing while the sync thread waits on a frozen Redis.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    while started.elapsed() < Duration::from_millis(1_500) {
        let t = Instant::now();
        serve(&engine, "a", 1, 0);
        slowest = slowest.max(t.elapsed());
    }
    let status = thread.status();
    server.signal("-CONT");
    // A grant that waited on the sync would wait a whole socket timeout (P/2 = 100 ms); the
    // bound leaves room for the scheduler preempting a debug build on a busy CI machine.
    assert!(
        slowest < Duration::from_millis(45),
        "a grant waited {slowest:?}"
    );
    assert!(status.consecutive_failures >= 3, "{status:?}");
    assert!(status.degraded, "{status:?}");
    // Redis back: the thread reconnects and syncs again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while thread.status().consecutive_failures > 0 {
        assert!(Instant::now() < deadline, "{:?}", thread.status());
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopping = Instant::now();
    thread.stop();
    assert!(stopping.elapsed() < Duration::from_secs(1));
}
