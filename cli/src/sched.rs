//! The four schedulers the simulation compares, behind one trait.
//!
//! - `fifo`: one global queue, served in arrival order. Its only bound is the global one.
//! - `drr`: deficit round robin over per-tenant queues, quantum = weight (in cost units).
//! - `fairq`: the real [`fairq::Engine`], driven through its public API only.
//! - `ideal`: the reference for isolation. Non-preemptive strict priority: the tenants the
//!   scenario marks `bursting` are served only when no other tenant waits, each level in arrival
//!   order. It is what perfect isolation gives a work-conserving backend: a tenant that is not
//!   bursting waits only for the requests of its own level and for a slot to free, never behind
//!   a burst (a request already being served is not interrupted).
//!
//! All four apply the same rules: a request's budget is `min(max_wait_ms, its timeout)`; a
//! Retry-After that does not fit the budget is refused (`wait_exceeds_budget`); a request whose
//! deadline passed is answered `deadline_exceeded` when it reaches the head instead of being
//! served late; the global queue holds at most `queue_capacity` requests. drr and ideal, like
//! fairq, also bound each tenant's queue and the number of tenants. fifo, drr and ideal hold a
//! not-yet-ready request (Retry-After) aside, counted in the bounds, and queue it when it becomes
//! ready.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use fairq::{
    Completion, Dimension, Engine, Enqueued, NextGrant, Outcome, Reason, Request, TenantKey,
};

use crate::scenario::QueueRules;
use crate::trace::{Tenant, MS};

/// What a scheduler needs to know about a request.
#[derive(Clone, Copy, Debug)]
pub struct Offer {
    /// Simulation request id (returned by `next`).
    pub id: u32,
    /// Tenant index.
    pub tenant: u32,
    /// Cost units.
    pub cost: u32,
    /// Retry-After, ns.
    pub retry_after_ns: u64,
    /// Own timeout, ns (0: none).
    pub timeout_ns: u64,
    /// The downstream it goes to (fairq's bulkhead pool).
    pub downstream: u32,
}

/// The result of asking a scheduler for work while a backend slot is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Serve this request.
    Granted(u32),
    /// This request's budget ran out while queued.
    Expired(u32),
    /// Nothing is ready.
    Empty,
}

/// A scheduler on the simulation's virtual clock.
pub trait Scheduler: Send {
    /// `fifo`, `drr`, `fairq` or `ideal`.
    fn name(&self) -> &'static str;
    /// Queues a request, or refuses it at once.
    fn enqueue(&mut self, offer: Offer, now: u64) -> Result<(), Reason>;
    /// The next request to serve; the caller guarantees a free backend slot.
    fn next(&mut self, now: u64) -> Pick;
    /// A granted request finished its service; `ok`: its downstream call succeeded.
    fn complete(&mut self, id: u32, now: u64, ok: bool);
    /// When a held request may become ready, if any is held.
    fn wakeup(&self) -> Option<u64>;
    /// The in-flight limit in force for each downstream (fairq's pools, which load shedding
    /// may cut); empty when the scheduler has none.
    fn downstream_limits(&self) -> Vec<u64> {
        Vec::new()
    }
    /// The wait the scheduler told request `id`'s client to expect when it was queued (fairq's
    /// estimate); `None` for schedulers that give none.
    fn estimated_wait_ns(&self, _id: u32) -> Option<u64> {
        None
    }
}

/// Builds the scheduler called `name`.
pub fn build(
    name: &str,
    rules: &QueueRules,
    config: &fairq::Config,
    tenants: &[Tenant],
) -> Box<dyn Scheduler> {
    match name {
        "fifo" => Box::new(Fifo::new(rules)),
        "drr" => Box::new(Drr::new(rules, tenants)),
        "fairq" => Box::new(Fairq::new(config, tenants)),
        "ideal" => Box::new(Ideal::new(rules, tenants)),
        other => panic!("unknown scheduler {other}"),
    }
}

/// Scheduler names, in report order: the three compared, then the reference.
pub const NAMES: [&str; 4] = ["fifo", "drr", "fairq", "ideal"];

/// The reference scheduler the isolation verdict compares the others with.
pub const REFERENCE: &str = "ideal";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    id: u32,
    tenant: u32,
    cost: u32,
    deadline: u64,
    not_before: u64,
}

fn entry(offer: Offer, now: u64, max_wait_ns: u64) -> Result<Entry, Reason> {
    let budget = match offer.timeout_ns {
        0 => max_wait_ns,
        t => t.min(max_wait_ns),
    };
    if offer.retry_after_ns > budget {
        return Err(Reason::WaitExceedsBudget);
    }
    Ok(Entry {
        id: offer.id,
        tenant: offer.tenant,
        cost: offer.cost,
        deadline: now + budget,
        not_before: now + offer.retry_after_ns,
    })
}

/// Requests held until their Retry-After passes (fifo, drr and ideal).
#[derive(Default)]
struct DelayLine {
    heap: BinaryHeap<Reverse<(u64, Entry)>>,
}

impl DelayLine {
    fn hold(&mut self, e: Entry) {
        self.heap.push(Reverse((e.not_before, e)));
    }

    fn release(&mut self, now: u64, mut ready: impl FnMut(Entry)) {
        while let Some(&Reverse((not_before, e))) = self.heap.peek() {
            if not_before > now {
                break;
            }
            self.heap.pop();
            ready(e);
        }
    }

    fn next(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }
}

/// The per-tenant and tenant-table bounds (drr and ideal), as fairq applies them: a tenant
/// counts against the table while it has held or in-flight requests.
struct Bounds {
    /// Per tenant: queued plus delayed requests.
    held: Vec<u32>,
    /// Per tenant: granted and not yet complete.
    in_flight: Vec<u32>,
    /// All tenants' held requests.
    total_held: u64,
    /// Tenants with held or in-flight requests.
    live_tenants: u32,
    capacity: u64,
    tenant_capacity: u32,
    max_tenants: u32,
}

impl Bounds {
    fn new(rules: &QueueRules, tenants: usize) -> Bounds {
        Bounds {
            held: vec![0; tenants],
            in_flight: vec![0; tenants],
            total_held: 0,
            live_tenants: 0,
            capacity: u64::from(rules.queue_capacity),
            tenant_capacity: rules.tenant_queue_capacity,
            max_tenants: rules.max_tenants,
        }
    }

    fn is_new(&self, t: usize) -> bool {
        self.held[t] == 0 && self.in_flight[t] == 0
    }

    /// Whether `tenant` may hold one more request.
    fn check(&self, tenant: u32) -> Result<(), Reason> {
        let t = tenant as usize;
        if self.is_new(t) && self.live_tenants >= self.max_tenants {
            return Err(Reason::TenantTableFull);
        }
        if self.held[t] >= self.tenant_capacity {
            return Err(Reason::TenantQueueFull);
        }
        if self.total_held >= self.capacity {
            return Err(Reason::QueueFull);
        }
        Ok(())
    }

    /// `tenant` holds one more request (after [`Bounds::check`]).
    fn hold(&mut self, tenant: u32) {
        let t = tenant as usize;
        if self.is_new(t) {
            self.live_tenants += 1;
        }
        self.held[t] += 1;
        self.total_held += 1;
    }

    /// A held request of `tenant` leaves the queue: granted, or answered without a grant.
    fn dequeued(&mut self, tenant: u32, granted: bool) {
        let t = tenant as usize;
        self.held[t] -= 1;
        self.total_held -= 1;
        if granted {
            self.in_flight[t] += 1;
        } else {
            self.release(tenant);
        }
    }

    /// A granted request of `tenant` completed.
    fn completed(&mut self, tenant: u32) {
        self.in_flight[tenant as usize] -= 1;
        self.release(tenant);
    }

    fn release(&mut self, tenant: u32) {
        let t = tenant as usize;
        if self.is_new(t) {
            self.live_tenants -= 1;
        }
    }
}

// ---------------------------------------------------------------------------------- fifo

/// One global first-in first-out queue.
pub struct Fifo {
    queue: VecDeque<Entry>,
    delayed: DelayLine,
    held: u64,
    capacity: u64,
    max_wait_ns: u64,
}

impl Fifo {
    fn new(rules: &QueueRules) -> Fifo {
        Fifo {
            queue: VecDeque::new(),
            delayed: DelayLine::default(),
            held: 0,
            capacity: u64::from(rules.queue_capacity),
            max_wait_ns: rules.max_wait_ms * MS,
        }
    }
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn enqueue(&mut self, offer: Offer, now: u64) -> Result<(), Reason> {
        if self.held >= self.capacity {
            return Err(Reason::QueueFull);
        }
        let e = entry(offer, now, self.max_wait_ns)?;
        self.held += 1;
        if e.not_before > now {
            self.delayed.hold(e);
        } else {
            self.queue.push_back(e);
        }
        Ok(())
    }

    fn next(&mut self, now: u64) -> Pick {
        let queue = &mut self.queue;
        self.delayed.release(now, |e| queue.push_back(e));
        let Some(head) = self.queue.pop_front() else {
            return Pick::Empty;
        };
        self.held -= 1;
        if now > head.deadline {
            Pick::Expired(head.id)
        } else {
            Pick::Granted(head.id)
        }
    }

    fn complete(&mut self, _id: u32, _now: u64, _ok: bool) {}

    fn wakeup(&self) -> Option<u64> {
        self.delayed.next()
    }
}

// ---------------------------------------------------------------------------------- drr

#[derive(Default)]
struct DrrTenant {
    queue: VecDeque<Entry>,
    deficit: i64,
    active: bool,
}

/// Deficit round robin: each visit adds `weight` to the tenant's deficit and serves its head
/// while the deficit covers the head's cost.
pub struct Drr {
    tenants: Vec<DrrTenant>,
    weights: Vec<u32>,
    active: VecDeque<u32>,
    /// The front tenant's visit has already added its quantum.
    visiting: bool,
    delayed: DelayLine,
    bounds: Bounds,
    max_wait_ns: u64,
    owner: Vec<u32>,
}

impl Drr {
    fn new(rules: &QueueRules, tenants: &[Tenant]) -> Drr {
        Drr {
            tenants: (0..tenants.len()).map(|_| DrrTenant::default()).collect(),
            weights: tenants.iter().map(|t| t.weight).collect(),
            active: VecDeque::new(),
            visiting: false,
            delayed: DelayLine::default(),
            bounds: Bounds::new(rules, tenants.len()),
            max_wait_ns: rules.max_wait_ms * MS,
            owner: Vec::new(),
        }
    }

    fn push_ready(&mut self, e: Entry) {
        let t = &mut self.tenants[e.tenant as usize];
        t.queue.push_back(e);
        if !t.active {
            t.active = true;
            t.deficit = 0;
            self.active.push_back(e.tenant);
        }
    }
}

impl Scheduler for Drr {
    fn name(&self) -> &'static str {
        "drr"
    }

    fn enqueue(&mut self, offer: Offer, now: u64) -> Result<(), Reason> {
        self.bounds.check(offer.tenant)?;
        let e = entry(offer, now, self.max_wait_ns)?;
        self.bounds.hold(offer.tenant);
        if e.not_before > now {
            self.delayed.hold(e);
        } else {
            self.push_ready(e);
        }
        Ok(())
    }

    fn next(&mut self, now: u64) -> Pick {
        let mut ready = Vec::new();
        self.delayed.release(now, |e| ready.push(e));
        for e in ready {
            self.push_ready(e);
        }
        loop {
            let Some(&front) = self.active.front() else {
                return Pick::Empty;
            };
            let weight = i64::from(self.weights[front as usize]);
            let t = &mut self.tenants[front as usize];
            if !self.visiting {
                t.deficit += weight;
                self.visiting = true;
            }
            let head = *t.queue.front().expect("active tenants have a head");
            let expired = now > head.deadline;
            if expired || i64::from(head.cost) <= t.deficit {
                t.queue.pop_front();
                if !expired {
                    t.deficit -= i64::from(head.cost);
                }
                if t.queue.is_empty() {
                    t.active = false;
                    t.deficit = 0;
                    self.active.pop_front();
                    self.visiting = false;
                }
                self.bounds.dequeued(head.tenant, !expired);
                if expired {
                    return Pick::Expired(head.id);
                }
                set_owner(&mut self.owner, head);
                return Pick::Granted(head.id);
            }
            // The visit is spent: the tenant keeps its deficit and goes to the back.
            self.active.rotate_left(1);
            self.visiting = false;
        }
    }

    fn complete(&mut self, id: u32, _now: u64, _ok: bool) {
        self.bounds.completed(self.owner[id as usize]);
    }

    fn wakeup(&self) -> Option<u64> {
        self.delayed.next()
    }
}

fn set_owner(owner: &mut Vec<u32>, e: Entry) {
    if owner.len() <= e.id as usize {
        owner.resize(e.id as usize + 1, 0);
    }
    owner[e.id as usize] = e.tenant;
}

// ---------------------------------------------------------------------------------- ideal

/// Non-preemptive strict priority: the tenants marked bursting are served only when no other
/// tenant has a ready request; each of the two levels is served in arrival order.
pub struct Ideal {
    bursting: Vec<bool>,
    /// Ready requests of the tenants not marked bursting.
    first: VecDeque<Entry>,
    /// Ready requests of the tenants marked bursting.
    last: VecDeque<Entry>,
    delayed: DelayLine,
    bounds: Bounds,
    max_wait_ns: u64,
    owner: Vec<u32>,
}

impl Ideal {
    fn new(rules: &QueueRules, tenants: &[Tenant]) -> Ideal {
        Ideal {
            bursting: tenants.iter().map(|t| t.bursting).collect(),
            first: VecDeque::new(),
            last: VecDeque::new(),
            delayed: DelayLine::default(),
            bounds: Bounds::new(rules, tenants.len()),
            max_wait_ns: rules.max_wait_ms * MS,
            owner: Vec::new(),
        }
    }

    fn push_ready(&mut self, e: Entry) {
        if self.bursting[e.tenant as usize] {
            self.last.push_back(e);
        } else {
            self.first.push_back(e);
        }
    }
}

impl Scheduler for Ideal {
    fn name(&self) -> &'static str {
        "ideal"
    }

    fn enqueue(&mut self, offer: Offer, now: u64) -> Result<(), Reason> {
        self.bounds.check(offer.tenant)?;
        let e = entry(offer, now, self.max_wait_ns)?;
        self.bounds.hold(offer.tenant);
        if e.not_before > now {
            self.delayed.hold(e);
        } else {
            self.push_ready(e);
        }
        Ok(())
    }

    fn next(&mut self, now: u64) -> Pick {
        let mut ready = Vec::new();
        self.delayed.release(now, |e| ready.push(e));
        for e in ready {
            self.push_ready(e);
        }
        let Some(head) = self.first.pop_front().or_else(|| self.last.pop_front()) else {
            return Pick::Empty;
        };
        let expired = now > head.deadline;
        self.bounds.dequeued(head.tenant, !expired);
        if expired {
            return Pick::Expired(head.id);
        }
        set_owner(&mut self.owner, head);
        Pick::Granted(head.id)
    }

    fn complete(&mut self, id: u32, _now: u64, _ok: bool) {
        self.bounds.completed(self.owner[id as usize]);
    }

    fn wakeup(&self) -> Option<u64> {
        self.delayed.next()
    }
}

// ---------------------------------------------------------------------------------- fairq

/// The real engine. Request ids travel as `user_data`; nothing of the engine is modelled.
pub struct Fairq {
    engine: Engine,
    keys: Vec<TenantKey>,
    tickets: Vec<fairq::Ticket>,
    /// The estimated wait each request was queued with.
    estimates: Vec<u64>,
    owner: Vec<u32>,
    /// Each request's downstream, for its report at completion.
    downstream: Vec<u32>,
    /// Downstreams with a bulkhead pool.
    pools: u32,
}

impl Fairq {
    fn new(config: &fairq::Config, tenants: &[Tenant]) -> Fairq {
        let engine = Engine::new(config.clone()).expect("scenario rules form a valid config");
        let mut keys = Vec::with_capacity(tenants.len());
        for t in tenants {
            if t.weight != config.default_weight {
                engine
                    .set_weight(&t.raw, t.weight)
                    .expect("scenario weights fit the engine's classes");
            }
            keys.push(TenantKey::from_raw(t.raw.as_bytes()));
        }
        Fairq {
            engine,
            keys,
            tickets: Vec::new(),
            estimates: Vec::new(),
            owner: Vec::new(),
            downstream: Vec::new(),
            pools: config.downstream_max_in_flight.len() as u32,
        }
    }
}

impl Scheduler for Fairq {
    fn name(&self) -> &'static str {
        "fairq"
    }

    fn enqueue(&mut self, offer: Offer, now: u64) -> Result<(), Reason> {
        let request = Request {
            user_data: u64::from(offer.id),
            cost: offer.cost,
            retry_after_ns: offer.retry_after_ns,
            timeout_ns: offer.timeout_ns,
            downstream: offer.downstream,
            ..Request::new(self.keys[offer.tenant as usize], Dimension::User)
        };
        if self.owner.len() <= offer.id as usize {
            self.owner.resize(offer.id as usize + 1, 0);
            self.downstream.resize(offer.id as usize + 1, 0);
        }
        self.owner[offer.id as usize] = offer.tenant;
        self.downstream[offer.id as usize] = offer.downstream;
        match self.engine.enqueue_at(&request, now) {
            Ok(Enqueued::Queued {
                estimated_wait_ns, ..
            }) => {
                if self.estimates.len() <= offer.id as usize {
                    self.estimates.resize(offer.id as usize + 1, 0);
                }
                self.estimates[offer.id as usize] = estimated_wait_ns;
                Ok(())
            }
            Ok(Enqueued::Refused(refusal)) => Err(refusal.reason),
            Err(e) => panic!("engine rejected a valid request: {e}"),
        }
    }

    fn next(&mut self, now: u64) -> Pick {
        match self.engine.next_grant_at(now) {
            NextGrant::Granted(grant) => {
                let id = grant.user_data as u32;
                assert_eq!(
                    grant.tenant, self.keys[self.owner[id as usize] as usize],
                    "engine granted request {id} under another tenant"
                );
                if self.tickets.len() <= id as usize {
                    self.tickets.resize(id as usize + 1, fairq::Ticket(0));
                }
                self.tickets[id as usize] = grant.ticket;
                Pick::Granted(id)
            }
            NextGrant::Expired(expired) => Pick::Expired(expired.user_data as u32),
            NextGrant::Empty => Pick::Empty,
            NextGrant::AtCapacity => {
                panic!("engine says AtCapacity while the simulation holds a free slot")
            }
        }
    }

    fn complete(&mut self, id: u32, now: u64, ok: bool) {
        if self.pools > 0 {
            self.engine
                .report_downstream_at(self.downstream[id as usize], ok, now)
                .expect("the request's downstream names a pool");
        }
        let ticket = self.tickets[id as usize];
        match self
            .engine
            .complete_at(ticket, Outcome::Admitted, None, now)
        {
            Ok(Completion::Completed) => {}
            other => panic!("engine completion of request {id}: {other:?}"),
        }
    }

    fn wakeup(&self) -> Option<u64> {
        self.engine.next_wakeup_ns()
    }

    fn estimated_wait_ns(&self, id: u32) -> Option<u64> {
        self.estimates.get(id as usize).copied()
    }

    fn downstream_limits(&self) -> Vec<u64> {
        (0..self.pools)
            .map(|d| self.engine.downstream_limit(d).unwrap_or(0))
            .collect()
    }
}
