//! `complete` and `cancel`: a grant or a queued request ends, or goes back to its queue.

use super::enqueue::{not_before, Pushed};
use super::*;

impl<H: Hooks> Core<H> {
    /// Ends a grant: gives its permit back, and either ends the ticket (admitted) or puts it back
    /// in its tenant's queue (still refused) if the Retry-After fits its remaining budget.
    /// `actual_cost`, when given, corrects the tenant's charge.
    pub(crate) fn complete(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        actual_cost: Option<u32>,
        now: u64,
    ) -> Result<Completion, Error> {
        if actual_cost.is_some_and(|c| c > MAX_COST) {
            return Err(Error::InvalidArgument("actual cost must be in 0..=1000000"));
        }
        let now = self.monotonic(now);
        let Some(fields) = self.tickets.fields(ticket) else {
            return Err(Error::StaleTicket);
        };
        let refused_state = || match self.tickets.lookup(ticket) {
            Lookup::Stale => Error::StaleTicket,
            Lookup::Live(_) => Error::TicketState,
        };
        // The fields are the ticket's own if the CAS below succeeds at the handle's generation
        // (a granted ticket's fields no longer change; `tickets.rs`).
        let t = fields.tenant;
        let spread = u64::from(ticket.index());
        let retry_after_ns = match outcome {
            Outcome::StillRefused { retry_after_ns } => retry_after_ns,
            Outcome::Admitted => {
                // Straight from granted to free: one CAS. The slot stays pinned by the
                // ticket's `live` count until the release below.
                if !self.tickets.end(ticket, GRANTED) {
                    return Err(refused_state());
                }
                self.correct_cost(t, fields.cost, actual_cost);
                self.end_grant(fields.cost, fields.downstream, now);
                self.tenants.release_live(t, 1, now);
                self.counters.bump(|c| &c.completed);
                return Ok(Completion::Completed);
            }
        };
        if !self.tickets.transition(ticket, GRANTED, REQUEUING) {
            return Err(refused_state());
        }
        // We own the ticket exclusively until we end or publish it.
        self.correct_cost(t, fields.cost, actual_cost);
        self.end_grant(fields.cost, fields.downstream, now);
        let waited_ns = now.saturating_sub(fields.enqueued_at);
        let refused = |reason: Reason, position: u32| {
            self.hooks
                .refused_after_wait(t, waited_ns, false, false, spread);
            self.counters.bump(|c| &c.refused_after_wait);
            self.counters.bump(|c| &c.refused[reason.index()]);
            Ok(Completion::Refused(Refusal {
                reason,
                position,
                waited_ns,
            }))
        };
        let refuse = |reason: Reason, position: u32| {
            let counted = refused(reason, position); // while the ticket still pins the slot
            self.tickets.end(ticket, REQUEUING);
            self.tenants.release_live(t, 1, now);
            counted
        };
        let position = match self.reserve(t) {
            Ok(position) => position,
            Err(refusal) => return refuse(refusal.reason, refusal.position),
        };
        if now.saturating_add(retry_after_ns) > fields.deadline {
            self.unreserve(t);
            return refuse(Reason::WaitExceedsBudget, position);
        }
        let estimated_wait_ns = self.estimate(self.tenants.slot(t), retry_after_ns, position);
        self.tickets.requeue(
            ticket,
            not_before(now, retry_after_ns),
            position,
            estimated_wait_ns,
        );
        self.hooks.queued(fields.downstream, 1);
        if self.push_queued(t, ticket, now, false) == Pushed::Refused {
            self.hooks.queued(fields.downstream, -1);
            // The slot may be idle now; it is reused only after tenant_idle_ms.
            return refused(Reason::TenantQueueFull, position);
        }
        self.counters.bump(|c| &c.requeued);
        Ok(Completion::Requeued {
            position,
            estimated_wait_ns,
        })
    }

    /// A grant of `cost` to `downstream` ended: its permits go back, and a feature may hand back
    /// a tenant.
    fn end_grant(&self, cost: u32, downstream: u32, now: u64) {
        if self.limits.seats {
            self.permits.release(self.width(cost));
            // Relaxed: a gauge.
            self.grants_out.fetch_sub(1, Ordering::Relaxed);
        } else {
            self.permits.release(1);
        }
        if let Some(u) = self.hooks.released(downstream) {
            self.place(u, None, false, now);
        }
    }

    /// Corrects tenant `t`'s charge for a grant of estimated `cost` that really cost `actual`.
    fn correct_cost(&self, t: SlotId, cost: u32, actual: Option<u32>) {
        let Some(actual) = actual else { return };
        let delta = i64::from(actual) - i64::from(cost);
        if delta != 0 {
            let slot = self.tenants.slot(t);
            // The holder folds this into the credit at the tenant's next visit.
            slot.debt.fetch_add(delta, Ordering::Relaxed);
            slot.correct_granted_cost(delta);
            let class = slot.class.load(Ordering::Relaxed);
            let total = self.classes.charge(class as usize, delta);
            self.hooks.cost_corrected(t, delta, total);
        }
    }

    /// Ends a queued ticket, and with `granted_too` a granted one (`Cancelled`, the client went
    /// away), or a queued one whose budget the caller's timer says has run out
    /// (`DeadlineExceeded`).
    pub(crate) fn end_by_caller(
        &self,
        ticket: Ticket,
        reason: Reason,
        granted_too: bool,
        now: u64,
    ) -> Result<Refusal, Error> {
        let now = self.monotonic(now);
        let backoff = Backoff::new();
        loop {
            let state = match self.tickets.lookup(ticket) {
                Lookup::Stale => return Err(Error::StaleTicket),
                Lookup::Live(QUEUED) => QUEUED,
                Lookup::Live(GRANTED) if granted_too => GRANTED,
                Lookup::Live(REQUEUING) => {
                    // A completer is putting it back in its queue: a few stores. Wait, so the
                    // cancel applies to the requeued ticket instead of being lost.
                    backoff.snooze();
                    continue;
                }
                Lookup::Live(_) => return Err(Error::TicketState),
            };
            let Some(fields) = self.tickets.fields(ticket) else {
                return Err(Error::StaleTicket);
            };
            // The fields are valid if the `end` CAS below succeeds (same generation).
            if !self.tickets.end(ticket, state) {
                continue; // it moved (granted, or ended by someone else): look again
            }
            let t = fields.tenant;
            let waited_ns = now.saturating_sub(fields.enqueued_at);
            if state == QUEUED {
                // Its entry stays in the queue as a dead one until the scheduler sweeps it.
                self.unreserve(t);
                self.hooks.queued(fields.downstream, -1);
            } else {
                self.end_grant(fields.cost, fields.downstream, now);
            }
            if reason == Reason::DeadlineExceeded {
                // Before the release below: the slot is still pinned by this ticket.
                self.hooks
                    .refused_after_wait(t, waited_ns, true, false, u64::from(ticket.index()));
            }
            self.tenants.release_live(t, 1, now);
            self.counters.bump(|c| {
                if reason == Reason::Cancelled {
                    &c.cancelled
                } else {
                    &c.expired
                }
            });
            self.counters.bump(|c| &c.refused[reason.index()]);
            return Ok(Refusal {
                reason,
                position: fields.position,
                waited_ns,
            });
        }
    }
}
