//! Bulkheads: optional per-downstream in-flight pools. A feature of the core's seam
//! (`core/hooks.rs`).
//!
//! A request names its downstream class (`Request::downstream`, 0..N). With
//! `Config::downstream_max_in_flight` set, class `d` may have at most `downstream_max_in_flight[d]`
//! grants out at once, on top of the global `max_in_flight`. So one slow or stuck backend holds
//! at most its own pool's permits, and grants to the other classes keep flowing (protecting a
//! downstream comes before being fair). Off (empty) by default: every request then shares the
//! one global pool and `downstream` is ignored.
//!
//! # How it meets readiness and SWRR
//! A pool that is full makes a tenant whose *head* goes to it **not ready**, exactly like a head
//! whose Retry-After has not passed: when a granter finds that head and cannot take a permit of
//! its pool, the tenant leaves its class's ready set uncharged (its SWRR credit and DRR credit are
//! untouched) and waits in the pool's `blocked` ring. SWRR then runs over the tenants that can be
//! granted, so its shares stay exact among them. A tenant keeps its FIFO order: requests behind a
//! blocked head, even for other downstreams, wait with it.
//!
//! Blocked tenants come back in O(1) per permit: `complete` and `cancel` give the permit back and
//! hand one blocked tenant of that pool back to the core, which places it. The blocker and the
//! releaser use the store-buffer pattern with SeqCst fences (blocker: count, push, fence, read
//! in-flight; releaser: decrement in-flight, fence, read count), so at least one of them sees the
//! other and no tenant is forgotten in the ring while its pool has room (loom models at the end
//! of this file).
//!
//! # Weights inside a full pool
//! While a pool is full, the order in which it wakes its blocked tenants decides their shares.
//! A plain ring would wake them in turn, one grant each: 1:1 whatever the weights. So the pool
//! runs deficit round robin over its blocked tenants. A tenant whose visit is spent joins the
//! ring's tail with a new one: `weight / unit` wakes (`unit` is the greatest common divisor of
//! the weights the pools have seen, so weights of 100 and 300 earn 1 and 3, not 100 and 300).
//! Each wake spends one. A tenant that blocks again with wakes left waits in the pool's `visitor`
//! word, which the next wake takes before the ring; one that finds the word taken joins the ring
//! with what it has left and earns nothing more. Shares among the blocked tenants then follow
//! their weights, and a tenant at most runs `weight / unit` wakes ahead.
//!
//! # Deadlines
//! A blocked head's deadline still ends it on time: the pools keep the earliest blocked deadline,
//! and the `next_grant` that passes it re-places every blocked tenant once (not a wake: no
//! credit is spent), so expired heads come out as `Expired` and the rest block again.
//!
//! Everything is atomics and `WordRing`s sized at build time: no lock, no allocation.
//!
//! # Load shedding
//! With `Config::shedding`, each pool also judges its downstream's error rate
//! (`Engine::report_downstream`, see `shedding.rs`): a pool over the threshold has its in-flight
//! limit cut (the bound a grant must stay under is then the limit, not the configured bound),
//! and while it is cut a request to it that cannot be served within its budget is refused at
//! once (`downstream_shedding`). When a calm window grows the limit back, as many blocked
//! tenants are handed back to the core as the limit grew, since no release would wake them.

use crate::core::{Admit, SlotId};
use crate::shedding::{PoolShed, ShedStats, Shedding};
use crate::sync::{fence, AtomicI64, AtomicU32, AtomicU64, CachePadded, Ordering, WordRing};

/// Most downstream classes.
pub const MAX_DOWNSTREAMS: usize = 64;

struct Pool {
    /// Most grants of this class out at once: the configured bound, unless load shedding cut
    /// it; and the shedding state behind the limit.
    shed: PoolShed,
    /// Grants of this class out now: never above the configured bound.
    in_flight: AtomicU64,
    /// Tenants in `blocked` (raised before the push, lowered after the pop), so a releaser never
    /// polls an empty ring.
    waiting: AtomicU64,
    /// Tenants whose head waits for a permit of this pool; each holds its turn there.
    blocked: WordRing<u32>,
    /// A blocked tenant whose visit has wakes left (`NO_VISITOR` when none): woken before the
    /// ring. Counted in `waiting` like the ring's tenants; it holds its turn here as there.
    visitor: AtomicU64,
    /// Times a tenant blocked on this pool.
    blocks: AtomicU64,
}

/// `Pool::visitor` holding no tenant.
const NO_VISITOR: u64 = u64::MAX;

pub(crate) struct Bulkheads {
    pools: Box<[CachePadded<Pool>]>,
    /// Per tenant slot: wakes left in its visit to a full pool (deficit round robin). Written
    /// by whoever holds the tenant's turn: the blocker, then the waker.
    credits: Box<[AtomicI64]>,
    /// The greatest common divisor of the weights of the tenants that blocked so far: a weight
    /// earns `weight / unit` wakes a visit. Only goes down.
    unit: AtomicU32,
    /// Load shedding's settings; `None`: off (the limits never move).
    shedding: Option<Shedding>,
    /// The earliest deadline of a blocked head (ns), `u64::MAX` when none.
    earliest_deadline: CachePadded<AtomicU64>,
}

impl Bulkheads {
    /// `None` when `maxes` is empty (bulkheads off). `slots` sizes each blocked ring.
    pub(crate) fn new(
        maxes: &[u32],
        shedding: Option<Shedding>,
        slots: usize,
    ) -> Option<Bulkheads> {
        if maxes.is_empty() {
            return None;
        }
        Some(Bulkheads {
            pools: maxes
                .iter()
                .map(|&max| {
                    CachePadded::new(Pool {
                        shed: PoolShed::new(u64::from(max)),
                        in_flight: AtomicU64::new(0),
                        waiting: AtomicU64::new(0),
                        blocked: WordRing::new(slots),
                        visitor: AtomicU64::new(NO_VISITOR),
                        blocks: AtomicU64::new(0),
                    })
                })
                .collect(),
            credits: (0..slots).map(|_| AtomicI64::new(0)).collect(),
            unit: AtomicU32::new(0),
            shedding,
            earliest_deadline: CachePadded::new(AtomicU64::new(u64::MAX)),
        })
    }

    /// Takes a permit of pool `d`, if it has room under the limit in force.
    fn try_acquire(&self, d: usize) -> bool {
        let pool = &self.pools[d];
        crate::sync::try_increment_below(&pool.in_flight, pool.shed.limit())
    }

    /// Gives a permit of pool `d` back; returns a blocked tenant to re-place, if any.
    fn release(&self, d: usize) -> Option<u32> {
        let pool = &self.pools[d];
        // Relaxed RMW, then the SeqCst fence orders it before our read of `waiting` (see the
        // module docs: a blocker that missed this release is seen here).
        let before = pool.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "downstream in-flight count below zero");
        fence(Ordering::SeqCst);
        self.pop_blocked(pool)
    }

    /// Wakes a blocked tenant of `pool`, if any: the visitor first, then the ring's head. The
    /// wake spends one of its credits.
    fn pop_blocked(&self, pool: &Pool) -> Option<u32> {
        // Relaxed: the fences of the caller order it; the take itself is the synchronisation.
        if pool.waiting.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let t = Self::take_blocked(pool)?;
        // Relaxed: we hold `t`'s turn now (the take acquired the blocker's writes).
        self.credits[t as usize].fetch_sub(1, Ordering::Relaxed);
        Some(t)
    }

    /// Takes the visitor, else the ring's head, and counts it out of `waiting`.
    fn take_blocked(pool: &Pool) -> Option<u32> {
        // Acquire: pairs with the blocker's Release store, so its writes (the tenant's credit,
        // its turn's state) happen before ours. An RMW, so one taker only.
        let visitor = broken_or!(
            PoolVisitor,
            NO_VISITOR,
            pool.visitor.swap(NO_VISITOR, Ordering::Acquire)
        );
        let t = if visitor != NO_VISITOR {
            visitor as u32
        } else {
            pool.blocked.pop()?
        };
        // Relaxed: see `Pool::waiting`.
        pool.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(t)
    }

    /// Wakes `weight` earns a visit: `weight / unit`, `unit` the greatest common divisor of the
    /// weights seen (lowered to take `weight` in).
    fn wakes_per_visit(&self, weight: u32) -> i64 {
        let weight = weight.max(1);
        // Relaxed: a divisor that only goes down; a stale one gives a visit more wakes, in
        // proportion for every weight it divides, and the next block lowers it.
        let mut unit = self.unit.load(Ordering::Relaxed);
        while unit == 0 || weight % unit != 0 {
            let lower = gcd(unit, weight);
            match self
                .unit
                .compare_exchange_weak(unit, lower, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => unit = lower,
                Err(seen) => unit = seen,
            }
        }
        i64::from(weight / unit)
    }

    /// Parks tenant `t` of weight `weight`, whose head (due by `deadline`) waits for pool `d`.
    /// Returns a blocked tenant to re-place if the pool had room after all (maybe `t` itself).
    /// Only a full pool gets here: kept out of the grant path's code.
    #[cold]
    #[inline(never)]
    fn block(&self, d: usize, t: u32, deadline: u64, weight: u32) -> Option<u32> {
        let pool = &self.pools[d];
        // Relaxed: ordered by the fence below.
        pool.waiting.fetch_add(1, Ordering::Relaxed);
        pool.blocks.fetch_add(1, Ordering::Relaxed);
        // Relaxed: we hold `t`'s turn; its last waker's write is ordered before by the turn's
        // hand-over.
        let credit = &self.credits[t as usize];
        let left = credit.load(Ordering::Relaxed);
        // Release (success): our writes, the credit's included, before the waker's Acquire swap.
        let visits_on = left > 0
            && pool
                .visitor
                .compare_exchange(
                    NO_VISITOR,
                    u64::from(t),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok();
        if !visits_on {
            if left <= 0 {
                // Its visit is spent: a new one from the ring's tail. (A tenant with wakes left
                // that found the visitor word taken, or that a deadline sweep put back, keeps
                // them and earns none: credit never piles up.)
                credit.store(self.wakes_per_visit(weight), Ordering::Relaxed);
            }
            let pushed = pool.blocked.push(t);
            debug_assert!(pushed.is_ok(), "blocked ring sized for every tenant");
        }
        // Relaxed: the deadline word is a hint checked against the clock; a late read only
        // delays an expiry by one `next_grant`.
        self.earliest_deadline
            .fetch_min(deadline, Ordering::Relaxed);
        // SeqCst fence: pairs with `release`'s; see the module docs.
        broken_or!(PoolFence, (), fence(Ordering::SeqCst));
        if pool.in_flight.load(Ordering::Relaxed) < pool.shed.limit() {
            return self.pop_blocked(pool);
        }
        None
    }
}

impl Bulkheads {
    /// The pool of a request to `downstream`. `check_downstream` keeps it in range at enqueue;
    /// `min` is defensive only.
    #[inline]
    fn pool_of(&self, downstream: u32) -> usize {
        (downstream as usize).min(self.pools.len() - 1)
    }

    /// Checks a request's `downstream` at enqueue: it must name a pool.
    pub(crate) fn check_downstream(&self, downstream: u32) -> Result<(), crate::types::Error> {
        if downstream as usize >= self.pools.len() {
            return Err(crate::types::Error::InvalidArgument(
                "downstream must name a configured pool",
            ));
        }
        Ok(())
    }

    /// The holder is about to grant, at `now`, a head that goes to `downstream`: takes a permit
    /// of its pool.
    #[inline]
    pub(crate) fn admit(&self, downstream: u32, now: u64) -> Admit {
        let d = self.pool_of(downstream);
        if !self.try_acquire(d) {
            return Admit::No;
        }
        if self.shedding.is_some() {
            self.pools[d].shed.admitted(now);
        }
        Admit::Yes
    }

    /// A request for `downstream` entered (`1`) or left (`-1`) the queue without a grant yet;
    /// load shedding's wait estimate counts them. A no-op with shedding off.
    #[inline]
    pub(crate) fn queued(&self, downstream: u32, delta: i64) {
        if self.shedding.is_some() {
            self.pools[self.pool_of(downstream)].shed.queued(delta);
        }
    }

    /// At enqueue: whether `downstream`'s pool sheds load and a request with `budget` ns cannot
    /// be served within it (see `shedding.rs`). Always false with shedding off.
    pub(crate) fn sheds(&self, downstream: u32, budget: u64, now: u64) -> bool {
        let Some(config) = &self.shedding else {
            return false;
        };
        let pool = &self.pools[self.pool_of(downstream)];
        if !pool.shed.shedding() {
            return false;
        }
        // Relaxed: an estimate.
        let blocked = pool.waiting.load(Ordering::Relaxed) > 0;
        pool.shed.expected_wait(config, blocked, now) > budget
    }

    /// Reports how a call to `downstream` went (see `Engine::report_downstream`): the tenants
    /// to place again because the pool's limit grew (a release wakes only one, and the pool may
    /// have none in flight to release).
    pub(crate) fn report(&self, downstream: u32, ok: bool, now: u64) -> Vec<SlotId> {
        let Some(config) = &self.shedding else {
            return Vec::new();
        };
        let pool = &self.pools[self.pool_of(downstream)];
        let grown = pool.shed.report(config, ok, now);
        let mut woken = Vec::new();
        for _ in 0..grown {
            let Some(t) = self.pop_blocked(pool) else {
                break;
            };
            woken.push(t);
        }
        woken
    }

    /// The in-flight limit in force for `downstream`'s pool, `None` with no such pool.
    pub(crate) fn limit(&self, downstream: u32) -> Option<u64> {
        self.pools.get(downstream as usize).map(|p| p.shed.limit())
    }

    /// Per pool: its shedding gauges and counters.
    pub(crate) fn shedding_stats(&self) -> Vec<ShedStats> {
        self.pools.iter().map(|p| p.shed.stats()).collect()
    }

    /// Parks tenant `t`, whose head (due by `deadline`) waits for `downstream`'s pool; returns a
    /// tenant to place again if the pool had room after all.
    #[inline]
    pub(crate) fn block_tenant(
        &self,
        t: SlotId,
        downstream: u32,
        deadline: u64,
        weight: u32,
    ) -> Option<SlotId> {
        self.block(self.pool_of(downstream), t, deadline, weight)
    }

    /// Gives back a permit of `downstream`'s pool; returns a blocked tenant to place again.
    #[inline]
    pub(crate) fn released(&self, downstream: u32) -> Option<SlotId> {
        self.release(self.pool_of(downstream))
    }

    /// In `next_grant`: once a blocked head's deadline has passed, hands every blocked tenant back
    /// once, so expired heads are reported and the others block again.
    pub(crate) fn blocked_due(&self, now: u64, place: &mut dyn FnMut(SlotId)) {
        // Relaxed: see `Bulkheads::block`.
        if self.earliest_deadline.load(Ordering::Relaxed) >= now {
            return;
        }
        // One caller wins the sweep; tenants that block again lower the word again.
        if self.earliest_deadline.swap(u64::MAX, Ordering::Relaxed) >= now {
            return;
        }
        for pool in self.pools.iter() {
            // Bounded by the count seen now, so tenants that block again are not re-swept.
            let n = pool.waiting.load(Ordering::Relaxed);
            for _ in 0..n {
                // Not a wake: the tenant's credit stays for its next visit.
                let Some(t) = Self::take_blocked(pool) else {
                    break;
                };
                place(t);
            }
        }
    }

    /// The earliest blocked deadline, for `next_wakeup_ns`.
    pub(crate) fn wakeup(&self) -> Option<u64> {
        // Relaxed: a hint for the caller's timer.
        let at = self.earliest_deadline.load(Ordering::Relaxed);
        (at != u64::MAX).then_some(at.saturating_add(1))
    }

    /// Per pool: (in flight, tenants blocked, blocks so far).
    pub(crate) fn stats(&self) -> Vec<(u64, u64, u64)> {
        self.pools
            .iter()
            .map(|p| {
                // Relaxed: gauges and a counter.
                (
                    p.in_flight.load(Ordering::Relaxed),
                    p.waiting.load(Ordering::Relaxed),
                    p.blocks.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// The greatest common divisor of `a` and `b` (`gcd(0, b) = b`).
fn gcd(mut a: u32, mut b: u32) -> u32 {
    while a != 0 {
        (a, b) = (b % a, a);
    }
    b
}

/// Loom models of the block/wake hand-off (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Tenant 0 blocks on a full pool of one permit (a spawned thread) while the pool's one
    /// grant out ends (the model's thread): exactly one of the two calls hands the tenant back,
    /// so it is never left blocked with its pool free. With `credit` above 0 it blocks in the
    /// visitor word, else in the ring.
    fn block_racing_a_wake(credit: i64) {
        loom::model(move || {
            let pools = Arc::new(Bulkheads::new(&[1], None, 2).unwrap());
            assert_eq!(pools.admit(0, 0), Admit::Yes);
            pools.credits[0].store(credit, Ordering::Relaxed);
            let blocker = {
                let pools = pools.clone();
                thread::spawn(move || pools.block(0, 0, u64::MAX, 1))
            };
            let woken = pools.release(0);
            let handed_back = blocker.join().unwrap();
            let times = [handed_back, woken]
                .iter()
                .filter(|&&t| t == Some(0))
                .count();
            assert_eq!(
                times, 1,
                "the blocked tenant was handed back {times} times (0: left with its pool free)"
            );
        });
    }

    #[test]
    fn a_block_racing_a_wake_hands_the_tenant_back_once() {
        block_racing_a_wake(0);
    }

    #[test]
    fn a_visitor_racing_a_wake_is_handed_back_once() {
        block_racing_a_wake(2);
    }

    /// A blocker that reads the in-flight count without its fence can miss the wake's
    /// decrement while the waker misses its count: nobody hands the tenant back.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "handed back 0 times")]
    fn broken_pool_fence_is_caught() {
        crate::broken::with(crate::broken::Break::PoolFence, || block_racing_a_wake(0));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn credit(pools: &Bulkheads, t: u32) -> i64 {
        pools.credits[t as usize].load(Ordering::Relaxed)
    }

    /// A visit is `weight / unit` wakes, and a tenant put back with wakes left keeps them: it
    /// earns a new visit only once its wakes are spent, however often it is swept and blocks
    /// again.
    #[test]
    fn a_visit_is_weight_over_unit_wakes_and_credit_never_piles_up() {
        let pools = Bulkheads::new(&[1], None, 4).unwrap();
        assert_eq!(pools.admit(0, 0), Admit::Yes);
        // Weights 10 and 30: unit 10, visits of 1 and 3. (The unit is the divisor of the weights
        // seen so far: had 30 come first, its first visit would have been of one wake.)
        assert_eq!(pools.block(0, 1, 100, 10), None);
        assert_eq!(pools.block(0, 0, 100, 30), None);
        assert_eq!((credit(&pools, 0), credit(&pools, 1)), (3, 1));
        // A wake takes the ring's head and spends one of its wakes: 1's visit is spent.
        assert_eq!(pools.release(0), Some(1));
        assert_eq!(pools.admit(0, 0), Admit::Yes);
        assert_eq!(pools.block(0, 1, 100, 10), None);
        assert_eq!(credit(&pools, 1), 1, "a new visit");
        assert_eq!(pools.release(0), Some(0));
        assert_eq!(credit(&pools, 0), 2);
        assert_eq!(pools.admit(0, 0), Admit::Yes);
        // Wakes left: 0 waits in the visitor word, woken before the ring.
        assert_eq!(pools.block(0, 0, 100, 30), None);
        assert_eq!(pools.release(0), Some(0));
        assert_eq!(credit(&pools, 0), 1);
        assert_eq!(pools.admit(0, 0), Admit::Yes);
        assert_eq!(pools.block(0, 0, 100, 30), None);
        // A deadline sweep hands both back without spending a wake.
        let mut swept = Vec::new();
        pools.blocked_due(101, &mut |t| swept.push(t));
        assert_eq!(swept, [0, 1]);
        assert_eq!((credit(&pools, 0), credit(&pools, 1)), (1, 1));
        // Both block again with wakes left: one gets the visitor word, the other the ring, and
        // neither earns more.
        assert_eq!(pools.block(0, 1, 200, 10), None);
        assert_eq!(pools.block(0, 0, 200, 30), None);
        assert_eq!((credit(&pools, 0), credit(&pools, 1)), (1, 1));
        assert_eq!(pools.release(0), Some(1));
        assert_eq!(pools.admit(0, 0), Admit::Yes);
        assert_eq!(pools.release(0), Some(0));
        assert_eq!((credit(&pools, 0), credit(&pools, 1)), (0, 0));
        // Spent: the next block starts a new visit.
        assert_eq!(pools.admit(0, 0), Admit::Yes);
        assert_eq!(pools.block(0, 0, 300, 30), None);
        assert_eq!(credit(&pools, 0), 3);
    }

    #[test]
    fn gcd_of_weights() {
        assert_eq!(gcd(0, 7), 7);
        assert_eq!(gcd(300, 100), 100);
        assert_eq!(gcd(3, 2), 1);
        assert_eq!(gcd(10_000, 2_500), 2_500);
    }
}
