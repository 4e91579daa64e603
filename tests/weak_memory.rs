//! Liveness and conservation under a weak memory model: a short multi-thread workload, then a
//! full drain that must empty the engine.
//!
//! Small enough for Miri's weak-memory emulation, which explores orderings x86-64 never shows
//! (CI runs it over many seeds: `cargo +nightly miri test --test weak_memory` with
//! `-Zmiri-many-seeds`). A Relaxed ordering that carries liveness shows here as a request stuck
//! in the queue after the drain.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use fairq::{Completion, Config, Enqueued, NextGrant, Outcome};

#[test]
fn three_threads_then_a_full_drain() {
    const THREADS: u64 = 3;
    const OPS: u64 = 40;
    let engine = Arc::new(engine(Config {
        max_tenants: 4,
        tenant_queue_capacity: 4,
        queue_capacity: 8,
        max_in_flight: 2,
        max_weight_classes: 3,
        tenant_idle_ms: 0,
        ..Config::default()
    }));
    engine.set_weight("b", 2).unwrap();
    let ends = Arc::new(AtomicU64::new(0));
    // Thread 0 sends (tenants of two weight classes joining and leaving the ready set) and
    // cancels some; the others grant and complete, often finding nothing ready: batches of picks
    // are computed while classes become ready.
    let workers: Vec<_> = (0..THREADS)
        .map(|id| {
            let (engine, ends) = (engine.clone(), ends.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..OPS {
                    let now = i * 1_000;
                    if id == 0 {
                        if i % 4 == 3 {
                            if let Some(t) = mine.pop() {
                                if engine.cancel_at(t, now).is_ok() {
                                    ends.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            continue;
                        }
                        let tenant = ["a", "b", "c"][(i % 3) as usize];
                        if let Enqueued::Queued { ticket, .. } =
                            engine.enqueue_at(&request(tenant), now).unwrap()
                        {
                            mine.push(ticket);
                        }
                        continue;
                    }
                    match engine.next_grant_at(now) {
                        NextGrant::Granted(g) => {
                            let outcome = if (i + id) % 7 == 0 {
                                Outcome::StillRefused { retry_after_ns: 0 }
                            } else {
                                Outcome::Admitted
                            };
                            match engine.complete_at(g.ticket, outcome, None, now) {
                                Ok(Completion::Requeued { .. }) => {}
                                Ok(_) => {
                                    ends.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(fairq::Error::StaleTicket) => {} // cancelled meanwhile
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
    for w in workers {
        w.join().unwrap();
    }
    // Everything left is granted by a full drain at a later time (nothing is in flight now, every
    // Retry-After has passed, no budget has run out).
    let drain_at = 1_000 * MS;
    let drained = drain(&engine, drain_at, 1_000);
    assert_eq!(drained.expired, 0, "drain: {drained:?}");
    ends.fetch_add(drained.completed, Ordering::Relaxed);
    let s = engine.stats();
    assert_eq!(
        s.queued, 0,
        "requests stuck in the queue after a full drain: {s:?}"
    );
    assert_eq!(s.in_flight, 0, "{s:?}");
    assert_eq!(s.ended(), s.enqueued, "{s:?}");
    assert_eq!(ends.load(Ordering::Relaxed), s.enqueued, "{s:?}");
    // And the engine still works: a new request is queued and granted.
    queued(&engine, &request("a"), drain_at + MS);
    assert!(matches!(
        engine.next_grant_at(drain_at + MS),
        NextGrant::Granted(_)
    ));
}
