//! Bulkheads (R18): optional per-downstream in-flight pools.
//!
//! A request names its downstream class (`Request::downstream`, 0..N). With
//! `Config::downstream_max_in_flight` set, class `d` may have at most `downstream_max_in_flight[d]`
//! grants out at once, on top of the global `max_in_flight`. So one slow or stuck backend holds
//! at most its own pool's permits, and grants to the other classes keep flowing (R19: protect the
//! downstream before being fair). Off (empty) by default: every request then shares the one global
//! pool and `downstream` is ignored.
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
//! re-place one blocked tenant of that pool. The blocker and the releaser use the store-buffer
//! pattern with SeqCst fences (blocker: count, push, fence, read in-flight; releaser: decrement
//! in-flight, fence, read count), so at least one of them sees the other and no tenant is
//! forgotten in the ring while its pool has room. A blocked head's deadline still ends it on time:
//! the pools keep the earliest blocked deadline, and the `next_grant` that passes it re-places
//! every blocked tenant once, so expired heads come out as `Expired` and the rest block again.
//!
//! Everything is atomics and `ArrayQueue`s sized at build time: no lock, no allocation.

use crate::engine::Engine;
use crate::sync::{fence, ArrayQueue, AtomicU64, CachePadded, Ordering};
use crate::ticket::TicketCell;

/// Most downstream classes.
pub const MAX_DOWNSTREAMS: usize = 64;

struct Pool {
    /// Most grants of this class out at once.
    max: u64,
    /// Grants of this class out now: never above `max`.
    in_flight: AtomicU64,
    /// Tenants in `blocked` (raised before the push, lowered after the pop), so a releaser never
    /// polls an empty ring.
    waiting: AtomicU64,
    /// Tenants whose head waits for a permit of this pool; each holds its turn there.
    blocked: ArrayQueue<u32>,
    /// Times a tenant blocked on this pool.
    blocks: AtomicU64,
}

pub(crate) struct Bulkheads {
    pools: Box<[CachePadded<Pool>]>,
    /// The earliest deadline of a blocked head (ns), `u64::MAX` when none.
    earliest_deadline: CachePadded<AtomicU64>,
}

impl Bulkheads {
    /// `None` when `maxes` is empty (bulkheads off). `slots` sizes each blocked ring.
    pub(crate) fn new(maxes: &[u32], slots: usize) -> Option<Bulkheads> {
        if maxes.is_empty() {
            return None;
        }
        Some(Bulkheads {
            pools: maxes
                .iter()
                .map(|&max| {
                    CachePadded::new(Pool {
                        max: u64::from(max),
                        in_flight: AtomicU64::new(0),
                        waiting: AtomicU64::new(0),
                        blocked: ArrayQueue::new(slots),
                        blocks: AtomicU64::new(0),
                    })
                })
                .collect(),
            earliest_deadline: CachePadded::new(AtomicU64::new(u64::MAX)),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.pools.len()
    }

    /// Takes a permit of pool `d`, if it has room.
    fn try_acquire(&self, d: usize) -> bool {
        let pool = &self.pools[d];
        crate::sync::try_increment_below(&pool.in_flight, pool.max)
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

    fn pop_blocked(&self, pool: &Pool) -> Option<u32> {
        // Relaxed: the fences of the caller order it; the pop itself is the synchronisation.
        if pool.waiting.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let t = pool.blocked.pop()?;
        pool.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(t)
    }

    /// Parks tenant `t`, whose head (due by `deadline`) waits for pool `d`. Returns a blocked
    /// tenant to re-place if the pool had room after all (maybe `t` itself).
    fn block(&self, d: usize, t: u32, deadline: u64) -> Option<u32> {
        let pool = &self.pools[d];
        // Relaxed: ordered by the fence below.
        pool.waiting.fetch_add(1, Ordering::Relaxed);
        pool.blocks.fetch_add(1, Ordering::Relaxed);
        let pushed = pool.blocked.push(t);
        debug_assert!(pushed.is_ok(), "blocked ring sized for every tenant");
        // Relaxed: the deadline word is a hint checked against the clock; a late read only
        // delays an expiry by one `next_grant`.
        self.earliest_deadline
            .fetch_min(deadline, Ordering::Relaxed);
        // SeqCst fence: pairs with `release`'s; see the module docs.
        fence(Ordering::SeqCst);
        if pool.in_flight.load(Ordering::Relaxed) < pool.max {
            return self.pop_blocked(pool);
        }
        None
    }
}

impl Engine {
    /// The pools and the pool index of a request to `downstream`, or `None` with bulkheads off.
    #[inline]
    fn pool_of(&self, downstream: u32) -> Option<(&Bulkheads, usize)> {
        let pools = self.bulkheads.as_ref()?;
        // `check_downstream` keeps it in range at enqueue; `min` is defensive only.
        Some((pools, (downstream as usize).min(pools.len() - 1)))
    }

    /// Checks a request's `downstream` at enqueue: with bulkheads on it must name a pool.
    pub(crate) fn check_downstream(&self, downstream: u32) -> Result<(), crate::types::Error> {
        match &self.bulkheads {
            Some(pools) if downstream as usize >= pools.len() => Err(
                crate::types::Error::InvalidArgument("downstream must name a configured pool"),
            ),
            _ => Ok(()),
        }
    }

    /// The holder of tenant `t` (ready in `class`) is about to grant the head in `cell`: takes a
    /// permit of the head's pool. If the pool is full the tenant leaves the ready set, blocks on
    /// the pool and this returns false (the holder gives up the turn). Always true when off.
    #[inline]
    pub(crate) fn downstream_acquire(
        &self,
        t: u32,
        class: u32,
        cell: &TicketCell,
        now: u64,
    ) -> bool {
        // Relaxed: written before the ticket was published (see ticket.rs).
        let Some((pools, d)) = self.pool_of(cell.downstream.load(Ordering::Relaxed)) else {
            return true;
        };
        if pools.try_acquire(d) {
            return true;
        }
        self.leave_ready(t, class, now);
        // Relaxed: written before the ticket was published.
        let deadline = cell.deadline.load(Ordering::Relaxed);
        if let Some(u) = pools.block(d, t, deadline) {
            self.place(u, None, false, now);
        }
        false
    }

    /// Gives back a permit of pool `downstream` (the grant's; no-op when off) and re-places one
    /// tenant blocked on that pool.
    #[inline]
    pub(crate) fn downstream_release(&self, downstream: u32, now: u64) {
        let Some((pools, d)) = self.pool_of(downstream) else {
            return;
        };
        if let Some(u) = pools.release(d) {
            self.place(u, None, false, now);
        }
    }

    /// In `next_grant`: once a blocked head's deadline has passed, re-places every blocked tenant
    /// once, so expired heads are reported and the others block again.
    #[inline]
    pub(crate) fn downstream_expire(&self, now: u64) {
        let Some(pools) = &self.bulkheads else {
            return;
        };
        // Relaxed: see `Bulkheads::block`.
        if pools.earliest_deadline.load(Ordering::Relaxed) >= now {
            return;
        }
        // One caller wins the sweep; tenants that block again lower the word again.
        if pools.earliest_deadline.swap(u64::MAX, Ordering::Relaxed) >= now {
            return;
        }
        for pool in pools.pools.iter() {
            // Bounded by the count seen now, so tenants that block again are not re-swept.
            let n = pool.waiting.load(Ordering::Relaxed);
            for _ in 0..n {
                let Some(t) = self.pop_one(pool) else { break };
                self.place(t, None, false, now);
            }
        }
    }

    fn pop_one(&self, pool: &Pool) -> Option<u32> {
        let t = pool.blocked.pop()?;
        // Relaxed: see `Pool::waiting`.
        pool.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(t)
    }

    /// The earliest blocked deadline, for `next_wakeup_ns`.
    pub(crate) fn downstream_wakeup(&self) -> Option<u64> {
        let pools = self.bulkheads.as_ref()?;
        // Relaxed: a hint for the caller's timer.
        let at = pools.earliest_deadline.load(Ordering::Relaxed);
        (at != u64::MAX).then_some(at.saturating_add(1))
    }

    /// Per pool: (in flight, tenants blocked, blocks so far). Empty with bulkheads off.
    pub(crate) fn downstream_stats(&self) -> Vec<(u64, u64, u64)> {
        self.bulkheads.as_ref().map_or_else(Vec::new, |pools| {
            pools
                .pools
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
        })
    }
}
