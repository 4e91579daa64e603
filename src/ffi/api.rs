//! The exported functions. Each one is written out by hand so cbindgen sees it, and each body
//! runs inside the panic boundary (`ffi_status!` / `ffi_value!`).
//!
//! Every function checks its arguments in one order, before it touches the engine, so an error
//! never leaves a half-done operation (a queued request whose ticket could not be returned):
//! 1. the engine handle ([`engine_ref`]: NULL → `FAIRQ_ERR_NULL`, misaligned or not an engine
//!    → `FAIRQ_ERR_INVALID_HANDLE`);
//! 2. every other pointer, in argument order, through the helpers of `boundary.rs` (`required`,
//!    `required_out`, `optional_out`, `array`, `bytes`, `out_buffer`): NULL where required →
//!    `FAIRQ_ERR_NULL`, misaligned → `FAIRQ_ERR_INVALID_ARGUMENT`;
//! 3. values (codes, ranges, lengths, tenant key 0) → `FAIRQ_ERR_INVALID_ARGUMENT` or
//!    `FAIRQ_ERR_INVALID_CONFIG`;
//! 4. then the engine's own answer, and only then the out-parameters are written.
//!
//! `tests/ffi_pointers.rs` holds a table of every export and its pointer arguments, checked
//! against the header, and tries each pointer NULL and misaligned.

use std::os::raw::c_char;

use super::boundary::{
    array, bytes, copy_message, error_status, hand_over_text, optional_out, out_buffer, required,
    required_out, write_out,
};
use super::codes::*;
use super::types::*;
use crate::config::{Config, MAX_COST};
use crate::engine::Engine;
use crate::identity::{Identity, TenantKey};
use crate::types::{Completion, Enqueued, NextGrant, Outcome, Ticket};

/// Borrows the engine behind a handle: step 1 of every call. NULL → `FAIRQ_ERR_NULL`; a
/// misaligned pointer, or one whose tag is not a live engine's (foreign memory, or a handle
/// `fairq_engine_free` poisoned) → `FAIRQ_ERR_INVALID_HANDLE`, without reading it.
///
/// # Safety
/// A non-NULL `ptr` must point to a live engine from `fairq_engine_new` (or, for the
/// best-effort handle check, to readable memory at least as large as one).
pub(super) unsafe fn engine_ref<'a>(ptr: *const fairq_engine) -> Result<&'a Engine, i32> {
    // A misaligned pointer cannot be an engine: call it a bad handle, not a bad argument.
    let ptr = required(ptr).map_err(|e| match e {
        FAIRQ_ERR_NULL => FAIRQ_ERR_NULL,
        _ => FAIRQ_ERR_INVALID_HANDLE,
    })?;
    // SAFETY: `ptr` is non-NULL and aligned, and by the caller's contract points to readable
    // memory the size of an engine. A volatile read of the plain `u64` tag keeps the compiler
    // from assuming it is always `ENGINE_MAGIC`.
    let magic = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*ptr).magic)) };
    if magic != ENGINE_MAGIC {
        return Err(FAIRQ_ERR_INVALID_HANDLE);
    }
    // SAFETY: the tag matches, so this is a live engine; the caller keeps it alive (no
    // concurrent `fairq_engine_free`) for the duration of the call, and the handle's Arc keeps
    // the engine alive as long as the handle. `Engine` is `Sync`, so a shared borrow from any
    // thread is sound.
    Ok(unsafe { &*(*ptr).engine })
}

/// A new shared reference to the engine behind a handle (for a fleet, which outlives the
/// handle if need be).
///
/// # Safety
/// As [`engine_ref`].
#[cfg(feature = "fleet")]
pub(super) unsafe fn engine_shared(
    ptr: *const fairq_engine,
) -> Result<std::sync::Arc<Engine>, i32> {
    // SAFETY: same contract; `engine_ref` checks NULL, alignment and the tag first.
    unsafe { engine_ref(ptr) }?;
    // SAFETY: checked above to be a live handle, alive for the call by the caller's contract.
    Ok(std::sync::Arc::clone(unsafe { &(*ptr).engine }))
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

/// A tenant named by key: 0 names no tenant (`fairq_tenant_key` and `fairq_resolve_tenant`
/// never produce it), so it is `FAIRQ_ERR_INVALID_ARGUMENT` wherever a tenant is named.
pub(super) fn tenant(key: u64) -> Result<TenantKey, i32> {
    if key == 0 {
        return Err(FAIRQ_ERR_INVALID_ARGUMENT);
    }
    Ok(TenantKey::from_hash(key))
}

fn outcome(code: u32, retry_after_ns: u64) -> Result<Outcome, i32> {
    match code {
        FAIRQ_OUTCOME_ADMITTED => Ok(Outcome::Admitted),
        FAIRQ_OUTCOME_STILL_REFUSED => Ok(Outcome::StillRefused { retry_after_ns }),
        _ => Err(FAIRQ_ERR_INVALID_ARGUMENT),
    }
}

// ---------------------------------------------------------------- version, clock, config

/// The library version, `"MAJOR.MINOR.PATCH"` (matches `FAIRQ_VERSION_*` of the header it was
/// built with). Static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn fairq_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// The monotonic clock the functions without `_at` read, in ns since the first call in this
/// process. Pass it (or your own monotonic clock, consistently) to the `_at` functions.
#[unsafe(no_mangle)]
pub extern "C" fn fairq_now_ns() -> u64 {
    ffi_value!(0, { crate::clock::now_ns() })
}

/// Fills `*config` with the defaults (disabled; 1024 tenants; 64 per tenant; 4096 queued; 8 in
/// flight; weight 1; 30 s budget). NULL, or a pointer misaligned for `fairq_config`, is a no-op:
/// nothing is written (this function has no status to report it).
///
/// # Safety
/// A non-NULL `config` must be valid for a write of a `fairq_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_config_default(config: *mut fairq_config) {
    ffi_value!((), {
        if let Ok(Some(out)) = optional_out(config) {
            // SAFETY: checked non-NULL and aligned; writable by the caller's contract.
            unsafe { write_out(out, fairq_config::from(&Config::default())) };
        }
    })
}

/// Checks `*config`. `FAIRQ_OK`, or `FAIRQ_ERR_INVALID_CONFIG` with a message naming the field
/// and its range copied into `buf` (truncated, NUL-terminated; `buf` may be NULL or `len` 0:
/// no message). The message of the table cap names the fields whose product is too large and
/// the bytes needed. `FAIRQ_ERR_NULL` for a NULL `config`, `FAIRQ_ERR_INVALID_ARGUMENT` for a
/// misaligned one.
///
/// # Safety
/// `config` must point to an initialised `fairq_config`; a non-NULL `buf` must be valid for
/// writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_config_check(
    config: *const fairq_config,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    ffi_status!({
        // SAFETY: the caller passes a valid config or NULL (rejected by `read_in`).
        let config = unsafe { read_in(config) }?;
        match config.to_config() {
            Ok(_) => Ok(FAIRQ_OK),
            Err(message) => {
                // SAFETY: `buf` is NULL (ignored) or valid for `len` bytes by contract.
                unsafe { copy_message(&message, buf, len) };
                Err(FAIRQ_ERR_INVALID_CONFIG)
            }
        }
    })
}

// ---------------------------------------------------------------- engine

/// Builds an engine from `*config` and writes it to `*engine_out`. All memory is allocated
/// here. Pointers first, in order (`config`, then `engine_out`: NULL → `FAIRQ_ERR_NULL`,
/// misaligned → `FAIRQ_ERR_INVALID_ARGUMENT`), then `FAIRQ_ERR_INVALID_CONFIG` when a field is
/// out of range or the tables would pass the 4 GiB cap (`fairq_config_check` says which).
/// Release it with `fairq_engine_free`.
///
/// # Safety
/// `config` must point to an initialised `fairq_config`; `engine_out` must be valid for a
/// write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_new(
    config: *const fairq_config,
    engine_out: *mut *mut fairq_engine,
) -> i32 {
    ffi_status!({
        // SAFETY: the caller passes a valid config or NULL (rejected by `read_in`).
        let config = unsafe { read_in(config) }?;
        let out = required_out(engine_out)?;
        let config = config.to_config().map_err(|_| FAIRQ_ERR_INVALID_CONFIG)?;
        let engine = Engine::new(config).map_err(|_| FAIRQ_ERR_INVALID_CONFIG)?;
        let handle = Box::into_raw(Box::new(fairq_engine {
            magic: ENGINE_MAGIC,
            engine: std::sync::Arc::new(engine),
        }));
        // SAFETY: `out` is checked non-NULL and aligned, writable by the caller's contract.
        unsafe { write_out(out, handle) };
        Ok(FAIRQ_OK)
    })
}

/// Releases an engine and everything it holds. NULL is a no-op, and so is a pointer that is
/// misaligned or not a live engine (see `FAIRQ_ERR_INVALID_HANDLE`). Must be the last call on
/// this engine: no other thread may be using it, and outstanding tickets become meaningless. A
/// fleet made from it (`fairq_fleet_new`) keeps the engine itself alive, and may go on running,
/// until `fairq_fleet_free`: free the fleet too.
///
/// A freed handle is like a pointer after `free()`: using it (freeing it again included) is
/// undefined behaviour. As a best-effort aid only, this function poisons the handle's tag before
/// releasing its memory, and every call checks the tag, so a stale handle usually gets
/// `FAIRQ_ERR_INVALID_HANDLE` (or, for `fairq_engine_free`, is ignored) as long as its memory
/// has not been reused. Do not rely on it.
///
/// # Safety
/// A non-NULL `engine` must come from `fairq_engine_new` and not have been freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_engine_free(engine: *mut fairq_engine) {
    ffi_value!((), {
        // SAFETY: non-NULL pointers are live engines by the caller's contract; the tag check
        // only refuses obviously foreign memory.
        if unsafe { engine_ref(engine) }.is_err() {
            return;
        }
        // SAFETY: a live handle (checked above), and by the caller's contract this is its last
        // use.
        drop(unsafe { retire(engine) });
    })
}

/// Poisons a live handle's tag, then takes back ownership of its allocation. Dropping the box
/// releases the handle (and its reference to the engine). Until the memory is reused, the
/// poisoned tag makes [`engine_ref`] refuse the handle with `FAIRQ_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `engine` must be a live handle from `fairq_engine_new`, not used by any other thread from
/// now on and never again through this pointer.
unsafe fn retire(engine: *mut fairq_engine) -> Box<fairq_engine> {
    // SAFETY: allocated by `Box::into_raw` in `fairq_engine_new` and not freed before (the
    // caller's contract), so valid for this write and for `Box::from_raw`. The volatile write
    // keeps the compiler from dropping a store into memory about to be freed.
    unsafe {
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*engine).magic), ENGINE_FREED);
        Box::from_raw(engine)
    }
}

/// Turns the engine on or off at run time. Off refuses new requests with
/// `FAIRQ_REASON_DISABLED`; what is already queued still drains through `fairq_next_grant`.
///
/// # Safety
/// `engine` must be NULL or a live engine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_set_enabled(engine: *const fairq_engine, enabled: bool) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        engine.set_enabled(enabled);
        Ok(FAIRQ_OK)
    })
}

/// Writes whether new requests are queued to `*enabled`.
///
/// # Safety
/// `engine` must be NULL or a live engine; `enabled` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_is_enabled(engine: *const fairq_engine, enabled: *mut bool) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(enabled)?;
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, engine.is_enabled()) };
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- tenants and weights

/// Hashes a raw identifier (user id, team id, API key id; `len` bytes, not NUL-terminated) to
/// the 64-bit tenant key used by requests and weights. The function is specified, so the same
/// bytes give the same key in every process, build, CPU and binding: XXH3-64 with seed 0 over
/// the `len` bytes, 0 mapped to 1 (so a key is never 0). Test vectors: `"acme"` ->
/// `0x44ad98655d8858e1`; `"0123456789abcdef"` repeated 64 times (1 KiB) ->
/// `0x540ffccbf24ea528`; `"naïve-租户"` (UTF-8, 13 bytes) -> `0xd812649601f883b6`; the function
/// over no bytes is `0x2d06800538d394c2`, but an empty identifier is refused here.
/// `FAIRQ_ERR_NULL` for a NULL `raw` with `len` > 0 or a NULL `key_out`;
/// `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned `key_out` or an empty identifier.
///
/// # Safety
/// `raw` must be valid for reads of `len` bytes; `key_out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tenant_key(
    raw: *const c_char,
    len: usize,
    key_out: *mut u64,
) -> i32 {
    ffi_status!({
        let raw = bytes(raw, len)?;
        let out = required_out(key_out)?;
        // SAFETY: `len` readable bytes at `raw`, by contract.
        let raw = unsafe { raw.get() }?;
        if raw.is_empty() {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, TenantKey::from_raw(raw).get()) };
        Ok(FAIRQ_OK)
    })
}

/// Resolves the tenant of a request from its identifiers: the engine's configured
/// `tenant_dimension` first, then user, team, API key (empty values and a placeholder team do
/// not count). `FAIRQ_OK` writes the key and, if `dimension_out` is not NULL, the
/// `FAIRQ_TENANT_DIM_*` used; the key is never 0. `FAIRQ_NOT_FOUND` when the request has no
/// identifier (enqueue it with `tenant_key` 0 to refuse it `no_tenant`). A NULL string in the
/// identity is absent, whatever its length. `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned
/// `identity`, `key_out` or `dimension_out`, and (after the pointers) for a non-UTF-8 string.
///
/// # Safety
/// `engine` must be NULL or a live engine; `identity` must point to a `fairq_identity` whose
/// non-NULL strings are readable for their lengths; the out-pointers must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_resolve_tenant(
    engine: *const fairq_engine,
    identity: *const fairq_identity,
    key_out: *mut u64,
    dimension_out: *mut u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // SAFETY: a valid identity or NULL, by contract.
        let identity = unsafe { read_in(identity) }?;
        let out = required_out(key_out)?;
        let dim_out = optional_out(dimension_out)?;
        let text = |ptr: *const c_char, len: usize| -> Result<Option<&str>, i32> {
            if ptr.is_null() {
                return Ok(None);
            }
            // SAFETY: non-NULL strings in the identity are readable for their lengths.
            let raw = unsafe { bytes(ptr, len)?.get() }?;
            let text = std::str::from_utf8(raw).map_err(|_| FAIRQ_ERR_INVALID_ARGUMENT)?;
            Ok(Some(text))
        };
        let identity = Identity {
            user: text(identity.user, identity.user_len)?,
            team: text(identity.team, identity.team_len)?,
            team_is_placeholder: identity.team_is_placeholder,
            api_key: text(identity.api_key, identity.api_key_len)?,
        };
        let Some((dimension, key)) = identity.resolve(engine.config().tenant_dimension) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, key.get()) };
        if let Some(dim_out) = dim_out {
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(dim_out, dimension as u32) };
        }
        Ok(FAIRQ_OK)
    })
}

/// Sets the weight (1..=10000) of the tenant whose raw identifier is the `len` bytes at `raw`,
/// at run time. A live tenant takes it at its next turn. `FAIRQ_ERR_NULL` for a NULL `raw` with
/// `len` > 0; `FAIRQ_ERR_INVALID_ARGUMENT` for an empty identifier or a weight out of range;
/// `FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES` when it would exceed `max_weight_classes`.
///
/// # Safety
/// `engine` must be NULL or a live engine; `raw` must be valid for reads of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_set_weight(
    engine: *const fairq_engine,
    raw: *const c_char,
    len: usize,
    weight: u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let raw = bytes(raw, len)?;
        // SAFETY: `len` readable bytes at `raw`, by contract.
        let raw = unsafe { raw.get() }?;
        if raw.is_empty() {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        let key = TenantKey::from_raw(raw);
        engine.set_weight_key(key, weight).map_err(error_status)?;
        engine.remember_name(key, raw, false);
        Ok(FAIRQ_OK)
    })
}

/// `fairq_set_weight` by tenant key (from `fairq_tenant_key`). Key 0 names no tenant:
/// `FAIRQ_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// `engine` must be NULL or a live engine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_set_weight_key(
    engine: *const fairq_engine,
    tenant_key: u64,
    weight: u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let key = tenant(tenant_key)?;
        engine.set_weight_key(key, weight).map_err(error_status)?;
        Ok(FAIRQ_OK)
    })
}

/// Replaces the whole weight table with `count` entries and a new default weight, at run time,
/// without stopping traffic. Tenants not listed get `default_weight`. All or nothing: on an
/// error the old table stays. `entries` may be NULL when `count` is 0 (`FAIRQ_ERR_NULL`
/// otherwise); a non-NULL `entries` must be aligned (`FAIRQ_ERR_INVALID_ARGUMENT`).
/// `FAIRQ_ERR_INVALID_ARGUMENT` for an entry with key 0 or a weight out of 1..=10000.
///
/// # Safety
/// `engine` must be NULL or a live engine; `entries` must be valid for reads of `count`
/// entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_replace_weights(
    engine: *const fairq_engine,
    entries: *const fairq_weight_entry,
    count: usize,
    default_weight: u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let entries = array(entries, count)?;
        // SAFETY: `count` initialised entries are readable for the call's duration by contract.
        let entries = unsafe { entries.get() }?;
        if entries.iter().any(|e| e.tenant_key == 0) {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        let table: Vec<(u64, u32)> = entries.iter().map(|e| (e.tenant_key, e.weight)).collect();
        engine
            .replace_weight_keys(&table, default_weight)
            .map_err(error_status)?;
        Ok(FAIRQ_OK)
    })
}

/// Writes the weight the tenant gets now (its live slot's, else the table's) to `*weight_out`.
/// `FAIRQ_ERR_INVALID_ARGUMENT` for key 0 (it names no tenant).
///
/// # Safety
/// `engine` must be NULL or a live engine; `weight_out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_weight_of(
    engine: *const fairq_engine,
    tenant_key: u64,
    weight_out: *mut u32,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(weight_out)?;
        let weight = engine.weight_of(tenant(tenant_key)?);
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, weight) };
        Ok(FAIRQ_OK)
    })
}

/// Writes the grants and cost units granted to a tenant since it took its slot. `FAIRQ_NOT_FOUND`
/// when it holds no slot (idle long enough to be evicted, or never seen).
/// `FAIRQ_ERR_INVALID_ARGUMENT` for key 0 (it names no tenant).
///
/// # Safety
/// `engine` must be NULL or a live engine; both out-pointers must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_tenant_granted(
    engine: *const fairq_engine,
    tenant_key: u64,
    grants_out: *mut u64,
    cost_out: *mut u64,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let grants_out = required_out(grants_out)?;
        let cost_out = required_out(cost_out)?;
        let key = tenant(tenant_key)?;
        let Some((grants, cost)) = engine.tenant_granted(key) else {
            return Ok(FAIRQ_NOT_FOUND);
        };
        // SAFETY: both checked non-NULL and aligned, writable by contract.
        unsafe {
            write_out(grants_out, grants);
            write_out(cost_out, cost);
        }
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- enqueue

/// `fairq_enqueue_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_enqueue_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_enqueue(
    engine: *const fairq_engine,
    request: *const fairq_request,
    result: *mut fairq_enqueue_result,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_enqueue_at(engine, request, now, result) })
    })
}

/// Holds a refused request in its tenant's queue (`FAIRQ_QUEUED`: `result` has the ticket,
/// position and estimated wait), or refuses it at once (`FAIRQ_REFUSED`: `result` has the
/// reason and the position it would have had; a request with `tenant_key` 0 is refused
/// `FAIRQ_REASON_NO_TENANT`). `now_ns` is monotonic ns. `FAIRQ_ERR_NULL` for a NULL `request`
/// or `result`, `FAIRQ_ERR_INVALID_ARGUMENT` for a misaligned one and (after the pointers) for
/// a dimension code or cost out of range.
///
/// # Safety
/// `engine` must be NULL or a live engine; `request` must point to an initialised
/// `fairq_request`; `result` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_enqueue_at(
    engine: *const fairq_engine,
    request: *const fairq_request,
    now_ns: u64,
    result: *mut fairq_enqueue_result,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // SAFETY: a valid request or NULL, by contract.
        let request = unsafe { read_in(request) }?;
        let out = required_out(result)?;
        let request = request.to_request()?;
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

// ---------------------------------------------------------------- next_grant

/// `fairq_next_grant_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_next_grant_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_next_grant(
    engine: *const fairq_engine,
    grant: *mut fairq_grant,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_next_grant_at(engine, now, grant) })
    })
}

/// Releases the next request by weighted fair order among tenants whose head is ready.
/// `FAIRQ_OK`: `*grant` is a grant holding an in-flight permit; re-check the limiter, then
/// `fairq_complete` (or `fairq_cancel`). `FAIRQ_EXPIRED`: `*grant` is a queued request whose
/// budget ran out (reason `FAIRQ_REASON_DEADLINE_EXCEEDED`, with its `user_data`); answer it,
/// its ticket has ended. `FAIRQ_EMPTY`: nothing ready for this caller (nothing queued is ready,
/// or the tenant whose turn it is, the only one ready or the one taking most of the grants, is
/// being served by a caller on another thread, which goes on calling). `FAIRQ_AT_CAPACITY`:
/// `max_in_flight` grants are out. Call it until `FAIRQ_EMPTY` or `FAIRQ_AT_CAPACITY` after
/// every enqueue and complete, and when `fairq_next_wakeup_ns` passes.
///
/// # Safety
/// `engine` must be NULL or a live engine; `grant` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_next_grant_at(
    engine: *const fairq_engine,
    now_ns: u64,
    grant: *mut fairq_grant,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(grant)?;
        let (status, value) = match engine.next_grant_at(now_ns) {
            NextGrant::Granted(g) => (FAIRQ_OK, fairq_grant::from(g)),
            NextGrant::Expired(e) => (FAIRQ_EXPIRED, fairq_grant::from(e)),
            NextGrant::Empty => return Ok(FAIRQ_EMPTY),
            NextGrant::AtCapacity => return Ok(FAIRQ_AT_CAPACITY),
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, value) };
        Ok(status)
    })
}

/// When a parked tenant may next become ready (monotonic ns): set a timer and call
/// `fairq_next_grant` then. `FAIRQ_EMPTY` (nothing written) when nothing is parked.
///
/// # Safety
/// `engine` must be NULL or a live engine; `wakeup_out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_next_wakeup_ns(
    engine: *const fairq_engine,
    wakeup_out: *mut u64,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(wakeup_out)?;
        let Some(at) = engine.next_wakeup_ns() else {
            return Ok(FAIRQ_EMPTY);
        };
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, at) };
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- complete, cancel

/// `fairq_complete_with_cost_at` shared body; `actual_cost` None keeps the enqueued cost.
///
/// # Safety
/// As `fairq_complete_with_cost_at`.
unsafe fn complete(
    engine: *const fairq_engine,
    ticket: u64,
    outcome_code: u32,
    retry_after_ns: u64,
    actual_cost: Option<u32>,
    now_ns: u64,
    completion: *mut fairq_completion,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = optional_out(completion)?;
        let outcome = outcome(outcome_code, retry_after_ns)?;
        if actual_cost.is_some_and(|cost| cost > MAX_COST) {
            return Err(FAIRQ_ERR_INVALID_ARGUMENT);
        }
        let done = engine
            .complete_at(Ticket(ticket), outcome, actual_cost, now_ns)
            .map_err(error_status)?;
        let status = match done {
            Completion::Completed => FAIRQ_OK,
            Completion::Requeued { .. } => FAIRQ_REQUEUED,
            Completion::Refused(_) => FAIRQ_REFUSED,
        };
        if let Some(out) = out {
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(out, fairq_completion::from(done)) };
        }
        Ok(status)
    })
}

/// `fairq_complete_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_complete_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_complete(
    engine: *const fairq_engine,
    ticket: u64,
    outcome: u32,
    retry_after_ns: u64,
    completion: *mut fairq_completion,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe {
            complete(
                engine,
                ticket,
                outcome,
                retry_after_ns,
                None,
                now,
                completion,
            )
        })
    })
}

/// Ends a grant after the limiter re-check and gives its in-flight permit back.
/// `FAIRQ_OUTCOME_ADMITTED`: the ticket ends (`FAIRQ_OK`). `FAIRQ_OUTCOME_STILL_REFUSED`: the
/// request goes back into its tenant's queue, ready after `retry_after_ns`, if that fits its
/// budget (`FAIRQ_REQUEUED`, ticket stays valid), else the ticket ends (`FAIRQ_REFUSED`, reason
/// `wait_exceeds_budget` or a full queue). `completion` may be NULL; when not, it must be
/// aligned (`FAIRQ_ERR_INVALID_ARGUMENT`) and it gets the details.
/// `FAIRQ_ERR_INVALID_ARGUMENT` for an outcome code out of range (checked before the ticket).
/// `FAIRQ_ERR_STALE_TICKET` / `FAIRQ_ERR_TICKET_STATE` for a ticket that is not granted now
/// (ended, forged, queued, completed twice).
///
/// A `fairq_cancel` of the same ticket racing a still-refused completion ends the request
/// exactly once: if the cancel ends the ticket first, this returns `FAIRQ_ERR_STALE_TICKET`; if
/// this call owns the ticket first, the cancel waits for the requeue, then cancels the
/// requeued ticket, and this returns `FAIRQ_REQUEUED`. In the rare case that the push back
/// into the tenant's queue fails after the ticket was published and the cancel ended it
/// meanwhile, this also returns `FAIRQ_REQUEUED` (the cancel returned `FAIRQ_OK`; the request
/// ended once, cancelled). So after `FAIRQ_REQUEUED` the ticket is queued, or was ended by the
/// cancel that raced it.
///
/// # Safety
/// `engine` must be NULL or a live engine; `completion` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_complete_at(
    engine: *const fairq_engine,
    ticket: u64,
    outcome: u32,
    retry_after_ns: u64,
    now_ns: u64,
    completion: *mut fairq_completion,
) -> i32 {
    // SAFETY: same contract.
    unsafe {
        complete(
            engine,
            ticket,
            outcome,
            retry_after_ns,
            None,
            now_ns,
            completion,
        )
    }
}

/// `fairq_complete_with_cost_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_complete_with_cost_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_complete_with_cost(
    engine: *const fairq_engine,
    ticket: u64,
    outcome: u32,
    retry_after_ns: u64,
    actual_cost: u32,
    completion: *mut fairq_completion,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        let cost = Some(actual_cost);
        // SAFETY: same contract.
        Ok(unsafe {
            complete(
                engine,
                ticket,
                outcome,
                retry_after_ns,
                cost,
                now,
                completion,
            )
        })
    })
}

/// `fairq_complete_at` that also corrects the tenant's charge to the request's actual cost
/// (0..=1000000 resource units), so fairness counts what was really used.
///
/// # Safety
/// `engine` must be NULL or a live engine; `completion` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_complete_with_cost_at(
    engine: *const fairq_engine,
    ticket: u64,
    outcome: u32,
    retry_after_ns: u64,
    actual_cost: u32,
    now_ns: u64,
    completion: *mut fairq_completion,
) -> i32 {
    let cost = Some(actual_cost);
    // SAFETY: same contract.
    unsafe {
        complete(
            engine,
            ticket,
            outcome,
            retry_after_ns,
            cost,
            now_ns,
            completion,
        )
    }
}

/// `fairq_cancel_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_cancel_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_cancel(engine: *const fairq_engine, ticket: u64) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_cancel_at(engine, ticket, now) })
    })
}

/// Ends a queued or granted ticket (the client went away); a granted ticket gives its permit
/// back. Counted as `cancelled`: for a budget timer use `fairq_expire`, counted as
/// `deadline_exceeded`. `FAIRQ_ERR_STALE_TICKET` when it already ended.
///
/// Racing a still-refused `fairq_complete` of the same ticket, exactly one of the two ends the
/// request: a cancel that reaches the ticket while the completion requeues it waits for the
/// requeue, then cancels the requeued ticket (`FAIRQ_OK`; the completion returns
/// `FAIRQ_REQUEUED`); a cancel that comes after the completion ended the ticket gets
/// `FAIRQ_ERR_STALE_TICKET`.
///
/// # Safety
/// `engine` must be NULL or a live engine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_cancel_at(
    engine: *const fairq_engine,
    ticket: u64,
    now_ns: u64,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        engine
            .cancel_at(Ticket(ticket), now_ns)
            .map_err(error_status)?;
        Ok(FAIRQ_OK)
    })
}

/// `fairq_expire_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_expire_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_expire(
    engine: *const fairq_engine,
    ticket: u64,
    refusal: *mut fairq_completion,
) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_expire_at(engine, ticket, now, refusal) })
    })
}

/// Ends a queued ticket whose budget the caller's own timer says has run out, counted as
/// `deadline_exceeded` (use it instead of `fairq_cancel` for budget timers: while
/// `max_in_flight` grants are out the engine cannot reach expired heads itself). When `refusal`
/// is not NULL it gets the reason, position and wait. `FAIRQ_ERR_TICKET_STATE` for a granted
/// ticket, `FAIRQ_ERR_STALE_TICKET` when it already ended. A non-NULL `refusal` must be aligned
/// (`FAIRQ_ERR_INVALID_ARGUMENT`, nothing ended).
///
/// # Safety
/// `engine` must be NULL or a live engine; `refusal` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_expire_at(
    engine: *const fairq_engine,
    ticket: u64,
    now_ns: u64,
    refusal: *mut fairq_completion,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        // Checked before the ticket ends, as `complete` does: a misaligned `refusal` is
        // FAIRQ_ERR_INVALID_ARGUMENT and the ticket stays queued.
        let out = optional_out(refusal)?;
        let r = engine
            .expire_at(Ticket(ticket), now_ns)
            .map_err(error_status)?;
        if let Some(out) = out {
            let value = fairq_completion {
                estimated_wait_ns: 0,
                waited_ns: r.waited_ns,
                position: r.position,
                reason: r.reason as u32,
            };
            // SAFETY: checked non-NULL and aligned, writable by contract.
            unsafe { write_out(out, value) };
        }
        Ok(FAIRQ_OK)
    })
}

// ---------------------------------------------------------------- stats, metrics

/// Fills `*stats` with the gauges and counters. Lock-free, O(`max_tenants`): for metrics, not
/// per request. What it guarantees while other calls run:
/// - each field is read atomically, but the struct is not one atomic snapshot: fields are read
///   one after another while other threads go on;
/// - the gauges `queued` and `in_flight` never read above their bounds (`queue_capacity`,
///   `max_in_flight`);
/// - `tenants` counts the tenants holding a slot: at most the table's `max_tenants +
///   max_tenants / 4 + 1` slots (a tenant coming back to its own idle slot is let in even when
///   `max_tenants` others are active), and while calls run it may briefly count a slot that is
///   changing hands twice;
/// - counters never decrease from one call to the next (on one thread);
/// - once no call is running on the engine, `enqueued == completed + cancelled + expired +
///   refused_after_wait + queued + in_flight`, and `tenants` is exact.
///
/// # Safety
/// `engine` must be NULL or a live engine; `stats` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_get_stats(
    engine: *const fairq_engine,
    stats: *mut fairq_stats,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let out = required_out(stats)?;
        // SAFETY: checked non-NULL and aligned, writable by contract.
        unsafe { write_out(out, fairq_stats::from(engine.stats())) };
        Ok(FAIRQ_OK)
    })
}

/// Renders the metrics in the Prometheus text format into `buf` (NUL-terminated). `*needed`
/// (if not NULL) gets the bytes required including the NUL. `FAIRQ_ERR_BUFFER_TOO_SMALL` when
/// `len` is less than that: nothing is written to `buf`, but `*needed` is set, so call once
/// with `buf` NULL and `len` 0 to size it (metrics can grow between calls: allow slack, or
/// retry). `FAIRQ_ERR_NULL` for a NULL `buf` with `len` > 0.
///
/// # Safety
/// `engine` must be NULL or a live engine; a non-NULL `buf` must be valid for writes of `len`
/// bytes; `needed` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_metrics_prometheus(
    engine: *const fairq_engine,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_ref(engine) }?;
        let buf = out_buffer(buf, len)?;
        let needed = optional_out(needed)?;
        let text = engine.prometheus_text();
        // SAFETY: `buf` (checked by `out_buffer`) is NULL or valid for `len` bytes, and
        // `needed` checked, by contract.
        unsafe { hand_over_text(&text, buf, len, needed) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_handle() -> *mut fairq_engine {
        let mut config = fairq_config::from(&Config::default());
        config.max_tenants = 4;
        let mut engine = std::ptr::null_mut();
        // SAFETY: local pointers.
        assert_eq!(unsafe { fairq_engine_new(&config, &mut engine) }, FAIRQ_OK);
        engine
    }

    /// What `fairq_engine_free` leaves behind, observed before the memory goes back to the
    /// allocator (after that, any use is undefined behaviour and cannot be tested).
    #[test]
    fn a_freed_handle_is_poisoned_and_refused() {
        let engine = new_handle();
        // SAFETY: a live handle, not used through `engine` again below.
        let retired = unsafe { retire(engine) };
        assert_eq!(retired.magic, ENGINE_FREED);
        let stale: *mut fairq_engine = Box::into_raw(retired);
        let mut stats = fairq_stats::default();
        // SAFETY: `stale` is still allocated (we hold it); the calls must refuse it by its tag.
        unsafe {
            assert!(matches!(engine_ref(stale), Err(FAIRQ_ERR_INVALID_HANDLE)));
            assert_eq!(fairq_get_stats(stale, &mut stats), FAIRQ_ERR_INVALID_HANDLE);
            assert_eq!(fairq_cancel(stale, 1), FAIRQ_ERR_INVALID_HANDLE);
            fairq_engine_free(stale); // refused, so not freed a second time
            assert_eq!((*stale).magic, ENGINE_FREED);
            drop(Box::from_raw(stale));
        }
        assert_eq!(
            stats,
            fairq_stats::default(),
            "written through a stale handle"
        );
    }
}
