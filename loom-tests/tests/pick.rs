//! Model 5: the scheduler pick (SWRR over weight classes, then the class ring).
//!
//! Two threads call `next_grant` at once with two ready tenants, once in two weight classes
//! (A weight 1, B weight 2) and once in one class. A pick adds each class's weight to its SWRR
//! current weight and the winner pays the total; a pick whose class ring is momentarily empty
//! (the other thread holds the tenant) refunds and tries another class. Both threads get a
//! grant, the tickets are distinct, the per-tenant and engine counters add up, and the classes'
//! current weights sum to 0 again: no credit lost or made up. The `_batched` twins run the same
//! with batched picks (`sched.rs`): a batch computed, charged and read while the other granter
//! steps singly.
#![cfg(loom)]

use fairq::{Engine, NextGrant, Outcome};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_b, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn two_granters_model(weight_b: u32) {
    let engine = Arc::new(
        Engine::new(fairq::Config {
            max_in_flight: 2,
            ..tiny_config()
        })
        .unwrap(),
    );
    engine.set_weight_key(tenant_b(), weight_b).unwrap();
    let ticket_a = enqueue(&engine, &request(tenant_a()), 0);
    let ticket_b = enqueue(&engine, &request(tenant_b()), 0);

    let other = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || engine.next_grant_at(1))
    };
    let mine = engine.next_grant_at(1);
    let theirs = other.join().unwrap();

    let (NextGrant::Granted(g1), NextGrant::Granted(g2)) = (mine, theirs) else {
        panic!("two ready tenants, two permits, yet: {mine:?} / {theirs:?}");
    };
    assert_ne!(g1.ticket, g2.ticket, "one ticket granted twice");
    let mut got = [g1.ticket.0, g2.ticket.0];
    got.sort_unstable();
    let mut want = [ticket_a.0, ticket_b.0];
    want.sort_unstable();
    assert_eq!(got, want);
    assert_ne!(g1.tenant, g2.tenant);

    let per_tenant = |key| engine.tenant_granted(key).map(|(n, _)| n);
    assert_eq!(per_tenant(tenant_a()), Some(1));
    assert_eq!(per_tenant(tenant_b()), Some(1));
    let stats = engine.stats();
    assert_eq!((stats.granted, stats.in_flight, stats.queued), (2, 2, 0));

    let classes = engine.debug_classes();
    let sum: i64 = classes.iter().map(|&(_, _, current)| current).sum();
    assert_eq!(sum, 0, "SWRR credit lost or made up: {classes:?}");
    assert!(
        classes.iter().all(|&(_, ready, _)| ready == 0),
        "{classes:?}"
    );
    assert!(matches!(engine.next_grant_at(2), NextGrant::AtCapacity));
}

#[test]
fn two_granters_two_classes() {
    check("pick::two_classes", || two_granters_model(2));
}

#[test]
fn two_granters_one_class() {
    check("pick::one_class", || two_granters_model(1));
}

/// The same races with batched picks (off by default under loom): one granter computes a batch
/// and charges its net credit change while the other steps singly or reads the batch.
#[test]
fn two_granters_two_classes_batched() {
    fairq::with_batched_picks(|| check("pick::two_classes_batched", || two_granters_model(2)));
}

#[test]
fn two_granters_one_class_batched() {
    fairq::with_batched_picks(|| check("pick::one_class_batched", || two_granters_model(1)));
}

/// A batch that stores its credits instead of adding its net change: a concurrent single step
/// is lost.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "SWRR credit lost or made up")]
fn broken_batch_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Batch, || {
        fairq::with_batched_picks(|| {
            check("pick::two_classes_batched [broken]", || {
                two_granters_model(2)
            })
        })
    });
}

/// SWRR gain added by load-then-store: a concurrent pick's gain is lost.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "SWRR credit lost or made up")]
fn broken_pick_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Pick, || {
        check("pick::two_classes [broken]", || two_granters_model(2))
    });
}

/// Two classes become ready while another thread computes a batch of picks. The batch computer
/// must not record the new epoch with the old (empty) ready set: that batch of length 0 would
/// answer every later pick `Empty` while requests wait. (Two classes, because a pick with a sole
/// ready class reads the ready counts directly and never consults the batch.) After both
/// threads, each request is granted exactly once, by the racing granter or by later calls.
fn ready_during_batch_model() {
    let engine = Arc::new(Engine::new(tiny_config()).unwrap());
    engine.set_weight_key(tenant_b(), 2).unwrap();
    let enqueuer = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            [
                enqueue(&engine, &request(tenant_a()), 0),
                enqueue(&engine, &request(tenant_b()), 0),
            ]
        })
    };
    let racing = engine.next_grant_at(1);
    let tickets = enqueuer.join().unwrap();
    let mut granted = Vec::new();
    match racing {
        NextGrant::Granted(g) => {
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, 1)
                .unwrap();
            granted.push(g.ticket);
        }
        NextGrant::Empty => {}
        other => panic!("unexpected {other:?}"),
    }
    while granted.len() < tickets.len() {
        match engine.next_grant_at(2) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, 2)
                    .unwrap();
                granted.push(g.ticket);
            }
            other => panic!("a queued request is stuck: {other:?}, {:?}", engine.stats()),
        }
    }
    granted.sort_by_key(|t| t.0);
    let mut expected = tickets.to_vec();
    expected.sort_by_key(|t| t.0);
    assert_eq!(granted, expected);
    assert_eq!(engine.stats().granted, 2);
}

#[test]
fn class_ready_during_batch() {
    fairq::with_batched_picks(|| check("pick::ready_during_batch", ready_during_batch_model));
}

/// The epoch bump and its read as Relaxed hints: a batch can carry the new epoch and no pick.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "a queued request is stuck")]
fn broken_epoch_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Epoch, || {
        fairq::with_batched_picks(|| {
            check(
                "pick::ready_during_batch [broken]",
                ready_during_batch_model,
            )
        })
    });
}

/// A batch dropped only because a class left the ready set and came back, with every gain as
/// the batch recorded it, is resumed rather than recomputed (`classes/swrr.rs`).
/// Tenant B (weight 2) is granted from a batch, goes idle when its grant ends, and is queued
/// again; then two granters race, one resuming the batch while the other claims or steps
/// singly. Every ticket is granted exactly once, and the classes' credits still sum to 0.
fn resumed_batch_model() {
    let engine = Arc::new(
        Engine::new(fairq::Config {
            max_in_flight: 2,
            light_lane: false,
            ..tiny_config()
        })
        .unwrap(),
    );
    engine.set_weight_key(tenant_b(), 2).unwrap();
    let mut tickets = vec![
        enqueue(&engine, &request(tenant_a()), 0),
        enqueue(&engine, &request(tenant_a()), 0),
        enqueue(&engine, &request(tenant_b()), 0),
    ];
    let NextGrant::Granted(first) = engine.next_grant_at(1) else {
        panic!("two ready classes, yet no grant");
    };
    assert_eq!(
        first.tenant,
        tenant_b(),
        "SWRR picks the heavier class first"
    );
    engine
        .complete_at(first.ticket, Outcome::Admitted, None, 1)
        .unwrap();
    tickets.push(enqueue(&engine, &request(tenant_b()), 1));

    let grant_one = |engine: &Engine| match engine.next_grant_at(1) {
        NextGrant::Granted(g) => {
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, 1)
                .unwrap();
            Some(g.ticket)
        }
        NextGrant::Empty => None,
        other => panic!("unexpected {other:?}"),
    };
    let other = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || grant_one(&engine))
    };
    let mut granted = vec![first.ticket];
    granted.extend(grant_one(&engine));
    granted.extend(other.join().unwrap());
    while granted.len() < tickets.len() {
        match grant_one(&engine) {
            Some(t) => granted.push(t),
            None => panic!("a queued request is stuck: {:?}", engine.stats()),
        }
    }
    granted.sort_by_key(|t| t.0);
    tickets.sort_by_key(|t| t.0);
    assert_eq!(granted, tickets, "each ticket granted exactly once");
    let classes = engine.debug_classes();
    let sum: i64 = classes.iter().map(|&(_, _, current)| current).sum();
    assert_eq!(sum, 0, "SWRR credit lost or made up: {classes:?}");
}

#[test]
fn batch_resumed_after_a_class_returns() {
    fairq::with_batched_picks(|| check("pick::resumed_batch", resumed_batch_model));
}
