//! Model: the light-tenant lane's hand-off.
//!
//! Tenant A was served once and went idle, so when it comes back it is admitted to the lane. Its
//! enqueue (which activates it: stages its head, counts it ready in its class, pushes it to the
//! lane) races a `next_grant` that may take it from the lane, find its class counted ready with
//! an empty ring (the tenant is in the lane, or still being placed), or find nothing. Whatever
//! the interleaving: A's request is granted exactly once (by the racing call or the drain after
//! it), nothing is granted twice, and every class's ready count is back to 0 once A is idle; a
//! ready count never goes below zero (a debug assertion in the class's `leave`).
#![cfg(loom)]

use fairq::{Engine, NextGrant, Outcome};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn returning_tenant_model() {
    let engine = Arc::new(Engine::new(tiny_config()).unwrap());
    // A is served once and goes idle: the lane's clock has moved past its finish time.
    let first = enqueue(&engine, &request(tenant_a()), 0);
    let NextGrant::Granted(g) = engine.next_grant_at(0) else {
        panic!("a ready tenant and a free permit, yet no grant");
    };
    assert_eq!(g.ticket, first);
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, 0)
        .unwrap();

    let granter = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || engine.next_grant_at(1))
    };
    let ticket = enqueue(&engine, &request(tenant_a()), 1);
    let raced = granter.join().unwrap();
    let granted = match raced {
        NextGrant::Granted(g) => g,
        NextGrant::Empty => match engine.next_grant_at(2) {
            NextGrant::Granted(g) => g,
            other => panic!("A's request waits, yet the drain got {other:?}"),
        },
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(granted.ticket, ticket, "not A's request");
    let again = engine.next_grant_at(2);
    assert!(
        !matches!(again, NextGrant::Granted(_)),
        "granted twice: {again:?}"
    );
    let classes = engine.debug_classes();
    assert!(
        classes.iter().all(|&(_, ready, _)| ready == 0),
        "A is idle, yet counted ready: {classes:?}"
    );
    let stats = engine.stats();
    assert_eq!((stats.granted, stats.in_flight, stats.queued), (2, 1, 0));
}

#[test]
fn a_returning_tenant_races_next_grant() {
    check("lane::returning_tenant", returning_tenant_model);
}

/// A tenant handed to the lane before it is counted ready: a granter that takes it and sees it
/// go idle takes its class's ready count below zero.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "class ready count below zero")]
fn broken_lane_before_count_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Lane, || {
        check("lane::returning_tenant [broken]", returning_tenant_model)
    });
}
