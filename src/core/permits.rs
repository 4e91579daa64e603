//! The engine-wide counts: requests admitted (queued or granted: the global queue bound counts
//! the queued ones) and grants out (the in-flight permits, at most `max_in_flight`), packed in
//! one word.
//!
//! The word is `admitted << 32 | in_flight`; queued is `admitted - in_flight`. A grant takes its
//! permit with one CAS that checks the bound and leaves `admitted` alone, so `next_grant` writes
//! nothing shared before it has a head to grant, and nothing at all when it answers `AtCapacity`
//! or `Empty`; ending a grant takes both back with one RMW. Each bound is checked inside its CAS,
//! so neither count ever reads above its bound, not even for a moment, and neither goes below
//! zero: every decrement undoes an increment its caller made (the loom models
//! `in_flight::permits` and `in_flight::grant_vs_cancel`).

use crate::sync::{AtomicU64, CachePadded, Ordering};

const IN_FLIGHT_ONE: u64 = 1;
const IN_FLIGHT_MASK: u64 = 0xFFFF_FFFF;
const ADMITTED_ONE: u64 = 1 << 32;

/// Why a grant could not take its permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtCapacity;

pub(crate) struct Permits {
    /// `admitted << 32 | in_flight`; both fit 32 bits (the config caps their bounds).
    word: CachePadded<AtomicU64>,
    max_queued: u64,
    max_in_flight: u64,
}

impl Permits {
    pub(crate) fn new(max_queued: u32, max_in_flight: u32) -> Permits {
        Permits {
            word: CachePadded::new(AtomicU64::new(0)),
            max_queued: u64::from(max_queued),
            max_in_flight: u64::from(max_in_flight),
        }
    }

    /// Adds `delta` if `check` (given the word) allows it; one CAS per try. Relaxed: a bound
    /// counter guards a number, not data (the ticket CAS and the queue pushes order a request's
    /// data).
    #[inline]
    fn update(&self, check: impl Fn(u64) -> bool, delta: u64) -> bool {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if !check(word) {
                return false;
            }
            match self.word.compare_exchange_weak(
                word,
                word.wrapping_add(delta),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
    }

    /// Takes a place in the global queue bound, if one is free.
    pub(crate) fn reserve_queued(&self) -> bool {
        self.update(|w| queued(w) < self.max_queued, ADMITTED_ONE)
    }

    /// Gives a queued request's place back (it ended without a grant).
    pub(crate) fn unreserve_queued(&self) {
        // Relaxed: see `update`.
        let before = self.word.fetch_sub(ADMITTED_ONE, Ordering::Relaxed);
        debug_assert!(before >> 32 > 0, "queued count below zero");
    }

    /// Whether every permit is out now (a read: `next_grant` answers `AtCapacity` without a
    /// write; `grant` re-checks inside its CAS).
    pub(crate) fn at_capacity(&self) -> bool {
        // Relaxed: a hint; `grant` decides.
        self.word.load(Ordering::Relaxed) & IN_FLIGHT_MASK >= self.max_in_flight
    }

    /// A queued request is about to be granted: takes a permit, if one is free. Its place in
    /// `admitted` stays until the grant ends (`release`).
    pub(crate) fn grant(&self) -> Result<(), AtCapacity> {
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::Permit) {
            // Broken on purpose: check, then store; two callers can both pass the check.
            let word = self.word.load(Ordering::Relaxed);
            if word & IN_FLIGHT_MASK >= self.max_in_flight {
                return Err(AtCapacity);
            }
            self.word
                .store(word.wrapping_add(IN_FLIGHT_ONE), Ordering::Relaxed);
            return Ok(());
        }
        if self.update(|w| w & IN_FLIGHT_MASK < self.max_in_flight, IN_FLIGHT_ONE) {
            Ok(())
        } else {
            Err(AtCapacity)
        }
    }

    /// Undoes `grant` for a head that was not granted after all (a cancel ended it first, and
    /// gave its place back itself): the permit goes back.
    pub(crate) fn ungrant(&self) {
        // Relaxed: see `update`.
        let before = self.word.fetch_sub(IN_FLIGHT_ONE, Ordering::Relaxed);
        debug_assert!(before & IN_FLIGHT_MASK > 0, "in-flight count below zero");
    }

    /// A grant ended: its permit and its place go back.
    pub(crate) fn release(&self) {
        // Relaxed: see `update`.
        let before = self
            .word
            .fetch_sub(ADMITTED_ONE + IN_FLIGHT_ONE, Ordering::Relaxed);
        debug_assert!(before & IN_FLIGHT_MASK > 0, "in-flight count below zero");
        debug_assert!(before >> 32 > 0, "admitted count below zero");
    }

    /// `(queued, in_flight)` now, read together.
    pub(crate) fn load(&self) -> (u64, u64) {
        // Relaxed: gauges.
        let word = self.word.load(Ordering::Relaxed);
        (queued(word), word & IN_FLIGHT_MASK)
    }
}

/// Requests queued in `word`. Saturating: between a `grant` whose ticket a cancel won and its
/// `ungrant`, the permit is counted while the cancel has already given the place back.
#[inline]
fn queued(word: u64) -> u64 {
    (word >> 32).saturating_sub(word & IN_FLIGHT_MASK)
}
