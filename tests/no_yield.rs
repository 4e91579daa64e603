//! The hot path never waits on another thread with a system call.
//!
//! Two threads serve one tenant with a shallow queue, the case where they meet most: one holds
//! the tenant's turn while the other enqueues for it, and a producer may count its entry while an
//! earlier one has not written its own yet. A holder that finds its next entry not written yet
//! hands the tenant's turn to that entry's writer; it never waits, so never yields. The
//! process-wide count of yields must stay 0 while every request is still granted exactly once.
//!
//! This file holds one test, so no other test in the same process adds to the count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey};

/// Requests each tenant keeps queued: shallow, so the callers keep meeting on its turn.
const DEPTH: u32 = 2;
const RUN: Duration = Duration::from_millis(600);

fn run(tenants: &[(&str, u32)]) -> (u64, u64) {
    let engine = Engine::new(Config {
        enabled: true,
        max_tenants: 64,
        tenant_queue_capacity: DEPTH + 2,
        queue_capacity: 64,
        max_in_flight: 8,
        max_wait_ms: 3_600_000,
        ..Config::default()
    })
    .unwrap();
    let keys: Vec<TenantKey> = tenants
        .iter()
        .map(|&(name, weight)| {
            engine.set_weight(name, weight).unwrap();
            TenantKey::from_raw(name.as_bytes())
        })
        .collect();
    let now = fairq::now_ns();
    for (i, &key) in keys.iter().enumerate() {
        for _ in 0..DEPTH {
            let request = Request {
                user_data: i as u64,
                ..Request::new(key, Dimension::User)
            };
            assert!(matches!(
                engine.enqueue_at(&request, now),
                Ok(Enqueued::Queued { .. })
            ));
        }
    }
    let engine = Arc::new(engine);
    let keys = Arc::new(keys);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(3));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, keys, stop, start) = (
                Arc::clone(&engine),
                Arc::clone(&keys),
                Arc::clone(&stop),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                let mut cycles = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let now = fairq::now_ns();
                    match engine.next_grant_at(now) {
                        NextGrant::Granted(grant) => {
                            engine
                                .complete_at(grant.ticket, Outcome::Admitted, None, now)
                                .unwrap();
                            let request = Request {
                                user_data: grant.user_data,
                                ..Request::new(keys[grant.user_data as usize], Dimension::User)
                            };
                            let queued = engine.enqueue_at(&request, now).unwrap();
                            assert!(matches!(queued, Enqueued::Queued { .. }), "{queued:?}");
                            cycles += 1;
                        }
                        NextGrant::Empty | NextGrant::AtCapacity => std::hint::spin_loop(),
                        NextGrant::Expired(e) => panic!("nothing expires here: {e:?}"),
                    }
                }
                cycles
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    let cycles: u64 = callers.into_iter().map(|c| c.join().unwrap()).sum();
    // Whatever is still queued is granted once.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut drained = 0u64;
    while engine.stats().queued > 0 {
        assert!(Instant::now() < deadline, "stranded: {:?}", engine.stats());
        let now = fairq::now_ns();
        if let NextGrant::Granted(grant) = engine.next_grant_at(now) {
            engine
                .complete_at(grant.ticket, Outcome::Admitted, None, now)
                .unwrap();
            drained += 1;
        }
    }
    let stats = engine.stats();
    assert_eq!(
        drained,
        u64::from(DEPTH) * tenants.len() as u64,
        "{stats:?}"
    );
    assert_eq!(stats.granted, stats.enqueued, "{stats:?}");
    assert_eq!(stats.in_flight, 0, "{stats:?}");
    (cycles, fairq::debug_yields())
}

#[test]
fn two_callers_on_hot_tenants_never_yield() {
    let (one, yields) = run(&[("hot", 1)]);
    assert!(one > 0, "no cycle ran");
    assert_eq!(yields, 0, "one hot tenant: {yields} yields in {one} cycles");
    let (two, yields) = run(&[("heavy", 8), ("light", 1)]);
    assert!(two > 0, "no cycle ran");
    assert_eq!(
        yields, 0,
        "two hot tenants 8:1: {yields} yields in {two} cycles"
    );
}
