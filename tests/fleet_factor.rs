//! Fleet mode's engine side: a tenant scheduled at an effective weight `w × factor / 1024`
//! (`fairq::fleet` builds the Redis sync loop on this). Without a factor nothing changes: the window
//! tests in `fairness.rs` run with every factor at 1024.

mod common;

use common::*;
use fairq::{Config, Dimension, Error, FleetTenant, Request, TenantKey};

fn backlogged(names: &[&str]) -> fairq::Engine {
    let engine = engine(Config {
        max_in_flight: 1,
        ..Config::default()
    });
    for name in names {
        for _ in 0..4 {
            queued(&engine, &request(name), 0);
        }
    }
    engine
}

/// Grants per tenant over `n` cycles, every tenant kept backlogged.
fn shares(engine: &fairq::Engine, names: &[&str], n: usize, now: u64) -> Vec<usize> {
    let mut got = vec![0; names.len()];
    for _ in 0..n {
        let g = granted(engine, now);
        got[names.iter().position(|t| key(t) == g.tenant).unwrap()] += 1;
        engine
            .complete_at(g.ticket, fairq::Outcome::Admitted, None, now)
            .unwrap();
        queued(engine, &Request::new(g.tenant, Dimension::User), now);
    }
    got
}

#[test]
fn a_factor_scales_a_tenant_against_others_of_its_weight() {
    let engine = backlogged(&["a", "b"]);
    assert_eq!(shares(&engine, &["a", "b"], 100, 1), vec![50, 50]);
    // "a" is served elsewhere in the fleet: half its weight here.
    assert_eq!(engine.set_fleet_factor(key("a"), 512), Ok(true));
    let got = shares(&engine, &["a", "b"], 3000, 2);
    let share = got[0] as f64 / 3000.0;
    assert!((share - 1.0 / 3.0).abs() < 0.02, "{got:?}");
}

#[test]
fn a_factor_scales_a_tenant_against_other_weight_classes() {
    let engine = backlogged(&["heavy", "light"]);
    engine.set_weight("heavy", 2).unwrap();
    let got = shares(&engine, &["heavy", "light"], 300, 1);
    assert_eq!(got, vec![200, 100]);
    // Weight 2 at half: the same effective weight as "light".
    engine.set_fleet_factor(key("heavy"), 512).unwrap();
    let got = shares(&engine, &["heavy", "light"], 3000, 2);
    let share = got[0] as f64 / 3000.0;
    assert!((share - 0.5).abs() < 0.02, "{got:?}");
    // Back to full weight: 2:1 again.
    engine.set_fleet_factor(key("heavy"), 1024).unwrap();
    let got = shares(&engine, &["heavy", "light"], 3000, 3);
    let share = got[0] as f64 / 3000.0;
    assert!((share - 2.0 / 3.0).abs() < 0.02, "{got:?}");
}

#[test]
fn expected_shares_follow_the_effective_weights() {
    let engine = backlogged(&["a", "b", "c"]);
    engine.set_fleet_factor(key("a"), 256).unwrap();
    engine.set_fleet_factor(key("b"), 768).unwrap();
    shares(&engine, &["a", "b", "c"], 4000, 1);
    for name in ["a", "b", "c"] {
        let ind = engine.tenant_indicators_at(key(name), 1).unwrap();
        let ratio = ind.fair_share_ratio.unwrap();
        assert!((ratio - 1.0).abs() <= 0.03, "{name}: {ratio}");
    }
}

#[test]
fn factors_are_bounded_and_the_snapshot_reports_served_cost() {
    let engine = backlogged(&["a", "b"]);
    for bad in [0, 19, 1025] {
        assert!(matches!(
            engine.set_fleet_factor(key("a"), bad),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(
        engine.set_fleet_factor(TenantKey::from_raw(b"nobody"), 512),
        Ok(false)
    );
    engine.set_fleet_factor(key("b"), 20).unwrap();
    shares(&engine, &["a", "b"], 200, 1);
    let mut seen: Vec<FleetTenant> = Vec::new();
    engine.fleet_tenants(&mut seen);
    seen.sort_by_key(|f| f.tenant == key("b"));
    assert_eq!(seen.len(), 2);
    let (a, b) = (seen[0], seen[1]);
    assert_eq!((a.tenant, a.factor, a.weight), (key("a"), 1024, 1));
    assert_eq!((b.tenant, b.factor), (key("b"), 20));
    assert_eq!(a.served_cost + b.served_cost, 200);
    // At 2% of its weight, "b" gets about 2/102 of the grants.
    assert!(b.served_cost <= 8, "{b:?}");
    assert_eq!((a.queued, b.queued), (4, 4));
}
