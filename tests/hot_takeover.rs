//! A caller left waiting on a hot tenant takes it over when the caller serving it stops.
//!
//! Two callers on one tenant with a shallow queue: one of them serves it grant after grant, and
//! the other, finding it served again each time it looks, leaves it to that caller and answers
//! `Empty` having read only the tenant's grant count. That shortcut must never outlive the
//! server: once the server stops, the waiting caller's very next calls take the tenant over and
//! grant every request left, so a drain on its thread (which stops at the first `Empty`) leaves
//! nothing queued.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use fairq::{Config, Engine, NextGrant, Outcome, TenantKey};

const ROUNDS: usize = 20;

/// Grants the server makes per round: `FAIRQ_TAKEOVER_GRANTS`, else 5,000 (CI's
/// ThreadSanitizer run, about ten times slower, takes a tenth).
fn server_grants() -> u64 {
    std::env::var("FAIRQ_TAKEOVER_GRANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

/// One `next_grant`: a grant is completed at once and its tenant returned; `None` when there
/// was nothing to grant.
fn grant_one(engine: &Engine) -> Option<TenantKey> {
    match engine.next_grant_at(0) {
        NextGrant::Granted(g) => {
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, 0)
                .unwrap();
            Some(g.tenant)
        }
        NextGrant::Empty | NextGrant::AtCapacity => None,
        NextGrant::Expired(e) => panic!("nothing expires here: {e:?}"),
    }
}

/// Enqueues for `tenant`, then asks until a grant comes.
fn cycle(engine: &Engine, tenant: &str) {
    queued(engine, &request(tenant), 0);
    while grant_one(engine).is_none() {
        std::hint::spin_loop();
    }
}

#[test]
fn a_caller_left_waiting_takes_over_when_the_server_stops() {
    for tenants in [&["hot"][..], &["hot", "light"][..]] {
        for _ in 0..ROUNDS {
            let engine = Arc::new(engine(Config {
                max_tenants: 4,
                tenant_queue_capacity: 4,
                queue_capacity: 8,
                max_in_flight: 2,
                max_wait_ms: 3_600_000,
                ..Config::default()
            }));
            if tenants.len() == 2 {
                engine.set_weight("hot", 8).unwrap();
            }
            for tenant in tenants {
                queued(&engine, &request(tenant), 0);
            }
            let server_done = AtomicBool::new(false);
            let grants = server_grants();
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    for i in 0..grants {
                        cycle(&engine, tenants[i as usize % tenants.len()]);
                    }
                    // Release: the server's last grant and completion come before the waiter's
                    // drain.
                    server_done.store(true, Ordering::Release);
                });
                scope.spawn(|| {
                    // Acquire: pairs with the server's Release.
                    while !server_done.load(Ordering::Acquire) {
                        match grant_one(&engine) {
                            Some(granted) => {
                                let name = tenants.iter().find(|&&t| key(t) == granted);
                                queued(&engine, &request(name.expect("a known tenant")), 0);
                            }
                            None => std::hint::spin_loop(),
                        }
                    }
                    // The server has stopped for good: everything left is this caller's to
                    // grant, and an `Empty` before the queue is empty ends the drain early.
                    let drained = drain(&engine, 0, 100);
                    assert_eq!(drained.expired, 0);
                    let stats = engine.stats();
                    assert_eq!(
                        stats.queued, 0,
                        "the waiting caller answered Empty with requests queued and no other \
                         caller left: {drained:?}, {stats:?}"
                    );
                });
            });
            let stats = engine.stats();
            assert_eq!((stats.queued, stats.in_flight), (0, 0), "{stats:?}");
            assert_eq!(stats.ended(), stats.enqueued, "{stats:?}");
        }
    }
}
