//! # fairq
//!
//! A lock-free, multi-tenant weighted fair admission queue. A gateway hands it the requests that
//! a per-tenant limit just refused; fairq holds each in its tenant's bounded queue and releases
//! them by tenant weight as capacity frees up, or refuses them at once with a reason, a position
//! and a wait.
//!
//! ```
//! use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Request, TenantKey};
//!
//! let engine = Engine::new(Config { enabled: true, ..Config::default() }).unwrap();
//! engine.set_weight("acme", 3).unwrap();
//! let req = Request::new(TenantKey::from_raw(b"acme"), Dimension::User);
//! let Enqueued::Queued { .. } = engine.enqueue_at(&req, 0).unwrap() else { panic!() };
//! let NextGrant::Granted(grant) = engine.next_grant_at(1) else { panic!() };
//! engine.complete_at(grant.ticket, Outcome::Admitted, None, 2).unwrap();
//! assert_eq!(engine.stats().completed, 1);
//! ```
//!
//! Every core operation takes `now` (monotonic ns); the wrappers without `_at` read the clock.

#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(fairq_broken)]
#[doc(hidden)]
pub mod broken;
mod bulkhead;
mod clock;
mod config;
// The scheduler core; features plug in through its hooks seam.
mod core;
mod engine;
mod features;
#[cfg(feature = "fleet")]
pub mod fleet;
// The C ABI: the one module allowed `unsafe` throughout (raw pointers from C). Elsewhere it is
// allowed item by item: a prefetch, the zeroed tables and the types declared zeroable.
#[allow(unsafe_code)]
pub mod ffi;
mod histogram;
mod identity;
mod indicators;
mod limits;
mod metrics;
mod policy;
mod ring_entry;
mod shedding;
mod sync;
mod table;
mod types;
mod weights;
mod word_ring;

pub use bulkhead::MAX_DOWNSTREAMS;
pub use clock::now_ns;
pub use config::{Config, ConfigError, MAX_COST, MAX_WEIGHT, MAX_WEIGHT_CLASSES};
pub use core::FleetTenant;
#[cfg(loom)]
#[doc(hidden)]
pub use core::{set_full_rings, with_batched_picks};
pub use engine::Engine;

/// Tests: how many times the engine's waits on other threads have yielded the CPU in this
/// process (a system call each). The hot path makes none.
#[cfg(not(loom))]
#[doc(hidden)]
pub fn debug_yields() -> u64 {
    sync::yields()
}

/// Tests: how many times a caller holding a tenant's turn has handed it to the producer still
/// writing the tenant's next entry (or to a compaction) in this process.
#[cfg(not(loom))]
#[doc(hidden)]
pub fn debug_hand_overs() -> u64 {
    core::hand_overs()
}
pub use identity::{Dimension, Identity, TenantDimension, TenantKey};
pub use indicators::{FairnessAggregate, FairnessReport, MinMax, TenantIndicators};
pub use limits::MIN_FLEET_FACTOR;
pub use policy::{
    FeedbackController, Policy, StarvationGuard, TickReport, Tier, WaitBoost, MAX_TIERS,
    MAX_TIER_NAME,
};
pub use shedding::Shedding;
pub use types::{
    Completion, Enqueued, Error, Expired, Grant, Load, NextGrant, Outcome, Reason, Refusal,
    Request, Stats, Ticket,
};
