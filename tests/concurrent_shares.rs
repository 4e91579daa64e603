//! Shares under concurrent callers. In its own test binary so no other test competes with its
//! two threads for the CPUs: a caller preempted while it holds a tenant is the one thing that
//! makes the others serve out of turn.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use common::*;
use fairq::{Config, Dimension, NextGrant, Outcome, Request, TenantKey};

/// Two threads enqueue, grant and complete for over 10^6 operations with every tenant kept
/// backlogged: grant shares stay within 2% of the weights and the in-flight bound holds.
#[test]
fn concurrent_shares_within_two_percent_of_weights() {
    const THREADS: usize = 2;
    const CYCLES_PER_THREAD: usize = 200_000; // 3 operations each: 1.2 million in all
    const MAX_IN_FLIGHT: u64 = 4;
    let weights = [1u32, 2, 4, 8];
    let engine = Arc::new(engine(Config {
        max_tenants: 16,
        tenant_queue_capacity: 64,
        queue_capacity: 256,
        max_in_flight: MAX_IN_FLIGHT as u32,
        ..Config::default()
    }));
    let keys: Vec<TenantKey> = (0..weights.len())
        .map(|i| TenantKey::from_raw(format!("w{}-{i}", weights[i]).as_bytes()))
        .collect();
    for (k, &w) in keys.iter().zip(&weights) {
        engine.set_weight_key(*k, w).unwrap();
        for _ in 0..16 {
            queued(&engine, &Request::new(*k, Dimension::User), 0);
        }
    }
    let active = Arc::new(AtomicU64::new(0));
    let counts: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (engine, active, counts, barrier, keys) = (
                engine.clone(),
                active.clone(),
                counts.clone(),
                barrier.clone(),
                keys.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let mut done = 0;
                while done < CYCLES_PER_THREAD {
                    match engine.next_grant_at(1) {
                        NextGrant::Granted(g) => {
                            let now_active = active.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now_active <= MAX_IN_FLIGHT, "in flight {now_active}");
                            let i = keys.iter().position(|k| *k == g.tenant).unwrap();
                            counts[i].fetch_add(1, Ordering::Relaxed);
                            active.fetch_sub(1, Ordering::SeqCst);
                            engine
                                .complete_at(g.ticket, Outcome::Admitted, None, 1)
                                .unwrap();
                            queued(&engine, &Request::new(g.tenant, Dimension::User), 1);
                            done += 1;
                        }
                        NextGrant::AtCapacity | NextGrant::Empty => std::hint::spin_loop(),
                        NextGrant::Expired(e) => panic!("nothing expires here: {e:?}"),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let counts: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let total: u64 = counts.iter().sum();
    let wsum: u32 = weights.iter().sum();
    for (i, &w) in weights.iter().enumerate() {
        let expected = total as f64 * f64::from(w) / f64::from(wsum);
        let error = (counts[i] as f64 - expected).abs() / expected;
        assert!(
            error <= 0.02,
            "tenant of weight {w}: {} grants, expected {expected:.0} ({:.2}% off); all {counts:?}",
            counts[i],
            error * 100.0
        );
    }
    let s = engine.stats();
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.granted, total);
    assert_eq!(s.enqueued, s.completed + s.queued);
}
