//! Model 3: the tenant slot life cycle (`counts` = live << 32 | queued, plus `STEALING`).
//!
//! One tenant at a time (`max_tenants = 1`), slots reusable as soon as they are idle
//! (`tenant_idle_ms = 0`). Tenant A owns slot 0; while A's last ticket ends, tenant C, whose probe
//! chain starts at slot 0 too, reclaims ("steals") it, and A enqueues again. An enqueue must land
//! in a slot while it holds its own key: A's old live slot, or a fresh claim, never a slot that
//! now belongs to the other tenant. A second model races two first enqueues of one new tenant:
//! they must share one slot. The engine checks the key itself (`debug_assert_eq!` in
//! `enqueue_at`, on under `run.sh`); here every grant must name the tenant its ticket was
//! enqueued for, and the slot's counters must settle back to idle.
#![cfg(loom)]

use fairq::{Engine, Enqueued, NextGrant, Outcome, Reason, TenantKey, Ticket};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_c, tiny_config};
use loom::sync::Arc;
use loom::thread;

fn config() -> fairq::Config {
    fairq::Config {
        max_tenants: 1,
        ..tiny_config()
    }
}

/// Enqueues for `key`; a full table (the other tenant holds the only slot) is a fair outcome.
fn try_enqueue(engine: &Engine, key: TenantKey, now: u64) -> Option<(Ticket, TenantKey)> {
    match engine.enqueue_at(&request(key), now).unwrap() {
        Enqueued::Queued { ticket, .. } => Some((ticket, key)),
        Enqueued::Refused(r) => {
            assert_eq!(r.reason, Reason::TenantTableFull, "{r:?}");
            None
        }
    }
}

/// Grants everything left; each grant must name the tenant its ticket was enqueued for.
fn drain_and_check(engine: &Engine, queued: &[(Ticket, TenantKey)], now: u64) {
    let mut granted = 0;
    loop {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                let &(_, key) = queued
                    .iter()
                    .find(|(t, _)| *t == g.ticket)
                    .expect("granted a ticket nobody enqueued");
                assert_eq!(g.tenant, key, "a ticket was served as another tenant's");
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
                granted += 1;
            }
            NextGrant::Empty => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(granted, queued.len(), "a queued ticket was lost");
    let stats = engine.stats();
    assert_eq!(stats.tenants, 0, "the slot did not go idle: {stats:?}");
    assert_eq!((stats.queued, stats.in_flight), (0, 0), "{stats:?}");
}

fn reclaim_vs_enqueue_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    // A takes the slot and holds one grant.
    enqueue(&engine, &request(tenant_a()), 0);
    let NextGrant::Granted(held) = engine.next_grant_at(0) else {
        panic!("no grant")
    };

    // A's last ticket ends, so the slot goes idle and may be stolen...
    let completer = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            engine
                .complete_at(held.ticket, Outcome::Admitted, None, 1)
                .unwrap();
        })
    };
    // ...by C, while A enqueues again.
    let thief = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || try_enqueue(&engine, tenant_c(), 1))
    };
    let mut queued: Vec<_> = try_enqueue(&engine, tenant_a(), 1).into_iter().collect();
    completer.join().unwrap();
    queued.extend(thief.join().unwrap());
    assert!(!queued.is_empty(), "someone must get the slot");
    // Whoever holds the slot, the other tenant can take it once it drains.
    drain_and_check(&engine, &queued, 2);
    let later = try_enqueue(&engine, tenant_c(), 3).expect("C can take the idle slot");
    drain_and_check(&engine, &[later], 3);
}

fn claim_vs_claim_model() {
    // Two slots: a second enqueue that walks past the slot being claimed for its own tenant
    // would claim the other one, and the tenant would hold two queues.
    let engine = Arc::new(Engine::new(tiny_config()).unwrap());
    let other = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || try_enqueue(&engine, tenant_a(), 0))
    };
    let mut queued: Vec<_> = try_enqueue(&engine, tenant_a(), 0).into_iter().collect();
    queued.extend(other.join().unwrap());
    assert_eq!(queued.len(), 2, "a free slot, yet an enqueue was refused");
    let stats = engine.stats();
    assert_eq!(stats.tenants, 1, "one tenant took two slots: {stats:?}");
    drain_and_check(&engine, &queued, 1);
}

#[test]
fn reclaim_races_enqueue_of_the_old_tenant() {
    check("slots::reclaim_vs_enqueue", reclaim_vs_enqueue_model);
}

#[test]
fn two_enqueues_claim_one_slot_for_a_new_tenant() {
    check("slots::claim_vs_claim", claim_vs_claim_model);
}

/// A pin that trusts the key it read before pinning: A's enqueue lands in C's fresh slot.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "a request landed in another tenant's slot")]
fn broken_slot_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Slot, || {
        check(
            "slots::reclaim_vs_enqueue [broken]",
            reclaim_vs_enqueue_model,
        )
    });
}

/// The engine before the fix: a pin walks past a slot being claimed for its own key.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "one tenant took two slots")]
fn broken_claim_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Claim, || {
        check("slots::claim_vs_claim [broken]", claim_vs_claim_model)
    });
}
