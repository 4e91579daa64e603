//! Model: the start-up's charge of the first window races a pick.
//!
//! Tenants A (weight 1) and B (weight 2) take both permits at once, each picked alone (the first
//! window); then each queues another request, which waits. Two threads each complete one grant
//! and call `next_grant`: one of them charges the first window (it sets the classes' SWRR
//! credits to what SWRR would hold had both been ready, while holding the batch computer's flag)
//! as the other picks. Both requests are granted, once each, and the credits sum to 0: the pick
//! that stepped during the charge kept its step.
#![cfg(loom)]

use fairq::{Engine, NextGrant, Outcome, Ticket};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_b, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn granted(engine: &Engine, now: u64) -> Ticket {
    match engine.next_grant_at(now) {
        NextGrant::Granted(g) => g.ticket,
        other => panic!("expected a grant: {other:?}"),
    }
}

fn charge_races_pick_model() {
    let engine = Arc::new(
        Engine::new(fairq::Config {
            max_in_flight: 2,
            ..tiny_config()
        })
        .unwrap(),
    );
    engine.set_weight_key(tenant_b(), 2).unwrap();
    // The first window: each granted alone, on a free permit.
    enqueue(&engine, &request(tenant_a()), 0);
    let first_a = granted(&engine, 0);
    enqueue(&engine, &request(tenant_b()), 0);
    let first_b = granted(&engine, 0);
    // Now requests wait.
    let second_a = enqueue(&engine, &request(tenant_a()), 0);
    let second_b = enqueue(&engine, &request(tenant_b()), 0);
    assert!(matches!(engine.next_grant_at(0), NextGrant::AtCapacity));

    let other = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            engine
                .complete_at(first_b, Outcome::Admitted, None, 1)
                .unwrap();
            engine.next_grant_at(1)
        })
    };
    engine
        .complete_at(first_a, Outcome::Admitted, None, 1)
        .unwrap();
    let mine = engine.next_grant_at(1);
    let theirs = other.join().unwrap();

    // A call may find the other's permit still out; whatever is left is granted afterwards.
    let mut got: Vec<u64> = [mine, theirs]
        .into_iter()
        .filter_map(|answer| match answer {
            NextGrant::Granted(g) => Some(g.ticket.0),
            NextGrant::AtCapacity | NextGrant::Empty => None,
            other => panic!("{other:?}"),
        })
        .collect();
    while let NextGrant::Granted(g) = engine.next_grant_at(2) {
        got.push(g.ticket.0);
    }
    got.sort_unstable();
    let mut want = vec![second_a.0, second_b.0];
    want.sort_unstable();
    assert_eq!(got, want, "each waiting request granted once");

    let classes = engine.debug_classes();
    let sum: i64 = classes.iter().map(|&(_, _, current)| current).sum();
    assert_eq!(sum, 0, "SWRR credit lost or made up: {classes:?}");
}

#[test]
fn first_window_charge_races_a_pick() {
    check("start::charge_races_pick", charge_races_pick_model);
}

/// A charge that stores the credits instead of adding the change: the racing pick's step is
/// lost.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "SWRR credit lost or made up")]
fn broken_first_window_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::FirstWindow, || {
        check("start::charge_races_pick [broken]", charge_races_pick_model)
    });
}
