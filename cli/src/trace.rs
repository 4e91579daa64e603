//! The arrival trace: every request a scenario offers, generated once and replayed identically
//! through every scheduler.
//!
//! Each tenant group draws from its own random stream (seeded by the scenario seed and the group
//! name), so removing a group (a baseline run `--without burster`) leaves every other group's
//! arrivals and service times exactly as they were.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};

use crate::scenario::{Retry, Scenario, Service};

/// ns per second.
pub const SEC: u64 = 1_000_000_000;
/// ns per millisecond.
pub const MS: u64 = 1_000_000;

/// One tenant of the trace.
#[derive(Clone, Debug)]
pub struct Tenant {
    /// Raw identifier (`enterprise`, `many-17`): the engine hashes it into its key.
    pub raw: String,
    /// The report row (tenant group) it belongs to.
    pub row: u32,
    /// Weight (tier).
    pub weight: u32,
    /// Cost of each request.
    pub cost: u32,
    /// Own total timeout, ns (0: none).
    pub timeout_ns: u64,
    /// Limiter Retry-After carried by each request, ns.
    pub retry_after_ns: u64,
    /// Client retries after a refusal.
    pub retry: Option<Retry>,
    /// The downstream its requests go to (0 without downstreams).
    pub downstream: u32,
}

/// One request offered at `t`.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    /// Arrival time, ns of virtual time.
    pub t: u64,
    /// Index into `Trace::tenants`.
    pub tenant: u32,
    /// Its service time once granted, µs.
    pub service_us: u32,
}

/// A report row: one tenant group.
#[derive(Clone, Debug)]
pub struct Row {
    /// Group name.
    pub name: String,
    /// Weight of each member.
    pub weight: u32,
    /// Members.
    pub count: u32,
}

/// The trace of a scenario.
pub struct Trace {
    /// Every tenant, grouped by row in order.
    pub tenants: Vec<Tenant>,
    /// Report rows.
    pub rows: Vec<Row>,
    /// Arrivals sorted by time.
    pub arrivals: Vec<Arrival>,
    /// Simulated time, ns.
    pub duration_ns: u64,
    /// The service time distribution (retries draw from it too).
    pub service: ServiceDist,
}

/// A sampler for the scenario's service time, in µs.
#[derive(Clone, Copy, Debug)]
pub enum ServiceDist {
    /// Always this many µs.
    Constant(f64),
    /// Exponential, rate per µs.
    Exponential(Exp<f64>),
    /// Log-normal in µs.
    Lognormal(LogNormal<f64>),
}

impl ServiceDist {
    fn new(service: &Service) -> ServiceDist {
        match *service {
            Service::Constant { ms } => ServiceDist::Constant(ms * 1000.0),
            Service::Exponential { mean_ms } => {
                ServiceDist::Exponential(Exp::new(1.0 / (mean_ms * 1000.0)).expect("mean > 0"))
            }
            Service::Lognormal { mean_ms, sigma } => {
                let mu = (mean_ms * 1000.0).ln() - sigma * sigma / 2.0;
                ServiceDist::Lognormal(LogNormal::new(mu, sigma).expect("sigma >= 0"))
            }
        }
    }

    /// One service time, µs, at least 1.
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        let us = match self {
            ServiceDist::Constant(us) => *us,
            ServiceDist::Exponential(d) => d.sample(rng),
            ServiceDist::Lognormal(d) => d.sample(rng),
        };
        us.clamp(1.0, u32::MAX as f64) as u32
    }
}

/// A 64-bit mix (splitmix64's finaliser): seeds per-group and per-retry streams.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl Trace {
    /// Generates the trace of `scenario`.
    pub fn generate(scenario: &Scenario) -> Trace {
        let duration_ns = (scenario.duration_s * SEC as f64) as u64;
        let service = ServiceDist::new(&scenario.backend.service);
        let mut tenants = Vec::new();
        let mut rows = Vec::new();
        let mut arrivals = Vec::new();
        for (row, group) in scenario.tenants.iter().enumerate() {
            let first = tenants.len() as u32;
            for i in 0..group.count {
                let raw = if group.count == 1 {
                    group.name.clone()
                } else {
                    format!("{}-{i}", group.name)
                };
                tenants.push(Tenant {
                    raw,
                    row: row as u32,
                    weight: group.weight,
                    cost: group.cost,
                    timeout_ns: group.timeout_ms.saturating_mul(MS),
                    retry_after_ns: group.retry_after_ms.saturating_mul(MS),
                    retry: group.retry,
                    downstream: scenario.downstream_of(group).unwrap_or(0),
                });
            }
            rows.push(Row {
                name: group.name.clone(),
                weight: group.weight,
                count: group.count,
            });
            let share = scenario.fair_share_per_s(group);
            // Piecewise-constant rate: the steady rate, replaced during each burst.
            let mut cuts: Vec<(u64, f64)> = vec![(0, group.rate.resolve(share))];
            let mut bursts = group.bursts.clone();
            bursts.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
            for b in &bursts {
                let start = (b.start_s * SEC as f64) as u64;
                let end = ((b.start_s + b.duration_s) * SEC as f64) as u64;
                cuts.push((start, b.rate.resolve(share)));
                cuts.push((end, group.rate.resolve(share)));
            }
            cuts.push((duration_ns, 0.0));
            let mut rng = SmallRng::seed_from_u64(mix(scenario.seed ^ name_hash(&group.name)));
            for pair in cuts.windows(2) {
                let (start, rate) = pair[0];
                let end = pair[1].0.min(duration_ns);
                let total = rate * f64::from(group.count);
                if total <= 0.0 || start >= end {
                    continue;
                }
                let gap = Exp::new(total).expect("rate > 0");
                let mut t = start as f64;
                loop {
                    t += gap.sample(&mut rng) * SEC as f64;
                    if t >= end as f64 {
                        break;
                    }
                    let member = if group.count == 1 {
                        0
                    } else {
                        rng.gen_range(0..group.count)
                    };
                    arrivals.push(Arrival {
                        t: t as u64,
                        tenant: first + member,
                        service_us: service.sample(&mut rng),
                    });
                }
            }
        }
        arrivals.sort_by_key(|a| (a.t, a.tenant));
        Trace {
            tenants,
            rows,
            arrivals,
            duration_ns,
            service,
        }
    }
}
