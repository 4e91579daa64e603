//! Weight classes are freed when no tenant refers to them: an engine that has seen many distinct
//! weights over time, but never more than `max_weight_classes` at once, never runs out.

mod common;

use std::collections::{HashMap, HashSet};

use common::*;
use fairq::{Config, NextGrant, Outcome};

#[test]
fn ten_thousand_weight_changes_never_run_out_of_classes() {
    let config = Config {
        max_tenants: 128,
        tenant_queue_capacity: 4,
        queue_capacity: 512,
        max_in_flight: 4,
        ..Config::default()
    };
    let limit = config.max_weight_classes as usize;
    let default_weight = config.default_weight;
    let engine = engine(config);
    let mut table: HashMap<u32, u32> = HashMap::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut seen = HashSet::new();
    for step in 0..10_000u64 {
        let tenant = (next() % 100) as u32;
        // A new weight in 1..=1000, unless that would put more than `limit` distinct weights in
        // use at once (the table's and the default); then one already in use.
        let mut in_use: HashSet<u32> = table
            .iter()
            .filter(|&(&t, _)| t != tenant)
            .map(|(_, &w)| w)
            .collect();
        in_use.insert(default_weight);
        // Otherwise it joins the largest group: small groups drain, and their weights go out of
        // use, so fresh ones keep coming in over the run.
        let fresh = 1 + (next() % 1000) as u32;
        let weight = if in_use.contains(&fresh) || in_use.len() < limit {
            fresh
        } else {
            let mut sizes: HashMap<u32, usize> = HashMap::new();
            for (&t, &w) in &table {
                if t != tenant {
                    *sizes.entry(w).or_default() += 1;
                }
            }
            sizes
                .into_iter()
                .max_by_key(|&(w, n)| (n, w))
                .map_or(default_weight, |(w, _)| w)
        };
        seen.insert(weight);
        engine
            .set_weight(&format!("tenant-{tenant}"), weight)
            .unwrap_or_else(|e| panic!("step {step}: set_weight({tenant}, {weight}): {e}"));
        table.insert(tenant, weight);
        // Traffic, so tenants hold slots (and their classes) while weights change.
        match next() % 4 {
            0 => {
                let who = format!("tenant-{}", next() % 100);
                let _ = engine.enqueue_at(&request(&who), step).unwrap();
            }
            1 => {
                if let NextGrant::Granted(g) = engine.next_grant_at(step) {
                    engine
                        .complete_at(g.ticket, Outcome::Admitted, None, step)
                        .unwrap();
                }
            }
            _ => {}
        }
        assert_eq!(
            engine.weight_of(key(&format!("tenant-{tenant}"))),
            weight,
            "step {step}"
        );
    }
    assert!(
        seen.len() > 300,
        "many distinct weights over time: {}",
        seen.len()
    );
    // Everything queued still drains, each tenant at its last weight.
    loop {
        match engine.next_grant_at(20_000) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, 20_000)
                    .unwrap();
            }
            NextGrant::Empty => break,
            other => panic!("drain: {other:?}"),
        }
    }
    assert_eq!(engine.stats().queued, 0);
    // The engine keeps at most twice `max_weight_classes` classes: tenants still queued in the
    // class of an old weight keep it until they are served.
    assert!(engine.debug_classes().len() <= 2 * limit);
}
