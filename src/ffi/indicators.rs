//! The C side of the fairness indicators and the policy tick: `fairq_tenant_indicators` reads
//! one tenant's indicators by key, `fairq_tick` runs the slow policies (wait boost, feedback
//! controller) on the caller's thread.

use super::api::{engine_ref, tenant};
use super::boundary::{optional_out, required_out, write_out};
use super::codes::*;
use super::types::fairq_engine;
use crate::indicators::TenantIndicators;
use crate::policy::TickReport;

/// One tenant's fairness indicators (`fairq_tenant_indicators`; in C a typedef and a function
/// cannot share a name), cumulative since the tenant took its slot (see `docs/operating.md`,
/// "Fairness indicators", for the exact definitions). A ratio that is not defined
/// yet is NaN.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct fairq_indicators {
    /// The tenant key.
    pub tenant_key: u64,
    /// `enqueue` calls that reached the tenant's slot.
    pub requests: u64,
    /// Refused on arrival or after waiting (cancellations excluded).
    pub refused: u64,
    /// Grants made.
    pub granted: u64,
    /// Cost units granted.
    pub granted_cost: u64,
    /// Requests that left the queue (granted or expired): the wait samples.
    pub waits: u64,
    /// 0.95 quantile of the waits, in ns (0 when `waits` is 0).
    pub wait_p95_ns: u64,
    /// Age of the open starvation window (ready, no grant), in ns; 0 when not ready.
    pub starvation_current_ns: u64,
    /// Longest starvation window so far, the open one included, in ns.
    pub starvation_longest_ns: u64,
    /// `refused / requests`; NaN before any request.
    pub refusal_rate: f64,
    /// Cost units expected by weight while ready.
    pub expected_cost: f64,
    /// `granted_cost / expected_cost`; NaN until one unit is expected.
    pub fair_share_ratio: f64,
    /// Configured weight (tier, `fairq_set_weight`, or the default).
    pub weight: u32,
    /// Weight the scheduler uses now (the feedback controller may have nudged it).
    pub effective_weight: u32,
    /// 1 while the tenant holds a +1 wait boost.
    pub boosted: u32,
    /// 1 while the tenant is ready (its head could be granted now).
    pub ready: u32,
}

impl From<TenantIndicators> for fairq_indicators {
    fn from(t: TenantIndicators) -> Self {
        fairq_indicators {
            tenant_key: t.tenant.get(),
            requests: t.requests,
            refused: t.refused,
            granted: t.granted,
            granted_cost: t.granted_cost,
            waits: t.waits,
            wait_p95_ns: t.wait_p95_ns.unwrap_or(0),
            starvation_current_ns: t.starvation_current_ns,
            starvation_longest_ns: t.starvation_longest_ns,
            refusal_rate: t.refusal_rate.unwrap_or(f64::NAN),
            expected_cost: t.expected_cost,
            fair_share_ratio: t.fair_share_ratio.unwrap_or(f64::NAN),
            weight: t.weight,
            effective_weight: t.effective_weight,
            boosted: u32::from(t.boosted),
            ready: u32::from(t.ready),
        }
    }
}

/// What one `fairq_tick` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_tick_report {
    /// Wait boosts started.
    pub boosts_started: u32,
    /// 1 when the feedback controller's period had passed and it ran.
    pub feedback_ran: u32,
    /// Effective weights raised by 1.
    pub weights_raised: u32,
    /// Effective weights lowered by 1.
    pub weights_lowered: u32,
}

impl From<TickReport> for fairq_tick_report {
    fn from(r: TickReport) -> Self {
        fairq_tick_report {
            boosts_started: r.boosts_started,
            feedback_ran: u32::from(r.feedback_ran),
            weights_raised: r.weights_raised,
            weights_lowered: r.weights_lowered,
        }
    }
}

/// `fairq_tenant_indicators_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_tenant_indicators_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tenant_indicators(
    engine: *const fairq_engine,
    tenant_key: u64,
    out: *mut fairq_indicators,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_tenant_indicators_at(engine, tenant_key, now, out) })
    })
}

/// Reads one tenant's fairness indicators, with starvation windows measured at `now_ns`.
/// Lock-free. `FAIRQ_OK` fills `*out`; `FAIRQ_NOT_FOUND` when the tenant holds no slot (never
/// seen, or its idle slot was reused). `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned `out` and
/// for key 0 (it names no tenant).
///
/// # Safety
/// `engine` must be NULL or a live engine; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tenant_indicators_at(
    engine: *const fairq_engine,
    tenant_key: u64,
    now_ns: u64,
    out: *mut fairq_indicators,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(out)?;
        let key = tenant(tenant_key)?;
        let Some(ind) = engine.tenant_indicators_at(key, now_ns) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, fairq_indicators::from(ind)) };
        Ok(FAIRQ_OK)
    })
}

/// `fairq_tick_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_tick_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tick(
    engine: *const fairq_engine,
    report: *mut fairq_tick_report,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_tick_at(engine, now, report) })
    })
}

/// Runs the slow policies on the caller's thread: starts due wait boosts and, once per feedback
/// period, nudges weights. Call it about once a second when a wait boost or the feedback
/// controller is configured; it does nothing otherwise. `report` may be NULL.
///
/// # Safety
/// `engine` must be NULL or a live engine; `report` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tick_at(
    engine: *const fairq_engine,
    now_ns: u64,
    report: *mut fairq_tick_report,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let report = optional_out(report)?;
        let done = engine.tick_at(now_ns);
        if let Some(report) = report {
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(report, fairq_tick_report::from(done)) };
        }
        Ok(FAIRQ_OK)
    })
}
