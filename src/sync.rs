//! The one place that names atomics, queues and shared pointers.
//!
//! Every other module imports its concurrency primitives from here. Under `cfg(loom)` the shim
//! swaps in loom's atomics and loom-visible stand-ins with the same API: a loom
//! `Mutex<VecDeque>` behind `WordRing`'s interface and an `RwLock<Arc<T>>` behind `ArcSwap`.
//! Loom cannot see inside arc-swap, so without the stand-in it would check nothing there. The
//! ring behind `WordRing` is fairq's own (`word_ring`), proved by its own loom models; the
//! engine-level models use the stand-in, which keeps their state space small.
//!
//! `cfg(fairq_plain_rmw)` is a measurement build, never a product: every read-modify-write
//! becomes a plain load and store (`plain_rmw` below), so one thread runs the same code without
//! the locked instructions, and an A/B against the normal build shows what they cost
//! (`benches/rmw_cost.sh`). Two threads lose updates in it.

#[cfg(not(loom))]
mod imp {
    #[cfg(fairq_plain_rmw)]
    pub(crate) use super::plain_rmw::{AtomicBool, AtomicI64, AtomicU32, AtomicU64};
    pub(crate) use std::sync::atomic::{fence, Ordering};
    #[cfg(not(fairq_plain_rmw))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64};
    pub(crate) use std::sync::Mutex;

    pub(crate) use crate::word_ring::WordRing;
    pub(crate) use crossbeam_utils::CachePadded;

    /// Spin-then-yield backoff for waits on a short critical section of another thread (a few
    /// stores). Spins 1, 2, 4, .. 1024 spin-loop hints (2047 in all: tens of microseconds),
    /// then yields on every further call. The spin outlasts an interrupt or a hypervisor exit
    /// that lands inside the other thread's few stores, so the yield (a system call) comes only
    /// when that thread was descheduled, and then lets it run.
    pub(crate) struct Backoff(std::cell::Cell<u32>);

    /// Rounds of spinning before a `Backoff` yields.
    const SPIN_ROUNDS: u32 = 11;

    /// Yields every `Backoff` of this process has made (`yields`).
    static YIELDS: AtomicU64 = AtomicU64::new(0);

    /// System calls the waits of this process have made so far: `Backoff` yields. Tests check
    /// that the hot path makes none.
    pub(crate) fn yields() -> u64 {
        // Relaxed: a statistic.
        YIELDS.load(Ordering::Relaxed)
    }

    impl Backoff {
        pub(crate) fn new() -> Self {
            Backoff(std::cell::Cell::new(0))
        }
        pub(crate) fn snooze(&self) {
            let round = self.0.get();
            if round < SPIN_ROUNDS {
                spin(1 << round);
                self.0.set(round + 1);
            } else {
                // Relaxed: a statistic for tests; off the hot path (only when yielding).
                YIELDS.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
        }
    }

    /// After a lost CAS: waits `wait` spin-loop hints and doubles it, up to
    /// [`MAX_CONTENDED_HINTS`], so two callers racing for one word stop trading its cache line
    /// on every try. A retry loop starts with [`FIRST_CONTENDED_HINTS`]. No system call; the
    /// winner of the CAS is already past it.
    #[inline]
    pub(crate) fn contended(wait: &mut u32) {
        spin(*wait);
        *wait = (*wait * 2).min(MAX_CONTENDED_HINTS);
    }

    /// The longest wait after a lost CAS, in spin-loop hints.
    pub(crate) const MAX_CONTENDED_HINTS: u32 = 64;

    /// `hints` spin-loop hints: a wait with no system call.
    #[inline]
    pub(crate) fn spin(hints: u32) {
        for _ in 0..hints {
            std::hint::spin_loop();
        }
    }

    /// A shared, atomically replaceable value (read-mostly, replaced rarely).
    pub(crate) struct SharedPtr<T>(arc_swap::ArcSwap<T>);

    impl<T> SharedPtr<T> {
        pub(crate) fn new(value: T) -> Self {
            SharedPtr(arc_swap::ArcSwap::from_pointee(value))
        }
        /// Runs `f` on the current value without locking or allocating.
        pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
            f(&self.0.load())
        }
        pub(crate) fn store(&self, value: T) {
            self.0.store(std::sync::Arc::new(value))
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering,
    };
    pub(crate) use loom::sync::Mutex;

    pub(crate) use crossbeam_utils::CachePadded;

    use std::collections::VecDeque;
    use std::sync::Arc;

    /// Loom-visible stand-in for the ring (`word_ring::WordRing`): same API, a loom mutex
    /// inside (the ring's own models check the ring).
    pub(crate) struct WordRing<T> {
        inner: loom::sync::Mutex<VecDeque<T>>,
        cap: usize,
    }

    impl<T> WordRing<T> {
        pub(crate) fn new(cap: usize) -> Self {
            assert!(cap > 0, "capacity must be non-zero");
            WordRing {
                inner: loom::sync::Mutex::new(VecDeque::with_capacity(cap)),
                cap,
            }
        }
        pub(crate) fn push(&self, value: T) -> Result<(), T> {
            let mut q = self.inner.lock().unwrap();
            if q.len() == self.cap {
                return Err(value);
            }
            q.push_back(value);
            Ok(())
        }
        pub(crate) fn pop(&self) -> Option<T> {
            self.inner.lock().unwrap().pop_front()
        }
        pub(crate) fn try_pop(&self) -> Option<T> {
            self.pop()
        }
        pub(crate) fn is_empty(&self) -> bool {
            self.inner.lock().unwrap().is_empty()
        }
    }

    /// Under loom a backoff is a yield, so the waited-on thread can run.
    pub(crate) struct Backoff;

    impl Backoff {
        pub(crate) fn new() -> Self {
            Backoff
        }
        pub(crate) fn snooze(&self) {
            loom::thread::yield_now()
        }
    }

    /// Under loom a lost CAS just retries.
    pub(crate) fn contended(_wait: &mut u32) {}

    /// Under loom a spin is one yield, so the waited-on thread can run.
    pub(crate) fn spin(_hints: u32) {
        loom::thread::yield_now()
    }

    /// Loom-visible stand-in for `ArcSwap`: an `RwLock<Arc<T>>`.
    pub(crate) struct SharedPtr<T>(loom::sync::RwLock<Arc<T>>);

    impl<T> SharedPtr<T> {
        pub(crate) fn new(value: T) -> Self {
            SharedPtr(loom::sync::RwLock::new(Arc::new(value)))
        }
        pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
            let current = self.0.read().unwrap().clone();
            f(&current)
        }
        pub(crate) fn store(&self, value: T) {
            *self.0.write().unwrap() = Arc::new(value);
        }
    }
}

pub(crate) use imp::*;

/// The first wait after a lost CAS, in spin-loop hints ([`contended`]).
pub(crate) const FIRST_CONTENDED_HINTS: u32 = 2;

/// Adds 1 to `counter` unless it is already at `max`: one CAS makes check-and-increment a single
/// step, so the bound is never passed (not even for a moment, as an add-then-undo would be).
/// Returns the value before (`Ok`) or the value at the bound (`Err`). Relaxed: a bound counter
/// guards a number, not data (the ticket CAS and queue pushes order a request's data).
pub(crate) fn increment_below(counter: &AtomicU64, max: u64) -> Result<u64, u64> {
    let mut current = counter.load(Ordering::Relaxed);
    let mut wait = FIRST_CONTENDED_HINTS;
    loop {
        if current >= max {
            return Err(current);
        }
        match counter.compare_exchange_weak(
            current,
            current + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Ok(current),
            Err(seen) => {
                contended(&mut wait);
                current = seen;
            }
        }
    }
}

/// Whether `counter` was below `max` and is now one more ([`increment_below`]).
pub(crate) fn try_increment_below(counter: &AtomicU64, max: u64) -> bool {
    increment_below(counter, max).is_ok()
}

/// Asks the CPU to start loading the cache lines of `len` bytes at `ptr`: a hint with no effect
/// on the program's meaning (a no-op off x86-64 and under loom). `unsafe` because the intrinsic
/// takes a raw pointer; outside the C ABI the only other `unsafe` builds the large tables
/// (`table.rs`, `ring_entry.rs`) and declares their element types zeroable (`Zeroed`).
#[inline(always)]
#[allow(unsafe_code)]
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn prefetch<T>(ptr: *const T, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let base = ptr.cast::<i8>();
        let mut offset = 0;
        while offset < len {
            // SAFETY: a prefetch never faults and never reads into the program: it is only a
            // hint to the cache, valid for any address (`wrapping_add` keeps the arithmetic
            // defined even past the object). SSE is part of the x86-64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(offset)) };
            offset += 64;
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = (ptr, len);
}

/// The measurement build's atomics (see the module docs): std's, with each read-modify-write
/// done as a Relaxed load and a store. One thread sees what the atomic version gives; there is
/// no data race (every access is still atomic), but concurrent updates can be lost.
#[cfg(all(fairq_plain_rmw, not(loom)))]
#[allow(dead_code)] // the full set of std's read-modify-writes, whichever the engine uses today
mod plain_rmw {
    use std::sync::atomic::Ordering;

    macro_rules! plain {
        ($name:ident, $t:ty) => {
            #[derive(Default, Debug)]
            #[repr(transparent)]
            pub(crate) struct $name(std::sync::atomic::$name);

            impl $name {
                pub(crate) const fn new(value: $t) -> Self {
                    $name(std::sync::atomic::$name::new(value))
                }
                #[inline]
                pub(crate) fn load(&self, order: Ordering) -> $t {
                    self.0.load(order)
                }
                #[inline]
                pub(crate) fn store(&self, value: $t, order: Ordering) {
                    self.0.store(value, order)
                }
                #[inline]
                fn update(&self, f: impl FnOnce($t) -> $t) -> $t {
                    let old = self.0.load(Ordering::Relaxed);
                    self.0.store(f(old), Ordering::Relaxed);
                    old
                }
                #[inline]
                pub(crate) fn swap(&self, value: $t, _: Ordering) -> $t {
                    self.update(|_| value)
                }
                #[inline]
                pub(crate) fn compare_exchange(
                    &self,
                    current: $t,
                    new: $t,
                    _: Ordering,
                    _: Ordering,
                ) -> Result<$t, $t> {
                    let old = self.0.load(Ordering::Relaxed);
                    if old != current {
                        return Err(old);
                    }
                    self.0.store(new, Ordering::Relaxed);
                    Ok(old)
                }
                #[inline]
                pub(crate) fn compare_exchange_weak(
                    &self,
                    current: $t,
                    new: $t,
                    success: Ordering,
                    failure: Ordering,
                ) -> Result<$t, $t> {
                    self.compare_exchange(current, new, success, failure)
                }
            }
        };
    }

    macro_rules! arithmetic {
        ($name:ident, $t:ty) => {
            impl $name {
                #[inline]
                pub(crate) fn fetch_add(&self, value: $t, _: Ordering) -> $t {
                    self.update(|old| old.wrapping_add(value))
                }
                #[inline]
                pub(crate) fn fetch_sub(&self, value: $t, _: Ordering) -> $t {
                    self.update(|old| old.wrapping_sub(value))
                }
                #[inline]
                pub(crate) fn fetch_or(&self, value: $t, _: Ordering) -> $t {
                    self.update(|old| old | value)
                }
                #[inline]
                pub(crate) fn fetch_and(&self, value: $t, _: Ordering) -> $t {
                    self.update(|old| old & value)
                }
                #[inline]
                pub(crate) fn fetch_max(&self, value: $t, _: Ordering) -> $t {
                    self.update(|old| old.max(value))
                }
                #[inline]
                pub(crate) fn fetch_min(&self, value: $t, _: Ordering) -> $t {
                    self.update(|old| old.min(value))
                }
            }
        };
    }

    plain!(AtomicBool, bool);
    plain!(AtomicU32, u32);
    plain!(AtomicU64, u64);
    plain!(AtomicI64, i64);
    arithmetic!(AtomicU32, u32);
    arithmetic!(AtomicU64, u64);
    arithmetic!(AtomicI64, i64);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lost_cas_waits_longer_each_round_up_to_the_cap() {
        let mut wait = FIRST_CONTENDED_HINTS;
        let mut waits = Vec::new();
        for _ in 0..8 {
            waits.push(wait);
            contended(&mut wait);
        }
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(wait, MAX_CONTENDED_HINTS);
    }

    #[test]
    fn increment_below_stops_at_the_bound_under_contention() {
        let counter = AtomicU64::new(0);
        let wins: u32 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let counter = &counter;
                    s.spawn(move || {
                        (0..500)
                            .filter(|_| try_increment_below(counter, 1000))
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap() as u32).sum()
        });
        assert_eq!(wins, 1000);
        assert_eq!(counter.load(Ordering::Relaxed), 1000);
    }
}
