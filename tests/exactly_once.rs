//! Every ticket ends exactly once, and the bounds count live requests only.
//!
//! Regressions of races and bookkeeping an outside suite found: a requeue racing a cancel ended
//! one request twice, cancelled entries kept their places in a tenant's queue (and in the global
//! bound), and a gauge read above its bound while a reservation was undone.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use common::*;
use fairq::{Completion, Config, Enqueued, Error, NextGrant, Outcome, Reason, Request};

fn small(tenant_queue_capacity: u32, queue_capacity: u32, max_in_flight: u32) -> fairq::Engine {
    engine(Config {
        max_tenants: 8,
        tenant_queue_capacity,
        queue_capacity,
        max_in_flight,
        tenant_idle_ms: 0,
        ..Config::default()
    })
}

/// A tenant with fewer live requests than its bound can always enqueue and requeue, however
/// many of its requests were cancelled before (while nobody served it: the permit is held).
#[test]
fn cancelled_entries_free_their_places_in_the_tenant_bound() {
    let engine = small(2, 64, 1);
    let a1 = queued(&engine, &request("a"), 0);
    let g = granted(&engine, 0);
    assert_eq!(g.ticket, a1);
    // The only permit is out: nobody serves tenant a. Cancel many of its requests.
    for round in 0..1_000 {
        let t = queued(&engine, &request("a"), 1);
        engine.cancel_at(t, 1).unwrap();
        assert_eq!(engine.stats().queued, 0, "round {round}");
    }
    // No live request is queued: one more fits, at position 1 ...
    match engine.enqueue_at(&request("a"), 2).unwrap() {
        Enqueued::Queued { position, .. } => assert_eq!(position, 1),
        other => panic!("a tenant with no live queued request was refused: {other:?}"),
    }
    // ... and the grant can go back into the queue (1 live + 1 requeued = 2, the bound).
    match engine.complete_at(a1, Outcome::StillRefused { retry_after_ns: 0 }, None, 3) {
        Ok(Completion::Requeued { position, .. }) => assert_eq!(position, 2),
        other => panic!("a requeue within the bound was refused: {other:?}"),
    }
    // Now the bound is reached by live requests: the next one is refused, at position 3.
    match engine.enqueue_at(&request("a"), 4).unwrap() {
        Enqueued::Refused(r) => {
            assert_eq!((r.reason, r.position), (Reason::TenantQueueFull, 3))
        }
        other => panic!("over the bound: {other:?}"),
    }
    // Everything drains, in order, and every ticket ends once.
    let mut ends = 0;
    while let NextGrant::Granted(g) = engine.next_grant_at(5) {
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 5)
            .unwrap();
        ends += 1;
    }
    assert_eq!(ends, 2);
    let s = engine.stats();
    assert_eq!(s.ended(), s.enqueued, "{s:?}");
    assert_eq!((s.queued, s.in_flight), (0, 0));
}

/// The same with cancels interleaved between live requests (tombstones behind live entries),
/// over several tenants and the global bound.
#[test]
fn cancelled_entries_free_their_places_in_the_global_bound() {
    let engine = small(4, 4, 1);
    let held = queued(&engine, &request("x"), 0);
    assert_eq!(granted(&engine, 0).ticket, held);
    let mut live = Vec::new();
    for round in 0..500u64 {
        // Keep 3 live requests over tenants a, b; cancel one of them and enqueue another.
        while live.len() < 3 {
            let tenant = ["a", "b"][(round as usize + live.len()) % 2];
            live.push(queued(&engine, &request(tenant), round));
        }
        let victim = live.remove((round % 3) as usize);
        engine.cancel_at(victim, round).unwrap();
        assert!(engine.stats().queued <= 4);
    }
    // 2 live now: two more fit the global bound of 4, the third is refused queue_full.
    queued(&engine, &request("a"), 600);
    queued(&engine, &request("b"), 600);
    match engine.enqueue_at(&request("c"), 600).unwrap() {
        Enqueued::Refused(r) => assert_eq!(r.reason, Reason::QueueFull),
        other => panic!("over the global bound: {other:?}"),
    }
    engine
        .complete_at(held, Outcome::Admitted, None, 601)
        .unwrap();
    let mut grants = 0;
    while let NextGrant::Granted(g) = engine.next_grant_at(602) {
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 602)
            .unwrap();
        grants += 1;
    }
    assert_eq!(grants, 4);
    let s = engine.stats();
    assert_eq!(s.ended(), s.enqueued, "{s:?}");
}

/// `complete(still refused)` racing `cancel` on the same grant, with the tenant's queue full of
/// cancelled entries: exactly one of the two calls ends the request.
#[test]
fn requeue_racing_cancel_ends_the_request_once() {
    const ITERATIONS: u64 = 20_000;
    let barrier = Arc::new(Barrier::new(2));
    let ends = Arc::new(AtomicU64::new(0));
    let (requests, extra) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    for iteration in 0..ITERATIONS {
        let engine = Arc::new(small(2, 64, 1));
        let a1 = queued(&engine, &request("a"), 0);
        assert_eq!(granted(&engine, 0).ticket, a1);
        queued(&engine, &request("a"), 0); // a2: live
        for _ in 0..2 {
            let t = queued(&engine, &request("a"), 0);
            engine.cancel_at(t, 0).unwrap();
        }
        requests.fetch_add(4, Ordering::Relaxed);
        let canceller = {
            let (engine, barrier, ends) = (engine.clone(), barrier.clone(), ends.clone());
            std::thread::spawn(move || {
                barrier.wait();
                // Sweep the cancel across the requeue's steps, iteration by iteration.
                for _ in 0..iteration % 97 {
                    std::hint::spin_loop();
                }
                match engine.cancel_at(a1, 1) {
                    Ok(()) => {
                        ends.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::StaleTicket | Error::TicketState) => {}
                    Err(e) => panic!("cancel: {e}"),
                }
            })
        };
        barrier.wait();
        match engine.complete_at(a1, Outcome::StillRefused { retry_after_ns: 0 }, None, 1) {
            Ok(Completion::Requeued { .. }) => {}
            Ok(Completion::Refused(_) | Completion::Completed) => {
                ends.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::StaleTicket) => {} // the cancel ended it first
            Err(e) => panic!("complete: {e}"),
        }
        canceller.join().unwrap();
        // The two cancelled entries ended by their cancels.
        ends.fetch_add(2, Ordering::Relaxed);
        // Drain the rest: a2, and a1 if it was requeued and not cancelled.
        loop {
            match engine.next_grant_at(2) {
                NextGrant::Granted(g) => {
                    engine
                        .complete_at(g.ticket, Outcome::Admitted, None, 2)
                        .unwrap();
                    ends.fetch_add(1, Ordering::Relaxed);
                }
                NextGrant::Empty => break,
                other => panic!("drain: {other:?}"),
            }
        }
        let s = engine.stats();
        assert_eq!((s.queued, s.in_flight), (0, 0), "{s:?}");
        if s.ended() != s.enqueued {
            extra.fetch_add(1, Ordering::Relaxed);
        }
    }
    assert_eq!(
        ends.load(Ordering::Relaxed),
        requests.load(Ordering::Relaxed),
        "ends seen by the callers, for {} requests",
        requests.load(Ordering::Relaxed)
    );
    assert_eq!(
        extra.load(Ordering::Relaxed),
        0,
        "engine counted extra ends"
    );
}

/// The gauges never read above their bounds, even while concurrent enqueues are refused at the
/// bound (a reservation is never added and then taken back).
#[test]
fn queued_gauge_never_reads_above_its_bound() {
    const THREADS: usize = 3;
    let engine = Arc::new(small(64, 16, 4));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut worst = 0;
            while !stop.load(Ordering::Relaxed) {
                let s = engine.stats();
                worst = worst.max(s.queued);
                assert!(s.in_flight <= 4, "{s:?}");
            }
            worst
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|id| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for i in 0..40_000u64 {
                    let tenant = format!("t{}", (i + id as u64) % 5);
                    if let Enqueued::Queued { ticket, .. } =
                        engine.enqueue_at(&request(&tenant), i).unwrap()
                    {
                        if i % 3 == 0 {
                            let _ = engine.cancel_at(ticket, i);
                        }
                    }
                    if i % 2 == 0 {
                        if let NextGrant::Granted(g) = engine.next_grant_at(i) {
                            // Another thread may have granted this thread's request and this
                            // thread's cancel may have ended it since: a cancel ends a granted
                            // request too, and then the completion finds it stale.
                            let done = engine.complete_at(g.ticket, Outcome::Admitted, None, i);
                            assert!(matches!(done, Ok(_) | Err(Error::StaleTicket)), "{done:?}");
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let worst = watcher.join().unwrap();
    assert!(
        worst <= 16,
        "stats().queued read {worst} with a bound of 16"
    );
}

/// The counters are written per thread (a row each, 64 in the process, freed when a thread
/// exits; threads beyond that share one line). Waves of more threads than rows, alive at once
/// and then exiting, each enqueue and serve: every request is counted once, and a reader never
/// sees a counter go down.
#[test]
fn counters_add_up_across_more_threads_than_rows_and_their_exits() {
    const THREADS: usize = 80;
    const EACH: u64 = 20;
    let engine = Arc::new(engine(Config {
        max_tenants: 128,
        tenant_queue_capacity: 64,
        queue_capacity: 8192,
        max_in_flight: 8192,
        tenant_idle_ms: 0,
        ..Config::default()
    }));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (engine, done) = (Arc::clone(&engine), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut last = engine.stats();
            while !done.load(Ordering::Relaxed) {
                let s = engine.stats();
                assert!(s.enqueued >= last.enqueued, "{last:?} then {s:?}");
                assert!(s.completed >= last.completed, "{last:?} then {s:?}");
                last = s;
            }
        })
    };
    for wave in 0..3 {
        let barrier = Arc::new(Barrier::new(THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|i| {
                let (engine, barrier) = (Arc::clone(&engine), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait(); // all alive at once: some find no row free
                    let tenant = format!("t{i}");
                    for _ in 0..EACH {
                        queued(&engine, &request(&tenant), 0);
                        if let NextGrant::Granted(g) = engine.next_grant_at(0) {
                            engine
                                .complete_at(g.ticket, Outcome::Admitted, None, 0)
                                .unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        // Serve what the waves left queued.
        while let NextGrant::Granted(g) = engine.next_grant_at(0) {
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, 0)
                .unwrap();
        }
        let s = engine.stats();
        assert_eq!(s.enqueued, (wave + 1) * THREADS as u64 * EACH, "{s:?}");
        assert_eq!(
            (s.completed, s.queued, s.in_flight),
            (s.enqueued, 0, 0),
            "{s:?}"
        );
    }
    done.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}

/// Three callers on one tenant with a shallow queue enqueue, cancel a third of their requests
/// and grant, so that the turn holder often finds its next entry claimed but not written yet
/// (and hands the tenant's turn to its writer), and the ring fills with cancelled entries that
/// producers compact (and a holder finding the ring locked hands the turn to the compaction).
/// Every request ends exactly once, and whatever is still queued at the end is granted: a turn
/// that went missing would strand the tenant's requests.
#[test]
fn a_tenant_handed_between_callers_loses_no_request() {
    const THREADS: usize = 3;
    let engine = Arc::new(small(3, 64, 2));
    let hand_overs_before = fairq::debug_hand_overs();
    let stop = Arc::new(AtomicBool::new(false));
    // Requests that ended with an answer to a caller: refused, cancelled, or granted and
    // completed. Each request ends once, so these add up to the arrivals after the drain.
    let (arrivals, ends) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (engine, stop, arrivals, ends) =
                (engine.clone(), stop.clone(), arrivals.clone(), ends.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    arrivals.fetch_add(1, Ordering::Relaxed);
                    match engine.enqueue_at(&request("hot"), i).unwrap() {
                        Enqueued::Queued { ticket, .. } => {
                            if i % 3 == 0 && engine.cancel_at(ticket, i).is_ok() {
                                ends.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Enqueued::Refused(_) => {
                            ends.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    match engine.next_grant_at(i) {
                        // Another thread's cancel may end a request this thread was granted.
                        NextGrant::Granted(g) => {
                            match engine.complete_at(g.ticket, Outcome::Admitted, None, i) {
                                Ok(_) => {
                                    ends.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(Error::StaleTicket) => {}
                                Err(e) => panic!("complete: {e}"),
                            }
                        }
                        NextGrant::Expired(_) => {
                            ends.fetch_add(1, Ordering::Relaxed);
                        }
                        NextGrant::Empty | NextGrant::AtCapacity => {}
                    }
                }
            })
        })
        .collect();
    // At least 0.4 s; then until 100 hand-overs were seen or 3 s passed (a debug build sees a
    // few each second, a release build hundreds), and in any case until one was seen or 10 s
    // passed (a sanitizer's slowdown can leave none in the first 3 s).
    let started = std::time::Instant::now();
    let seen = || fairq::debug_hand_overs() - hand_overs_before;
    while started.elapsed() < std::time::Duration::from_millis(400)
        || (seen() < 100 && started.elapsed() < std::time::Duration::from_secs(3))
        || (seen() == 0 && started.elapsed() < std::time::Duration::from_secs(10))
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    // What is still queued is granted now, by plain calls: nobody may hold a lost turn.
    // Expired ends a request too: the workers' clocks are their own counters.
    let drained = drain(&engine, 1 << 40, 64);
    ends.fetch_add(drained.completed + drained.expired, Ordering::Relaxed);
    let s = engine.stats();
    assert_eq!((s.queued, s.in_flight), (0, 0), "stranded: {s:?}");
    assert_eq!(s.ended(), s.enqueued, "{s:?}");
    assert_eq!(
        ends.load(Ordering::Relaxed),
        arrivals.load(Ordering::Relaxed),
        "every request ends once: {s:?}"
    );
    let hand_overs = fairq::debug_hand_overs() - hand_overs_before;
    println!(
        "{} requests, {} turns handed to a writer or a compaction",
        arrivals.load(Ordering::Relaxed),
        hand_overs
    );
    // The test is about hand-overs: a run that saw none proved nothing.
    assert!(hand_overs > 0, "no turn was handed over in 10 s");
}

/// Runs `then` on this thread while a caller on another thread, having taken one grant (which
/// must be for `first_tenant`, when given) and completed it, sits idle, still alive (its
/// statistics row stays its own). Then drains the rest at `now + 2` and checks that `completed`
/// more ended and nothing is left.
fn beside_an_idle_caller(
    engine: &Arc<fairq::Engine>,
    now: u64,
    first_tenant: Option<&str>,
    then: impl FnOnce() -> fairq::Grant,
    completed: u64,
    round: u32,
) {
    let served = Arc::new(Barrier::new(2));
    let done = Arc::new(Barrier::new(2));
    let first = {
        let (engine, served, done) = (Arc::clone(engine), Arc::clone(&served), done.clone());
        let expected = first_tenant.map(key);
        std::thread::spawn(move || {
            let g = granted(&engine, now);
            if let Some(expected) = expected {
                assert_eq!(g.tenant, expected);
            }
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, now)
                .unwrap();
            served.wait();
            done.wait();
        })
    };
    served.wait();
    let g = then();
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, now + 1)
        .unwrap();
    assert_eq!(
        drain(engine, now + 2, 20),
        Drained {
            completed,
            expired: 0
        },
        "round {round}"
    );
    done.wait();
    first.join().unwrap();
    let stats = engine.stats();
    assert_eq!((stats.queued, stats.in_flight), (0, 0), "round {round}");
}

/// A caller that just served a class's only ready tenant keeps it within reach: another caller
/// leaves it alone while that caller keeps coming back for it (when it is the only tenant, and
/// when its class holds most of the weight beside a light tenant). A caller that went idle must
/// not hold it, though: the next caller, on another thread, is granted it on its first call, and
/// drains the rest with plain calls.
#[test]
fn a_tenant_left_with_an_idle_caller_is_served_by_the_next() {
    for round in 0..100 {
        let engine = Arc::new(small(8, 64, 8));
        let light = round % 2 == 1;
        if light {
            engine.set_weight("a", 8).unwrap();
            queued(&engine, &request("b"), 0);
        }
        for _ in 0..4 {
            queued(&engine, &request("a"), 0);
        }
        let next = || match engine.next_grant_at(2) {
            NextGrant::Granted(g) => g,
            other => panic!("round {round}: the idle caller's tenant was not served: {other:?}"),
        };
        beside_an_idle_caller(&engine, 1, None, next, 2 + u64::from(light), round);
    }
}

/// A tenant whose visit continues (its credit covers its next head) waits for the caller that
/// served it, but does not hold up the rest of its class: a caller on another thread serves the
/// ring's next tenant at once, and everything is drained.
#[test]
fn a_continuing_visit_left_with_another_caller_does_not_hold_up_its_class() {
    for round in 0..20 {
        let engine = Arc::new(small(8, 64, 8));
        // A cost-8 head raises the class quantum to 8: later visits cover eight cost-1 grants.
        queued(
            &engine,
            &Request {
                cost: 8,
                ..request("z")
            },
            0,
        );
        for _ in 0..4 {
            queued(&engine, &request("a"), 0);
        }
        for _ in 0..4 {
            queued(&engine, &request("b"), 0);
        }
        let z = granted(&engine, 1);
        assert_eq!(z.tenant, key("z"), "round {round}");
        engine
            .complete_at(z.ticket, Outcome::Admitted, None, 1)
            .unwrap();
        // Tenant a's visit starts with credit for eight and goes on after the idle caller's grant.
        let next = || {
            let g = granted(&engine, 3);
            assert_eq!(g.tenant, key("b"), "round {round}: a's visit held up b");
            g
        };
        beside_an_idle_caller(&engine, 2, Some("a"), next, 6, round);
    }
}

/// `withdraw` ends a queued ticket only: once a grant is handed out, the thread that took it
/// owns its end, and a withdraw racing it changes nothing (a cancel would end the grant under
/// its taker).
#[test]
fn withdraw_ends_only_a_queued_ticket() {
    let engine = small(4, 64, 1);
    let first = queued(&engine, &request("a"), 0);
    let second = queued(&engine, &request("a"), 0);
    let g = granted(&engine, 1);
    assert_eq!(g.ticket, first);
    assert_eq!(engine.withdraw_at(first, 2), Err(Error::TicketState));
    assert_eq!(engine.stats().in_flight, 1, "the grant stays out");
    engine.withdraw_at(second, 2).unwrap();
    assert_eq!(engine.withdraw_at(second, 2), Err(Error::StaleTicket));
    engine
        .complete_at(first, Outcome::Admitted, None, 3)
        .unwrap();
    let s = engine.stats();
    assert_eq!(
        (s.completed, s.cancelled, s.queued, s.in_flight),
        (1, 1, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.refused[Reason::Cancelled as usize - 1], 1);
}
