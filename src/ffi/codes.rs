//! Stable numbers: statuses, refusal reasons, dimensions, tenant dimensions, outcomes, and the
//! functions that name them. A number, once released, never changes meaning; new ones are added
//! at the end.

use std::ffi::CStr;
use std::os::raw::c_char;

// ---------------------------------------------------------------- statuses

/// Success.
pub const FAIRQ_OK: i32 = 0;
/// `fairq_enqueue`: the request is held in its tenant's queue; the result has its ticket.
pub const FAIRQ_QUEUED: i32 = 1;
/// The request was refused; the result carries the reason (`FAIRQ_REASON_*`) and position.
pub const FAIRQ_REFUSED: i32 = 2;
/// `fairq_next_grant`: nothing is ready now. `fairq_next_wakeup_ns`: nothing is parked.
pub const FAIRQ_EMPTY: i32 = 3;
/// `fairq_next_grant`: `max_in_flight` grants are out; complete one first.
pub const FAIRQ_AT_CAPACITY: i32 = 4;
/// `fairq_next_grant`: a queued request's budget ran out; the grant struct carries its
/// `user_data` and reason `FAIRQ_REASON_DEADLINE_EXCEEDED`. Answer it; it was never granted.
pub const FAIRQ_EXPIRED: i32 = 5;
/// `fairq_complete` (still refused): the request is back in its tenant's queue; its ticket stays
/// valid.
pub const FAIRQ_REQUEUED: i32 = 6;
/// The thing asked about does not exist (no identifier to resolve, tenant holds no slot).
pub const FAIRQ_NOT_FOUND: i32 = 7;
/// `fairq_fleet_stop`: no sync thread was running; nothing changed (stopping is idempotent).
pub const FAIRQ_NOT_RUNNING: i32 = 8;

/// A required pointer argument was NULL.
pub const FAIRQ_ERR_NULL: i32 = -1;
/// A `fairq_config` field is out of range (`fairq_config_check` names it).
pub const FAIRQ_ERR_INVALID_CONFIG: i32 = -2;
/// The ticket already ended, or was never issued.
pub const FAIRQ_ERR_STALE_TICKET: i32 = -3;
/// The ticket is live but not in a state for this call (e.g. completing a queued ticket).
pub const FAIRQ_ERR_TICKET_STATE: i32 = -4;
/// An argument is out of range (cost, weight, dimension code, outcome code, misaligned pointer).
pub const FAIRQ_ERR_INVALID_ARGUMENT: i32 = -5;
/// The caller's buffer is too small; the size needed was reported.
pub const FAIRQ_ERR_BUFFER_TOO_SMALL: i32 = -6;
/// A new distinct weight would exceed `max_weight_classes`.
pub const FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES: i32 = -7;
/// A bug inside fairq panicked; the panic was caught at the boundary.
pub const FAIRQ_ERR_PANIC: i32 = -8;
/// The engine pointer does not point to a live `fairq_engine` (a debugging aid, not a
/// guarantee: only readable memory can be checked).
pub const FAIRQ_ERR_INVALID_HANDLE: i32 = -9;
/// The fleet's library sync thread is running: `fairq_fleet_sync` would race it and a second
/// `fairq_fleet_start` would run two loops. Stop it first.
pub const FAIRQ_ERR_BUSY: i32 = -10;
/// A fleet sync failed (Redis refused, timed out or answered unexpectedly). The failure is
/// recorded in the fleet status and the unsent deltas are kept for the next sync.
pub const FAIRQ_ERR_FLEET_SYNC: i32 = -11;
/// The OS could not start the fleet's sync thread. The fleet went with it: later syncs and
/// starts give this status too; free it and make a new one.
pub const FAIRQ_ERR_THREAD: i32 = -12;

// ---------------------------------------------------------------- refusal reasons

/// No refusal (the request was queued, granted or completed).
pub const FAIRQ_REASON_NONE: u32 = 0;
/// The global queue bound is reached.
pub const FAIRQ_REASON_QUEUE_FULL: u32 = 1;
/// The tenant's queue bound is reached.
pub const FAIRQ_REASON_TENANT_QUEUE_FULL: u32 = 2;
/// No tenant slot is free.
pub const FAIRQ_REASON_TENANT_TABLE_FULL: u32 = 3;
/// The Retry-After does not fit the remaining budget.
pub const FAIRQ_REASON_WAIT_EXCEEDS_BUDGET: u32 = 4;
/// The budget ran out while queued.
pub const FAIRQ_REASON_DEADLINE_EXCEEDED: u32 = 5;
/// The refusing dimension names no tenant (global, client, backend, store).
pub const FAIRQ_REASON_NOT_QUEUEABLE: u32 = 6;
/// The request has no user, team or API key identifier.
pub const FAIRQ_REASON_NO_TENANT: u32 = 7;
/// The engine is disabled.
pub const FAIRQ_REASON_DISABLED: u32 = 8;
/// The caller cancelled the request.
pub const FAIRQ_REASON_CANCELLED: u32 = 9;
/// Its downstream's bulkhead pool is shedding load (its error rate passed the threshold) and
/// cannot serve it within its budget.
pub const FAIRQ_REASON_DOWNSTREAM_SHEDDING: u32 = 10;
/// Length of `fairq_stats.refused`, indexed by reason code (room for reasons added later).
pub const FAIRQ_REASON_SLOTS: usize = 16;

// ---------------------------------------------------------------- dimensions

/// Per-user limit (queueable).
pub const FAIRQ_DIM_USER: u32 = 0;
/// Per-API-key limit (queueable).
pub const FAIRQ_DIM_API_KEY: u32 = 1;
/// Per-team limit (queueable).
pub const FAIRQ_DIM_TEAM: u32 = 2;
/// Per-model limit (queueable).
pub const FAIRQ_DIM_MODEL: u32 = 3;
/// Global limit: refused at once (`not_queueable`).
pub const FAIRQ_DIM_GLOBAL: u32 = 4;
/// Per-client (pre-auth) limit: refused at once.
pub const FAIRQ_DIM_CLIENT: u32 = 5;
/// Per-backend candidate filter: refused at once.
pub const FAIRQ_DIM_BACKEND: u32 = 6;
/// Store failure (fail-closed 503): refused at once.
pub const FAIRQ_DIM_STORE: u32 = 7;

/// `fairq_config.tenant_dimension`: the user id names the tenant (default).
pub const FAIRQ_TENANT_DIM_USER: u32 = 0;
/// `fairq_config.tenant_dimension`: the API key's stable identifier names the tenant.
pub const FAIRQ_TENANT_DIM_API_KEY: u32 = 1;
/// `fairq_config.tenant_dimension`: the team id names the tenant.
pub const FAIRQ_TENANT_DIM_TEAM: u32 = 2;

// ---------------------------------------------------------------- outcomes

/// `fairq_complete`: the re-check passed; the request is admitted and its ticket ends.
pub const FAIRQ_OUTCOME_ADMITTED: u32 = 0;
/// `fairq_complete`: the limiter still refuses; requeue after `retry_after_ns`, within budget.
pub const FAIRQ_OUTCOME_STILL_REFUSED: u32 = 1;

// ---------------------------------------------------------------- names

fn status_name(status: i32) -> &'static CStr {
    match status {
        FAIRQ_OK => c"FAIRQ_OK",
        FAIRQ_QUEUED => c"FAIRQ_QUEUED",
        FAIRQ_REFUSED => c"FAIRQ_REFUSED",
        FAIRQ_EMPTY => c"FAIRQ_EMPTY",
        FAIRQ_AT_CAPACITY => c"FAIRQ_AT_CAPACITY",
        FAIRQ_EXPIRED => c"FAIRQ_EXPIRED",
        FAIRQ_REQUEUED => c"FAIRQ_REQUEUED",
        FAIRQ_NOT_FOUND => c"FAIRQ_NOT_FOUND",
        FAIRQ_NOT_RUNNING => c"FAIRQ_NOT_RUNNING",
        FAIRQ_ERR_NULL => c"FAIRQ_ERR_NULL",
        FAIRQ_ERR_INVALID_CONFIG => c"FAIRQ_ERR_INVALID_CONFIG",
        FAIRQ_ERR_STALE_TICKET => c"FAIRQ_ERR_STALE_TICKET",
        FAIRQ_ERR_TICKET_STATE => c"FAIRQ_ERR_TICKET_STATE",
        FAIRQ_ERR_INVALID_ARGUMENT => c"FAIRQ_ERR_INVALID_ARGUMENT",
        FAIRQ_ERR_BUFFER_TOO_SMALL => c"FAIRQ_ERR_BUFFER_TOO_SMALL",
        FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES => c"FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES",
        FAIRQ_ERR_PANIC => c"FAIRQ_ERR_PANIC",
        FAIRQ_ERR_INVALID_HANDLE => c"FAIRQ_ERR_INVALID_HANDLE",
        FAIRQ_ERR_BUSY => c"FAIRQ_ERR_BUSY",
        FAIRQ_ERR_FLEET_SYNC => c"FAIRQ_ERR_FLEET_SYNC",
        FAIRQ_ERR_THREAD => c"FAIRQ_ERR_THREAD",
        _ => c"FAIRQ_UNKNOWN_STATUS",
    }
}

fn reason_name(reason: u32) -> &'static CStr {
    match reason {
        FAIRQ_REASON_NONE => c"none",
        FAIRQ_REASON_QUEUE_FULL => c"queue_full",
        FAIRQ_REASON_TENANT_QUEUE_FULL => c"tenant_queue_full",
        FAIRQ_REASON_TENANT_TABLE_FULL => c"tenant_table_full",
        FAIRQ_REASON_WAIT_EXCEEDS_BUDGET => c"wait_exceeds_budget",
        FAIRQ_REASON_DEADLINE_EXCEEDED => c"deadline_exceeded",
        FAIRQ_REASON_NOT_QUEUEABLE => c"not_queueable",
        FAIRQ_REASON_NO_TENANT => c"no_tenant",
        FAIRQ_REASON_DISABLED => c"disabled",
        FAIRQ_REASON_CANCELLED => c"cancelled",
        FAIRQ_REASON_DOWNSTREAM_SHEDDING => c"downstream_shedding",
        _ => c"unknown",
    }
}

fn dimension_name(dimension: u32) -> &'static CStr {
    match dimension {
        FAIRQ_DIM_USER => c"user",
        FAIRQ_DIM_API_KEY => c"api_key",
        FAIRQ_DIM_TEAM => c"team",
        FAIRQ_DIM_MODEL => c"model",
        FAIRQ_DIM_GLOBAL => c"global",
        FAIRQ_DIM_CLIENT => c"client",
        FAIRQ_DIM_BACKEND => c"backend",
        FAIRQ_DIM_STORE => c"store",
        _ => c"unknown",
    }
}

/// The name of a status code, e.g. `"FAIRQ_ERR_NULL"`; `"FAIRQ_UNKNOWN_STATUS"` for any other
/// number. The string is static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn fairq_status_str(status: i32) -> *const c_char {
    ffi_value!(c"FAIRQ_UNKNOWN_STATUS".as_ptr(), {
        status_name(status).as_ptr()
    })
}

/// The snake_case name of a refusal reason, as used in metrics (`"queue_full"`, ...); `"none"`
/// for 0 and `"unknown"` for any other number. The string is static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn fairq_reason_str(reason: u32) -> *const c_char {
    ffi_value!(c"unknown".as_ptr(), { reason_name(reason).as_ptr() })
}

/// The snake_case name of a dimension (`"user"`, `"api_key"`, ...); `"unknown"` for any other
/// number. The string is static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn fairq_dimension_str(dimension: u32) -> *const c_char {
    ffi_value!(c"unknown".as_ptr(), { dimension_name(dimension).as_ptr() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dimension, Reason, TenantDimension};

    #[test]
    fn reason_codes_match_the_core() {
        for reason in Reason::ALL {
            let code = reason as u32;
            assert_eq!(reason_name(code).to_str().unwrap(), reason.as_str());
        }
        assert_eq!(FAIRQ_REASON_QUEUE_FULL, Reason::QueueFull as u32);
        assert_eq!(FAIRQ_REASON_CANCELLED, Reason::Cancelled as u32);
        assert_eq!(
            FAIRQ_REASON_DOWNSTREAM_SHEDDING,
            Reason::DownstreamShedding as u32
        );
        assert!(Reason::ALL.len() < FAIRQ_REASON_SLOTS);
    }

    #[test]
    fn dimension_codes_match_the_core() {
        for dim in Dimension::ALL {
            assert_eq!(dimension_name(dim as u32).to_str().unwrap(), dim.as_str());
        }
        assert_eq!(FAIRQ_DIM_STORE, Dimension::Store as u32);
        assert_eq!(FAIRQ_TENANT_DIM_USER, TenantDimension::User as u32);
        assert_eq!(FAIRQ_TENANT_DIM_API_KEY, TenantDimension::ApiKey as u32);
        assert_eq!(FAIRQ_TENANT_DIM_TEAM, TenantDimension::Team as u32);
    }

    #[test]
    fn every_status_has_a_name() {
        for status in -12..=8 {
            let name = status_name(status).to_str().unwrap();
            assert!(name.starts_with("FAIRQ_") && name != "FAIRQ_UNKNOWN_STATUS");
        }
        assert_eq!(status_name(100).to_str().unwrap(), "FAIRQ_UNKNOWN_STATUS");
    }
}
