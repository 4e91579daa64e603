//! `fairq bench`: grants per second of the engine on this machine, self-contained.
//!
//! Every tenant is kept backlogged: each cycle takes a grant (`next_grant`), completes it
//! (`complete`) and enqueues a new request for the tenant just served (`enqueue`), so the queues
//! never drain and every pick runs the full weighted scheduler. Weights cycle through the tiers
//! 8, 4, 2, 1 (or the weights given). The clock is read once per cycle. With several threads,
//! all share one engine.
//!
//! The hot-tenant cases (one tenant; two of weights 8 and 1) have two requests queued per
//! tenant (`--hot-depth` changes it), so with two threads one of them often finds the only ready
//! tenant held by the other: that caller must get `Empty` at once and cost the holder nothing.
//! One and two threads take turns over `HOT_ROUNDS` rounds, and the table gives the medians.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey};

/// One measurement.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Threads sharing the engine.
    pub threads: usize,
    /// Backlogged tenants.
    pub tenants: u32,
    /// Grants per second, all threads together: grants over the longest thread's wall time.
    pub grants_per_s: f64,
}

impl Measurement {
    /// Wall nanoseconds per grant, all threads together: the same figure as `grants_per_s`,
    /// inverted.
    pub fn ns_per_grant(&self) -> f64 {
        1e9 / self.grants_per_s.max(1e-9)
    }
}

/// `repeat` measurements of one case: the median, lowest and highest grants per second.
pub fn repeated(
    threads: usize,
    tenants: u32,
    repeat: u32,
    run: Duration,
) -> Result<(Measurement, f64, f64), String> {
    let mut rates = Vec::new();
    for _ in 0..repeat.max(1) {
        rates.push(measure(threads, tenants, &TIERS, DEPTH, run)?.grants_per_s);
    }
    let (lowest, highest) = (
        rates.iter().copied().fold(f64::INFINITY, f64::min),
        rates.iter().copied().fold(0.0, f64::max),
    );
    let m = Measurement {
        threads,
        tenants,
        grants_per_s: median(rates),
    };
    Ok((m, lowest, highest))
}

/// The weights of the default run, cycled over the tenants.
pub const TIERS: [u32; 4] = [8, 4, 2, 1];
/// Requests queued per tenant when a cycle starts, unless told otherwise.
pub const DEPTH: u32 = 2;

fn engine(
    tenants: u32,
    threads: usize,
    weights: &[u32],
    depth: u32,
) -> Result<(Engine, Vec<TenantKey>), String> {
    let engine = Engine::new(Config {
        enabled: true,
        max_tenants: (tenants * 2).max(64),
        tenant_queue_capacity: depth + 2,
        queue_capacity: tenants * (depth + 2),
        max_in_flight: (threads as u32 * 2).max(8),
        max_wait_ms: 3_600_000,
        ..Config::default()
    })
    .map_err(|e| e.to_string())?;
    let mut keys = Vec::with_capacity(tenants as usize);
    for i in 0..tenants {
        let raw = format!("bench-{i}");
        engine
            .set_weight(&raw, weights[i as usize % weights.len()])
            .map_err(|e| e.to_string())?;
        keys.push(TenantKey::from_raw(raw.as_bytes()));
    }
    let now = fairq::now_ns();
    for (i, &key) in keys.iter().enumerate() {
        for _ in 0..depth {
            let request = Request {
                user_data: i as u64,
                ..Request::new(key, Dimension::User)
            };
            match engine.enqueue_at(&request, now) {
                Ok(Enqueued::Queued { .. }) => {}
                other => return Err(format!("prefill refused: {other:?}")),
            }
        }
    }
    Ok((engine, keys))
}

/// Rounds of the hot-tenant table: one and two threads take turns, each for a fifth of the time.
pub const HOT_ROUNDS: u32 = 5;

/// One and two threads over `tenants` (weighted by `weights`, `depth` queued each), in
/// `HOT_ROUNDS` alternated rounds sharing `run`, so that a change in the host's speed during the
/// run moves both figures of the ratio alike: the median grants per second of each.
pub fn one_and_two(
    tenants: u32,
    weights: &[u32],
    depth: u32,
    run: Duration,
) -> Result<(f64, f64), String> {
    let round = run / HOT_ROUNDS;
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..HOT_ROUNDS {
        one.push(measure(1, tenants, weights, depth, round)?.grants_per_s);
        two.push(measure(2, tenants, weights, depth, round)?.grants_per_s);
    }
    Ok((median(one), median(two)))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Measures `threads` threads over `tenants` backlogged tenants, weighted by `weights` cycled,
/// each with `depth` requests queued when a cycle starts, for about `run`.
pub fn measure(
    threads: usize,
    tenants: u32,
    weights: &[u32],
    depth: u32,
    run: Duration,
) -> Result<Measurement, String> {
    let (engine, keys) = engine(tenants, threads, weights, depth)?;
    let engine = Arc::new(engine);
    let keys = Arc::new(keys);
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (engine, keys, stop, barrier) =
                (engine.clone(), keys.clone(), stop.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<(u64, Duration), String> {
                barrier.wait();
                let started = Instant::now();
                let mut cycles = 0u64;
                // Relaxed: a stop flag; nothing is published through it. Each caller also
                // stops by its own clock: at real-time priority (`chrt`) two spinning callers
                // can keep the main thread, which raises the flag, off both cores.
                while !stop.load(Ordering::Relaxed) && started.elapsed() < run {
                    for _ in 0..256 {
                        let now = fairq::now_ns();
                        match engine.next_grant_at(now) {
                            NextGrant::Granted(grant) => {
                                engine
                                    .complete_at(grant.ticket, Outcome::Admitted, None, now)
                                    .map_err(|e| e.to_string())?;
                                let request = Request {
                                    user_data: grant.user_data,
                                    ..Request::new(keys[grant.user_data as usize], Dimension::User)
                                };
                                engine
                                    .enqueue_at(&request, now)
                                    .map_err(|e| e.to_string())?;
                                cycles += 1;
                            }
                            NextGrant::Expired(e) => return Err(format!("expired: {e:?}")),
                            // The other thread is serving the tenant whose turn it is.
                            NextGrant::Empty | NextGrant::AtCapacity => std::hint::spin_loop(),
                        }
                    }
                }
                Ok((cycles, started.elapsed()))
            })
        })
        .collect();
    barrier.wait();
    std::thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    let mut total = 0u64;
    let mut longest = Duration::ZERO;
    for w in workers {
        let (cycles, took) = w
            .join()
            .map_err(|_| "bench thread panicked".to_string())??;
        total += cycles;
        longest = longest.max(took);
    }
    Ok(Measurement {
        threads,
        tenants,
        grants_per_s: total as f64 / longest.as_secs_f64().max(1e-9),
    })
}
