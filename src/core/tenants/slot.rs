//! One tenant's slot: its queue, its scheduling state, its counters, and the two averages its
//! wait estimates come from. The table that holds the slots is in `mod.rs`.

use super::*;

/// The two averages a tenant's wait estimate is made of (`TenantSlot::first_wait` and
/// `spacing`): how long a request that found nothing ready ahead of it waited (`first`), and the
/// time between two grants of a backlogged tenant (`spacing`). A request at position `p` is
/// told `first + (p - 1) × spacing`. Each is a moving average in units of 1,024 ns (about a
/// microsecond); 0 means no sample yet. A reader may see the two from different grants: an
/// estimate does not mind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    pub(crate) first: u32,
    pub(crate) spacing: u32,
}

/// Nanoseconds per unit of [`Waits`], as a shift.
const WAIT_UNIT_SHIFT: u32 = 10;

impl Waits {
    /// `old` moved toward a sample of `ns`: a quarter of the way when the sample is longer (waits
    /// that grow show within a few grants), an eighth when it is shorter; the sample itself when
    /// none came yet. At least one unit, so a sample is never taken for none.
    pub(in crate::core) fn average(old: u32, ns: u64) -> u32 {
        let sample = (ns >> WAIT_UNIT_SHIFT).clamp(1, u64::from(u32::MAX));
        let old = u64::from(old);
        let avg = if old == 0 {
            sample
        } else if sample > old {
            (old * 3 + sample) / 4
        } else {
            (old * 7 + sample) / 8
        };
        avg as u32
    }

    /// The averages a tenant with none of its own is given, from `hint` (a spacing in units
    /// times the effective weight it was measured at, `Core::spacing_hint`) and its own
    /// effective weight: spacing grows as weight shrinks.
    pub(crate) fn from_hint(hint: u64, weight: u64) -> Waits {
        let spacing = (hint / weight.max(1)).min(u64::from(u32::MAX)) as u32;
        Waits {
            first: spacing / 2,
            spacing,
        }
    }

    /// The wait at 1-based `position`, ns: from what is known, each average standing in for
    /// the other when it has no sample yet (a first-in-line wait is about half a spacing);
    /// 0 when neither has one.
    pub(crate) fn at(self, position: u32) -> u64 {
        let (first, spacing) = match (self.first, self.spacing) {
            (0, s) => (s / 2, s),
            (f, 0) => (f, f.saturating_mul(2)),
            (f, s) => (f, s),
        };
        let units = u64::from(first) + u64::from(spacing) * u64::from(position.saturating_sub(1));
        units.saturating_mul(1 << WAIT_UNIT_SHIFT)
    }
}

/// One tenant: its queue, its scheduling state and its counters.
///
/// `repr(C)`, hot fields first: a grant touches the first three lines (scheduling state,
/// counters, the queue's positions) and the ring's entries; features keep their per-tenant state
/// in side tables of their own. At 16384 tenants every one of them is a cache miss, so the grant
/// before prefetches them (`succ`, `Core::prefetch_successor`).
#[repr(C)]
pub(crate) struct TenantSlot {
    // ---- line 0: found, pinned, held, scheduled
    /// Hashed tenant key; 0 = never used. Written only by a thief holding `STEALING`.
    pub(in crate::core) key: AtomicU64,
    /// `live << 42 | depth << 21 | queued`, or `STEALING`; see the module docs.
    pub(in crate::core) counts: AtomicU64,
    /// Owned by the turn holder: the popped head, kept aside (the ring has no peek). While
    /// the turn is handed to a writer (`ring.rs`), the class the tenant is counted ready in, for
    /// that writer (`Core::resume`).
    pub(in crate::core) staged: AtomicU64,
    /// Owned by the turn holder: cost credit inside the class (DRR), in 1/`FACTOR_ONE` units.
    pub(in crate::core) credit: AtomicI64,
    /// Owned by the turn holder: the class visit number at which its last visit began.
    pub(in crate::core) last_visit: AtomicU64,
    /// Current configured weight.
    pub(in crate::core) weight: AtomicU32,
    /// Index of the weight class of `weight`.
    pub(in crate::core) class: AtomicU32,
    /// Effective-weight factor in 1/`FACTOR_ONE` (fleet mode): the tenant is scheduled at
    /// `weight × factor / FACTOR_ONE`; full weight unless fleet mode lowers it.
    pub(in crate::core) factor: AtomicU32,
    /// Owned by the turn holder: the factor its class's ready weight counts for it now.
    pub(in crate::core) counted_factor: AtomicU32,
    /// Owned by the turn holder: next tenant in the same timing-wheel bucket.
    pub(in crate::core) wheel_next: AtomicU32,
    // ---- line 1: a grant's counters
    /// Cost corrections from `complete` (actual minus estimated), folded into `credit` by the
    /// holder at the tenant's next visit.
    pub(in crate::core) debt: AtomicI64,
    /// Owned by the turn holder: time of the last grant, and the two averages of the estimated
    /// wait ([`Waits`]).
    pub(in crate::core) last_grant: AtomicU64,
    pub(in crate::core) first_wait: AtomicU32,
    pub(in crate::core) spacing: AtomicU32,
    /// `grants_total` when this tenant took the slot: its own grants are the difference
    /// (`TenantSlot::granted`). Written only by the claimer.
    pub(in crate::core) grants_base: AtomicU64,
    /// Owned by the turn holder: cost units granted to this tenant since it took the slot.
    pub(in crate::core) granted_cost: AtomicU64,
    /// Corrections of those by `complete` (actual minus declared cost), from any thread.
    pub(in crate::core) cost_corrections: AtomicI64,
    /// Owned by the turn holder, never reset: grants made in this slot, all tenants. The
    /// engine's `granted` counter is their sum.
    pub(in crate::core) grants_total: AtomicU64,
    /// Hints, never trusted: the tenant granted right after this one in its class last time
    /// (`NIL` if none yet) and the ticket index it had staged then, so this tenant's next grant
    /// can prefetch that tenant's lines and its head ticket (`Core::prefetch_successor`).
    pub(in crate::core) succ: AtomicU32,
    pub(in crate::core) succ_head: AtomicU32,
    // ---- line 2
    /// When the slot last went idle (ns): a new tenant may take it `tenant_idle_ms` later.
    pub(in crate::core) last_active: AtomicU64,
    /// Owned by the turn holder: the tenant's finish time on the light-tenant lane's virtual
    /// clock, and what its last grant added to it (`lane.rs`).
    pub(in crate::core) lane_finish: AtomicU64,
    pub(in crate::core) lane_interval: AtomicU64,
    /// Owned by the turn holder, never reset: grants made in this slot through the lane.
    pub(in crate::core) lane_grants_total: AtomicU64,
    /// Handles of queued tickets, in arrival order, cancelled ones too until swept.
    pub(in crate::core) queue: TenantQueue,
}

impl TenantSlot {
    /// Grants made to the current tenant since it took the slot.
    pub(crate) fn granted(&self) -> u64 {
        // Relaxed: a snapshot of statistics.
        let total = self.grants_total.load(Ordering::Relaxed);
        total.saturating_sub(self.grants_base.load(Ordering::Relaxed))
    }

    /// Grants made in this slot, all tenants (only grows).
    pub(crate) fn grants_total(&self) -> u64 {
        // Relaxed: a snapshot of statistics.
        self.grants_total.load(Ordering::Relaxed)
    }

    /// Grants made in this slot through the light-tenant lane, all tenants (only grows).
    pub(crate) fn lane_grants_total(&self) -> u64 {
        // Relaxed: a snapshot of statistics.
        self.lane_grants_total.load(Ordering::Relaxed)
    }

    /// Holder: one more grant through the lane (a load and a store, as in `record_grant`).
    pub(in crate::core) fn record_lane_grant(&self) {
        let total = self.lane_grants_total.load(Ordering::Relaxed);
        self.lane_grants_total.store(total + 1, Ordering::Relaxed);
    }

    /// Cost units granted to the current tenant, corrections included.
    pub(crate) fn granted_cost(&self) -> u64 {
        // Relaxed: a snapshot of statistics.
        let declared = self.granted_cost.load(Ordering::Relaxed);
        declared.saturating_add_signed(self.cost_corrections.load(Ordering::Relaxed))
    }

    /// The tenant's weight as its class counts it now: weight × counted factor, in
    /// 1/`FACTOR_ONE` units (the units of the classes' SWRR gains).
    pub(crate) fn effective_weight(&self) -> u64 {
        // Relaxed: a snapshot; the factor is written by the tenant's turn holder.
        u64::from(self.weight.load(Ordering::Relaxed))
            * u64::from(self.counted_factor.load(Ordering::Relaxed))
    }

    /// Holder: a grant of `cost` at `now`, of a request ready since `ready_at` (queued, and past
    /// its Retry-After): the wait estimate's two averages (see [`Waits`]) and the counters. A
    /// request that became ready after the tenant's last grant had nothing ready ahead of it:
    /// its wait is a first-in-line sample. Any other grant follows the previous one in a
    /// backlog: the time between them is a spacing sample.
    /// Returns the spacing average every 64th grant of the slot, for `Core::spacing_hint`.
    pub(in crate::core) fn record_grant(&self, cost: u32, now: u64, ready_at: u64) -> Option<u32> {
        let last = self.last_grant.load(Ordering::Relaxed);
        self.last_grant.store(now, Ordering::Relaxed);
        let (average, since) = if ready_at >= last {
            (&self.first_wait, ready_at)
        } else {
            (&self.spacing, last)
        };
        // Relaxed load + store: written only by the turn holder, as `last_grant`.
        let old = average.load(Ordering::Relaxed);
        average.store(
            Waits::average(old, now.saturating_sub(since)),
            Ordering::Relaxed,
        );
        // Relaxed load + store, not `fetch_add`: like `last_grant`, these counters are written
        // only by the turn holder (and by a thief holding the slot exclusively); the turn's
        // hand-off (ring push Release / pop Acquire) orders one holder's writes before the next.
        let granted_cost = self.granted_cost.load(Ordering::Relaxed);
        self.granted_cost
            .store(granted_cost + u64::from(cost), Ordering::Relaxed);
        let total = self.grants_total.load(Ordering::Relaxed);
        self.grants_total.store(total + 1, Ordering::Relaxed);
        if total % 64 == 0 {
            // Relaxed: our own write above.
            let spacing = self.spacing.load(Ordering::Relaxed);
            return (spacing != 0).then_some(spacing);
        }
        None
    }

    /// A grant's cost was corrected by `delta` at `complete` (any thread: an RMW of its own).
    pub(in crate::core) fn correct_granted_cost(&self, delta: i64) {
        // Relaxed: a statistic.
        self.cost_corrections.fetch_add(delta, Ordering::Relaxed);
    }

    /// Hint: `next` (with head ticket `head`) was granted right after this tenant in its class.
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::core) fn set_successor(&self, next: SlotId, head: u32) {
        // Relaxed, and stored only when changed: a hint.
        if self.succ.load(Ordering::Relaxed) != next {
            self.succ.store(next, Ordering::Relaxed);
        }
        if self.succ_head.load(Ordering::Relaxed) != head {
            self.succ_head.store(head, Ordering::Relaxed);
        }
    }

    /// Hint: the tenant granted after this one last round, and its head ticket then.
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::core) fn successor(&self) -> (SlotId, u32) {
        // Relaxed: a hint.
        (
            self.succ.load(Ordering::Relaxed),
            self.succ_head.load(Ordering::Relaxed),
        )
    }

    /// Starts loading the lines a grant of this tenant touches (a hint).
    #[cfg_attr(loom, allow(dead_code))]
    pub(in crate::core) fn prefetch(&self) {
        // The scheduling and counter lines, the queue's head and tail, and its first entries.
        crate::sync::prefetch(self, 3 * 64);
        let (ring, bytes) = self.queue.storage();
        crate::sync::prefetch(ring, bytes.min(128));
    }

    pub(super) fn new(queue_capacity: usize) -> TenantSlot {
        TenantSlot {
            key: AtomicU64::new(0),
            counts: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            credit: AtomicI64::new(0),
            last_visit: AtomicU64::new(0),
            weight: AtomicU32::new(0),
            class: AtomicU32::new(0),
            factor: AtomicU32::new(FACTOR_ONE),
            counted_factor: AtomicU32::new(FACTOR_ONE),
            wheel_next: AtomicU32::new(NIL),
            debt: AtomicI64::new(0),
            last_grant: AtomicU64::new(0),
            first_wait: AtomicU32::new(0),
            spacing: AtomicU32::new(0),
            grants_base: AtomicU64::new(0),
            granted_cost: AtomicU64::new(0),
            cost_corrections: AtomicI64::new(0),
            grants_total: AtomicU64::new(0),
            succ: AtomicU32::new(NIL),
            succ_head: AtomicU32::new(NIL),
            last_active: AtomicU64::new(0),
            lane_finish: AtomicU64::new(0),
            lane_interval: AtomicU64::new(0),
            lane_grants_total: AtomicU64::new(0),
            queue: TenantQueue::new(ring_capacity(queue_capacity)),
        }
    }
}
