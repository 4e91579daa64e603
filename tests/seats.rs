//! Seats (`Config::seats`): `max_in_flight` counts cost units. A grant takes its cost in
//! permits and gives them back when it ends; a request as wide as the limit runs alone, and
//! nothing else starts while it waits for the permits out.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey, Ticket};

const LIMIT: u32 = 6;

fn config() -> Config {
    Config {
        enabled: true,
        max_tenants: 64,
        tenant_queue_capacity: 64,
        queue_capacity: 1024,
        max_in_flight: LIMIT,
        max_wait_ms: 3_600_000,
        seats: true,
        ..Config::default()
    }
}

fn key(name: &str) -> TenantKey {
    TenantKey::from_raw(name.as_bytes())
}

fn enqueue(engine: &Engine, tenant: TenantKey, cost: u32) -> Ticket {
    let request = Request {
        cost,
        ..Request::new(tenant, Dimension::User)
    };
    match engine.enqueue_at(&request, 1) {
        Ok(Enqueued::Queued { ticket, .. }) => ticket,
        other => panic!("enqueue refused: {other:?}"),
    }
}

/// Widths 1 and 2 on a limit of 6, four callers at once: the seats out, counted by the holders
/// (added after a grant, taken off before it ends), never pass 6; every request ends once; the
/// permits all come back.
#[test]
fn widths_one_and_two_never_pass_the_limit_with_concurrent_callers() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 20_000;
    let engine = Arc::new(Engine::new(config()).unwrap());
    let tenants: Vec<(TenantKey, u32)> = (0..8)
        .map(|i| (key(&format!("t{i}")), 1 + i as u32 % 2))
        .collect();
    for &(tenant, cost) in &tenants {
        for _ in 0..4 {
            enqueue(&engine, tenant, cost);
        }
    }
    let held = Arc::new(AtomicU64::new(0));
    let worst = Arc::new(AtomicU64::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (engine, held, worst, grants, barrier, tenants) = (
                engine.clone(),
                held.clone(),
                worst.clone(),
                grants.clone(),
                barrier.clone(),
                tenants.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let mut done = 0;
                while done < ROUNDS {
                    match engine.next_grant_at(2) {
                        NextGrant::Granted(g) => {
                            let width = u64::from(g.cost);
                            let now = held.fetch_add(width, Ordering::SeqCst) + width;
                            worst.fetch_max(now, Ordering::SeqCst);
                            held.fetch_sub(width, Ordering::SeqCst);
                            engine
                                .complete_at(g.ticket, Outcome::Admitted, None, 2)
                                .unwrap();
                            let cost = tenants.iter().find(|t| t.0 == g.tenant).unwrap().1;
                            assert_eq!(g.cost, cost, "a grant carries its request's cost");
                            enqueue(&engine, g.tenant, cost);
                            grants.fetch_add(1, Ordering::SeqCst);
                            done += 1;
                        }
                        NextGrant::Empty | NextGrant::AtCapacity => std::hint::spin_loop(),
                        NextGrant::Expired(e) => panic!("nothing expires here: {e:?}"),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let worst = worst.load(Ordering::SeqCst);
    assert!(worst <= u64::from(LIMIT), "{worst} seats out at once");
    assert_eq!(engine.seats_in_flight(), Some(0), "every seat came back");
    assert!(worst >= 2, "the callers never overlapped ({worst})");
    let stats = engine.stats();
    assert_eq!(stats.in_flight, 0, "{stats:?}");
    assert_eq!(stats.queued, 32, "{stats:?}");
    assert_eq!(grants.load(Ordering::SeqCst), THREADS * ROUNDS);
}

/// One caller, three backlogged tenants: A weight 2 cost 2, B weight 1 cost 1, C weight 1
/// cost 2. Cost units granted split 2:1:1 by weight, whatever the widths.
#[test]
fn shares_split_by_weight_in_cost_units() {
    let engine = Engine::new(config()).unwrap();
    let tenants = [(key("a"), 2, 2), (key("b"), 1, 1), (key("c"), 1, 2)];
    for &(tenant, weight, cost) in &tenants {
        engine.set_weight_key(tenant, weight).unwrap();
        for _ in 0..8 {
            enqueue(&engine, tenant, cost);
        }
    }
    let mut units = [0u64; 3];
    let mut out: VecDeque<Ticket> = VecDeque::new();
    for _ in 0..40_000 {
        loop {
            match engine.next_grant_at(2) {
                NextGrant::Granted(g) => {
                    let i = tenants.iter().position(|t| t.0 == g.tenant).unwrap();
                    units[i] += u64::from(g.cost);
                    enqueue(&engine, g.tenant, g.cost);
                    out.push_back(g.ticket);
                }
                NextGrant::AtCapacity => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        let oldest = out.pop_front().unwrap();
        engine
            .complete_at(oldest, Outcome::Admitted, None, 2)
            .unwrap();
    }
    let total: u64 = units.iter().sum();
    for (i, want) in [0.5, 0.25, 0.25].into_iter().enumerate() {
        let got = units[i] as f64 / total as f64;
        assert!(
            (got - want).abs() < 0.005,
            "tenant {i}: {got:.4} of the cost units, want {want} ({units:?})"
        );
    }
}

/// A width-7 request on a limit of 6, among a flood of width-1 requests with every permit out:
/// once it is next, no other grant starts; the permits out come back one by one, and the
/// moment the last does it is granted (its grant holds all 6); the flood goes on after it.
#[test]
fn a_request_wider_than_the_limit_runs_alone_and_is_not_starved() {
    let engine = Engine::new(config()).unwrap();
    let wide = key("wide");
    // Three flood tenants of weights 1, 2 and 4: three classes, so picks come in batches and a
    // refunded pick does not make the next pick the same class.
    let floods: Vec<TenantKey> = (0..3).map(|i| key(&format!("flood{i}"))).collect();
    for (i, &flood) in floods.iter().enumerate() {
        engine.set_weight_key(flood, 1 << i).unwrap();
        for _ in 0..60 {
            enqueue(&engine, flood, 1);
        }
    }
    let mut out: VecDeque<Ticket> = VecDeque::new();
    while let NextGrant::Granted(g) = engine.next_grant_at(2) {
        out.push_back(g.ticket);
    }
    assert_eq!(out.len(), LIMIT as usize);
    let big = enqueue(&engine, wide, 7);
    // Until its class's turn comes it waits like any request; from the moment it is next (a
    // permit is free, yet nothing is granted) no flood grant may start, and it is granted when
    // the last permit out comes back.
    let mut next_since = None;
    let mut granted_at = None;
    for step in 0..200 {
        let oldest = out.pop_front().expect("a grant out");
        engine
            .complete_at(oldest, Outcome::Admitted, None, 2)
            .unwrap();
        loop {
            match engine.next_grant_at(2) {
                NextGrant::Granted(g) if g.ticket == big => {
                    assert_eq!(g.cost, 7);
                    assert_eq!(engine.stats().in_flight, 1, "the only grant out");
                    assert_eq!(
                        engine.seats_in_flight(),
                        Some(u64::from(LIMIT)),
                        "all 6 seats"
                    );
                    let text = engine.prometheus_text();
                    assert!(
                        text.contains("rate_limit_fair_queue_seats_in_flight 6\n"),
                        "the seats gauge"
                    );
                    assert!(
                        out.is_empty(),
                        "granted with {} grants still out",
                        out.len()
                    );
                    granted_at = Some(step);
                    break;
                }
                NextGrant::Granted(g) => {
                    assert!(
                        next_since.is_none(),
                        "a flood grant started while the wide request was next"
                    );
                    out.push_back(g.ticket);
                }
                NextGrant::AtCapacity => {
                    // Every grant out is a flood one, one seat each.
                    if out.len() < LIMIT as usize && next_since.is_none() {
                        next_since = Some(step);
                    }
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if granted_at.is_some() {
            break;
        }
    }
    let granted = granted_at.expect("the wide request was never granted");
    let since = next_since.expect("the wide request never waited");
    assert!(
        granted - since < LIMIT as usize,
        "next at completion {since}, granted at {granted}: more than the permits out"
    );
    // Alone: nothing else while it runs.
    assert!(matches!(engine.next_grant_at(2), NextGrant::AtCapacity));
    engine.complete_at(big, Outcome::Admitted, None, 2).unwrap();
    let mut after = 0;
    while let NextGrant::Granted(_) = engine.next_grant_at(2) {
        after += 1;
    }
    assert_eq!(after, LIMIT, "the flood resumes with every permit");
}

/// A wide request cancelled while it waits for the permits out: the flood resumes once they
/// come back (nothing stays blocked), and the books balance.
#[test]
fn a_cancelled_wide_request_blocks_nothing() {
    let engine = Engine::new(config()).unwrap();
    let flood = key("flood");
    for _ in 0..20 {
        enqueue(&engine, flood, 1);
    }
    let mut out = Vec::new();
    while let NextGrant::Granted(g) = engine.next_grant_at(2) {
        out.push(g.ticket);
    }
    let big = enqueue(&engine, key("wide"), 100);
    // Free one permit: the next pick may find the wide request next; it then holds the rest.
    engine
        .complete_at(out.remove(0), Outcome::Admitted, None, 2)
        .unwrap();
    while let NextGrant::Granted(g) = engine.next_grant_at(2) {
        out.push(g.ticket);
    }
    engine.cancel_at(big, 2).unwrap();
    for t in out.drain(..) {
        engine.complete_at(t, Outcome::Admitted, None, 2).unwrap();
    }
    let mut resumed = 0;
    while let NextGrant::Granted(_) = engine.next_grant_at(3) {
        resumed += 1;
    }
    assert_eq!(resumed, LIMIT, "the flood resumes with every permit");
    let stats = engine.stats();
    assert_eq!(stats.in_flight, u64::from(LIMIT), "{stats:?}");
}

/// Seats off (the default): a grant takes one permit whatever its cost, as before.
#[test]
fn without_seats_a_grant_takes_one_permit() {
    let engine = Engine::new(Config {
        seats: false,
        ..config()
    })
    .unwrap();
    for _ in 0..10 {
        enqueue(&engine, key("x"), 5);
    }
    let mut n = 0;
    while let NextGrant::Granted(_) = engine.next_grant_at(2) {
        n += 1;
    }
    assert_eq!(n, LIMIT);
    assert_eq!(engine.stats().in_flight, u64::from(LIMIT));
    assert_eq!(engine.seats_in_flight(), None);
    assert!(!engine
        .prometheus_text()
        .contains("rate_limit_fair_queue_seats_in_flight"));
}
