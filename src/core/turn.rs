//! Placing a tenant whose turn the caller holds: staging its head, then the wheel (not ready
//! yet), its class's ring or the light-tenant lane (ready), or nowhere (idle).

use super::*;

/// In `staged` while a tenant's turn is handed to a writer: the tenant is counted ready in no
/// class (else the class's id is there).
const COUNTED_NOWHERE: u64 = u64::MAX;

/// What became of a turn holder's next entry (`Core::stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Staging {
    /// Staged: the caller holds the turn with a head to place.
    Staged,
    /// Nothing left: the tenant went idle and the turn is given up.
    Idle,
    /// Not written yet: its writer holds the turn now, and will place the tenant.
    HandedOver,
}

impl<H: Hooks> Core<H> {
    /// The caller raised `queued` from 0 and so holds the tenant's turn: stage the head, place it.
    pub(super) fn activate(&self, t: SlotId, now: u64) {
        if self.stage(t, None, now) == Staging::Staged {
            self.place_staged(t, None, now);
        }
    }

    /// The caller was handed tenant `t`'s turn by a holder that found its next entry not written
    /// yet (`ring.rs`): it does what that holder would have done, from staging that entry on.
    pub(super) fn resume(&self, t: SlotId, now: u64) {
        let slot = self.tenants.slot(t);
        // Relaxed: ordered by the hand-over's CAS (`ring.rs`).
        let counted_in = match slot.staged.load(Ordering::Relaxed) {
            COUNTED_NOWHERE => None,
            class => Some(class as ClassId),
        };
        match self.stage(t, counted_in, now) {
            Staging::Staged => self.place_staged(t, counted_in, now),
            Staging::Idle => {
                if let Some(class) = counted_in {
                    self.leave_ready(t, class, now);
                }
            }
            Staging::HandedOver => {}
        }
    }

    /// The holder of tenant `t`'s turn, with an entry counted due, stages it. `counted_in`: the
    /// class whose ready count includes the tenant, if any, which is what the entry's writer
    /// needs to carry on if the turn is handed over.
    pub(super) fn stage(&self, t: SlotId, counted_in: Option<ClassId>, now: u64) -> Staging {
        let slot = self.tenants.slot(t);
        let pending = counted_in.map_or(COUNTED_NOWHERE, u64::from);
        loop {
            // Relaxed: the hand-over's Release CAS publishes it.
            match slot
                .queue
                .take_next(|| slot.staged.store(pending, Ordering::Relaxed))
            {
                Next::Handle(head) => {
                    slot.staged.store(head, Ordering::Relaxed);
                    return Staging::Staged;
                }
                // A dead entry a compaction removed: it is accounted like a popped one.
                Next::Swept => {
                    if self.tenants.release_entry(t, false, now).queued() <= 1 {
                        return Staging::Idle;
                    }
                }
                Next::HandedOver => return Staging::HandedOver,
            }
        }
    }

    /// Places a tenant whose head was just staged: an activated one (`counted_in` none) starts
    /// with no DRR credit.
    fn place_staged(&self, t: SlotId, counted_in: Option<ClassId>, now: u64) {
        if counted_in.is_none() {
            let slot = self.tenants.slot(t);
            slot.credit.store(0, Ordering::Relaxed);
            slot.last_grant.store(now, Ordering::Relaxed);
        }
        self.place(t, counted_in, false, now);
    }

    /// Places a tenant whose turn the caller holds and whose head is staged: in the wheel if the
    /// head is not ready, else in its class's ready set. `counted_in` is the class whose ready
    /// count already includes the tenant (a granter's), if any.
    pub(super) fn place(
        &self,
        t: SlotId,
        counted_in: Option<ClassId>,
        visit_continues: bool,
        now: u64,
    ) {
        let slot = self.tenants.slot(t);
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        let class = slot.class.load(Ordering::Relaxed);
        let alive = self.tickets.lookup(head) == Lookup::Live(QUEUED);
        let not_before = self.tickets.not_before(head);
        if alive && not_before > now {
            if let Some(c) = counted_in {
                self.leave_ready(t, c, now);
            }
            self.park(t, not_before, now);
            return;
        }
        // Ready, or dead (cancelled/expired): a granter sweeps dead heads on its turn.
        // Broken on purpose: keep the tenant in the class it was taken from.
        let class = broken_or!(Move, counted_in.unwrap_or(class), class);
        match counted_in {
            Some(c) if c == class => self.classes.put_back(c, t, visit_continues, slot),
            Some(c) => {
                self.classes.leave(c, slot);
                self.classes.make_ready(class, t, slot, false);
            }
            None => self.enter_ready(t, class, now),
        }
    }

    /// Parks a tenant whose turn the caller holds until its head's `not_before`.
    pub(super) fn park(&self, t: SlotId, not_before: u64, now: u64) {
        if let Some(missed) = self.wheel.park(&self.tenants, t, not_before) {
            self.wheel
                .drain(&self.tenants, missed, |t| self.place(t, None, false, now));
        }
    }

    /// The holder makes tenant `t` ready in `class` (it was not ready): in the light-tenant lane
    /// if it has not had more than its share (`lane.rs`), else in its class's ring.
    fn enter_ready(&self, t: SlotId, class: ClassId, now: u64) {
        self.hooks.became_ready(t, now);
        let slot = self.tenants.slot(t);
        // Relaxed: a switch; a placement that misses it just made serves one lane grant.
        let lane =
            self.lane_open.load(Ordering::Relaxed) && lane::admits(slot, self.classes.served());
        self.classes.make_ready(class, t, slot, lane);
    }

    /// The holder takes tenant `t` out of `class`'s ready set (parked, blocked or idle).
    pub(super) fn leave_ready(&self, t: SlotId, class: ClassId, now: u64) {
        let slot = self.tenants.slot(t);
        if let Some(boosted) = self.hooks.left_ready(t, slot.effective_weight(), now) {
            self.classes.add_extra(boosted, -1);
        }
        self.classes.leave(class, slot);
    }
}
