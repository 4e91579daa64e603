//! The values that cross the engine's API: requests, tickets, grants, refusals and errors.

use std::fmt;

use crate::identity::{Dimension, TenantKey};

/// A handle to a queued or granted request: slot index (low 32 bits) plus generation (high 32).
///
/// A handle whose generation no longer matches its slot is stale and is rejected with
/// [`Error::StaleTicket`]; it can never reach another request's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(pub u64);

impl Ticket {
    pub(crate) fn new(index: u32, generation: u32) -> Ticket {
        Ticket((u64::from(generation) << 32) | u64::from(index))
    }
    pub(crate) fn index(self) -> u32 {
        self.0 as u32
    }
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// Why a request was refused. The numbers are part of the C ABI and never change meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Reason {
    /// The global queue bound is reached.
    QueueFull = 1,
    /// The tenant's queue bound is reached.
    TenantQueueFull = 2,
    /// No tenant slot is free.
    TenantTableFull = 3,
    /// The Retry-After does not fit the remaining budget.
    WaitExceedsBudget = 4,
    /// The budget ran out while queued.
    DeadlineExceeded = 5,
    /// The refusing dimension names no tenant.
    NotQueueable = 6,
    /// The request has no user, team or key identifier.
    NoTenant = 7,
    /// The engine is disabled.
    Disabled = 8,
    /// The caller cancelled the request.
    Cancelled = 9,
    /// Its downstream's bulkhead pool is shedding load (its error rate passed the threshold)
    /// and cannot serve it within its budget.
    DownstreamShedding = 10,
}

impl Reason {
    /// Every reason, in code order.
    pub const ALL: [Reason; 10] = [
        Reason::QueueFull,
        Reason::TenantQueueFull,
        Reason::TenantTableFull,
        Reason::WaitExceedsBudget,
        Reason::DeadlineExceeded,
        Reason::NotQueueable,
        Reason::NoTenant,
        Reason::Disabled,
        Reason::Cancelled,
        Reason::DownstreamShedding,
    ];

    /// The snake_case name used in metrics and error details.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QueueFull => "queue_full",
            Reason::TenantQueueFull => "tenant_queue_full",
            Reason::TenantTableFull => "tenant_table_full",
            Reason::WaitExceedsBudget => "wait_exceeds_budget",
            Reason::DeadlineExceeded => "deadline_exceeded",
            Reason::NotQueueable => "not_queueable",
            Reason::NoTenant => "no_tenant",
            Reason::Disabled => "disabled",
            Reason::Cancelled => "cancelled",
            Reason::DownstreamShedding => "downstream_shedding",
        }
    }

    /// Whether the same request, sent again later, can be served: false only for a request
    /// that names no tenant (`NoTenant`), which a gateway answers without `Retry-After`. A
    /// `NotQueueable` refusal comes from a limiter on a dimension that names no tenant (a
    /// global limit): its Retry-After stands.
    pub fn retry_can_help(self) -> bool {
        self != Reason::NoTenant
    }

    /// The reason with this code, if any.
    pub fn from_code(code: u32) -> Option<Reason> {
        Reason::ALL.get((code as usize).wrapping_sub(1)).copied()
    }

    pub(crate) fn index(self) -> usize {
        self as usize - 1
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused request, on arrival or after waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub reason: Reason,
    /// The 1-based place it had, or would have had, in its tenant's queue (0: not applicable).
    pub position: u32,
    /// Time it spent queued, in ns (0 when refused on arrival).
    pub waited_ns: u64,
}

/// What a limiter refusal hands to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The tenant, or `None` when the request carries no identifier (refused `no_tenant`).
    pub tenant: Option<TenantKey>,
    /// The limiter dimension that refused it.
    pub dimension: Dimension,
    /// Opaque caller data, returned with the grant (a request pointer, an id).
    pub user_data: u64,
    /// Estimated cost in resource units. 1..=1000000.
    pub cost: u32,
    /// The limiter's Retry-After, in ns: the request is not ready before now + this.
    pub retry_after_ns: u64,
    /// The request's remaining total timeout, in ns; 0 means none (the budget is `max_wait_ms`).
    pub timeout_ns: u64,
    /// The downstream class (bulkhead pool) it goes to, `0..downstream_max_in_flight.len()`.
    /// Ignored while bulkheads are off. Default 0.
    pub downstream: u32,
}

impl Request {
    /// A cost-1 request for `tenant`, refused by `dimension`, ready at once, no own timeout.
    pub fn new(tenant: TenantKey, dimension: Dimension) -> Request {
        Request {
            tenant: Some(tenant),
            dimension,
            user_data: 0,
            cost: 1,
            retry_after_ns: 0,
            timeout_ns: 0,
            downstream: 0,
        }
    }
}

/// The result of `enqueue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// Held in the tenant's queue.
    Queued {
        /// The handle for `cancel`, and later `complete`.
        ticket: Ticket,
        /// 1-based place in the tenant's queue.
        position: u32,
        /// The wait to expect, in ns: Retry-After, plus what the tenant's requests that found
        /// nothing ahead waited, plus the measured time between its grants for each request
        /// ahead (a tenant with nothing measured yet is estimated from other tenants, scaled by
        /// weight; a cold engine tells only the Retry-After).
        estimated_wait_ns: u64,
    },
    /// Refused at once, nothing queued.
    Refused(Refusal),
}

/// A request released by the scheduler: the caller re-checks its limiter, then calls `complete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The ticket, now granted and holding one in-flight permit.
    pub ticket: Ticket,
    /// The tenant it belongs to.
    pub tenant: TenantKey,
    /// The caller data given at enqueue.
    pub user_data: u64,
    /// Its cost in resource units.
    pub cost: u32,
    /// Time since its first enqueue, in ns.
    pub waited_ns: u64,
    /// Its position at (re)enqueue.
    pub position: u32,
    /// The estimate made at (re)enqueue, in ns.
    pub estimated_wait_ns: u64,
    /// Budget left for later stages, in ns.
    pub remaining_budget_ns: u64,
}

/// A request the queue ended without granting (its deadline passed while queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The ticket, now ended.
    pub ticket: Ticket,
    /// The tenant it belonged to.
    pub tenant: TenantKey,
    /// The caller data given at enqueue.
    pub user_data: u64,
    /// Why, with position and wait.
    pub refusal: Refusal,
}

/// The result of `next_grant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextGrant {
    /// A request to admit.
    Granted(Grant),
    /// A queued request whose budget ran out: answer it with its refusal (`deadline_exceeded`).
    Expired(Expired),
    /// Nothing is ready for this caller: no queued request is ready, or the tenant whose turn
    /// it is (the only one ready, or the one taking most of the grants) is being served by
    /// another caller, which goes on granting it.
    Empty,
    /// `max_in_flight` grants are out.
    AtCapacity,
}

/// How a granted request fared when it re-checked its limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted: the ticket ends.
    Admitted,
    /// Still refused: requeue it, ready after this many ns, within its own budget.
    StillRefused {
        /// The limiter's new Retry-After, in ns.
        retry_after_ns: u64,
    },
}

/// The result of `complete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The ticket ended (admitted).
    Completed,
    /// Back in its tenant's queue; the ticket stays valid.
    Requeued {
        /// 1-based place in the tenant's queue.
        position: u32,
        /// The wait to expect, in ns, estimated as for `Enqueued::Queued`.
        estimated_wait_ns: u64,
    },
    /// Could not be requeued: the ticket ended with this refusal.
    Refused(Refusal),
}

/// A call that could not be carried out. Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The ticket's generation does not match: it already ended, or it was forged.
    StaleTicket,
    /// The ticket is live but not in a state for this call (e.g. completing a queued ticket).
    TicketState,
    /// An argument is out of range; names it.
    InvalidArgument(&'static str),
    /// A new distinct weight would exceed `max_weight_classes`.
    TooManyWeightClasses,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::StaleTicket => f.write_str("stale or unknown ticket"),
            Error::TicketState => f.write_str("ticket is not in a state for this call"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::TooManyWeightClasses => f.write_str("too many distinct weights"),
        }
    }
}

impl std::error::Error for Error {}

/// The engine's gauges and counters. Counters only grow. Each field is read on its own (no lock
/// makes them one instant), gauges first: while other threads work, a read can count a request
/// as cancelled that the queued gauge, read a moment before, still counted as queued. Once
/// callers are quiet the fields agree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests queued now (cancelled ones excluded).
    pub queued: u64,
    /// Grants out now.
    pub in_flight: u64,
    /// Tenants with queued or in-flight requests now. A cancelled request's tenant counts until a
    /// `next_grant` sweeps the entry (a parked one at its wake-up).
    pub tenants: u64,
    /// Requests accepted into a queue (each ticket once).
    pub enqueued: u64,
    /// Grants made (a requeued ticket can be granted again).
    pub granted: u64,
    /// Of those, grants made through the light-tenant lane (`Config::light_lane`).
    pub lane_granted: u64,
    /// Tickets ended admitted.
    pub completed: u64,
    /// Grants put back into their queue (still refused).
    pub requeued: u64,
    /// Tickets ended by `cancel`.
    pub cancelled: u64,
    /// Tickets ended by their deadline while queued (`deadline_exceeded`).
    pub expired: u64,
    /// Tickets ended because a requeue did not fit (after waiting).
    pub refused_after_wait: u64,
    /// All refusals by reason code (index = code - 1), on arrival and after waiting.
    pub refused: [u64; Reason::ALL.len()],
}

impl Stats {
    /// Tickets that ended, by any path.
    pub fn ended(&self) -> u64 {
        self.completed + self.cancelled + self.expired + self.refused_after_wait
    }

    /// Refusals with this reason.
    pub fn refused_for(&self, reason: Reason) -> u64 {
        self.refused[reason.index()]
    }
}

/// Which tenants a status dump ([`crate::Engine::status`]) lists first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusOrder {
    /// The most requests queued first.
    #[default]
    Depth,
    /// The longest-waiting queue head first.
    OldestWait,
}

/// The engine's gauges alone ([`crate::Engine::load`]), read in O(1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Requests queued now.
    pub queued: u64,
    /// Grants out now (seats, with seats on).
    pub in_flight: u64,
    /// Tenants holding a slot now.
    pub tenants: u64,
}

/// A configuration value out of its range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault, as named in `Config`; for the table cap, the fields that size the
    /// largest table (`"max_tenants x tenant_queue_capacity"`, ...).
    pub field: &'static str,
    /// What is allowed and what was given.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config `{}`: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}
