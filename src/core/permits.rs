//! The engine-wide counts: requests admitted (queued or granted: the global queue bound counts
//! the queued ones) and grants out (the in-flight permits, at most `max_in_flight`), packed in
//! one word.
//!
//! The word is `admitted << 32 | in_flight`; queued is `admitted - in_flight`. With seats on, a
//! grant of width `w` (its cost, at most `max_in_flight`) takes `w` permits and adds `w - 1` to
//! `admitted` as well, so `admitted - in_flight` still counts the queued requests.
//!
//! A request as wide as the whole limit (seats on) runs alone. When its grant finds permits out,
//! it raises `WIDE`, a bit of the in-flight half: every other grant then reads the count above
//! the limit and fails, so the permits out drain and nothing else starts. Its tenant waits in
//! the core's wide slot, stored there before the bit is raised (Release), and the first
//! `next_grant` that finds the bit with no permit out takes all the permits with one CAS that
//! clears it (Acquire: it sees the slot) and serves that tenant (loom model `in_flight::seats`). A grant takes its
//! permit with one CAS that checks the bound and leaves `admitted` alone, so `next_grant` writes
//! nothing shared before it has a head to grant, and nothing at all when it answers `AtCapacity`
//! or `Empty`; ending a grant takes both back with one RMW. Each bound is checked inside its CAS,
//! so neither count ever reads above its bound, not even for a moment, and neither goes below
//! zero: every decrement undoes an increment its caller made (the loom models
//! `in_flight::permits` and `in_flight::grant_vs_cancel`).

use crate::core::packed::Field;
use crate::sync::{AtomicU64, CachePadded, Ordering};

/// The word's fields, from bit 0 up: the permits out, the `WIDE` bit, the requests admitted.
const IN_FLIGHT: Field = Field::first(31);
const WIDE_BIT: Field = Field::after(IN_FLIGHT, 1);
const ADMITTED: Field = Field::after(WIDE_BIT, 32);

const IN_FLIGHT_ONE: u64 = IN_FLIGHT.one();
/// A request that needs every permit waits for them (module docs). Limits are far below it.
const WIDE: u64 = WIDE_BIT.mask();
/// The permits out.
const IN_FLIGHT_MASK: u64 = IN_FLIGHT.mask();
/// The in-flight half, `WIDE` included (it reads as a count above any limit).
const IN_FLIGHT_HALF: u64 = IN_FLIGHT_MASK | WIDE;
const ADMITTED_ONE: u64 = ADMITTED.one();
// The config's caps (2^20 in flight, 2^24 queued) fit with room.
const _: () = assert!(IN_FLIGHT.max() > 1 << 20 && ADMITTED.max() > (1 << 24) + (1 << 20));

/// What one grant of `width` permits adds to the word: `width` in flight, and `width - 1` more
/// admitted (so queued, `admitted - in_flight`, loses exactly the one request granted).
#[inline]
fn granted(width: u64) -> u64 {
    width * IN_FLIGHT_ONE + (width - 1) * ADMITTED_ONE
}

/// What `next_grant` can do now, from one read of the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capacity {
    /// A permit is free.
    Free,
    /// Every permit is out.
    Full,
    /// A request that needs every permit waits for them.
    Wide,
}

/// Why a grant could not take its permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtCapacity;

pub(crate) struct Permits {
    /// `ADMITTED`, `WIDE_BIT` and `IN_FLIGHT`; the config caps both counts far below their
    /// fields' sizes.
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
        let mut wait = crate::sync::FIRST_CONTENDED_HINTS;
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
                Err(seen) => {
                    crate::sync::contended(&mut wait);
                    word = seen;
                }
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
        debug_assert!(ADMITTED.get(before) > 0, "queued count below zero");
    }

    /// Whether a permit is free now (a read: `next_grant` answers `AtCapacity` without a
    /// write; `grant` re-checks inside its CAS).
    #[inline]
    pub(crate) fn capacity(&self) -> Capacity {
        // Relaxed: a hint; `grant` and `reserve_wide` decide.
        let low = self.word.load(Ordering::Relaxed) & IN_FLIGHT_HALF;
        if low < self.max_in_flight {
            Capacity::Free
        } else if low & WIDE != 0 {
            Capacity::Wide
        } else {
            Capacity::Full
        }
    }

    /// The limit, in permits.
    pub(crate) fn max(&self) -> u64 {
        self.max_in_flight
    }

    /// A queued request is about to be granted: takes `width` permits (1 unless seats are on),
    /// if they are free and no wide request waits. Its place in `admitted` stays until the grant
    /// ends (`release`).
    pub(crate) fn grant(&self, width: u64) -> Result<(), AtCapacity> {
        debug_assert!((1..=self.max_in_flight).contains(&width));
        broken!(Permit, {
            // Broken on purpose: check, then store; two callers can both pass the check.
            let word = self.word.load(Ordering::Relaxed);
            if (word & IN_FLIGHT_HALF) + width > self.max_in_flight {
                return Err(AtCapacity);
            }
            self.word
                .store(word.wrapping_add(granted(width)), Ordering::Relaxed);
            return Ok(());
        });
        // `WIDE` counts as far above the limit, so a waiting wide request stops this check.
        if self.update(
            |w| (w & IN_FLIGHT_HALF) + width <= self.max_in_flight,
            granted(width),
        ) {
            Ok(())
        } else {
            Err(AtCapacity)
        }
    }

    /// A wide request (it needs every permit) found permits out and its tenant is now in the
    /// core's wide slot: raise `WIDE`, so no other grant starts. Release: the slot's store
    /// happens before the bit is seen (`reserve_wide`). Only the slot's owner raises it.
    pub(crate) fn wait_wide(&self) {
        let before = self.word.fetch_or(WIDE, Ordering::Release);
        debug_assert!(before & WIDE == 0, "two wide requests waiting at once");
    }

    /// Takes every permit for the waiting wide request, if none is out, clearing `WIDE` in the
    /// same CAS. Acquire: pairs with `wait_wide`, so the caller sees the wide slot's tenant.
    /// Returns the permits taken; the caller grants with them (`trim_reserved`) or gives them
    /// back (`ungrant`).
    pub(crate) fn reserve_wide(&self) -> Option<u64> {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            // Broken on purpose: only looks for the bit, not for the permits still out.
            let ready = broken_or!(Seats, word & WIDE != 0, word & IN_FLIGHT_HALF == WIDE);
            if !ready {
                return None; // permits still out, or no wide request waits
            }
            let next = (word & !WIDE).wrapping_add(granted(self.max_in_flight));
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.max_in_flight),
                Err(seen) => word = seen,
            }
        }
    }

    /// A grant of `width` made with `reserved` permits taken by `reserve_wide`: the permits it
    /// does not need go back.
    pub(crate) fn trim_reserved(&self, reserved: u64, width: u64) {
        debug_assert!(width <= reserved);
        if width < reserved {
            // Relaxed: see `update`.
            self.word
                .fetch_sub(granted(reserved) - granted(width), Ordering::Relaxed);
        }
    }

    /// Undoes `grant` (or `reserve_wide`) of `width` permits for a head that was not granted
    /// after all (a cancel ended it first, and gave its place back itself): they go back.
    pub(crate) fn ungrant(&self, width: u64) {
        // Relaxed: see `update`.
        let before = self.word.fetch_sub(granted(width), Ordering::Relaxed);
        debug_assert!(
            before & IN_FLIGHT_MASK >= width,
            "in-flight count below zero"
        );
    }

    /// A grant of `width` permits ended: its permits and its place go back.
    pub(crate) fn release(&self, width: u64) {
        // Relaxed: see `update`.
        let before = self
            .word
            .fetch_sub(width * (ADMITTED_ONE + IN_FLIGHT_ONE), Ordering::Relaxed);
        debug_assert!(
            before & IN_FLIGHT_MASK >= width,
            "in-flight count below zero"
        );
        debug_assert!(ADMITTED.get(before) >= width, "admitted count below zero");
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
    ADMITTED.get(word).saturating_sub(IN_FLIGHT.get(word))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_word_packs_in_flight_wide_and_admitted() {
        crate::core::packed::tests::round_trips(&[IN_FLIGHT, WIDE_BIT, ADMITTED]);
        // A grant of width 3: three permits out, one request fewer queued.
        let word = 5 * ADMITTED_ONE + granted(3);
        assert_eq!((queued(word), word & IN_FLIGHT_MASK), (4, 3));
        let permits = Permits::new(10, 4);
        assert!(permits.reserve_queued() && permits.reserve_queued());
        assert_eq!(permits.grant(1), Ok(()));
        assert_eq!(permits.load(), (1, 1));
    }
}
