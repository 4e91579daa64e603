//! The controls `fairq_config` cannot carry, reachable from C: weight tiers, the starvation
//! guard, the wait boost, the feedback controller, bulkhead pools (with the request's
//! downstream) and their load shedding, the indicators' top K; plus what reads them back
//! (tiers, pool gauges and shedding stage, the fairness aggregate and top tenants).
//!
//! # Why a builder
//! `fairq_config` is a fixed-layout struct: the ABI policy never changes a released layout, so
//! it cannot grow. The controls go on an opaque `fairq_engine_builder` instead, after
//! rustls-ffi's config builders: made from a `fairq_config`, changed by one setter per control,
//! and turned into any number of engines by `fairq_engine_builder_build`. A control added later
//! is a new setter; a program built against an older header never calls it and gets the
//! default, so it keeps working unchanged.
//!
//! The builder always holds a valid configuration: every setter applies its change to a copy,
//! validates the whole copy (`Config::validate`), and keeps it only if it is valid. A rejected
//! setter returns `FAIRQ_ERR_INVALID_CONFIG`, changes nothing, and leaves the message naming the
//! field and its range for `fairq_engine_builder_message`. So `build` cannot fail on the
//! configuration, and a bad value is reported where it was set.

use std::os::raw::c_char;

use super::api::engine_ref;
use super::boundary::write_out;
use super::boundary::{
    bytes, copy_message, error_status, optional_out, out_buffer, required, required_out,
};
use super::codes::*;
use super::indicators::fairq_indicators;
use super::types::*;
use crate::config::Config;
use crate::engine::Engine;
use crate::identity::TenantKey;
use crate::indicators::MinMax;
use crate::policy::{FeedbackController, StarvationGuard, Tier, WaitBoost};
use crate::shedding::Shedding;
use crate::types::Enqueued;

// ---------------------------------------------------------------- the builder

/// Builds engines with every control (tiers, starvation guard, wait boost, feedback controller,
/// bulkhead pools, indicator top K). Opaque: made by `fairq_engine_builder_new`, released by
/// `fairq_engine_builder_free`. Not for concurrent use: calls on one builder must not overlap
/// (the engines it builds are, as always, shared freely).
pub struct fairq_engine_builder {
    /// `BUILDER_MAGIC` while live; a cheap check against pointers to other objects.
    magic: u64,
    /// Always valid (`Config::validate` passes): setters keep only valid changes.
    config: Config,
    /// Why the last rejected setter was rejected; empty when none was.
    message: String,
}

/// "fairq-bu" in ASCII.
const BUILDER_MAGIC: u64 = 0x6661_6972_712d_6275;

/// The body every plain setter shares: applies `change` to the builder's configuration and
/// validates it (`fairq_engine_builder::update`), behind the panic boundary.
///
/// # Safety
/// `builder` must be NULL or a live builder.
unsafe fn update_builder(
    builder: *mut fairq_engine_builder,
    change: impl FnOnce(&mut Config) -> Result<(), String>,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live builder, by the caller's contract.
        let builder = unsafe { builder_mut(builder) }?;
        builder.update(change)
    })
}

/// Borrows the builder behind a handle, mutably.
///
/// # Safety
/// A non-NULL `ptr` must point to a live builder from `fairq_engine_builder_new` (or, for the
/// best-effort handle check, to readable memory at least as large as one), not used by another
/// call meanwhile.
unsafe fn builder_mut<'a>(
    ptr: *mut fairq_engine_builder,
) -> Result<&'a mut fairq_engine_builder, i32> {
    // A misaligned pointer cannot be a builder: call it a bad handle, not a bad argument.
    let ptr = required_out(ptr).map_err(|e| match e {
        FAIRQ_ERR_NULL => FAIRQ_ERR_NULL,
        _ => FAIRQ_ERR_INVALID_HANDLE,
    })?;
    // SAFETY: non-NULL and aligned, and readable for the size of a builder by the caller's
    // contract. A volatile read of the plain `u64` tag keeps the compiler from assuming it is
    // always `BUILDER_MAGIC`.
    let magic = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*ptr).magic)) };
    if magic != BUILDER_MAGIC {
        return Err(FAIRQ_ERR_INVALID_HANDLE);
    }
    // SAFETY: the tag matches, so this is a live builder, and the caller's contract says no
    // other call uses it during this one, so the exclusive borrow is unique.
    Ok(unsafe { &mut *ptr })
}

/// Borrows the builder behind a handle, shared.
///
/// # Safety
/// As [`builder_mut`], except that other shared reads may run meanwhile.
unsafe fn builder_ref<'a>(
    ptr: *const fairq_engine_builder,
) -> Result<&'a fairq_engine_builder, i32> {
    let ptr = required(ptr).map_err(|e| match e {
        FAIRQ_ERR_NULL => FAIRQ_ERR_NULL,
        _ => FAIRQ_ERR_INVALID_HANDLE,
    })?;
    // SAFETY: as in `builder_mut`.
    let magic = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*ptr).magic)) };
    if magic != BUILDER_MAGIC {
        return Err(FAIRQ_ERR_INVALID_HANDLE);
    }
    // SAFETY: a live builder that no call mutates during this one (the caller's contract).
    Ok(unsafe { &*ptr })
}

impl fairq_engine_builder {
    /// Applies `change` to a copy of the config and keeps it if the whole config is still
    /// valid; otherwise records why and returns `FAIRQ_ERR_INVALID_CONFIG`, changing nothing.
    fn update(
        &mut self,
        change: impl FnOnce(&mut Config) -> Result<(), String>,
    ) -> Result<i32, i32> {
        let mut next = self.config.clone();
        let checked = change(&mut next).and_then(|()| next.validate().map_err(|e| e.to_string()));
        match checked {
            Ok(()) => {
                self.config = next;
                self.message.clear();
                Ok(FAIRQ_OK)
            }
            Err(message) => {
                self.message = message;
                Err(FAIRQ_ERR_INVALID_CONFIG)
            }
        }
    }
}

/// Reads a caller struct by value.
///
/// # Safety
/// A non-NULL `ptr` must point to a valid, initialised `T`.
unsafe fn read_in<T: Copy>(ptr: *const T) -> Result<T, i32> {
    let ptr = required(ptr)?;
    // SAFETY: non-NULL and aligned (checked), initialised by the caller's contract; `T: Copy`.
    Ok(unsafe { ptr.read() })
}

/// Makes a builder from `*config` (every field of `fairq_config` applies; every control it
/// lacks starts off) and writes it to `*builder_out`. `FAIRQ_ERR_INVALID_CONFIG` when a field
/// is out of range, with the message naming it copied into `buf` (truncated, NUL-terminated;
/// `buf` may be NULL or `len` 0). Release it with `fairq_engine_builder_free`.
///
/// # Safety
/// `config` must point to an initialised `fairq_config`; `builder_out` must be valid for a
/// write of a pointer; a non-NULL `buf` must be valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_new(
    config: *const fairq_config,
    builder_out: *mut *mut fairq_engine_builder,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    ffi_status!({
        // SAFETY: the caller passes a valid config or NULL (rejected by `read_in`).
        let config = unsafe { read_in(config) }?;
        let out = required_out(builder_out)?;
        let config = match config.to_config() {
            Ok(config) => config,
            Err(message) => {
                // SAFETY: `buf` is NULL (ignored) or valid for `len` bytes by contract.
                unsafe { copy_message(&message, buf, len) };
                return Err(FAIRQ_ERR_INVALID_CONFIG);
            }
        };
        let handle = Box::into_raw(Box::new(fairq_engine_builder {
            magic: BUILDER_MAGIC,
            config,
            message: String::new(),
        }));
        // SAFETY: checked non-NULL and aligned, writable by the caller's contract.
        unsafe { write_out(out, handle) };
        Ok(FAIRQ_OK)
    })
}

/// Releases a builder. NULL is a no-op. Engines it built are not affected.
///
/// # Safety
/// A non-NULL `builder` must come from `fairq_engine_builder_new` and not have been freed, and
/// no other call may use it during or after this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_free(builder: *mut fairq_engine_builder) {
    ffi_value!((), {
        // SAFETY: NULL or a live builder, by contract; the tag check refuses foreign memory.
        if unsafe { builder_mut(builder) }.is_err() {
            return;
        }
        // SAFETY: allocated by `Box::into_raw` in `fairq_engine_builder_new`, not freed before,
        // not used by any other call from now on. Clearing the tag first makes a later use of
        // the dangling pointer more likely to be caught while its memory is not reused.
        unsafe {
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*builder).magic), 0);
            drop(Box::from_raw(builder));
        }
    })
}

/// Copies the message of the last rejected setter (the field at fault and its range) into
/// `buf` (truncated, NUL-terminated); an empty string when the last setter succeeded. `*needed`
/// (if not NULL) gets the bytes the whole message takes, its NUL included.
///
/// # Safety
/// `builder` must be NULL or a live builder; a non-NULL `buf` must be valid for writes of `len`
/// bytes; `needed` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_message(
    builder: *const fairq_engine_builder,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live builder, by contract.
        let builder = unsafe { builder_ref(builder) }?;
        out_buffer(buf, len)?;
        let needed = optional_out(needed)?;
        if let Some(needed) = needed {
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(needed, builder.message.len() + 1) };
        }
        // SAFETY: `buf` is NULL (with `len` 0: nothing written) or valid for `len` bytes.
        unsafe { copy_message(&builder.message, buf, len) };
        Ok(FAIRQ_OK)
    })
}

/// Adds a weight tier: `name` (`name_len` bytes, ASCII letters, digits, `_` or `-`, 1..=32,
/// matched case-insensitively) weighs `weight` (1..=10000). At most 16 tiers, distinct names;
/// the tiers and `default_weight` together need at most `max_weight_classes` distinct weights
/// (their weight classes are made when the engine is built, so `fairq_set_tier` never runs out
/// of them). `FAIRQ_ERR_INVALID_CONFIG` (see `fairq_engine_builder_message`) otherwise.
///
/// # Safety
/// `builder` must be NULL or a live builder; `name` must be valid for reads of `name_len`
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_add_tier(
    builder: *mut fairq_engine_builder,
    name: *const c_char,
    name_len: usize,
    weight: u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live builder, by contract.
        let builder = unsafe { builder_mut(builder) }?;
        // SAFETY: `name_len` readable bytes at `name`, by contract.
        let name = unsafe { bytes(name, name_len)?.get() }?;
        builder.update(|c| {
            let name = std::str::from_utf8(name)
                .map_err(|_| "invalid config `policy.tiers`: tier name is not UTF-8".to_string())?;
            c.policy.tiers.push(Tier::new(name, weight));
            Ok(())
        })
    })
}

/// Turns the starvation guard on: each weight class with ready tenants gets at least the
/// larger of `min_grants_per_minute` (1..=60000) grants a minute or `min_share_percent`
/// (0..=50; 0: no share floor) % of all grants. `min_grants_per_minute` 0 turns it off again.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_starvation_guard(
    builder: *mut fairq_engine_builder,
    min_grants_per_minute: u32,
    min_share_percent: u32,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.policy.starvation_guard = (min_grants_per_minute != 0).then_some(StarvationGuard {
                min_grants_per_minute,
                min_share_percent,
            });
            Ok(())
        })
    }
}

/// Turns the wait boost on: a tenant ready and unserved for longer than `after_ms`
/// (1000..=3600000) gets +1 weight until it is served; at most `max_boosted` (1..=65536)
/// tenants at once. Boosts start in `fairq_tick`: call it about once a second. `after_ms` 0
/// turns it off again.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_wait_boost(
    builder: *mut fairq_engine_builder,
    after_ms: u64,
    max_boosted: u32,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.policy.wait_boost = (after_ms != 0).then_some(WaitBoost {
                after_ms,
                max_boosted,
            });
            Ok(())
        })
    }
}

/// Turns the feedback controller on: once per `period_ms` (60000..=3600000) of `fairq_tick`
/// calls, each tenant's effective weight moves by 1 towards its fair share, within
/// `floor_percent` (10..=100) and `ceiling_percent` (100..=1000) of its configured weight. The
/// thresholds keep their values (defaults: raise below 90 %, lower above 110 %, judge tenants
/// expecting at least 100 cost units a period; see
/// `fairq_engine_builder_set_feedback_thresholds`). `period_ms` 0 turns it off again.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_feedback(
    builder: *mut fairq_engine_builder,
    period_ms: u64,
    floor_percent: u32,
    ceiling_percent: u32,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.policy.feedback = (period_ms != 0).then(|| FeedbackController {
                period_ms,
                floor_percent,
                ceiling_percent,
                ..c.policy.feedback.unwrap_or_default()
            });
            Ok(())
        })
    }
}

/// The feedback controller's thresholds: raise a tenant whose period fair-share ratio is below
/// `low_ratio_percent` (10..=100), lower one above `high_ratio_percent` (100..=1000), and judge
/// only tenants that expected at least `min_expected_cost` (1..=1000000000) cost units in the
/// period. Needs the controller on (`fairq_engine_builder_set_feedback` first):
/// `FAIRQ_ERR_INVALID_CONFIG` otherwise.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_feedback_thresholds(
    builder: *mut fairq_engine_builder,
    low_ratio_percent: u32,
    high_ratio_percent: u32,
    min_expected_cost: u64,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            let Some(feedback) = c.policy.feedback.as_mut() else {
                return Err(
                    "invalid config `policy.feedback`: the feedback controller is off \
                            (fairq_engine_builder_set_feedback first)"
                        .to_string(),
                );
            };
            feedback.low_ratio_percent = low_ratio_percent;
            feedback.high_ratio_percent = high_ratio_percent;
            feedback.min_expected_cost = min_expected_cost;
            Ok(())
        })
    }
}

/// Adds a bulkhead pool: at most `max_in_flight` (1..=the config's `max_in_flight`) grants of
/// requests to this downstream are out at once, on top of the global bound, so one slow
/// downstream holds only its own permits. Writes the pool's number, the `downstream` that
/// `fairq_enqueue_downstream` takes, to `*downstream_out` (0 for the first pool, then 1, ...).
/// At most 64 pools. With no pool (the default) every request shares the one global pool.
///
/// # Safety
/// `builder` must be NULL or a live builder; `downstream_out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_add_pool(
    builder: *mut fairq_engine_builder,
    max_in_flight: u32,
    downstream_out: *mut u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live builder, by contract.
        let builder = unsafe { builder_mut(builder) }?;
        let out = optional_out(downstream_out)?;
        let index = builder.config.downstream_max_in_flight.len() as u32;
        builder.update(|c| {
            c.downstream_max_in_flight.push(max_in_flight);
            Ok(())
        })?;
        if let Some(out) = out {
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(out, index) };
        }
        Ok(FAIRQ_OK)
    })
}

/// Turns load shedding on for the bulkhead pools (add them first): when a pool's downstream
/// error rate over a window of `window_ms` (100..=3600000) passes `error_percent` (1..=100; the
/// usual rule is 2), with at least `min_requests` (1..=1000000; 0: the default, 20) reports in
/// the window, the pool's in-flight limit is cut in half (never below 1); each calm window grows
/// it back by an eighth of the pool's bound. While a pool's limit is cut, a request to it that
/// cannot be served within its budget is refused at once with
/// `FAIRQ_REASON_DOWNSTREAM_SHEDDING`. Feed it with `fairq_report_downstream`.
/// `error_percent` 0 turns it off again.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_shedding(
    builder: *mut fairq_engine_builder,
    error_percent: u32,
    window_ms: u64,
    min_requests: u32,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.shedding = (error_percent != 0).then(|| Shedding {
                error_percent,
                window_ms,
                min_requests: match min_requests {
                    0 => Shedding::default().min_requests,
                    n => n,
                },
            });
            Ok(())
        })
    }
}

/// Turns the fairness indicators (per-tenant wait p95, refusal rate, fair-share ratio,
/// starvation window, and the engine-wide wait histogram) on or off. On by default; off saves a
/// few atomic writes per request, and `fairq_tenant_indicators` then answers `FAIRQ_NOT_FOUND`.
/// The wait boost and the feedback controller need them: `FAIRQ_ERR_INVALID_CONFIG` when either
/// is on.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_indicators(
    builder: *mut fairq_engine_builder,
    on: bool,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.indicators = on;
            Ok(())
        })
    }
}

/// How many tenants get their own fairness-indicator series in the Prometheus text (the top K
/// by requests; the min/max aggregates cover every tenant), 0..=1000. Default 20.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_indicator_top_k(
    builder: *mut fairq_engine_builder,
    top_k: u32,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.indicator_top_k = top_k;
            Ok(())
        })
    }
}

/// Seats: `max_in_flight` counts cost units instead of requests. A grant takes its request's
/// cost in permits (at least 1) and `fairq_complete` or `fairq_cancel` gives the same number
/// back. A request whose cost is `max_in_flight` or more runs alone: once it is next, no other
/// grant starts until the grants out have ended. Off by default.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_seats(
    builder: *mut fairq_engine_builder,
    on: bool,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.seats = on;
            Ok(())
        })
    }
}

/// The light-tenant lane: a tenant that becomes ready (from idle, after a Retry-After, or when
/// its pool frees) and has not had more than its fair share is granted at the next free permit,
/// ahead of the weight classes' rotation, for one visit; then it joins its class's rotation.
/// Backlogged tenants keep exact weighted shares of what the others leave, and through the lane
/// no tenant gets more than three grants ahead of its share. On by default (also for engines
/// made with `fairq_engine_new`); `false` turns it off.
///
/// # Safety
/// `builder` must be NULL or a live builder.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_set_light_lane(
    builder: *mut fairq_engine_builder,
    on: bool,
) -> i32 {
    // SAFETY: NULL or a live builder, by contract.
    unsafe {
        update_builder(builder, |c| {
            c.light_lane = on;
            Ok(())
        })
    }
}

/// Builds an engine from the builder's configuration and writes it to `*engine_out`; the
/// builder is unchanged and can build more. Release the engine with `fairq_engine_free`.
///
/// # Safety
/// `builder` must be NULL or a live builder; `engine_out` must be valid for a write of a
/// pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_builder_build(
    builder: *const fairq_engine_builder,
    engine_out: *mut *mut fairq_engine,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live builder, by contract.
        let builder = unsafe { builder_ref(builder) }?;
        let out = required_out(engine_out)?;
        let engine = Engine::new(builder.config.clone()).map_err(|_| FAIRQ_ERR_INVALID_CONFIG)?;
        let handle = Box::into_raw(Box::new(fairq_engine {
            magic: ENGINE_MAGIC,
            engine: std::sync::Arc::new(engine),
        }));
        // SAFETY: checked non-NULL and aligned, writable by the caller's contract.
        unsafe { write_out(out, handle) };
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- tiers

/// A tier name from C: UTF-8, else `FAIRQ_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `name` must be valid for reads of `len` bytes.
unsafe fn tier_name<'a>(name: *const c_char, len: usize) -> Result<&'a str, i32> {
    let name = bytes(name, len)?;
    // SAFETY: `len` readable bytes at `name`, by the caller's contract.
    tier_str(unsafe { name.get() }?)
}

/// A tier name already borrowed: UTF-8, else `FAIRQ_ERR_INVALID_ARGUMENT`.
fn tier_str(raw: &[u8]) -> Result<&str, i32> {
    std::str::from_utf8(raw).map_err(|_| FAIRQ_ERR_INVALID_ARGUMENT)
}

/// Puts the tenant whose raw identifier is the `raw_len` bytes at `raw` in tier `tier`
/// (`tier_len` bytes, case-insensitive): its weight becomes the tier's, at run time, like
/// `fairq_set_weight`. `FAIRQ_ERR_INVALID_ARGUMENT` for an empty identifier or a tier the
/// engine was not built with.
///
/// # Safety
/// `engine` must be NULL or a live engine; `raw` and `tier` must be valid for reads of their
/// lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_set_tier(
    engine: *const fairq_engine,
    raw: *const c_char,
    raw_len: usize,
    tier: *const c_char,
    tier_len: usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // Both pointers are checked before either length (the error precedence).
        let raw = bytes(raw, raw_len)?;
        let tier = bytes(tier, tier_len)?;
        // SAFETY: `raw_len` readable bytes at `raw`, by contract.
        let raw = unsafe { raw.get() }?;
        // SAFETY: `tier_len` readable bytes at `tier`, by contract.
        let tier = tier_str(unsafe { tier.get() }?)?;
        if raw.is_empty() {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        let key = TenantKey::from_raw(raw);
        engine.set_tier_key(key, tier).map_err(error_status)?;
        engine.remember_name(key, raw, false);
        Ok(FAIRQ_OK)
    })
}

/// `fairq_set_tier` by tenant key (from `fairq_tenant_key`). Key 0 is invalid.
///
/// # Safety
/// `engine` must be NULL or a live engine; `tier` must be valid for reads of `tier_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_set_tier_key(
    engine: *const fairq_engine,
    tenant_key: u64,
    tier: *const c_char,
    tier_len: usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // SAFETY: `tier_len` readable bytes at `tier`, by contract.
        let tier = unsafe { tier_name(tier, tier_len) }?;
        if tenant_key == 0 {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        engine
            .set_tier_key(TenantKey::from_hash(tenant_key), tier)
            .map_err(error_status)?;
        Ok(FAIRQ_OK)
    })
}

/// Writes the weight of tier `tier` (`tier_len` bytes, case-insensitive) to `*weight_out`.
/// `FAIRQ_NOT_FOUND` (nothing written) when the engine has no such tier.
///
/// # Safety
/// `engine` must be NULL or a live engine; `tier` must be valid for reads of `tier_len` bytes;
/// `weight_out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tier_weight(
    engine: *const fairq_engine,
    tier: *const c_char,
    tier_len: usize,
    weight_out: *mut u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // Both pointers are checked before the name's length and UTF-8 (the error precedence).
        let tier = bytes(tier, tier_len)?;
        let out = required_out(weight_out)?;
        // SAFETY: `tier_len` readable bytes at `tier`, by contract.
        let tier = tier_str(unsafe { tier.get() }?)?;
        let Some(weight) = engine.tier_weight(tier) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, weight) };
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- bulkhead pools

/// `fairq_enqueue_downstream_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_enqueue_downstream_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_enqueue_downstream(
    engine: *const fairq_engine,
    request: *const fairq_request,
    downstream: u32,
    result: *mut fairq_enqueue_result,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_enqueue_downstream_at(engine, request, downstream, now, result) })
    })
}

/// `fairq_enqueue_at` for a request to bulkhead pool `downstream` (from
/// `fairq_engine_builder_add_pool`): its grant takes a permit of that pool too, so it waits
/// while the pool is full, and other pools' requests go ahead of it. With no pool configured
/// `downstream` is ignored (as `fairq_enqueue_at` does: it is `downstream` 0).
/// `FAIRQ_ERR_INVALID_ARGUMENT` for a `downstream` that names no pool.
///
/// # Safety
/// `engine` must be NULL or a live engine; `request` must point to an initialised
/// `fairq_request`; `result` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_enqueue_downstream_at(
    engine: *const fairq_engine,
    request: *const fairq_request,
    downstream: u32,
    now_ns: u64,
    result: *mut fairq_enqueue_result,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // SAFETY: a valid request or NULL, by contract.
        let request = unsafe { read_in(request) }?;
        let out = required_out(result)?;
        let mut request = request.to_request()?;
        request.downstream = downstream;
        let (status, value) = match engine.enqueue_at(&request, now_ns).map_err(error_status)? {
            Enqueued::Queued {
                ticket,
                position,
                estimated_wait_ns,
            } => (
                FAIRQ_QUEUED,
                fairq_enqueue_result {
                    ticket: ticket.0,
                    estimated_wait_ns,
                    position,
                    reason: FAIRQ_REASON_NONE,
                },
            ),
            Enqueued::Refused(refusal) => (FAIRQ_REFUSED, fairq_enqueue_result::refused(refusal)),
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, value) };
        Ok(status)
    })
}

/// One bulkhead pool's gauges and counter (`fairq_pool_get_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_pool_stats {
    /// Grants of this pool out now.
    pub in_flight: u64,
    /// Tenants whose head request waits for a permit of this pool now.
    pub blocked_tenants: u64,
    /// Times a tenant blocked on this pool (counter).
    pub blocks: u64,
    /// The pool's configured bound.
    pub max_in_flight: u32,
}

/// Writes the number of bulkhead pools (0 when none is configured) to `*count_out`.
///
/// # Safety
/// `engine` must be NULL or a live engine; `count_out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_pool_count(engine: *const fairq_engine, count_out: *mut u32) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(count_out)?;
        let count = engine.config().downstream_max_in_flight.len() as u32;
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, count) };
        Ok(FAIRQ_OK)
    })
}

/// Fills `*stats` with pool `downstream`'s gauges. `FAIRQ_NOT_FOUND` (nothing written) when no
/// such pool is configured.
///
/// # Safety
/// `engine` must be NULL or a live engine; `stats` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_pool_get_stats(
    engine: *const fairq_engine,
    downstream: u32,
    stats: *mut fairq_pool_stats,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(stats)?;
        let maxes = &engine.config().downstream_max_in_flight;
        let Some(&max) = maxes.get(downstream as usize) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        let pools = engine.downstream_stats();
        let Some(&(in_flight, blocked, blocks)) = pools.get(downstream as usize) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        let value = fairq_pool_stats {
            in_flight,
            blocked_tenants: blocked,
            blocks,
            max_in_flight: max,
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, value) };
        Ok(FAIRQ_OK)
    })
}

/// `fairq_report_downstream_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_report_downstream_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_report_downstream(
    engine: *const fairq_engine,
    downstream: u32,
    ok: bool,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_report_downstream_at(engine, downstream, ok, now) })
    })
}

/// Reports whether a call to pool `downstream`'s downstream succeeded (`ok`: for HTTP, any
/// status under 500), for load shedding's error rate: call it once per granted request that
/// reached the downstream, next to `fairq_complete`. A no-op while load shedding is off.
/// `FAIRQ_ERR_INVALID_ARGUMENT` for a `downstream` that names no pool (when pools are
/// configured).
///
/// # Safety
/// `engine` must be NULL or a live engine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_report_downstream_at(
    engine: *const fairq_engine,
    downstream: u32,
    ok: bool,
    now_ns: u64,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        engine
            .report_downstream_at(downstream, ok, now_ns)
            .map_err(error_status)?;
        Ok(FAIRQ_OK)
    })
}

/// One bulkhead pool's load-shedding stage (`fairq_pool_get_shedding`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct fairq_pool_shedding {
    /// Error ratio of the pool's last judged window; NaN before the first.
    pub last_error_ratio: f64,
    /// Times the limit was cut.
    pub cuts: u64,
    /// Calls reported ok (`fairq_report_downstream`).
    pub reports_ok: u64,
    /// Calls reported failed.
    pub reports_error: u64,
    /// The in-flight limit in force: the pool's bound, unless shedding cut it.
    pub limit: u32,
    /// 1 while the pool sheds (its limit is under its bound).
    pub shedding: u32,
}

/// Fills `*out` with pool `downstream`'s shedding stage. `FAIRQ_NOT_FOUND` (nothing written)
/// when no such pool is configured. Without load shedding the limit is the pool's bound and
/// `shedding` 0.
///
/// # Safety
/// `engine` must be NULL or a live engine; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_pool_get_shedding(
    engine: *const fairq_engine,
    downstream: u32,
    out: *mut fairq_pool_shedding,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(out)?;
        let pools = engine.downstream_shedding();
        let Some(p) = pools.get(downstream as usize) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        let value = fairq_pool_shedding {
            last_error_ratio: p.last_error_ratio.unwrap_or(f64::NAN),
            cuts: p.cuts,
            reports_ok: p.ok,
            reports_error: p.errors,
            limit: p.limit as u32,
            shedding: u32::from(p.shedding),
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, value) };
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- fairness over all tenants

/// Fairness indicators over every tenant holding a slot (`fairq_fairness_get`): the smallest
/// and largest value of each. A min/max that no tenant has yet (no tenant expected a cost unit,
/// waited, or sent a request) is NaN. The usual alerts read straight off it:
/// `fair_share_ratio_min < 0.7`, `starvation_current_max_s > 30`, `refusal_rate_max -
/// refusal_rate_min > 0.15`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct fairq_fairness {
    /// Tenants holding a slot (active, or idle and not reused yet).
    pub tenants: u64,
    /// Over tenants with at least one expected cost unit.
    pub fair_share_ratio_min: f64,
    /// Over tenants with at least one expected cost unit.
    pub fair_share_ratio_max: f64,
    /// Wait p95 in seconds, over tenants with at least one wait.
    pub wait_p95_min_s: f64,
    /// Wait p95 in seconds, over tenants with at least one wait.
    pub wait_p95_max_s: f64,
    /// Over tenants with at least one request.
    pub refusal_rate_min: f64,
    /// Over tenants with at least one request.
    pub refusal_rate_max: f64,
    /// Open starvation window in seconds (0 when not ready).
    pub starvation_current_min_s: f64,
    /// Open starvation window in seconds (0 when not ready).
    pub starvation_current_max_s: f64,
    /// Longest starvation window so far, in seconds.
    pub starvation_longest_min_s: f64,
    /// Longest starvation window so far, in seconds.
    pub starvation_longest_max_s: f64,
}

fn min_max(m: Option<MinMax>) -> (f64, f64) {
    m.map_or((f64::NAN, f64::NAN), |m| (m.min, m.max))
}

/// `fairq_fairness_get_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_fairness_get_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fairness_get(
    engine: *const fairq_engine,
    out: *mut fairq_fairness,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_fairness_get_at(engine, now, out) })
    })
}

/// Fills `*out` with the indicators' min/max over every tenant, starvation windows measured at
/// `now_ns`. Scans the tenant table (O(max_tenants), no lock, off the hot path).
///
/// # Safety
/// `engine` must be NULL or a live engine; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fairness_get_at(
    engine: *const fairq_engine,
    now_ns: u64,
    out: *mut fairq_fairness,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(out)?;
        let a = engine.fairness_report_at(now_ns).aggregate;
        let (fair_share_ratio_min, fair_share_ratio_max) = min_max(a.fair_share_ratio);
        let (wait_p95_min_s, wait_p95_max_s) = min_max(a.wait_p95_seconds);
        let (refusal_rate_min, refusal_rate_max) = min_max(a.refusal_rate);
        let (starvation_current_min_s, starvation_current_max_s) =
            min_max(a.starvation_current_seconds);
        let (starvation_longest_min_s, starvation_longest_max_s) =
            min_max(a.starvation_longest_seconds);
        let value = fairq_fairness {
            tenants: a.tenants,
            fair_share_ratio_min,
            fair_share_ratio_max,
            wait_p95_min_s,
            wait_p95_max_s,
            refusal_rate_min,
            refusal_rate_max,
            starvation_current_min_s,
            starvation_current_max_s,
            starvation_longest_min_s,
            starvation_longest_max_s,
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, value) };
        Ok(FAIRQ_OK)
    })
}

/// `fairq_fairness_top_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_fairness_top_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fairness_top(
    engine: *const fairq_engine,
    out: *mut fairq_indicators,
    cap: usize,
    count_out: *mut usize,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_fairness_top_at(engine, now, out, cap, count_out) })
    })
}

/// Writes the indicators of the tenants with the most requests, most first, into `out[0..]`:
/// at most `cap` of them and at most the engine's indicator top K (the tenants the Prometheus
/// text shows). `*count_out` gets how many were written; `out` may be NULL when `cap` is 0
/// (0 is written). Scans the tenant table (O(max_tenants), no lock, off the hot path).
///
/// # Safety
/// `engine` must be NULL or a live engine; a non-NULL `out` must be valid for writes of `cap`
/// entries; `count_out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fairness_top_at(
    engine: *const fairq_engine,
    now_ns: u64,
    out: *mut fairq_indicators,
    cap: usize,
    count_out: *mut usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = if cap == 0 {
            optional_out(out)?
        } else {
            Some(required_out(out)?)
        };
        let count = required_out(count_out)?;
        if cap > isize::MAX as usize / std::mem::size_of::<fairq_indicators>() {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        let top = if cap == 0 {
            Vec::new()
        } else {
            engine.fairness_report_at(now_ns).top
        };
        let n = top.len().min(cap);
        if let Some(out) = out {
            for (i, t) in top.into_iter().take(n).enumerate() {
                // SAFETY: `out` is non-NULL and aligned (checked) and valid for `cap` entries by
                // contract; `i < n <= cap`, and the byte size fits `isize` (checked).
                unsafe { write_out(out.add(i), fairq_indicators::from(t)) };
            }
        }
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(count, n) };
        Ok(FAIRQ_OK)
    })
}
