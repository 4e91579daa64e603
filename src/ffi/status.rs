//! The C side of the status dump: `fairq_queue_status` fills a caller's array with the largest
//! tenants and the engine's totals; `fairq_queue_status_text` renders the same dump as JSON or
//! as a text table into a caller's buffer, reporting the size needed.

use std::ffi::c_char;

use super::api::engine_ref;
use super::boundary::{
    hand_over_text, optional_out, out_buffer, required, required_out, write_out,
};
use super::codes::*;
use super::types::fairq_engine;
use crate::status::{Status, TenantStatus};
use crate::types::StatusOrder;

/// `order`: the most requests queued first.
pub const FAIRQ_STATUS_BY_DEPTH: u32 = 0;
/// `order`: the longest-waiting queue head first.
pub const FAIRQ_STATUS_BY_OLDEST_WAIT: u32 = 1;
/// `format`: one JSON object.
pub const FAIRQ_STATUS_JSON: u32 = 0;
/// `format`: a text table, a line per tenant.
pub const FAIRQ_STATUS_TEXT: u32 = 1;
/// Bytes of `fairq_tenant_status::name`, its NUL included.
pub const FAIRQ_STATUS_NAME_LEN: usize = 64;
/// Bytes of `fairq_tenant_status::tier`, its NUL included (tier names are at most 32 bytes).
pub const FAIRQ_STATUS_TIER_LEN: usize = 40;

/// The engine's totals in a status dump (`fairq_queue_status`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_status_totals {
    /// Grants out now.
    pub in_flight: u64,
    /// With seats on, the permits (cost units) the grants out hold; 0 with seats off.
    pub seats_in_flight: u64,
    /// Requests queued now.
    pub queued: u64,
    /// Tenants with requests queued or in flight now (the rows that could be listed).
    pub busy_tenants: u64,
    /// The configured bounds.
    pub max_in_flight: u32,
    /// The configured bound on requests queued.
    pub queue_capacity: u32,
    /// Weight classes in use.
    pub weight_classes: u32,
    /// Bulkhead pools (their figures are in `fairq_queue_status_text`'s dump).
    pub pools: u32,
    /// 1 while new requests are queued (`fairq_set_enabled`).
    pub enabled: u32,
    /// 1 with seats on.
    pub seats: u32,
}

/// One tenant in a status dump (`fairq_queue_status`). Each row is a consistent view of one
/// tenant; the rows together are not one instant's picture.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct fairq_tenant_status {
    /// The tenant key.
    pub tenant_key: u64,
    /// Requests waiting.
    pub queued: u64,
    /// Grants out.
    pub in_flight: u64,
    /// Grants since the tenant took its slot.
    pub granted: u64,
    /// How long the request at the head of its queue has waited, in ns (0 with none queued).
    pub oldest_wait_ns: u64,
    /// With `parked` 1: how long until its head may be granted (its Retry-After), in ns.
    pub parked_for_ns: u64,
    /// Configured weight.
    pub weight: u32,
    /// The weight it is scheduled at now (feedback controller, fleet mode).
    pub effective_weight: u32,
    /// 1 with at most one request waiting and no more than its share lately (the light-tenant
    /// lane serves it first); 0 when it is backlogged.
    pub light: u32,
    /// 1 when its head waits out a Retry-After.
    pub parked: u32,
    /// The identifier it was given a weight or tier under (`fairq_set_weight`, `fairq_set_tier`),
    /// NUL-terminated, cut to whole UTF-8 characters; empty when the engine was not told.
    pub name: [c_char; FAIRQ_STATUS_NAME_LEN],
    /// The configured tier whose weight it has, NUL-terminated; empty when none.
    pub tier: [c_char; FAIRQ_STATUS_TIER_LEN],
}

impl From<&TenantStatus> for fairq_tenant_status {
    fn from(t: &TenantStatus) -> Self {
        fairq_tenant_status {
            tenant_key: t.tenant.get(),
            queued: t.queued,
            in_flight: t.in_flight,
            granted: t.granted,
            oldest_wait_ns: t.oldest_wait_ns,
            parked_for_ns: t.parked_for_ns.unwrap_or(0),
            weight: t.weight,
            effective_weight: t.effective_weight,
            light: u32::from(t.light),
            parked: u32::from(t.parked_for_ns.is_some()),
            name: c_text(t.name.as_deref()),
            tier: c_text(t.tier.as_deref()),
        }
    }
}

impl From<&Status> for fairq_status_totals {
    fn from(s: &Status) -> Self {
        fairq_status_totals {
            in_flight: s.in_flight,
            seats_in_flight: s.seats_in_flight.unwrap_or(0),
            queued: s.queued,
            busy_tenants: s.busy_tenants,
            max_in_flight: s.max_in_flight,
            queue_capacity: s.queue_capacity,
            weight_classes: s.weight_classes,
            pools: s.pools.len() as u32,
            enabled: u32::from(s.enabled),
            seats: u32::from(s.seats_in_flight.is_some()),
        }
    }
}

/// `text` in a NUL-terminated array of `N` bytes, cut to whole UTF-8 characters.
fn c_text<const N: usize>(text: Option<&str>) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    let text = text.unwrap_or("");
    let mut end = text.len().min(N - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (o, &b) in out.iter_mut().zip(&text.as_bytes()[..end]) {
        *o = b as c_char;
    }
    out
}

fn order_of(order: u32) -> Result<StatusOrder, i32> {
    match order {
        FAIRQ_STATUS_BY_DEPTH => Ok(StatusOrder::Depth),
        FAIRQ_STATUS_BY_OLDEST_WAIT => Ok(StatusOrder::OldestWait),
        _ => Err(FAIRQ_ERR_INVALID_ARGUMENT),
    }
}

/// `fairq_queue_status_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_queue_status_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_queue_status(
    engine: *const fairq_engine,
    order: u32,
    totals: *mut fairq_status_totals,
    rows: *mut fairq_tenant_status,
    cap: usize,
    count: *mut usize,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_queue_status_at(engine, order, now, totals, rows, cap, count) })
    })
}

/// A status dump at `now_ns`: the engine's totals into `*totals` (NULL: not wanted), and the
/// `cap` largest tenants by `order` (`FAIRQ_STATUS_BY_*`) into `rows[0..*count]`, largest first.
/// `totals->busy_tenants` says how many could have been listed. O(`max_tenants`), off the hot
/// path: it reads the live tables without stopping the scheduler (each row is one tenant's
/// consistent view) and allocates while it runs. `rows` may be NULL only with `cap` 0.
/// `FAIRQ_ERR_INVALID_ARGUMENT` for an unknown `order` or a misaligned pointer.
///
/// # Safety
/// `engine` must be NULL or a live engine; `totals` NULL or writable; a non-NULL `rows` valid
/// for writes of `cap` elements; `count` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_queue_status_at(
    engine: *const fairq_engine,
    order: u32,
    now_ns: u64,
    totals: *mut fairq_status_totals,
    rows: *mut fairq_tenant_status,
    cap: usize,
    count: *mut usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let totals = optional_out(totals)?;
        if rows.is_null() && cap > 0 {
            return Err(FAIRQ_ERR_NULL);
        }
        if !rows.is_null() {
            required(rows.cast_const())?;
        }
        let count = required_out(count)?;
        let order = order_of(order)?;
        let status = engine.status_at(cap, order, now_ns);
        if let Some(totals) = totals {
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(totals, fairq_status_totals::from(&status)) };
        }
        debug_assert!(status.tenants.len() <= cap);
        for (i, row) in status.tenants.iter().take(cap).enumerate() {
            // SAFETY: `rows` is non-NULL (cap > 0 here), aligned, and valid for `cap` writes by
            // contract; `i < cap`.
            unsafe { rows.add(i).write(fairq_tenant_status::from(row)) };
        }
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(count, status.tenants.len().min(cap)) };
        Ok(FAIRQ_OK)
    })
}

/// `fairq_queue_status_text_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_queue_status_text_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_queue_status_text(
    engine: *const fairq_engine,
    order: u32,
    k: usize,
    format: u32,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_queue_status_text_at(engine, order, k, format, now, buf, len, needed) })
    })
}

/// The status dump at `now_ns` with the `k` largest tenants by `order`, rendered as
/// `FAIRQ_STATUS_JSON` or `FAIRQ_STATUS_TEXT` into `buf` (NUL-terminated; the fields are
/// described in docs/operating.md). `*needed` (if not NULL) gets the bytes required including
/// the NUL. `FAIRQ_ERR_BUFFER_TOO_SMALL` when `len` is less than that: nothing is written to
/// `buf`, but `*needed` is set, so call once with `buf` NULL and `len` 0 to size it (the dump
/// can grow between calls: allow slack, or retry). `FAIRQ_ERR_NULL` for a NULL `buf` with `len`
/// > 0; `FAIRQ_ERR_INVALID_ARGUMENT` for an unknown `order` or `format`.
///
/// # Safety
/// `engine` must be NULL or a live engine; a non-NULL `buf` must be valid for writes of `len`
/// bytes; `needed` must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature: engine, what to dump, and the buffer
pub unsafe extern "C" fn fairq_queue_status_text_at(
    engine: *const fairq_engine,
    order: u32,
    k: usize,
    format: u32,
    now_ns: u64,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let buf = out_buffer(buf, len)?;
        let needed = optional_out(needed)?;
        let order = order_of(order)?;
        if format != FAIRQ_STATUS_JSON && format != FAIRQ_STATUS_TEXT {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        let status = engine.status_at(k, order, now_ns);
        let text = if format == FAIRQ_STATUS_JSON {
            status.to_json()
        } else {
            status.to_text()
        };
        // SAFETY: `buf` (checked by `out_buffer`) is NULL or valid for `len` bytes, and
        // `needed` checked, by contract.
        unsafe { hand_over_text(&text, buf, len, needed) }
    })
}
