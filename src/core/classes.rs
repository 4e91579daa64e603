//! The scheduler's shared state: weight classes picked by smooth weighted round robin, and a
//! timing wheel for tenants whose head is not ready yet.
//!
//! # O(1) SWRR over weight classes
//! Tenants of equal weight form a class. A class's SWRR weight is `weight × ready tenants`, and it
//! keeps its ready tenants in a ring (`ArrayQueue` of tenant indices). A pick runs nginx's SWRR
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
//! tenant) spins briefly, then refunds exactly what it added. Concurrent pickers may both pick the same class; the
//! class then runs a debt that later picks pay back, so long-run shares stay exact.
//!
//! A class's only ready tenant waits in a slot ahead of its ring (behind a tenant whose visit
//! continues, so single-threaded the order is the ring's), tagged with the caller that put it
//! there (`Visitor`). While its class holds most of the ready weight, a caller on another thread
//! leaves it to that caller for a short wait and answers `Empty` if that caller came back for it;
//! it takes it if it stayed put. So one hot tenant is served by one caller at a time, its lines
//! staying in that caller's cache, instead of changing cores on every grant. Such a visitor never
//! holds up the class's ring: a caller passes over it to the ring's next tenant.
//!
//! # Batched picks
//! A pick that adds every ready class's gain costs one RMW per class, on lines every granter
//! writes. So one caller computes the next picks in a batch (up to `BATCH`) from a snapshot of
//! the credits and gains, applies the batch's net credit change per class at once (one
//! `fetch_add` each, which conserves the sum just as the single steps would), and publishes it;
//! each later pick takes the next entry with one `fetch_add` on the batch cursor. Single-threaded
//! with constant gains, the sequence is exactly the step-by-step one. A batch is dropped when a
//! class becomes ready or idle, or its extra weight changes (`epoch`); a change in a class's ready count
//! alone leaves it at most `BATCH` picks stale. When only the ready set changed and every gain is
//! back to the batch's (a light tenant went idle and came back between two picks), the next
//! computer resumes the batch instead: from the refunded credits and the same gains a new batch
//! would compute the same picks, unless a refund or a single step moved a credit meanwhile, and
//! the resumed batch leaves those to the next computation, as a batch never dropped does.
//! Otherwise the next batch's computer first closes the cursor
//! on the old one (a swap, which also says how many of its picks were claimed) and refunds the
//! unclaimed picks, so dropping a batch costs no class its service. A batch rewritten while being
//! read is detected by its sequence word (a seqlock), and the reader falls back to a single step.
//! A refund of a batched pick undoes exactly that step, with the batch's gains.
//!
//! # The first window
//! SWRR charges a pick only against the classes ready with it. When the engine starts, the
//! first arrivals find free permits and are granted at once, each alone, so those grants would
//! never be paid back: with 15 permits and weights 8/4/2/1, the weight-1 tenant's first minute
//! was 6.7% over its share. So the start-up is tracked (`Start`):
//! - *Open*: until a request first waits for a permit. A grant is counted in its class's
//!   `served` and its lane tag is charged against every class present (granted or ready).
//!   More than a window of cost units (`max_in_flight`) granted first ends the start-up
//!   uncharged: the engine has been serving without contention for a while.
//! - *Waiting*: requests wait. The next grant first charges the window: each present class's
//!   credit gains what SWRR would have charged it had every present class been ready for those
//!   grants (picked alone, they changed no credit), at most a window of picks either way. A
//!   tenant that arrived while the others waited is present too: it is owed its share.
//! - *Charged*: for one more window a lane grant pays its SWRR step (the start-up's tenants all
//!   come back "from idle", and would otherwise take a grant each outside the split).
//! - *Done*: grants are charged as usual. The state is read once per grant.

use crate::core::hooks::ClassId;
use crate::core::lane::Lane;
use crate::core::tenants::{TenantSlot, NIL};
use crate::sync::{
    fence, ArrayQueue, AtomicBool, AtomicI64, AtomicU32, AtomicU64, CachePadded, Ordering,
};

/// A visitor slot is empty.
const NO_VISITOR: u64 = u64::MAX;
/// The visitor slot of a tenant whose visit continues; served first.
const CONTINUING: usize = 0;
/// The visitor slot of a class's only ready tenant, starting a new visit; served next.
const FIRST: usize = 1;

/// A class's visitor, packed in one word: `seq << 40 | owner << 33 | new_visit << 32 | tenant`.
/// `owner` is the calling thread's statistics row plus one (`tally::row`), 0 for a caller without
/// one; `seq` is the low bits of the tenant's grant count when it was put there, so a caller
/// that waits on it sees whether its owner took it again meanwhile.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Visitor(u64);

impl Visitor {
    fn new(tenant: u32, new_visit: bool, owner: u64, seq: u64) -> Visitor {
        Visitor(
            (seq & 0xFF_FFFF) << 40
                | (owner & 0x7F) << 33
                | u64::from(new_visit) << 32
                | u64::from(tenant),
        )
    }

    pub(crate) fn tenant(self) -> u32 {
        self.0 as u32
    }

    fn new_visit(self) -> bool {
        self.0 >> 32 & 1 == 1
    }

    /// The slot it waits in: a new visit in `FIRST`, a continued one in `CONTINUING`.
    fn slot(self) -> usize {
        if self.new_visit() {
            FIRST
        } else {
            CONTINUING
        }
    }

    /// Whether a caller with owner tag `me` (`owner_tag`) should leave it to the caller that
    /// put it here.
    fn owned_by_other(self, me: u64) -> bool {
        let owner = self.0 >> 33 & 0x7F;
        owner != 0 && owner != me
    }
}

/// This thread's owner tag: its statistics row plus one, or 0.
#[inline]
fn owner_tag() -> u64 {
    crate::core::tally::row().map_or(0, |row| row as u64 + 1)
}

/// What `Classes::take` found.
pub(crate) enum Take {
    /// A tenant to serve, and whether it starts a new visit.
    Tenant(u32, bool),
    /// Only the visitor, put there by another caller that may take it again at once.
    Owned(Visitor),
    /// Nothing to take.
    Empty,
}

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
    ring: ArrayQueue<u32>,
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

/// The start-up's stages (module docs, "The first window").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Start {
    /// Nothing has waited for a permit yet, and at most a window of cost units was granted.
    Open = 0,
    /// Requests wait for permits; the next grant charges the first window first.
    Waiting = 1,
    /// The first window was charged; lane grants are charged too until two windows are out.
    Charged = 2,
    /// Grants are charged as usual.
    Done = 3,
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
    pinned: AtomicU64,
    /// Bumped when a class becomes ready or idle (by 1), or when credits or gains change
    /// otherwise (by `HARD_EPOCH`): drops the batch. Only the first kind can be resumed.
    epoch: CachePadded<AtomicU64>,
    /// Precomputed picks (module docs).
    schedule: Schedule,
    /// Tenants served ahead of the rotation (`lane.rs`); counted ready in their classes.
    lane: Lane,
}

/// Whether picks are batched: always, except under loom, where the batch's atomics would
/// multiply every model's interleavings; the models of picks turn it on (`with_batched_picks`).
#[cfg(not(loom))]
#[inline(always)]
fn batching() -> bool {
    true
}

#[cfg(loom)]
thread_local! {
    // Thread-local: loom runs a model's threads on the thread that called the model.
    static BATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(loom)]
fn batching() -> bool {
    BATCHING.with(|b| b.get())
}

/// Loom models: runs `f` with batched picks on (they are off by default under loom).
#[cfg(loom)]
pub fn with_batched_picks<R>(f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BATCHING.with(|b| b.set(false));
        }
    }
    BATCHING.with(|b| b.set(true));
    let _reset = Reset;
    f()
}

/// Most picks one batch holds; a handful under loom, where every atomic is a branch point.
#[cfg(not(loom))]
const BATCH: usize = 64;
#[cfg(loom)]
const BATCH: usize = 3;

/// The epoch's step for a change a batch cannot be resumed after (`Classes::epoch`).
const HARD_EPOCH: u64 = 1 << 32;

/// The low half of the cursor: the next pick's index.
const INDEX_MASK: u64 = 0xFFFF_FFFF;
/// The index of a generation being computed: past any batch, with room for the claims that
/// land meanwhile.
const CLOSED_INDEX: u64 = 1 << 31;

/// One batch of picks. Written only by the caller holding `Schedule::computing`.
struct Batch {
    /// Seqlock word: odd while being written.
    seq: AtomicU64,
    /// The cursor generation these picks belong to.
    generation: AtomicU64,
    /// `Classes::epoch` when computed.
    epoch: AtomicU64,
    len: AtomicU32,
    /// The SWRR total every pick of the batch paid (gains are constant within a batch).
    total: AtomicI64,
    picks: [AtomicU32; BATCH],
    /// Each class's gain per pick, for refunds.
    gains: Box<[AtomicI64]>,
}

struct Schedule {
    /// `generation << 32 | next pick index`; one `fetch_add` per pick.
    cursor: CachePadded<AtomicU64>,
    /// Held by the one caller computing the next batch; the others step singly meanwhile.
    computing: AtomicBool,
    /// Picks to compute next time: halved when a batch is dropped early, doubled when used up.
    target: AtomicU32,
    /// The total gain the classes' credits were last earned at (written by the computer).
    scale_total: AtomicI64,
    /// Two batches, by generation parity: readers of the current one never meet the writer.
    batches: [Batch; 2],
}

impl Batch {
    fn new(classes: usize) -> Batch {
        Batch {
            seq: AtomicU64::new(0),
            generation: AtomicU64::new(u64::MAX),
            epoch: AtomicU64::new(0),
            len: AtomicU32::new(0),
            total: AtomicI64::new(0),
            picks: std::array::from_fn(|_| AtomicU32::new(0)),
            gains: (0..classes).map(|_| AtomicI64::new(0)).collect(),
        }
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
                        ring: ArrayQueue::new(ring_capacity),
                    })
                })
                .collect(),
            allocated: AtomicU32::new(0),
            start: AtomicU32::new(Start::Open as u32),
            pinned: AtomicU64::new(0),
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

    /// Credits or gains changed (a charge, a first window, an extra weight, a freed class): the
    /// batch no longer applies, and cannot be resumed.
    fn invalidate(&self) {
        self.bump_epoch(HARD_EPOCH);
    }

    /// A class became ready or idle: the batch no longer applies, unless the gains come back to
    /// its own before the next batch is computed (`resume_batch`).
    fn ready_set_changed(&self) {
        self.bump_epoch(1);
    }

    fn bump_epoch(&self, by: u64) {
        // Release: the ready-count change (or extra weight) made before this bump is visible to a batch
        // computer that reads the new epoch (its Acquire load in `load_epoch`). Without it a
        // computer could record the new epoch with the old, empty ready set: a batch of length 0
        // that every later pick trusts, answering Empty for good. The bump carries liveness.
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::Epoch) {
            // Broken on purpose: the bump as a mere hint.
            self.epoch.fetch_add(by, Ordering::Relaxed);
            return;
        }
        self.epoch.fetch_add(by, Ordering::Release);
    }

    /// The epoch, for a batch computer about to read the ready counts. Acquire: pairs with the
    /// Release bump in `bump_epoch`, so the ready counts read after it are at least as new as the
    /// epoch the batch will carry.
    fn load_epoch(&self) -> u64 {
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::Epoch) {
            return self.epoch.load(Ordering::Relaxed); // broken on purpose: see `bump_epoch`
        }
        self.epoch.load(Ordering::Acquire)
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
    pub(crate) fn pin(&self, weight: u32) {
        let Some(class) = self.ensure(weight) else {
            debug_assert!(false, "validated to fit max_weight_classes");
            return;
        };
        // Relaxed: admin-lock (or construction) writers only.
        self.pinned.fetch_or(1 << class, Ordering::Relaxed);
    }

    /// Frees every class that is not pinned, has no ready tenant, and is not in `referenced` (a
    /// bit per class: tenants' classes, weights in the weight table). A freed class keeps its
    /// index and is reused by `ensure`. Admin lock only. Returns how many it freed.
    pub(crate) fn collect(&self, referenced: u64) -> usize {
        let keep = referenced | self.pinned.load(Ordering::Relaxed);
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

    /// The next SWRR pick over the classes with ready tenants, skipping `exclude`: from the batch
    /// when it applies (module docs), else one step. Returns the winner and the total it paid;
    /// `weights` records what each class gained, for `refund`.
    pub(crate) fn pick(&self, exclude: u64, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        if exclude == 0 {
            if let Some(sole) = self.sole_ready(weights) {
                return Some(sole);
            }
            if batching() {
                if let Some(picked) = self.pick_batched(weights) {
                    return picked;
                }
            }
        }
        self.step(exclude, weights)
    }

    /// When exactly one class has ready tenants, SWRR over one class changes no credit (it gains
    /// the total and pays it): the pick is that class, with no shared write. Reads each class's
    /// ready count once; a class that becomes ready meanwhile waits one pick, as it would for a
    /// pick already under way. `weights` records the no-op step for `refund` and `repeat`.
    fn sole_ready(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        let mut sole = None;
        for (c, class) in self.classes[..self.allocated()].iter().enumerate() {
            // Relaxed: a snapshot, as in `step`.
            let ready = class.ready.load(Ordering::Relaxed);
            if ready > 0 {
                if sole.is_some() {
                    return None;
                }
                sole = Some((c, class.gain(ready)));
            }
        }
        let (winner, gain) = sole?;
        weights.clear();
        for c in 0..=winner {
            weights.push(if c == winner { gain } else { 0 });
        }
        Some((winner, gain))
    }

    /// A pick from the batch, or from a new batch; `None` when the caller should step singly.
    fn pick_batched(&self, weights: &mut ClassWeights) -> Option<Option<(usize, i64)>> {
        let schedule = &self.schedule;
        // Acquire: pairs with the Release that published this generation's batch.
        let word = schedule.cursor.load(Ordering::Acquire);
        let batch = &schedule.batches[((word >> 32) & 1) as usize];
        match self.batch_len(batch, word >> 32) {
            // No class was ready at this epoch, and a class becoming ready bumps it: empty,
            // without writing a shared line (callers poll until `Empty`).
            Some(0) => return Some(None),
            Some(len) if word & INDEX_MASK < u64::from(len) => {
                if let Some(picked) = self.claim_pick(weights) {
                    return Some(Some(picked));
                }
            }
            _ => {}
        }
        // Used up or stale: compute the next batch, unless someone else is.
        // Acquire: the previous computer's writes happen before ours.
        if schedule
            .computing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let picked = self.compute_batch(weights);
        // Release: the next computer sees our writes.
        schedule.computing.store(false, Ordering::Release);
        Some(picked)
    }

    /// The length of `batch` if it is generation `generation`'s, still applies (same epoch) and
    /// is not being rewritten; a hint, re-validated when a pick is read.
    fn batch_len(&self, batch: &Batch, generation: u64) -> Option<u32> {
        // Acquire: see `read_batch`.
        let seq = batch.seq.load(Ordering::Acquire);
        // Relaxed: validated by the sequence re-check.
        let len = batch.len.load(Ordering::Relaxed);
        let valid = seq & 1 == 0
            && batch.generation.load(Ordering::Relaxed) == generation
            && batch.epoch.load(Ordering::Relaxed) == self.epoch.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (valid && batch.seq.load(Ordering::Relaxed) == seq).then_some(len)
    }

    /// Pick `index` of `batch`, if the batch is generation `generation`'s, still applies, and was
    /// not rewritten while read. Inlined: it is most of a batched pick.
    #[inline(always)]
    fn read_batch(
        &self,
        batch: &Batch,
        generation: u64,
        index: usize,
        weights: &mut ClassWeights,
    ) -> Option<(usize, i64)> {
        // Acquire: the fields read below are at least as new as this sequence number.
        let seq = batch.seq.load(Ordering::Acquire);
        // Relaxed: validated by the sequence re-check below.
        // No epoch check here: a claimed pick was charged and counts as used, so it is served
        // even if the batch was dropped since the claim (`batch_len` checked the epoch).
        if seq & 1 != 0
            || batch.generation.load(Ordering::Relaxed) != generation
            || index >= batch.len.load(Ordering::Relaxed) as usize
        {
            return None;
        }
        let class = batch.picks[index].load(Ordering::Relaxed) as usize;
        let total = batch.total.load(Ordering::Relaxed);
        let allocated = self.allocated();
        weights.clear();
        for gain in &batch.gains[..allocated] {
            weights.push(gain.load(Ordering::Relaxed));
        }
        // The seqlock reader's check: an Acquire fence, then the sequence again. Unchanged, no
        // writer started since `seq`, so what we read is that batch.
        fence(Ordering::Acquire);
        if batch.seq.load(Ordering::Relaxed) != seq || class >= allocated {
            return None;
        }
        Some((class, total))
    }

    /// Holding `computing`: closes the current batch and refunds its unclaimed picks, runs the
    /// next picks from a snapshot of the credits, charges their net effect, publishes them as the
    /// next generation and returns the first.
    fn compute_batch(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        if let Some(picked) = self.resume_batch(weights) {
            return Some(picked);
        }
        let schedule = &self.schedule;
        let allocated = self.allocated();
        // Close the current generation: claims from here on land in the next one, whose batch
        // is not valid yet (the index is far past any length), so they step singly. The swap
        // returns how many picks of the old batch were claimed. AcqRel: Acquire for the old
        // batch's fields (we refund from them), Release so a claimer of the closed generation
        // reads what was published before.
        let word = schedule.cursor.load(Ordering::Relaxed);
        let generation = (word >> 32).wrapping_add(1) & INDEX_MASK;
        let closed = schedule
            .cursor
            .swap((generation << 32) | CLOSED_INDEX, Ordering::AcqRel);
        // The old batch's unclaimed picks are refunded below (each was charged when the batch
        // was made), so a batch dropped early costs no class its service. Relaxed: we hold
        // `computing`, the only writer of batches, and the Acquire above ordered its last writes.
        let old = &schedule.batches[((closed >> 32) & 1) as usize];
        let old_len = if old.generation.load(Ordering::Relaxed) == closed >> 32 {
            old.len.load(Ordering::Relaxed)
        } else {
            0
        };
        let claimed = (closed & INDEX_MASK).min(u64::from(old_len)) as u32;
        let epoch = self.load_epoch();
        // Sized by the classes in use, not `CLASS_LIMIT`: no 64-wide zeroing or copy per batch.
        let mut start = ClassWeights::new();
        let mut total = 0i64;
        weights.clear();
        for class in &self.classes[..allocated] {
            // A snapshot; the net change is applied with `fetch_add`, so concurrent single
            // steps and refunds are never lost.
            let gain = class.gain_now();
            weights.push(gain);
            start.push(class.current.load(Ordering::Relaxed));
            total += gain;
        }
        // Size: double after a batch that was used up, halve after one dropped early; an empty
        // batch (nothing ready) records just that, for `pick_batched`.
        let mut target = schedule.target.load(Ordering::Relaxed);
        if total > 0 && old_len > 0 {
            target = if claimed >= old_len {
                (target * 2).min(BATCH as u32)
            } else {
                (target / 2).max(1)
            };
            schedule.target.store(target, Ordering::Relaxed);
        }
        let len = if total > 0 { target } else { 0 };
        let batch = &schedule.batches[(generation & 1) as usize];
        // Seqlock writer: odd while writing. The Release fence orders the odd value before the
        // field writes for any reader that sees one of them.
        let seq = batch.seq.load(Ordering::Relaxed).wrapping_add(1);
        batch.seq.store(seq, Ordering::Relaxed);
        fence(Ordering::Release);
        // The refund: each unclaimed pick had every class gain its gain and the winner pay the
        // total; undo both. Relaxed: as for the old batch's fields above (a different batch
        // from the one being written).
        let mut current = start.clone();
        if claimed < old_len {
            let unclaimed = i64::from(old_len - claimed);
            for (c, credit) in current.iter_mut().enumerate() {
                *credit -= unclaimed * old.gains[c].load(Ordering::Relaxed);
            }
            let old_total = old.total.load(Ordering::Relaxed);
            for pick in &old.picks[claimed as usize..old_len as usize] {
                if let Some(credit) = current.get_mut(pick.load(Ordering::Relaxed) as usize) {
                    *credit += old_total;
                }
            }
        }
        // A class's credit is minus its lag times the total gain it was earned at (SWRR picks the
        // class most behind). An idle class's lag is forgiven: its credit goes to the ready
        // classes, in proportion to their gains, so credit stays conserved and a class that
        // rejoins starts level. When the total changed (a class joined or left, a ready count
        // moved), the ready classes' credits are rescaled to it, so each keeps its lag in cost
        // units.
        if total > 0 {
            let earned_at = schedule.scale_total.load(Ordering::Relaxed);
            settle(&mut current, &weights[..allocated], total, earned_at);
        }
        if total > 0 {
            schedule.scale_total.store(total, Ordering::Relaxed);
        }
        // Plain slices for the loop, which runs up to `BATCH` times the classes: indexing a slice
        // needs no call even in a debug build, where indexing the `ArrayVec`s made a batch of
        // four classes take over 10 µs, longer than the engine's bounded waits.
        let gains: &[i64] = &weights[..allocated];
        let credits: &mut [i64] = &mut current[..allocated];
        for pick in &batch.picks[..len as usize] {
            let mut best: Option<(usize, i64)> = None;
            for c in 0..allocated {
                if gains[c] == 0 {
                    continue;
                }
                credits[c] += gains[c];
                if best.is_none_or(|(_, top)| credits[c] > top) {
                    best = Some((c, credits[c]));
                }
            }
            let Some((winner, _)) = best else {
                break; // unreachable: total > 0, so some class gains
            };
            credits[winner] -= total;
            pick.store(winner as u32, Ordering::Relaxed);
        }
        // Charge the refund and the batch's net change per class. Relaxed: credits are counters
        // (`step`).
        for (c, class) in self.classes[..allocated].iter().enumerate() {
            let delta = current[c] - start[c];
            #[cfg(fairq_broken)]
            if crate::broken::on(crate::broken::Break::Batch) {
                // Broken on purpose: overwrite with the snapshot's result; a concurrent single
                // step or refund is lost.
                class.current.store(current[c], Ordering::Relaxed);
                batch.gains[c].store(weights[c], Ordering::Relaxed);
                continue;
            }
            if delta != 0 {
                class.current.fetch_add(delta, Ordering::Relaxed);
            }
            batch.gains[c].store(weights[c], Ordering::Relaxed);
        }
        batch.len.store(len, Ordering::Relaxed);
        batch.total.store(total, Ordering::Relaxed);
        batch.epoch.store(epoch, Ordering::Relaxed);
        batch.generation.store(generation, Ordering::Relaxed);
        // Release: the batch is complete before its sequence number is even again, and before
        // the cursor opens its generation. Pick 0 is ours.
        batch.seq.store(seq.wrapping_add(1), Ordering::Release);
        schedule.cursor.store(
            (generation << 32) | u64::from(len.min(1)),
            Ordering::Release,
        );
        if len == 0 {
            return None;
        }
        let first = batch.picks[0].load(Ordering::Relaxed) as usize;
        Some((first, total))
    }

    /// Holding `computing`: when the current batch has picks left and was dropped only by
    /// ready-set changes that left every gain as the batch recorded it, stamps it with the new
    /// epoch and claims its next pick. Its remaining picks are what a new batch would compute
    /// (SWRR from the refunded credits with the same gains), but for credits moved since by a
    /// refund or a single step, which the next computation takes in. `None`: compute anew.
    fn resume_batch(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        let schedule = &self.schedule;
        // Relaxed: we hold `computing`, the only writer of the cursor's generation and of the
        // batches, and its Acquire ordered the last computer's writes.
        let word = schedule.cursor.load(Ordering::Relaxed);
        let batch = &schedule.batches[((word >> 32) & 1) as usize];
        let stamped = batch.epoch.load(Ordering::Relaxed);
        if batch.generation.load(Ordering::Relaxed) != word >> 32
            || word & INDEX_MASK >= u64::from(batch.len.load(Ordering::Relaxed))
        {
            return None;
        }
        let epoch = self.load_epoch();
        if epoch == stamped || epoch / HARD_EPOCH != stamped / HARD_EPOCH {
            return None;
        }
        for (class, gain) in self.classes[..self.allocated()].iter().zip(&batch.gains) {
            if class.gain_now() != gain.load(Ordering::Relaxed) {
                return None;
            }
        }
        // Relaxed: only the stamp changes; the picks, gains and total it vouches for were
        // published with the batch's sequence word, which readers Acquire.
        batch.epoch.store(epoch, Ordering::Relaxed);
        // Picks claimed by others meanwhile may leave none (`None`).
        self.claim_pick(weights)
    }

    /// Claims the cursor's next pick and reads it; `None` if the batch it lands in is used up,
    /// stale or being rewritten.
    #[inline(always)]
    fn claim_pick(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        // Acquire: pairs with the Release that published the generation we land in.
        let word = self.schedule.cursor.fetch_add(1, Ordering::Acquire);
        let batch = &self.schedule.batches[((word >> 32) & 1) as usize];
        self.read_batch(batch, word >> 32, (word & INDEX_MASK) as usize, weights)
    }

    /// One SWRR step over the classes with ready tenants, skipping `exclude`. Returns the winner
    /// and the total it paid; `weights` records what each class gained, for `refund`.
    fn step(&self, exclude: u64, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        weights.clear();
        for (c, class) in self.classes[..self.allocated()].iter().enumerate() {
            weights.push(0);
            if exclude & (1 << c) != 0 {
                continue;
            }
            // Relaxed: a stale count only skews one pick's weights; credits stay conserved.
            let ready = class.ready.load(Ordering::Relaxed);
            if ready <= 0 {
                continue;
            }
            let gain = class.gain(ready);
            weights[c] = gain;
            #[cfg(fairq_broken)]
            if crate::broken::on(crate::broken::Break::Pick) {
                // Broken on purpose: load, then store; a concurrent pick's gain is lost.
                let current = class.current.load(Ordering::Relaxed) + gain;
                class.current.store(current, Ordering::Relaxed);
                total += gain;
                if best.is_none_or(|(_, top)| current > top) {
                    best = Some((c, current));
                }
                continue;
            }
            // Relaxed: the credit is a counter; no other data is published through it.
            let current = class.current.fetch_add(gain, Ordering::Relaxed) + gain;
            total += gain;
            if best.is_none_or(|(_, top)| current > top) {
                best = Some((c, current));
            }
        }
        let (winner, _) = best?;
        self.classes[winner]
            .current
            .fetch_sub(total, Ordering::Relaxed);
        Some((winner, total))
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

    /// Undoes a pick: the winner gets its payment back and every class gives back its gain.
    pub(crate) fn refund(&self, winner: usize, total: i64, weights: &ClassWeights) {
        self.repeat(winner, total, weights, -1);
    }

    /// Applies `steps` more SWRR steps with the same weights and winner (a cost above 1 is that
    /// many unit steps; a negative count undoes steps).
    pub(crate) fn repeat(&self, winner: usize, total: i64, weights: &ClassWeights, steps: i64) {
        if steps == 0 {
            return;
        }
        // One RMW per class whose credit moves: the winner's gain and payment net out (a sole
        // ready class's refund writes nothing).
        let paid = total.saturating_mul(steps);
        let end = weights.len().max(winner + 1);
        for (c, class) in self.classes[..end].iter().enumerate() {
            let gain = weights.get(c).copied().unwrap_or(0);
            let mut delta = gain.saturating_mul(steps);
            if c == winner {
                delta = delta.saturating_sub(paid);
            }
            if delta != 0 {
                // Relaxed: SWRR credits are weights, read by picks as snapshots.
                class.current.fetch_add(delta, Ordering::Relaxed);
            }
        }
        if steps > 0 {
            // A charge beyond the unit step: the batch's later picks assumed the credits before.
            self.invalidate();
        }
    }

    /// Charges class `winner` for `steps` unit steps at today's weights (cost corrections).
    /// Returns the total gain it charged at.
    pub(crate) fn charge(&self, winner: usize, steps: i64) -> i64 {
        let mut weights = ClassWeights::new();
        let mut total = 0;
        for class in self.classes[..self.allocated()].iter() {
            let gain = class.gain_now();
            weights.push(gain);
            total += gain;
        }
        if total > 0 {
            self.repeat(winner, total, &weights, steps);
        }
        total
    }

    /// Takes the next tenant to serve from `class`: the continuing visitor, else the first one
    /// (a new visit), else the ring head, starting a new visit. A visitor that another caller
    /// put there is passed over for the rest (its caller is likely to come back for it), and
    /// when nothing else is there, left to the taker's caller to decide on (`Take::Owned`; see
    /// `steal`).
    pub(crate) fn take(&self, class: usize) -> Take {
        let class = &self.classes[class];
        let mut owned = None;
        for slot in &*class.visiting {
            // Relaxed peek: the CAS below takes it with Acquire.
            let mut word = slot.load(Ordering::Relaxed);
            while word != NO_VISITOR {
                let visitor = Visitor(word);
                if visitor.owned_by_other(owner_tag()) {
                    owned = owned.or(Some(visitor));
                    break;
                }
                // Acquire: pairs with the Release in `put_back`; the holder's slot writes are
                // ours. A lost CAS means another caller took it: the next load reads
                // `NO_VISITOR`.
                match slot.compare_exchange(word, NO_VISITOR, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => return Take::Tenant(visitor.tenant(), visitor.new_visit()),
                    Err(seen) => word = seen,
                }
            }
        }
        // A push still being written reads as empty: `take_tenant` spins briefly and comes back.
        match (class.ring.try_pop(), owned) {
            (Some(t), _) => Take::Tenant(t, true),
            (None, Some(visitor)) => Take::Owned(visitor),
            (None, None) => Take::Empty,
        }
    }

    /// Takes `visitor` from `class` if it is still there, unchanged: its owner did not come back
    /// for it. Reads the slot first: a failed CAS would take the line from an owner using it.
    pub(crate) fn steal(&self, class: usize, visitor: Visitor) -> Option<(u32, bool)> {
        let slot = &self.classes[class].visiting[visitor.slot()];
        // Relaxed: a pre-check; the CAS below decides.
        if slot.load(Ordering::Relaxed) != visitor.0 {
            return None;
        }
        // Acquire: pairs with the Release in `put_back`, as in `take`.
        #[allow(unused_mut)]
        let mut order = Ordering::AcqRel;
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::Steal) {
            // Broken on purpose: the putter's slot writes are not ordered before ours.
            order = Ordering::Relaxed;
        }
        slot.compare_exchange(visitor.0, NO_VISITOR, order, Ordering::Relaxed)
            .ok()
            .map(|_| (visitor.tenant(), visitor.new_visit()))
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
        #[cfg(fairq_broken)]
        if lane && crate::broken::on(crate::broken::Break::Lane) {
            // Broken on purpose: handed to the lane before it is counted ready.
            self.lane_push(class_id, tenant);
            self.count_ready(class_id, slot);
            return;
        }
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

    /// Counts `cost` units granted in `class` (the lane's clock).
    pub(crate) fn record_served(&self, class: u32, cost: u32) {
        let served = &self.classes[class as usize].served;
        // Relaxed load + store, not an RMW: a clock that may run a little slow when two
        // granters of one class race (`lane.rs`); it orders nothing.
        served.store(
            served.load(Ordering::Relaxed) + u64::from(cost),
            Ordering::Relaxed,
        );
    }

    /// Where the start-up stands (module docs, "The first window").
    #[inline]
    pub(crate) fn start(&self) -> Start {
        // Relaxed: a switch; a granter that misses a change counts one grant more in the
        // stage before.
        match self.start.load(Ordering::Relaxed) {
            0 => Start::Open,
            1 => Start::Waiting,
            2 => Start::Charged,
            _ => Start::Done,
        }
    }

    /// Requests wait for permits for the first time: the next grant charges the first window.
    pub(crate) fn first_wait(&self) {
        // Relaxed: as in `start`; a CAS, so a start-up that ended stays ended.
        let _ = self.start.compare_exchange(
            Start::Open as u32,
            Start::Waiting as u32,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Ends the start-up: later grants are charged as usual.
    pub(crate) fn end_start(&self) {
        // Relaxed: as in `start`.
        self.start.store(Start::Done as u32, Ordering::Relaxed);
    }

    /// The SWRR total of the classes present in the first window (those granted in it or with
    /// tenants ready), each at `weight × ready tenants`, at least one tenant: the weight a
    /// grant in it is shared against.
    pub(crate) fn present_total(&self) -> i64 {
        self.present().map(|(_, gain, _)| gain).sum()
    }

    /// `(class, gain, served)` of each class present in the first window.
    fn present(&self) -> impl Iterator<Item = (&Class, i64, u64)> + '_ {
        self.classes[..self.allocated()].iter().filter_map(|class| {
            // Relaxed: snapshots, as in `step`.
            let ready = class.ready.load(Ordering::Relaxed).max(0);
            let served = class.served.load(Ordering::Relaxed);
            let used = class.weight.load(Ordering::Relaxed) != 0;
            (used && (ready > 0 || served > 0))
                .then(|| (&**class, class.gain(ready.max(1)), served))
        })
    }

    /// The first grant after requests first waited: the first window's grants are charged to
    /// the SWRR credits as if every class present now had been ready for all of them (a class
    /// whose tenants arrived while the others waited is present too). Each class's credit
    /// gains what those unit steps would have given it, `S·g − s·G` (`S`, `G`: cost units and
    /// gains of all present classes; `s`, `g`: the class's), at most `permits` picks either way;
    /// the changes sum to 0, and are added, so picks racing the charge keep their steps. The
    /// charger holds the batch computer's flag, as the credits' scale is the batch's (`settle`);
    /// while another caller computes a batch it leaves the charge to the next grant. Only one
    /// caller charges.
    pub(crate) fn charge_first_window(&self, permits: u64) {
        let schedule = &self.schedule;
        // Acquire: as in `pick_batched`, the previous computer's writes happen before ours.
        if schedule
            .computing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.charge_holding_schedule(permits);
        // Release: the next computer sees our writes.
        schedule.computing.store(false, Ordering::Release);
    }

    fn charge_holding_schedule(&self, permits: u64) {
        // Relaxed: one CAS elects the charger; the stage publishes nothing.
        if self
            .start
            .compare_exchange(
                Start::Waiting as u32,
                Start::Charged as u32,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return;
        }
        // One snapshot: ready counts move meanwhile, and the changes must sum to 0 over it.
        let present: arrayvec::ArrayVec<_, CLASS_LIMIT> = self.present().collect();
        let units: i128 = present.iter().map(|&(_, _, s)| i128::from(s)).sum();
        let gains: i128 = present.iter().map(|&(_, g, _)| i128::from(g)).sum();
        let mut targets = arrayvec::ArrayVec::<(&Class, i128), CLASS_LIMIT>::new();
        for (class, gain, served) in present {
            targets.push((class, units * i128::from(gain) - i128::from(served) * gains));
        }
        // The targets sum to 0, as SWRR credits do. Past the cap they are scaled down together,
        // and the rounding goes to the last, so they still do.
        // (Under a quarter of `i64::MAX` too, so the credits can still move both ways.)
        let cap = (i128::from(permits).max(1) * gains).min(i128::from(i64::MAX / 4));
        let largest = targets.iter().map(|(_, t)| t.abs()).max().unwrap_or(0);
        if largest > cap {
            // Divided by a whole factor (no product to overflow): at most `cap` each after.
            let factor = (largest + cap - 1) / cap;
            for (_, target) in targets.iter_mut() {
                *target /= factor;
            }
            let rest: i128 = targets.iter().map(|(_, t)| t).sum();
            if let Some((_, last)) = targets.last_mut() {
                *last -= rest;
            }
        }
        for (class, target) in targets {
            // In range: within the cap (the rounding moves the last by less than a class each).
            let target = i64::try_from(target).unwrap_or(0);
            #[cfg(fairq_broken)]
            if crate::broken::on(crate::broken::Break::FirstWindow) {
                // Broken on purpose: store the target; a concurrent pick's step is lost.
                class.current.store(target, Ordering::Relaxed);
                continue;
            }
            // Relaxed: SWRR credits are weights, read by picks as snapshots. Added, not stored:
            // the picks that step meanwhile keep their steps, and the credits' sum is kept.
            class.current.fetch_add(target, Ordering::Relaxed);
        }
        // The credits are now earned at the present classes' total: the next batch rescales
        // them to the total of the classes ready then (`settle`).
        if let Ok(gains @ 1..) = i64::try_from(gains) {
            self.schedule.scale_total.store(gains, Ordering::Relaxed);
        }
        self.invalidate();
    }

    /// Cost units granted so far, all classes: the light-tenant lane's virtual clock.
    #[inline]
    pub(crate) fn served(&self) -> u64 {
        self.classes[..self.allocated()]
            .iter()
            // Relaxed: a clock reading, see `record_served`.
            .map(|c| c.served.load(Ordering::Relaxed))
            .sum()
    }

    /// Puts a held tenant back: as the visitor if its visit goes on, else at the ring's tail. A
    /// factor changed since the tenant was counted in is counted again first.
    pub(crate) fn put_back(
        &self,
        class: u32,
        tenant: u32,
        visit_continues: bool,
        slot: &TenantSlot,
    ) {
        let class = &self.classes[class as usize];
        Self::recount_factor(class, slot);
        // The class's only ready tenant (the holder counts it) would be its ring's head: it
        // waits in `FIRST` instead, where the caller that just served it takes it back without
        // another caller pulling its lines across (`Take::Owned`). A tenant whose visit
        // continues still goes ahead of it, and a newcomer counted meanwhile queues behind it,
        // as behind a ring push (Relaxed: a stale count only sends it to the ring).
        let sole = !visit_continues && class.ready.load(Ordering::Relaxed) == 1;
        if (visit_continues || sole) && Self::hold_as_visitor(class, tenant, sole, slot) {
            return;
        }
        let pushed = class.ring.push(tenant);
        debug_assert!(pushed.is_ok(), "class ring sized for every tenant");
    }

    /// Puts the held `tenant` in `class`'s visitor slot for a new visit or a continued one;
    /// false when the slot is taken.
    fn hold_as_visitor(class: &Class, tenant: u32, new_visit: bool, slot: &TenantSlot) -> bool {
        // Relaxed: written only by the turn holder, which we are.
        let seq = slot.grants_total.load(Ordering::Relaxed);
        let visitor = Visitor::new(tenant, new_visit, owner_tag(), seq);
        // Release: the holder's writes to the tenant slot happen before the next holder's take.
        class.visiting[visitor.slot()]
            .compare_exchange(NO_VISITOR, visitor.0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Puts a held tenant that was taken but not served back where `take` found it, as far as
    /// it can: in the visitor slot of its visit (`new_visit`), else at the ring's tail.
    pub(crate) fn put_back_unserved(
        &self,
        class: u32,
        tenant: u32,
        new_visit: bool,
        slot: &TenantSlot,
    ) {
        let class = &self.classes[class as usize];
        Self::recount_factor(class, slot);
        if !Self::hold_as_visitor(class, tenant, new_visit, slot) {
            let pushed = class.ring.push(tenant);
            debug_assert!(pushed.is_ok(), "class ring sized for every tenant");
        }
    }

    /// A factor changed since the held tenant `slot` was counted in `class` is counted again.
    fn recount_factor(class: &Class, slot: &TenantSlot) {
        let factor = slot.factor.load(Ordering::Relaxed);
        let counted = slot.counted_factor.load(Ordering::Relaxed);
        if factor != counted {
            slot.counted_factor.store(factor, Ordering::Relaxed);
            class
                .derate
                .fetch_add(i64::from(counted) - i64::from(factor), Ordering::Relaxed);
        }
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

/// Moves the idle classes' (`gains == 0`) credits to the ready ones in proportion to their gains,
/// then rescales the ready ones by `total / earned_at` (when `earned_at` is set and differs). The
/// sum of all credits is kept exactly (rounding goes to the last ready class). No allocation: it
/// runs in `next_grant`.
fn settle(current: &mut [i64], gains: &[i64], total: i64, earned_at: i64) {
    let all: i128 = current.iter().map(|&c| i128::from(c)).sum();
    let mut idle = 0i128;
    for (c, &gain) in current.iter_mut().zip(gains) {
        if gain == 0 {
            idle += i128::from(*c);
            *c = 0;
        }
    }
    let rescale = earned_at > 0 && earned_at != total;
    if idle == 0 && !rescale {
        // No idle credit to hand over and the total unchanged: nothing moves.
        return;
    }
    let Some(last) = gains.iter().rposition(|&g| g != 0) else {
        return;
    };
    for (c, &gain) in current.iter_mut().zip(gains) {
        if gain == 0 {
            continue;
        }
        let mut credit = i128::from(*c) + idle * i128::from(gain) / i128::from(total);
        if rescale {
            credit = credit * i128::from(total) / i128::from(earned_at);
        }
        *c = credit as i64;
    }
    let kept: i128 = current.iter().map(|&c| i128::from(c)).sum();
    current[last] = (i128::from(current[last]) + all - kept) as i64;
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

/// Loom models of the visitor slot changing hands (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::core::tenants::TenantTable;
    use loom::sync::Arc;
    use loom::thread;

    /// One class (weight 1) with tenants `0..count` ready, after this thread claimed its
    /// statistics row: a claim later on would order the model's threads through the row
    /// bitmap, not through the class. The first tenant is taken (held by this thread).
    fn one_class_holding_the_first(count: usize) -> (Arc<Classes>, Arc<TenantTable>, u32) {
        crate::core::tally::row();
        let classes = Arc::new(Classes::new(1, 2 * count));
        let tenants = Arc::new(TenantTable::new(count, 2, 0));
        let class = classes.ensure(1).expect("a class");
        for t in 0..count {
            classes.make_ready(class, t as u32, tenants.slot(t as u32), false);
        }
        assert!(matches!(classes.take(0), Take::Tenant(0, true)));
        (classes, tenants, class)
    }

    /// The holder of a class's only ready tenant writes its slot and puts it back as the
    /// visitor, then takes it again, while another caller (another statistics row) finds it
    /// and takes it over: exactly one of them gets it, and a taker sees the holder's writes.
    #[test]
    fn an_owned_visitor_is_taken_once() {
        loom::model(|| {
            let (classes, tenants, class) = one_class_holding_the_first(1);
            let other = {
                let (classes, tenants) = (Arc::clone(&classes), Arc::clone(&tenants));
                thread::spawn(move || {
                    crate::core::tally::row();
                    let got = match classes.take(0) {
                        Take::Owned(visitor) => classes.steal(0, visitor).is_some(),
                        Take::Tenant(t, _) => t == 0,
                        Take::Empty => false,
                    };
                    if got {
                        // Relaxed: ordered by the take (the point of the model).
                        let credit = tenants.slot(0).credit.load(Ordering::Relaxed);
                        assert_eq!(credit, 42, "the holder's slot write is not visible");
                    }
                    got
                })
            };
            // Relaxed: published by the put-back's Release.
            tenants.slot(0).credit.store(42, Ordering::Relaxed);
            classes.put_back(class, 0, false, tenants.slot(0));
            let mine = matches!(classes.take(0), Take::Tenant(0, _));
            let theirs = other.join().unwrap();
            assert!(
                mine != theirs,
                "taken by both or by neither: {mine} {theirs}"
            );
        });
    }

    /// A tenant whose visit continues, put back by its holder, does not hold up the class: a
    /// caller on another thread takes the ring's next tenant instead, whether it comes before
    /// or after the put-back, and the holder takes its own tenant back.
    #[test]
    fn a_continuing_visitor_lets_the_ring_go_first() {
        loom::model(|| {
            let (classes, tenants, class) = one_class_holding_the_first(2);
            let other = {
                let classes = Arc::clone(&classes);
                thread::spawn(move || {
                    crate::core::tally::row();
                    match classes.take(0) {
                        Take::Tenant(t, _) => Some(t),
                        Take::Owned(_) | Take::Empty => None,
                    }
                })
            };
            classes.put_back(class, 0, true, tenants.slot(0));
            let mine = matches!(classes.take(0), Take::Tenant(0, false));
            assert_eq!(other.join().unwrap(), Some(1), "the ring's tenant waited");
            assert!(mine, "the holder did not get its continuing tenant back");
        });
    }

    /// A steal with a Relaxed CAS: the holder's slot write may be missed.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "not visible")]
    fn broken_steal_is_caught() {
        crate::broken::with(crate::broken::Break::Steal, an_owned_visitor_is_taken_once);
    }
}
