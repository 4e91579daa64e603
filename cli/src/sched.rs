//! The three schedulers the simulation compares, behind one trait.
//!
//! - `fifo`: one global queue, served in arrival order. Its only bound is the global one.
//! - `drr`: deficit round robin over per-tenant queues, quantum = weight (in cost units).
//! - `fairq`: the real [`fairq::Engine`], driven through its public API only.
//!
//! All three apply the same rules: a request's budget is `min(max_wait_ms, its timeout)`; a
//! Retry-After that does not fit the budget is refused (`wait_exceeds_budget`); a request whose
//! deadline passed is answered `deadline_exceeded` when it reaches the head instead of being
//! served late; the global queue holds at most `queue_capacity` requests. drr, like fairq, also
//! bounds each tenant's queue and the number of tenants. fifo and drr hold a not-yet-ready request
//! (Retry-After) aside, counted in the bounds, and queue it when it becomes ready.

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
    /// `fifo`, `drr` or `fairq`.
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
        other => panic!("unknown scheduler {other}"),
    }
}

/// Scheduler names, in report order.
pub const NAMES: [&str; 3] = ["fifo", "drr", "fairq"];

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

/// Requests held until their Retry-After passes (fifo and drr).
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
    /// Queued plus delayed (the per-tenant bound).
    held: u32,
    in_flight: u32,
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
    held: u64,
    /// Tenants with held or in-flight requests (the tenant-table bound).
    live_tenants: u32,
    capacity: u64,
    tenant_capacity: u32,
    max_tenants: u32,
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
            held: 0,
            live_tenants: 0,
            capacity: u64::from(rules.queue_capacity),
            tenant_capacity: rules.tenant_queue_capacity,
            max_tenants: rules.max_tenants,
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

    fn release_tenant(&mut self, tenant: u32) {
        let t = &self.tenants[tenant as usize];
        if t.held == 0 && t.in_flight == 0 {
            self.live_tenants -= 1;
        }
    }
}

impl Scheduler for Drr {
    fn name(&self) -> &'static str {
        "drr"
    }

    fn enqueue(&mut self, offer: Offer, now: u64) -> Result<(), Reason> {
        let t = &self.tenants[offer.tenant as usize];
        let new_tenant = t.held == 0 && t.in_flight == 0;
        if new_tenant && self.live_tenants >= self.max_tenants {
            return Err(Reason::TenantTableFull);
        }
        if t.held >= self.tenant_capacity {
            return Err(Reason::TenantQueueFull);
        }
        if self.held >= self.capacity {
            return Err(Reason::QueueFull);
        }
        let e = entry(offer, now, self.max_wait_ns)?;
        if new_tenant {
            self.live_tenants += 1;
        }
        self.tenants[offer.tenant as usize].held += 1;
        self.held += 1;
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
                t.held -= 1;
                self.held -= 1;
                if !expired {
                    t.deficit -= i64::from(head.cost);
                    t.in_flight += 1;
                }
                if t.queue.is_empty() {
                    t.active = false;
                    t.deficit = 0;
                    self.active.pop_front();
                    self.visiting = false;
                }
                if expired {
                    self.release_tenant(head.tenant);
                    return Pick::Expired(head.id);
                }
                if self.owner.len() <= head.id as usize {
                    self.owner.resize(head.id as usize + 1, 0);
                }
                self.owner[head.id as usize] = head.tenant;
                return Pick::Granted(head.id);
            }
            // The visit is spent: the tenant keeps its deficit and goes to the back.
            self.active.rotate_left(1);
            self.visiting = false;
        }
    }

    fn complete(&mut self, id: u32, _now: u64, _ok: bool) {
        let tenant = self.owner[id as usize];
        self.tenants[tenant as usize].in_flight -= 1;
        self.release_tenant(tenant);
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
            Ok(Enqueued::Queued { .. }) => Ok(()),
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

    fn downstream_limits(&self) -> Vec<u64> {
        (0..self.pools)
            .map(|d| self.engine.downstream_limit(d).unwrap_or(0))
            .collect()
    }
}
