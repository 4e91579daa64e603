//! The readiness timing wheel: tenants whose staged head is not ready yet (its Retry-After has not
//! passed) wait here, bucketed by the tick they become ready, instead of being scanned.

use crate::core::tenants::{TenantTable, NIL};
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Ordering};

/// Timing-wheel granularity: 2^20 ns, about 1.05 ms.
const TICK_SHIFT: u32 = 20;
/// Buckets: a horizon of about 268 ms. Later entries wait in their bucket and are re-parked.
const BUCKETS: u64 = 256;
/// The latest not-before time the engine stores: two ticks before the end of the `u64` range.
/// A tenant is parked in the tick after the cursor at the earliest, and the last tick has none
/// after it, so a later not-before would be parked where no advance can reach (stranded). The
/// clock the engine holds lags the latest time by less than a tick, so by then every head is
/// ready instead.
pub(crate) const LATEST_NOT_BEFORE: u64 = u64::MAX - (2 << TICK_SHIFT);

/// Tenants whose staged head is not ready yet, bucketed by the tick it becomes ready.
///
/// Each bucket is a Treiber stack of tenant indices linked through `TenantSlot::wheel_next`, with
/// push by CAS and drain by `swap(NIL)`. A drain takes the whole list, so there is no ABA: a push
/// only needs the head it read to still be the head. A tenant is in at most one bucket, put there
/// by the thread holding its turn.
pub(crate) struct Wheel {
    buckets: Box<[AtomicU32]>,
    /// Last tick drained. Only moves forward.
    cursor: CachePadded<AtomicU64>,
    /// Tenants parked now.
    parked: CachePadded<AtomicU64>,
}

impl Wheel {
    pub(crate) fn new(now: u64) -> Wheel {
        Wheel {
            buckets: (0..BUCKETS).map(|_| AtomicU32::new(NIL)).collect(),
            cursor: CachePadded::new(AtomicU64::new(now >> TICK_SHIFT)),
            parked: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Parks `tenant` until `not_before`. The caller holds the tenant's turn and gives it up.
    ///
    /// Returns the tick of the bucket if a concurrent `advance` had already drained it when the
    /// tenant landed there: the caller must then `drain` that bucket itself, or the tenant would
    /// wait a whole revolution.
    #[must_use]
    pub(crate) fn park(&self, tenants: &TenantTable, tenant: u32, not_before: u64) -> Option<u64> {
        let cursor = self.cursor.load(Ordering::SeqCst);
        let tick = (not_before >> TICK_SHIFT).max(cursor + 1);
        let bucket = &self.buckets[(tick % BUCKETS) as usize];
        self.parked.fetch_add(1, Ordering::Relaxed);
        let slot = tenants.slot(tenant);
        let mut head = bucket.load(Ordering::Relaxed);
        loop {
            slot.wheel_next.store(head, Ordering::Relaxed);
            // SeqCst, not just Release (which makes the link and the staged head visible to the
            // drainer's swap): it also orders this push before the cursor re-read below, against
            // the drainer's cursor CAS before its swap (a store-load pair on each side).
            match bucket.compare_exchange_weak(head, tenant, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => head = seen,
            }
        }
        // SeqCst: see above. If the cursor has passed our tick, the drain may have missed us.
        (self.cursor.load(Ordering::SeqCst) >= tick).then_some(tick)
    }

    /// Drains the bucket of `tick` now, calling `wake` for each tenant in it (entries for later
    /// revolutions are woken too; `wake` re-parks what is not ready).
    pub(crate) fn drain(&self, tenants: &TenantTable, tick: u64, mut wake: impl FnMut(u32)) {
        // SeqCst: pairs with the parkers' SeqCst push; their links are visible.
        let mut tenant = self.buckets[(tick % BUCKETS) as usize].swap(NIL, Ordering::SeqCst);
        while tenant != NIL {
            let next = tenants.slot(tenant).wheel_next.load(Ordering::Relaxed);
            self.parked.fetch_sub(1, Ordering::Relaxed);
            wake(tenant);
            tenant = next;
        }
    }

    /// Drains every bucket whose tick has passed, calling `wake` for each tenant in them. One
    /// caller at a time advances the cursor; the others return at once.
    pub(crate) fn advance(&self, tenants: &TenantTable, now: u64, mut wake: impl FnMut(u32)) {
        if self.parked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let target = now >> TICK_SHIFT;
        // Relaxed: a hint; the CAS below decides.
        let from = self.cursor.load(Ordering::Relaxed);
        if target <= from {
            return;
        }
        // SeqCst: one winner per advance. A parker either reads the new cursor (and parks
        // beyond it), or its push is ordered before our swap, or it sees the cursor passed its
        // tick and drains the bucket itself (see `park`).
        if self
            .cursor
            .compare_exchange(from, target, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let last = target.min(from + BUCKETS);
        for tick in from + 1..=last {
            self.drain(tenants, tick, &mut wake);
        }
    }

    /// The earliest time a parked tenant may become ready, if any is parked (for caller timers).
    pub(crate) fn next_tick_ns(&self) -> Option<u64> {
        if self.parked.load(Ordering::Relaxed) == 0 {
            return None;
        }
        // Saturating: the tick after the last one would wrap to 0.
        let next = self.cursor.load(Ordering::Acquire) + 1;
        Some(next.saturating_mul(1 << TICK_SHIFT))
    }
}
