//! `enqueue`: a request takes a place in its tenant's queue, or is refused at once.

use super::*;

/// `live` pins `enqueue` takes on a slot: the ticket's own, and `push_queued`'s extra pin.
const ENQUEUE_PINS: u64 = 2;

/// Push attempts into a tenant's ring, each after a compaction, before a request is refused.
const PUSH_ATTEMPTS: usize = 16;

/// When a request with a Retry-After of `retry_after_ns`, queued at `now`, may be granted. Without
/// one it is 0, ready whatever the granter's clock says: callers on other threads read their own
/// clocks, and one a little behind the enqueuer's must not park a request that asked for no wait.
pub(super) fn not_before(now: u64, retry_after_ns: u64) -> u64 {
    if retry_after_ns == 0 {
        0
    } else {
        now.saturating_add(retry_after_ns).min(LATEST_NOT_BEFORE)
    }
}

/// What became of a ticket `push_queued` published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pushed {
    /// In its tenant's queue.
    Queued,
    /// Not pushed: it ended here, refused.
    Refused,
    /// Not pushed, but a cancel ended it first: it counts as queued, then cancelled.
    Cancelled,
}

impl<H: Hooks> Core<H> {
    /// Counts a request refused before it reached a tenant slot (disabled, not queueable, no
    /// tenant).
    pub(crate) fn refuse_on_arrival(&self, reason: Reason, position: u32) -> Enqueued {
        self.counters.bump(|c| &c.refused[reason.index()]);
        Enqueued::Refused(Refusal {
            reason,
            position,
            waited_ns: 0,
        })
    }

    /// Checks what a request carries (cost, downstream) before anything else happens to it.
    pub(crate) fn check_request(&self, request: &Request) -> Result<(), Error> {
        if request.cost == 0 || request.cost > MAX_COST {
            return Err(Error::InvalidArgument("cost must be in 1..=1000000"));
        }
        self.hooks.check_downstream(request.downstream)
    }

    /// Holds a request of tenant `key` in its tenant's queue, or refuses it at once with a reason
    /// and the position it would have had. `now` is monotonic ns. The caller checked the request
    /// (`check_request`).
    pub(crate) fn enqueue(
        &self,
        key: TenantKey,
        request: &Request,
        now: u64,
    ) -> Result<Enqueued, Error> {
        let now = self.monotonic(now);
        let budget = match request.timeout_ns {
            0 => self.limits.max_wait_ns,
            timeout => timeout.min(self.limits.max_wait_ns),
        };
        if self.hooks.sheds(request.downstream, budget, now) {
            return Ok(self.refuse_on_arrival(Reason::DownstreamShedding, 0));
        }
        // Two pins and a place in the tenant's queue in one RMW: one pin becomes the ticket's
        // `live` count, the other is `push_queued`'s extra pin (see there). All are released on
        // a refusal.
        let bound = self.limits.tenant_queue_capacity;
        // A tenant without a slot, or whose slot changed hands, takes the claim loop.
        let pinned = self
            .tenants
            .pin_found(key.get(), ENQUEUE_PINS, bound)
            .or_else(|| {
                let init = |t, slot: &TenantSlot| self.init_slot(t, slot, key.get());
                self.tenants
                    .pin_or_claim(key.get(), now, ENQUEUE_PINS, bound, init)
                    .ok()
            });
        let Some((t, place)) = pinned else {
            return Ok(self.refuse_on_arrival(Reason::TenantTableFull, 1));
        };
        self.hooks.request(t);
        let refuse = |reason, position| {
            self.hooks.refused_on_arrival(t);
            self.tenants.release_live(t, ENQUEUE_PINS, now);
            Ok(self.refuse_on_arrival(reason, position))
        };
        let position = match place {
            Ok(ahead) => ahead + 1,
            Err(ahead) => return refuse(Reason::TenantQueueFull, ahead.saturating_add(1)),
        };
        if !self.permits.reserve_queued() {
            self.tenants.release_spot(t);
            return refuse(Reason::QueueFull, position);
        }
        if request.retry_after_ns > budget {
            self.unreserve(t);
            return refuse(Reason::WaitExceedsBudget, position);
        }
        let Some(ticket) = self.tickets.alloc() else {
            // Unreachable: the slab holds everything queued plus everything in flight.
            self.unreserve(t);
            return refuse(Reason::QueueFull, position);
        };
        let slot = self.tenants.slot(t);
        let estimated_wait_ns = self.estimate(slot, request.retry_after_ns, position);
        self.tickets.fill(
            ticket,
            tickets::Fields {
                tenant: t,
                cost: request.cost,
                position,
                downstream: request.downstream,
                user_data: request.user_data,
                deadline: now.saturating_add(budget),
                not_before: not_before(now, request.retry_after_ns),
                enqueued_at: now,
                estimated_wait: estimated_wait_ns,
            },
        );
        debug_assert_eq!(
            slot.key.load(Ordering::Relaxed),
            key.get(),
            "a request landed in another tenant's slot"
        );
        // Counted before it is published, so a cancel's decrement never comes first.
        self.hooks.queued(request.downstream, 1);
        if self.push_queued(t, ticket, now, true) == Pushed::Refused {
            self.hooks.queued(request.downstream, -1);
            // The slot may be idle now; it is reused only after tenant_idle_ms.
            self.hooks.refused_on_arrival(t);
            self.counters
                .bump(|c| &c.refused[Reason::TenantQueueFull.index()]);
            return Ok(Enqueued::Refused(Refusal {
                reason: Reason::TenantQueueFull,
                position,
                waited_ns: 0,
            }));
        }
        self.counters.bump(|c| &c.enqueued);
        Ok(Enqueued::Queued {
            ticket,
            position,
            estimated_wait_ns,
        })
    }

    /// Sets up a slot just claimed for `key`, while the claimer holds it exclusively.
    fn init_slot(&self, t: SlotId, slot: &TenantSlot, key: u64) {
        let (weight, class) = self.weight_and_class(key);
        slot.weight.store(weight, Ordering::Relaxed);
        slot.class.store(class, Ordering::Relaxed);
        self.hooks.claimed(t);
    }

    /// `key`'s weight in the weight table and that weight's class. `set_weight` creates a
    /// weight's class before it publishes the weight; but a table read just before a newer one
    /// replaced it may name a weight whose class was freed meanwhile (no tenant and no table entry
    /// refer to it), so a missing class means "read the table again". After a few tries (only
    /// under a storm of weight changes) the default weight's class, which is never freed.
    fn weight_and_class(&self, key: u64) -> (u32, ClassId) {
        for _ in 0..4 {
            let weight = self.weights.with(|w| w.get(key));
            if let Some(class) = self.classes.find(weight) {
                return (weight, class);
            }
        }
        let weight = self.limits.default_weight;
        (weight, self.classes.find(weight).unwrap_or(0))
    }

    /// Reserves a place in the pinned tenant `t`'s queue and in the global queue (a requeue;
    /// `enqueue` takes its tenant place with its pin). Returns the position. Each bound is taken
    /// with one CAS, so neither count ever reads above its bound.
    pub(super) fn reserve(&self, t: SlotId) -> Result<u32, Refusal> {
        let refusal = |reason, ahead: u32| Refusal {
            reason,
            position: ahead.saturating_add(1),
            waited_ns: 0,
        };
        let ahead = self
            .tenants
            .take_spot(t, self.limits.tenant_queue_capacity)
            .map_err(|ahead| refusal(Reason::TenantQueueFull, ahead))?;
        if !self.permits.reserve_queued() {
            self.tenants.release_spot(t);
            return Err(refusal(Reason::QueueFull, ahead));
        }
        Ok(ahead + 1)
    }

    /// Gives back both places of a request that no longer waits (refused, cancelled, expired).
    pub(super) fn unreserve(&self, t: SlotId) {
        self.tenants.release_spot(t);
        self.permits.unreserve_queued();
    }

    /// The wait a request queued at `position` is told: its Retry-After, then the tenant's own
    /// averages ([`tenants::Waits`]), or, for a tenant with none yet, those the spacing hint
    /// gives its weight. 0 past the Retry-After while nothing has been measured.
    pub(super) fn estimate(&self, slot: &TenantSlot, retry_after_ns: u64, position: u32) -> u64 {
        // Relaxed: an estimate.
        let mut waits = tenants::Waits {
            first: slot.first_wait.load(Ordering::Relaxed),
            spacing: slot.spacing.load(Ordering::Relaxed),
        };
        if waits == tenants::Waits::default() {
            // Relaxed: a hint.
            let hint = self.spacing_hint.load(Ordering::Relaxed);
            waits = tenants::Waits::from_hint(hint, slot.effective_weight());
        }
        retry_after_ns.saturating_add(waits.at(position))
    }

    /// Publishes a reserved ticket into tenant `t`'s queue and announces it, activating the
    /// tenant if it was idle. If it cannot be pushed (see `push_entry`) the ticket ends here and
    /// every reservation is released (`Pushed::Refused`), unless a cancel ended it first
    /// (`Pushed::Cancelled`: the request was queued, then cancelled, and ended once, there).
    /// `pinned`: the caller already holds the extra pin described below (`enqueue` takes it with
    /// its own).
    pub(super) fn push_queued(&self, t: SlotId, ticket: Ticket, now: u64, pinned: bool) -> Pushed {
        // An extra pin for the window between publishing the ticket and announcing its entry: a
        // cancel may end the ticket as soon as it is published and drop the ticket's own `live`
        // count, and without this pin the slot's counts could touch 0 (idle, stealable, and the
        // active-tenant gauge decremented) with an entry about to be announced. Found by the
        // loom model tickets::requeue_vs_cancel.
        if !pinned {
            self.tenants.pin_again(t);
        }
        self.tickets.publish(ticket);
        let (pushed, turn) = self.push_entry(t, ticket);
        if !pushed {
            if turn == Turn::Received {
                // Our compaction was handed the turn: carry it on (the extra pin keeps the slot).
                self.resume(t, now);
            }
            // Only when producers that have not finished writing hold the free entries. A cancel
            // may have ended the ticket since `publish` (then the canceller released it all and
            // the request ended there, once).
            let ours = self.tickets.end(ticket, QUEUED);
            if ours {
                self.unreserve(t);
                self.tenants.release_live(t, 1, now);
            }
            self.tenants.release_live(t, 1, now); // the extra pin
            broken!(Requeue, {
                return Pushed::Refused; // Broken on purpose: refused even if a cancel ended it.
            });
            return if ours {
                Pushed::Refused
            } else {
                Pushed::Cancelled
            };
        }
        // Announces the entry and drops the extra pin in one RMW.
        let before = self.tenants.announce(t);
        if turn == Turn::Received {
            // The holder counted an entry due when it handed the turn over, so this is no
            // activation.
            debug_assert!(
                before.queued() > 0,
                "a turn handed over with nothing counted"
            );
            self.resume(t, now);
        } else if before.queued() == 0 {
            self.activate(t, now);
        }
        Pushed::Queued
    }

    /// Pushes a published ticket's handle into tenant `t`'s ring. A full ring holds dead entries
    /// (the reservation says a live place is free): compact it and try again. Returns whether it
    /// was pushed, and whether the tenant's turn was handed to the caller on the way (`ring.rs`),
    /// pushed or not.
    fn push_entry(&self, t: SlotId, ticket: Ticket) -> (bool, Turn) {
        let queue = &self.tenants.slot(t).queue;
        let backoff = Backoff::new();
        let mut turn = Turn::Unchanged;
        for _ in 0..PUSH_ATTEMPTS {
            if let Ok(pushed) = queue.push(ticket.0) {
                return (true, turn.or(pushed));
            }
            let (dropped, handed) =
                queue.compact(|handle| self.tickets.lookup(Ticket(handle)) != Lookup::Live(QUEUED));
            turn = turn.or(handed);
            if dropped == 0 {
                // Another consumer holds the ring, or producers are mid-write: let them finish.
                backoff.snooze();
            }
        }
        (false, turn)
    }
}
