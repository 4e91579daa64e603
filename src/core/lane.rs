//! The light-tenant lane: a tenant that becomes ready below its fair share is served at the next
//! grant, ahead of the weight classes' rotation, for one visit; then it joins its class's ring.
//!
//! # Why
//! SWRR over the classes gives backlogged tenants exact shares, but a tenant that asks for less
//! than its share, and so keeps going idle, would wait on each return for its class's SWRR turn
//! behind the backlogged classes, and in its class's ring behind a noisy tenant of the same
//! weight. Those are the tenants a noisy neighbour hurts. The lane is fq_codel's new-flows list
//! (RFC 8290, section 4) with start-time fair queueing's rule for who may use it.
//!
//! # Who enters: a virtual clock
//! - The clock `V` is the cost units granted so far, all classes together
//!   ([`Classes::served`]).
//! - A grant of cost `c` to tenant `t`, picked while the ready tenants' weights summed to `W`
//!   (the pick's SWRR total) and `t`'s own weight was `w`, adds `I = c · W / w` to `t`'s finish
//!   time `F`: the cost units the engine grants while `t` gets `c` at its fair share. A tenant
//!   served at exactly its share keeps `F` level with `V`; one served above it runs ahead.
//! - When a tenant becomes ready (from idle, a Retry-After or a full pool) it enters the lane if
//!   `F − 2·I < V`, `I` being what its last grant added: it is less than two such grants ahead
//!   of its fair share. `F` is then raised to `V` if behind, so idle time banks nothing.
//!   Otherwise it joins its class's ring.
//! - A lane grant is one ordinary visit (DRR credit, quantum, hooks) and is not charged to the
//!   classes' SWRR credits, so the backlogged classes keep exact weighted shares of what the
//!   light tenants leave.
//!
//! So through the lane a tenant is never more than three grants ahead of its fair share (the two
//! of slack and the lane grant), however often it goes idle and comes back: the lead does not
//! grow with the number of idle periods. A new
//! tenant starts at `F = I = 0` and enters once the engine has granted anything; tenants queued
//! before the first grant go through the rotation, so every tenant backlogged from the start
//! gets SWRR's exact windows.
//!
//! Fleet mode steers each replica's shares through effective weights, that is through the
//! rotation, which lane grants skip; the first `set_fleet_factor` turns the lane off.
//!
//! The tags are the turn holder's (stores, no RMW); `V` is summed from per-class counters that
//! granters bump with a load and a store, so two granters of one class may lose an increment:
//! `V` may run a little slow, which only makes the lane stricter.

use crate::core::tenants::TenantSlot;
use crate::sync::{ArrayQueue, Ordering};

#[cfg(doc)]
use crate::core::classes::Classes;

/// How far ahead of its fair share a tenant may be and still enter the lane, in grants like its
/// last one. Two, not one: a light tenant's requests come in clusters (several clients at once),
/// and with one the cluster's later requests missed the lane more often (`docs/design.md`, "The light-tenant lane").
const SLACK_GRANTS: u64 = 2;

/// Finish times and intervals are kept in 1/`TAG_UNIT` cost units: in whole units, a tenant
/// with more than half the ready weight (`W/w < 2`) would be charged one unit per unit granted,
/// as if it were the only ready tenant, never run ahead of `V`, and so re-enter after each grant.
const TAG_UNIT: u64 = 1024;

/// The tenants waiting in the lane, each with the class whose ready count includes it.
pub(crate) struct Lane {
    /// `class << 32 | tenant`. Every tenant is in it at most once (its turn holder pushed it).
    ring: ArrayQueue<u64>,
}

impl Lane {
    pub(crate) fn new(tenants: usize) -> Lane {
        Lane {
            ring: ArrayQueue::new(tenants.max(1)),
        }
    }

    /// The holder hands tenant `tenant`, counted ready in `class`, to the lane.
    pub(crate) fn push(&self, class: u32, tenant: u32) {
        // Release (inside the push): the holder's slot writes happen before the next holder's
        // pop, as for a class ring.
        let pushed = self.ring.push(u64::from(class) << 32 | u64::from(tenant));
        debug_assert!(pushed.is_ok(), "the lane holds every tenant at most once");
    }

    /// Takes the next tenant and the class it is counted in; the caller holds its turn.
    pub(crate) fn take(&self) -> Option<(u32, u32)> {
        // A push still being written reads as empty: the tenant is served on a later call.
        self.ring.try_pop().map(|e| ((e >> 32) as u32, e as u32))
    }

    /// A cheap look before `take`: an empty `ArrayQueue::pop` runs a fence.
    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

/// Holder: charges tenant `slot` for a grant of `cost` picked at SWRR total `total`.
#[inline]
pub(crate) fn charge(slot: &TenantSlot, cost: u32, total: i64) {
    let weight = slot.effective_weight().max(1);
    let total = (total.max(0) as u64).max(weight);
    let interval = if total == weight {
        // The only ready tenant (the common case with few tenants): no division.
        u64::from(cost) * TAG_UNIT
    } else {
        // Rounded up: rounded down, the error would add up over a tenant's grants and let it
        // drift ahead of its share through the lane. In 64 bits unless the product overflows.
        let scaled = u64::from(cost) * TAG_UNIT;
        match scaled.checked_mul(total) {
            Some(product) => product.div_ceil(weight),
            None => {
                let exact = (u128::from(scaled) * u128::from(total)).div_ceil(u128::from(weight));
                u64::try_from(exact).unwrap_or(u64::MAX)
            }
        }
    };
    // Relaxed load + store: the tags are the turn holder's, handed over with the turn.
    let finish = slot.lane_finish.load(Ordering::Relaxed);
    slot.lane_finish
        .store(finish.saturating_add(interval), Ordering::Relaxed);
    slot.lane_interval.store(interval, Ordering::Relaxed);
}

/// Holder: whether tenant `slot`, becoming ready at virtual time `now_v`, enters the lane; if
/// so its finish time is raised to `now_v` when behind.
pub(crate) fn admits(slot: &TenantSlot, now_v: u64) -> bool {
    let now_v = now_v.saturating_mul(TAG_UNIT);
    // Relaxed: as in `charge`.
    let finish = slot.lane_finish.load(Ordering::Relaxed);
    let interval = slot.lane_interval.load(Ordering::Relaxed);
    if finish.saturating_sub(interval.saturating_mul(SLACK_GRANTS)) >= now_v {
        return false;
    }
    if finish < now_v {
        slot.lane_finish.store(now_v, Ordering::Relaxed);
    }
    true
}
