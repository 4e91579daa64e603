//! Model: a full bulkhead pool's blocked tenants and the permit that frees.
//!
//! One pool of one permit, two tenants whose requests all go to it: A (weight 2, so a visit of
//! two wakes) and B (weight 1). Before the threads start, one thread grants, blocks and ends
//! grants until A has been granted on a wake with a wake of its visit left, and its next head is
//! ready. Then one thread ends that grant (the pool's permit frees and wakes a blocked tenant)
//! while the other asks for the next grant (A's head finds the pool full and blocks, in the
//! pool's visitor word, or finds it free and is granted). However they interleave, no tenant is left blocked with the pool
//! free: afterwards every queued request is granted, one at a time.
#![cfg(loom)]

use fairq::{Config, Engine, NextGrant, Outcome, Request, Ticket};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_b, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn to_pool(key: fairq::TenantKey) -> Request {
    Request {
        downstream: 0,
        ..request(key)
    }
}

fn granted(engine: &Engine, now: u64) -> Option<Ticket> {
    match engine.next_grant_at(now) {
        NextGrant::Granted(g) => Some(g.ticket),
        _ => None,
    }
}

fn pool_wakes_model() {
    let engine = Arc::new(
        Engine::new(Config {
            max_in_flight: 2,
            tenant_queue_capacity: 3,
            queue_capacity: 5,
            downstream_max_in_flight: vec![1],
            ..tiny_config()
        })
        .unwrap(),
    );
    engine.set_weight_key(tenant_a(), 2).unwrap();
    for _ in 0..3 {
        enqueue(&engine, &to_pool(tenant_a()), 0);
    }
    for _ in 0..2 {
        enqueue(&engine, &to_pool(tenant_b()), 0);
    }
    // One thread: a grant fills the pool, a second look blocks the tenants' heads, the grant
    // ends and wakes one of them; twice, so A is granted on a wake with a wake of its visit
    // left, and its next head is ready.
    let mut out = granted(&engine, 0).expect("the first grant");
    for _ in 0..2 {
        assert!(granted(&engine, 0).is_none(), "the pool has one permit");
        engine.complete_at(out, Outcome::Admitted, None, 0).unwrap();
        out = granted(&engine, 0).expect("a woken tenant is granted");
    }

    let ender = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            engine.complete_at(out, Outcome::Admitted, None, 1).unwrap();
        })
    };
    let taken = granted(&engine, 1);
    ender.join().unwrap();

    // Whatever happened, the pool is free or holds `taken`: the requests left are granted one
    // at a time.
    let mut grants = 3 + usize::from(taken.is_some());
    let mut out = taken;
    for _ in 0..4 {
        if let Some(t) = out.take() {
            engine.complete_at(t, Outcome::Admitted, None, 2).unwrap();
        }
        if let Some(t) = granted(&engine, 2) {
            grants += 1;
            out = Some(t);
        }
    }
    if let Some(t) = out {
        engine.complete_at(t, Outcome::Admitted, None, 2).unwrap();
    }
    let s = engine.stats();
    assert_eq!(
        (grants, s.queued, s.in_flight),
        (5, 0, 0),
        "a blocked tenant was forgotten with its pool free: {s:?}"
    );
}

#[test]
fn a_freed_pool_permit_wakes_its_blocked_tenants() {
    check("pools::wakes", pool_wakes_model);
}

/// A freed permit that never looks at the pool's visitor leaves that tenant blocked for good.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "forgotten")]
fn broken_pool_visitor_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::PoolVisitor, || {
        check("pools::wakes [broken]", pool_wakes_model)
    });
}
