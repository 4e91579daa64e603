//! Model: staging a tenant's next entry never waits for another thread.
//!
//! A tenant's queue is a ring whose producers claim a position, then write it. So a later
//! producer can count its entry while an earlier one has claimed the position before it and not
//! written it yet. The thread holding the tenant's turn (the producer that activated it, or the
//! granter moving on to the next head) then finds its next entry not there to take. It must not
//! wait for the writer (who may be descheduled): it hands the turn to the writer, who stages the
//! entry and places the tenant when it publishes it.
//!
//! Two producers race for one tenant that is idle (first model), or one producer races a thread
//! that enqueues and then takes the tenant's head (second model). Once every thread is done,
//! every request must be granted exactly once by plain `next_grant` calls, and the tenant must
//! end idle. The broken twin's writer drops the holder's hand-over, and its requests are never
//! granted.
#![cfg(loom)]

use fairq::{Engine, NextGrant, Outcome, Ticket};
use fairq_loom_tests::{check, enqueue, request, tenant_a, tiny_config};
use loom::sync::Arc;
use loom::thread;

/// No feature on (the fairness indicators, the light-tenant lane): their atomics would only
/// multiply the interleavings, and staging does not involve them.
fn config() -> fairq::Config {
    fairq::Config {
        tenant_queue_capacity: 3,
        indicators: false,
        light_lane: false,
        ..tiny_config()
    }
}

/// Enqueues a request of tenant A on another thread.
fn producer(engine: &Arc<Engine>) -> thread::JoinHandle<Ticket> {
    let engine = Arc::clone(engine);
    thread::spawn(move || enqueue(&engine, &request(tenant_a()), 0))
}

/// Grants and completes everything ready at `now`; returns the tickets granted.
fn drain(engine: &Engine, now: u64) -> Vec<Ticket> {
    let mut granted = Vec::new();
    loop {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
                granted.push(g.ticket);
            }
            NextGrant::Empty => return granted,
            other => panic!("unexpected {other:?}: {:?}", engine.stats()),
        }
    }
}

/// Every queued ticket is granted once, and the tenant ends idle with nothing left over.
fn assert_all_granted(engine: &Engine, mut queued: Vec<Ticket>) {
    let mut granted = drain(engine, 0);
    granted.sort_by_key(|t| t.0);
    queued.sort_by_key(|t| t.0);
    assert_eq!(granted, queued, "a queued request was not granted once");
    let stats = engine.stats();
    assert_eq!((stats.queued, stats.in_flight), (0, 0), "{stats:?}");
    assert_eq!(stats.granted, stats.enqueued, "{stats:?}");
}

fn activation_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    // Tenant A holds its slot (one grant out) and has nothing queued: the racing enqueues pin
    // the slot, and the one that counts the first entry activates the tenant.
    enqueue(&engine, &request(tenant_a()), 0);
    let NextGrant::Granted(held) = engine.next_grant_at(0) else {
        panic!("no grant")
    };
    let (p, q) = (producer(&engine), producer(&engine));
    let queued = vec![p.join().unwrap(), q.join().unwrap()];
    engine
        .complete_at(held.ticket, Outcome::Admitted, None, 0)
        .unwrap();
    assert_all_granted(&engine, queued);
}

fn next_head_model() {
    let engine = Arc::new(Engine::new(config()).unwrap());
    // Tenant A is ready with one head staged. One thread enqueues for it, then takes the grant
    // and moves on to the next head, while another thread's enqueue may have claimed the place
    // before its entry and not written it yet.
    let first = enqueue(&engine, &request(tenant_a()), 0);
    let granter = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            let mine = enqueue(&engine, &request(tenant_a()), 0);
            let NextGrant::Granted(g) = engine.next_grant_at(0) else {
                panic!("a staged head and a free permit, yet no grant")
            };
            (mine, g.ticket)
        })
    };
    let other = producer(&engine);
    let (mine, granted) = granter.join().unwrap();
    let mut queued = vec![first, mine, other.join().unwrap()];
    assert_eq!(granted, first, "the staged head is granted first");
    engine
        .complete_at(granted, Outcome::Admitted, None, 0)
        .unwrap();
    queued.retain(|&t| t != granted);
    assert_all_granted(&engine, queued);
}

#[test]
fn activation_hands_the_turn_to_the_writer() {
    check("staging::activation", activation_model);
}

#[test]
fn next_head_hands_the_turn_to_the_writer() {
    check("staging::next_head", next_head_model);
}

/// The writer publishes with a plain store and misses the hand-over: nobody holds the tenant's
/// turn, and its queued requests are stranded.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "a queued request was not granted once")]
fn broken_unwritten_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Unwritten, || {
        check("staging::activation (broken)", activation_model)
    });
}

/// The same broken holder, found by the granter's model.
#[cfg(fairq_broken)]
#[test]
#[should_panic(expected = "a queued request was not granted once")]
fn broken_unwritten_next_head_is_caught() {
    use fairq::broken::{with, Break};
    with(Break::Unwritten, || {
        check("staging::next_head (broken)", next_head_model)
    });
}
