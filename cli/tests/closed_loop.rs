//! Closed-loop clients beside a burst, on a virtual clock.
//!
//! Three steady tenants (weights 4, 2, 1) below their fair share, each with closed-loop clients
//! (a client sends a request, waits for the grant and the service, thinks, and sends the next);
//! a fourth tenant (weight 4) sends open-loop at half its share, then at ten times its share for
//! 60 s. `max_in_flight` 16, lognormal service times (mean 10 ms). Each steady tenant's
//! throughput during the burst is compared with its throughput in the 60 s before.
//!
//! The same harness drives the real engine, `ideal` (strict priority: the burster is served
//! only when no steady request waits; perfect isolation for a work-conserving backend) and a
//! single FIFO queue (no isolation at all, to show the measure can fail).
//!
//! `cargo test --release -p fairq-cli --test closed_loop -- --nocapture`
//! prints the measured ratios.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

mod common;
use common::{Rng, MS, SEC};

use fairq::{
    Completion, Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey, Ticket,
};

const SLOTS: u32 = 16;
const SERVICE_MEAN_MS: f64 = 10.0;
const SERVICE_SIGMA: f64 = 0.5;
/// The steady tenants' weights; the burster's is `BURSTER_WEIGHT`.
const STEADY_WEIGHTS: [u32; 3] = [4, 2, 1];
const BURSTER_WEIGHT: u32 = 4;
/// Clients per unit of weight, each thinking `THINK_MS` between requests: about 35 requests/s
/// per client, so each steady tenant asks about half its fair share.
const CLIENTS_PER_WEIGHT: u32 = 8;
const THINK_MS: f64 = 100.0;
/// Warm-up, then the window before the burst, then the burst.
const WARM_UP: u64 = 10 * SEC;
const BURST_START: u64 = WARM_UP + 60 * SEC;
const BURST_END: u64 = BURST_START + 60 * SEC;
const BURSTER: u32 = STEADY_WEIGHTS.len() as u32;
const TENANT_QUEUE: u32 = 64;

/// A scheduler under the harness: the caller holds a free slot when it asks for the next grant.
trait Sched {
    /// Queues request `id` of `tenant`, or refuses it.
    fn enqueue(&mut self, tenant: u32, id: u64, now: u64) -> bool;
    /// The next request to serve.
    fn next(&mut self, now: u64) -> Option<u64>;
    fn complete(&mut self, id: u64, now: u64);
}

struct Fairq {
    engine: Engine,
    keys: Vec<TenantKey>,
    tickets: std::collections::HashMap<u64, Ticket>,
}

impl Fairq {
    fn new() -> Fairq {
        let engine = Engine::new(Config {
            enabled: true,
            max_in_flight: SLOTS,
            tenant_queue_capacity: TENANT_QUEUE,
            queue_capacity: 4096,
            max_tenants: 64,
            max_wait_ms: 30_000,
            default_weight: 1,
            max_weight_classes: 4,
            ..Config::default()
        })
        .expect("a valid config");
        let weights = STEADY_WEIGHTS.iter().chain([&BURSTER_WEIGHT]);
        let keys = weights
            .enumerate()
            .map(|(t, &w)| {
                let raw = format!("tenant-{t}");
                if w != 1 {
                    engine.set_weight(&raw, w).expect("weights fit the classes");
                }
                TenantKey::from_raw(raw.as_bytes())
            })
            .collect();
        Fairq {
            engine,
            keys,
            tickets: Default::default(),
        }
    }
}

impl Sched for Fairq {
    fn enqueue(&mut self, tenant: u32, id: u64, now: u64) -> bool {
        let request = Request {
            user_data: id,
            ..Request::new(self.keys[tenant as usize], Dimension::User)
        };
        match self
            .engine
            .enqueue_at(&request, now)
            .expect("a valid request")
        {
            Enqueued::Queued { .. } => true,
            Enqueued::Refused(_) => false,
        }
    }

    fn next(&mut self, now: u64) -> Option<u64> {
        match self.engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                self.tickets.insert(g.user_data, g.ticket);
                Some(g.user_data)
            }
            NextGrant::Empty => None,
            other => panic!("unexpected {other:?} with a free slot and no deadlines"),
        }
    }

    fn complete(&mut self, id: u64, now: u64) {
        let ticket = self.tickets.remove(&id).expect("a granted request");
        let done = self
            .engine
            .complete_at(ticket, Outcome::Admitted, None, now)
            .expect("the ticket is granted");
        assert!(matches!(done, Completion::Completed), "{done:?}");
    }
}

/// Strict priority: the burster only when no steady request waits; arrival order in each level.
/// The same per-tenant bound as the engine's.
#[derive(Default)]
struct Ideal {
    steady: VecDeque<u64>,
    burster: VecDeque<u64>,
    held: [u32; 4],
    owner: std::collections::HashMap<u64, u32>,
}

impl Sched for Ideal {
    fn enqueue(&mut self, tenant: u32, id: u64, _now: u64) -> bool {
        if self.held[tenant as usize] >= TENANT_QUEUE {
            return false;
        }
        self.held[tenant as usize] += 1;
        self.owner.insert(id, tenant);
        if tenant == BURSTER {
            self.burster.push_back(id);
        } else {
            self.steady.push_back(id);
        }
        true
    }

    fn next(&mut self, _now: u64) -> Option<u64> {
        let id = self
            .steady
            .pop_front()
            .or_else(|| self.burster.pop_front())?;
        self.held[self.owner[&id] as usize] -= 1;
        Some(id)
    }

    fn complete(&mut self, id: u64, _now: u64) {
        self.owner.remove(&id);
    }
}

/// One unbounded queue in arrival order.
#[derive(Default)]
struct Fifo(VecDeque<u64>);

impl Sched for Fifo {
    fn enqueue(&mut self, _tenant: u32, id: u64, _now: u64) -> bool {
        self.0.push_back(id);
        true
    }

    fn next(&mut self, _now: u64) -> Option<u64> {
        self.0.pop_front()
    }

    fn complete(&mut self, _id: u64, _now: u64) {}
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A closed-loop client of a steady tenant sends its next request.
    Send { tenant: u32, client: u32 },
    /// The burster's next open-loop arrival.
    Burst,
    /// Request `id` finished its service.
    Done { id: u64 },
}

/// Per steady tenant: grants in the 60 s before the burst and in the 60 s of the burst, and
/// requests refused.
struct Measured {
    before: [u64; 3],
    during: [u64; 3],
    refused_steady: u64,
    burster_granted_during: u64,
}

impl Measured {
    fn ratios(&self) -> [f64; 3] {
        std::array::from_fn(|t| self.during[t] as f64 / self.before[t] as f64)
    }
}

/// Runs the load through `sched`; `jitter`: each think time is uniform in ±that share of
/// `THINK_MS`.
fn run(sched: &mut dyn Sched, jitter: f64, seed: u64) -> Measured {
    let mut rng = Rng(seed);
    let mut events: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, at: u64, e: Event| {
        seq += 1;
        events.push(Reverse((at, seq, e)));
    };
    let clients: Vec<u32> = STEADY_WEIGHTS
        .iter()
        .map(|w| w * CLIENTS_PER_WEIGHT)
        .collect();
    let think_ns = THINK_MS * MS as f64;
    // Clients start spread over one think time, so they are not in step.
    for (t, &n) in clients.iter().enumerate() {
        for client in 0..n {
            let at = (rng.unit() * think_ns) as u64;
            let tenant = t as u32;
            push(&mut events, at, Event::Send { tenant, client });
        }
    }
    push(&mut events, 0, Event::Burst);

    let capacity_per_s = f64::from(SLOTS) * 1000.0 / SERVICE_MEAN_MS;
    let total_weight: u32 = STEADY_WEIGHTS.iter().sum::<u32>() + BURSTER_WEIGHT;
    let burster_share = capacity_per_s * f64::from(BURSTER_WEIGHT) / f64::from(total_weight);

    let mut owner: Vec<(u32, u32)> = Vec::new(); // per id: (tenant, client)
    let mut in_flight = 0u32;
    let mut m = Measured {
        before: [0; 3],
        during: [0; 3],
        refused_steady: 0,
        burster_granted_during: 0,
    };
    while let Some(Reverse((now, _, event))) = events.pop() {
        if now >= BURST_END {
            break;
        }
        let think = |rng: &mut Rng| {
            let spread = 1.0 + jitter * (2.0 * rng.unit() - 1.0);
            (think_ns * spread) as u64
        };
        match event {
            Event::Send { tenant, client } => {
                let id = owner.len() as u64;
                owner.push((tenant, client));
                if !sched.enqueue(tenant, id, now) {
                    // Not expected below share; counted, and the client thinks and tries again.
                    m.refused_steady += 1;
                    let at = now + think(&mut rng);
                    push(&mut events, at, Event::Send { tenant, client });
                }
            }
            Event::Burst => {
                let id = owner.len() as u64;
                owner.push((BURSTER, 0));
                let _ = sched.enqueue(BURSTER, id, now);
                let rate = if (BURST_START..BURST_END).contains(&now) {
                    10.0 * burster_share
                } else {
                    0.5 * burster_share
                };
                let at = now + rng.exp_ns(SEC as f64 / rate);
                push(&mut events, at, Event::Burst);
            }
            Event::Done { id } => {
                in_flight -= 1;
                sched.complete(id, now);
                let (tenant, client) = owner[id as usize];
                if tenant != BURSTER {
                    let at = now + think(&mut rng);
                    push(&mut events, at, Event::Send { tenant, client });
                }
            }
        }
        while in_flight < SLOTS {
            let Some(id) = sched.next(now) else { break };
            in_flight += 1;
            let tenant = owner[id as usize].0;
            if tenant == BURSTER {
                m.burster_granted_during += u64::from(now >= BURST_START);
            } else if now >= BURST_START {
                m.during[tenant as usize] += 1;
            } else if now >= WARM_UP {
                m.before[tenant as usize] += 1;
            }
            let at = now + rng.lognormal_ns(SERVICE_MEAN_MS, SERVICE_SIGMA);
            push(&mut events, at, Event::Done { id });
        }
    }
    m
}

/// Runs `make()`'s scheduler with fixed and with jittered think times; prints and returns the
/// worst steady tenant's during/before ratio of each.
fn measure(name: &str, make: &dyn Fn() -> Box<dyn Sched>) -> (f64, f64) {
    let mut worst = [0.0; 2];
    for (i, jitter) in [0.0, 0.5].into_iter().enumerate() {
        let m = run(&mut *make(), jitter, 7);
        assert_eq!(m.refused_steady, 0, "{name}: steady tenants refused");
        // The burst does saturate the backend: the burster takes what the others leave.
        assert!(
            m.burster_granted_during > 60 * 700,
            "{name}: the burster got only {} grants in its burst",
            m.burster_granted_during
        );
        let ratios = m.ratios();
        eprintln!(
            "{name:<5} think ±{:>2.0}%: steady throughput during/before the burst: {}",
            jitter * 100.0,
            ratios
                .iter()
                .zip(STEADY_WEIGHTS)
                .zip(m.before.iter().zip(&m.during))
                .map(|((r, w), (b, d))| format!("w{w} {:.1}% ({d}/{b})", 100.0 * r))
                .collect::<Vec<_>>()
                .join(", ")
        );
        worst[i] = ratios.into_iter().fold(f64::INFINITY, f64::min);
    }
    (worst[0], worst[1])
}

#[test]
fn ideal_keeps_closed_loop_steady_tenants_throughput_through_a_burst() {
    // The targets are within reach: a steady client still waits for a slot to free during the
    // burst (about 1% of its cycle here), whatever the scheduler does.
    let (fixed, jittered) = measure("ideal", &|| Box::new(Ideal::default()));
    assert!(fixed >= 0.99, "ideal, fixed think times: {fixed:.4}");
    assert!(
        jittered >= 0.95,
        "ideal, jittered think times: {jittered:.4}"
    );
}

#[test]
fn the_measure_fails_without_isolation() {
    // One FIFO queue: the steady clients wait behind the burst and lose most of their rate.
    let (fixed, jittered) = measure("fifo", &|| Box::new(Fifo::default()));
    assert!(fixed < 0.5, "fifo, fixed think times: {fixed:.4}");
    assert!(jittered < 0.5, "fifo, jittered think times: {jittered:.4}");
}

#[test]
fn fairq_keeps_closed_loop_steady_tenants_throughput_through_a_burst() {
    let (fixed, jittered) = measure("fairq", &|| Box::new(Fairq::new()));
    assert!(fixed >= 0.99, "fairq, fixed think times: {fixed:.4}");
    assert!(
        jittered >= 0.95,
        "fairq, jittered think times: {jittered:.4}"
    );
}
