//! The engine-wide counts: requests queued (the global queue bound) and grants out (the in-flight
//! permits, at most `max_in_flight`).
//!
//! Each bound is taken with one CAS (`sync::increment_below`), so neither count ever reads above
//! its bound, not even for a moment, and neither goes below zero: every decrement undoes one
//! increment its caller made. `next_grant` takes a permit before it picks and gives it back if
//! nothing is ready (the loom model `in_flight::permits`).

use crate::sync::{AtomicU64, CachePadded, Ordering};

pub(crate) struct Permits {
    /// Requests queued now, all tenants: never above `max_queued`.
    queued: CachePadded<AtomicU64>,
    max_queued: u64,
    /// Grants out now: never above `max_in_flight`.
    in_flight: CachePadded<AtomicU64>,
    max_in_flight: u64,
}

impl Permits {
    pub(crate) fn new(max_queued: u32, max_in_flight: u32) -> Permits {
        Permits {
            queued: CachePadded::new(AtomicU64::new(0)),
            max_queued: u64::from(max_queued),
            in_flight: CachePadded::new(AtomicU64::new(0)),
            max_in_flight: u64::from(max_in_flight),
        }
    }

    /// Takes a place in the global queue bound, if one is free.
    pub(crate) fn reserve_queued(&self) -> bool {
        crate::sync::try_increment_below(&self.queued, self.max_queued)
    }

    /// Gives a place back.
    pub(crate) fn unreserve_queued(&self) {
        // Relaxed: a bound counter (see `sync::increment_below`).
        let before = self.queued.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "queued count below zero");
    }

    /// Takes an in-flight permit, if one is free.
    pub(crate) fn acquire(&self) -> bool {
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::Permit) {
            // Broken on purpose: check, then store; two callers can both pass the check.
            let current = self.in_flight.load(Ordering::Relaxed);
            if current >= self.max_in_flight {
                return false;
            }
            self.in_flight.store(current + 1, Ordering::Relaxed);
            return true;
        }
        crate::sync::try_increment_below(&self.in_flight, self.max_in_flight)
    }

    /// Gives a permit back.
    pub(crate) fn release(&self) {
        // Relaxed: see `sync::increment_below`.
        let before = self.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "in-flight count below zero");
    }

    /// `(queued, in_flight)` now, each read atomically (not together).
    pub(crate) fn load(&self) -> (u64, u64) {
        // Relaxed: gauges.
        (
            self.queued.load(Ordering::Relaxed),
            self.in_flight.load(Ordering::Relaxed),
        )
    }
}
