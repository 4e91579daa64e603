//! The estimated wait a queued request is told (`Enqueued::Queued::estimated_wait_ns`): the
//! first-in-line wait plus one grant spacing per request ahead, each measured per tenant, and,
//! for a tenant with nothing measured yet, the spacing another tenant was measured at, scaled by
//! weight. (`fairq simulate --json` compares estimates with the waits that followed across the
//! built-in scenarios: `cli/tests/simulate.rs`.)

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey};

const MS: u64 = 1_000_000;
/// Each grant is held this long before it completes.
const SERVICE: u64 = 10 * MS;

fn engine() -> Engine {
    Engine::new(Config {
        enabled: true,
        max_in_flight: 1,
        tenant_queue_capacity: 128,
        light_lane: false,
        ..Config::default()
    })
    .unwrap()
}

fn enqueue(engine: &Engine, tenant: &str, now: u64) -> (u32, u64) {
    let request = Request::new(TenantKey::from_raw(tenant.as_bytes()), Dimension::User);
    match engine.enqueue_at(&request, now).unwrap() {
        Enqueued::Queued {
            position,
            estimated_wait_ns,
            ..
        } => (position, estimated_wait_ns),
        other => panic!("{tenant} refused: {other:?}"),
    }
}

/// Serves `grants` grants one after another, each held `SERVICE`, from `now`; returns the time
/// after the last completion.
fn serve(engine: &Engine, grants: usize, mut now: u64) -> u64 {
    for _ in 0..grants {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                now += SERVICE;
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
            }
            other => panic!("expected a grant, got {other:?}"),
        }
    }
    now
}

fn within(estimate: u64, expected: u64, what: &str) {
    let ratio = estimate as f64 / expected as f64;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "{what}: estimated {:.2} ms, expected about {:.2} ms",
        estimate as f64 / MS as f64,
        expected as f64 / MS as f64
    );
}

#[test]
fn a_backlogged_tenant_is_told_one_spacing_per_request_ahead() {
    let engine = engine();
    for _ in 0..40 {
        enqueue(&engine, "a", 0);
    }
    let now = serve(&engine, 20, 0);
    // 20 still queued, granted one per 10 ms: a new one waits its turn behind them. Nothing
    // found the queue empty, so the first-in-line wait stands at half a spacing.
    let (position, estimate) = enqueue(&engine, "a", now);
    assert_eq!(position, 21);
    within(estimate, SERVICE / 2 + 20 * SERVICE, "position 21");
}

#[test]
fn a_tenant_that_finds_its_queue_empty_is_told_what_such_requests_waited() {
    let engine = engine();
    // "b" holds the only permit for 30 ms each time; "a" arrives alone and waits for it.
    let mut now = 0;
    for _ in 0..8 {
        enqueue(&engine, "b", now);
        let NextGrant::Granted(held) = engine.next_grant_at(now) else {
            panic!("b is granted at once")
        };
        enqueue(&engine, "a", now + 5 * MS);
        now += 30 * MS;
        engine
            .complete_at(held.ticket, Outcome::Admitted, None, now)
            .unwrap();
        now = serve(&engine, 1, now); // a's grant, 25 ms after it came
    }
    let (position, estimate) = enqueue(&engine, "a", now);
    assert_eq!(position, 1);
    within(estimate, 25 * MS, "a alone in its queue");
}

#[test]
fn a_new_tenant_is_estimated_from_another_tenants_spacing_scaled_by_weight() {
    let engine = engine();
    engine.set_weight("heavy", 4).unwrap();
    for _ in 0..100 {
        enqueue(&engine, "a", 0);
    }
    // 65 grants: the hint is taken at a tenant's 64th grant, once its spacing is measured.
    let now = serve(&engine, 65, 0);
    // Weight 1 like "a": the same spacing, so half of it at the head of its queue, and one
    // more spacing per request ahead.
    let (_, first) = enqueue(&engine, "new", now);
    within(first, SERVICE / 2, "a new tenant of weight 1, position 1");
    let (_, second) = enqueue(&engine, "new", now);
    within(
        second,
        SERVICE / 2 + SERVICE,
        "a new tenant of weight 1, position 2",
    );
    // Weight 4: a quarter of the spacing.
    let (_, heavy) = enqueue(&engine, "heavy", now);
    within(heavy, SERVICE / 8, "a new tenant of weight 4, position 1");
}

#[test]
fn a_cold_engine_tells_no_wait_it_has_not_measured_beyond_the_retry_after() {
    let engine = engine();
    let request = Request {
        retry_after_ns: 7 * MS,
        ..Request::new(TenantKey::from_raw(b"a"), Dimension::User)
    };
    match engine.enqueue_at(&request, 0).unwrap() {
        Enqueued::Queued {
            estimated_wait_ns, ..
        } => assert_eq!(estimated_wait_ns, 7 * MS),
        other => panic!("{other:?}"),
    }
}
