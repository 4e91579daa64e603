//! The fairness guarantee: exact weighted windows on one thread, shares within 2% under
//! concurrent callers, and conservation of tickets under a mixed concurrent workload.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use common::*;
use fairq::{Completion, Config, Dimension, Enqueued, NextGrant, Outcome, Request, TenantKey};

/// One permit, one tenant per weight of `weights` (keys `tenant-<i>`), each with `queued_each`
/// requests queued.
fn weighted_tenants(weights: &[u32], queued_each: usize) -> (fairq::Engine, Vec<TenantKey>) {
    let engine = engine(Config {
        max_tenants: weights.len() as u32,
        tenant_queue_capacity: 4,
        queue_capacity: 4 * weights.len() as u32,
        max_in_flight: 1,
        ..Config::default()
    });
    let keys: Vec<TenantKey> = (0..weights.len())
        .map(|i| TenantKey::from_raw(format!("tenant-{i}").as_bytes()))
        .collect();
    for (k, &w) in keys.iter().zip(weights) {
        engine.set_weight_key(*k, w).unwrap();
    }
    for k in &keys {
        for _ in 0..queued_each {
            queued(&engine, &Request::new(*k, Dimension::User), 0);
        }
    }
    (engine, keys)
}

/// All tenants backlogged and ready, one caller: every window of W = Σw grants starting at a
/// multiple of W gives tenant i exactly w_i grants.
fn check_windows(weights: &[u32], windows: usize) {
    let (engine, keys) = weighted_tenants(weights, 2);
    let index: std::collections::HashMap<TenantKey, usize> =
        keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let total: u32 = weights.iter().sum();
    for window in 0..windows {
        let mut got = vec![0u32; weights.len()];
        for _ in 0..total {
            let g = granted(&engine, 1);
            got[index[&g.tenant]] += 1;
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, 1)
                .unwrap();
            queued(&engine, &Request::new(g.tenant, Dimension::User), 1);
        }
        assert_eq!(got, weights, "window {window} of weights {weights:?}");
    }
}

/// A tenant that keeps going idle and coming back (one request at a time, re-sent only every
/// third grant) makes its class join and leave the ready set: each time the scheduler's batch of
/// precomputed picks is dropped. The always-backlogged tenants must still share exactly by
/// weight among themselves: a dropped batch's unclaimed picks were charged in advance and must be
/// refunded, or the classes that won them lose service.
#[test]
fn a_flickering_class_leaves_the_others_shares_exact() {
    let weights = [2u32, 4, 8];
    let engine = engine(Config {
        max_tenants: 4,
        tenant_queue_capacity: 4,
        queue_capacity: 16,
        max_in_flight: 1,
        ..Config::default()
    });
    let keys: Vec<TenantKey> = (0..3)
        .map(|i| TenantKey::from_raw(format!("steady-{i}").as_bytes()))
        .collect();
    for (k, &w) in keys.iter().zip(&weights) {
        engine.set_weight_key(*k, w).unwrap();
        for _ in 0..2 {
            queued(&engine, &Request::new(*k, Dimension::User), 0);
        }
    }
    let flicker = key("flicker");
    engine.set_weight_key(flicker, 3).unwrap();
    queued(&engine, &Request::new(flicker, Dimension::User), 0);
    let mut got = [0u64; 3];
    let mut flicker_grants = 0u64;
    let mut flicker_queued = true;
    for round in 0..140_000u64 {
        let g = granted(&engine, 1);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 1)
            .unwrap();
        match keys.iter().position(|k| *k == g.tenant) {
            Some(i) => {
                got[i] += 1;
                queued(&engine, &Request::new(g.tenant, Dimension::User), 1);
            }
            None => {
                flicker_grants += 1;
                flicker_queued = false; // its class just left the ready set
            }
        }
        if round % 3 == 0 && !flicker_queued {
            queued(&engine, &Request::new(flicker, Dimension::User), 1);
            flicker_queued = true;
        }
    }
    assert!(
        flicker_grants > 10_000,
        "the flickering tenant was served: {flicker_grants}"
    );
    let total: u64 = got.iter().sum();
    for (i, &w) in weights.iter().enumerate() {
        let share = got[i] as f64 / total as f64;
        let want = f64::from(w) / 14.0;
        assert!(
            (share - want).abs() / want < 0.01,
            "steady tenant {i} (weight {w}) got {share:.4} of the steady grants, want {want:.4}: \
             {got:?}, flicker {flicker_grants}"
        );
    }
}

#[test]
fn window_weights_5_1_1() {
    check_windows(&[5, 1, 1], 20);
}

#[test]
fn window_weights_8_4_2_1() {
    check_windows(&[8, 4, 2, 1], 20);
}

/// One request per tenant, sent again right after its grant: each grant makes the tenant idle
/// and ready again before the next pick, so its class leaves the ready set and comes back (the
/// precomputed picks are dropped, or resumed when every class's gain is back as it was), and
/// the light-tenant lane may serve it on its return. Each tenant's count stays within a few
/// grants of its weighted share at every window boundary, over the whole run.
fn check_shares_one_request_each(weights: &[u32], windows: u64) {
    let (engine, keys) = weighted_tenants(weights, 1);
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let mut got = vec![0u64; weights.len()];
    for window in 1..=windows {
        for _ in 0..total {
            let g = granted(&engine, 1);
            got[keys.iter().position(|k| *k == g.tenant).unwrap()] += 1;
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, 1)
                .unwrap();
            queued(&engine, &Request::new(g.tenant, Dimension::User), 1);
        }
        for (i, &w) in weights.iter().enumerate() {
            let due = window * u64::from(w);
            assert!(
                got[i].abs_diff(due) <= 4,
                "after {window} windows of weights {weights:?}: tenant {i} got {}, due {due}",
                got[i]
            );
        }
    }
}

/// A class that comes back to the ready set while a batch of precomputed picks made without it
/// is still current must not wait for that batch to run out: with three classes of equal
/// weight (the light-tenant lane off, so only the rotation serves it), a tenant that goes idle
/// for two grants at a time is served within three picks of each return.
#[test]
fn a_returning_class_is_not_held_behind_a_batch() {
    let engine = engine(Config {
        max_tenants: 4,
        tenant_queue_capacity: 4,
        queue_capacity: 16,
        max_in_flight: 1,
        light_lane: false,
        ..Config::default()
    });
    let steady = [key("steady-a"), key("steady-b")];
    let returning = key("returning");
    engine.set_weight_key(steady[1], 2).unwrap();
    engine.set_weight_key(returning, 3).unwrap();
    for k in steady {
        for _ in 0..2 {
            queued(&engine, &Request::new(k, Dimension::User), 0);
        }
    }
    queued(&engine, &Request::new(returning, Dimension::User), 0);
    let (mut away, mut waited, mut served) = (None, 0u32, 0u32);
    for _ in 0..30_000 {
        let g = granted(&engine, 1);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 1)
            .unwrap();
        if g.tenant == returning {
            assert!(waited <= 3, "served {waited} picks after it came back");
            served += 1;
            away = Some(0);
        } else {
            queued(&engine, &Request::new(g.tenant, Dimension::User), 1);
            waited += 1;
        }
        match away {
            Some(2) => {
                queued(&engine, &Request::new(returning, Dimension::User), 1);
                (away, waited) = (None, 0);
            }
            Some(n) => away = Some(n + 1),
            None => {}
        }
    }
    assert!(
        served > 4_000,
        "the returning tenant was served {served} times"
    );
}

#[test]
fn shares_8_1_one_request_each() {
    check_shares_one_request_each(&[8, 1], 2_000);
}

#[test]
fn shares_8_4_2_1_one_request_each() {
    check_shares_one_request_each(&[8, 4, 2, 1], 1_000);
}

#[test]
fn window_1000_tenants_mixed_weights() {
    // A fixed pseudo-random mix of tiers.
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let weights: Vec<u32> = (0..1000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            [1, 2, 4, 8][(x % 4) as usize]
        })
        .collect();
    check_windows(&weights, 3);
}

/// Four threads mix every operation: enqueue (with Retry-After and short budgets), grant,
/// complete admitted or still refused, cancel queued and granted tickets. Every ticket that was
/// queued ends exactly once, and the engine's counters agree with what the callers saw.
#[test]
fn concurrent_every_ticket_ends_exactly_once() {
    const THREADS: usize = 4;
    const STEPS: u64 = 60_000;
    let engine = Arc::new(engine(Config {
        max_tenants: 16,
        tenant_queue_capacity: 16,
        queue_capacity: 128,
        max_in_flight: 3,
        max_wait_ms: 5,
        tenant_idle_ms: 0,
        ..Config::default()
    }));
    engine.set_weight("t1", 3).unwrap();
    let clock = Arc::new(AtomicU64::new(1));
    let queued_total = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS as u64)
        .map(|id| {
            let (engine, clock, queued_total, ended, barrier) = (
                engine.clone(),
                clock.clone(),
                queued_total.clone(),
                ended.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut mine = Vec::new(); // tickets this thread queued, to cancel some
                barrier.wait();
                for _ in 0..STEPS {
                    let now = clock.fetch_add(2_000, Ordering::Relaxed); // 2 µs per step
                    let roll = next() % 100;
                    if roll < 40 {
                        let req = Request {
                            retry_after_ns: if next() % 4 == 0 { 1_000_000 } else { 0 },
                            timeout_ns: next() % 8_000_000,
                            ..Request::new(
                                TenantKey::from_raw(format!("t{}", next() % 6).as_bytes()),
                                Dimension::User,
                            )
                        };
                        if let Enqueued::Queued { ticket, .. } =
                            engine.enqueue_at(&req, now).unwrap()
                        {
                            queued_total.fetch_add(1, Ordering::Relaxed);
                            mine.push(ticket);
                        }
                    } else if roll < 50 {
                        if let Some(t) = mine.pop() {
                            if engine.cancel_at(t, now).is_ok() {
                                ended.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    } else {
                        match engine.next_grant_at(now) {
                            NextGrant::Granted(g) => {
                                let outcome = match next() % 10 {
                                    0 => {
                                        // Cancel the grant instead of completing it.
                                        if engine.cancel_at(g.ticket, now).is_ok() {
                                            ended.fetch_add(1, Ordering::Relaxed);
                                        }
                                        continue;
                                    }
                                    1..=3 => Outcome::StillRefused {
                                        retry_after_ns: next() % 3_000_000,
                                    },
                                    _ => Outcome::Admitted,
                                };
                                match engine.complete_at(g.ticket, outcome, None, now) {
                                    Ok(Completion::Requeued { .. }) => {}
                                    Ok(_) => {
                                        ended.fetch_add(1, Ordering::Relaxed);
                                    }
                                    // Its enqueuer cancelled it meanwhile (and counted it).
                                    Err(fairq::Error::StaleTicket) => {}
                                    Err(e) => panic!("completing our own grant: {e}"),
                                }
                            }
                            NextGrant::Expired(_) => {
                                ended.fetch_add(1, Ordering::Relaxed);
                            }
                            NextGrant::Empty | NextGrant::AtCapacity => {}
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Drain: time passes until every queued request is granted or expires.
    let mut now = clock.load(Ordering::Relaxed);
    loop {
        now += 1_000_000;
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
                ended.fetch_add(1, Ordering::Relaxed);
            }
            NextGrant::Expired(_) => {
                ended.fetch_add(1, Ordering::Relaxed);
            }
            NextGrant::AtCapacity => panic!("nothing is in flight now"),
            NextGrant::Empty => {
                if engine.stats().queued == 0 {
                    break;
                }
            }
        }
    }
    let s = engine.stats();
    let queued_total = queued_total.load(Ordering::Relaxed);
    assert!(queued_total > 10_000, "the workload queued {queued_total}");
    assert_eq!(s.enqueued, queued_total);
    assert_eq!(
        ended.load(Ordering::Relaxed),
        queued_total,
        "each ticket ends once"
    );
    assert_eq!(s.ended(), queued_total);
    assert_eq!((s.queued, s.in_flight, s.tenants), (0, 0, 0));
    assert!(s.cancelled > 0 && s.expired > 0 && s.requeued > 0 && s.completed > 0);
}
