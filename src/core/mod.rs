//! The scheduler core: tickets, the tenant table, weight classes, the timing wheel and permits,
//! and the operations over them (`enqueue`, `next_grant`, `complete`, `cancel`, `expire`).
//!
//! The core is complete on its own. Features (fairness indicators, weight policies, bulkheads)
//! plug in through one seam, [`Hooks`] (`hooks.rs`), whose no-op defaults compile away; the core
//! imports none of them.
//!
//! # Who holds a tenant's turn
//! At any time at most one thread holds a tenant's *turn*: the right to pop its queue, stage its
//! head and place it (in a class ring, the timing wheel, or nowhere when it goes idle). The turn
//! passes through the tenant's `queued` count (see `tenants.rs`): the enqueuer that raises it from
//! 0 activates the tenant; a granter that pops the tenant from its class ring holds it until it
//! puts it back; a wheel drainer holds it while it decides; a feature that blocked it (a full
//! bulkhead pool) holds it until it hands it back; a holder whose next entry is counted but not
//! written yet hands it to that entry's writer (`ring.rs`) rather than wait. So the staged head
//! and the DRR credit need no synchronisation of their own.
//!
//! # Hot path
//! `enqueue`, `next_grant`, `complete` and `cancel` allocate nothing and take no lock: atomics,
//! ring pushes and pops, and a read of the weight table through `ArcSwap`.

pub(crate) mod classes;
pub(crate) mod hooks;
mod lane;
mod permits;
mod ring;
mod tally;
mod tenants;
mod tickets;
mod wheel;

use crate::identity::TenantKey;
use crate::limits::{FACTOR_ONE, MAX_COST, MAX_WEIGHT, MIN_FLEET_FACTOR, MS};
use crate::sync::{AtomicBool, AtomicU64, Backoff, CachePadded, Mutex, Ordering, SharedPtr};
use crate::types::{
    Completion, Enqueued, Error, Expired, Grant, NextGrant, Outcome, Reason, Refusal, Request,
    Stats, Ticket,
};
use crate::weights::WeightTable;

pub(crate) use classes::class_count;
pub(crate) use classes::ClassView;
use classes::{ClassWeights, Classes, Start, Take};
pub(crate) use hooks::{Admit, ClassId, GrantEvent, Hooks, SlotId};
use permits::{Capacity, Permits};
#[cfg(not(loom))]
pub(crate) use ring::hand_overs;
#[cfg(loom)]
pub use ring::set_full_rings;
use ring::{Next, Turn};
use tally::Tallies;
pub(crate) use tenants::{ring_capacity, slot_count};
use tenants::{TenantSlot, TenantTable};
use tickets::{Lookup, TicketSlab, GRANTED, QUEUED, REQUEUING};
use wheel::{Wheel, LATEST_NOT_BEFORE};

#[cfg(loom)]
pub use classes::with_batched_picks;

/// Most visits a tenant can make up at once after missing turns while held.
const MAKEUP_VISITS: i64 = 8;
/// Most cost debt (from `complete` corrections) a tenant carries, in class quanta.
const DEBT_QUANTA: i64 = 8;
/// `live` pins `enqueue` takes on a slot: the ticket's own, and `push_queued`'s extra pin.
const ENQUEUE_PINS: u64 = 2;
/// The clock high-water mark is rewritten at most this often (ns).
const CLOCK_STEP: u64 = MS;
/// Push attempts into a tenant's ring, each after a compaction, before a request is refused.
const PUSH_ATTEMPTS: usize = 16;
/// Tenant slots above which a grant prefetches the next grantee's lines: below, they stay in the
/// caches anyway (2048 slots are about 1 MB with their rings).
#[cfg(not(loom))]
const PREFETCH_ABOVE: usize = 2048;
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

/// What `take_tenant` got from a class.
enum Taken {
    /// A tenant to serve, and whether it starts a new visit.
    Tenant(SlotId, bool),
    /// Another granter holds the class's tenants, longer than a spin.
    Held,
    /// Another caller keeps serving the class's visitor, this tenant.
    Busy(SlotId),
}

/// The wide slot is empty.
const NO_WIDE: u64 = u64::MAX;

/// In `staged` while a tenant's turn is handed to a writer: the tenant is counted ready in no
/// class (else the class's id is there).
const COUNTED_NOWHERE: u64 = u64::MAX;

/// The sizes and bounds the core is built with (from `Config`, validated there).
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) max_tenants: u32,
    pub(crate) tenant_queue_capacity: u32,
    pub(crate) queue_capacity: u32,
    pub(crate) max_in_flight: u32,
    pub(crate) default_weight: u32,
    pub(crate) max_wait_ns: u64,
    pub(crate) tenant_idle_ns: u64,
    pub(crate) max_weight_classes: u32,
    /// Weights whose classes exist from the start and are never freed (tiers).
    pub(crate) pinned_weights: Vec<u32>,
    /// `max_in_flight` counts cost units (seats), not requests.
    pub(crate) seats: bool,
    /// Tenants that become ready below their share are served first (`lane.rs`).
    pub(crate) light_lane: bool,
}

/// When a request with a Retry-After of `retry_after_ns`, queued at `now`, may be granted. Without
/// one it is 0, ready whatever the granter's clock says: callers on other threads read their own
/// clocks, and one a little behind the enqueuer's must not park a request that asked for no wait.
fn not_before(now: u64, retry_after_ns: u64) -> u64 {
    if retry_after_ns == 0 {
        0
    } else {
        now.saturating_add(retry_after_ns).min(LATEST_NOT_BEFORE)
    }
}

/// One tenant as fleet mode's sync loop sees it (`Engine::fleet_tenants`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetTenant {
    /// The tenant.
    pub tenant: TenantKey,
    /// Its configured weight.
    pub weight: u32,
    /// Its effective-weight factor now (1024 = full weight).
    pub factor: u32,
    /// Cost units granted here since it took its slot.
    pub served_cost: u64,
    /// Requests it has queued here now.
    pub queued: u64,
}

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

/// What became of a ticket `push_queued` published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pushed {
    /// In its tenant's queue.
    Queued,
    /// Not pushed: it ended here, refused.
    Refused,
    /// Not pushed, but a cancel ended it first: it counts as queued, then cancelled.
    Cancelled,
}

/// How a held tenant came to be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Visit {
    /// A new visit of the rotation: its DRR credit earns a quantum.
    New,
    /// Its visit goes on (its credit covered the head before this one).
    Continues,
    /// A visit through the light-tenant lane (a new one, counted as a lane grant).
    Lane,
}

impl Visit {
    fn of(new_visit: bool) -> Visit {
        if new_visit {
            Visit::New
        } else {
            Visit::Continues
        }
    }
}

/// What serving one held tenant produced.
enum Served {
    Grant(Grant, u32),
    Expired(Expired),
    /// The tenant had nothing to grant now (parked, idle, blocked): pick again.
    Nothing,
    /// Its DRR visit was spent (credit short of its head's cost): the class's next tenant may
    /// use the pick.
    Spent,
    /// Every permit was out when it came to granting: the tenant was put back.
    AtCapacity,
    /// Its head needs every permit and some were out: the tenant waits in the wide slot.
    Held,
}

/// What became of a turn holder's next entry (`Core::stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Staging {
    /// Staged: the caller holds the turn with a head to place.
    Staged,
    /// Nothing left: the tenant went idle and the turn is given up.
    Idle,
    /// Not written yet: its writer holds the turn now, and will place the tenant.
    HandedOver,
}

/// What serving the wide slot came to.
enum Wide {
    /// `next_grant`'s answer.
    Answer(NextGrant),
    /// Nothing granted, the permits free again: pick as usual.
    Pick,
    /// A wide request was held again: look again.
    Again,
}

/// The scheduler core, with the features `H` plugged into its seam.
pub(crate) struct Core<H> {
    limits: Limits,
    tickets: TicketSlab,
    tenants: TenantTable,
    classes: Classes,
    wheel: Wheel,
    weights: SharedPtr<WeightTable>,
    /// Serialises weight-table writers and class allocation (never taken on the hot path).
    admin: Mutex<()>,
    /// Requests queued and grants out: the global bound and the in-flight permits.
    permits: Permits,
    /// The tenant of a wide request waiting for every permit (seats on): `class << 32 |
    /// tenant`, or `NO_WIDE` (`permits.rs` explains the hand-off).
    wide: CachePadded<AtomicU64>,
    /// With seats on, the permit word counts seats: this counts the grants out (`stats`).
    grants_out: CachePadded<AtomicU64>,
    /// Whether tenants that become ready may enter the light-tenant lane: the config's switch,
    /// cleared for good once fleet mode schedules a tenant at an effective weight (lane grants
    /// would bypass the weights fleet mode steers by).
    lane_open: AtomicBool,
    /// The latest `now` seen, kept to `CLOCK_STEP`: a clock that goes backwards is held here.
    clock: CachePadded<AtomicU64>,
    /// A recent tenant's grant spacing times its effective weight (`tenants::Waits`): what a
    /// tenant with no measured waits of its own is estimated from.
    spacing_hint: CachePadded<AtomicU64>,
    counters: Tallies,
    hooks: H,
}

impl<H: Hooks> Core<H> {
    /// Builds the core: every table is allocated here, none later.
    pub(crate) fn new(limits: Limits, hooks: H) -> Core<H> {
        let slots = slot_count(limits.max_tenants as usize);
        let classes = Classes::new(class_count(limits.max_weight_classes), slots);
        classes.pin(limits.default_weight);
        for &weight in &limits.pinned_weights {
            classes.pin(weight); // validated to fit max_weight_classes
        }
        Core {
            tickets: TicketSlab::new(
                limits.queue_capacity as usize + limits.max_in_flight as usize,
            ),
            tenants: TenantTable::new(
                limits.max_tenants as usize,
                limits.tenant_queue_capacity as usize,
                limits.tenant_idle_ns,
            ),
            classes,
            wheel: Wheel::new(0),
            weights: SharedPtr::new(WeightTable::new(limits.default_weight)),
            admin: Mutex::new(()),
            permits: Permits::new(limits.queue_capacity, limits.max_in_flight),
            wide: CachePadded::new(AtomicU64::new(NO_WIDE)),
            grants_out: CachePadded::new(AtomicU64::new(0)),
            spacing_hint: CachePadded::new(AtomicU64::new(0)),
            lane_open: AtomicBool::new(limits.light_lane),
            clock: CachePadded::new(AtomicU64::new(0)),
            counters: Tallies::new(),
            limits,
            hooks,
        }
    }

    /// The features plugged in.
    pub(crate) fn hooks(&self) -> &H {
        &self.hooks
    }

    /// Makes the core's view of time monotonic: a `now` behind the high-water mark is raised
    /// to it. The mark is rewritten only when time moved `CLOCK_STEP` on, so the hot path
    /// mostly reads a shared line rather than writing it.
    fn monotonic(&self, now: u64) -> u64 {
        // Relaxed: the mark orders nothing; it only bounds how far back `now` may go.
        let mark = self.clock.load(Ordering::Relaxed);
        if now < mark {
            return mark;
        }
        if now - mark >= CLOCK_STEP {
            self.clock.fetch_max(now, Ordering::Relaxed);
        }
        now
    }

    // ---------------------------------------------------------------- enqueue

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
            self.tenants.release_place(t);
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
    fn reserve(&self, t: SlotId) -> Result<u32, Refusal> {
        let refusal = |reason, ahead: u32| Refusal {
            reason,
            position: ahead.saturating_add(1),
            waited_ns: 0,
        };
        let ahead = self
            .tenants
            .take_place(t, self.limits.tenant_queue_capacity)
            .map_err(|ahead| refusal(Reason::TenantQueueFull, ahead))?;
        if !self.permits.reserve_queued() {
            self.tenants.release_place(t);
            return Err(refusal(Reason::QueueFull, ahead));
        }
        Ok(ahead + 1)
    }

    /// Gives back both places of a request that no longer waits (refused, cancelled, expired).
    fn unreserve(&self, t: SlotId) {
        self.tenants.release_place(t);
        self.permits.unreserve_queued();
    }

    /// The wait a request queued at `position` is told: its Retry-After, then the tenant's own
    /// averages ([`tenants::Waits`]), or, for a tenant with none yet, those the spacing hint
    /// gives its weight. 0 past the Retry-After while nothing has been measured.
    fn estimate(&self, slot: &TenantSlot, retry_after_ns: u64, position: u32) -> u64 {
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
    fn push_queued(&self, t: SlotId, ticket: Ticket, now: u64, pinned: bool) -> Pushed {
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
            #[cfg(fairq_broken)]
            if crate::broken::on(crate::broken::Break::Requeue) {
                return Pushed::Refused; // Broken on purpose: refused even if a cancel ended it.
            }
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

    /// The caller raised `queued` from 0 and so holds the tenant's turn: stage the head, place it.
    fn activate(&self, t: SlotId, now: u64) {
        if self.stage(t, None, now) == Staging::Staged {
            self.place_staged(t, None, now);
        }
    }

    /// The caller was handed tenant `t`'s turn by a holder that found its next entry not written
    /// yet (`ring.rs`): it does what that holder would have done, from staging that entry on.
    fn resume(&self, t: SlotId, now: u64) {
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
    fn stage(&self, t: SlotId, counted_in: Option<ClassId>, now: u64) -> Staging {
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
    fn place(&self, t: SlotId, counted_in: Option<ClassId>, visit_continues: bool, now: u64) {
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
        #[cfg(fairq_broken)]
        let class = match counted_in {
            // Broken on purpose: keep the tenant in the class it was taken from.
            Some(c) if crate::broken::on(crate::broken::Break::Move) => c,
            _ => class,
        };
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
    fn park(&self, t: SlotId, not_before: u64, now: u64) {
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
    fn leave_ready(&self, t: SlotId, class: ClassId, now: u64) {
        let slot = self.tenants.slot(t);
        if let Some(boosted) = self.hooks.left_ready(t, slot.effective_weight(), now) {
            self.classes.add_extra(boosted, -1);
        }
        self.classes.leave(class, slot);
    }

    // ---------------------------------------------------------------- next_grant

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
                Take::Owned(visitor) => self.classes.steal(class as usize, visitor),
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
                    Served::Held => return None,
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
                    Taken::Tenant(t, new_visit)
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
                    Taken::Tenant(t, new_visit) => (t, new_visit),
                    Taken::Held => break None,
                    Taken::Busy(t) => {
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
                Some(Served::Held) => {
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
                Served::Held => return Some(None),
                // Swept, parked, blocked or spent: the tenant left the lane; try the next one.
                Served::Nothing | Served::Spent => {}
            }
        }
        None
    }

    /// Counts a grant of `cost` in `class` on the lane's clock and, with the lane on, charges
    /// it to tenant `slot`. During the start-up (`classes.rs`, "The first window"), a grant in
    /// the first window is shared against every class present, and a lane grant right after it
    /// pays its SWRR step, so the start-up's lane entries take nothing from the split.
    fn record_served(
        &self,
        slot: &TenantSlot,
        class: ClassId,
        cost: u32,
        mut total: i64,
        visit: Visit,
        start: Start,
    ) {
        match start {
            Start::Open | Start::Waiting => total = total.max(self.classes.present_total()),
            Start::Charged if visit == Visit::Lane => {
                self.classes.charge(class as usize, i64::from(cost));
            }
            _ => {}
        }
        if self.limits.light_lane {
            lane::charge(slot, cost, total, self.classes.served());
            self.classes.lane().granted(cost, visit == Visit::Lane);
        }
        self.classes.record_served(class, cost);
        if start != Start::Done {
            let window = self.permits.max();
            let limit = if start == Start::Charged {
                2 * window
            } else {
                window
            };
            if self.classes.served() > limit {
                self.classes.end_start();
            }
        }
    }

    /// Permits ran out: if requests wait for the first time, the next grant charges the first
    /// window's grants.
    #[inline]
    fn note_wait(&self) {
        if self.classes.start() == Start::Open && self.permits.load().0 > 0 {
            self.classes.first_wait();
        }
    }

    /// Takes a tenant from the picked class. When the ring is empty but the class still counts
    /// ready tenants, another granter holds them for a few dozen ns: spin briefly (never yield,
    /// never sleep) rather than serve another class out of turn, which would skew shares when
    /// tenants are few. Gives up after `HOLD_SPIN_ROUNDS`, so a preempted holder blocks nobody.
    /// A visitor another caller put back is, with `leave_to_owner`, left to it while that caller
    /// keeps taking it again (`Taken::Busy`), and taken once it has stayed put for
    /// `OWNED_WAIT_HINTS`; without, it is taken at once.
    fn take_tenant(&self, class: usize, leave_to_owner: bool) -> Taken {
        for round in 0..=HOLD_SPIN_ROUNDS {
            match self.classes.take(class) {
                Take::Tenant(t, new_visit) => return Taken::Tenant(t, new_visit),
                Take::Owned(visitor) => {
                    if leave_to_owner {
                        return self.wait_for_visitor(class, visitor);
                    }
                    if let Some((t, new_visit)) = self.classes.steal(class, visitor) {
                        return Taken::Tenant(t, new_visit);
                    }
                    continue; // taken or replaced meanwhile: look again
                }
                Take::Empty => {}
            }
            if round == HOLD_SPIN_ROUNDS || self.classes.ready(class) <= 0 {
                return Taken::Held;
            }
            crate::sync::spin(1 << round);
        }
        Taken::Held
    }

    /// `visitor`, the tenant of a class holding most of the pick's weight, was left there by a
    /// caller on another thread: waits `OWNED_WAIT_HINTS`, then takes it if it is still there,
    /// unchanged (that caller went away), or answers `Busy` (that caller came back for it and is
    /// serving it).
    fn wait_for_visitor(&self, class: usize, visitor: classes::Visitor) -> Taken {
        crate::sync::spin(OWNED_WAIT_HINTS);
        match self.classes.steal(class, visitor) {
            Some((t, new_visit)) => Taken::Tenant(t, new_visit),
            None => Taken::Busy(visitor.tenant()),
        }
    }

    /// The permits a grant of `cost` takes: 1, or with seats on its cost (at least 1), at most
    /// all of them.
    #[inline]
    fn width(&self, cost: u32) -> u64 {
        if self.limits.seats {
            u64::from(cost).clamp(1, self.permits.max())
        } else {
            1
        }
    }

    /// Holds tenant `t` of `class`, whose head needs every permit, in the wide slot and stops
    /// other grants until the permits out come back. False when another wide request waits
    /// already (then `t` goes back to its class and tries again later).
    fn hold_wide(&self, class: ClassId, t: SlotId) -> bool {
        let held = u64::from(class) << 32 | u64::from(t);
        // Release: the holder's writes to the tenant slot happen before the next holder's take
        // (`serve_wide`), as for a ring push.
        if self
            .wide
            .compare_exchange(NO_WIDE, held, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.permits.wait_wide();
        true
    }

    /// A wide request waits: once no permit is out, takes them all and serves its tenant
    /// (charged its SWRR steps, as a pick would have); until then, `AtCapacity`.
    fn serve_wide(&self, now: u64) -> Wide {
        let Some(seats) = self.permits.reserve_wide() else {
            return Wide::Answer(NextGrant::AtCapacity);
        };
        // Acquire: pairs with `hold_wide`'s Release (`reserve_wide`'s Acquire has seen the bit
        // raised after that store).
        let held = self.wide.swap(NO_WIDE, Ordering::AcqRel);
        debug_assert!(held != NO_WIDE, "the wide bit without a wide tenant");
        if held == NO_WIDE {
            self.permits.ungrant(seats);
            return Wide::Pick;
        }
        let (class, t) = ((held >> 32) as ClassId, held as SlotId);
        let total = self.classes.view().total();
        let mut reserved = Some(seats);
        let served = self.serve(t, class, Visit::Continues, total, now, &mut reserved);
        if let Some(seats) = reserved {
            // Not granted with them (its head was cancelled or expired meanwhile).
            self.permits.ungrant(seats);
        }
        match served {
            Served::Grant(grant, cost) => {
                self.classes.charge(class as usize, i64::from(cost.max(1)));
                Wide::Answer(NextGrant::Granted(grant))
            }
            Served::Expired(expired) => Wide::Answer(NextGrant::Expired(expired)),
            Served::AtCapacity => Wide::Answer(NextGrant::AtCapacity),
            Served::Held => Wide::Again,
            Served::Nothing | Served::Spent => Wide::Pick,
        }
    }

    /// Serves the tenant `t`, just taken from class `class`: sweeps dead heads, reports an expired
    /// one, parks a not-ready one, else grants its head if its DRR credit covers the cost.
    /// `total` is the SWRR weight of the pick (the ready weight), for the fairness indicators.
    /// `reserved`: permits already taken for this tenant's head (a wide request's, from
    /// `serve_wide`); a grant uses them, and what is left in it the caller gives back.
    fn serve(
        &self,
        t: SlotId,
        class: ClassId,
        visit: Visit,
        total: i64,
        now: u64,
        reserved: &mut Option<u64>,
    ) -> Served {
        let slot = self.tenants.slot(t);
        let mut new_visit = visit != Visit::Continues;
        loop {
            let head = Ticket(slot.staged.load(Ordering::Relaxed));
            let Some(fields) = self.tickets.fields(head) else {
                debug_assert!(false, "staged handle out of range");
                return Served::Nothing;
            };
            if self.tickets.lookup(head) != Lookup::Live(QUEUED) {
                // Cancelled: sweep the tombstone.
                match self.next_head(t, false, class, now) {
                    Staging::Staged => continue,
                    Staging::Idle => self.leave_ready(t, class, now),
                    Staging::HandedOver => {}
                }
                return Served::Nothing;
            }
            if now > fields.deadline {
                let Some(expired) = self.expire_head(t, head, now) else {
                    continue; // a cancel won; the next round sweeps it
                };
                self.after_turn(t, class, false, now);
                return Served::Expired(expired);
            }
            if fields.not_before > now {
                self.leave_ready(t, class, now);
                self.park(t, fields.not_before, now);
                return Served::Nothing;
            }
            if self.hooks.admit(fields.downstream, now) == Admit::No {
                // Its bulkhead pool is full: it waits there, uncharged, its turn handed over.
                self.leave_ready(t, class, now);
                if let Some(u) = self.hooks.block(t, fields.downstream, fields.deadline) {
                    self.place(u, None, false, now);
                }
                return Served::Nothing;
            }
            let cost = fields.cost;
            let mut credit = slot.credit.load(Ordering::Relaxed);
            if new_visit {
                if slot.debt.load(Ordering::Relaxed) != 0 {
                    let debt = slot.debt.swap(0, Ordering::Relaxed);
                    credit = credit.saturating_sub(debt.saturating_mul(i64::from(FACTOR_ONE)));
                }
                let quantum = i64::from(self.classes.quantum(class, cost));
                // Visits it missed while another granter held it are made up (a few at most). A
                // lane visit is outside the ring's turns: it neither counts as one nor makes any
                // up, or the ring's tenants would take the lane's visits for missed turns.
                let owed = if visit == Visit::Lane {
                    self.classes.lane_visit(class, &slot.last_visit)
                } else {
                    self.classes
                        .start_visit(class, &slot.last_visit, MAKEUP_VISITS)
                };
                // A tenant at a reduced effective weight (fleet mode) earns credit in proportion.
                let earned = quantum * owed * i64::from(slot.factor.load(Ordering::Relaxed));
                // Debt is capped at DEBT_QUANTA quanta, so a few visits always cover the head.
                credit = credit.max(-DEBT_QUANTA * quantum * i64::from(FACTOR_ONE)) + earned;
                slot.credit.store(credit, Ordering::Relaxed);
                new_visit = false;
            }
            if credit < i64::from(cost) * i64::from(FACTOR_ONE) {
                // This visit is spent; the next one adds a quantum.
                if let Some(u) = self.hooks.unadmit(fields.downstream) {
                    self.place(u, None, false, now);
                }
                self.classes.put_back(class, t, false, slot);
                return Served::Spent;
            }
            // The permit: one CAS (the request's global place stays counted until it ends).
            let width = self.width(cost);
            let permitted = match reserved.take() {
                Some(seats) => {
                    self.permits.trim_reserved(seats, width);
                    Ok(())
                }
                None => self.permits.grant(width),
            };
            if permitted.is_err() {
                if let Some(u) = self.hooks.unadmit(fields.downstream) {
                    self.place(u, None, false, now);
                }
                if width == self.permits.max() && self.limits.seats && self.hold_wide(class, t) {
                    // It needs every permit: it waits for them in the wide slot, and no other
                    // grant starts meanwhile.
                    #[cfg(fairq_broken)]
                    if crate::broken::on(crate::broken::Break::Held) {
                        // Broken on purpose: answers at once, though the grants out may have
                        // ended before the bit was raised.
                        return Served::AtCapacity;
                    }
                    return Served::Held;
                }
                // Its credit covers the head: it stays next in its class.
                self.classes.put_back(class, t, true, slot);
                self.note_wait();
                return Served::AtCapacity;
            }
            if self.limits.seats {
                // Relaxed: a gauge. Counted before the ticket can be ended (a cancel may end it
                // the moment it is granted), so the count never reads below zero.
                self.grants_out.fetch_add(1, Ordering::Relaxed);
            }
            if !self.tickets.transition(head, QUEUED, GRANTED) {
                // A cancel won, and gave the request's place back itself.
                self.permits.ungrant(width);
                if self.limits.seats {
                    // Relaxed: a gauge.
                    self.grants_out.fetch_sub(1, Ordering::Relaxed);
                }
                if let Some(u) = self.hooks.unadmit(fields.downstream) {
                    self.place(u, None, false, now);
                }
                continue; // the next round sweeps it
            }
            slot.credit.store(
                credit - i64::from(cost) * i64::from(FACTOR_ONE),
                Ordering::Relaxed,
            );
            // Its place in the tenant's queue goes back in `after_turn`, with its entry (the
            // global place when the grant ends).
            self.hooks.queued(fields.downstream, -1);
            let ready_at = fields.not_before.max(fields.enqueued_at);
            if let Some(spacing) = slot.record_grant(cost, now, ready_at) {
                // Relaxed: a hint for estimates, written by one grant in 64 of a tenant.
                let hint = u64::from(spacing).saturating_mul(slot.effective_weight());
                self.spacing_hint.store(hint, Ordering::Relaxed);
            }
            if visit == Visit::Lane {
                slot.record_lane_grant();
            }
            let start = self.classes.start();
            if self.limits.light_lane || start != Start::Done {
                self.record_served(slot, class, cost, total, visit, start);
            }
            let waited_ns = now.saturating_sub(fields.enqueued_at);
            let event = GrantEvent {
                slot: t,
                class,
                weight: slot.effective_weight(),
                cost,
                total,
                waited_ns,
                now,
            };
            if let Some(boosted) = self.hooks.granted(&event) {
                self.classes.add_extra(boosted, -1);
            }
            let grant = Grant {
                ticket: head,
                tenant: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
                user_data: fields.user_data,
                cost,
                waited_ns,
                position: fields.position,
                estimated_wait_ns: fields.estimated_wait,
                remaining_budget_ns: fields.deadline.saturating_sub(now),
            };
            if visit == Visit::Lane && self.requeue_in_lane(t, class, now) {
                return Served::Grant(grant, cost);
            }
            self.after_turn(t, class, true, now);
            // Hints for a prefetch, which is a no-op under loom (their atomics would only
            // multiply the interleavings the models explore), and pays only when the tenant table
            // outgrows the caches.
            #[cfg(not(loom))]
            if self.tenants.len() > PREFETCH_ABOVE {
                self.prefetch_successor(t, class);
            }
            return Served::Grant(grant, cost);
        }
    }

    /// Round robin makes the next grant in a class predictable: the tenant granted after `t`
    /// last round. Records `t` (and its staged head) as the successor of the class's previous
    /// grantee, whose lines are still warm, and prefetches the lines of `t`'s own successor and of
    /// its head ticket, which with thousands of tenants are cache misses otherwise. Hints only:
    /// Relaxed, stored only when they change, and a stale one costs a wasted prefetch.
    #[cfg(not(loom))]
    fn prefetch_successor(&self, t: SlotId, class: ClassId) {
        let slot = self.tenants.slot(t);
        let before = self.classes.swap_last_granted(class, t);
        if before != t && (before as usize) < self.tenants.len() {
            let previous = self.tenants.slot(before);
            let head = Ticket(slot.staged.load(Ordering::Relaxed)).index();
            previous.set_successor(t, head);
        }
        let (next, next_head) = slot.successor();
        if (next as usize) < self.tenants.len() {
            self.tenants.slot(next).prefetch();
            self.tickets.prefetch(next_head);
            self.hooks.prefetch(next);
        }
    }

    /// The holder of tenant `t`, counted ready in `class`, is done with the staged head: stage
    /// the next one if any. `granted`: the head was granted, so its place in the tenant's queue
    /// goes back with its entry.
    fn next_head(&self, t: SlotId, granted: bool, class: ClassId, now: u64) -> Staging {
        if self.tenants.release_entry(t, granted, now).queued() <= 1 {
            return Staging::Idle;
        }
        self.stage(t, Some(class), now)
    }

    /// Holder: whether tenant `t`, taken by the rotation while the lane holds tenants, goes
    /// before the lane (`lane::due`) at virtual time `now_v`, the ready weight being `total`.
    fn due(&self, t: SlotId, now_v: u64, total: i64) -> bool {
        let slot = self.tenants.slot(t);
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        let cost = self.tickets.fields(head).map_or(1, |fields| fields.cost);
        let (streak, depth) = (self.classes.lane().streak(), self.tenants.depth(t));
        lane::due(slot, cost, total, now_v, streak, depth)
    }

    /// After a lane grant: a tenant with a ready head that is still within its share goes back
    /// to the lane's tail instead of its class's ring. True when it was placed (or went idle).
    fn requeue_in_lane(&self, t: SlotId, class: ClassId, now: u64) -> bool {
        let slot = self.tenants.slot(t);
        let now_v = self.classes.served();
        if !(self.lane_open.load(Ordering::Relaxed) && lane::within_share(slot, now_v)) {
            return false;
        }
        // Each lane visit earns a quantum and grants once: what it left unspent is dropped, as
        // DRR drops an emptied flow's deficit, or lane visits would bank credit for the ring.
        // Relaxed: the turn holder's.
        let credit = slot.credit.load(Ordering::Relaxed);
        slot.credit.store(credit.min(0), Ordering::Relaxed);
        match self.next_head(t, true, class, now) {
            Staging::Staged => {}
            Staging::Idle => {
                self.leave_ready(t, class, now);
                return true;
            }
            Staging::HandedOver => return true,
        }
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        if self.tickets.not_before(head) > now || slot.class.load(Ordering::Relaxed) != class {
            self.place(t, Some(class), false, now);
        } else {
            self.classes.lane_push(class, t);
        }
        true
    }

    /// After a grant or an expiry: stage the next head and place the tenant, or let it go idle.
    fn after_turn(&self, t: SlotId, class: ClassId, granted: bool, now: u64) {
        match self.next_head(t, granted, class, now) {
            Staging::Staged => {}
            Staging::Idle => return self.leave_ready(t, class, now),
            Staging::HandedOver => return,
        }
        let slot = self.tenants.slot(t);
        let visit_continues = granted && {
            let next_cost = self
                .tickets
                .fields(Ticket(slot.staged.load(Ordering::Relaxed)))
                .map_or(u32::MAX, |f| f.cost);
            slot.credit.load(Ordering::Relaxed) >= i64::from(next_cost) * i64::from(FACTOR_ONE)
        };
        self.place(t, Some(class), visit_continues, now);
    }

    /// Ends a queued head whose deadline passed. `None` if a cancel ended it first.
    fn expire_head(&self, t: SlotId, head: Ticket, now: u64) -> Option<Expired> {
        let fields = self.tickets.fields(head)?;
        if !self.tickets.end(head, QUEUED) {
            return None;
        }
        self.unreserve(t);
        self.hooks.queued(fields.downstream, -1);
        let waited_ns = now.saturating_sub(fields.enqueued_at);
        // Before the release below: the slot is still pinned by this ticket.
        self.hooks
            .refused_after_wait(t, waited_ns, true, true, u64::from(head.index()));
        let key = self.tenants.slot(t).key.load(Ordering::Relaxed);
        self.tenants.release_live(t, 1, now);
        self.counters.bump(|c| &c.expired);
        self.counters
            .bump(|c| &c.refused[Reason::DeadlineExceeded.index()]);
        Some(Expired {
            ticket: head,
            tenant: TenantKey::from_hash(key),
            user_data: fields.user_data,
            refusal: Refusal {
                reason: Reason::DeadlineExceeded,
                position: fields.position,
                waited_ns,
            },
        })
    }

    // ---------------------------------------------------------------- complete / cancel

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

    // ---------------------------------------------------------------- weights

    /// Sets the weight of a tenant by key. A live tenant takes it at its next turn.
    pub(crate) fn set_weight_key(&self, key: TenantKey, weight: u32) -> Result<(), Error> {
        if weight == 0 || weight > MAX_WEIGHT {
            return Err(Error::InvalidArgument("weight must be in 1..=10000"));
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let next = self.weights.with(|w| w.with_entry(key.get(), weight));
        if !self.within_class_limit(&next) {
            return Err(Error::TooManyWeightClasses);
        }
        let class = self
            .class_for(weight, Some(&next))
            .ok_or(Error::TooManyWeightClasses)?;
        self.weights.store(next);
        self.apply_weight(key.get(), weight, class);
        Ok(())
    }

    /// Replaces the whole weight table (hashed keys) and the default weight, at run time.
    pub(crate) fn replace_weight_keys(
        &self,
        entries: &[(u64, u32)],
        default_weight: u32,
    ) -> Result<(), Error> {
        let valid = |w: u32| (1..=MAX_WEIGHT).contains(&w);
        if !valid(default_weight) || entries.iter().any(|&(_, w)| !valid(w)) {
            return Err(Error::InvalidArgument("weight must be in 1..=10000"));
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let next = WeightTable::from_entries(entries.iter().copied(), default_weight);
        let mut distinct: Vec<u32> = next.weights().collect();
        distinct.sort_unstable();
        distinct.dedup();
        if !self.within_class_limit(&next) {
            return Err(Error::TooManyWeightClasses);
        }
        if !self.classes.can_hold(&distinct) {
            self.classes.collect(self.referenced_classes(Some(&next)));
            if !self.classes.can_hold(&distinct) {
                return Err(Error::TooManyWeightClasses);
            }
        }
        for &w in &distinct {
            self.classes.ensure(w);
        }
        self.weights.store(next);
        for index in 0..self.tenants.len() as SlotId {
            let key = self.tenants.slot(index).key.load(Ordering::Relaxed);
            if key != 0 {
                let w = self.weights.with(|table| table.get(key));
                let class = self.classes.find(w).unwrap_or(0);
                self.apply_weight(key, w, class);
            }
        }
        Ok(())
    }

    /// Whether `table`'s distinct weights, with the pinned ones (tiers), fit `max_weight_classes`.
    fn within_class_limit(&self, table: &WeightTable) -> bool {
        let mut distinct: Vec<u32> = table
            .weights()
            .chain(self.limits.pinned_weights.iter().copied())
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        distinct.len() <= self.limits.max_weight_classes as usize
    }

    /// The class of `weight`, freeing the classes no one refers to any more if every class is
    /// taken (`next`: the weight table about to be published, whose weights must keep theirs).
    /// Admin lock held.
    fn class_for(&self, weight: u32, next: Option<&WeightTable>) -> Option<ClassId> {
        if let Some(class) = self.classes.ensure(weight) {
            return Some(class);
        }
        self.classes.collect(self.referenced_classes(next));
        self.classes.ensure(weight)
    }

    /// A bit for every class something refers to: a tenant slot's class, a weight of `next` (the
    /// table about to be published) or else of the table in use. O(slots + table entries); admin
    /// lock held.
    fn referenced_classes(&self, next: Option<&WeightTable>) -> u64 {
        let mut referenced = 0u64;
        for slot in self.tenants.slots() {
            // Relaxed: admin lock held; a slot being claimed reads the weight table, whose
            // weights are kept below.
            if slot.key.load(Ordering::Relaxed) != 0 {
                referenced |= 1 << slot.class.load(Ordering::Relaxed);
            }
        }
        let mut keep = |table: &WeightTable| {
            for w in table.weights() {
                if let Some(c) = self.classes.find(w) {
                    referenced |= 1 << c;
                }
            }
        };
        // The table about to replace the current one, else the current one: a weight only the
        // outgoing table has may be freed now (see `weight_and_class`).
        match next {
            Some(next) => keep(next),
            None => self.weights.with(&mut keep),
        }
        referenced
    }

    fn apply_weight(&self, key: u64, weight: u32, class: ClassId) {
        if let Some(t) = self.tenants.pin_existing(key) {
            let slot = self.tenants.slot(t);
            slot.weight.store(weight, Ordering::Relaxed);
            slot.class.store(class, Ordering::Relaxed);
            self.tenants.release_live(t, 1, 0);
        }
    }

    /// The weight a tenant gets now: its live slot's, else the table's.
    pub(crate) fn weight_of(&self, key: TenantKey) -> u32 {
        if let Some(t) = self.tenants.pin_existing(key.get()) {
            let w = self.tenants.slot(t).weight.load(Ordering::Relaxed);
            self.tenants.release_live(t, 1, 0);
            return w;
        }
        self.weights.with(|w| w.get(key.get()))
    }

    /// Schedules a live tenant at effective weight `weight × factor / 1024` (fleet mode).
    /// Returns whether the tenant holds a slot.
    pub(crate) fn set_fleet_factor(&self, key: TenantKey, factor: u32) -> Result<bool, Error> {
        if !(MIN_FLEET_FACTOR..=FACTOR_ONE).contains(&factor) {
            return Err(Error::InvalidArgument("fleet factor must be in 20..=1024"));
        }
        let Some(t) = self.tenants.pin_existing(key.get()) else {
            return Ok(false);
        };
        // Relaxed: the tenant's turn holder reads it at its next placement or visit.
        self.tenants.slot(t).factor.store(factor, Ordering::Relaxed);
        if self.lane_open.load(Ordering::Relaxed) {
            // Relaxed: as above.
            self.lane_open.store(false, Ordering::Relaxed);
        }
        self.tenants.release_live(t, 1, 0);
        Ok(true)
    }

    // ---------------------------------------------------------------- for features

    /// Moves a live tenant to the class of `weight` (the feedback controller's nudge), creating
    /// the class if there is room. Returns whether it moved. Off the hot path.
    pub(crate) fn move_to_class(&self, key: TenantKey, weight: u32) -> bool {
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let Some(class) = self.class_for(weight, None) else {
            return false; // no weight class left for it
        };
        let Some(t) = self.tenants.pin_existing(key.get()) else {
            return false;
        };
        // Relaxed: the tenant's turn holder picks the new class up at its next placement, like
        // a `set_weight`.
        self.tenants.slot(t).class.store(class, Ordering::Relaxed);
        self.tenants.release_live(t, 1, 0);
        true
    }

    /// Adds `delta` to a class's extra SWRR weight (the wait boost).
    pub(crate) fn add_class_extra(&self, class: ClassId, delta: i64) {
        self.classes.add_extra(class, delta);
    }

    /// What a feature reads of the tenant in slot `t` now, if the slot holds one. Not pinned: a
    /// slot reused meanwhile may show a mixed snapshot for that one tenant.
    pub(crate) fn tenant_view(&self, t: SlotId) -> Option<TenantView> {
        let slot = self.tenants.get(t)?;
        // Relaxed: a snapshot of statistics.
        let key = slot.key.load(Ordering::Relaxed);
        if key == 0 {
            return None;
        }
        let class = slot.class.load(Ordering::Relaxed);
        Some(TenantView {
            slot: t,
            key: TenantKey::from_hash(key),
            weight: slot.weight.load(Ordering::Relaxed),
            class_weight: self.classes.weight(class),
            class,
            effective_weight: slot.effective_weight(),
            granted: slot.granted(),
            granted_cost: slot.granted_cost(),
        })
    }

    /// Runs `f` on the view of `key`'s slot, pinned so it cannot be reused meanwhile.
    pub(crate) fn with_tenant<R>(
        &self,
        key: TenantKey,
        f: impl FnOnce(TenantView) -> R,
    ) -> Option<R> {
        let t = self.tenants.pin_existing(key.get())?;
        let out = self.tenant_view(t).map(f);
        self.tenants.release_live(t, 1, 0);
        out
    }

    /// Tenant slots (indices `0..slot_count()`).
    pub(crate) fn slot_count(&self) -> usize {
        self.tenants.len()
    }

    // ---------------------------------------------------------------- reading

    /// Every tenant holding a slot (off the hot path: it scans the table).
    pub(crate) fn fleet_tenants(&self, out: &mut Vec<FleetTenant>) {
        for index in 0..self.tenants.len() as SlotId {
            let Some(t) = self.tenants.pin_index(index) else {
                continue;
            };
            let slot = self.tenants.slot(t);
            // Relaxed: a snapshot of counters.
            out.push(FleetTenant {
                tenant: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
                weight: slot.weight.load(Ordering::Relaxed),
                factor: slot.factor.load(Ordering::Relaxed),
                served_cost: slot.granted_cost(),
                queued: self.tenants.depth(t),
            });
            self.tenants.release_live(t, 1, 0);
        }
    }

    /// Places tenants a feature hands back outside the hooks' own returns (load shedding's
    /// pool limit grew, so blocked tenants may be granted without a release to wake them).
    pub(crate) fn place_unblocked(&self, slots: impl IntoIterator<Item = SlotId>, now: u64) {
        let now = self.monotonic(now);
        for t in slots {
            self.place(t, None, false, now);
        }
    }

    /// When a parked or blocked tenant may next become ready (monotonic ns).
    pub(crate) fn next_wakeup_ns(&self) -> Option<u64> {
        match (self.wheel.next_tick_ns(), self.hooks.wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A snapshot of gauges and counters. Reads every tenant slot (O(`max_tenants`)).
    /// With seats on, the permits the grants out hold now.
    pub(crate) fn seats_in_flight(&self) -> Option<u64> {
        self.limits.seats.then(|| self.permits.load().1)
    }

    /// The gauges of `stats` (queued, in flight, tenants), the counters left at zero.
    pub(crate) fn load(&self) -> Stats {
        let (queued, mut in_flight) = self.permits.load();
        if self.limits.seats {
            // Relaxed: a gauge (the permit word counts seats).
            in_flight = self.grants_out.load(Ordering::Relaxed);
        }
        Stats {
            queued,
            in_flight,
            tenants: self.tenants.active(),
            ..Stats::default()
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.load();
        // Grants are counted per slot by the tenant's turn holder (no shared RMW per grant);
        // the slot's lifetime total is never reset, so the sum only grows.
        for slot in self.tenants.slots() {
            stats.granted += slot.grants_total();
            stats.lane_granted += slot.lane_grants_total();
        }
        self.counters.each(|line| {
            // Relaxed: a snapshot of statistics.
            let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
            stats.enqueued += get(&line.enqueued);
            stats.completed += get(&line.completed);
            stats.requeued += get(&line.requeued);
            stats.cancelled += get(&line.cancelled);
            stats.expired += get(&line.expired);
            stats.refused_after_wait += get(&line.refused_after_wait);
            for (total, c) in stats.refused.iter_mut().zip(line.refused.iter()) {
                *total += get(c);
            }
        });
        stats
    }

    /// Tests and loom models: `(weight, ready tenants, SWRR current weight)` of every class in
    /// use.
    pub(crate) fn debug_classes(&self) -> Vec<(u32, i64, i64)> {
        self.classes.snapshot()
    }

    /// Debug builds: tenant slots touched so far (the scale test's probe).
    pub(crate) fn debug_slot_touches(&self) -> u64 {
        self.tenants.touches()
    }
}
