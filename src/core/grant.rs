//! `next_grant`: the permit check, the pick of a class (SWRR) and of a tenant in it.

use super::serve::{Served, Visit, Wide};
use super::*;

/// Tenants one pick tries in its class after spent visits before it hands the pick back. Only a
/// reduced effective weight (fleet mode) or a cost above the quantum spends visits.
const SPENT_VISITS: u32 = 8;

/// Rounds of the spin on a class whose tenants another granter holds: `2^k` spin hints in round
/// `k`, 63 in all (tens of ns each), about the holder's few stores. Under loom one yield.
#[cfg(not(loom))]
const HOLD_SPIN_ROUNDS: u32 = 6;

#[cfg(loom)]
const HOLD_SPIN_ROUNDS: u32 = 1;

/// Spin hints a caller waits on a visitor another caller put back before it takes it: longer
/// than that caller's complete-and-enqueue between two grants, short against a request's work.
#[cfg(not(loom))]
const OWNED_WAIT_HINTS: u32 = 256;

#[cfg(loom)]
const OWNED_WAIT_HINTS: u32 = 1;

/// What `take_tenant` found in a class.
enum Found {
    /// A tenant to serve, and whether it starts a new visit.
    Tenant(SlotId, bool),
    /// Another granter holds the class's tenants, longer than a spin.
    Held,
    /// Another caller keeps serving the class's visitor, this tenant.
    Busy(SlotId),
}

impl<H: Hooks> Core<H> {
    /// Takes an in-flight permit and releases the next request by weighted fair order among the
    /// tenants whose head is ready; `Expired` for a queued request whose budget ran out.
    pub(crate) fn next_grant(&self, now: u64) -> NextGrant {
        let now = self.monotonic(now);
        self.wheel
            .advance(&self.tenants, now, |t| self.place(t, None, false, now));
        self.hooks
            .blocked_due(now, &mut |t| self.place(t, None, false, now));
        // A caller that last left a tenant to the caller serving it waits as long as it would
        // on that visitor, reading only that tenant's grant count: while the server goes on,
        // it answers `Empty` without touching the lines the server writes.
        if self
            .tenants
            .granted_while_waiting(|| crate::sync::spin(OWNED_WAIT_HINTS))
        {
            return NextGrant::Empty;
        }
        loop {
            // Again only after a wide request was just held: if the grants out ended meanwhile,
            // no completion will come back for it, so the next round serves it now.
            if let Some(answer) = self.grant_once(now) {
                return answer;
            }
        }
    }

    /// One round of `next_grant`; `None` when a wide request was just held (look again).
    fn grant_once(&self, now: u64) -> Option<NextGrant> {
        // A read: the permit itself is taken with the grant (`Permits::grant`).
        match self.permits.capacity() {
            Capacity::Free => {}
            Capacity::Full => {
                self.note_wait();
                return Some(NextGrant::AtCapacity);
            }
            Capacity::Wide => match self.serve_wide(now) {
                Wide::Answer(answer) => return Some(answer),
                Wide::Pick => {}
                Wide::Again => return None,
            },
        }
        if self.classes.start() == Start::Waiting {
            // A permit is free again after requests waited: charge the first window first.
            self.classes.charge_first_window(self.permits.max());
        }
        // A class owed service out of turn (the starvation guard, off by default) goes first,
        // outside SWRR, so no SWRR credit changes.
        if let Some(class) = self.hooks.due_class(&self.classes.view(), now) {
            let total = self.classes.view().total();
            let taken = match self.classes.take(class as usize) {
                Take::Tenant(t, new_visit) => Some((t, new_visit)),
                Take::Owned(visitor) => self.classes.take_visitor(class as usize, visitor),
                Take::Empty => None,
            };
            if let Some((t, new_visit)) = taken {
                match self.serve(t, class, Visit::of(new_visit), total, now, &mut None) {
                    Served::Grant(grant, _) => {
                        self.hooks.served_out_of_turn();
                        return Some(NextGrant::Granted(grant));
                    }
                    Served::Expired(expired) => return Some(NextGrant::Expired(expired)),
                    Served::AtCapacity => return Some(NextGrant::AtCapacity),
                    Served::WaitsWide => return None,
                    Served::Nothing | Served::Spent => {}
                }
            }
        }
        // With tenants in the lane, the rotation goes first only with a tenant behind its share
        // (a due one); the rotation's tenants ahead of their share wait for the lane (`lane.rs`).
        let mut rotation_first = self.limits.light_lane && !self.classes.lane().is_empty();
        let (now_v, ready_now) = if rotation_first {
            (self.classes.served(), self.classes.view().total())
        } else {
            (0, 0)
        };
        let mut weights = ClassWeights::new();
        let mut exclude = if rotation_first {
            self.classes.lane_only()
        } else {
            0
        };
        'pick: loop {
            let Some((class, total)) = self.classes.pick(exclude, &mut weights) else {
                if rotation_first {
                    // Nothing outside the lane: the lane's turn, then the classes it skipped
                    // (their counts may have been stale).
                    if let Some(answer) = self.serve_lane(now) {
                        return answer;
                    }
                    rotation_first = false;
                    exclude = 0;
                    continue;
                }
                return Some(NextGrant::Empty);
            };
            // The class serves the pick: its ring's next tenant whose DRR credit covers its
            // head (a spent visit passes the pick on, as DRR does, instead of refunding it).
            // A visitor another caller left is left to it when its class holds most of the
            // pick's weight: most picks of every caller land on it, and taking it would only
            // pass its turn back and forth. A caller waits holding nothing, and only one class
            // holds a majority of a pick, so callers seldom wait on each other's tenants, and
            // then for one bounded wait.
            let leave_to_owner = 2 * weights.get(class).copied().unwrap_or(0) > total;
            // The lane's tags are charged against every ready tenant's weight, the lane's too.
            let ready_total = if exclude != 0 {
                self.classes.view().total()
            } else {
                total
            };
            let mut spent = 0;
            let served = loop {
                let (t, new_visit) = match self.take_tenant(class, leave_to_owner) {
                    Found::Tenant(t, new_visit)
                        if rotation_first && !self.due(t, now_v, ready_now) =>
                    {
                        // Ahead of its share: the lane goes before it, and it keeps its place.
                        let slot = self.tenants.slot(t);
                        self.classes
                            .put_back_unserved(class as u32, t, new_visit, slot);
                        self.classes.refund(class, total, &weights);
                        exclude |= 1 << class;
                        continue 'pick;
                    }
                    Found::Tenant(t, new_visit) => (t, new_visit),
                    Found::Held => break None,
                    Found::Busy(t) => {
                        // Its last granter is serving it again and again: leave it to that
                        // caller rather than serve another class out of turn.
                        self.classes.refund(class, total, &weights);
                        self.tenants.leave_to_server(t);
                        return Some(NextGrant::Empty);
                    }
                };
                match self.serve(
                    t,
                    class as ClassId,
                    Visit::of(new_visit),
                    ready_total,
                    now,
                    &mut None,
                ) {
                    Served::Spent if spent < SPENT_VISITS => spent += 1,
                    other => break Some(other),
                }
            };
            match served {
                None => {
                    // Another granter holds this class's tenants, longer than a spin.
                    self.classes.refund(class, total, &weights);
                    exclude |= 1 << class;
                }
                Some(Served::Grant(grant, cost)) => {
                    self.classes
                        .repeat(class, total, &weights, i64::from(cost) - 1);
                    return Some(NextGrant::Granted(grant));
                }
                Some(Served::Expired(expired)) => {
                    self.classes.refund(class, total, &weights);
                    return Some(NextGrant::Expired(expired));
                }
                Some(Served::AtCapacity) => {
                    self.classes.refund(class, total, &weights);
                    return Some(NextGrant::AtCapacity);
                }
                Some(Served::WaitsWide) => {
                    self.classes.refund(class, total, &weights);
                    return None;
                }
                Some(Served::Nothing | Served::Spent) => {
                    self.classes.refund(class, total, &weights)
                }
            }
        }
    }

    /// Serves the light-tenant lane, ahead of the classes' rotation: one visit of the first lane
    /// tenant that has something to grant, not charged to the SWRR credits (`lane.rs`). `None`
    /// when the lane granted nothing (it is empty, or its tenants' heads were dead or parked).
    fn serve_lane(&self, now: u64) -> Option<Option<NextGrant>> {
        while let Some((class, t)) = self.classes.take_lane() {
            let total = self.classes.view().total();
            match self.serve(t, class, Visit::Lane, total, now, &mut None) {
                Served::Grant(grant, _) => return Some(Some(NextGrant::Granted(grant))),
                Served::Expired(expired) => return Some(Some(NextGrant::Expired(expired))),
                Served::AtCapacity => return Some(Some(NextGrant::AtCapacity)),
                Served::WaitsWide => return Some(None),
                // Swept, parked, blocked or spent: the tenant left the lane; try the next one.
                Served::Nothing | Served::Spent => {}
            }
        }
        None
    }

    /// Permits ran out: if requests wait for the first time, the next grant charges the first
    /// window's grants.
    #[inline]
    pub(super) fn note_wait(&self) {
        if self.classes.start() == Start::Open && self.permits.load().0 > 0 {
            self.classes.first_wait();
        }
    }

    /// Takes a tenant from the picked class. When the ring is empty but the class still counts
    /// ready tenants, another granter holds them for a few dozen ns: spin briefly (never yield,
    /// never sleep) rather than serve another class out of turn, which would skew shares when
    /// tenants are few. Gives up after `HOLD_SPIN_ROUNDS`, so a preempted holder blocks nobody.
    /// A visitor another caller put back is, with `leave_to_owner`, left to it while that caller
    /// keeps taking it again (`Found::Busy`), and taken once it has stayed put for
    /// `OWNED_WAIT_HINTS`; without, it is taken at once.
    fn take_tenant(&self, class: usize, leave_to_owner: bool) -> Found {
        for round in 0..=HOLD_SPIN_ROUNDS {
            match self.classes.take(class) {
                Take::Tenant(t, new_visit) => return Found::Tenant(t, new_visit),
                Take::Owned(visitor) => {
                    if leave_to_owner {
                        return self.wait_for_visitor(class, visitor);
                    }
                    if let Some((t, new_visit)) = self.classes.take_visitor(class, visitor) {
                        return Found::Tenant(t, new_visit);
                    }
                    continue; // taken or replaced meanwhile: look again
                }
                Take::Empty => {}
            }
            if round == HOLD_SPIN_ROUNDS || self.classes.ready(class) <= 0 {
                return Found::Held;
            }
            crate::sync::spin(1 << round);
        }
        Found::Held
    }

    /// `visitor`, the tenant of a class holding most of the pick's weight, was left there by a
    /// caller on another thread: waits `OWNED_WAIT_HINTS`, then takes it if it is still there,
    /// unchanged (that caller went away), or answers `Busy` (that caller came back for it and is
    /// serving it).
    fn wait_for_visitor(&self, class: usize, visitor: classes::Visitor) -> Found {
        crate::sync::spin(OWNED_WAIT_HINTS);
        match self.classes.take_visitor(class, visitor) {
            Some((t, new_visit)) => Found::Tenant(t, new_visit),
            None => Found::Busy(visitor.tenant()),
        }
    }
}
