//! Model 2: the ticket state machine (`generation << 32 | state`, every move a CAS).
//!
//! A grant races a cancel; a requeue (complete, still refused) races a cancel; and two granters
//! on either side of the deadline race expiry against a grant, with a cancel on top. Every
//! ticket ends exactly once: the successful `complete`s, `cancel`s and `Expired` answers add up
//! to one, the engine's own counters agree, no permit or queue place is left behind, and the old
//! handle is refused as stale afterwards, even once its slab cell holds a new ticket.
#![cfg(loom)]

use fairq::{Completion, Engine, Error, NextGrant, Outcome, Request, Ticket};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tiny_config};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

fn config() -> fairq::Config {
    fairq::Config {
        queue_capacity: 1,
        max_in_flight: 2,
        ..tiny_config()
    }
}

/// Takes a grant at `now`; completes it if granted. Returns how many tickets this call ended.
fn grant_then_complete(engine: &Engine, now: u64) -> usize {
    match engine.next_grant_at(now) {
        NextGrant::Granted(g) => {
            // A cancel may end it between the grant and here: then complete finds it stale.
            match engine.complete_at(g.ticket, Outcome::Admitted, None, now) {
                Ok(_) => 1,
                Err(Error::StaleTicket) => 0,
                Err(e) => panic!("complete of a granted ticket failed: {e}"),
            }
        }
        NextGrant::Expired(_) => 1,
        NextGrant::Empty | NextGrant::AtCapacity => 0,
    }
}

/// Cancels `ticket`; returns 1 if this call ended it.
fn cancel(engine: &Engine, ticket: Ticket, now: u64) -> usize {
    match engine.cancel_at(ticket, now) {
        Ok(()) => 1,
        // Stale: it already ended. TicketState: a completer holds it (`REQUEUING`) and is
        // ending or requeuing it. Either way the cancel lost the race and changed nothing.
        Err(Error::StaleTicket | Error::TicketState) => 0,
        Err(e) => panic!("cancel failed: {e}"),
    }
}

/// Grants and completes whatever is still queued; returns how many tickets that ended.
fn drain(engine: &Engine, now: u64) -> usize {
    let mut ended = 0;
    loop {
        match engine.next_grant_at(now) {
            NextGrant::Empty => return ended,
            NextGrant::AtCapacity => panic!("no permit left: {:?}", engine.stats()),
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
                ended += 1;
            }
            NextGrant::Expired(_) => ended += 1,
        }
    }
}

/// What must hold once every thread is done: one end, nothing left over, stale handle refused.
fn assert_ended_once(engine: &Engine, ended: usize, ticket: Ticket) {
    assert_eq!(ended, 1, "the ticket ended {ended} times");
    let stats = engine.stats();
    assert_eq!(stats.enqueued, 1, "{stats:?}");
    assert_eq!(
        stats.ended(),
        1,
        "the engine counted {} ends: {stats:?}",
        stats.ended()
    );
    assert_eq!(stats.in_flight, 0, "a permit was lost: {stats:?}");
    assert_eq!(stats.queued, 0, "a queue place was lost: {stats:?}");
    assert_eq!(engine.cancel_at(ticket, 9), Err(Error::StaleTicket));
    assert_eq!(
        engine.complete_at(ticket, Outcome::Admitted, None, 9),
        Err(Error::StaleTicket)
    );
    // The slab has 3 cells (1 queued + 2 in flight) and a FIFO free list, so one of the next
    // three tickets reuses the old one's cell: the old handle must not reach it.
    let fresh: Vec<_> = (0..3)
        .map(|_| {
            let t = enqueue(engine, &request(tenant_a()), 9);
            if let NextGrant::Granted(g) = engine.next_grant_at(9) {
                assert_eq!(g.ticket, t);
            }
            t
        })
        .collect();
    assert!(fresh.iter().any(|t| t.0 as u32 == ticket.0 as u32));
    assert_eq!(engine.cancel_at(ticket, 9), Err(Error::StaleTicket));
    assert_eq!(
        engine.stats().in_flight,
        2,
        "only the fresh grants hold permits"
    );
}

fn grant_vs_cancel_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    let ticket = enqueue(&engine, &request(tenant_a()), 0);
    let ended = Arc::new(AtomicUsize::new(0));

    let granter = {
        let (engine, ended) = (Arc::clone(&engine), Arc::clone(&ended));
        thread::spawn(move || {
            ended.fetch_add(grant_then_complete(&engine, 1), Ordering::SeqCst);
        })
    };
    // Queued or granted, a live ticket can be cancelled; an ended one is stale.
    ended.fetch_add(cancel(&engine, ticket, 1), Ordering::SeqCst);
    granter.join().unwrap();
    assert_ended_once(&engine, ended.load(Ordering::SeqCst), ticket);
}

fn requeue_vs_cancel_model(push_fails: bool) {
    let engine = Arc::new(Engine::new(config()).unwrap());
    let ticket = enqueue(&engine, &request(tenant_a()), 0);
    let NextGrant::Granted(g) = engine.next_grant_at(0) else {
        panic!("no grant")
    };
    let ended = Arc::new(AtomicUsize::new(0));
    fairq::set_full_rings(push_fails);

    // Still refused: back into the queue (through REQUEUING), or refused if the push fails (see
    // `requeue_with_a_failing_push_races_cancel`), unless a cancel ended it first.
    let completer = {
        let (engine, ended) = (Arc::clone(&engine), Arc::clone(&ended));
        thread::spawn(move || {
            let retry = Outcome::StillRefused { retry_after_ns: 0 };
            match engine.complete_at(g.ticket, retry, None, 1) {
                Ok(Completion::Requeued { .. }) => {}
                Ok(Completion::Refused(_)) => {
                    ended.fetch_add(1, Ordering::SeqCst);
                }
                Ok(other) => panic!("requeue: {other:?}"),
                Err(Error::StaleTicket) => {} // the cancel ended it first
                Err(e) => panic!("complete failed: {e}"),
            }
        })
    };
    ended.fetch_add(cancel(&engine, ticket, 1), Ordering::SeqCst);
    completer.join().unwrap();
    fairq::set_full_rings(false);
    let ended = ended.load(Ordering::SeqCst) + drain(&engine, 2);
    assert_ended_once(&engine, ended, ticket);
}

fn grant_vs_expiry_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    // Deadline at 10 ns: a granter at 5 may grant it, a granter at 20 must expire it.
    let ticket = enqueue(
        &engine,
        &Request {
            timeout_ns: 10,
            ..request(tenant_a())
        },
        0,
    );
    let ended = Arc::new(AtomicUsize::new(0));

    let granters: Vec<_> = [5, 20]
        .into_iter()
        .map(|now| {
            let (engine, ended) = (Arc::clone(&engine), Arc::clone(&ended));
            thread::spawn(move || {
                ended.fetch_add(grant_then_complete(&engine, now), Ordering::SeqCst);
            })
        })
        .collect();
    ended.fetch_add(cancel(&engine, ticket, 20), Ordering::SeqCst);
    for granter in granters {
        granter.join().unwrap();
    }
    assert_ended_once(&engine, ended.load(Ordering::SeqCst), ticket);
}

#[test]
fn grant_races_cancel() {
    check("tickets::grant_vs_cancel", grant_vs_cancel_model);
}

#[test]
fn requeue_races_cancel() {
    check("tickets::requeue_vs_cancel", || {
        requeue_vs_cancel_model(false)
    });
}

/// The same race when the ring push fails (rings held full by unfinished producers): the
/// requeue ends the request refused, unless the cancel, which can land as soon as the ticket is
/// published for the push, ended it first; then `complete` reports it requeued (then cancelled).
#[test]
fn requeue_with_a_failing_push_races_cancel() {
    check("tickets::requeue_vs_cancel_push_fails", || {
        requeue_vs_cancel_model(true)
    });
}

#[test]
fn grant_races_expiry_and_cancel() {
    check("tickets::grant_vs_expiry", grant_vs_expiry_model);
}

/// Ticket moves as load-compare-store: a grant and a cancel can both win.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "tenant counts underflow")]
fn broken_ticket_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Ticket, || {
        check("tickets::grant_vs_cancel [broken]", grant_vs_cancel_model)
    });
}

/// A requeue whose push failed reports the request refused even when a cancel ended it: two
/// ends for one request.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "the ticket ended 2 times")]
fn broken_requeue_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Requeue, || {
        check("tickets::requeue_vs_cancel_push_fails [broken]", || {
            requeue_vs_cancel_model(true)
        })
    });
}
