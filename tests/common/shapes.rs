//! Traffic shapes gateways see, driven against the engine and against plain arrival order on
//! virtual time, each request's wait counted in grants given to others before it.
//!
//! Shared by `tests/shapes.rs` (the targets) and `examples/shapes.rs` (the table in
//! `docs/design.md`).

use std::collections::VecDeque;

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey, Ticket};

/// A small deterministic generator (splitmix64), so every run of a shape sees the same arrivals.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// p50, p99 and max of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Waits {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Waits {
    pub fn of(mut v: Vec<u64>) -> Waits {
        assert!(!v.is_empty());
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Waits {
            p50: at(0.5),
            p99: at(0.99),
            max: *v.last().unwrap(),
        }
    }
}

impl std::fmt::Display for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {} / {}", self.p50, self.p99, self.max)
    }
}

pub fn tenant(i: u64) -> TenantKey {
    TenantKey::from_raw(format!("tenant-{i}").as_bytes())
}

/// A scheduler under the harness: requests carry a tag (the grant count when they were sent).
pub trait Sched {
    fn enqueue(&mut self, tenant: u64, tag: u64);
    /// The next request to start, if a permit is free and one waits.
    fn next(&mut self) -> Option<(Ticket, u64)>;
    fn complete(&mut self, ticket: Ticket);
}

/// The engine, on virtual time.
pub struct Fair(pub Engine);

impl Fair {
    /// An engine for a shape of `tenants` tenants, `connections` requests out at most and
    /// `permits` permits, with `config`'s other settings.
    pub fn new(config: Config, tenants: u64, connections: usize, permits: u32) -> Fair {
        Fair(
            Engine::new(Config {
                enabled: true,
                max_in_flight: permits,
                max_tenants: (tenants as u32).max(16),
                queue_capacity: (connections as u32).max(16),
                tenant_queue_capacity: (connections as u32).max(1),
                ..config
            })
            .expect("valid config"),
        )
    }
}

impl Sched for Fair {
    fn enqueue(&mut self, t: u64, tag: u64) {
        let mut r = Request::new(tenant(t), Dimension::User);
        r.user_data = tag;
        match self.0.enqueue_at(&r, 0).expect("valid request") {
            Enqueued::Queued { .. } => {}
            Enqueued::Refused(r) => panic!("refused: {r:?}"),
        }
    }

    fn next(&mut self) -> Option<(Ticket, u64)> {
        match self.0.next_grant_at(0) {
            NextGrant::Granted(g) => Some((g.ticket, g.user_data)),
            NextGrant::AtCapacity | NextGrant::Empty => None,
            NextGrant::Expired(e) => panic!("expired: {e:?}"),
        }
    }

    fn complete(&mut self, ticket: Ticket) {
        self.0
            .complete_at(ticket, Outcome::Admitted, None, 0)
            .unwrap();
    }
}

/// Plain arrival order: one first-in, first-out queue and `permits` permits.
pub struct Fifo {
    queue: VecDeque<u64>,
    free: u32,
    next_id: u64,
}

impl Fifo {
    pub fn new(permits: u32) -> Fifo {
        Fifo {
            queue: VecDeque::new(),
            free: permits,
            next_id: 0,
        }
    }
}

impl Sched for Fifo {
    fn enqueue(&mut self, _tenant: u64, tag: u64) {
        self.queue.push_back(tag);
    }

    fn next(&mut self) -> Option<(Ticket, u64)> {
        if self.free == 0 {
            return None;
        }
        let tag = self.queue.pop_front()?;
        self.free -= 1;
        self.next_id += 1;
        Some((Ticket(self.next_id), tag))
    }

    fn complete(&mut self, _ticket: Ticket) {
        self.free += 1;
    }
}

/// A closed-loop shape: `connections` connections each keep one request outstanding, for the
/// tenant `pick` draws (given the connection's index); service is instant (a random request out
/// completes, then its connection sends its next one). Returns the waits, in grants given to
/// others before each request, of the requests `measured` accepts (given the tenant), over
/// `grants` grants.
pub fn closed_loop(
    sched: &mut dyn Sched,
    connections: usize,
    grants: u64,
    seed: u64,
    pick: &dyn Fn(usize, &mut Rng) -> u64,
    measured: &dyn Fn(u64) -> bool,
) -> Waits {
    let mut rng = Rng::new(seed);
    let mut granted = 0u64;
    // The tag is the grant count at the send, times the number of connections, plus the
    // connection: what a grant needs to charge the wait and to send the connection's next one.
    let conns = connections as u64;
    let send = |sched: &mut dyn Sched, rng: &mut Rng, c: usize, at: u64| {
        let t = pick(c, rng);
        sched.enqueue(t, at * conns + c as u64);
        t
    };
    let mut tenants: Vec<u64> = (0..connections)
        .map(|c| send(sched, &mut rng, c, 0))
        .collect();
    let mut out: Vec<(Ticket, usize)> = Vec::new();
    let mut waits = Vec::with_capacity(grants as usize);
    while granted < grants {
        match sched.next() {
            Some((ticket, tag)) => {
                let (at, c) = (tag / conns, (tag % conns) as usize);
                if measured(tenants[c]) {
                    waits.push(granted - at);
                }
                granted += 1;
                out.push((ticket, c));
            }
            None => {
                assert!(!out.is_empty(), "nothing out and nothing granted");
                let i = rng.below(out.len() as u64) as usize;
                let (ticket, c) = out.swap_remove(i);
                sched.complete(ticket);
                tenants[c] = send(sched, &mut rng, c, granted);
            }
        }
    }
    Waits::of(waits)
}

/// Many light tenants: each connection's requests go to a random tenant of `tenants` (weight 1
/// each).
pub fn many_light(
    sched: &mut dyn Sched,
    tenants: u64,
    connections: usize,
    grants: u64,
    seed: u64,
) -> Waits {
    closed_loop(
        sched,
        connections,
        grants,
        seed,
        &|_, rng| rng.below(tenants),
        &|_| true,
    )
}

/// A burst by one tenant: `light` connections send for random tenants of `tenants` (not the
/// first), and `burst` more connections all send for the first tenant. Returns the light
/// tenants' waits.
pub fn burst(
    sched: &mut dyn Sched,
    tenants: u64,
    light: usize,
    burst: usize,
    grants: u64,
    seed: u64,
) -> Waits {
    closed_loop(
        sched,
        light + burst,
        grants,
        seed,
        &|c, rng| {
            if c < light {
                1 + rng.below(tenants - 1)
            } else {
                0
            }
        },
        &|t| t != 0,
    )
}
