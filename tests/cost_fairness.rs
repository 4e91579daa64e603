//! Fairness in cost units: with every tenant backlogged, the cost served to each tenant (and to
//! each weight class) stays within a bound of its weighted share at every point of the run,
//! whatever the request costs, and when tenants go idle and come back.
//!
//! The share is counted from the last change in the set of backlogged tenants: after a tenant
//! leaves or rejoins, the others' shares are measured afresh. The bound is stated in units of the
//! largest request cost of the run: a scheduler that serves whole requests cannot do better than
//! about one of them.

mod common;

use std::collections::HashMap;

use common::*;
use fairq::{Config, Dimension, NextGrant, Outcome, Request, TenantKey};
use proptest::prelude::*;

/// How one tenant's request costs are drawn.
#[derive(Clone, Debug)]
enum Costs {
    /// Every request costs this.
    Fixed(u32),
    /// Uniform in `1..=max`.
    Uniform(u32),
}

#[derive(Clone, Debug)]
struct Tenant {
    weight: u32,
    costs: Costs,
}

/// The largest deviation seen, in units of the largest cost: per tenant and per weight class.
#[derive(Debug, Default)]
struct Deviation {
    tenant: f64,
    class: f64,
    /// The same, counted afresh for every tenant whenever the set of backlogged tenants changes.
    interval: f64,
}

/// Runs `grants` grants with every tenant backlogged (two requests queued each), one caller,
/// virtual time. At the grant numbers in `leave` (tenant, at, for), the tenant stops sending for
/// `for` grants, drains and goes idle, then comes back. Returns the largest deviations.
fn run(tenants: &[Tenant], grants: usize, leave: &[(usize, usize, usize)], seed: u64) -> Deviation {
    let engine = engine(Config {
        max_tenants: 16,
        tenant_queue_capacity: 4,
        queue_capacity: 64,
        max_in_flight: 1,
        max_weight_classes: 16,
        ..Config::default()
    });
    let keys: Vec<TenantKey> = (0..tenants.len())
        .map(|i| TenantKey::from_raw(format!("cost-tenant-{i}").as_bytes()))
        .collect();
    let index: HashMap<TenantKey, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    for (k, t) in keys.iter().zip(tenants) {
        engine.set_weight_key(*k, t.weight).unwrap();
    }
    let max_cost = tenants
        .iter()
        .map(|t| match t.costs {
            Costs::Fixed(c) | Costs::Uniform(c) => c,
        })
        .max()
        .unwrap();
    let mut rng = seed | 1;
    let mut draw = |costs: &Costs| -> u32 {
        match *costs {
            Costs::Fixed(c) => c,
            Costs::Uniform(max) => {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                1 + (rng % u64::from(max)) as u32
            }
        }
    };
    let n = tenants.len();
    let mut queued_now = vec![0u32; n];
    let mut sending = vec![true; n];
    let mut back_at = vec![usize::MAX; n];
    // Cost served to each tenant, and its fluid share: each grant's cost split among the
    // backlogged tenants by weight. A tenant's account starts afresh when it rejoins.
    let mut served = vec![0f64; n];
    let mut share = vec![0f64; n];
    let mut backlogged = vec![true; n];
    // Accounts since the backlogged set last changed.
    let mut since = vec![(0f64, 0f64); n];
    let enqueue = |i: usize, cost: u32, queued_now: &mut Vec<u32>| {
        let req = Request {
            cost,
            ..Request::new(keys[i], Dimension::User)
        };
        queued(&engine, &req, 0);
        queued_now[i] += 1;
    };
    for (i, tenant) in tenants.iter().enumerate() {
        for _ in 0..2 {
            let c = draw(&tenant.costs);
            enqueue(i, c, &mut queued_now);
        }
    }
    let mut worst = Deviation::default();
    for g in 0..grants {
        for &(who, at, idle) in leave {
            // Someone must stay backlogged, or there is nothing to grant.
            let others = (0..n).any(|i| i != who && sending[i]);
            if at == g && who < n && others {
                sending[who] = false;
                back_at[who] = g + idle;
            }
        }
        for i in 0..n {
            if !sending[i] && back_at[i] <= g && queued_now[i] == 0 {
                sending[i] = true;
                backlogged[i] = true;
                served[i] = 0.0;
                share[i] = 0.0;
                since.iter_mut().for_each(|a| *a = (0.0, 0.0));
                for _ in 0..2 {
                    let c = draw(&tenants[i].costs);
                    enqueue(i, c, &mut queued_now);
                }
            }
        }
        let grant = match engine.next_grant_at(0) {
            NextGrant::Granted(grant) => grant,
            other => panic!("grant {g}: expected a grant, got {other:?}"),
        };
        engine
            .complete_at(grant.ticket, Outcome::Admitted, None, 0)
            .unwrap();
        let i = index[&grant.tenant];
        queued_now[i] -= 1;
        let cost = f64::from(grant.cost);
        served[i] += cost;
        let weight: u32 = (0..n)
            .filter(|&j| backlogged[j])
            .map(|j| tenants[j].weight)
            .sum();
        since[i].0 += cost;
        for j in (0..n).filter(|&j| backlogged[j]) {
            let part = cost * f64::from(tenants[j].weight) / f64::from(weight);
            share[j] += part;
            since[j].1 += part;
        }
        if sending[i] {
            let c = draw(&tenants[i].costs);
            enqueue(i, c, &mut queued_now);
        } else if queued_now[i] == 0 {
            backlogged[i] = false;
            since.iter_mut().for_each(|a| *a = (0.0, 0.0));
        }
        // Deviation of each backlogged tenant, and of each weight class, from its share.
        let mut classes: HashMap<u32, f64> = HashMap::new();
        for j in (0..n).filter(|&j| backlogged[j]) {
            let deviation = served[j] - share[j];
            worst.tenant = worst.tenant.max(deviation.abs() / f64::from(max_cost));
            let fresh = (since[j].0 - since[j].1).abs() / f64::from(max_cost);
            worst.interval = worst.interval.max(fresh);
            *classes.entry(tenants[j].weight).or_default() += deviation;
        }
        for deviation in classes.values() {
            worst.class = worst.class.max(deviation.abs() / f64::from(max_cost));
        }
    }
    worst
}

fn fixed(weights: &[u32], cost: u32) -> Vec<Tenant> {
    weights
        .iter()
        .map(|&weight| Tenant {
            weight,
            costs: Costs::Fixed(cost),
        })
        .collect()
}

/// Bounds, in units of the largest request cost (each comment says where it comes from).
/// A weight class: over-served by less than one request (it is charged the request it was picked
/// for), under-served by at most one other class's request on top of its standing lag.
const CLASS_BOUND: f64 = 1.25;
/// A tenant also shares its class's turns with the class's other tenants (deficit round robin).
const TENANT_BOUND: f64 = 1.75;
/// With tenants leaving and rejoining, over every stretch in which the set of backlogged tenants
/// stays the same, counted from the stretch's start: a tenant may bring up to its standing lag
/// into the stretch, and a rejoining tenant may run up to three of its grants ahead through the
/// light-tenant lane. (A tenant that goes idle has its lag forgiven: it rejoins level, and the
/// others absorb it.) The survey below finds 3.8 at worst over 3000 random cases.
const REJOIN_BOUND: f64 = 4.0;

fn assert_within(d: &Deviation, class: f64, tenant: f64, what: &str) {
    assert!(
        d.class <= class && d.tenant <= tenant,
        "{what}: class deviation {:.2}, tenant deviation {:.2} (in largest costs)",
        d.class,
        d.tenant
    );
}

#[test]
fn uniform_costs_weights_4_2_1() {
    let tenants: Vec<Tenant> = [4, 2, 1]
        .iter()
        .map(|&weight| Tenant {
            weight,
            costs: Costs::Uniform(100),
        })
        .collect();
    let d = run(&tenants, 20_000, &[], 7);
    assert_within(
        &d,
        CLASS_BOUND,
        TENANT_BOUND,
        "weights 4,2,1, costs 1..=100",
    );
}

#[test]
fn two_tenants_per_class_costs_up_to_1000() {
    let tenants: Vec<Tenant> = [8, 4, 2, 1, 8, 4, 2, 1]
        .iter()
        .map(|&weight| Tenant {
            weight,
            costs: Costs::Uniform(1000),
        })
        .collect();
    let d = run(&tenants, 20_000, &[], 11);
    assert_within(
        &d,
        CLASS_BOUND,
        TENANT_BOUND,
        "weights 8,4,2,1 x2, costs 1..=1000",
    );
}

#[test]
fn one_heavy_tenant() {
    let mut tenants = fixed(&[4, 2, 1], 1);
    tenants[0].costs = Costs::Fixed(100);
    let d = run(&tenants, 20_000, &[], 3);
    assert_within(
        &d,
        CLASS_BOUND,
        TENANT_BOUND,
        "weight 4 at cost 100, others cost 1",
    );
}

#[test]
fn a_tenant_rejoining_with_costs_gets_no_burst() {
    let tenants: Vec<Tenant> = [4, 2, 1]
        .iter()
        .map(|&weight| Tenant {
            weight,
            costs: Costs::Uniform(100),
        })
        .collect();
    let leave: Vec<(usize, usize, usize)> = (0..40).map(|k| (k % 3, 300 + k * 400, 150)).collect();
    let d = run(&tenants, 17_000, &leave, 5);
    assert!(
        d.interval <= REJOIN_BOUND,
        "leaving and rejoining: deviation {:.2} largest costs in a stretch",
        d.interval
    );
}

fn tenant_strategy() -> impl Strategy<Value = Tenant> {
    (
        1u32..=12,
        prop_oneof![
            (1u32..=1000).prop_map(Costs::Fixed),
            (1u32..=1000).prop_map(Costs::Uniform),
        ],
    )
        .prop_map(|(weight, costs)| Tenant { weight, costs })
}

proptest! {
    // A fixed seed: the same cases in every run (the bounds hold over 3000 random cases too,
    // see `survey`).
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: proptest::test_runner::RngSeed::Fixed(20_261_201),
        ..ProptestConfig::default()
    })]

    /// Random weights and costs, every tenant backlogged throughout.
    #[test]
    fn served_cost_stays_within_the_bound(
        tenants in prop::collection::vec(tenant_strategy(), 2..7),
        seed in any::<u64>(),
    ) {
        let d = run(&tenants, 3_000, &[], seed);
        prop_assert!(
            d.class <= CLASS_BOUND && d.tenant <= TENANT_BOUND,
            "class deviation {:.2}, tenant deviation {:.2} for {:?}", d.class, d.tenant, tenants
        );
    }

    /// The same with random idle periods and rejoins.
    #[test]
    fn served_cost_stays_within_the_bound_with_rejoins(
        tenants in prop::collection::vec(tenant_strategy(), 2..7),
        leave in prop::collection::vec((0usize..7, 0usize..3_000, 1usize..300), 1..8),
        seed in any::<u64>(),
    ) {
        let d = run(&tenants, 3_000, &leave, seed);
        prop_assert!(
            d.interval <= REJOIN_BOUND,
            "deviation {:.2} in a stretch for {:?}, {:?}", d.interval, tenants, leave
        );
    }
}

/// Prints the worst deviations over 3000 random cases of each kind (the numbers the bounds are
/// checked against; "with leaves" counts each tenant's account across the others' changes, a
/// rejoining tenant's afresh): `cargo test --release --test cost_fairness survey -- --ignored --nocapture`.
#[test]
#[ignore = "a survey that prints numbers and asserts nothing: run by hand (see above)"]
fn survey() {
    let mut x = 12345u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut wt, mut wc) = (0.0f64, 0.0f64);
    let (mut lt, mut lc, mut li) = (0.0f64, 0.0f64, 0.0f64);
    for _ in 0..3000 {
        let n = 2 + (next() % 6) as usize;
        let tenants: Vec<Tenant> = (0..n)
            .map(|_| Tenant {
                weight: 1 + (next() % 12) as u32,
                costs: if next() % 2 == 0 {
                    Costs::Fixed(1 + (next() % 1000) as u32)
                } else {
                    Costs::Uniform(1 + (next() % 1000) as u32)
                },
            })
            .collect();
        let d = run(&tenants, 3000, &[], next());
        wt = wt.max(d.tenant);
        wc = wc.max(d.class);
        let leave: Vec<(usize, usize, usize)> = (0..4)
            .map(|_| {
                (
                    (next() % n as u64) as usize,
                    (next() % 3000) as usize,
                    1 + (next() % 300) as usize,
                )
            })
            .collect();
        let d = run(&tenants, 3000, &leave, next());
        lt = lt.max(d.tenant);
        lc = lc.max(d.class);
        li = li.max(d.interval);
    }
    eprintln!(
        "constant set: tenant {wt:.3} class {wc:.3}; with leaves: tenant {lt:.3} class {lc:.3}, \
         per interval {li:.3}"
    );
}
