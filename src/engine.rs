//! The engine: enqueue, next_grant, complete, cancel, over the tenant table, the ticket slab and
//! the scheduler.
//!
//! # Who holds a tenant's turn
//! At any time at most one thread holds a tenant's *turn*: the right to pop its queue, stage its
//! head and place it (in a class ring, the timing wheel, or nowhere when it goes idle). The turn
//! passes through the tenant's `queued` count (see `tenant.rs`): the enqueuer that raises it from
//! 0 activates the tenant; a granter that pops the tenant from its class ring holds it until it
//! puts it back; a wheel drainer holds it while it decides. So the staged head and the DRR credit
//! need no synchronisation of their own.
//!
//! # Hot path
//! `enqueue`, `next_grant`, `complete` and `cancel` allocate nothing and take no lock: atomics,
//! `ArrayQueue` pushes and pops, and a read of the weight table through `ArcSwap`.

use crate::config::{Config, ConfigError, MAX_COST, MAX_WEIGHT};
use crate::identity::TenantKey;
use crate::ring::Next;
use crate::sched::{ClassWeights, Classes, Wheel, CLASS_LIMIT};
use crate::sync::{AtomicBool, AtomicU64, Backoff, CachePadded, Mutex, Ordering, SharedPtr};
use crate::tenant::{TenantTable, FULL_FACTOR, LIVE_ONE, QUEUED_MASK, QUEUED_ONE};
use crate::ticket::{Lookup, TicketSlab, GRANTED, QUEUED, REQUEUING};
use crate::types::{
    Completion, Enqueued, Error, Expired, Grant, NextGrant, Outcome, Reason, Refusal, Request,
    Stats, Ticket,
};
use crate::weights::WeightTable;

const MS: u64 = 1_000_000;
/// Most visits a tenant can make up at once after missing turns while held.
const MAKEUP_VISITS: i64 = 8;
/// DRR credit is kept in 1/1024 cost units, so a fleet factor scales it without rounding.
const CREDIT_UNIT: i64 = FULL_FACTOR as i64;
/// Most cost debt (from `complete` corrections) a tenant carries, in class quanta.
const DEBT_QUANTA: i64 = 8;
/// LIVE counts `enqueue` pins a slot with: the ticket's own, and `push_queued`'s extra pin.
const ENQUEUE_PINS: u64 = 2;
/// The engine's clock high-water mark is rewritten at most this often (ns).
const CLOCK_STEP: u64 = MS;
/// Counter shards: spread by ticket index, so threads rarely share a counter line.
const SHARDS: usize = 8;
/// Push attempts into a tenant's ring, each after a compaction, before a request is refused.
const PUSH_ATTEMPTS: usize = 16;

#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    completed: AtomicU64,
    requeued: AtomicU64,
    cancelled: AtomicU64,
    expired: AtomicU64,
    refused_after_wait: AtomicU64,
    refused: [AtomicU64; 9],
}

fn bump(counter: &AtomicU64) {
    // Relaxed: statistics; no data is published through counters.
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Smallest fleet factor: a tenant keeps at least 2% of its weight on every replica.
pub const MIN_FLEET_FACTOR: u32 = 20;

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

/// What serving one held tenant produced.
enum Served {
    Grant(Grant, u32),
    Expired(Expired),
    /// The tenant had nothing to grant now (parked, idle, blocked): pick again.
    Nothing,
    /// Its DRR visit was spent (credit short of its head's cost): the class's next tenant may
    /// use the pick.
    Spent,
}

/// Tenants one pick tries in its class after spent visits before it hands the pick back. Only a
/// reduced effective weight (fleet mode) or a cost above the quantum spends visits.
const SPENT_VISITS: u32 = 8;

/// A lock-free multi-tenant weighted fair queue. `Send + Sync`: share it with `Arc`.
pub struct Engine {
    pub(crate) config: Config,
    enabled: AtomicBool,
    max_wait_ns: u64,
    tickets: TicketSlab,
    pub(crate) tenants: TenantTable,
    pub(crate) classes: Classes,
    wheel: Wheel,
    weights: SharedPtr<WeightTable>,
    /// Serialises weight-table writers and class allocation (never taken on the hot path).
    pub(crate) admin: Mutex<()>,
    /// Requests queued now, all tenants (the global bound), and the fair-share service clock
    /// on the same line (`indicators.rs`).
    pub(crate) queued: CachePadded<crate::indicators::QueuedLine>,
    /// Grants out now: never above `max_in_flight`, never below 0.
    in_flight: CachePadded<AtomicU64>,
    /// Wait histogram shards (`indicators.rs`).
    pub(crate) fair: crate::indicators::EngineFairness,
    /// Starvation guard, wait boost, tick state (`policy.rs`).
    pub(crate) policy: crate::policy::PolicyState,
    /// Per-downstream in-flight pools; `None` when off (`bulkhead.rs`).
    pub(crate) bulkheads: Option<crate::bulkhead::Bulkheads>,
    /// The latest `now` seen, kept to `CLOCK_STEP`: a clock that goes backwards is held here.
    clock: CachePadded<AtomicU64>,
    counters: Box<[CachePadded<Counters>]>,
}

impl Engine {
    /// Builds an engine: validates the config and allocates every table up front.
    pub fn new(config: Config) -> Result<Engine, ConfigError> {
        config.validate()?;
        let tenants = config.max_tenants as usize;
        let slots = crate::tenant::slot_count(tenants);
        let classes = Classes::new(config.max_weight_classes as usize, slots);
        classes.ensure(config.default_weight);
        for tier in &config.policy.tiers {
            classes.ensure(tier.weight); // validated to fit max_weight_classes
        }
        Ok(Engine {
            enabled: AtomicBool::new(config.enabled),
            max_wait_ns: config.max_wait_ms.saturating_mul(MS),
            tickets: TicketSlab::new(config.ticket_capacity()),
            tenants: TenantTable::new(
                tenants,
                config.tenant_queue_capacity as usize,
                config.tenant_idle_ms.saturating_mul(MS),
            ),
            classes,
            wheel: Wheel::new(0),
            weights: SharedPtr::new(WeightTable::new(config.default_weight)),
            admin: Mutex::new(()),
            queued: CachePadded::default(),
            in_flight: CachePadded::new(AtomicU64::new(0)),
            fair: crate::indicators::EngineFairness::new(),
            policy: crate::policy::PolicyState::new(
                &config.policy,
                config.max_weight_classes as usize,
            ),
            bulkheads: crate::bulkhead::Bulkheads::new(&config.downstream_max_in_flight, slots),
            clock: CachePadded::new(AtomicU64::new(0)),
            counters: (0..SHARDS).map(|_| CachePadded::default()).collect(),
            config,
        })
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Turns the engine on or off at run time (R1). Off refuses new requests with `disabled`;
    /// what is already queued still drains through `next_grant`.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether new requests are queued.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Makes the engine's view of time monotonic: a `now` behind the high-water mark is raised
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

    fn shard(&self, spread: u64) -> &Counters {
        &self.counters[(spread as usize) % SHARDS]
    }

    // ---------------------------------------------------------------- enqueue

    /// `enqueue_at` with the monotonic clock.
    pub fn enqueue(&self, request: &Request) -> Result<Enqueued, Error> {
        self.enqueue_at(request, crate::clock::now_ns())
    }

    /// Holds a refused request in its tenant's queue, or refuses it at once with a reason and
    /// the position it would have had. `now` is monotonic ns.
    pub fn enqueue_at(&self, request: &Request, now: u64) -> Result<Enqueued, Error> {
        if request.cost == 0 || request.cost > MAX_COST {
            return Err(Error::InvalidArgument("cost must be in 1..=1000000"));
        }
        self.check_downstream(request.downstream)?;
        let now = self.monotonic(now);
        let spread = request.user_data;
        if !self.is_enabled() {
            return Ok(self.refuse_on_arrival(spread, Reason::Disabled, 0));
        }
        if !request.dimension.is_queueable() {
            return Ok(self.refuse_on_arrival(spread, Reason::NotQueueable, 0));
        }
        let Some(key) = request.tenant else {
            return Ok(self.refuse_on_arrival(spread, Reason::NoTenant, 0));
        };
        let budget = match request.timeout_ns {
            0 => self.max_wait_ns,
            timeout => timeout.min(self.max_wait_ns),
        };
        // Two pins in one RMW: one becomes the ticket's LIVE count, the other is `push_queued`'s
        // extra pin (see there). Both are released on a refusal.
        let Ok(t) = self
            .tenants
            .pin_or_claim(key.get(), now, ENQUEUE_PINS, |slot| {
                self.init_slot(slot, key.get())
            })
        else {
            return Ok(self.refuse_on_arrival(spread, Reason::TenantTableFull, 1));
        };
        self.tenants.slot(t).fair.on_request();
        let position = match self.reserve(t, now) {
            Ok(position) => position,
            Err(refusal) => {
                self.tenants.slot(t).fair.on_refused_on_arrival();
                self.tenants.release(t, ENQUEUE_PINS * LIVE_ONE, now);
                return Ok(self.refuse_on_arrival(spread, refusal.reason, refusal.position));
            }
        };
        if request.retry_after_ns > budget {
            self.tenants.slot(t).fair.on_refused_on_arrival();
            self.unreserve(t);
            self.tenants.release(t, ENQUEUE_PINS * LIVE_ONE, now);
            return Ok(self.refuse_on_arrival(spread, Reason::WaitExceedsBudget, position));
        }
        let Some(ticket) = self.tickets.alloc() else {
            // Unreachable: the slab holds everything queued plus everything in flight.
            self.tenants.slot(t).fair.on_refused_on_arrival();
            self.unreserve(t);
            self.tenants.release(t, ENQUEUE_PINS * LIVE_ONE, now);
            return Ok(self.refuse_on_arrival(spread, Reason::QueueFull, position));
        };
        let slot = self.tenants.slot(t);
        let estimated_wait_ns = self.estimate(t, request.retry_after_ns, position);
        if let Some(cell) = self.tickets.cell(ticket) {
            // Relaxed: published by `push_queued` (state Release, queue push Release).
            cell.tenant.store(t, Ordering::Relaxed);
            cell.cost.store(request.cost, Ordering::Relaxed);
            cell.position.store(position, Ordering::Relaxed);
            cell.downstream.store(request.downstream, Ordering::Relaxed);
            cell.user_data.store(request.user_data, Ordering::Relaxed);
            cell.deadline
                .store(now.saturating_add(budget), Ordering::Relaxed);
            cell.not_before.store(
                now.saturating_add(request.retry_after_ns),
                Ordering::Relaxed,
            );
            cell.enqueued_at.store(now, Ordering::Relaxed);
            cell.estimated_wait
                .store(estimated_wait_ns, Ordering::Relaxed);
        }
        debug_assert_eq!(slot.key.load(Ordering::Relaxed), key.get());
        if self.push_queued(t, ticket, now, true) == Pushed::Refused {
            // The slot may be idle now; it is reused only after tenant_idle_ms.
            slot.fair.on_refused_on_arrival();
            let counters = self.shard(spread);
            bump(&counters.refused[Reason::TenantQueueFull.index()]);
            return Ok(Enqueued::Refused(Refusal {
                reason: Reason::TenantQueueFull,
                position,
                waited_ns: 0,
            }));
        }
        bump(&self.shard(u64::from(ticket.index())).enqueued);
        Ok(Enqueued::Queued {
            ticket,
            position,
            estimated_wait_ns,
        })
    }

    fn refuse_on_arrival(&self, spread: u64, reason: Reason, position: u32) -> Enqueued {
        bump(&self.shard(spread).refused[reason.index()]);
        Enqueued::Refused(Refusal {
            reason,
            position,
            waited_ns: 0,
        })
    }

    fn init_slot(&self, slot: &crate::tenant::TenantSlot, key: u64) {
        let weight = self.weights.with(|w| w.get(key));
        // `set_weight` creates a weight's class before it publishes the weight, so it exists.
        let class = self.classes.find(weight).unwrap_or(0);
        slot.weight.store(weight, Ordering::Relaxed);
        slot.class.store(class, Ordering::Relaxed);
    }

    /// Reserves a place in tenant `t`'s queue and in the global queue. Returns the position.
    /// Each bound is taken with one CAS, so neither count ever reads above its bound.
    fn reserve(&self, t: u32, _now: u64) -> Result<u32, Refusal> {
        let slot = self.tenants.slot(t);
        let refusal = |reason, ahead: u32| Refusal {
            reason,
            position: ahead.saturating_add(1),
            waited_ns: 0,
        };
        let ahead =
            crate::sync::increment_below_u32(&slot.depth, self.config.tenant_queue_capacity)
                .map_err(|ahead| refusal(Reason::TenantQueueFull, ahead))?;
        if crate::sync::increment_below(&self.queued.count, u64::from(self.config.queue_capacity))
            .is_err()
        {
            // Relaxed: a bound counter (see `increment_below`).
            slot.depth.fetch_sub(1, Ordering::Relaxed);
            return Err(refusal(Reason::QueueFull, ahead));
        }
        Ok(ahead + 1)
    }

    fn unreserve(&self, t: u32) {
        self.tenants.slot(t).depth.fetch_sub(1, Ordering::Relaxed);
        self.queued.count.fetch_sub(1, Ordering::Relaxed);
    }

    fn estimate(&self, t: u32, retry_after_ns: u64, position: u32) -> u64 {
        let interval = self.tenants.slot(t).interval.load(Ordering::Relaxed);
        retry_after_ns.saturating_add(interval.saturating_mul(u64::from(position)))
    }

    /// Publishes a reserved ticket into tenant `t`'s queue and announces it, activating the
    /// tenant if it was idle. If it cannot be pushed (see `push_entry`) the ticket ends here and
    /// every reservation is released (`Pushed::Refused`), unless a cancel ended it first
    /// (`Pushed::Cancelled`: the request was queued, then cancelled, and ended once, there).
    /// `pinned`: the caller already holds the extra pin described below (`enqueue` takes it with
    /// its own).
    fn push_queued(&self, t: u32, ticket: Ticket, now: u64, pinned: bool) -> Pushed {
        let slot = self.tenants.slot(t);
        // An extra pin for the window between publishing the ticket and announcing its entry: a
        // cancel may end the ticket as soon as it is published and drop the ticket's own LIVE
        // count, and without this pin the slot's counts could touch 0 (idle, stealable, and the
        // active-tenant gauge decremented) with an entry about to be announced. Found by the
        // loom model tickets::requeue_vs_cancel. Relaxed: ordered before a canceller's release
        // by the Release of `publish` that the canceller's CAS acquires.
        if !pinned {
            slot.counts.fetch_add(LIVE_ONE, Ordering::Relaxed);
        }
        self.tickets.publish(ticket);
        if !self.push_entry(t, ticket) {
            // Only when producers that have not finished writing hold the free entries. A cancel
            // may have ended the ticket since `publish` (then the canceller released it all and
            // the request ended there, once).
            let ours = self.tickets.end(ticket, QUEUED);
            if ours {
                self.unreserve(t);
                self.tenants.release(t, LIVE_ONE, now);
            }
            self.tenants.release(t, LIVE_ONE, now); // the extra pin
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
        // Announces the entry and drops the extra pin in one RMW. AcqRel: Release makes the push
        // visible to the holder that sees this count; Acquire takes over the previous holder's
        // writes when we activate.
        let before = slot
            .counts
            .fetch_add(QUEUED_ONE.wrapping_sub(LIVE_ONE), Ordering::AcqRel);
        if before & QUEUED_MASK == 0 {
            self.activate(t, now);
        }
        Pushed::Queued
    }

    /// Pushes a published ticket's handle into tenant `t`'s ring. A full ring holds dead entries
    /// (the reservation says a live place is free): compact it and try again.
    fn push_entry(&self, t: u32, ticket: Ticket) -> bool {
        let queue = &self.tenants.slot(t).queue;
        let backoff = Backoff::new();
        for _ in 0..PUSH_ATTEMPTS {
            if queue.push(ticket.0).is_ok() {
                return true;
            }
            if queue.compact(|handle| self.tickets.lookup(Ticket(handle)) != Lookup::Live(QUEUED))
                == 0
            {
                // Another consumer holds the ring, or producers are mid-write: let them finish.
                backoff.snooze();
            }
        }
        false
    }

    /// The caller raised `queued` from 0 and so holds the tenant's turn: stage the head, place it.
    fn activate(&self, t: u32, now: u64) {
        let slot = self.tenants.slot(t);
        let staged = match slot.queue.take_next() {
            Next::Handle(head) => {
                slot.staged.store(head, Ordering::Relaxed);
                true
            }
            // Our own entry was dead and swept (a forged cancel): account it, take the next.
            Next::Swept => self.next_head(t, now),
        };
        if staged {
            slot.credit.store(0, Ordering::Relaxed);
            slot.last_grant.store(now, Ordering::Relaxed);
            self.place(t, None, false, now);
        }
    }

    /// Places a tenant whose turn the caller holds and whose head is staged: in the wheel if the
    /// head is not ready, else in its class's ready set. `counted_in` is the class whose ready
    /// count already includes the tenant (a granter's), if any.
    pub(crate) fn place(&self, t: u32, counted_in: Option<u32>, visit_continues: bool, now: u64) {
        let slot = self.tenants.slot(t);
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        let class = slot.class.load(Ordering::Relaxed);
        let alive = self.tickets.lookup(head) == Lookup::Live(QUEUED);
        let not_before = self
            .tickets
            .cell(head)
            .map_or(0, |c| c.not_before.load(Ordering::Relaxed));
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
                self.classes.make_ready(class, t, slot);
            }
            None => self.enter_ready(t, class, now),
        }
    }

    /// Parks a tenant whose turn the caller holds until its head's `not_before`.
    fn park(&self, t: u32, not_before: u64, now: u64) {
        if let Some(missed) = self.wheel.park(&self.tenants, t, not_before) {
            self.wheel
                .drain(&self.tenants, missed, |t| self.place(t, None, false, now));
        }
    }

    // ---------------------------------------------------------------- next_grant

    /// `next_grant_at` with the monotonic clock.
    pub fn next_grant(&self) -> NextGrant {
        self.next_grant_at(crate::clock::now_ns())
    }

    /// Takes an in-flight permit and releases the next request by weighted fair order among the
    /// tenants whose head is ready. Returns `Expired` for a queued request whose budget ran out
    /// (answer it; it was never granted). Call it until `Empty` or `AtCapacity` after every
    /// enqueue and complete, and when `next_wakeup_ns` passes.
    pub fn next_grant_at(&self, now: u64) -> NextGrant {
        let now = self.monotonic(now);
        self.wheel
            .advance(&self.tenants, now, |t| self.place(t, None, false, now));
        self.downstream_expire(now);
        if !self.acquire_permit() {
            return NextGrant::AtCapacity;
        }
        // Starvation guard (off by default): a weight class owed its minimum service goes
        // first, outside SWRR, so no SWRR credit changes (see policy.rs).
        if let Some((class, total)) = self.guard_due(now) {
            if let Some((t, new_visit)) = self.classes.take(class) {
                match self.serve(t, class as u32, new_visit, total, now) {
                    Served::Grant(grant, _) => {
                        self.guard_served();
                        return NextGrant::Granted(grant);
                    }
                    Served::Expired(expired) => {
                        self.release_permit();
                        return NextGrant::Expired(expired);
                    }
                    Served::Nothing | Served::Spent => {}
                }
            }
        }
        let mut weights: ClassWeights = [0; CLASS_LIMIT];
        let mut exclude = 0u64;
        loop {
            let Some((class, total)) = self.classes.pick(exclude, &mut weights) else {
                self.release_permit();
                return NextGrant::Empty;
            };
            // The class serves the pick: its ring's next tenant whose DRR credit covers its
            // head (a spent visit passes the pick on, as DRR does, instead of refunding it).
            let mut spent = 0;
            let served = loop {
                let Some((t, new_visit)) = self.take_tenant(class) else {
                    break None;
                };
                match self.serve(t, class as u32, new_visit, total, now) {
                    Served::Spent if spent < SPENT_VISITS => spent += 1,
                    other => break Some(other),
                }
            };
            match served {
                None => {
                    // Another granter holds this class's tenants right now.
                    self.classes.refund(class, total, &weights);
                    exclude |= 1 << class;
                }
                Some(Served::Grant(grant, cost)) => {
                    self.classes
                        .repeat(class, total, &weights, i64::from(cost) - 1);
                    return NextGrant::Granted(grant);
                }
                Some(Served::Expired(expired)) => {
                    self.classes.refund(class, total, &weights);
                    self.release_permit();
                    return NextGrant::Expired(expired);
                }
                Some(Served::Nothing | Served::Spent) => {
                    self.classes.refund(class, total, &weights)
                }
            }
        }
    }

    /// Takes a tenant from the picked class. When the ring is empty but the class still counts
    /// ready tenants, another granter holds them for a few hundred ns: wait briefly rather than
    /// serve another class out of turn, which would skew shares when tenants are few. Gives up
    /// after a bounded backoff, so a preempted holder never blocks us.
    fn take_tenant(&self, class: usize) -> Option<(u32, bool)> {
        let backoff = Backoff::new();
        loop {
            if let Some(taken) = self.classes.take(class) {
                return Some(taken);
            }
            if self.classes.ready(class) <= 0 || backoff.is_completed() {
                return None;
            }
            backoff.snooze();
        }
    }

    fn acquire_permit(&self) -> bool {
        let max = u64::from(self.config.max_in_flight);
        #[cfg(fairq_broken)]
        if crate::broken::on(crate::broken::Break::Permit) {
            // Broken on purpose: check, then store; two callers can both pass the check.
            let current = self.in_flight.load(Ordering::Relaxed);
            if current >= max {
                return false;
            }
            self.in_flight.store(current + 1, Ordering::Relaxed);
            return true;
        }
        crate::sync::try_increment_below(&self.in_flight, max)
    }

    fn release_permit(&self) {
        // Relaxed: see `sync::try_increment_below`.
        let before = self.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "in-flight count below zero");
    }

    /// Serves the tenant `t`, just taken from class `class`: sweeps dead heads, reports an expired
    /// one, parks a not-ready one, else grants its head if its DRR credit covers the cost.
    /// `total` is the SWRR weight of the pick (the ready weight), for the fairness indicators.
    fn serve(&self, t: u32, class: u32, mut new_visit: bool, total: i64, now: u64) -> Served {
        let slot = self.tenants.slot(t);
        loop {
            let head = Ticket(slot.staged.load(Ordering::Relaxed));
            let Some(cell) = self.tickets.cell(head) else {
                debug_assert!(false, "staged handle out of range");
                return Served::Nothing;
            };
            // Read before taking ownership; valid if the CAS below succeeds (same generation).
            let deadline = cell.deadline.load(Ordering::Relaxed);
            let not_before = cell.not_before.load(Ordering::Relaxed);
            let cost = cell.cost.load(Ordering::Relaxed);
            if self.tickets.lookup(head) != Lookup::Live(QUEUED) {
                // Cancelled: sweep the tombstone.
                if self.next_head(t, now) {
                    continue;
                }
                self.leave_ready(t, class, now);
                return Served::Nothing;
            }
            if now > deadline {
                let expired = self.expire_head(t, head, now);
                let Some(expired) = expired else {
                    continue; // a cancel won; the next round sweeps it
                };
                self.after_turn(t, class, false, now);
                return Served::Expired(expired);
            }
            if not_before > now {
                self.leave_ready(t, class, now);
                self.park(t, not_before, now);
                return Served::Nothing;
            }
            if !self.downstream_acquire(t, class, cell, now) {
                return Served::Nothing; // its bulkhead pool is full: blocked there, uncharged
            }
            let mut credit = slot.credit.load(Ordering::Relaxed);
            if new_visit {
                if slot.debt.load(Ordering::Relaxed) != 0 {
                    let debt = slot.debt.swap(0, Ordering::Relaxed);
                    credit = credit.saturating_sub(debt.saturating_mul(CREDIT_UNIT));
                }
                let quantum = i64::from(self.classes.quantum(class, cost));
                // Visits it missed while another granter held it are made up (a few at most).
                let owed = self
                    .classes
                    .start_visit(class, &slot.last_visit, MAKEUP_VISITS);
                // A tenant at a reduced effective weight (fleet mode) earns credit in proportion.
                let earned = quantum * owed * i64::from(slot.factor.load(Ordering::Relaxed));
                // Debt is capped at DEBT_QUANTA quanta, so a few visits always cover the head.
                credit = credit.max(-DEBT_QUANTA * quantum * CREDIT_UNIT) + earned;
                slot.credit.store(credit, Ordering::Relaxed);
                new_visit = false;
            }
            if credit < i64::from(cost) * CREDIT_UNIT {
                // This visit is spent; the next one adds a quantum. Relaxed: the head's fields
                // were published with it (see `ticket.rs`).
                self.downstream_release(cell.downstream.load(Ordering::Relaxed), now);
                self.classes.put_back(class, t, false, slot);
                return Served::Spent;
            }
            let user_data = cell.user_data.load(Ordering::Relaxed);
            let position = cell.position.load(Ordering::Relaxed);
            let enqueued_at = cell.enqueued_at.load(Ordering::Relaxed);
            let estimated_wait_ns = cell.estimated_wait.load(Ordering::Relaxed);
            if !self.tickets.transition(head, QUEUED, GRANTED) {
                // Relaxed: as above; the field was read-only while the ticket was queued.
                self.downstream_release(cell.downstream.load(Ordering::Relaxed), now);
                continue; // a cancel won; the next round sweeps it
            }
            let credit = credit - i64::from(cost) * CREDIT_UNIT;
            slot.credit.store(credit, Ordering::Relaxed);
            self.unreserve(t);
            self.record_grant(t, cost, now);
            let waited_ns = now.saturating_sub(enqueued_at);
            self.on_grant(t, class, cost, total, waited_ns, now);
            let grant = Grant {
                ticket: head,
                tenant: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
                user_data,
                cost,
                waited_ns,
                position,
                estimated_wait_ns,
                remaining_budget_ns: deadline.saturating_sub(now),
            };
            self.after_turn(t, class, true, now);
            // Hints for a prefetch, which is a no-op under loom: their atomics would only
            // multiply the interleavings the models explore.
            #[cfg(not(loom))]
            self.link_successor(t, class);
            return Served::Grant(grant, cost);
        }
    }

    /// Round robin makes the next grant in a class predictable: the tenant granted after `t`
    /// last round. Records `t` (and its staged head) as the successor of the class's previous
    /// grantee, whose lines are still warm, and prefetches the lines of `t`'s own successor and of
    /// its head ticket, which with thousands of tenants are cache misses otherwise. Hints only:
    /// Relaxed, stored only when they change, and a stale one costs a wasted prefetch.
    #[cfg(not(loom))]
    fn link_successor(&self, t: u32, class: u32) {
        let slot = self.tenants.slot(t);
        let before = self.classes.swap_last_granted(class, t);
        if before != t && (before as usize) < self.tenants.len() {
            let previous = self.tenants.slot(before);
            let head = Ticket(slot.staged.load(Ordering::Relaxed)).index();
            if previous.succ.load(Ordering::Relaxed) != t {
                previous.succ.store(t, Ordering::Relaxed);
            }
            if previous.succ_head.load(Ordering::Relaxed) != head {
                previous.succ_head.store(head, Ordering::Relaxed);
            }
        }
        let next = slot.succ.load(Ordering::Relaxed);
        if (next as usize) < self.tenants.len() {
            let next_slot = self.tenants.slot(next);
            // The scheduling, counter and fairness lines plus the wait buckets, and the queue.
            crate::sync::prefetch(next_slot, 4 * 64);
            crate::sync::prefetch(&next_slot.queue, std::mem::size_of_val(&next_slot.queue));
            let (ring, bytes) = next_slot.queue.storage();
            crate::sync::prefetch(ring, bytes.min(128));
            self.tickets
                .prefetch(slot.succ_head.load(Ordering::Relaxed));
        }
    }

    /// The holder is done with the staged head: stage the next one if any. Returns false when the
    /// tenant went idle (its turn is given up).
    fn next_head(&self, t: u32, now: u64) -> bool {
        let slot = self.tenants.slot(t);
        loop {
            let before = self.tenants.release(t, QUEUED_ONE, now);
            if before & QUEUED_MASK <= 1 {
                return false;
            }
            match slot.queue.take_next() {
                Next::Handle(head) => {
                    slot.staged.store(head, Ordering::Relaxed);
                    return true;
                }
                // A dead entry a compaction removed: it is accounted like a popped one.
                Next::Swept => continue,
            }
        }
    }

    /// After a grant or an expiry: stage the next head and place the tenant, or let it go idle.
    fn after_turn(&self, t: u32, class: u32, granted: bool, now: u64) {
        if !self.next_head(t, now) {
            self.leave_ready(t, class, now);
            return;
        }
        let slot = self.tenants.slot(t);
        let visit_continues = granted && {
            let next_cost = self
                .tickets
                .cell(Ticket(slot.staged.load(Ordering::Relaxed)))
                .map_or(u32::MAX, |c| c.cost.load(Ordering::Relaxed));
            slot.credit.load(Ordering::Relaxed) >= i64::from(next_cost) * CREDIT_UNIT
        };
        self.place(t, Some(class), visit_continues, now);
    }

    fn record_grant(&self, t: u32, cost: u32, now: u64) {
        let slot = self.tenants.slot(t);
        let last = slot.last_grant.load(Ordering::Relaxed);
        slot.last_grant.store(now, Ordering::Relaxed);
        let sample = now.saturating_sub(last);
        let old = slot.interval.load(Ordering::Relaxed);
        let ewma = if old == 0 {
            sample
        } else {
            (old.saturating_mul(7).saturating_add(sample)) / 8
        };
        slot.interval.store(ewma, Ordering::Relaxed);
        // Relaxed load + store, not `fetch_add`: like `last_grant`, these counters are written
        // only by the turn holder (and by a thief holding the slot exclusively); the turn's
        // hand-off (ring push Release / pop Acquire) orders one holder's writes before the next.
        let granted_cost = slot.granted_cost.load(Ordering::Relaxed);
        slot.granted_cost
            .store(granted_cost + u64::from(cost), Ordering::Relaxed);
        let total = slot.grants_total.load(Ordering::Relaxed);
        slot.grants_total.store(total + 1, Ordering::Relaxed);
    }

    /// Ends a queued head whose deadline passed. `None` if a cancel ended it first.
    fn expire_head(&self, t: u32, head: Ticket, now: u64) -> Option<Expired> {
        let cell = self.tickets.cell(head)?;
        let user_data = cell.user_data.load(Ordering::Relaxed);
        let position = cell.position.load(Ordering::Relaxed);
        let enqueued_at = cell.enqueued_at.load(Ordering::Relaxed);
        if !self.tickets.end(head, QUEUED) {
            return None;
        }
        self.unreserve(t);
        self.tenants.release(t, LIVE_ONE, now);
        let counters = self.shard(u64::from(head.index()));
        bump(&counters.expired);
        bump(&counters.refused[Reason::DeadlineExceeded.index()]);
        let waited_ns = now.saturating_sub(enqueued_at);
        self.on_refused_after_wait(t, waited_ns, None, true);
        let key = self.tenants.slot(t).key.load(Ordering::Relaxed);
        Some(Expired {
            ticket: head,
            tenant: TenantKey::from_hash(key),
            user_data,
            refusal: Refusal {
                reason: Reason::DeadlineExceeded,
                position,
                waited_ns,
            },
        })
    }

    // ---------------------------------------------------------------- complete / cancel

    /// `complete_at` with the monotonic clock.
    pub fn complete(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        actual_cost: Option<u32>,
    ) -> Result<Completion, Error> {
        self.complete_at(ticket, outcome, actual_cost, crate::clock::now_ns())
    }

    /// Ends a grant: gives its permit back, and either ends the ticket (admitted) or puts it back
    /// in its tenant's queue (still refused, R7) if the Retry-After fits its remaining budget.
    /// `actual_cost`, when given, corrects the tenant's charge (R15).
    pub fn complete_at(
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
        let Some(cell) = self.tickets.cell(ticket) else {
            return Err(Error::StaleTicket);
        };
        let refused_state = || match self.tickets.lookup(ticket) {
            Lookup::Stale => Error::StaleTicket,
            Lookup::Live(_) => Error::TicketState,
        };
        // Relaxed: a granted ticket's fields no longer change; they are the ticket's own if the
        // CAS below succeeds at the handle's generation (`ticket.rs`).
        let t = cell.tenant.load(Ordering::Relaxed);
        let cost = cell.cost.load(Ordering::Relaxed);
        let downstream = cell.downstream.load(Ordering::Relaxed);
        let spread = u64::from(ticket.index());
        let retry_after_ns = match outcome {
            Outcome::StillRefused { retry_after_ns } => retry_after_ns,
            Outcome::Admitted => {
                // Straight from granted to free: one CAS. The slot stays pinned by the
                // ticket's LIVE count until the release below.
                if !self.tickets.end(ticket, GRANTED) {
                    return Err(refused_state());
                }
                self.correct_cost(t, cost, actual_cost);
                self.release_permit();
                self.downstream_release(downstream, now);
                self.tenants.release(t, LIVE_ONE, now);
                bump(&self.shard(spread).completed);
                return Ok(Completion::Completed);
            }
        };
        if !self.tickets.transition(ticket, GRANTED, REQUEUING) {
            return Err(refused_state());
        }
        // We own the ticket exclusively until we end or publish it.
        self.correct_cost(t, cost, actual_cost);
        self.release_permit();
        self.downstream_release(downstream, now);
        let deadline = cell.deadline.load(Ordering::Relaxed);
        let enqueued_at = cell.enqueued_at.load(Ordering::Relaxed);
        let waited_ns = now.saturating_sub(enqueued_at);
        let refuse = |reason: Reason, position: u32| {
            self.on_refused_after_wait(t, waited_ns, Some(spread), false);
            self.tickets.end(ticket, REQUEUING);
            self.tenants.release(t, LIVE_ONE, now);
            let counters = self.shard(spread);
            bump(&counters.refused_after_wait);
            bump(&counters.refused[reason.index()]);
            Ok(Completion::Refused(Refusal {
                reason,
                position,
                waited_ns,
            }))
        };
        let position = match self.reserve(t, now) {
            Ok(position) => position,
            Err(refusal) => return refuse(refusal.reason, refusal.position),
        };
        if now.saturating_add(retry_after_ns) > deadline {
            self.unreserve(t);
            return refuse(Reason::WaitExceedsBudget, position);
        }
        let estimated_wait_ns = self.estimate(t, retry_after_ns, position);
        cell.not_before
            .store(now.saturating_add(retry_after_ns), Ordering::Relaxed);
        cell.position.store(position, Ordering::Relaxed);
        cell.estimated_wait
            .store(estimated_wait_ns, Ordering::Relaxed);
        if self.push_queued(t, ticket, now, false) == Pushed::Refused {
            // The slot may be idle now; it is reused only after tenant_idle_ms.
            self.on_refused_after_wait(t, waited_ns, Some(spread), false);
            let counters = self.shard(spread);
            bump(&counters.refused_after_wait);
            bump(&counters.refused[Reason::TenantQueueFull.index()]);
            return Ok(Completion::Refused(Refusal {
                reason: Reason::TenantQueueFull,
                position,
                waited_ns,
            }));
        }
        bump(&self.shard(spread).requeued);
        Ok(Completion::Requeued {
            position,
            estimated_wait_ns,
        })
    }

    /// Corrects tenant `t`'s charge for a grant of estimated `cost` that really cost `actual`.
    fn correct_cost(&self, t: u32, cost: u32, actual: Option<u32>) {
        let Some(actual) = actual else { return };
        let delta = i64::from(actual) - i64::from(cost);
        if delta != 0 {
            let slot = self.tenants.slot(t);
            // The holder folds this into the credit at the tenant's next visit.
            slot.debt.fetch_add(delta, Ordering::Relaxed);
            let class = slot.class.load(Ordering::Relaxed);
            self.classes.charge(class as usize, delta);
        }
    }

    /// `cancel_at` with the monotonic clock.
    pub fn cancel(&self, ticket: Ticket) -> Result<(), Error> {
        self.cancel_at(ticket, crate::clock::now_ns())
    }

    /// Ends a queued or granted ticket (the client went away). A granted ticket gives its
    /// permit back. Counted as `cancelled`.
    pub fn cancel_at(&self, ticket: Ticket, now: u64) -> Result<(), Error> {
        self.end_by_caller(ticket, Reason::Cancelled, now)
            .map(|_| ())
    }

    /// `expire_at` with the monotonic clock.
    pub fn expire(&self, ticket: Ticket) -> Result<Refusal, Error> {
        self.expire_at(ticket, crate::clock::now_ns())
    }

    /// Ends a queued ticket whose budget the caller's own timer says has run out, counted as
    /// `deadline_exceeded` (the engine finds expired heads only when it reaches them, and not at
    /// all while `max_in_flight` grants are out). A granted ticket is not the queue's to expire:
    /// `Error::TicketState`.
    pub fn expire_at(&self, ticket: Ticket, now: u64) -> Result<Refusal, Error> {
        self.end_by_caller(ticket, Reason::DeadlineExceeded, now)
    }

    fn end_by_caller(&self, ticket: Ticket, reason: Reason, now: u64) -> Result<Refusal, Error> {
        let now = self.monotonic(now);
        let backoff = Backoff::new();
        loop {
            let state = match self.tickets.lookup(ticket) {
                Lookup::Stale => return Err(Error::StaleTicket),
                Lookup::Live(QUEUED) => QUEUED,
                Lookup::Live(GRANTED) if reason == Reason::Cancelled => GRANTED,
                Lookup::Live(REQUEUING) => {
                    // A completer is putting it back in its queue: a few stores. Wait, so the
                    // cancel applies to the requeued ticket instead of being lost.
                    backoff.snooze();
                    continue;
                }
                Lookup::Live(_) => return Err(Error::TicketState),
            };
            let Some(cell) = self.tickets.cell(ticket) else {
                return Err(Error::StaleTicket);
            };
            let t = cell.tenant.load(Ordering::Relaxed);
            // Relaxed: valid if the `end` CAS below succeeds (same generation, fields fixed).
            let downstream = cell.downstream.load(Ordering::Relaxed);
            let position = cell.position.load(Ordering::Relaxed);
            let enqueued_at = cell.enqueued_at.load(Ordering::Relaxed);
            if !self.tickets.end(ticket, state) {
                continue; // it moved (granted, or ended by someone else): look again
            }
            let waited_ns = now.saturating_sub(enqueued_at);
            if state == QUEUED {
                // Its entry stays in the queue as a tombstone until the scheduler sweeps it.
                self.unreserve(t);
            } else {
                self.release_permit();
                self.downstream_release(downstream, now);
            }
            if reason == Reason::DeadlineExceeded {
                // Before the release below: the slot is still pinned by this ticket.
                self.on_refused_after_wait(t, waited_ns, Some(u64::from(ticket.index())), true);
            }
            self.tenants.release(t, LIVE_ONE, now);
            let counters = self.shard(u64::from(ticket.index()));
            bump(if reason == Reason::Cancelled {
                &counters.cancelled
            } else {
                &counters.expired
            });
            bump(&counters.refused[reason.index()]);
            return Ok(Refusal {
                reason,
                position,
                waited_ns,
            });
        }
    }

    // ---------------------------------------------------------------- weights, stats

    /// Sets the weight of the tenant with raw identifier `raw` (R5), at run time.
    pub fn set_weight(&self, raw: &str, weight: u32) -> Result<(), Error> {
        self.set_weight_key(TenantKey::from_raw(raw.as_bytes()), weight)
    }

    /// Sets the weight of a tenant by key. A live tenant takes it at its next turn.
    pub fn set_weight_key(&self, key: TenantKey, weight: u32) -> Result<(), Error> {
        if weight == 0 || weight > MAX_WEIGHT {
            return Err(Error::InvalidArgument("weight must be in 1..=10000"));
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let class = self
            .classes
            .ensure(weight)
            .ok_or(Error::TooManyWeightClasses)?;
        let next = self.weights.with(|w| w.with_entry(key.get(), weight));
        self.weights.store(next);
        self.apply_weight(key.get(), weight, class);
        Ok(())
    }

    /// Replaces the whole weight table (raw id, weight) and the default weight, at run time.
    pub fn replace_weights<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, u32)>,
        default_weight: u32,
    ) -> Result<(), Error> {
        let entries: Vec<(u64, u32)> = entries
            .into_iter()
            .map(|(raw, w)| (TenantKey::from_raw(raw.as_bytes()).get(), w))
            .collect();
        self.replace_weight_keys(&entries, default_weight)
    }

    /// `replace_weights` with keys already hashed.
    pub fn replace_weight_keys(
        &self,
        entries: &[(u64, u32)],
        default_weight: u32,
    ) -> Result<(), Error> {
        let valid = |w: u32| (1..=MAX_WEIGHT).contains(&w);
        if !valid(default_weight) || entries.iter().any(|&(_, w)| !valid(w)) {
            return Err(Error::InvalidArgument("weight must be in 1..=10000"));
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let mut distinct: Vec<u32> = entries.iter().map(|&(_, w)| w).collect();
        distinct.push(default_weight);
        distinct.sort_unstable();
        distinct.dedup();
        let missing = distinct
            .iter()
            .filter(|&&w| self.classes.find(w).is_none())
            .count();
        let in_use = (0..self.config.max_weight_classes)
            .filter(|&c| self.classes.weight(c) != 0)
            .count();
        if in_use + missing > self.config.max_weight_classes as usize {
            return Err(Error::TooManyWeightClasses);
        }
        for &w in &distinct {
            self.classes.ensure(w);
        }
        self.weights.store(WeightTable::from_entries(
            entries.iter().copied(),
            default_weight,
        ));
        for index in 0..self.tenants.len() as u32 {
            let key = self.tenants.slot(index).key.load(Ordering::Relaxed);
            if key != 0 {
                let w = self.weights.with(|table| table.get(key));
                let class = self.classes.find(w).unwrap_or(0);
                self.apply_weight(key, w, class);
            }
        }
        Ok(())
    }

    fn apply_weight(&self, key: u64, weight: u32, class: u32) {
        if let Some(t) = self.tenants.pin_existing(key) {
            let slot = self.tenants.slot(t);
            slot.weight.store(weight, Ordering::Relaxed);
            slot.class.store(class, Ordering::Relaxed);
            self.tenants.release(t, LIVE_ONE, 0);
        }
    }

    /// The weight a tenant gets now: its live slot's, else the table's.
    pub fn weight_of(&self, key: TenantKey) -> u32 {
        if let Some(t) = self.tenants.pin_existing(key.get()) {
            let w = self.tenants.slot(t).weight.load(Ordering::Relaxed);
            self.tenants.release(t, LIVE_ONE, 0);
            return w;
        }
        self.weights.with(|w| w.get(key.get()))
    }

    /// Fleet mode: schedules a live tenant at an *effective weight* `w' = w × factor / 1024`,
    /// `factor` in 20..=1024 (0.02 to 1). A replica whose tenant is also served elsewhere in a
    /// fleet lowers its factor so the fleet as a whole serves it its share. Takes effect at the
    /// tenant's next turn; the slot keeps it until it is reused by another tenant (a new tenant
    /// starts at 1024). Returns whether the tenant holds a slot. Never blocks a grant.
    pub fn set_fleet_factor(&self, key: TenantKey, factor: u32) -> Result<bool, Error> {
        if !(MIN_FLEET_FACTOR..=FULL_FACTOR).contains(&factor) {
            return Err(Error::InvalidArgument("fleet factor must be in 20..=1024"));
        }
        let Some(t) = self.tenants.pin_existing(key.get()) else {
            return Ok(false);
        };
        // Relaxed: the tenant's turn holder reads it at its next placement or visit.
        self.tenants.slot(t).factor.store(factor, Ordering::Relaxed);
        self.tenants.release(t, LIVE_ONE, 0);
        Ok(true)
    }

    /// Fleet mode: appends every tenant holding a slot to `out` (off the hot path: it scans the
    /// table). `served_cost` only grows while the tenant keeps its slot; a tenant that lost its
    /// slot and came back starts again from 0, which a sync loop must treat as a reset.
    pub fn fleet_tenants(&self, out: &mut Vec<FleetTenant>) {
        for index in 0..self.tenants.len() as u32 {
            let Some(t) = self.tenants.pin_index(index) else {
                continue;
            };
            let slot = self.tenants.slot(t);
            // Relaxed: a snapshot of counters.
            out.push(FleetTenant {
                tenant: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
                weight: slot.weight.load(Ordering::Relaxed),
                factor: slot.factor.load(Ordering::Relaxed),
                served_cost: slot.granted_cost.load(Ordering::Relaxed),
                queued: u64::from(slot.depth.load(Ordering::Relaxed)),
            });
            self.tenants.release(t, LIVE_ONE, 0);
        }
    }

    /// Grants and cost units granted to a tenant since it took its slot, if it holds one.
    pub fn tenant_granted(&self, key: TenantKey) -> Option<(u64, u64)> {
        let t = self.tenants.pin_existing(key.get())?;
        let slot = self.tenants.slot(t);
        let out = (slot.granted(), slot.granted_cost.load(Ordering::Relaxed));
        self.tenants.release(t, LIVE_ONE, 0);
        Some(out)
    }

    /// When a parked tenant may next become ready (monotonic ns), so a caller can set a timer and
    /// call `next_grant` then. `None` when nothing is parked.
    pub fn next_wakeup_ns(&self) -> Option<u64> {
        let blocked = self.downstream_wakeup(); // a bulkhead-blocked head's deadline
        match (self.wheel.next_tick_ns(), blocked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A snapshot of gauges and counters. Reads every tenant slot (O(`max_tenants`)): call it
    /// for metrics, not per request.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats {
            queued: self.queued.count.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            tenants: self.tenants.active(),
            ..Stats::default()
        };
        // Grants are counted per slot by the tenant's turn holder (no shared RMW per grant);
        // `grants_total` is never reset, so the sum only grows.
        for slot in self.tenants.slots() {
            // Relaxed: a snapshot of statistics.
            stats.granted += slot.grants_total.load(Ordering::Relaxed);
        }
        for shard in self.counters.iter() {
            let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
            stats.enqueued += get(&shard.enqueued);
            stats.completed += get(&shard.completed);
            stats.requeued += get(&shard.requeued);
            stats.cancelled += get(&shard.cancelled);
            stats.expired += get(&shard.expired);
            stats.refused_after_wait += get(&shard.refused_after_wait);
            for (total, c) in stats.refused.iter_mut().zip(shard.refused.iter()) {
                *total += get(c);
            }
        }
        stats
    }

    /// Tests and loom models: `(weight, ready tenants, SWRR current weight)` of every weight
    /// class in use. Allocates; not for the hot path.
    #[doc(hidden)]
    pub fn debug_classes(&self) -> Vec<(u32, i64, i64)> {
        self.classes.snapshot()
    }

    /// Debug builds: tenant slots touched so far (the scale test's probe). 0 in release builds.
    #[doc(hidden)]
    pub fn debug_slot_touches(&self) -> u64 {
        self.tenants.touches.load(Ordering::Relaxed)
    }
}
