//! The `#[repr(C)]` structs of the C ABI and their conversions to and from the core types.
//!
//! Layouts are part of the ABI: a field is never moved, retyped or removed within a major
//! version (see `docs/c-api.md`, "ABI stability").

use std::os::raw::c_char;

use super::codes::*;
use crate::config::Config;
use crate::engine::Engine;
use crate::identity::{Dimension, TenantDimension, TenantKey};
use crate::types::{Completion, Expired, Grant, Refusal, Request, Stats};

/// An engine. Opaque: made by `fairq_engine_new`, released by `fairq_engine_free`.
pub struct fairq_engine {
    /// `ENGINE_MAGIC` while the engine is live; a cheap check against pointers to other objects.
    pub(crate) magic: u64,
    /// Shared, so a fleet (`fairq_fleet_new`, feature `fleet`) can hold the engine too: freeing
    /// the handle drops this reference, and the engine lives on until the fleet is freed. A
    /// plain `std` Arc (not the loom shim): only the handle's lifetime rides on it.
    pub(crate) engine: std::sync::Arc<Engine>,
}

/// "fairq-en" in ASCII.
pub(crate) const ENGINE_MAGIC: u64 = 0x6661_6972_712d_656e;
/// "fairq-fr" in ASCII: the tag `fairq_engine_free` leaves in a handle it releases, so a stale
/// handle is refused while its memory is not reused.
pub(crate) const ENGINE_FREED: u64 = 0x6661_6972_712d_6672;

// The header promises that every call but `fairq_engine_free` may run concurrently from any
// thread: that rests on the handle being `Send + Sync`. This fails to compile if it stops being.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<fairq_engine>();
};

/// How an engine is sized and what it does. Start from `fairq_config_default`, then change
/// fields. Ranges are checked by `fairq_config_check` and `fairq_engine_new`.
///
/// Besides each field's range, the engine's fixed tables must fit in 4 GiB (4294967296 bytes),
/// so the largest values cannot all be used at once. The tables take
/// `S * (640 + 16 * R) + max_weight_classes * (256 + 16 * S) + 64 * (queue_capacity +
/// max_in_flight)` bytes, where `S = max_tenants + max_tenants / 4 + 1` (tenant slots) and
/// `R = tenant_queue_capacity + tenant_queue_capacity / 2 + 1` (ring entries per tenant): about
/// `max_tenants * (820 + 30 * tenant_queue_capacity + 20 * max_weight_classes)` bytes plus the
/// tickets. For
/// example, with the other fields at their defaults, `max_tenants` 4194304 fits only with
/// `tenant_queue_capacity` 1, and `tenant_queue_capacity` 1048576 only with `max_tenants` up to
/// 135. Over the cap, `fairq_config_check` names the fields whose product is too large and the
/// bytes needed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct fairq_config {
    /// Off by default: a disabled engine refuses every request with `FAIRQ_REASON_DISABLED`.
    pub enabled: bool,
    /// Which identifier names the tenant: `FAIRQ_TENANT_DIM_*`. Default user.
    pub tenant_dimension: u32,
    /// Tenant table capacity. A new tenant is refused `FAIRQ_REASON_TENANT_TABLE_FULL` while
    /// `max_tenants` tenants are active; a tenant coming back to its own idle slot is always let
    /// in, so up to `max_tenants + max_tenants / 4 + 1` (the table's slots) can be active.
    /// 1..=4194304 (and the table cap above). Default 1024.
    pub max_tenants: u32,
    /// Per-tenant queue bound. 1..=1048576 (and the table cap above). Default 64.
    pub tenant_queue_capacity: u32,
    /// Global bound on queued requests. 1..=16777216. Default 4096.
    pub queue_capacity: u32,
    /// Most grants out at once. 1..=1048576. Default 8.
    pub max_in_flight: u32,
    /// Weight of a tenant with no entry. 1..=10000. Default 1.
    pub default_weight: u32,
    /// Most distinct weights in use at once. 1..=64. Default 8.
    pub max_weight_classes: u32,
    /// Longest a request may wait, in ms. 1..=86400000. Default 30000.
    pub max_wait_ms: u64,
    /// How long an idle tenant keeps its slot, in ms. 0..=86400000. Default 1000.
    pub tenant_idle_ms: u64,
}

impl From<&Config> for fairq_config {
    fn from(c: &Config) -> fairq_config {
        fairq_config {
            enabled: c.enabled,
            tenant_dimension: c.tenant_dimension as u32,
            max_tenants: c.max_tenants,
            tenant_queue_capacity: c.tenant_queue_capacity,
            queue_capacity: c.queue_capacity,
            max_in_flight: c.max_in_flight,
            default_weight: c.default_weight,
            max_weight_classes: c.max_weight_classes,
            max_wait_ms: c.max_wait_ms,
            tenant_idle_ms: c.tenant_idle_ms,
        }
    }
}

impl fairq_config {
    /// The core config, or the message naming the bad field.
    pub(crate) fn to_config(self) -> Result<Config, String> {
        let tenant_dimension =
            TenantDimension::from_code(self.tenant_dimension).ok_or_else(|| {
                format!(
                "invalid config `tenant_dimension`: must be 0 (user), 1 (api_key) or 2 (team), \
                 got {}",
                self.tenant_dimension
            )
            })?;
        let config = Config {
            enabled: self.enabled,
            max_tenants: self.max_tenants,
            tenant_queue_capacity: self.tenant_queue_capacity,
            queue_capacity: self.queue_capacity,
            max_in_flight: self.max_in_flight,
            default_weight: self.default_weight,
            max_wait_ms: self.max_wait_ms,
            tenant_dimension,
            tenant_idle_ms: self.tenant_idle_ms,
            max_weight_classes: self.max_weight_classes,
            ..Config::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// A request a limiter just refused, handed to `fairq_enqueue`. Zero-initialise it, then set
/// the fields: `{0}` plus a tenant key and a dimension is a valid cost-1 request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_request {
    /// The tenant (`fairq_tenant_key`, `fairq_resolve_tenant`, never 0); 0 means the request
    /// carries no identifier: `fairq_enqueue` refuses it with `FAIRQ_REASON_NO_TENANT` (status
    /// `FAIRQ_REFUSED`, not an error).
    pub tenant_key: u64,
    /// Opaque caller data, returned with the grant (a request pointer, an id).
    pub user_data: u64,
    /// The limiter's Retry-After, in ns: not ready before now + this.
    pub retry_after_ns: u64,
    /// The request's remaining total timeout, in ns; 0 means none (the budget is `max_wait_ms`).
    pub timeout_ns: u64,
    /// The limiter dimension that refused it: `FAIRQ_DIM_*`.
    pub dimension: u32,
    /// Estimated cost in resource units, 1..=1000000; 0 means 1.
    pub cost: u32,
}

impl fairq_request {
    pub(crate) fn to_request(self) -> Result<Request, i32> {
        let dimension = Dimension::from_code(self.dimension).ok_or(FAIRQ_ERR_INVALID_ARGUMENT)?;
        Ok(Request {
            tenant: (self.tenant_key != 0).then(|| TenantKey::from_hash(self.tenant_key)),
            user_data: self.user_data,
            cost: self.cost.max(1),
            retry_after_ns: self.retry_after_ns,
            timeout_ns: self.timeout_ns,
            ..Request::new(TenantKey::from_hash(1), dimension)
        })
    }
}

/// What `fairq_enqueue` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_enqueue_result {
    /// `FAIRQ_QUEUED`: the handle for `fairq_cancel` and, once granted, `fairq_complete`.
    /// `FAIRQ_REFUSED`: 0.
    pub ticket: u64,
    /// `FAIRQ_QUEUED`: the wait to expect, in ns: Retry-After, plus what the tenant's requests
    /// that found nothing ahead waited, plus its measured time between grants for each request
    /// ahead (a tenant with nothing measured is estimated from other tenants by weight; an engine
    /// that measured nothing yet tells only the Retry-After).
    pub estimated_wait_ns: u64,
    /// The 1-based place in the tenant's queue it has, or would have had (0: not applicable).
    pub position: u32,
    /// `FAIRQ_REFUSED`: why (`FAIRQ_REASON_*`). `FAIRQ_QUEUED`: `FAIRQ_REASON_NONE`.
    pub reason: u32,
}

impl fairq_enqueue_result {
    pub(crate) fn refused(refusal: Refusal) -> fairq_enqueue_result {
        fairq_enqueue_result {
            ticket: 0,
            estimated_wait_ns: 0,
            position: refusal.position,
            reason: refusal.reason as u32,
        }
    }
}

/// What `fairq_next_grant` released. On `FAIRQ_OK` a grant: re-check the limiter, then call
/// `fairq_complete`. On `FAIRQ_EXPIRED` a queued request whose budget ran out: answer it with
/// `reason`, `position` and `waited_ns`; its ticket has already ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_grant {
    /// The ticket: granted, holding one in-flight permit (`FAIRQ_OK`); ended (`FAIRQ_EXPIRED`).
    pub ticket: u64,
    /// The tenant it belongs to.
    pub tenant_key: u64,
    /// The caller data given at enqueue.
    pub user_data: u64,
    /// Time since its first enqueue, in ns.
    pub waited_ns: u64,
    /// The estimate made at (re)enqueue, in ns (`FAIRQ_OK` only).
    pub estimated_wait_ns: u64,
    /// Budget left for later stages, in ns (`FAIRQ_OK` only).
    pub remaining_budget_ns: u64,
    /// Its cost in resource units (`FAIRQ_OK` only).
    pub cost: u32,
    /// Its position at (re)enqueue.
    pub position: u32,
    /// `FAIRQ_EXPIRED`: `FAIRQ_REASON_DEADLINE_EXCEEDED`. `FAIRQ_OK`: `FAIRQ_REASON_NONE`.
    pub reason: u32,
}

impl From<Grant> for fairq_grant {
    fn from(g: Grant) -> fairq_grant {
        fairq_grant {
            ticket: g.ticket.0,
            tenant_key: g.tenant.get(),
            user_data: g.user_data,
            waited_ns: g.waited_ns,
            estimated_wait_ns: g.estimated_wait_ns,
            remaining_budget_ns: g.remaining_budget_ns,
            cost: g.cost,
            position: g.position,
            reason: FAIRQ_REASON_NONE,
        }
    }
}

impl From<Expired> for fairq_grant {
    fn from(e: Expired) -> fairq_grant {
        fairq_grant {
            ticket: e.ticket.0,
            tenant_key: e.tenant.get(),
            user_data: e.user_data,
            waited_ns: e.refusal.waited_ns,
            estimated_wait_ns: 0,
            remaining_budget_ns: 0,
            cost: 0,
            position: e.refusal.position,
            reason: e.refusal.reason as u32,
        }
    }
}

/// What `fairq_complete` did, when the caller asks (the pointer may be NULL).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_completion {
    /// `FAIRQ_REQUEUED`: the wait to expect, in ns, estimated as at enqueue.
    pub estimated_wait_ns: u64,
    /// `FAIRQ_REFUSED`: time it spent queued, in ns.
    pub waited_ns: u64,
    /// `FAIRQ_REQUEUED`/`FAIRQ_REFUSED`: 1-based place it has, or would have had.
    pub position: u32,
    /// `FAIRQ_REFUSED`: why (`FAIRQ_REASON_*`); otherwise `FAIRQ_REASON_NONE`.
    pub reason: u32,
}

impl From<Completion> for fairq_completion {
    fn from(c: Completion) -> fairq_completion {
        match c {
            Completion::Completed => fairq_completion::default(),
            Completion::Requeued {
                position,
                estimated_wait_ns,
            } => fairq_completion {
                estimated_wait_ns,
                position,
                ..fairq_completion::default()
            },
            Completion::Refused(r) => fairq_completion {
                waited_ns: r.waited_ns,
                position: r.position,
                reason: r.reason as u32,
                ..fairq_completion::default()
            },
        }
    }
}

/// The engine's gauges and counters (`fairq_get_stats`, which says what a read guarantees).
/// Counters only grow; gauges stay within their bounds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_stats {
    /// Requests queued now.
    pub queued: u64,
    /// Grants out now.
    pub in_flight: u64,
    /// Tenants holding a slot now (with queued or in-flight requests, or a cancelled one that no
    /// `fairq_next_grant` has swept yet); see `fairq_get_stats` for its bound.
    pub tenants: u64,
    /// Requests accepted into a queue (each ticket once).
    pub enqueued: u64,
    /// Grants made (a requeued ticket can be granted again).
    pub granted: u64,
    /// Tickets ended admitted.
    pub completed: u64,
    /// Grants put back into their queue (still refused).
    pub requeued: u64,
    /// Tickets ended by `fairq_cancel`.
    pub cancelled: u64,
    /// Tickets ended by their deadline while queued (returned as `FAIRQ_EXPIRED`, or ended by
    /// `fairq_expire`).
    pub expired: u64,
    /// Tickets ended because a requeue did not fit.
    pub refused_after_wait: u64,
    /// All refusals, on arrival and after waiting, indexed by reason code (`FAIRQ_REASON_*`);
    /// index 0 and unused codes stay 0. Conservation, once no call is running:
    /// `enqueued == queued + in_flight + completed + cancelled + expired + refused_after_wait`.
    pub refused: [u64; FAIRQ_REASON_SLOTS],
}

impl From<Stats> for fairq_stats {
    fn from(s: Stats) -> fairq_stats {
        let mut refused = [0u64; FAIRQ_REASON_SLOTS];
        for (code, count) in s.refused.iter().enumerate() {
            refused[code + 1] = *count;
        }
        fairq_stats {
            queued: s.queued,
            in_flight: s.in_flight,
            tenants: s.tenants,
            enqueued: s.enqueued,
            granted: s.granted,
            completed: s.completed,
            requeued: s.requeued,
            cancelled: s.cancelled,
            expired: s.expired,
            refused_after_wait: s.refused_after_wait,
            refused,
        }
    }
}

/// The identifiers a request carries, for `fairq_resolve_tenant`. Each is a byte string with a
/// length (not NUL-terminated); NULL or length 0 means "absent". Values must be UTF-8.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fairq_identity {
    /// User id.
    pub user: *const c_char,
    /// Bytes in `user`.
    pub user_len: usize,
    /// Team id.
    pub team: *const c_char,
    /// Bytes in `team`.
    pub team_len: usize,
    /// The API key's stable, non-secret identifier.
    pub api_key: *const c_char,
    /// Bytes in `api_key`.
    pub api_key_len: usize,
    /// True when `team` is the placeholder a key without a team carries: not an identifier.
    pub team_is_placeholder: bool,
}

/// One entry of a weight table for `fairq_replace_weights`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_weight_entry {
    /// The tenant (`fairq_tenant_key` of its raw identifier); 0 names no tenant and makes
    /// `fairq_replace_weights` fail with `FAIRQ_ERR_INVALID_ARGUMENT`.
    pub tenant_key: u64,
    /// Its weight, 1..=10000.
    pub weight: u32,
}
