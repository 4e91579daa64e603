//! The one seam between the scheduler core and the features (fairness indicators, weight
//! policies, bulkheads).
//!
//! The core calls a hook at each event a feature may care about; every method has a no-op
//! default, so `NoHooks` compiles to nothing and the core alone is the plain scheduler. Hooks
//! answer with *decisions* (admit this head or not, serve this class first, this tenant may be
//! placed again, this class's extra weight drops by one); the core carries them out. A hook never
//! calls back into the core's placement, and keeps its per-tenant state in side tables indexed by
//! [`SlotId`], so the core's tenant record stays small.
//!
//! Hooks run on the hot path: they must not block, lock or allocate.

use crate::core::classes::ClassView;
use crate::core::ids::{ClassId, SlotId};
use crate::identity::TenantKey;

/// What the core tells the hooks about a grant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GrantEvent {
    /// The tenant's slot.
    pub(crate) slot: SlotId,
    /// The weight class that served it.
    pub(crate) class: ClassId,
    /// The tenant's effective weight now, in 1/`FACTOR_ONE` units (weight × fleet factor).
    pub(crate) weight: u64,
    /// The request's declared cost.
    pub(crate) cost: u32,
    /// The SWRR total gain of the pick (the ready classes' weight, same units as `weight`).
    pub(crate) total: i64,
    /// Time since its first enqueue.
    pub(crate) waited_ns: u64,
    /// When.
    pub(crate) now: u64,
}

/// Whether a head may be granted now (bulkheads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Yes; the feature took whatever it needed (a pool permit).
    Yes,
    /// Not now: the tenant must leave the ready set and `block` hands it to the feature.
    No,
}

pub(crate) trait Hooks: Send + Sync {
    /// A tenant took slot `slot` (a new tenant, or another one reusing it): reset side tables.
    #[inline]
    fn claimed(&self, _slot: SlotId) {}

    /// An `enqueue` reached the tenant's slot.
    #[inline]
    fn request(&self, _slot: SlotId) {}

    /// That `enqueue` was refused after it reached the slot (a bound, or a Retry-After over its
    /// budget).
    #[inline]
    fn refused_on_arrival(&self, _slot: SlotId) {}

    /// A queued request of the tenant ended refused after waiting `waited_ns`. `expired`: it left
    /// the queue by its deadline (a wait observation); else a requeue that did not fit. `holder`:
    /// the caller holds the tenant's turn; else `spread` spreads its writes (a ticket index).
    #[inline]
    fn refused_after_wait(
        &self,
        _slot: SlotId,
        _waited_ns: u64,
        _expired: bool,
        _holder: bool,
        _spread: u64,
    ) {
    }

    /// The turn holder put the tenant in its class's ready set at `now`.
    #[inline]
    fn became_ready(&self, _slot: SlotId, _now: u64) {}

    /// The turn holder took the tenant out of the ready set (parked, blocked, idle). `weight`
    /// as in [`GrantEvent`]. Returns a class whose extra weight drops by one (a wait boost ends).
    #[inline]
    fn left_ready(&self, _slot: SlotId, _weight: u64, _now: u64) -> Option<ClassId> {
        None
    }

    /// The turn holder granted the tenant's head. Returns a class whose extra weight drops by
    /// one (a wait boost ends).
    #[inline]
    fn granted(&self, _grant: &GrantEvent) -> Option<ClassId> {
        None
    }

    /// A grant's cost was corrected by `delta` units at `complete`, made while the ready
    /// classes' total gain was `total`.
    #[inline]
    fn cost_corrected(&self, _slot: SlotId, _delta: i64, _total: i64) {}

    /// Before SWRR runs: a class owed service out of turn (the starvation guard).
    #[inline]
    fn due_class(&self, _classes: &ClassView<'_>, _now: u64) -> Option<ClassId> {
        None
    }

    /// The class from `due_class` was served.
    #[inline]
    fn served_out_of_turn(&self) {}

    /// Checks a request's downstream at enqueue.
    #[inline]
    fn check_downstream(&self, _downstream: u32) -> Result<(), crate::types::Error> {
        Ok(())
    }

    /// Whether a request for `downstream` arriving at `now`, which may wait `budget_ns`, is
    /// refused at once (load shedding: its pool's expected wait is longer).
    #[inline]
    fn sheds(&self, _downstream: u32, _budget_ns: u64, _now: u64) -> bool {
        false
    }

    /// The holder is about to grant, at `now`, a head that goes to `downstream`.
    #[inline]
    fn admit(&self, _downstream: u32, _now: u64) -> Admit {
        Admit::Yes
    }

    /// A request for `downstream` entered (`1`) or left (`-1`) the queue without a grant yet
    /// (load shedding estimates a pool's wait from it).
    #[inline]
    fn queued(&self, _downstream: u32, _delta: i64) {}

    /// A head that `admit` refused: the tenant (out of the ready set, its turn held; its weight
    /// `weight`) waits with the feature, which owns its turn from now on. Returns a tenant the
    /// core must place again now (room appeared meanwhile; maybe this one).
    #[inline]
    fn block(
        &self,
        _slot: SlotId,
        _downstream: u32,
        _deadline: u64,
        _weight: u32,
    ) -> Option<SlotId> {
        None
    }

    /// A head admitted for `downstream` was not granted after all (a cancel won, or its DRR visit
    /// was spent): undo what `admit` took. Returns a tenant to place again.
    #[inline]
    fn unadmit(&self, downstream: u32) -> Option<SlotId> {
        self.released(downstream)
    }

    /// A grant to `downstream` ended (complete, cancel): returns a blocked tenant to place again.
    #[inline]
    fn released(&self, _downstream: u32) -> Option<SlotId> {
        None
    }

    /// In `next_grant`: blocked tenants whose head's deadline may have passed, handed back to the
    /// core (`place`) so it reports the expired ones.
    #[inline]
    fn blocked_due(&self, _now: u64, _place: &mut dyn FnMut(SlotId)) {}

    /// When a blocked head's deadline passes, for `next_wakeup_ns`.
    #[inline]
    fn wakeup(&self) -> Option<u64> {
        None
    }

    /// The next grant will likely serve this slot (round robin is predictable): a hint to start
    /// loading the feature's lines for it.
    #[inline]
    fn prefetch(&self, _slot: SlotId) {}
}

/// No features: the plain scheduler (`BareCore`).
pub(crate) struct NoHooks;

impl Hooks for NoHooks {}

/// What a feature reads of one tenant, off the hot path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TenantView {
    pub(crate) slot: SlotId,
    pub(crate) key: TenantKey,
    /// Configured weight.
    pub(crate) weight: u32,
    /// The weight of its class now (the feedback controller may have moved it).
    pub(crate) class_weight: u32,
    pub(crate) class: ClassId,
    /// Its effective weight as its class counts it, in 1/`FACTOR_ONE` units.
    pub(crate) effective_weight: u64,
    /// Grants and cost units since it took the slot.
    pub(crate) granted: u64,
    pub(crate) granted_cost: u64,
}

/// The seam's other direction: what a feature may ask of the core, off the hot path (a control
/// loop's tick, a report). The core implements it (`admin.rs`); features take `&impl
/// CoreAccess`, never the core itself.
pub(crate) trait CoreAccess {
    /// Tenant slots (indices `0..slot_count()`).
    fn slot_count(&self) -> usize;

    /// What a feature reads of the tenant in slot `t` now, if the slot holds one. Not pinned: a
    /// slot reused meanwhile may show a mixed snapshot for that one tenant.
    fn tenant_view(&self, t: SlotId) -> Option<TenantView>;

    /// Runs `f` on the view of `key`'s slot, pinned so it cannot be reused meanwhile.
    fn with_tenant<R>(&self, key: TenantKey, f: impl FnOnce(TenantView) -> R) -> Option<R>;

    /// Adds `delta` to a class's extra SWRR weight (the wait boost).
    fn add_class_extra(&self, class: ClassId, delta: i64);

    /// Moves a live tenant to the class of `weight` (the feedback controller's nudge), creating
    /// the class if there is room. Returns whether it moved.
    fn move_to_class(&self, key: TenantKey, weight: u32) -> bool;
}
