//! Weight policy, feedback and bulkheads, on a fake clock.

mod common;

use common::*;
use fairq::{
    Config, Dimension, Engine, Enqueued, Error, FeedbackController, NextGrant, Outcome, Policy,
    Request, StarvationGuard, TenantKey, Tier, WaitBoost,
};

const S: u64 = 1_000 * MS;

#[test]
fn policies_are_off_by_default_and_every_knob_is_validated() {
    let config = Config::default();
    assert_eq!(config.policy, Policy::default());
    assert!(config.policy.tiers.is_empty());
    assert_eq!(config.policy.starvation_guard, None);
    assert_eq!(config.policy.wait_boost, None);
    assert_eq!(config.policy.feedback, None);
    assert!(config.downstream_max_in_flight.is_empty());
    let engine = engine(Config::default());
    assert_eq!(
        engine.tick_at(S),
        Default::default(),
        "tick does nothing when all are off"
    );

    let bad = |policy: Policy| {
        Engine::new(Config {
            policy,
            ..Config::default()
        })
        .err()
        .unwrap()
        .field
    };
    let tiers = |t: Vec<Tier>| Policy {
        tiers: t,
        ..Policy::default()
    };
    assert_eq!(bad(tiers(vec![Tier::new("pro", 0)])), "policy.tiers");
    assert_eq!(bad(tiers(vec![Tier::new("", 1)])), "policy.tiers");
    assert_eq!(bad(tiers(vec![Tier::new("a b", 1)])), "policy.tiers");
    assert_eq!(
        bad(tiers(vec![Tier::new("Pro", 2), Tier::new("pro", 3)])),
        "policy.tiers"
    );
    assert_eq!(
        bad(tiers(
            (1..=17).map(|w| Tier::new(&format!("t{w}"), w)).collect()
        )),
        "policy.tiers"
    );
    // 8 distinct tier weights plus the default weight need 9 classes; the default allows 8.
    assert_eq!(
        bad(tiers(
            (2..=9).map(|w| Tier::new(&format!("t{w}"), w)).collect()
        )),
        "policy.tiers"
    );
    let guard = |n, p| Policy {
        starvation_guard: Some(StarvationGuard {
            min_grants_per_minute: n,
            min_share_percent: p,
        }),
        ..Policy::default()
    };
    assert_eq!(
        bad(guard(0, 3)),
        "policy.starvation_guard.min_grants_per_minute"
    );
    assert_eq!(
        bad(guard(30, 51)),
        "policy.starvation_guard.min_share_percent"
    );
    let boost = |after_ms, max_boosted| Policy {
        wait_boost: Some(WaitBoost {
            after_ms,
            max_boosted,
        }),
        ..Policy::default()
    };
    assert_eq!(bad(boost(999, 1)), "policy.wait_boost.after_ms");
    assert_eq!(bad(boost(20_000, 0)), "policy.wait_boost.max_boosted");
    let feedback = |f: FeedbackController| Policy {
        feedback: Some(f),
        ..Policy::default()
    };
    let d = FeedbackController::default();
    assert_eq!(
        bad(feedback(FeedbackController {
            period_ms: 59_999,
            ..d
        })),
        "policy.feedback.period_ms"
    );
    assert_eq!(
        bad(feedback(FeedbackController {
            floor_percent: 101,
            ..d
        })),
        "policy.feedback.floor_percent"
    );
    assert_eq!(
        bad(feedback(FeedbackController {
            ceiling_percent: 99,
            ..d
        })),
        "policy.feedback.ceiling_percent"
    );
    let pools = |p: Vec<u32>| {
        Engine::new(Config {
            downstream_max_in_flight: p,
            ..Config::default()
        })
        .err()
        .unwrap()
        .field
    };
    assert_eq!(pools(vec![0]), "downstream_max_in_flight");
    assert_eq!(
        pools(vec![9]),
        "downstream_max_in_flight",
        "above max_in_flight 8"
    );
    assert_eq!(pools(vec![1; 65]), "downstream_max_in_flight");
    // The usual values are accepted.
    Engine::new(Config {
        policy: Policy {
            tiers: Policy::standard_tiers(),
            starvation_guard: Some(StarvationGuard::default()),
            wait_boost: Some(WaitBoost::default()),
            feedback: Some(FeedbackController::default()),
        },
        downstream_max_in_flight: vec![4, 4],
        ..Config::default()
    })
    .unwrap();
}

#[test]
fn tiers_map_names_to_weights_and_keep_the_window_guarantee() {
    let engine = engine(Config {
        max_weight_classes: 5,
        policy: Policy {
            tiers: Policy::standard_tiers(),
            ..Policy::default()
        },
        ..Config::default()
    });
    assert_eq!(engine.tier_weight("Enterprise"), Some(8));
    assert_eq!(engine.tier_weight("nope"), None);
    assert_eq!(
        engine.set_tier("x", "nope"),
        Err(Error::InvalidArgument("unknown tier"))
    );
    let tenants = [
        ("e", "enterprise"),
        ("p", "PRO"),
        ("s", "starter"),
        ("f", "free"),
    ];
    for (name, tier) in tenants {
        engine.set_tier(name, tier).unwrap(); // never TooManyWeightClasses: classes pre-made
    }
    assert_eq!(engine.weight_of(key("e")), 8);
    assert_eq!(engine.weight_of(key("f")), 1);
    // Guard and boost off: every window of W = 15 grants gives exactly the tier weights.
    for (name, _) in tenants {
        for _ in 0..60 {
            queued(&engine, &request(name), 0);
        }
    }
    for window in 0..4 {
        let mut counts = std::collections::HashMap::new();
        for _ in 0..15 {
            let g = granted(&engine, MS);
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, MS)
                .unwrap();
            *counts.entry(g.tenant).or_insert(0) += 1;
        }
        for (name, w) in [("e", 8), ("p", 4), ("s", 2), ("f", 1)] {
            assert_eq!(counts[&key(name)], w, "window {window}, tenant {name}");
        }
    }
}

/// One grant per `step` of fake time; every tenant kept backlogged. Returns grants per tenant
/// over `grants` grants, ticking the policies every step.
fn run(engine: &Engine, tenants: &[(TenantKey, u32)], grants: u64, step: u64) -> Vec<u64> {
    let mut counts = vec![0u64; tenants.len()];
    let mut now = 0;
    for &(k, w) in tenants {
        engine.set_weight_key(k, w).unwrap();
        for _ in 0..2 {
            queued(engine, &Request::new(k, Dimension::User), now);
        }
    }
    for _ in 0..grants {
        now += step;
        engine.tick_at(now);
        let g = granted(engine, now);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
        queued(engine, &Request::new(g.tenant, Dimension::User), now);
        let i = tenants.iter().position(|&(k, _)| k == g.tenant).unwrap();
        counts[i] += 1;
    }
    counts
}

fn crowd_engine(guard: Option<StarvationGuard>) -> (Engine, Vec<(TenantKey, u32)>) {
    let engine = engine(Config {
        max_tenants: 1_024,
        tenant_queue_capacity: 4,
        queue_capacity: 4_096,
        max_wait_ms: 86_400_000,
        policy: Policy {
            starvation_guard: guard,
            ..Policy::default()
        },
        ..Config::default()
    });
    let mut tenants = vec![(key("weak"), 1)];
    tenants.extend((0..1_000).map(|i| (key(&format!("big{i}")), 8)));
    (engine, tenants)
}

#[test]
fn guard_gives_a_weight_1_tenant_among_1000_weight_8_its_share_floor() {
    // 1 grant per ms: 60000 a minute, so 3 % (1800 a minute) beats 30 a minute.
    let guard = StarvationGuard {
        min_grants_per_minute: 30,
        min_share_percent: 3,
    };
    let grants = 60_000;
    let (off, tenants) = crowd_engine(None);
    let without = run(&off, &tenants, grants, MS)[0];
    let (on, tenants) = crowd_engine(Some(guard));
    let counts = run(&on, &tenants, grants, MS);
    let with = counts[0];
    // Its weight share is 1/8001 of the grants: about 7.
    assert!(without <= 10, "without the guard: {without}");
    assert!(
        with * 100 >= 3 * grants,
        "at least 3 % of {grants}: got {with}"
    );
    assert!(
        with * 100 <= 4 * grants,
        "not much more than the floor: {with}"
    );
    // The heavy tenants keep equal shares among themselves.
    let (min, max) = counts[1..]
        .iter()
        .fold((u64::MAX, 0), |(a, b), &c| (a.min(c), b.max(c)));
    assert!(max - min <= 2, "heavy tenants {min}..{max}");
    let text = on.prometheus_text_at(61 * S);
    assert!(text.contains("rate_limit_fair_queue_guard_grants_total{tenant_dimension=\"user\"}"));
}

#[test]
fn guard_gives_at_least_n_a_minute_when_that_is_larger() {
    // 1 grant per 100 ms: 600 a minute, so 30 a minute beats 3 % (18).
    let guard = StarvationGuard {
        min_grants_per_minute: 30,
        min_share_percent: 3,
    };
    let (on, tenants) = crowd_engine(Some(guard));
    let minutes = 5;
    let counts = run(&on, &tenants, minutes * 600, 100 * MS);
    assert!(
        counts[0] >= 30 * minutes - 1,
        "30 a minute for {minutes} min: {}",
        counts[0]
    );
    assert!(counts[0] <= 32 * minutes, "{}", counts[0]);
}

/// A weight changed while the tenant is queued keeps its old class alive, so class ids run past
/// `max_weight_classes`; the guard must cover every class the scheduler can hand it.
#[test]
fn guard_covers_classes_past_max_weight_classes() {
    let engine = engine(Config {
        max_tenants: 8,
        max_weight_classes: 2,
        max_wait_ms: 86_400_000,
        policy: Policy {
            starvation_guard: Some(StarvationGuard::default()),
            ..Policy::default()
        },
        ..Config::default()
    });
    let mut now = 0;
    let mut granted = 0;
    // Each weight change while "a" is queued moves it to a new class, and its old one stays
    // referenced until it is served: over the rounds every class id gets used.
    for round in 0..64u32 {
        queued(&engine, &request("a"), now);
        queued(&engine, &request("b"), now);
        engine.set_weight("a", 2 + round % 5).unwrap();
        queued(&engine, &request("a"), now);
        now += 10 * S; // past the guard's gap: every ready class is due
        while let NextGrant::Granted(g) = engine.next_grant_at(now) {
            engine
                .complete_at(g.ticket, Outcome::Admitted, None, now)
                .unwrap();
            granted += 1;
        }
    }
    assert_eq!(granted, 3 * 64);
    assert_eq!(engine.stats().queued, 0);
}

#[test]
fn boost_starts_after_the_threshold_and_stops_when_served() {
    let boost = WaitBoost {
        after_ms: 20_000,
        max_boosted: 4,
    };
    let make = |wait_boost| {
        engine(Config {
            max_wait_ms: 86_400_000,
            policy: Policy {
                wait_boost,
                ..Policy::default()
            },
            ..Config::default()
        })
    };
    // One grant a second; the weight-1 tenant waits about 100 s between grants unboosted.
    let heavy = key("heavy");
    let light = key("light");
    let tenants = [(heavy, 100), (light, 1)];
    let engine = make(Some(boost));
    for &(k, w) in &tenants {
        engine.set_weight_key(k, w).unwrap();
        queued(&engine, &Request::new(k, Dimension::User), 0);
        queued(&engine, &Request::new(k, Dimension::User), 0);
    }
    let (mut boosts, mut ends, mut light_grants) = (0, 0, Vec::new());
    for s in 1..=600u64 {
        let now = s * S;
        let before = engine.tenant_indicators_at(light, now).unwrap();
        let report = engine.tick_at(now);
        let after = engine.tenant_indicators_at(light, now).unwrap();
        if after.boosted && !before.boosted {
            boosts += 1;
            assert_eq!(report.boosts_started, 1);
            assert!(before.starvation_current_ns >= 20 * S, "{before:?}");
        }
        if !after.boosted {
            assert!(
                after.starvation_current_ns < 20 * S || !after.ready,
                "{after:?}"
            );
        }
        let g = granted(&engine, now);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
        queued(&engine, &Request::new(g.tenant, Dimension::User), now);
        if g.tenant == light {
            light_grants.push(s);
            let served = engine.tenant_indicators_at(light, now).unwrap();
            assert!(!served.boosted, "the boost ends when served");
            ends += u32::from(after.boosted);
        }
    }
    assert!(
        boosts >= 3 && ends >= 3,
        "boosts {boosts}, ended by a grant {ends}"
    );
    // The boost shortens the light tenant's gaps against the unboosted run.
    let unboosted = make(None);
    let base: Vec<u64> = {
        let counts = run(&unboosted, &tenants, 600, S);
        vec![counts[1]]
    };
    assert!(
        light_grants.len() as u64 > base[0],
        "boosted {} grants vs {} unboosted",
        light_grants.len(),
        base[0]
    );
    let text = engine.prometheus_text_at(600 * S);
    assert!(text.contains("rate_limit_fair_queue_boosted_tenants{tenant_dimension=\"user\"}"));
}

#[test]
fn boost_is_capped_at_max_boosted_tenants() {
    let engine = engine(Config {
        max_in_flight: 1,
        max_wait_ms: 86_400_000,
        policy: Policy {
            wait_boost: Some(WaitBoost {
                after_ms: 1_000,
                max_boosted: 2,
            }),
            ..Policy::default()
        },
        ..Config::default()
    });
    queued(&engine, &request("holder"), 0);
    let _held = granted(&engine, 0); // the only permit: nobody else is served
    for i in 0..5 {
        queued(&engine, &request(&format!("w{i}")), 0);
    }
    assert_eq!(engine.next_grant_at(S / 2), NextGrant::AtCapacity);
    assert_eq!(
        engine.tick_at(S / 2).boosts_started,
        0,
        "under the threshold"
    );
    assert_eq!(engine.tick_at(2 * S).boosts_started, 2);
    assert_eq!(engine.tick_at(3 * S).boosts_started, 0, "capped");
    let boosted = (0..5)
        .filter(|i| {
            engine
                .tenant_indicators_at(key(&format!("w{i}")), 3 * S)
                .unwrap()
                .boosted
        })
        .count();
    assert_eq!(boosted, 2);
}

#[test]
fn feedback_nudges_weights_slowly_within_floor_and_ceiling() {
    // a has weight 4, b weight 2. The starvation guard (50 %: a class is due after one grant of
    // the others) hands b every other grant, against its third by weight: b's fair_share_ratio
    // is about 1.5, a's about 0.75. The controller raises a and lowers b, one step a period,
    // within [50 %, 200 %] of each weight: a in [2, 8], b in [1, 4].
    let feedback = FeedbackController {
        period_ms: 60_000,
        ..FeedbackController::default()
    };
    let engine = engine(Config {
        max_wait_ms: 86_400_000,
        policy: Policy {
            feedback: Some(feedback),
            starvation_guard: Some(StarvationGuard {
                min_grants_per_minute: 1,
                min_share_percent: 50,
            }),
            ..Policy::default()
        },
        ..Config::default()
    });
    let (a, b) = (key("a"), key("b"));
    for (k, w) in [(a, 4), (b, 2)] {
        engine.set_weight_key(k, w).unwrap();
        queued(&engine, &Request::new(k, Dimension::User), 0);
        queued(&engine, &Request::new(k, Dimension::User), 0);
    }
    let effective = |k| engine.tenant_indicators_at(k, 0).unwrap().effective_weight;
    let mut history = vec![(effective(a), effective(b))];
    let mut runs = 0;
    for step in 1..=(12 * 600u64) {
        let now = step * 100 * MS; // 10 grants a second, 12 minutes
        let report = engine.tick_at(now);
        if report.feedback_ran {
            runs += 1;
            history.push((effective(a), effective(b)));
            assert!(report.weights_raised + report.weights_lowered <= 2);
        }
        let g = granted(&engine, now);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
        queued(&engine, &Request::new(g.tenant, Dimension::User), now);
    }
    assert!((11..=12).contains(&runs), "one run a minute: {runs}");
    for pair in history.windows(2) {
        let ((a0, b0), (a1, b1)) = (pair[0], pair[1]);
        assert!(
            a1.abs_diff(a0) <= 1 && b1.abs_diff(b0) <= 1,
            "one step a period: {history:?}"
        );
    }
    assert!(
        history
            .iter()
            .all(|&(x, y)| (2..=8).contains(&x) && (1..=4).contains(&y)),
        "{history:?}"
    );
    assert_eq!(
        history[1],
        (5, 1),
        "first period: a up, b down: {history:?}"
    );
    // a settles at 7: its expected share counts its configured weight 4 against the 8 the
    // classes now weigh (7 + 1), half, which is what the guard leaves it: a ratio of 1.
    assert_eq!(*history.last().unwrap(), (7, 1), "{history:?}");
    // The configured weights are unchanged; set_weight resets the nudge.
    assert_eq!(engine.tenant_indicators_at(a, 0).unwrap().weight, 4);
    engine.set_weight_key(a, 4).unwrap();
    assert_eq!(effective(a), 4);
}

#[test]
fn indicators_count_the_cost_the_scheduler_charged() {
    // a declares cost 1 but each of its grants turns out to cost 2 (`actual_cost`); b is
    // honest. The scheduler charges a the corrected cost, so both get their share in real cost
    // units, and both fair-share ratios read about 1 (no alert, nothing for the controller).
    let engine = engine(Config {
        max_wait_ms: 86_400_000,
        ..Config::default()
    });
    let (a, b) = (key("a"), key("b"));
    for k in [a, b] {
        engine.set_weight_key(k, 4).unwrap();
        queued(&engine, &Request::new(k, Dimension::User), 0);
        queued(&engine, &Request::new(k, Dimension::User), 0);
    }
    for step in 1..=20_000u64 {
        let now = step * MS;
        let g = granted(&engine, now);
        let actual = (g.tenant == a).then_some(2);
        engine
            .complete_at(g.ticket, Outcome::Admitted, actual, now)
            .unwrap();
        queued(&engine, &Request::new(g.tenant, Dimension::User), now);
    }
    for (k, name) in [(a, "a (declares 1, costs 2)"), (b, "b (honest)")] {
        let ind = engine.tenant_indicators_at(k, 0).unwrap();
        let ratio = ind.fair_share_ratio.unwrap();
        assert!(
            (ratio - 1.0).abs() < 0.02,
            "{name}: fair_share_ratio {ratio:.3}, {ind:?}"
        );
    }
    let (ga, gb) = (
        engine.tenant_indicators_at(a, 0).unwrap().granted_cost,
        engine.tenant_indicators_at(b, 0).unwrap().granted_cost,
    );
    assert!(
        ga.abs_diff(gb) * 50 < ga + gb,
        "equal cost units: a {ga}, b {gb}"
    );
}

fn pooled_engine(pools: Vec<u32>) -> Engine {
    engine(Config {
        max_in_flight: 8,
        max_wait_ms: 500,
        tenant_queue_capacity: 64,
        downstream_max_in_flight: pools,
        ..Config::default()
    })
}

/// Tenants a0, a1 call downstream 0, which is stuck (its grants never complete); b0, b1 call
/// downstream 1, which answers at once. Returns (grants to downstream 1, most downstream-0 grants
/// out at once, expiries) over 2000 steps of 1 ms.
fn stuck_downstream(engine: &Engine) -> (u64, u64, u64) {
    let req = |name: &str, downstream| Request {
        downstream,
        ..request(name)
    };
    let (mut flowing, mut stuck_out, mut expired) = (0, 0u64, 0);
    let mut now = 0;
    for step in 0..2_000u64 {
        now += MS;
        if step % 2 == 0 {
            for (name, d) in [("a0", 0), ("a1", 0), ("b0", 1), ("b1", 1)] {
                let _ = engine.enqueue_at(&req(name, d), now);
            }
        }
        loop {
            match engine.next_grant_at(now) {
                NextGrant::Granted(g) if g.tenant == key("b0") || g.tenant == key("b1") => {
                    flowing += 1;
                    engine
                        .complete_at(g.ticket, Outcome::Admitted, None, now)
                        .unwrap();
                }
                NextGrant::Granted(_) => stuck_out += 1, // held forever
                NextGrant::Expired(_) => expired += 1,
                NextGrant::Empty | NextGrant::AtCapacity => break,
            }
        }
    }
    (flowing, stuck_out, expired)
}

#[test]
fn bulkheads_keep_other_downstreams_flowing_when_one_is_stuck() {
    let engine = pooled_engine(vec![2, 6]);
    let (flowing, stuck_out, expired) = stuck_downstream(&engine);
    assert_eq!(stuck_out, 2, "downstream 0 holds only its own 2 permits");
    assert!(flowing >= 1_500, "downstream 1 keeps flowing: {flowing}");
    // Requests to the stuck downstream still end on their deadline (500 ms), not never: about
    // two full tenant queues (2 x 64) every 500 ms after the first 500 ms.
    assert!(expired >= 300, "expired {expired}");
    let stats = engine.stats();
    assert_eq!(stats.expired, expired);
    let p95 = engine
        .tenant_indicators_at(key("a0"), 2 * S)
        .unwrap()
        .wait_p95_ns
        .unwrap();
    // Waits just over 500 ms fall in the (0.5 s, 1 s] bucket; a late expiry would be above.
    assert!(p95 <= S, "blocked heads expire on time: p95 {p95}");
    let late = engine.prometheus_text_at(2 * S);
    let bucket = |le: &str| -> f64 {
        let prefix = format!(
            "rate_limit_fair_queue_wait_seconds_bucket{{tenant_dimension=\"user\",le=\"{le}\"}} "
        );
        late.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(bucket("1"), bucket("+Inf"), "no wait over 1 s");
    let text = engine.prometheus_text_at(2 * S);
    assert!(text.contains(
        "rate_limit_fair_queue_downstream_in_flight{tenant_dimension=\"user\",downstream=\"0\"} 2"
    ));
    assert!(text.contains(
        "rate_limit_fair_queue_downstream_in_flight{tenant_dimension=\"user\",downstream=\"1\"} 0"
    ));

    // Without bulkheads the stuck downstream takes every permit and everything stops.
    let (flowing, stuck_out, _) = stuck_downstream(&pooled_engine(Vec::new()));
    assert_eq!(stuck_out, 8);
    assert!(flowing < 100, "{flowing}");
}

#[test]
fn a_freed_permit_wakes_a_blocked_tenant_and_downstream_is_checked() {
    let engine = pooled_engine(vec![1, 1]);
    let bad = Request {
        downstream: 2,
        ..request("a")
    };
    assert!(matches!(
        engine.enqueue_at(&bad, 0),
        Err(Error::InvalidArgument(_))
    ));
    let to0 = |name| Request {
        downstream: 0,
        ..request(name)
    };
    queued(&engine, &to0("a"), 0);
    queued(&engine, &to0("b"), 0);
    queued(
        &engine,
        &Request {
            downstream: 1,
            ..request("c")
        },
        0,
    );
    let first = granted(&engine, 0);
    let second = granted(&engine, 0);
    let tenants = [first.tenant, second.tenant];
    assert!(
        tenants.contains(&key("c")),
        "the other pool still grants: {tenants:?}"
    );
    assert_eq!(
        engine.next_grant_at(0),
        NextGrant::Empty,
        "pool 0 is full: its tenant is blocked"
    );
    let blocked = engine.tenant_indicators_at(key("a"), 0).unwrap();
    let other = engine.tenant_indicators_at(key("b"), 0).unwrap();
    assert!(
        !blocked.ready || !other.ready,
        "the blocked tenant is not ready"
    );
    let on0 = if first.tenant == key("c") {
        second
    } else {
        first
    };
    engine
        .complete_at(on0.ticket, Outcome::Admitted, None, MS)
        .unwrap();
    let third = granted(&engine, MS);
    assert!(third.tenant == key("a") || third.tenant == key("b"));
    assert_ne!(third.tenant, on0.tenant);
}

#[test]
fn bulkheads_off_ignore_downstream() {
    let engine = engine(Config::default());
    let r = engine
        .enqueue_at(
            &Request {
                downstream: 7,
                ..request("a")
            },
            0,
        )
        .unwrap();
    assert!(matches!(r, Enqueued::Queued { .. }));
    granted(&engine, 0);
}
