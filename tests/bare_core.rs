//! The scheduler core alone, with no feature plugged into its seam (`BareCore`), schedules as
//! the engine does: the features add indicators, policies and pools, never the shares.

use fairq::{
    BareCore, Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Reason, Request, TenantKey,
};

fn config() -> Config {
    Config {
        enabled: true,
        max_tenants: 64,
        tenant_queue_capacity: 64,
        queue_capacity: 1024,
        max_in_flight: 2,
        ..Config::default()
    }
}

fn request(tenant: &str) -> Request {
    Request::new(TenantKey::from_raw(tenant.as_bytes()), Dimension::User)
}

/// Queues `per_tenant` requests for each of `tenants`, then grants and completes every one;
/// returns the tenants in grant order.
fn order(
    tenants: &[(&str, u32)],
    per_tenant: usize,
    set_weight: impl Fn(TenantKey, u32),
    enqueue: impl Fn(&Request, u64) -> Enqueued,
    next_grant: impl Fn(u64) -> NextGrant,
    complete: impl Fn(fairq::Ticket, u64),
) -> Vec<String> {
    for &(name, weight) in tenants {
        set_weight(TenantKey::from_raw(name.as_bytes()), weight);
    }
    for _ in 0..per_tenant {
        for &(name, _) in tenants {
            assert!(matches!(
                enqueue(&request(name), 0),
                Enqueued::Queued { .. }
            ));
        }
    }
    let names: Vec<(u64, &str)> = tenants
        .iter()
        .map(|&(name, _)| (TenantKey::from_raw(name.as_bytes()).get(), name))
        .collect();
    let mut granted = Vec::new();
    for now in 1.. {
        match next_grant(now) {
            NextGrant::Granted(grant) => {
                let key = grant.tenant.get();
                granted.push(names.iter().find(|n| n.0 == key).unwrap().1.to_string());
                complete(grant.ticket, now);
            }
            NextGrant::Empty => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    granted
}

#[test]
fn the_core_alone_grants_in_the_engines_order() {
    let tenants = [("acme", 3), ("globex", 1), ("initech", 2)];
    let core = BareCore::new(config()).unwrap();
    let bare = order(
        &tenants,
        12,
        |key, weight| core.set_weight_key(key, weight).unwrap(),
        |r, now| core.enqueue_at(r, now).unwrap(),
        |now| core.next_grant_at(now),
        |ticket, now| {
            core.complete_at(ticket, Outcome::Admitted, None, now)
                .unwrap();
        },
    );
    let engine = Engine::new(config()).unwrap();
    let full = order(
        &tenants,
        12,
        |key, weight| engine.set_weight_key(key, weight).unwrap(),
        |r, now| engine.enqueue_at(r, now).unwrap(),
        |now| engine.next_grant_at(now),
        |ticket, now| {
            engine
                .complete_at(ticket, Outcome::Admitted, None, now)
                .unwrap();
        },
    );
    assert_eq!(bare.len(), 36, "every request granted once");
    assert_eq!(bare, full);
    // While all three are backlogged, each window of 6 grants splits 3:1:2.
    let first = &bare[..12];
    let count = |name: &str| first.iter().filter(|n| *n == name).count();
    assert_eq!(
        (count("acme"), count("globex"), count("initech")),
        (6, 2, 4)
    );
}

#[test]
fn the_core_alone_refuses_with_reasons_and_stale_tickets() {
    let core = BareCore::new(Config {
        tenant_queue_capacity: 1,
        ..config()
    })
    .unwrap();
    let Enqueued::Queued { ticket, .. } = core.enqueue_at(&request("a"), 0).unwrap() else {
        panic!("not queued");
    };
    let Enqueued::Refused(refusal) = core.enqueue_at(&request("a"), 0).unwrap() else {
        panic!("queued past the tenant bound");
    };
    assert_eq!(refusal.reason, Reason::TenantQueueFull);
    let anonymous = Request {
        tenant: None,
        ..request("a")
    };
    let Enqueued::Refused(refusal) = core.enqueue_at(&anonymous, 0).unwrap() else {
        panic!("queued without a tenant");
    };
    assert_eq!(refusal.reason, Reason::NoTenant);
    let NextGrant::Granted(grant) = core.next_grant_at(1) else {
        panic!("nothing granted");
    };
    assert_eq!(grant.ticket, ticket);
    core.complete_at(ticket, Outcome::Admitted, None, 2)
        .unwrap();
    assert!(core
        .complete_at(ticket, Outcome::Admitted, None, 3)
        .is_err());
}
