//! Model 1: the in-flight permit counter.
//!
//! Two granters race `next_grant` for one permit and two ready tickets; each ends what it got
//! (one by `complete`, one by `cancel`). A granter takes the permit only for a head it is about
//! to grant, with one CAS that checks the bound. (A third granter multiplies the interleavings
//! of the pick past what loom explores in minutes; it adds no new way to take a permit.) Like tokio's `loom_semaphore_batch`, every holder of a grant bumps an `active`
//! counter and asserts it never exceeds the permit count, and reads `stats().in_flight` (never
//! above the bound, never 0 while it holds a grant; `release_permit` itself asserts the count
//! never goes below 0). After every ticket has ended the count is back at 0, and a later grant
//! succeeds: no permit was lost.
#![cfg(loom)]

use fairq::{Engine, NextGrant, Outcome};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tenant_b, tiny_config};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

const MAX_IN_FLIGHT: usize = 1;

/// Takes a grant if one is ready; while holding it, checks the bound; then ends it.
fn grant_and_end(engine: &Engine, active: &AtomicUsize, cancel: bool, now: u64) {
    match engine.next_grant_at(now) {
        NextGrant::Granted(grant) => {
            let holders = active.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(
                holders <= MAX_IN_FLIGHT,
                "in-flight bound broken: {holders} grants out at once"
            );
            let in_flight = engine.stats().in_flight;
            assert!(
                in_flight as usize <= MAX_IN_FLIGHT,
                "in_flight = {in_flight}, above max_in_flight"
            );
            assert!(in_flight >= 1, "a held grant is not counted");
            active.fetch_sub(1, Ordering::SeqCst);
            if cancel {
                engine.cancel_at(grant.ticket, now).unwrap();
            } else {
                engine
                    .complete_at(grant.ticket, Outcome::Admitted, None, now)
                    .unwrap();
            }
        }
        NextGrant::AtCapacity | NextGrant::Empty => {}
        NextGrant::Expired(e) => panic!("nothing can expire here: {e:?}"),
    }
}

fn permits_model() {
    let engine = Arc::new(Engine::new(tiny_config()).unwrap());
    let active = Arc::new(AtomicUsize::new(0));
    enqueue(&engine, &request(tenant_a()), 0);
    enqueue(&engine, &request(tenant_b()), 0);

    let granter = {
        let engine = Arc::clone(&engine);
        let active = Arc::clone(&active);
        thread::spawn(move || grant_and_end(&engine, &active, true, 1))
    };
    grant_and_end(&engine, &active, false, 1);
    granter.join().unwrap();

    // Drain what is left (a ticket no granter got a permit for).
    loop {
        match engine.next_grant_at(2) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, 2)
                    .unwrap();
            }
            NextGrant::Empty => break,
            other => panic!("unexpected {other:?} while draining"),
        }
    }
    let stats = engine.stats();
    assert_eq!(
        stats.in_flight, 0,
        "a permit was lost or doubled: {stats:?}"
    );
    assert_eq!(
        stats.queued, 0,
        "the queued and in-flight counts do not add up: {stats:?}"
    );
    assert_eq!(
        stats.enqueued,
        stats.ended(),
        "a ticket was lost: {stats:?}"
    );

    // No permit leaked: with one permit, a later grant must succeed.
    let later = enqueue(&engine, &request(tenant_b()), 3);
    match engine.next_grant_at(3) {
        NextGrant::Granted(g) => assert_eq!(g.ticket, later),
        other => panic!("a later grant failed: {other:?}"),
    }
}

#[test]
fn permits_stay_within_bounds_and_come_back() {
    check("in_flight::permits", permits_model);
}

/// A granter takes the permit for a queued head while a cancel ends that head: whichever wins,
/// the ticket ends once, the permit the losing granter took goes back, and the counts the stats
/// read are never above their bounds (a second thread reads them while the race runs). After
/// the race nothing is queued or in flight, and the permit is free for a later grant.
fn grant_vs_cancel_model() {
    let engine = Arc::new(Engine::new(tiny_config()).unwrap());
    let ticket = enqueue(&engine, &request(tenant_a()), 0);
    let granter = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || match engine.next_grant_at(1) {
            NextGrant::Granted(g) => {
                assert_eq!(g.ticket, ticket);
                // A cancel may end the granted ticket first.
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, 1)
                    .is_ok()
            }
            NextGrant::Empty => false,
            other => panic!("unexpected {other:?}"),
        })
    };
    let cancelled = engine.cancel_at(ticket, 1).is_ok();
    let stats = engine.stats();
    assert!(stats.in_flight <= 1, "in_flight above the bound: {stats:?}");
    assert!(stats.queued <= 1, "queued above the bound: {stats:?}");
    let completed = granter.join().unwrap();
    assert!(
        completed != cancelled,
        "the ticket must end exactly once: completed {completed}, cancelled {cancelled}"
    );
    let stats = engine.stats();
    assert_eq!((stats.queued, stats.in_flight), (0, 0), "{stats:?}");
    assert_eq!(stats.enqueued, stats.ended(), "{stats:?}");
    let later = enqueue(&engine, &request(tenant_b()), 2);
    match engine.next_grant_at(2) {
        NextGrant::Granted(g) => assert_eq!(g.ticket, later),
        other => panic!("the permit did not come back: {other:?}"),
    }
}

#[test]
fn grant_vs_cancel_ends_once_and_gives_the_permit_back() {
    check("in_flight::grant_vs_cancel", grant_vs_cancel_model);
}

/// Seats: two permits; tenant B holds one with a width-1 grant, tenant A's width-2 request
/// (as wide as the limit) is next and waits in the wide slot. Then, at once: the holder ends
/// B's grant, and a granter enqueues another width-1 request for B and asks for grants. Every
/// holder adds its width to `seats` and asserts the sum never passes the limit; the wide request
/// is granted once B's permit is back, before B's second request (nothing else starts while it
/// waits); at the end no permit is out and both come back for a later wide grant.
fn seats_model() {
    const SEATS: usize = 2;
    let engine = Arc::new(
        Engine::new(fairq::Config {
            max_in_flight: SEATS as u32,
            seats: true,
            ..tiny_config()
        })
        .unwrap(),
    );
    let seats = Arc::new(AtomicUsize::new(0));
    // The most seats seen out at once (by the holders' count), asserted once the threads have
    // joined, so a violation unwinds with no thread left inside the engine.
    let worst = AtomicUsize::new(0);
    let hold = |engine: &Engine, seats: &AtomicUsize, g: &fairq::Grant| {
        let held = seats.fetch_add(g.cost as usize, Ordering::SeqCst) + g.cost as usize;
        worst.fetch_max(held, Ordering::SeqCst);
        // The stats count grants, each at least one seat: never more than the seats either.
        worst.fetch_max(engine.stats().in_flight as usize, Ordering::SeqCst);
    };
    let b1 = enqueue(&engine, &request(tenant_b()), 0);
    let g1 = match engine.next_grant_at(0) {
        NextGrant::Granted(g) => g,
        other => panic!("the first grant failed: {other:?}"),
    };
    assert_eq!(g1.ticket, b1);
    hold(&engine, &seats, &g1);
    let wide = enqueue(
        &engine,
        &fairq::Request {
            cost: 2,
            ..request(tenant_a())
        },
        0,
    );
    match engine.next_grant_at(0) {
        NextGrant::AtCapacity => {}
        NextGrant::Granted(g) => {
            // Only with a permit still out: the seat bound (checked now, on one thread).
            hold(&engine, &seats, &g);
            let worst = worst.load(Ordering::SeqCst);
            assert!(
                worst <= SEATS,
                "seat bound broken: {worst} seats out at once"
            );
            panic!("the wide request must wait for the permit out");
        }
        other => panic!("the wide request must wait for the permit out: {other:?}"),
    }

    let completer = {
        let (engine, seats) = (Arc::clone(&engine), Arc::clone(&seats));
        thread::spawn(move || {
            seats.fetch_sub(1, Ordering::SeqCst);
            engine
                .complete_at(g1.ticket, Outcome::Admitted, None, 1)
                .unwrap();
        })
    };
    let b2 = enqueue(&engine, &request(tenant_b()), 1);
    let mut granted = Vec::new();
    if let NextGrant::Granted(g) = engine.next_grant_at(1) {
        hold(&engine, &seats, &g);
        granted.push(g);
    }
    completer.join().unwrap();
    // Drain: each grant is ended before the next is asked for.
    let mut order = Vec::new();
    for g in granted {
        order.push(g.ticket);
        seats.fetch_sub(g.cost as usize, Ordering::SeqCst);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 2)
            .unwrap();
    }
    loop {
        match engine.next_grant_at(2) {
            NextGrant::Granted(g) => {
                hold(&engine, &seats, &g);
                order.push(g.ticket);
                seats.fetch_sub(g.cost as usize, Ordering::SeqCst);
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, 2)
                    .unwrap();
            }
            NextGrant::Empty => break,
            other => panic!("unexpected {other:?} while draining"),
        }
    }
    let worst = worst.load(Ordering::SeqCst);
    assert!(
        worst <= SEATS,
        "seat bound broken: {worst} seats out at once"
    );
    assert_eq!(
        order,
        vec![wide, b2],
        "the wide request goes first, once, then B's"
    );
    let stats = engine.stats();
    assert_eq!((stats.queued, stats.in_flight), (0, 0), "{stats:?}");
    assert_eq!(
        stats.enqueued,
        stats.ended(),
        "a ticket was lost: {stats:?}"
    );
    let later = enqueue(
        &engine,
        &fairq::Request {
            cost: 3,
            ..request(tenant_a())
        },
        3,
    );
    match engine.next_grant_at(3) {
        NextGrant::Granted(g) => assert_eq!(g.ticket, later),
        other => panic!("the permits did not come back: {other:?}"),
    }
}

#[test]
fn seats_stay_within_the_limit_and_a_wide_request_runs_alone() {
    check("in_flight::seats", seats_model);
}

/// Seats, 2 permits: tenant B holds one, tenant A's cost-2 request is queued. At once: a
/// granter asks for a grant (A's request is next and needs both permits), and the holder ends
/// B's grant and asks for one too. Whatever the interleaving, one of the two calls grants A's
/// request: a granter that holds it in the wide slot after the permit came back must not
/// answer `AtCapacity`, since no completion would come back for it.
fn seats_wide_not_left_model() {
    let engine = Arc::new(
        Engine::new(fairq::Config {
            max_in_flight: 2,
            seats: true,
            ..tiny_config()
        })
        .unwrap(),
    );
    enqueue(&engine, &request(tenant_b()), 0);
    let g1 = match engine.next_grant_at(0) {
        NextGrant::Granted(g) => g,
        other => panic!("the first grant failed: {other:?}"),
    };
    let wide = enqueue(
        &engine,
        &fairq::Request {
            cost: 2,
            ..request(tenant_a())
        },
        0,
    );
    let completer = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            engine
                .complete_at(g1.ticket, Outcome::Admitted, None, 1)
                .unwrap();
            engine.next_grant_at(1)
        })
    };
    let mine = engine.next_grant_at(1);
    let theirs = completer.join().unwrap();
    let granted = [&mine, &theirs]
        .iter()
        .filter(|answer| matches!(answer, NextGrant::Granted(g) if g.ticket == wide))
        .count();
    assert_eq!(
        granted, 1,
        "the wide request was left waiting with no grant out: {mine:?} / {theirs:?}"
    );
}

#[test]
fn seats_a_held_wide_request_is_not_left_waiting() {
    check("in_flight::seats_wide_not_left", seats_wide_not_left_model);
}

/// A held wide request answers `AtCapacity` although the grant out ended meanwhile.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "left waiting")]
fn broken_held_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Held, || {
        check(
            "in_flight::seats_wide_not_left [broken]",
            seats_wide_not_left_model,
        )
    });
}

/// The wide request's permits taken while another permit is still out: the seat bound breaks.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "seat")]
fn broken_seats_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Seats, || {
        check("in_flight::seats [broken]", seats_model)
    });
}

/// `acquire_permit` as load-then-store: two granters both pass the check, so the count loses an
/// increment (caught as "in-flight count below zero" by `release_permit`'s assertion) or two
/// grants are out at once (caught as "in-flight bound broken").
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "in-flight")]
fn broken_permit_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Permit, || {
        check("in_flight::permits [broken]", permits_model)
    });
}
