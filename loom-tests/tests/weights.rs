//! Model 4: replacing a weight at run time.
//!
//! `set_weight` allocates a weight class, publishes a new weight table (`ArcSwap`, an
//! `RwLock<Arc<_>>` under loom) and rewrites the live tenant's weight and class, while granters
//! and enqueuers keep going. Two races:
//! - against `next_grant`: once the swap is done and the tenant has taken its next turn (that is
//!   when it moves class), grants follow the new weight exactly (every 3 grants: A twice, B
//!   once), and the classes' SWRR current weights still sum to 0: no credit lost or made up;
//! - against the enqueue that claims the tenant's slot: the new weight is not lost (a fresh
//!   claim reads the table while `set_weight` may be looking for the slot).
#![cfg(loom)]

use fairq::{Completion, Engine, NextGrant, Outcome, TenantKey};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_b, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn config() -> fairq::Config {
    fairq::Config {
        max_in_flight: 2,
        ..tiny_config()
    }
}

/// Grants one request and puts it straight back (still refused, ready at once), so both tenants
/// stay backlogged. Returns the tenant served, if any.
fn grant_and_requeue(engine: &Engine, now: u64) -> Option<TenantKey> {
    match engine.next_grant_at(now) {
        NextGrant::Granted(g) => {
            let done = engine.complete_at(
                g.ticket,
                Outcome::StillRefused { retry_after_ns: 0 },
                None,
                now,
            );
            assert!(matches!(done, Ok(Completion::Requeued { .. })), "{done:?}");
            Some(g.tenant)
        }
        NextGrant::Empty | NextGrant::AtCapacity => None,
        NextGrant::Expired(e) => panic!("nothing expires here: {e:?}"),
    }
}

/// The SWRR current weights of the classes sum to 0 whenever no pick is in progress.
fn assert_credit_conserved(engine: &Engine) {
    let classes = engine.debug_classes();
    let sum: i64 = classes.iter().map(|&(_, _, current)| current).sum();
    assert_eq!(sum, 0, "SWRR credit lost or made up: {classes:?}");
}

fn swap_vs_grant_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    for _ in 0..2 {
        enqueue(&engine, &request(tenant_a()), 0);
        enqueue(&engine, &request(tenant_b()), 0);
    }
    let setter = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || engine.set_weight_key(tenant_a(), 2).unwrap())
    };
    let raced = grant_and_requeue(&engine, 1);
    setter.join().unwrap();
    assert!(
        raced.is_some(),
        "two ready tenants and a free permit, yet no grant"
    );
    assert_eq!(engine.weight_of(tenant_a()), 2);
    assert_credit_conserved(&engine);

    // A moves to its new class at its next turn; from then on every 3 grants give A two.
    let mut served = Vec::new();
    for _ in 0..9 {
        served.push(grant_and_requeue(&engine, 2).expect("backlogged tenants"));
        assert_credit_conserved(&engine);
    }
    let moved = served.iter().position(|&k| k == tenant_a()).unwrap() + 1;
    for window in served[moved..moved + 6].chunks(3) {
        let a = window.iter().filter(|&&k| k == tenant_a()).count();
        assert_eq!(
            a, 2,
            "not 2:1 after the swap: {served:?} (A moved at {moved})"
        );
    }
    let classes = engine.debug_classes();
    assert_eq!(classes.len(), 2, "{classes:?}");
    assert!(
        classes.iter().all(|&(_, ready, _)| ready == 1),
        "each class holds one ready tenant: {classes:?}"
    );
}

fn swap_vs_claim_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    let setter = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || engine.set_weight_key(tenant_a(), 2).unwrap())
    };
    // A's first enqueue claims a fresh slot and reads A's weight from the table.
    enqueue(&engine, &request(tenant_a()), 0);
    setter.join().unwrap();
    assert_eq!(
        engine.weight_of(tenant_a()),
        2,
        "the new weight was lost: the live slot kept the old one"
    );
}

#[test]
fn weight_swap_races_next_grant() {
    check("weights::swap_vs_grant", swap_vs_grant_model);
}

/// With batched picks: the class move drops the batch (a class became ready), so grants follow
/// the new weight as exactly.
#[test]
fn weight_swap_races_batched_grants() {
    fairq::with_batched_picks(|| check("weights::swap_vs_grant_batched", swap_vs_grant_model));
}

#[test]
fn weight_swap_races_slot_claim() {
    check("weights::swap_vs_claim", swap_vs_claim_model);
}

/// A granter that keeps the tenant in the class it took it from: the swap never takes effect.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "not 2:1 after the swap")]
fn broken_move_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Move, || {
        check("weights::swap_vs_grant [broken]", swap_vs_grant_model)
    });
}

/// The engine before the fix: `set_weight` walks past the slot being claimed and loses.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "the new weight was lost")]
fn broken_claim_loses_weight() {
    use fairq::broken::{with, Break};
    with(Break::Claim, || {
        check("weights::swap_vs_claim [broken]", swap_vs_claim_model)
    });
}
