//! Weighted shares among tenants whose requests all go to one bulkhead pool that is full (the
//! pool, not `max_in_flight`, is the binding bound).
//!
//! A full pool parks every tenant whose head goes to it, and each freed permit wakes one of
//! them: the order of the wakes decides the shares. Woken in turn they would alternate, 1:1
//! whatever their weights; the pool runs deficit round robin over them, so weights 3:1 give 3:1.

mod common;

use common::*;
use fairq::{Config, Dimension, NextGrant, Outcome, Request};

#[test]
fn a_full_pool_keeps_weighted_shares() {
    let engine = engine(Config {
        max_in_flight: 8,
        tenant_queue_capacity: 256,
        downstream_max_in_flight: vec![4],
        ..Config::default()
    });
    let (a, b) = (key("a"), key("b"));
    engine.set_weight_key(a, 3).unwrap();
    engine.set_weight_key(b, 1).unwrap();
    let to_pool = |k| Request {
        downstream: 0,
        ..Request::new(k, Dimension::User)
    };
    for _ in 0..200 {
        queued(&engine, &to_pool(a), 0);
        queued(&engine, &to_pool(b), 0);
    }
    // Keep the pool full: complete the oldest grant, then grant again.
    let mut out = std::collections::VecDeque::new();
    let (mut na, mut nb) = (0u32, 0u32);
    for step in 0..200u64 {
        while let NextGrant::Granted(g) = engine.next_grant_at(step) {
            if g.tenant == a {
                na += 1;
            } else {
                nb += 1;
            }
            out.push_back(g.ticket);
        }
        if let Some(t) = out.pop_front() {
            engine
                .complete_at(t, Outcome::Admitted, None, step)
                .unwrap();
        }
    }
    let ratio = f64::from(na) / f64::from(nb);
    assert!(
        (ratio - 3.0).abs() <= 0.3,
        "a {na}, b {nb}: ratio {ratio:.2}, want 3"
    );
}

/// The grant order of tenants `weights` whose requests all go to one full pool of 4 permits
/// (the oldest grant completed before each look for more), over `steps` completions.
fn full_pool_order(weights: &[u32], steps: u64) -> Vec<usize> {
    let engine = engine(Config {
        max_in_flight: 8,
        tenant_queue_capacity: 512,
        downstream_max_in_flight: vec![4],
        ..Config::default()
    });
    let keys: Vec<_> = (0..weights.len())
        .map(|i| key(&format!("tenant-{i}")))
        .collect();
    for (k, &w) in keys.iter().zip(weights) {
        engine.set_weight_key(*k, w).unwrap();
    }
    let to_pool = |k| Request {
        downstream: 0,
        ..Request::new(k, Dimension::User)
    };
    for _ in 0..steps + 8 {
        for k in &keys {
            queued(&engine, &to_pool(*k), 0);
        }
    }
    let mut out = std::collections::VecDeque::new();
    let mut order = Vec::new();
    for step in 0..steps {
        while let NextGrant::Granted(g) = engine.next_grant_at(step) {
            order.push(keys.iter().position(|k| *k == g.tenant).unwrap());
            out.push_back(g.ticket);
        }
        if let Some(t) = out.pop_front() {
            engine
                .complete_at(t, Outcome::Admitted, None, step)
                .unwrap();
        }
    }
    order
}

#[test]
fn three_weights_share_a_full_pool_by_weight() {
    let order = full_pool_order(&[1, 2, 4], 350);
    let counts: Vec<usize> = (0..3)
        .map(|i| order.iter().filter(|&&t| t == i).count())
        .collect();
    let total = counts.iter().sum::<usize>() as f64;
    for (i, w) in [1.0, 2.0, 4.0].iter().enumerate() {
        let share = counts[i] as f64 / total;
        assert!(
            (share / (w / 7.0) - 1.0).abs() < 0.05,
            "counts {counts:?}: tenant {i} has {share:.3}, want {:.3}",
            w / 7.0
        );
    }
}

/// Weights of 100 and 300 take turns like 1 and 3: the heavy tenant never runs more than 3
/// wakes ahead (plus the pool's first fill), not 300.
#[test]
fn large_weights_take_turns_in_small_steps() {
    let order = full_pool_order(&[100, 300], 400);
    let longest = order
        .chunk_by(|a, b| a == b)
        .filter(|run| run[0] == 1)
        .map(<[usize]>::len)
        .max()
        .unwrap();
    let heavy = order.iter().filter(|&&t| t == 1).count() as f64 / order.len() as f64;
    assert!(
        longest <= 4 + 3,
        "a run of {longest} grants of the heavy tenant"
    );
    assert!(
        (heavy - 0.75).abs() < 0.03,
        "heavy share {heavy:.3}, want 0.75"
    );
}
