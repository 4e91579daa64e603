//! The harness's oracle: each tenant's fair fleet-wide service rate, by weighted max-min fairness
//! with placement constraints. Fleet mode is judged against it, so it is pure and tested on
//! hand-computed cases.
//!
//! Progressive filling: a common level λ rises and every unfrozen tenant t wants λ·w_t. The
//! largest feasible λ is found by bisection, feasibility by max flow (source → tenant, capacity its
//! target; tenant → replica, capacity its demand there; replica → sink, the replica's capacity).
//! At that λ the tenants that cannot grow any further are frozen at λ·w_t; the rest go on.

/// A demand with no cap (a backlogged flow).
pub const UNBOUNDED: f64 = f64::INFINITY;

/// What the oracle needs to know about a fleet.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Weight of each tenant.
    pub weights: Vec<f64>,
    /// `demand[t][r]`: most tenant t can use at replica r (0: not there; UNBOUNDED: backlogged).
    pub demand: Vec<Vec<f64>>,
    /// Service capacity of each replica.
    pub capacity: Vec<f64>,
}

/// Each tenant's fair rate, in the units of `capacity`.
pub fn fair_rates(p: &Problem) -> Vec<f64> {
    let n = p.weights.len();
    let total: f64 = p.capacity.iter().sum();
    let eps = 1e-9 * total.max(1.0);
    // A tenant can never use more than it may use in total, nor more than the whole fleet.
    let reach: Vec<f64> = p
        .demand
        .iter()
        .map(|d| d.iter().map(|&x| x.min(total)).sum::<f64>())
        .collect();
    let mut frozen: Vec<Option<f64>> = (0..n)
        .map(|t| (reach[t] <= eps || p.weights[t] <= 0.0).then_some(0.0))
        .collect();
    while frozen.iter().any(Option::is_none) {
        let targets = |lambda: f64| -> Vec<f64> {
            (0..n)
                .map(|t| frozen[t].unwrap_or(lambda * p.weights[t]))
                .collect()
        };
        let (mut lo, mut hi) = (0.0, total / min_active_weight(p, &frozen));
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if feasible(p, &targets(mid), eps) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let base = targets(lo);
        let base_flow = max_flow(p, &base);
        let step = 1e-6 * total.max(1.0);
        let mut any = false;
        for t in 0..n {
            if frozen[t].is_some() {
                continue;
            }
            // Stuck: asking for a little more moves (almost) no more flow. Comparing flows, not
            // feasibility, keeps the bisection's rounding from freezing tenants that can grow.
            let mut grown = base.clone();
            grown[t] += step;
            if max_flow(p, &grown) < base_flow + step / 2.0 {
                // Frozen a hair low: the bisection's level may overshoot by its tolerance, which
                // would make every later level look infeasible.
                frozen[t] = Some((base[t] - eps).max(0.0));
                any = true;
            }
        }
        if !any {
            // Rounding left no tenant provably stuck: everyone stops here.
            for t in 0..n {
                frozen[t].get_or_insert((base[t] - eps).max(0.0));
            }
        }
    }
    frozen.into_iter().map(|f| f.unwrap_or(0.0)).collect()
}

/// Rates as shares of their sum.
pub fn shares(rates: &[f64]) -> Vec<f64> {
    let sum: f64 = rates.iter().sum();
    rates
        .iter()
        .map(|r| if sum > 0.0 { r / sum } else { 0.0 })
        .collect()
}

fn min_active_weight(p: &Problem, frozen: &[Option<f64>]) -> f64 {
    (0..p.weights.len())
        .filter(|&t| frozen[t].is_none())
        .map(|t| p.weights[t])
        .fold(f64::INFINITY, f64::min)
}

fn feasible(p: &Problem, targets: &[f64], eps: f64) -> bool {
    let want: f64 = targets.iter().sum();
    max_flow(p, targets) >= want - eps
}

/// Max flow (Edmonds-Karp) through source → tenants → replicas → sink.
fn max_flow(p: &Problem, targets: &[f64]) -> f64 {
    let (n, m) = (p.weights.len(), p.capacity.len());
    let total: f64 = p.capacity.iter().sum();
    let size = n + m + 2;
    let (src, sink) = (n + m, n + m + 1);
    let mut cap = vec![vec![0.0f64; size]; size];
    for t in 0..n {
        cap[src][t] = targets[t];
        for r in 0..m {
            cap[t][n + r] = p.demand[t][r].min(total);
        }
    }
    for r in 0..m {
        cap[n + r][sink] = p.capacity[r];
    }
    let mut flow = 0.0;
    loop {
        let mut prev = vec![usize::MAX; size];
        prev[src] = src;
        let mut queue = std::collections::VecDeque::from([src]);
        while let Some(u) = queue.pop_front() {
            for v in 0..size {
                if prev[v] == usize::MAX && cap[u][v] > 1e-12 {
                    prev[v] = u;
                    queue.push_back(v);
                }
            }
        }
        if prev[sink] == usize::MAX {
            return flow;
        }
        let mut push = f64::INFINITY;
        let mut v = sink;
        while v != src {
            push = push.min(cap[prev[v]][v]);
            v = prev[v];
        }
        let mut v = sink;
        while v != src {
            cap[prev[v]][v] -= push;
            cap[v][prev[v]] += push;
            v = prev[v];
        }
        flow += push;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = UNBOUNDED;

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() < 1e-6 * w.abs().max(1.0),
                "{got:?} != {want:?}"
            );
        }
    }

    #[test]
    fn a_tenant_on_one_replica_gets_that_replica() {
        // A everywhere, B only on r1, equal weights: B = C, A = 2C (not 1.5C each: B can't
        // use r2 or r3).
        let p = Problem {
            weights: vec![1.0, 1.0],
            demand: vec![vec![INF; 3], vec![INF, 0.0, 0.0]],
            capacity: vec![100.0; 3],
        };
        close(&fair_rates(&p), &[200.0, 100.0]);
    }

    #[test]
    fn everyone_everywhere_splits_by_weight() {
        let p = Problem {
            weights: vec![1.0, 2.0],
            demand: vec![vec![INF; 3], vec![INF; 3]],
            capacity: vec![100.0; 3],
        };
        close(&fair_rates(&p), &[100.0, 200.0]);
        close(&shares(&fair_rates(&p)), &[1.0 / 3.0, 2.0 / 3.0]);
    }

    #[test]
    fn a_capped_tenant_gets_its_demand_and_the_rest_goes_to_the_others() {
        // A: backlogged on r1, 10 on r2 and r3; B everywhere. A can reach at most 100 + 20 =
        // 120 < 150: it is frozen there and B takes the remaining 180.
        let p = Problem {
            weights: vec![1.0, 1.0],
            demand: vec![vec![INF, 10.0, 10.0], vec![INF; 3]],
            capacity: vec![100.0; 3],
        };
        close(&fair_rates(&p), &[120.0, 180.0]);
    }

    #[test]
    fn a_heavy_tenant_pinned_to_one_replica_is_capped_by_it() {
        // H (w 2) only on r1, X and Y (w 1) everywhere: H would want 2/4 of 300 = 150 but r1
        // holds 100; X and Y split the other 200.
        let p = Problem {
            weights: vec![2.0, 1.0, 1.0],
            demand: vec![vec![INF, 0.0, 0.0], vec![INF; 3], vec![INF; 3]],
            capacity: vec![100.0; 3],
        };
        close(&fair_rates(&p), &[100.0, 100.0, 100.0]);
    }

    #[test]
    fn weights_hold_on_a_shared_replica() {
        // A (w 3) and B (w 1) only on r1, C only on r2: r1 splits 3:1, r2 is C's.
        let p = Problem {
            weights: vec![3.0, 1.0, 1.0],
            demand: vec![
                vec![INF, 0.0, 0.0],
                vec![INF, 0.0, 0.0],
                vec![0.0, INF, 0.0],
            ],
            capacity: vec![100.0; 3],
        };
        close(&fair_rates(&p), &[75.0, 25.0, 100.0]);
    }

    #[test]
    fn rounding_in_the_bisection_does_not_freeze_tenants_early() {
        for c in [100.0, 3826.0, 3826.123, 3913.77, 3831.9999] {
            let p = Problem {
                weights: vec![2.0, 1.0, 1.0],
                demand: vec![vec![INF, 0.0, 0.0], vec![INF; 3], vec![INF; 3]],
                capacity: vec![c; 3],
            };
            close(&fair_rates(&p), &[c, c, c]);
            let p = Problem {
                weights: vec![1.0, 1.0],
                demand: vec![vec![INF; 3], vec![INF, 0.0, 0.0]],
                capacity: vec![c; 3],
            };
            close(&fair_rates(&p), &[2.0 * c, c]);
            if c < 1000.0 {
                continue;
            }
            let p = Problem {
                weights: vec![1.0, 1.0],
                demand: vec![vec![INF, 250.0, 250.0], vec![INF; 3]],
                capacity: vec![c; 3],
            };
            close(&fair_rates(&p), &[c + 500.0, 2.0 * c - 500.0]);
        }
    }

    #[test]
    fn idle_capacity_is_not_handed_out_and_absent_tenants_get_nothing() {
        let p = Problem {
            weights: vec![1.0, 1.0],
            demand: vec![vec![30.0, 0.0, 0.0], vec![0.0; 3]],
            capacity: vec![100.0; 3],
        };
        close(&fair_rates(&p), &[30.0, 0.0]);
    }
}
