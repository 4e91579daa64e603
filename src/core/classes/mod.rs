//! Weight classes picked by smooth weighted round robin (SWRR), their rings of ready tenants,
//! the visitor slot, batched picks and the start-up charge. The timing wheel is in `wheel.rs`,
//! the light-tenant lane in `lane.rs`.
//!
//! # O(1) SWRR over weight classes
//! Tenants of equal weight form a class. A class's SWRR weight is `weight × ready tenants`, and it
//! keeps its ready tenants in a ring (`WordRing` of tenant indices). A pick runs nginx's SWRR
//! over the classes (every class gains its weight, the largest wins and pays the total), then the
//! class serves the tenant at its ring head, deficit-round-robin style: a visit adds the class
//! quantum (the largest cost seen in it) to the tenant's credit and serves while the credit covers
//! the head's cost. With unit costs that is plain round robin. The cost of a pick depends on the
//! number of weight classes (bounded by `max_weight_classes`), never on the number of tenants.
//!
//! With all tenants backlogged and one caller, every window of `W = Σ wᵢ` grants gives tenant `i`
//! exactly `wᵢ`: SWRR gives class `c` exactly `w·n_c` picks per window and the ring rotates
//! through its `n_c` tenants `w` times.
//!
//! # Concurrency
//! The SWRR credits are plain atomic counters. A pick adds each class's weight with `fetch_add`
//! and subtracts the total from the winner, so the sum of credits is conserved however picks
//! interleave; a pick that finds its class's ring momentarily empty (another caller holds the
//! tenant) spins briefly, then refunds exactly what it added. Concurrent pickers may both pick
//! the same class; the class then runs a debt that later picks pay back, so long-run shares stay
//! exact.
//!
//! The files: `swrr.rs` the pick (single steps and batched picks), `visitor.rs` taking a
//! tenant from a class and putting it back (the visitor slot), `start.rs` the start-up charge.

use crate::core::ids::ClassId;
use crate::core::lane::Lane;
use crate::core::tenants::{TenantSlot, NIL};
use crate::sync::{
    fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, CachePadded, Ordering, WordRing,
};

mod start;
mod swrr;
mod visitor;
use swrr::{Batch, Schedule, BATCH};
use visitor::NO_VISITOR;

pub(crate) use start::Start;
#[cfg(loom)]
pub use swrr::with_batched_picks;
pub(crate) use visitor::{Take, Visitor};

/// Most classes; `ExcludeMask` has one bit per class.
pub(crate) const CLASS_LIMIT: usize = 64;

/// Per-pick snapshot of each class's SWRR weight (index = class), so a refund subtracts exactly
/// what was added. Filled by the pick up to the classes allocated then; nothing is zeroed.
pub(crate) type ClassWeights = arrayvec::ArrayVec<i64, CLASS_LIMIT>;

/// Classes a core built for `max_weight_classes` distinct weights has: twice as many, at most
/// `CLASS_LIMIT`. A tenant still queued in the class of its old weight keeps that class alive
/// until it is served, and a weight change must not wait for that. Class ids run up to this
/// count, so a feature's table indexed by class is sized by it.
pub(crate) fn class_count(max_weight_classes: u32) -> usize {
    (2 * max_weight_classes as usize).min(CLASS_LIMIT)
}

pub(crate) struct Class {
    /// The tenants' weight; 0 while the class is unused. Set once, under the admin lock.
    weight: AtomicU32,
    /// Tenants in the ring, plus the visitor, plus tenants held by a granter.
    ready: AtomicI64,
    /// `Σ (FACTOR_ONE − factor)` over those tenants: how far their effective weights fall short
    /// of the class weight (fleet mode, `TenantSlot::factor`). 0 when no factor is set.
    derate: AtomicI64,
    /// SWRR current weight.
    current: AtomicI64,
    /// Extra SWRR weight a feature gives the class, in weight units (the wait boost: +1 per
    /// boosted tenant). 0 unless a feature sets it.
    extra: AtomicI64,
    /// Visits started in this class: lets a tenant that was held by another granter while its
    /// turn came round make up the visits it missed.
    visits: AtomicU64,
    /// DRR quantum: the largest cost granted in this class.
    quantum: AtomicU32,
    /// Cost units granted in this class, never reset: the classes' sum is the light-tenant
    /// lane's clock. Granters bump it with a load and a store (`record_served`).
    served: AtomicU64,
    /// The tenants served next in this class, ahead of the ring, as `Visitor` words or
    /// `NO_VISITOR`, each with the caller that put it there: `[CONTINUING]`, one whose visit
    /// continues (its credit covers its next head), then `[FIRST]`, the class's only ready
    /// tenant when it was put back (the ring's head, kept out of the ring).
    visiting: CachePadded<[AtomicU64; 2]>,
    /// A hint: the tenant granted last in this class, or `NIL` (`Core::prefetch_successor`).
    #[cfg_attr(loom, allow(dead_code))]
    last_granted: AtomicU32,
    /// Of the ready tenants, those waiting in the light-tenant lane: a class whose every ready
    /// tenant is there has nothing for the rotation.
    in_lane: AtomicI64,
    /// Ready tenants, in round-robin order.
    ring: WordRing<u32>,
}

impl Class {
    /// The class's gain with its ready count now: 0 when no tenant is ready.
    #[inline]
    fn gain_now(&self) -> i64 {
        // Relaxed: a snapshot; a stale count only skews one decision, and what a pick adds is
        // what its refund takes back.
        let ready = self.ready.load(Ordering::Relaxed);
        if ready > 0 {
            self.gain(ready)
        } else {
            0
        }
    }

    /// SWRR weight with `ready` (> 0) ready tenants, in units of 1/`FACTOR_ONE`: the sum of their
    /// effective weights (`weight × ready` when no factor is set), plus its extra weight.
    #[inline]
    fn gain(&self, ready: i64) -> i64 {
        // Relaxed: see `Classes::pick`. `ready` and `derate` are read apart, so a holder between
        // its two updates can skew one pick; credits stay conserved (refunds use what was added)
        // and the floor of 1 keeps a class with ready tenants in the pick.
        let effective = (ready * FACTOR_ONE - self.derate.load(Ordering::Relaxed)).max(1);
        i64::from(self.weight.load(Ordering::Relaxed)) * effective
            + self.extra.load(Ordering::Relaxed).max(0) * FACTOR_ONE
    }
}

/// Full weight in the fixed point of effective weights (`limits::FACTOR_ONE`), as a gain.
const FACTOR_ONE: i64 = crate::limits::FACTOR_ONE as i64;

pub(crate) struct Classes {
    classes: Box<[CachePadded<Class>]>,
    /// Classes ever allocated; they fill from index 0. A freed class (weight 0) below this stays
    /// allocated and is reused for the next new weight.
    allocated: AtomicU32,
    /// Where the start-up stands, a `Start` (module docs): read by every grant, written twice.
    start: AtomicU32,
    /// Classes that are never freed (the default weight, tiers): one bit each. Admin lock only.
    permanent: AtomicU64,
    /// Bumped when a class becomes ready or idle (by 1), or when credits or gains change
    /// otherwise (by `HARD_EPOCH`): drops the batch. Only the first kind can be resumed.
    epoch: CachePadded<AtomicU64>,
    /// Precomputed picks (module docs).
    schedule: Schedule,
    /// Tenants served ahead of the rotation (`lane.rs`); counted ready in their classes.
    lane: Lane,
}

/// A read-only view of the classes for a feature (the starvation guard): their number and their
/// SWRR gains now.
pub(crate) struct ClassView<'a> {
    classes: &'a Classes,
}

impl ClassView<'_> {
    /// Classes in use (indices `0..count()`).
    pub(crate) fn count(&self) -> usize {
        self.classes.allocated()
    }

    /// `class`'s SWRR gain now, 0 when it has no ready tenant.
    pub(crate) fn gain(&self, class: usize) -> i64 {
        self.classes.classes[class].gain_now()
    }

    /// The sum of the ready classes' gains (a pick's total).
    pub(crate) fn total(&self) -> i64 {
        (0..self.count()).map(|c| self.gain(c)).sum()
    }
}

impl Classes {
    pub(crate) fn new(count: usize, ring_capacity: usize) -> Classes {
        debug_assert!(count <= CLASS_LIMIT);
        Classes {
            classes: (0..count)
                .map(|_| {
                    CachePadded::new(Class {
                        weight: AtomicU32::new(0),
                        ready: AtomicI64::new(0),
                        derate: AtomicI64::new(0),
                        current: AtomicI64::new(0),
                        extra: AtomicI64::new(0),
                        visits: AtomicU64::new(0),
                        quantum: AtomicU32::new(1),
                        served: AtomicU64::new(0),
                        visiting: CachePadded::new([
                            AtomicU64::new(NO_VISITOR),
                            AtomicU64::new(NO_VISITOR),
                        ]),
                        last_granted: AtomicU32::new(NIL),
                        in_lane: AtomicI64::new(0),
                        ring: WordRing::new(ring_capacity),
                    })
                })
                .collect(),
            allocated: AtomicU32::new(0),
            start: AtomicU32::new(Start::Open as u32),
            permanent: AtomicU64::new(0),
            epoch: CachePadded::new(AtomicU64::new(0)),
            schedule: Schedule {
                cursor: CachePadded::new(AtomicU64::new(0)),
                computing: AtomicBool::new(false),
                target: AtomicU32::new(BATCH as u32),
                scale_total: AtomicI64::new(0),
                batches: [Batch::new(count), Batch::new(count)],
            },
            lane: Lane::new(ring_capacity),
        }
    }

    fn allocated(&self) -> usize {
        // Acquire: pairs with the Release in `ensure`, so a counted class has its weight set.
        self.allocated.load(Ordering::Acquire) as usize
    }

    /// The class of `weight`, if one exists.
    pub(crate) fn find(&self, weight: u32) -> Option<u32> {
        (0..self.allocated())
            .find(|&c| self.classes[c].weight.load(Ordering::Relaxed) == weight)
            .map(|c| c as u32)
    }

    /// The class of `weight`, allocating one if needed: a freed class first, else a new index.
    /// `None` when every class is in use. Callers hold the engine's admin lock, so two classes
    /// never get the same weight.
    pub(crate) fn ensure(&self, weight: u32) -> Option<u32> {
        if let Some(c) = self.find(weight) {
            return Some(c);
        }
        let allocated = self.allocated();
        // Relaxed: admin-lock writers only; a picker reading a stale 0 sees no ready tenant.
        if let Some(c) =
            (0..allocated).find(|&c| self.classes[c].weight.load(Ordering::Relaxed) == 0)
        {
            self.classes[c].weight.store(weight, Ordering::Relaxed);
            return Some(c as u32);
        }
        let class = self.classes.get(allocated)?;
        class.weight.store(weight, Ordering::Relaxed);
        // Release: the weight is visible before the class is counted.
        self.allocated
            .store(allocated as u32 + 1, Ordering::Release);
        Some(allocated as u32)
    }

    /// A class that exists from the start and is never freed (the default weight, tiers).
    pub(crate) fn make_permanent(&self, weight: u32) {
        let Some(class) = self.ensure(weight) else {
            debug_assert!(false, "validated to fit max_weight_classes");
            return;
        };
        // Relaxed: admin-lock (or construction) writers only.
        self.permanent.fetch_or(1 << class, Ordering::Relaxed);
    }

    /// Frees every class that is not permanent, has no ready tenant, and is not in `referenced` (a
    /// bit per class: tenants' classes, weights in the weight table). A freed class keeps its
    /// index and is reused by `ensure`. Admin lock only. Returns how many it freed.
    pub(crate) fn collect(&self, referenced: u64) -> usize {
        let keep = referenced | self.permanent.load(Ordering::Relaxed);
        let mut freed = 0;
        for (c, class) in self.classes[..self.allocated()].iter().enumerate() {
            // Relaxed: admin-lock writers; `ready` is the holders', and a class with a tenant
            // in its ready set or ring is referenced by that tenant's slot anyway.
            if keep & (1 << c) != 0
                || class.weight.load(Ordering::Relaxed) == 0
                || class.ready.load(Ordering::Relaxed) != 0
            {
                continue;
            }
            class.weight.store(0, Ordering::Relaxed);
            class.extra.store(0, Ordering::Relaxed);
            class.quantum.store(1, Ordering::Relaxed);
            freed += 1;
        }
        if freed > 0 {
            // A stale batch may still name a freed class: drop it.
            self.invalidate();
        }
        freed
    }

    /// Whether every weight of `weights` (distinct) can have a class at once, counting the
    /// classes in use now.
    pub(crate) fn can_hold(&self, weights: &[u32]) -> bool {
        let missing = weights.iter().filter(|&&w| self.find(w).is_none()).count();
        let in_use = (0..self.allocated())
            .filter(|&c| self.classes[c].weight.load(Ordering::Relaxed) != 0)
            .count();
        in_use + missing <= self.classes.len()
    }

    pub(crate) fn weight(&self, class: u32) -> u32 {
        self.classes[class as usize].weight.load(Ordering::Relaxed)
    }

    /// `(weight, ready, current)` of every class in use, for tests and loom models.
    pub(crate) fn snapshot(&self) -> Vec<(u32, i64, i64)> {
        self.classes[..self.allocated()]
            .iter()
            .map(|c| {
                // Relaxed: a diagnostic snapshot, read by a caller that has joined the writers.
                (
                    c.weight.load(Ordering::Relaxed),
                    c.ready.load(Ordering::Relaxed),
                    c.current.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Records `tenant` as the last granted in `class`; returns the one before (a hint).
    #[cfg(not(loom))]
    pub(crate) fn swap_last_granted(&self, class: u32, tenant: u32) -> u32 {
        let class = &self.classes[class as usize];
        // Relaxed load + store, not a swap: a hint; a race only costs a wasted prefetch.
        let before = class.last_granted.load(Ordering::Relaxed);
        if before != tenant {
            class.last_granted.store(tenant, Ordering::Relaxed);
        }
        before
    }

    /// Adds `delta` extra weight units to `class` (a feature's decision, e.g. a wait boost).
    pub(crate) fn add_extra(&self, class: ClassId, delta: i64) {
        // Relaxed: a weight, read by picks like `ready`.
        self.classes[class as usize]
            .extra
            .fetch_add(delta, Ordering::Relaxed);
        self.invalidate();
    }

    /// A read-only view for features.
    pub(crate) fn view(&self) -> ClassView<'_> {
        ClassView { classes: self }
    }

    /// Starts a visit of a tenant whose last visit began at visit number `*last_visit`: returns
    /// how many visits it is owed, 1 in plain round robin. More when, while it was held by
    /// another granter, the class's other tenants had more than their turns; capped at `cap`.
    pub(crate) fn start_visit(&self, class: u32, last_visit: &AtomicU64, cap: i64) -> i64 {
        let class = &self.classes[class as usize];
        // Relaxed load and store, not an RMW: two granters of one class may count one visit
        // between them, which only shifts a make-up estimate; the tenant's `last_visit` is
        // holder-owned.
        let visit = class.visits.load(Ordering::Relaxed);
        class.visits.store(visit + 1, Ordering::Relaxed);
        let last = last_visit.load(Ordering::Relaxed);
        last_visit.store(visit, Ordering::Relaxed);
        let ready = class.ready.load(Ordering::Relaxed).max(1);
        let gap = i64::try_from(visit.saturating_sub(last)).unwrap_or(i64::MAX);
        (gap / ready).clamp(1, cap)
    }

    /// Starts a lane visit (`start_visit` for the lane): one visit, not counted among the
    /// class's; the tenant's make-up count starts afresh.
    pub(crate) fn lane_visit(&self, class: u32, last_visit: &AtomicU64) -> i64 {
        // Relaxed: as in `start_visit`.
        let visit = self.classes[class as usize].visits.load(Ordering::Relaxed);
        last_visit.store(visit, Ordering::Relaxed);
        1
    }

    /// Tenants counted ready in `class` (in its ring, visiting, or held by a granter).
    pub(crate) fn ready(&self, class: usize) -> i64 {
        // Relaxed: a hint for a bounded wait; the ring decides.
        self.classes[class].ready.load(Ordering::Relaxed)
    }

    /// Adds `tenant` to `class`'s ready set, in the class's ring or, with `lane`, in the
    /// light-tenant lane. Counts it before pushing it, so the count is never below what the ring
    /// and the lane hold: a granter that takes it and lets it go idle never takes the count below
    /// zero. A class that was idle starts with a clean SWRR credit. The tenant's `last_visit`
    /// starts counting from now, and its effective-weight factor is counted in (both owned by its
    /// turn holder).
    pub(crate) fn make_ready(&self, class_id: u32, tenant: u32, slot: &TenantSlot, lane: bool) {
        broken!(Lane, lane, {
            // Broken on purpose: handed to the lane before it is counted ready.
            self.lane_push(class_id, tenant);
            self.count_ready(class_id, slot);
            return;
        });
        self.count_ready(class_id, slot);
        if lane {
            self.lane_push(class_id, tenant);
            return;
        }
        // The ring holds every tenant at most once and is sized for all of them.
        let pushed = self.classes[class_id as usize].ring.push(tenant);
        debug_assert!(pushed.is_ok(), "class ring sized for every tenant");
    }

    /// `make_ready`'s count: the ready count, the factor, the visit number.
    fn count_ready(&self, class: u32, slot: &TenantSlot) {
        let class = &self.classes[class as usize];
        let factor = slot.factor.load(Ordering::Relaxed);
        slot.counted_factor.store(factor, Ordering::Relaxed);
        if factor != FACTOR_ONE as u32 {
            class
                .derate
                .fetch_add(FACTOR_ONE - i64::from(factor), Ordering::Relaxed);
        }
        if class.ready.fetch_add(1, Ordering::Relaxed) == 0 {
            // The class's credit is left as it is: with batched picks its lag was handed to the
            // ready classes when it went idle (`settle`), so it rejoins level; stepping singly it
            // keeps its lag. Either way no credit is lost or made up.
            self.ready_set_changed();
        }
        slot.last_visit
            .store(class.visits.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Hands `tenant`, counted ready in `class`, to the light-tenant lane's tail.
    pub(crate) fn lane_push(&self, class: u32, tenant: u32) {
        // Relaxed: a hint for the rotation's turn (`lane_only`); counted before the push, so it
        // is never below what the lane holds.
        self.classes[class as usize]
            .in_lane
            .fetch_add(1, Ordering::Relaxed);
        self.lane.push(class, tenant);
    }

    /// The next tenant of the light-tenant lane and the class it is counted in, if any. The
    /// caller holds its turn.
    pub(crate) fn take_lane(&self) -> Option<(u32, u32)> {
        if self.lane.is_empty() {
            return None;
        }
        let (class, tenant) = self.lane.take()?;
        // Relaxed: as in `lane_push`.
        self.classes[class as usize]
            .in_lane
            .fetch_sub(1, Ordering::Relaxed);
        Some((class, tenant))
    }

    /// The light-tenant lane.
    pub(crate) fn lane(&self) -> &Lane {
        &self.lane
    }

    /// The classes whose every ready tenant waits in the lane, one bit each: the rotation's turn
    /// skips them (their ring is empty, and a pick would only spin on it).
    pub(crate) fn lane_only(&self) -> u64 {
        let mut mask = 0;
        for (c, class) in self.classes[..self.allocated()].iter().enumerate() {
            // Relaxed: a snapshot, as in `step`; a stale count costs one pick or one turn.
            let ready = class.ready.load(Ordering::Relaxed);
            if ready > 0 && ready <= class.in_lane.load(Ordering::Relaxed) {
                mask |= 1 << c;
            }
        }
        mask
    }

    /// A held tenant leaves `class`'s ready set (parked, idle or moving class).
    pub(crate) fn leave(&self, class: u32, slot: &TenantSlot) {
        let class = &self.classes[class as usize];
        let before = class.ready.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "class ready count below zero");
        if before == 1 {
            self.ready_set_changed();
        }
        let counted = slot.counted_factor.load(Ordering::Relaxed);
        if counted != FACTOR_ONE as u32 {
            class
                .derate
                .fetch_sub(FACTOR_ONE - i64::from(counted), Ordering::Relaxed);
        }
    }

    /// Raises the class quantum to cover `cost`; returns the quantum.
    pub(crate) fn quantum(&self, class: u32, cost: u32) -> u32 {
        let q = &self.classes[class as usize].quantum;
        // Relaxed: a bound that only grows; no data is published through it. Read first: a
        // `fetch_max` that changes nothing still takes the line exclusively (an RMW per visit).
        let seen = q.load(Ordering::Relaxed);
        if seen >= cost {
            return seen;
        }
        q.fetch_max(cost, Ordering::Relaxed).max(cost)
    }
}
