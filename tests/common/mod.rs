//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod alloc;
pub mod c_build;
#[cfg(feature = "fleet")]
pub mod redis_server;
pub mod shapes;

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey, Ticket};

pub const MS: u64 = 1_000_000;

pub fn key(name: &str) -> TenantKey {
    TenantKey::from_raw(name.as_bytes())
}

pub fn engine(config: Config) -> Engine {
    Engine::new(Config {
        enabled: true,
        ..config
    })
    .expect("valid config")
}

pub fn request(tenant: &str) -> Request {
    Request::new(key(tenant), Dimension::User)
}

pub fn queued(engine: &Engine, request: &Request, now: u64) -> Ticket {
    match engine.enqueue_at(request, now).expect("valid request") {
        Enqueued::Queued { ticket, .. } => ticket,
        Enqueued::Refused(r) => panic!("refused: {r:?}"),
    }
}

pub fn granted(engine: &Engine, now: u64) -> fairq::Grant {
    match engine.next_grant_at(now) {
        NextGrant::Granted(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Requests a drain ended: granted and completed, or expired.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub completed: u64,
    pub expired: u64,
}

/// Grants (and completes) everything queued at `now`, until the engine answers `Empty`. Panics
/// on `AtCapacity` (nothing may be in flight when a test drains) and after `limit` rounds.
pub fn drain(engine: &Engine, now: u64, limit: usize) -> Drained {
    let mut drained = Drained::default();
    for _ in 0..limit {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
                drained.completed += 1;
            }
            NextGrant::Expired(_) => drained.expired += 1,
            NextGrant::Empty => return drained,
            NextGrant::AtCapacity => panic!("drain: a permit is still out"),
        }
    }
    panic!("the drain does not end: {drained:?} after {limit} rounds");
}

/// xorshift64*: a fixed, well-spread sequence per seed, for tests that draw at random.
pub struct Rng(pub u64);

impl Rng {
    /// A generator for `seed` (any value; spread so nearby seeds differ, never 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}
