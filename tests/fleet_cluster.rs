//! Fleet mode against a real Redis Cluster on loopback: six `redis-server --cluster-enabled yes`
//! (three masters, one replica each, node timeout 1 s) joined by `redis-cli --cluster create`.
//! Run with `cargo test -p fairq --features fleet --test fleet_cluster`.
#![cfg(feature = "fleet")]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis_server::RedisCluster;
use common::*;
use fairq::fleet::{cluster_nodes, Fleet, FleetConfig};
use fairq::{Config, Engine, Outcome};

fn new_engine() -> Arc<Engine> {
    Arc::new(engine(Config {
        max_in_flight: 64,
        ..Config::default()
    }))
}

fn serve(engine: &Engine, tenant: &str, n: usize, now: u64) {
    for _ in 0..n {
        queued(engine, &request(tenant), now);
    }
    for _ in 0..n {
        let g = granted(engine, now);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
    }
}

fn factor_of(engine: &Engine, name: &str) -> u32 {
    let mut out = Vec::new();
    engine.fleet_tenants(&mut out);
    out.iter().find(|t| t.tenant == key(name)).unwrap().factor
}

fn config(url: String, fleet: &str, replica: &str) -> FleetConfig {
    FleetConfig {
        url,
        fleet: fleet.into(),
        replica: replica.into(),
        smoothing: 1.0,
        ..FleetConfig::default()
    }
}

/// The fleet's served-cost total of `tenant` in the current epoch, read through a cluster
/// client (which follows the slot to its master).
fn total(cluster: &RedisCluster, fleet: &str, tenant: &str) -> Option<u64> {
    let nodes = cluster_nodes(&cluster.url()).unwrap();
    let client = redis::cluster::ClusterClient::new(nodes).unwrap();
    let mut con = client.get_connection().unwrap();
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        / 300_000;
    redis::cmd("HGET")
        .arg(format!("{{fairq:{fleet}}}:served:{epoch}"))
        .arg(format!("t:{:016x}", key(tenant).get()))
        .query(&mut con)
        .unwrap()
}

#[test]
fn urls_that_name_a_cluster() {
    assert_eq!(cluster_nodes("redis://127.0.0.1:6379/"), None);
    assert_eq!(
        cluster_nodes("redis+cluster://10.0.0.1:7000,10.0.0.2:7001/"),
        Some(vec![
            "redis://10.0.0.1:7000/".to_string(),
            "redis://10.0.0.2:7001/".to_string()
        ])
    );
    assert_eq!(
        cluster_nodes("redis://a:1/, redis://b:2/"),
        Some(vec!["redis://a:1/".to_string(), "redis://b:2/".to_string()])
    );
    // A cluster URL with no usable node is refused when the fleet is made, not at first sync.
    assert!(Fleet::new(new_engine(), config("redis+cluster:///".into(), "f", "r")).is_err());
}

/// The same traffic and the same factors as `fleet_redis.rs` on one node: both ways of naming
/// a cluster work, and the totals land exactly.
#[test]
fn a_cluster_fleet_converges_as_on_one_node() {
    let cluster = RedisCluster::start();
    let (e1, e2) = (new_engine(), new_engine());
    let list = cluster_nodes(&cluster.url()).unwrap().join(",");
    let mut f1 = Fleet::new(e1.clone(), config(cluster.url(), "two", "r1")).unwrap();
    let mut f2 = Fleet::new(e2.clone(), config(list, "two", "r2")).unwrap();
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
    // The first sync of each replica takes its baseline (10 "a" each, 10 "b" not counted).
    assert_eq!(total(&cluster, "two", "a"), Some(100));
    assert_eq!(total(&cluster, "two", "b"), Some(50));
}

/// Killing the master that owns the fleet's slot: the replicas degrade as they would with one
/// Redis down, and once the master's replica is promoted they sync again and their factors
/// come back, within the bounds the single-Redis harness holds (degraded within 1 s; synced
/// within 2 s of Redis being back, here of the promotion).
#[test]
fn killing_the_slot_owner_degrades_and_recovers_after_its_replica_is_promoted() {
    let mut cluster = RedisCluster::start();
    let (e1, e2) = (new_engine(), new_engine());
    let start = |e: &Arc<Engine>, r: &str| {
        Fleet::new(
            e.clone(),
            FleetConfig {
                smoothing: 0.5,
                ..config(cluster.url(), "failover", r)
            },
        )
        .unwrap()
        .start()
        .unwrap()
    };
    let (t1, t2) = (start(&e1, "r1"), start(&e2, "r2"));
    // r1 serves "a" 3x as much as r2: factors near 768 and 256.
    let phase = |until: Instant| {
        while Instant::now() < until {
            serve(&e1, "a", 3, 0);
            serve(&e2, "a", 1, 0);
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    phase(Instant::now() + Duration::from_secs(2));
    let before = (factor_of(&e1, "a"), factor_of(&e2, "a"));
    assert!(
        (700..=830).contains(&before.0) && (200..=320).contains(&before.1),
        "{before:?}"
    );

    let (master, replica) = cluster.owner(cluster.slot("{fairq:failover}"));
    let killed = Instant::now();
    cluster.kill(master);
    let mut degraded_at = None;
    let mut promoted_at = None;
    let deadline = killed + Duration::from_secs(15);
    while promoted_at.is_none() {
        assert!(Instant::now() < deadline, "replica {replica} not promoted");
        phase(Instant::now() + Duration::from_millis(20));
        if degraded_at.is_none() && t1.status().degraded && t2.status().degraded {
            degraded_at = Some(killed.elapsed());
        }
        if RedisCluster::is_master(replica) {
            promoted_at = Some(Instant::now());
        }
    }
    let promoted = promoted_at.unwrap();
    let degraded = degraded_at.expect("degraded before the promotion");
    assert!(
        degraded <= Duration::from_secs(1),
        "degraded after {degraded:?}"
    );
    // Synced again, and the factors back where they were.
    let mut recovered = None;
    while recovered.is_none() {
        assert!(
            promoted.elapsed() < Duration::from_secs(2),
            "not recovered 2 s after the promotion: {:?} {:?}, factors {} {}",
            t1.status(),
            t2.status(),
            factor_of(&e1, "a"),
            factor_of(&e2, "a")
        );
        phase(Instant::now() + Duration::from_millis(20));
        let (f1, f2) = (factor_of(&e1, "a"), factor_of(&e2, "a"));
        let ok = |s: fairq::fleet::FleetStatus| s.consecutive_failures == 0 && !s.degraded;
        if ok(t1.status())
            && ok(t2.status())
            && f1.abs_diff(before.0) <= 60
            && f2.abs_diff(before.1) <= 60
        {
            recovered = Some(promoted.elapsed());
        }
    }
    println!(
        "slot owner killed: both replicas degraded after {degraded:?}, replica promoted after \
         {:?}, synced with factors back {:?} after the promotion",
        promoted - killed,
        recovered.unwrap()
    );
    t1.stop();
    t2.stop();
}
