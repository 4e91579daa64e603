//! With every policy and bulkheads on, and metrics rendered between runs, `enqueue`,
//! `next_grant`, `complete` and `cancel` still allocate nothing.

mod common;

use common::*;
use fairq::{
    Config, Dimension, FeedbackController, NextGrant, Outcome, Policy, Request, StarvationGuard,
    TenantKey, WaitBoost,
};

#[global_allocator]
static ALLOCATOR: common::alloc::CountingAllocator = common::alloc::CountingAllocator;

use common::alloc::counting;

#[test]
fn hot_path_allocates_nothing_with_policies_bulkheads_and_metrics_on() {
    let engine = engine(Config {
        max_tenants: 128,
        tenant_queue_capacity: 8,
        queue_capacity: 512,
        max_in_flight: 6,
        max_wait_ms: 40,
        tenant_idle_ms: 0,
        max_weight_classes: 16,
        policy: Policy {
            tiers: Policy::standard_tiers(),
            starvation_guard: Some(StarvationGuard::default()),
            wait_boost: Some(WaitBoost {
                after_ms: 1_000,
                max_boosted: 8,
            }),
            feedback: Some(FeedbackController {
                period_ms: 60_000,
                min_expected_cost: 1,
                ..FeedbackController::default()
            }),
        },
        downstream_max_in_flight: vec![2, 3, 6],
        ..Config::default()
    });
    let keys: Vec<TenantKey> = (0..150)
        .map(|i| TenantKey::from_raw(format!("t{i}").as_bytes()))
        .collect();
    let tiers = ["enterprise", "pro", "starter", "free"];
    for (i, k) in keys.iter().enumerate().take(60) {
        engine.set_tier_key(*k, tiers[i % 4]).unwrap();
    }
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut held = Vec::with_capacity(64);
    let mut now = 0u64;
    let mut allocations = 0;
    for round in 0..200u64 {
        // Off the hot path, between runs: tick (boosts, feedback) and render the metrics.
        engine.tick_at(now);
        let text = engine.prometheus_text_at(now);
        assert!(text.contains("rate_limit_fair_queue_downstream_in_flight"));
        let (_, n) = counting(|| {
            for _ in 0..500 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                now += 50_000 + rng % 200_000;
                let req = Request {
                    retry_after_ns: if rng % 5 == 0 { 2 * MS } else { 0 },
                    cost: 1 + (rng >> 12) as u32 % 3,
                    downstream: (rng >> 20) as u32 % 3,
                    ..Request::new(keys[(rng >> 32) as usize % keys.len()], Dimension::User)
                };
                if let Ok(fairq::Enqueued::Queued { ticket, .. }) = engine.enqueue_at(&req, now) {
                    if rng % 9 == 0 && held.len() < held.capacity() {
                        held.push(ticket); // cancelled later, queued or granted
                    }
                }
                match engine.next_grant_at(now) {
                    NextGrant::Granted(g) => {
                        let outcome = if rng % 4 == 0 {
                            Outcome::StillRefused { retry_after_ns: MS }
                        } else {
                            Outcome::Admitted
                        };
                        if rng % 11 != 0 {
                            let _ = engine.complete_at(g.ticket, outcome, Some(2), now);
                        } else if held.len() < held.capacity() {
                            held.push(g.ticket);
                        }
                    }
                    NextGrant::Expired(_) | NextGrant::Empty | NextGrant::AtCapacity => {}
                }
                if rng % 7 == 0 {
                    if let Some(t) = held.pop() {
                        let _ = engine.cancel_at(t, now);
                    }
                }
            }
        });
        allocations += n;
        now += if round % 50 == 49 { 61_000 * MS } else { 0 };
    }
    assert_eq!(allocations, 0, "allocations on the hot path");
    let stats = engine.stats();
    assert!(stats.granted > 10_000, "{stats:?}");
}
