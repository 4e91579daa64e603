//! The features the engine plugs into the core's seam: fairness indicators, weight policies and
//! bulkheads. Each is optional; with all of them off every hook is a check of an `Option`.

use crate::bulkhead::Bulkheads;
use crate::core::{Admit, ClassId, ClassView, GrantEvent, Hooks, SlotId};
use crate::indicators::Indicators;
use crate::policy::PolicyState;
use crate::types::Error;

pub(crate) struct Features {
    /// Per-tenant fairness indicators; `None` when `Config::indicators` is off.
    pub(crate) indicators: Option<Indicators>,
    /// Starvation guard, wait boost, feedback controller.
    pub(crate) policy: PolicyState,
    /// Per-downstream in-flight pools; `None` when off.
    pub(crate) bulkheads: Option<Bulkheads>,
}

impl Features {
    /// Ends the tenant's wait boost, if the boost is on and it holds one.
    #[inline]
    fn end_boost(&self, t: SlotId) -> Option<ClassId> {
        if !self.policy.boost_on() {
            return None;
        }
        let indicators = self.indicators.as_ref()?;
        self.policy.end_boost(indicators.tenant(t))
    }
}

impl Hooks for Features {
    #[inline]
    fn claimed(&self, slot: SlotId) {
        if let Some(i) = &self.indicators {
            i.claimed(slot);
        }
    }

    #[inline]
    fn request(&self, slot: SlotId) {
        if let Some(i) = &self.indicators {
            i.request(slot);
        }
    }

    #[inline]
    fn refused_on_arrival(&self, slot: SlotId) {
        if let Some(i) = &self.indicators {
            i.refused_on_arrival(slot);
        }
    }

    #[inline]
    fn refused_after_wait(
        &self,
        slot: SlotId,
        waited_ns: u64,
        expired: bool,
        holder: bool,
        spread: u64,
    ) {
        if let Some(i) = &self.indicators {
            i.refused_after_wait(slot, waited_ns, expired, holder, spread);
        }
    }

    #[inline]
    fn became_ready(&self, slot: SlotId, now: u64) {
        if let Some(i) = &self.indicators {
            i.became_ready(slot, now);
        }
    }

    #[inline]
    fn left_ready(&self, slot: SlotId, weight: u64, now: u64) -> Option<ClassId> {
        if let Some(i) = &self.indicators {
            i.left_ready(slot, weight, now);
        }
        self.end_boost(slot)
    }

    #[inline]
    fn granted(&self, grant: &GrantEvent) -> Option<ClassId> {
        if let Some(i) = &self.indicators {
            i.granted(grant);
        }
        if self.policy.guard_on() {
            self.policy.note_grant(grant.class, grant.now);
        }
        self.end_boost(grant.slot)
    }

    #[inline]
    fn cost_corrected(&self, _slot: SlotId, delta: i64, total: i64) {
        if let Some(i) = &self.indicators {
            i.cost_corrected(delta, total);
        }
    }

    #[inline]
    fn due_class(&self, classes: &ClassView<'_>, now: u64) -> Option<ClassId> {
        if !self.policy.guard_on() {
            return None;
        }
        self.policy.due_class(classes, now)
    }

    #[inline]
    fn served_out_of_turn(&self) {
        self.policy.served_out_of_turn();
    }

    #[inline]
    fn check_downstream(&self, downstream: u32) -> Result<(), Error> {
        match &self.bulkheads {
            Some(pools) => pools.check_downstream(downstream),
            None => Ok(()),
        }
    }

    #[inline]
    fn sheds(&self, downstream: u32, budget_ns: u64, now: u64) -> bool {
        match &self.bulkheads {
            Some(pools) => pools.sheds(downstream, budget_ns, now),
            None => false,
        }
    }

    #[inline]
    fn admit(&self, downstream: u32, now: u64) -> Admit {
        match &self.bulkheads {
            Some(pools) => pools.admit(downstream, now),
            None => Admit::Yes,
        }
    }

    #[inline]
    fn queued(&self, downstream: u32, delta: i64) {
        if let Some(pools) = &self.bulkheads {
            pools.queued(downstream, delta);
        }
    }

    #[inline]
    fn block(&self, slot: SlotId, downstream: u32, deadline: u64, weight: u32) -> Option<SlotId> {
        self.bulkheads
            .as_ref()
            .and_then(|pools| pools.block_tenant(slot, downstream, deadline, weight))
    }

    #[inline]
    fn released(&self, downstream: u32) -> Option<SlotId> {
        self.bulkheads
            .as_ref()
            .and_then(|pools| pools.released(downstream))
    }

    #[inline]
    fn blocked_due(&self, now: u64, place: &mut dyn FnMut(SlotId)) {
        if let Some(pools) = &self.bulkheads {
            pools.blocked_due(now, place);
        }
    }

    #[inline]
    fn wakeup(&self) -> Option<u64> {
        self.bulkheads.as_ref().and_then(Bulkheads::wakeup)
    }

    #[inline]
    fn prefetch(&self, slot: SlotId) {
        if let Some(i) = &self.indicators {
            i.prefetch(slot);
        }
    }
}
