//! The light-tenant lane: tenants at or below their fair share are served ahead of the weight
//! classes' rotation, and the rotation's tenants that fall behind theirs go before the lane.
//! Together they make one discipline, stated with its bound in `docs/design.md` ("Scheduling
//! discipline").
//!
//! # Why
//! SWRR over the classes gives backlogged tenants exact shares, but a tenant that asks for less
//! than its share, and so keeps going idle, would wait on each return for its class's SWRR turn
//! behind the backlogged classes. Those are the tenants a noisy neighbour hurts. The lane is
//! fq_codel's new-flows list (RFC 8290, section 4) with start-time fair queueing's rule for who
//! may use it, and, as in fq_codel, it must not starve the others: when most arrivals come from
//! tenants with nothing queued, a lane with strict priority overtakes the queued requests again
//! and again.
//!
//! # A virtual clock
//! - The clock `V` is the cost units granted so far, all classes together
//!   ([`Classes::served`]).
//! - A grant of cost `c` to tenant `t`, made while the ready tenants' weights summed to `W` and
//!   `t`'s own weight was `w`, starts at `S = max(F, V)` and moves `t`'s finish time to
//!   `F = S + I`, `I = c · W / w`: the cost units the engine grants while `t` gets `c` at its
//!   share. A tenant behind the clock starts level with it: a lag is not carried forward.
//!
//! # Who is in the lane
//! A tenant with a request ready is in the lane when it is less than two grants ahead of its
//! share, `F − 2·I < V` (`I` what its last grant added): when it becomes ready (from idle, a
//! Retry-After or a full pool; `F` is then raised to `V` if behind), and again after each lane
//! grant while it still has a request (`within_share`). Otherwise it waits in its class's ring.
//! The lane is first in, first out: among light tenants, arrival order. A lane grant is one
//! ordinary visit (DRR credit, quantum, hooks), not charged to the classes' SWRR credits and not
//! counted among the class's visits, so the backlogged classes keep exact weighted shares of
//! what the light tenants leave. Through the lane a tenant is never more than three grants
//! ahead of its share (the two of slack and the grant itself), however often it comes back.
//!
//! # When the rotation goes first
//! While the lane holds tenants, the rotation's next tenant goes before it when it is due: the
//! engine has granted, since that tenant's last grant began, its share of its head's cost at
//! today's weights (`S + I' < V`), and either the lane granted as much since the rotation last
//! granted, or the tenant is late (half an interval later still, a quarter more for every two
//! requests it has waiting beyond the first; `due`). A rotation tenant not yet due keeps its
//! place and the lane goes on. So a queued request is held back by the lane for a bounded
//! number of its tenant's intervals, longer for a tenant with a standing queue, and light
//! tenants keep the next grant as long as the lane serves them in short bursts.
//!
//! Fleet mode steers each replica's shares through effective weights, that is through the
//! rotation, which lane grants skip; the first `set_fleet_factor` turns the lane off.
//!
//! The tags are the turn holder's (stores, no RMW); `V` is summed from per-class counters that
//! granters bump with a load and a store, so two granters of one class may lose an increment:
//! `V` may run a little slow, which only makes the lane stricter.

use crate::core::packed::Field;
use crate::core::tenants::TenantSlot;
use crate::sync::{AtomicU64, Ordering, WordRing};

#[cfg(doc)]
use crate::core::classes::Classes;

/// How far ahead of its fair share a tenant may be and still be in the lane, in grants like its
/// last one. Two, not one: a light tenant's requests come in clusters (several clients at once),
/// and with one the cluster's later requests went to the ring, behind the backlogged tenants
/// (`docs/design.md`, "Scheduling discipline").
const SLACK_GRANTS: u64 = 2;

/// Finish times and intervals are kept in 1/`TAG_UNIT` cost units: in whole units, a tenant
/// with more than half the ready weight (`W/w < 2`) would be charged one unit per unit granted,
/// as if it were the only ready tenant, never run ahead of `V`, and so re-enter after each grant.
const TAG_UNIT: u64 = 1024;
/// A lane entry's fields.
const ENTRY_TENANT: Field = Field::first(32);
const ENTRY_CLASS: Field = Field::after(ENTRY_TENANT, 32);

/// The tenants waiting in the lane, each with the class whose ready count includes it.
pub(crate) struct Lane {
    /// `ENTRY_CLASS` and `ENTRY_TENANT`. Every tenant is in it at most once (its turn holder pushed it).
    ring: WordRing<u64>,
    /// The cost the lane granted since the rotation last granted, in 1/`TAG_UNIT` units.
    streak: AtomicU64,
}

impl Lane {
    pub(crate) fn new(tenants: usize) -> Lane {
        Lane {
            ring: WordRing::new(tenants.max(1)),
            streak: AtomicU64::new(0),
        }
    }

    /// The holder hands tenant `tenant`, counted ready in `class`, to the lane.
    pub(crate) fn push(&self, class: u32, tenant: u32) {
        // Release (inside the push): the holder's slot writes happen before the next holder's
        // pop, as for a class ring.
        let pushed = self
            .ring
            .push(ENTRY_CLASS.put(u64::from(class)) | ENTRY_TENANT.put(u64::from(tenant)));
        debug_assert!(pushed.is_ok(), "the lane holds every tenant at most once");
    }

    /// Takes the next tenant and the class it is counted in; the caller holds its turn.
    pub(crate) fn take(&self) -> Option<(u32, u32)> {
        // A push still being written reads as empty: the tenant is served on a later call.
        self.ring
            .try_pop()
            .map(|e| (ENTRY_CLASS.get(e) as u32, ENTRY_TENANT.get(e) as u32))
    }

    /// A grant of `cost`, by the lane or (`lane` false) by the rotation.
    #[inline]
    pub(crate) fn granted(&self, cost: u32, lane: bool) {
        // Relaxed: a turn hint (`due`); a lost update moves one grant between the lane and the
        // rotation, and each serves when the other has nothing, so no ordering carries progress.
        let streak = self.streak.load(Ordering::Relaxed);
        if lane {
            let add = u64::from(cost).saturating_mul(TAG_UNIT);
            self.streak
                .store(streak.saturating_add(add), Ordering::Relaxed);
        } else if streak != 0 {
            // Written only when it changes: the rotation's grants only read the line.
            self.streak.store(0, Ordering::Relaxed);
        }
    }

    /// The cost the lane granted since the rotation last granted.
    pub(crate) fn streak(&self) -> u64 {
        // Relaxed: as in `granted`.
        self.streak.load(Ordering::Relaxed)
    }

    /// A cheap look before `take`: an empty `WordRing::pop` runs a fence.
    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

/// Holder: charges tenant `slot` for a grant of `cost` picked at SWRR total `total`.
#[inline]
pub(crate) fn charge(slot: &TenantSlot, cost: u32, total: i64, now_v: u64) {
    let interval = scaled_interval(cost, total, slot.effective_weight() as i64);
    // Relaxed load + store: the tags are the turn holder's, handed over with the turn.
    let finish = slot.lane_finish.load(Ordering::Relaxed);
    // The grant starts at the clock if the tenant is behind it: a lag is not carried forward.
    let start = finish.max(now_v.saturating_mul(TAG_UNIT));
    slot.lane_finish
        .store(start.saturating_add(interval), Ordering::Relaxed);
    slot.lane_interval.store(interval, Ordering::Relaxed);
}

/// `cost · total / weight` in 1/`TAG_UNIT` units, rounded up: what the engine grants while a
/// flow of `weight` among ready weights `total` gets `cost` at its share.
#[inline]
fn scaled_interval(cost: u32, total: i64, weight: i64) -> u64 {
    let weight = weight.max(1) as u64;
    let total = (total.max(0) as u64).max(weight);
    if total == weight {
        // The only ready flow (the common case with few tenants): no division.
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
    }
}

/// Holder: whether tenant `slot`, becoming ready at virtual time `now_v`, enters the lane; if
/// so its finish time is raised to `now_v` when behind.
pub(crate) fn admits(slot: &TenantSlot, now_v: u64) -> bool {
    if !within_share(slot, now_v) {
        return false;
    }
    let now_v = now_v.saturating_mul(TAG_UNIT);
    // Relaxed: as in `charge`.
    if slot.lane_finish.load(Ordering::Relaxed) < now_v {
        slot.lane_finish.store(now_v, Ordering::Relaxed);
    }
    true
}

/// Holder: whether tenant `slot`, taken by the rotation with a head of `cost` and `depth`
/// requests waiting while the lane holds tenants, goes before the lane. Its next grant is due
/// once the engine has granted its share of `cost` at the ready weight `total` since its last
/// grant began (`start + I < V`). A due tenant goes first once the lane has granted that much
/// since the rotation's last grant (`streak`), and in any case once it is *late*: half an
/// interval later still, and a quarter of one more for every two requests it has waiting
/// beyond the first. So the lane keeps light tenants first while it serves in short bursts, a
/// tenant with a standing queue (a flood) yields to them longer in proportion to its own
/// backlog, and none is held back without end.
pub(crate) fn due(
    slot: &TenantSlot,
    cost: u32,
    total: i64,
    now_v: u64,
    streak: u64,
    depth: u64,
) -> bool {
    // Relaxed: as in `charge`.
    let finish = slot.lane_finish.load(Ordering::Relaxed);
    let start = finish.saturating_sub(slot.lane_interval.load(Ordering::Relaxed));
    let next = scaled_interval(cost, total, slot.effective_weight() as i64);
    let now = now_v.saturating_mul(TAG_UNIT);
    let due = start.saturating_add(next) < now;
    // In half intervals: 3, and one more for every two requests waiting beyond the first.
    let halves = 3 + depth.max(1).saturating_sub(1) / 2;
    let late = start.saturating_add(next.saturating_mul(halves) / 2) < now;
    late || (due && streak > next)
}

/// Holder: whether tenant `slot` is less than two grants ahead of its share at virtual time
/// `now_v`, so it is in the lane when it has a request ready (`admits`, and after a lane grant).
pub(crate) fn within_share(slot: &TenantSlot, now_v: u64) -> bool {
    let now_v = now_v.saturating_mul(TAG_UNIT);
    // Relaxed: as in `charge`.
    let finish = slot.lane_finish.load(Ordering::Relaxed);
    let interval = slot.lane_interval.load(Ordering::Relaxed);
    finish.saturating_sub(interval.saturating_mul(SLACK_GRANTS)) < now_v
}

/// For a status dump: whether the tenant is no more than two grants ahead of its share now. Not
/// strict, unlike [`within_share`]: a tenant that just became ready has its finish time raised
/// to the clock, and is at its share, not ahead of it.
pub(crate) fn at_or_below_share(slot: &TenantSlot, now_v: u64) -> bool {
    let now_v = now_v.saturating_mul(TAG_UNIT);
    // Relaxed: a snapshot.
    let finish = slot.lane_finish.load(Ordering::Relaxed);
    let interval = slot.lane_interval.load(Ordering::Relaxed);
    finish.saturating_sub(interval.saturating_mul(SLACK_GRANTS)) <= now_v
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_entry_packs_class_and_tenant() {
        crate::core::packed::tests::round_trips(&[ENTRY_TENANT, ENTRY_CLASS]);
        let lane = Lane::new(4);
        lane.push(63, u32::MAX - 1);
        assert_eq!(lane.take(), Some((63, u32::MAX - 1)));
    }
}
