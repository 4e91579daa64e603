//! The readiness timing wheel: tenants whose staged head is not ready yet (its Retry-After has not
//! passed) wait here, bucketed by the tick they become ready, instead of being scanned.

use crate::core::tenants::{TenantTable, NIL};
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Ordering};

/// Timing-wheel granularity: 2^20 ns, about 1.05 ms.
const TICK_SHIFT: u32 = 20;
/// Buckets: a horizon of about 268 ms.
const BUCKETS: u64 = 256;
/// The latest not-before time the engine stores: two ticks before the end of the `u64` range.
/// A tenant is parked in the tick after the cursor at the earliest, and the last tick has none
/// after it, so a later not-before would be parked where no advance can reach (stranded). The
/// clock the engine holds lags the latest time by less than a tick, so by then every head is
/// ready instead.
pub(crate) const LATEST_NOT_BEFORE: u64 = u64::MAX - (2 << TICK_SHIFT);
/// A tenant parks for at most this many ticks (about 8.4 ms), then its head is checked again
/// and it parks again if still not ready. A parked tenant cannot be taken out of its bucket, so
/// this bounds how long the requests behind a head wait when that head is cancelled (they must
/// not wait out its Retry-After). Callers already wake every tick while anything is parked
/// (`next_tick_ns`), so the re-checks cost no extra wake-ups.
const RECHECK_TICKS: u64 = 8;

/// Tenants whose staged head is not ready yet, bucketed by the tick it becomes ready.
///
/// Each bucket is a Treiber stack of tenant indices linked through `TenantSlot::wheel_next`, with
/// push by CAS and drain by `swap(NIL)`. A drain takes the whole list, so there is no ABA: a push
/// only needs the head it read to still be the head. A tenant is in at most one bucket, put there
/// by the thread holding its turn.
///
/// The hand-off between a parker and an advancer is made of read-modify-writes only: the parker
/// pushes, then reads the cursor with a `fetch_add(0)`; the advancer moves the cursor by CAS, then
/// swaps the bucket. An RMW reads the latest value of its word, so either the parker sees the
/// cursor past its tick (and drains the bucket itself), or its cursor RMW came first, released
/// its push to the advancer's CAS, and the advancer's swap takes it. Loom checks this exactly
/// (`loom_models`); a plain or even `SeqCst` load in the parker would need the `SeqCst` total
/// order, which loom does not model.
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
        // Relaxed: a first guess for the tick; the RMW below decides.
        let cursor = self.cursor.load(Ordering::Relaxed);
        let tick = (not_before >> TICK_SHIFT).clamp(cursor + 1, cursor + RECHECK_TICKS);
        let bucket = &self.buckets[(tick % BUCKETS) as usize];
        self.parked.fetch_add(1, Ordering::Relaxed);
        let slot = tenants.slot(tenant);
        let mut head = bucket.load(Ordering::Relaxed);
        loop {
            slot.wheel_next.store(head, Ordering::Relaxed);
            // Release: the link and the staged head go to the drainer's Acquire swap.
            match bucket.compare_exchange_weak(head, tenant, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => head = seen,
            }
        }
        // An RMW, not a load: it reads the cursor's latest value (see the type's docs). AcqRel:
        // its Release hands our push to an advancer whose CAS comes after it. If the cursor has
        // passed our tick, the drain may have missed us.
        broken!(Wheel, {
            // Broken on purpose: a plain load may read a cursor an advancer already moved.
            return (self.cursor.load(Ordering::Acquire) >= tick).then_some(tick);
        });
        (self.cursor.fetch_add(0, Ordering::AcqRel) >= tick).then_some(tick)
    }

    /// Drains the bucket of `tick` now, calling `wake` for each tenant in it (entries for later
    /// revolutions are woken too; `wake` re-parks what is not ready).
    pub(crate) fn drain(&self, tenants: &TenantTable, tick: u64, mut wake: impl FnMut(u32)) {
        // Acquire: pairs with the parkers' Release push (and the pushes after it, a release
        // sequence); their links are visible.
        let mut tenant = self.buckets[(tick % BUCKETS) as usize].swap(NIL, Ordering::Acquire);
        while tenant != NIL {
            let next = tenants.slot(tenant).wheel_next.load(Ordering::Relaxed);
            self.parked.fetch_sub(1, Ordering::Relaxed);
            wake(tenant);
            tenant = next;
        }
    }

    /// Drains every bucket whose tick has passed, calling `wake` for each tenant in them. One
    /// caller at a time advances the cursor; the others return at once.
    #[inline]
    pub(crate) fn advance(&self, tenants: &TenantTable, now: u64, wake: impl FnMut(u32)) {
        // Inline: most calls find nothing parked and return here, without a call's set-up.
        if self.parked.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.advance_parked(tenants, now, wake);
    }

    /// `advance` with tenants parked: moves the cursor to `now`'s tick and drains the buckets
    /// it passed.
    #[inline(never)]
    fn advance_parked(&self, tenants: &TenantTable, now: u64, mut wake: impl FnMut(u32)) {
        let target = now >> TICK_SHIFT;
        // Relaxed: a hint; the CAS below decides.
        let from = self.cursor.load(Ordering::Relaxed);
        if target <= from {
            return;
        }
        // One winner per advance. AcqRel: Acquire takes the push of every parker whose cursor
        // RMW came before this CAS, so our swaps below see it; a parker after it reads the new
        // cursor and drains the bucket itself (see the type's docs).
        if self
            .cursor
            .compare_exchange(from, target, Ordering::AcqRel, Ordering::Relaxed)
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

/// Loom model of the park/advance hand-off (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicU32;
    use loom::sync::Arc;
    use loom::thread;

    const TICK: u64 = 1 << TICK_SHIFT;

    /// Counts the wakes of tenant 0, the only one parked.
    fn wake(woken: &AtomicU32) -> impl FnMut(u32) + '_ {
        move |t| {
            assert_eq!(t, 0);
            woken.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A parker parks tenant 0 for the next tick while an advancer moves the cursor onto that
    /// tick; afterwards a caller advances again at the same time. The tenant is woken exactly
    /// once: by the advancer's drain or by the parker's own.
    #[test]
    fn a_park_racing_an_advance_is_woken_once() {
        loom::model(|| {
            let tenants = Arc::new(TenantTable::new(1, 1, 0));
            let wheel = Arc::new(Wheel::new(0));
            let woken = Arc::new(AtomicU32::new(0));
            let parker = {
                let (tenants, wheel, woken) = (tenants.clone(), wheel.clone(), woken.clone());
                thread::spawn(move || {
                    if let Some(tick) = wheel.park(&tenants, 0, TICK) {
                        wheel.drain(&tenants, tick, wake(&woken));
                    }
                })
            };
            let advancer = {
                let (tenants, wheel, woken) = (tenants.clone(), wheel.clone(), woken.clone());
                thread::spawn(move || wheel.advance(&tenants, TICK, wake(&woken)))
            };
            parker.join().unwrap();
            advancer.join().unwrap();
            // A later caller, at the same time: it finds the cursor moved (if it was) and drains
            // nothing, so a tenant the hand-off lost would stay lost (for a revolution).
            wheel.advance(&tenants, TICK, wake(&woken));
            assert_eq!(
                woken.load(Ordering::Relaxed),
                1,
                "a parked tenant was lost or woken twice"
            );
        });
    }

    /// A parker that re-reads the cursor with a load can miss an advance that drained its
    /// bucket before its push landed.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "a parked tenant was lost or woken twice")]
    fn broken_wheel_hand_off_is_caught() {
        crate::broken::with(
            crate::broken::Break::Wheel,
            a_park_racing_an_advance_is_woken_once,
        );
    }
}
