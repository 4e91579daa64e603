//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod alloc;
pub mod c_build;
#[cfg(feature = "fleet")]
pub mod redis_server;

use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Request, TenantKey, Ticket};

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
