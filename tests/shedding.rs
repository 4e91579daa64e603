//! Load shedding on a failing downstream, on a fake clock: a bulkhead pool whose error rate
//! passes the threshold has its in-flight limit cut by half each window (never below 1), grows
//! back by steps once calm, refuses at once what it cannot serve in budget
//! (`downstream_shedding`), and shows its stage in the metrics.

mod common;

use common::*;
use fairq::{
    Config, Dimension, Engine, Enqueued, Error, NextGrant, Outcome, Reason, Request, Shedding,
};

const WINDOW_MS: u64 = 1_000;
const W: u64 = WINDOW_MS * MS;

fn shedding_engine() -> Engine {
    engine(Config {
        max_in_flight: 16,
        tenant_queue_capacity: 1024,
        queue_capacity: 8192,
        downstream_max_in_flight: vec![8, 8],
        shedding: Some(Shedding {
            window_ms: WINDOW_MS,
            ..Shedding::default()
        }),
        ..Config::default()
    })
}

fn to(tenant: &str, downstream: u32) -> Request {
    Request {
        downstream,
        ..request(tenant)
    }
}

fn text_value(text: &str, prefix: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn limit(engine: &Engine, downstream: u32, now: u64) -> u64 {
    text_value(
        &engine.prometheus_text_at(now),
        &format!("rate_limit_fair_queue_downstream_limit{{tenant_dimension=\"user\",downstream=\"{downstream}\"}}"),
    ) as u64
}

/// Runs `windows` windows of traffic on both pools: every 10 ms each pool's tenant gets as many
/// grants as its pool admits; each grant completes 10 ms later and is reported, pool 0's
/// failing every 5th time (20 %) while `failing`. Returns the most grants pool 0 had out.
fn run(engine: &Engine, from: u64, windows: u64, failing: bool) -> (u64, u64) {
    let mut held: Vec<(fairq::Ticket, u32)> = Vec::new();
    let mut most = [0u64; 2];
    let mut calls = 0u64;
    let steps = windows * W / (10 * MS);
    for step in 0..steps {
        let now = from + step * 10 * MS;
        for (ticket, d) in held.drain(..) {
            engine
                .complete_at(ticket, Outcome::Admitted, None, now)
                .unwrap();
            calls += 1;
            let ok = !(failing && d == 0 && calls % 5 == 0);
            engine.report_downstream_at(d, ok, now).unwrap();
        }
        for (tenant, d) in [("f", 0u32), ("h", 1)] {
            // As many as the pool can take in a step: the backlog of a cut pool grows (its
            // tenant's queue bound refuses the excess).
            for _ in 0..8 {
                engine.enqueue_at(&to(tenant, d), now).unwrap();
            }
        }
        let mut out = [0u64; 2];
        while let NextGrant::Granted(g) = engine.next_grant_at(now) {
            let d = u32::from(g.tenant != key("f"));
            out[d as usize] += 1;
            held.push((g.ticket, d));
        }
        most[0] = most[0].max(out[0]);
        most[1] = most[1].max(out[1]);
    }
    for (ticket, _) in held {
        engine
            .complete_at(ticket, Outcome::Admitted, None, from + steps * 10 * MS)
            .unwrap();
    }
    (most[0], most[1])
}

#[test]
fn a_failing_pool_is_cut_by_half_each_window_and_recovers_by_steps() {
    let engine = shedding_engine();
    let t0 = 1_000 * MS;
    let (f, h) = run(&engine, t0, 2, false);
    assert_eq!((f, h), (8, 8), "both pools at their bound while calm");
    assert_eq!(limit(&engine, 0, t0), 8);
    // 20 % errors on pool 0 from window 2 on. A window is judged at the first report after
    // it, so the limit in force during windows 2..=5 is 8 (window 1 was calm), then 4, 2, 1.
    let mut limits = Vec::new();
    for w in 0..4 {
        let now = t0 + (2 + w) * W;
        run(&engine, now, 1, true);
        limits.push(limit(&engine, 0, now + W));
    }
    assert_eq!(limits, vec![8, 4, 2, 1], "pool 0's limit, window by window");
    let (f, h) = run(&engine, t0 + 6 * W, 1, true);
    assert_eq!(
        (f, h),
        (1, 8),
        "pool 0 holds at most 1 grant; pool 1 keeps its 8"
    );
    // Calm again: +1 (8 / 8) per window, back to 8 in 7 windows.
    let mut limits = Vec::new();
    for w in 0..8 {
        let now = t0 + (7 + w) * W;
        run(&engine, now, 1, false);
        limits.push(limit(&engine, 0, now + W));
    }
    assert_eq!(limits, vec![1, 2, 3, 4, 5, 6, 7, 8]);
    let text = engine.prometheus_text_at(t0 + 15 * W);
    let p = "rate_limit_fair_queue_downstream";
    assert_eq!(
        text_value(
            &text,
            &format!("{p}_shed_cuts_total{{tenant_dimension=\"user\",downstream=\"0\"}}")
        ),
        3.0
    );
    assert_eq!(
        text_value(
            &text,
            &format!("{p}_shedding{{tenant_dimension=\"user\",downstream=\"0\"}}")
        ),
        0.0
    );
    assert_eq!(
        text_value(
            &text,
            &format!("{p}_limit{{tenant_dimension=\"user\",downstream=\"1\"}}")
        ),
        8.0,
        "the healthy pool was never cut"
    );
    assert!(text.contains(&format!(
        "{p}_reports_total{{tenant_dimension=\"user\",downstream=\"0\",outcome=\"error\"}}"
    )));
}

#[test]
fn a_shedding_pool_refuses_at_once_what_it_cannot_serve_in_budget() {
    let engine = engine(Config {
        max_in_flight: 4,
        downstream_max_in_flight: vec![2, 2],
        shedding: Some(Shedding {
            window_ms: WINDOW_MS,
            min_requests: 10,
            ..Shedding::default()
        }),
        ..Config::default()
    });
    let t0 = 1_000 * MS;
    // One window of half errors: pool 0's limit 2 -> 1.
    for i in 0..20 {
        engine.report_downstream_at(0, i % 2 == 0, t0 + i).unwrap();
    }
    engine.report_downstream_at(0, true, t0 + W).unwrap();
    assert_eq!(limit(&engine, 0, t0 + W), 1);
    // Not shedding-refused while the pool admits promptly: the queue is empty.
    let short = |tenant| Request {
        timeout_ns: 200 * MS,
        ..to(tenant, 0)
    };
    let held = queued(&engine, &short("a"), t0 + W);
    assert_eq!(granted(&engine, t0 + W).ticket, held);
    queued(&engine, &to("b", 0), t0 + W); // blocks: the pool's one permit is out
    assert_eq!(engine.next_grant_at(t0 + W), NextGrant::Empty);
    // 300 ms later nothing was admitted while b waits: a 200 ms budget cannot be met.
    let now = t0 + W + 300 * MS;
    match engine.enqueue_at(&short("c"), now).unwrap() {
        Enqueued::Refused(r) => assert_eq!(
            (r.reason, r.position, r.waited_ns),
            (Reason::DownstreamShedding, 0, 0)
        ),
        other => panic!("want downstream_shedding, got {other:?}"),
    }
    let stats = engine.stats();
    assert_eq!(stats.refused_for(Reason::DownstreamShedding), 1);
    let text = engine.prometheus_text_at(now);
    assert!(text.contains(
        "rate_limit_fair_queue_refused_total{tenant_dimension=\"user\",reason=\"downstream_shedding\"} 1"
    ));
    assert!(text.contains(
        "rate_limit_fair_queue_downstream_shedding{tenant_dimension=\"user\",downstream=\"0\"} 1"
    ));
    // A calm window grows the limit back to 2 and wakes the blocked tenant at once, without a
    // release: b is granted while a still holds the first permit.
    for i in 0..20 {
        engine
            .report_downstream_at(0, true, t0 + 2 * W + i)
            .unwrap();
    }
    engine.report_downstream_at(0, true, t0 + 3 * W).unwrap();
    assert_eq!(limit(&engine, 0, t0 + 3 * W), 2);
    let NextGrant::Granted(g) = engine.next_grant_at(t0 + 3 * W) else {
        panic!("the grown limit admits the blocked tenant")
    };
    assert_eq!(g.tenant, key("b"));
    // The stage is over (the limit is back at the bound): a short budget queues again; the
    // healthy pool never refused anything.
    assert!(matches!(
        engine.enqueue_at(&short("d"), t0 + 3 * W).unwrap(),
        Enqueued::Queued { .. }
    ));
    assert!(matches!(
        engine
            .enqueue_at(
                &Request {
                    timeout_ns: 200 * MS,
                    ..to("e", 1)
                },
                now
            )
            .unwrap(),
        Enqueued::Queued { .. }
    ));
    let _ = held;
}

#[test]
fn reports_are_checked_and_inert_without_shedding() {
    let engine = shedding_engine();
    assert_eq!(
        engine.report_downstream_at(2, true, 1),
        Err(Error::InvalidArgument(
            "downstream must name a configured pool"
        ))
    );
    // Pools without shedding: reports count nothing and the limit never moves.
    let plain = engine_with_pools();
    for i in 0..1_000 {
        plain.report_downstream_at(0, false, i * MS).unwrap();
    }
    assert!(!plain.prometheus_text().contains("downstream_limit"));
    let none = common::engine(Config::default());
    none.report_downstream(7, false).unwrap();
    // Shedding needs pools.
    let err = Engine::new(Config {
        shedding: Some(Shedding::default()),
        ..Config::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.field, "shedding");
    let _ = Dimension::User;
}

fn engine_with_pools() -> Engine {
    common::engine(Config {
        downstream_max_in_flight: vec![4],
        ..Config::default()
    })
}

#[test]
fn the_backlog_over_the_admission_rate_refuses_and_the_queued_gauge_never_drifts() {
    let engine = engine(Config {
        max_in_flight: 4,
        tenant_queue_capacity: 256,
        downstream_max_in_flight: vec![2, 2],
        shedding: Some(Shedding {
            window_ms: WINDOW_MS,
            min_requests: 10,
            ..Shedding::default()
        }),
        ..Config::default()
    });
    let gauge = |now| {
        text_value(
            &engine.prometheus_text_at(now),
            "rate_limit_fair_queue_downstream_queued{tenant_dimension=\"user\",downstream=\"0\"}",
        )
    };
    let t0 = 1_000 * MS;
    engine.report_downstream_at(0, true, t0).unwrap();
    // Window 1: half the reports fail, and the pool admits 4 requests (2 at a time).
    for _ in 0..4 {
        queued(&engine, &to("a", 0), t0);
    }
    for i in 0..2 {
        let g = granted(&engine, t0 + i);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, t0 + i)
            .unwrap();
    }
    for _ in 0..2 {
        let g = granted(&engine, t0 + 10);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, t0 + 10)
            .unwrap();
    }
    for i in 0..20 {
        engine
            .report_downstream_at(0, i % 2 == 0, t0 + 100 + i)
            .unwrap();
    }
    engine.report_downstream_at(0, true, t0 + W).unwrap(); // cut to 1; 4 admitted a window
    assert_eq!(limit(&engine, 0, t0 + W), 1);
    // 8 queued at 4 a second is 2 s: a 1 s budget is refused, a 3 s one queues.
    let now = t0 + W + 1;
    for _ in 0..8 {
        queued(&engine, &to("b", 0), now);
    }
    assert_eq!(gauge(now), 8.0);
    let with_budget = |ms: u64| Request {
        timeout_ns: ms * MS,
        ..to("c", 0)
    };
    match engine.enqueue_at(&with_budget(1_000), now).unwrap() {
        Enqueued::Refused(r) => assert_eq!(r.reason, Reason::DownstreamShedding),
        other => panic!("want downstream_shedding, got {other:?}"),
    }
    let kept = queued(&engine, &with_budget(3_000), now);
    assert_eq!(gauge(now), 9.0);
    // Every way out of the queue lowers the gauge once: a cancel, an expiry by the caller, a
    // grant; a requeue raises it again; a deadline passing in the queue lowers it.
    engine.cancel_at(kept, now).unwrap();
    let b = granted(&engine, now);
    let c = queued(&engine, &to("c", 0), now);
    engine.expire_at(c, now).unwrap();
    assert_eq!(gauge(now), 7.0);
    engine
        .complete_at(
            b.ticket,
            Outcome::StillRefused { retry_after_ns: 0 },
            None,
            now,
        )
        .unwrap();
    assert_eq!(gauge(now), 8.0);
    // Past everyone's 30 s budget: the heads expire in the queue, one by one.
    let late = now + 31_000 * MS;
    let mut expired = 0;
    loop {
        match engine.next_grant_at(late) {
            NextGrant::Expired(_) => expired += 1,
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, late)
                    .unwrap();
            }
            _ => break,
        }
    }
    assert_eq!(expired, 8);
    assert_eq!(gauge(late), 0.0);
    assert_eq!(engine.stats().queued, 0);
}
