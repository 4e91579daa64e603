//! The status dump (`Engine::status`): what it shows during a flood and after it, its order and
//! bound, names and tiers, its JSON and text forms, and its reads beside threads that grant.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use fairq::{Config, Enqueued, NextGrant, Outcome, Policy, StatusOrder, Tier};

fn config() -> Config {
    Config {
        max_tenants: 64,
        tenant_queue_capacity: 512,
        queue_capacity: 4096,
        max_in_flight: 4,
        ..Config::default()
    }
}

/// A flood from one tenant and a victim with one request, at `now`; four grants out (their
/// tickets returned).
fn flooded(now: u64) -> (fairq::Engine, Vec<fairq::Ticket>) {
    let engine = engine(config());
    engine.set_weight("flood", 1).unwrap();
    engine.set_weight("victim", 1).unwrap();
    for _ in 0..300 {
        queued(&engine, &request("flood"), 0);
    }
    let out = (0..4).map(|_| granted(&engine, 1).ticket).collect();
    queued(&engine, &request("victim"), now - 2 * MS);
    (engine, out)
}

#[test]
fn a_flood_shows_its_depth_and_the_victim_its_short_wait() {
    let now = 500 * MS;
    let (engine, _out) = flooded(now);
    let status = engine.status_at(10, StatusOrder::Depth, now);
    assert_eq!((status.in_flight, status.max_in_flight), (4, 4));
    assert_eq!(status.queued, 297);
    assert_eq!(status.busy_tenants, 2);
    let [flood, victim] = &status.tenants[..] else {
        panic!("two rows: {:?}", status.tenants);
    };
    assert_eq!(flood.name.as_deref(), Some("flood"));
    assert_eq!((flood.queued, flood.in_flight, flood.granted), (296, 4, 4));
    assert_eq!(flood.oldest_wait_ns, now, "queued at 0");
    assert_eq!(flood.state(), "backlogged");
    assert_eq!(victim.name.as_deref(), Some("victim"));
    assert_eq!((victim.queued, victim.in_flight), (1, 0));
    assert_eq!(victim.oldest_wait_ns, 2 * MS);
    assert_eq!(
        victim.state(),
        "light",
        "one request, and nothing served yet"
    );
    // By oldest wait the flood's head comes first too; cut to one row.
    let status = engine.status_at(1, StatusOrder::OldestWait, now);
    assert_eq!(status.tenants.len(), 1);
    assert_eq!(status.tenants[0].name.as_deref(), Some("flood"));
    assert_eq!(
        status.busy_tenants, 2,
        "the count is of every busy tenant, not the rows"
    );
}

#[test]
fn after_the_flood_the_rows_go() {
    let now = 500 * MS;
    let (engine, mut out) = flooded(now);
    loop {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => out.push(g.ticket),
            NextGrant::AtCapacity => {
                for t in out.drain(..) {
                    engine.complete_at(t, Outcome::Admitted, None, now).unwrap();
                }
            }
            NextGrant::Empty => break,
            NextGrant::Expired(e) => panic!("{e:?}"),
        }
    }
    let status = engine.status_at(10, StatusOrder::Depth, now);
    assert_eq!(
        status.tenants.len(),
        out.len().min(2),
        "only tenants with grants out stay"
    );
    assert!(status
        .tenants
        .iter()
        .all(|t| t.queued == 0 && t.in_flight > 0));
    for t in out {
        engine.complete_at(t, Outcome::Admitted, None, now).unwrap();
    }
    let status = engine.status_at(10, StatusOrder::Depth, now);
    assert!(status.tenants.is_empty(), "{:?}", status.tenants);
    assert_eq!(
        (status.busy_tenants, status.queued, status.in_flight),
        (0, 0, 0)
    );
}

#[test]
fn tiers_parking_and_the_json_and_text_forms() {
    let engine = engine(Config {
        policy: Policy {
            tiers: vec![Tier::new("gold", 8)],
            ..Policy::default()
        },
        ..config()
    });
    engine.set_tier("acme \"quoted\"", "gold").unwrap();
    let retry = fairq::Request {
        retry_after_ns: 50 * MS,
        ..request("acme \"quoted\"")
    };
    let Enqueued::Queued { .. } = engine.enqueue_at(&retry, 10 * MS).unwrap() else {
        panic!("not queued");
    };
    let status = engine.status_at(5, StatusOrder::Depth, 20 * MS);
    let row = &status.tenants[0];
    assert_eq!((row.weight, row.tier.as_deref()), (8, Some("gold")));
    assert_eq!(row.parked_for_ns, Some(40 * MS));
    assert_eq!(row.state(), "parked");

    let json: serde_json::Value = serde_json::from_str(&status.to_json()).expect("valid JSON");
    assert_eq!(json["queued"], 1);
    assert_eq!(json["order"], "depth");
    let t = &json["tenants"][0];
    assert_eq!(t["name"], "acme \"quoted\"");
    assert_eq!(t["tier"], "gold");
    assert_eq!(t["state"], "parked");
    assert_eq!(t["parked_for_ns"], 40 * MS);
    assert_eq!(
        t["tenant"],
        format!("{:016x}", key("acme \"quoted\"").get()),
        "keys are hex strings: JSON numbers lose 64-bit integers"
    );
    let text = status.to_text();
    assert!(text.lines().count() >= 3, "{text}");
    assert!(
        text.contains("acme \"quoted\"") && text.contains("parked"),
        "{text}"
    );
}

#[test]
fn names_are_those_of_the_latest_weight_table() {
    let engine = engine(config());
    engine.replace_weights([("old", 2)], 1).unwrap();
    engine.replace_weights([("new", 3)], 1).unwrap();
    queued(&engine, &request("old"), 0);
    queued(&engine, &request("new"), 0);
    queued(&engine, &request("anonymous"), 0);
    let status = engine.status_at(10, StatusOrder::Depth, 1);
    let name = |w: u32| {
        let row = status.tenants.iter().find(|t| t.weight == w).unwrap();
        row.name.clone()
    };
    assert_eq!(name(3).as_deref(), Some("new"));
    assert_eq!(
        status.tenants.iter().filter(|t| t.name.is_some()).count(),
        1
    );
    assert_eq!(status.tenants.len(), 3);
}

/// Threads enqueue, grant and complete while another takes dumps: every row stays within the
/// bounds (no torn row), and every request still ends exactly once.
#[test]
fn dumps_beside_granting_threads_read_whole_rows() {
    let engine = Arc::new(engine(Config {
        max_in_flight: 3,
        ..config()
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = if cfg!(miri) { 30 } else { 3_000 };
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                // Requests this thread ended: granted and completed here, or expired. A grant
                // may serve the other thread's request: each enqueue asks for one grant.
                let mut ended = 0u64;
                for i in 0..rounds {
                    let name = format!("t{}", (i + w) % 5);
                    let now = i as u64 * 1_000;
                    let _ = engine.enqueue_at(&request(&name), now);
                    loop {
                        match engine.next_grant_at(now) {
                            NextGrant::Granted(g) => {
                                engine
                                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                                    .unwrap();
                                ended += 1;
                                break;
                            }
                            NextGrant::Expired(_) => {
                                ended += 1;
                                break;
                            }
                            NextGrant::Empty => break,
                            NextGrant::AtCapacity => std::thread::yield_now(),
                        }
                    }
                }
                ended
            })
        })
        .collect();
    let reader = {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut dumps = 0;
            while !stop.load(Ordering::Relaxed) || dumps == 0 {
                let status = engine.status_at(8, StatusOrder::OldestWait, u64::MAX / 2);
                assert!(status.in_flight <= 3 && status.queued <= 4096);
                assert!(status.tenants.len() <= 5 && status.busy_tenants <= 5);
                for t in &status.tenants {
                    assert!(t.queued <= 512 && t.in_flight <= 3, "torn row: {t:?}");
                    assert!(t.queued + t.in_flight > 0, "an idle row: {t:?}");
                    assert!(t.name.as_deref().is_none_or(|n| n.starts_with('t')));
                }
                dumps += 1;
            }
            dumps
        })
    };
    let mut ended: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    let left = drain(&engine, u64::MAX / 2, 10_000);
    ended += left.completed + left.expired;
    let stats = engine.stats();
    assert_eq!(stats.enqueued, ended, "every request ended once");
    assert_eq!(stats.completed + stats.expired, ended);
    assert_eq!((stats.queued, stats.in_flight), (0, 0));
}

/// A dump is a read: one taken "an hour later" leaves the engine's clock where it was, so the
/// queued request keeps its budget.
#[test]
fn a_dump_does_not_move_the_engines_clock() {
    let engine = engine(Config {
        max_wait_ms: 60_000,
        ..config()
    });
    queued(&engine, &request("a"), MS);
    let status = engine.status_at(5, StatusOrder::Depth, 3_600_000 * MS);
    assert_eq!(status.tenants[0].oldest_wait_ns, 3_600_000 * MS - MS);
    let grant = granted(&engine, 2 * MS);
    assert_eq!(grant.remaining_budget_ns, 60_000 * MS - MS, "{grant:?}");
}
