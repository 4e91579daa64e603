//! The engine's documented behaviour, a test or a few per rule: opt-in, what is queued, tenant
//! identity, weights, readiness, the re-check, the budget, the bounds, the wait estimate,
//! composition and cost units; plus the bad-input rules: clear errors, nothing lost. All on a
//! fake clock.

mod common;

use common::*;
use fairq::{
    Completion, Config, Dimension, Enqueued, Error, Identity, NextGrant, Outcome, Reason, Refusal,
    Request, TenantDimension, TenantKey,
};

fn refusal(result: Enqueued) -> Refusal {
    match result {
        Enqueued::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn default_config_is_disabled_and_refuses_everything() {
    let engine = fairq::Engine::new(Config::default()).unwrap();
    assert!(!engine.is_enabled());
    let r = refusal(engine.enqueue_at(&request("a"), 0).unwrap());
    assert_eq!(r.reason, Reason::Disabled);
    assert_eq!(engine.stats().queued, 0);
    assert_eq!(engine.next_grant_at(0), NextGrant::Empty);
}

#[test]
fn disabling_at_run_time_loses_nothing_queued() {
    let engine = engine(Config::default());
    let t1 = queued(&engine, &request("a"), 0);
    let t2 = queued(&engine, &request("b"), 0);
    engine.set_enabled(false);
    let r = refusal(engine.enqueue_at(&request("a"), 1).unwrap());
    assert_eq!(r.reason, Reason::Disabled);
    // Already queued requests still drain.
    let mut seen = vec![granted(&engine, 2).ticket, granted(&engine, 2).ticket];
    seen.sort_by_key(|t| t.0);
    let mut want = vec![t1, t2];
    want.sort_by_key(|t| t.0);
    assert_eq!(seen, want);
    engine.set_enabled(true);
    queued(&engine, &request("a"), 3);
}

#[test]
fn only_tenant_dimensions_are_queued() {
    let engine = engine(Config::default());
    for dim in Dimension::ALL {
        let req = Request::new(key("a"), dim);
        let result = engine.enqueue_at(&req, 0).unwrap();
        if matches!(
            dim,
            Dimension::User | Dimension::ApiKey | Dimension::Team | Dimension::Model
        ) {
            assert!(matches!(result, Enqueued::Queued { .. }), "{dim:?}");
        } else {
            assert_eq!(refusal(result).reason, Reason::NotQueueable, "{dim:?}");
        }
    }
    assert_eq!(engine.stats().refused_for(Reason::NotQueueable), 4);
}

#[test]
fn no_tenant_is_refused_at_once() {
    let engine = engine(Config::default());
    let req = Request {
        tenant: None,
        ..request("x")
    };
    let r = refusal(engine.enqueue_at(&req, 0).unwrap());
    assert_eq!(
        (r.reason, r.position, r.waited_ns),
        (Reason::NoTenant, 0, 0)
    );
    let nobody = Identity::default();
    assert_eq!(nobody.resolve(TenantDimension::User), None);
}

#[test]
fn resolver_prefers_configured_dimension_then_user_team_api_key() {
    let full = Identity {
        user: Some("u1"),
        team: Some("t1"),
        team_is_placeholder: false,
        api_key: Some("k1"),
    };
    assert_eq!(
        full.resolve(TenantDimension::Team),
        Some((TenantDimension::Team, key("t1")))
    );
    assert_eq!(
        full.resolve(TenantDimension::ApiKey),
        Some((TenantDimension::ApiKey, key("k1")))
    );
    let no_user = Identity { user: None, ..full };
    assert_eq!(
        no_user.resolve(TenantDimension::User),
        Some((TenantDimension::Team, key("t1")))
    );
    // An empty user and a placeholder team are not identifiers: fall through to the key.
    let key_only = Identity {
        user: Some(""),
        team: Some("hub-placeholder"),
        team_is_placeholder: true,
        api_key: Some("k1"),
    };
    assert_eq!(
        key_only.resolve(TenantDimension::Team),
        Some((TenantDimension::ApiKey, key("k1")))
    );
    let empty_team = Identity {
        team: Some(""),
        ..key_only
    };
    assert_eq!(
        empty_team.resolve(TenantDimension::User),
        Some((TenantDimension::ApiKey, key("k1")))
    );
}

#[test]
fn the_same_request_always_lands_in_the_same_queue_and_keys_are_hashes() {
    let id = Identity {
        user: None,
        team: Some("acme"),
        team_is_placeholder: false,
        api_key: Some("k"),
    };
    let first = id.resolve(TenantDimension::User);
    for _ in 0..10 {
        assert_eq!(id.resolve(TenantDimension::User), first);
    }
    let (_, k) = first.unwrap();
    assert_ne!(k.get(), 0);
    assert_eq!(k, TenantKey::from_raw(b"acme"));
    assert_ne!(TenantKey::from_raw(b"acme"), TenantKey::from_raw(b"acmf"));
}

fn shares(engine: &fairq::Engine, tenants: &[&str], grants: usize, now: u64) -> Vec<usize> {
    let mut counts = vec![0; tenants.len()];
    for _ in 0..grants {
        let g = granted(engine, now);
        let i = tenants.iter().position(|t| key(t) == g.tenant).unwrap();
        counts[i] += 1;
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
        queued(engine, &Request::new(g.tenant, Dimension::User), now);
    }
    counts
}

#[test]
fn weights_by_raw_id_with_default_weight() {
    let engine = engine(Config {
        default_weight: 2,
        max_in_flight: 1,
        ..Config::default()
    });
    engine.set_weight("gold", 6).unwrap();
    assert_eq!(engine.weight_of(key("gold")), 6);
    assert_eq!(engine.weight_of(key("nobody")), 2);
    for t in ["gold", "plain"] {
        for _ in 0..10 {
            queued(&engine, &request(t), 0);
        }
    }
    assert_eq!(shares(&engine, &["gold", "plain"], 80, 0), vec![60, 20]);
}

#[test]
fn weights_replaced_at_run_time_take_effect_for_live_tenants() {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    for t in ["a", "b"] {
        for _ in 0..10 {
            queued(&engine, &request(t), 0);
        }
    }
    assert_eq!(shares(&engine, &["a", "b"], 20, 0), vec![10, 10]);
    engine.set_weight("a", 3).unwrap();
    // One grant may still be in the old order while "a" finishes its turn in its old class.
    let counts = shares(&engine, &["a", "b"], 81, 0);
    assert!(
        (60..=62).contains(&counts[0]),
        "after the swap a gets ~3/4: {counts:?}"
    );
    engine.replace_weights([("b", 3)], 1).unwrap();
    assert_eq!(engine.weight_of(key("a")), 1);
    assert_eq!(engine.weight_of(key("b")), 3);
    let counts = shares(&engine, &["a", "b"], 81, 0);
    assert!((19..=22).contains(&counts[0]), "{counts:?}");
}

#[test]
fn weight_errors_are_clear() {
    let engine = engine(Config {
        max_weight_classes: 2,
        ..Config::default()
    });
    assert!(matches!(
        engine.set_weight("a", 0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        engine.set_weight("a", 10_001),
        Err(Error::InvalidArgument(_))
    ));
    engine.set_weight("a", 2).unwrap();
    assert_eq!(engine.set_weight("b", 3), Err(Error::TooManyWeightClasses));
    engine.set_weight("b", 2).unwrap();
}

#[test]
fn a_tenant_whose_head_is_not_ready_is_skipped_and_not_charged() {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    // "a" waits for its Retry-After; "b" is ready now.
    for _ in 0..20 {
        queued(
            &engine,
            &Request {
                retry_after_ns: 100 * MS,
                ..request("a")
            },
            0,
        );
        queued(&engine, &request("b"), 0);
    }
    for _ in 0..5 {
        let g = granted(&engine, 10 * MS);
        assert_eq!(g.tenant, key("b"));
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 10 * MS)
            .unwrap();
    }
    assert!(engine.next_wakeup_ns().is_some());
    // Once ready, "a" is served at its share: not penalised for the skipped turns, and not
    // paid back with a burst either, beyond the lane's lead of at most three grants.
    let mut order = vec![];
    for _ in 0..10 {
        let g = granted(&engine, 101 * MS);
        order.push(if g.tenant == key("a") { 'a' } else { 'b' });
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 101 * MS)
            .unwrap();
    }
    let a = order.iter().filter(|&&c| c == 'a').count();
    assert!((5..=8).contains(&a), "{order:?}");
}

#[test]
fn a_granter_whose_clock_is_a_little_behind_the_enqueuers_grants_at_once() {
    // Each thread reads its own clock: a request with no Retry-After, enqueued at t and looked for
    // by a thread whose clock says t - 100 us, is granted then, not parked until the wheel's next
    // tick (with two threads on one tenant that parked it on most grants).
    let engine = engine(Config::default());
    let t = 10 * MS;
    queued(&engine, &request("a"), t);
    let first = granted(&engine, t);
    engine
        .complete_at(first.ticket, Outcome::Admitted, None, t)
        .unwrap();
    queued(&engine, &request("a"), t + MS / 2);
    let g = granted(&engine, t + MS / 2 - MS / 10);
    assert_eq!(g.tenant, key("a"));
    assert_eq!(engine.next_wakeup_ns(), None);
}

#[test]
fn at_most_max_in_flight_grants_are_out() {
    let engine = engine(Config {
        max_in_flight: 3,
        ..Config::default()
    });
    for i in 0..10 {
        queued(&engine, &request(&format!("t{i}")), 0);
    }
    let grants: Vec<_> = (0..3).map(|_| granted(&engine, 1)).collect();
    assert_eq!(engine.next_grant_at(1), NextGrant::AtCapacity);
    assert_eq!(engine.stats().in_flight, 3);
    engine
        .complete_at(grants[0].ticket, Outcome::Admitted, None, 2)
        .unwrap();
    granted(&engine, 2);
    assert_eq!(engine.next_grant_at(2), NextGrant::AtCapacity);
    engine.cancel_at(grants[1].ticket, 3).unwrap();
    assert_eq!(engine.stats().in_flight, 2);
}

#[test]
fn still_refused_goes_back_into_its_queue_within_budget() {
    let engine = engine(Config {
        max_wait_ms: 1_000,
        ..Config::default()
    });
    let ticket = queued(&engine, &request("a"), 0);
    let g = granted(&engine, 0);
    assert_eq!(g.ticket, ticket);
    let done = engine
        .complete_at(
            ticket,
            Outcome::StillRefused {
                retry_after_ns: 200 * MS,
            },
            None,
            10 * MS,
        )
        .unwrap();
    assert!(matches!(done, Completion::Requeued { position: 1, .. }));
    // Not ready until 210 ms; the same ticket comes back then.
    assert_eq!(engine.next_grant_at(100 * MS), NextGrant::Empty);
    let again = granted(&engine, 211 * MS);
    assert_eq!(again.ticket, ticket);
    assert_eq!(
        again.waited_ns,
        211 * MS,
        "waiting counts from the first enqueue"
    );
    assert_eq!(engine.stats().requeued, 1);
    // A Retry-After past the budget ends it.
    let done = engine
        .complete_at(
            ticket,
            Outcome::StillRefused {
                retry_after_ns: 900 * MS,
            },
            None,
            211 * MS,
        )
        .unwrap();
    let Completion::Refused(r) = done else {
        panic!("{done:?}")
    };
    assert_eq!(r.reason, Reason::WaitExceedsBudget);
    assert_eq!(r.waited_ns, 211 * MS);
    assert_eq!(engine.cancel_at(ticket, 212 * MS), Err(Error::StaleTicket));
    let s = engine.stats();
    assert_eq!((s.enqueued, s.ended(), s.queued, s.in_flight), (1, 1, 0, 0));
}

#[test]
fn budget_is_the_smaller_of_max_wait_and_the_request_timeout() {
    let engine = engine(Config {
        max_wait_ms: 1_000,
        ..Config::default()
    });
    let short = Request {
        timeout_ns: 300 * MS,
        retry_after_ns: 10 * MS,
        ..request("a")
    };
    let long = Request {
        timeout_ns: 5_000 * MS,
        ..request("b")
    };
    queued(&engine, &short, 0);
    queued(&engine, &long, 0);
    let mut left =
        [granted(&engine, 100 * MS), granted(&engine, 100 * MS)].map(|g| g.remaining_budget_ns);
    left.sort();
    assert_eq!(left, [200 * MS, 900 * MS]);
}

#[test]
fn an_expired_request_is_never_granted_and_is_refused_deadline_exceeded() {
    let engine = engine(Config {
        max_wait_ms: 100,
        ..Config::default()
    });
    let late = queued(
        &engine,
        &Request {
            user_data: 7,
            ..request("a")
        },
        0,
    );
    let fresh = queued(&engine, &request("a"), 50 * MS);
    match engine.next_grant_at(101 * MS) {
        NextGrant::Expired(e) => {
            assert_eq!(e.ticket, late);
            assert_eq!(e.user_data, 7);
            assert_eq!(e.refusal.reason, Reason::DeadlineExceeded);
            assert_eq!(e.refusal.waited_ns, 101 * MS);
            assert_eq!(e.refusal.position, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(engine.stats().in_flight, 0, "an expiry holds no permit");
    assert_eq!(granted(&engine, 102 * MS).ticket, fresh);
    assert_eq!(engine.cancel_at(late, 103 * MS), Err(Error::StaleTicket));
    assert_eq!(engine.stats().expired, 1);
}

#[test]
fn every_bound_refuses_with_its_reason_and_position() {
    let engine = engine(Config {
        max_tenants: 2,
        tenant_queue_capacity: 2,
        queue_capacity: 3,
        max_wait_ms: 1_000,
        ..Config::default()
    });
    queued(&engine, &request("a"), 0);
    queued(&engine, &request("a"), 0);
    let r = refusal(engine.enqueue_at(&request("a"), 0).unwrap());
    assert_eq!((r.reason, r.position), (Reason::TenantQueueFull, 3));
    queued(&engine, &request("b"), 0);
    let r = refusal(engine.enqueue_at(&request("b"), 0).unwrap());
    assert_eq!((r.reason, r.position), (Reason::QueueFull, 2));
    let r = refusal(engine.enqueue_at(&request("c"), 0).unwrap());
    assert_eq!((r.reason, r.position), (Reason::TenantTableFull, 1));
    let too_late = Request {
        retry_after_ns: 2_000 * MS,
        ..request("b")
    };
    let g = granted(&engine, 0);
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, 0)
        .unwrap();
    let r = refusal(engine.enqueue_at(&too_late, 0).unwrap());
    assert_eq!(r.reason, Reason::WaitExceedsBudget);
    assert!(r.position >= 1);
    let s = engine.stats();
    for reason in [
        Reason::TenantQueueFull,
        Reason::QueueFull,
        Reason::TenantTableFull,
        Reason::WaitExceedsBudget,
    ] {
        assert_eq!(s.refused_for(reason), 1, "{reason}");
    }
    assert_eq!(s.queued, 2, "refusals queue nothing");
}

#[test]
fn an_idle_tenant_gives_its_slot_back_after_the_idle_time() {
    // One active tenant at a time; the table has a spare slot for probing.
    let engine = engine(Config {
        max_tenants: 1,
        tenant_idle_ms: 50,
        ..Config::default()
    });
    let t = queued(&engine, &request("a"), 0);
    let r = refusal(engine.enqueue_at(&request("b"), 0).unwrap());
    assert_eq!(r.reason, Reason::TenantTableFull);
    granted(&engine, 1);
    engine
        .complete_at(t, Outcome::Admitted, None, 10 * MS)
        .unwrap();
    assert_eq!(engine.stats().tenants, 0);
    let t = queued(&engine, &request("b"), 20 * MS);
    granted(&engine, 21 * MS);
    engine
        .complete_at(t, Outcome::Admitted, None, 30 * MS)
        .unwrap();
    // Both slots now hold idle tenants within their idle time.
    let r = refusal(engine.enqueue_at(&request("c"), 40 * MS).unwrap());
    assert_eq!(
        r.reason,
        Reason::TenantTableFull,
        "still within the idle time"
    );
    // "a" came back to its own slot: always let in.
    let t = queued(&engine, &request("a"), 41 * MS);
    granted(&engine, 42 * MS);
    engine
        .complete_at(t, Outcome::Admitted, None, 43 * MS)
        .unwrap();
    // "b" has been idle 50 ms: "c" takes its slot.
    queued(&engine, &request("c"), 81 * MS);
    assert_eq!(engine.stats().tenants, 1);
    // A stream of new tenants keeps cycling through the one slot.
    for i in 0..100u64 {
        let now = 100 * MS * (i + 2);
        let g = granted(&engine, now);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
        queued(&engine, &request(&format!("n{i}")), now + 60 * MS);
    }
}

#[test]
fn estimated_wait_is_retry_after_plus_measured_waits() {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    // Serve "a" every 10 ms for a while so its interval is measured.
    for i in 0..20u64 {
        queued(&engine, &request("a"), i * 10 * MS);
        let g = granted(&engine, i * 10 * MS + 5 * MS);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, i * 10 * MS + 6 * MS)
            .unwrap();
    }
    let req = Request {
        retry_after_ns: 30 * MS,
        ..request("a")
    };
    queued(&engine, &req, 200 * MS);
    let Enqueued::Queued {
        position,
        estimated_wait_ns,
        ..
    } = engine.enqueue_at(&req, 200 * MS).unwrap()
    else {
        panic!()
    };
    assert_eq!(position, 2);
    // Each request found nothing ahead of it and waited 5 ms: the first-in-line wait. No
    // spacing between backlogged grants was measured, so one counts as two first-in-line
    // waits: 30 ms Retry-After + 5 ms + 1 x 10 ms (measured in units of 1,024 ns).
    assert!(
        estimated_wait_ns.abs_diff(45 * MS) < MS / 10,
        "{estimated_wait_ns}"
    );
    let g = granted(&engine, 231 * MS);
    assert_eq!(g.position, 1);
    assert!(g.estimated_wait_ns >= 30 * MS);
}

#[test]
fn a_grant_tells_the_caller_the_budget_left() {
    let engine = engine(Config {
        max_wait_ms: 10_000,
        ..Config::default()
    });
    let req = Request {
        timeout_ns: 2_000 * MS,
        ..request("a")
    };
    queued(&engine, &req, 1_000 * MS);
    let g = granted(&engine, 1_500 * MS);
    assert_eq!(g.waited_ns, 500 * MS);
    assert_eq!(g.remaining_budget_ns, 1_500 * MS);
}

#[test]
fn fairness_is_counted_in_cost_units() {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    engine.set_weight("heavy-w2", 2).unwrap();
    // Same weight, different costs: equal cost shares, so the cheap tenant gets 4x the grants.
    let tenants = [("cheap", 1u32), ("dear", 4), ("heavy-w2", 4)];
    for (t, cost) in tenants {
        for _ in 0..64 {
            queued(&engine, &Request { cost, ..request(t) }, 0);
        }
    }
    let mut cost_served = [0u64; 3];
    for _ in 0..300 {
        let g = granted(&engine, 0);
        let i = tenants
            .iter()
            .position(|(t, _)| key(t) == g.tenant)
            .unwrap();
        cost_served[i] += u64::from(g.cost);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, 0)
            .unwrap();
        queued(
            &engine,
            &Request {
                cost: g.cost,
                ..Request::new(g.tenant, Dimension::User)
            },
            0,
        );
    }
    let total: u64 = cost_served.iter().sum();
    let share = |i: usize| cost_served[i] as f64 / total as f64;
    // Weights 1:1:2 in cost units: 25%, 25%, 50%.
    assert!((share(0) - 0.25).abs() < 0.03, "{cost_served:?}");
    assert!((share(1) - 0.25).abs() < 0.03, "{cost_served:?}");
    assert!((share(2) - 0.50).abs() < 0.03, "{cost_served:?}");
}

#[test]
fn actual_cost_corrects_the_charge() {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    for t in ["under", "honest"] {
        for _ in 0..64 {
            queued(&engine, &request(t), 0);
        }
    }
    // "under" declares cost 1 but really costs 3; its grants should fall to about 1/4.
    let mut grants = [0u32; 2];
    for _ in 0..200 {
        let g = granted(&engine, 0);
        let under = g.tenant == key("under");
        grants[usize::from(!under)] += 1;
        let actual = if under { 3 } else { 1 };
        engine
            .complete_at(g.ticket, Outcome::Admitted, Some(actual), 0)
            .unwrap();
        queued(&engine, &Request::new(g.tenant, Dimension::User), 0);
    }
    let under_share = f64::from(grants[0]) / 200.0;
    assert!((0.2..0.32).contains(&under_share), "{grants:?}");
}

#[test]
fn config_errors_name_the_field_and_the_range() {
    let cases: [(Config, &str); 7] = [
        (
            Config {
                max_tenants: 0,
                ..Config::default()
            },
            "max_tenants",
        ),
        (
            Config {
                tenant_queue_capacity: 0,
                ..Config::default()
            },
            "tenant_queue_capacity",
        ),
        (
            Config {
                queue_capacity: 0,
                ..Config::default()
            },
            "queue_capacity",
        ),
        (
            Config {
                max_in_flight: 0,
                ..Config::default()
            },
            "max_in_flight",
        ),
        (
            Config {
                default_weight: 0,
                ..Config::default()
            },
            "default_weight",
        ),
        (
            Config {
                max_wait_ms: 0,
                ..Config::default()
            },
            "max_wait_ms",
        ),
        (
            Config {
                max_tenants: 4_000_000,
                tenant_queue_capacity: 1_000_000,
                ..Config::default()
            },
            "max_tenants x tenant_queue_capacity",
        ),
    ];
    for (config, field) in cases {
        let err = fairq::Engine::new(config).err().expect("must be refused");
        assert_eq!(err.field, field);
        let text = err.to_string();
        assert!(text.contains(field), "{text}");
        assert!(
            text.contains("must") || text.contains("4 GiB cap"),
            "{text}"
        );
    }
}

#[test]
fn bad_tickets_get_errors_and_change_nothing() {
    let engine = engine(Config::default());
    let t = queued(&engine, &request("a"), 0);
    // Completing a queued ticket is a state error; a forged one is stale.
    assert_eq!(
        engine.complete_at(t, Outcome::Admitted, None, 0),
        Err(Error::TicketState)
    );
    let forged = fairq::Ticket(t.0 ^ (1 << 40));
    assert_eq!(engine.cancel_at(forged, 0), Err(Error::StaleTicket));
    assert_eq!(
        engine.cancel_at(fairq::Ticket(u64::MAX), 0),
        Err(Error::StaleTicket)
    );
    assert_eq!(
        engine.cancel_at(fairq::Ticket(0), 0),
        Err(Error::StaleTicket)
    );
    let g = granted(&engine, 0);
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, 0)
        .unwrap();
    // Double complete and cancel-after-complete are stale.
    assert_eq!(
        engine.complete_at(g.ticket, Outcome::Admitted, None, 0),
        Err(Error::StaleTicket)
    );
    assert_eq!(engine.cancel_at(g.ticket, 0), Err(Error::StaleTicket));
    let s = engine.stats();
    assert_eq!(
        (s.enqueued, s.completed, s.in_flight, s.queued),
        (1, 1, 0, 0)
    );
}

#[test]
fn absurd_costs_and_a_backwards_clock_are_handled() {
    let engine = engine(Config::default());
    for cost in [0, fairq::MAX_COST + 1, u32::MAX] {
        assert!(matches!(
            engine.enqueue_at(
                &Request {
                    cost,
                    ..request("a")
                },
                0
            ),
            Err(Error::InvalidArgument(_))
        ));
    }
    let big = Request {
        cost: fairq::MAX_COST,
        retry_after_ns: 0,
        timeout_ns: u64::MAX,
        ..request("a")
    };
    queued(&engine, &big, u64::MAX - 10);
    // The clock goes backwards: nothing panics, nothing is lost.
    let g = granted(&engine, 5);
    assert_eq!(g.waited_ns, 0);
    assert!(matches!(
        engine.complete_at(g.ticket, Outcome::Admitted, Some(u32::MAX), 0),
        Err(Error::InvalidArgument(_))
    ));
    engine
        .complete_at(g.ticket, Outcome::Admitted, Some(fairq::MAX_COST), 0)
        .unwrap();
    queued(&engine, &request("b"), 1_000);
    granted(&engine, 10);
    let s = engine.stats();
    assert_eq!(s.enqueued, s.ended() + s.queued + s.in_flight);
}

#[test]
fn cancel_frees_the_place_at_once() {
    let engine = engine(Config {
        tenant_queue_capacity: 2,
        ..Config::default()
    });
    let a = queued(&engine, &request("a"), 0);
    queued(&engine, &request("a"), 0);
    engine.cancel_at(a, 1).unwrap();
    assert_eq!(engine.cancel_at(a, 1), Err(Error::StaleTicket));
    let Enqueued::Queued { position, .. } = engine.enqueue_at(&request("a"), 2).unwrap() else {
        panic!()
    };
    assert_eq!(position, 2);
    // The cancelled head is swept, never granted.
    let g = granted(&engine, 3);
    assert_ne!(g.ticket, a);
    let s = engine.stats();
    assert_eq!((s.cancelled, s.queued, s.in_flight), (1, 1, 1));
}

#[test]
fn a_caller_timer_expires_a_queued_ticket_as_deadline_exceeded() {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    queued(&engine, &request("busy"), 0);
    let waiting = queued(&engine, &request("a"), 0);
    let busy = granted(&engine, 1);
    // At capacity the engine cannot reach the waiting head; the caller's own timer ends it.
    assert_eq!(engine.next_grant_at(2 * MS), NextGrant::AtCapacity);
    let r = engine.expire_at(waiting, 5 * MS).unwrap();
    assert_eq!(
        (r.reason, r.position, r.waited_ns),
        (Reason::DeadlineExceeded, 1, 5 * MS)
    );
    assert_eq!(engine.expire_at(waiting, 6 * MS), Err(Error::StaleTicket));
    // A granted ticket is not the queue's to expire.
    assert_eq!(
        engine.expire_at(busy.ticket, 6 * MS),
        Err(Error::TicketState)
    );
    let s = engine.stats();
    assert_eq!(
        (s.expired, s.cancelled, s.queued, s.in_flight),
        (1, 0, 0, 1)
    );
    assert_eq!(s.refused_for(Reason::DeadlineExceeded), 1);
    assert_eq!(s.enqueued, s.ended() + s.queued + s.in_flight);
}
