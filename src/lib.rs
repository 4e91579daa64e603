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

/// Fault injection for the broken twins (`src/broken.rs`), which exist only in builds with
/// `--cfg fairq_broken`: `broken!(Variant, { .. })` runs the block in place when that variant is
/// switched on, and `broken!(Variant, guard, { .. })` when the guard holds as well. In every
/// other build it is nothing, so the code around it reads as it runs.
macro_rules! broken {
    ($variant:ident, $body:block) => {
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::$variant) $body
    };
    ($variant:ident, $guard:expr, $body:block) => {
        #[cfg(fairq_broken)]
        if $guard && crate::broken::on(crate::broken::Break::$variant) $body
    };
}

/// `broken_or!(Variant, broken, correct)`: the value `broken` when that broken twin is switched
/// on (`broken!`), else `correct`; in other builds, `correct` alone.
macro_rules! broken_or {
    ($variant:ident, $broken:expr, $correct:expr) => {{
        #[cfg(fairq_broken)]
        let value = if crate::broken::on(crate::broken::Break::$variant) {
            $broken
        } else {
            $correct
        };
        #[cfg(not(fairq_broken))]
        let value = $correct;
        value
    }};
}

mod bare;
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
mod status;
mod sync;
mod table;
mod types;
mod weights;
mod word_ring;

#[doc(hidden)]
pub use bare::BareCore;
pub use bulkhead::MAX_DOWNSTREAMS;
pub use clock::now_ns;
pub use config::{Config, MAX_COST, MAX_WEIGHT, MAX_WEIGHT_CLASSES};
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
pub use status::{PoolStatus, Status, TenantStatus};
pub use types::{
    Completion, ConfigError, Enqueued, Error, Expired, Grant, Load, NextGrant, Outcome, Reason,
    Refusal, Request, Stats, StatusOrder, Ticket,
};
