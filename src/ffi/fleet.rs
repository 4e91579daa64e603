//! Fleet mode from C: `fairq_fleet_*` wraps [`crate::fleet::Fleet`], which syncs this
//! replica's served cost with the other replicas through Redis, off the hot path.
//!
//! Compiled only with cargo feature `fleet`. cbindgen still parses this module (it reads the
//! source, not the cfg), so the one committed header carries these declarations inside
//! `#if defined(FAIRQ_FLEET)` (`[defines]` in `cbindgen.toml`): C code that defines it must link
//! a library built with `--features fleet`.
//!
//! A gateway runs the loop in one of two ways: `fairq_fleet_sync` on its own timer, from a
//! thread that may block up to the socket timeout (P/2), or `fairq_fleet_start`, a library-owned
//! thread, started after `fork()` and stopped by `fairq_fleet_stop` or `fairq_fleet_free`.

use std::ffi::CStr;
use std::os::raw::c_char;
use std::sync::{Mutex, MutexGuard};

use super::api::engine_shared;
use super::boundary::{copy_message, optional_out, required, required_out, write_out};
use super::codes::*;
use super::types::fairq_engine;
use crate::fleet::{Fleet, FleetConfig, FleetError, FleetStatus, FleetThread};

/// How a replica takes part in a fleet (feature `fleet`; declared when `FAIRQ_FLEET` is
/// defined). Start from `fairq_fleet_config_default`, then change fields. Strings are
/// NUL-terminated UTF-8, read only during `fairq_fleet_new`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fairq_fleet_config {
    /// Redis URL. Default `"redis://127.0.0.1:6379/"`. A Redis Cluster:
    /// `"redis+cluster://host:port,host:port/"`, or several URLs separated by commas (the seed
    /// nodes).
    pub url: *const c_char,
    /// Fleet name, the same on every replica (it forms the keys' hash tag). Not empty. Default
    /// `"default"`.
    pub fleet: *const c_char,
    /// This replica's name, unique in the fleet (heartbeat, batch numbers, rates). Not empty.
    /// Default `"replica"`.
    pub replica: *const c_char,
    /// Sync period P in ms, 50..=500. Default 100. Socket timeouts are P/2. Replicas of one
    /// fleet may use different periods.
    pub period_ms: u64,
    /// Epoch length in ms, at least 1000; keys expire after two epochs. Default 300000.
    pub epoch_ms: u64,
    /// Data older than this (ms, at least `period_ms`) degrades the replica to local fairness.
    /// Default 1000.
    pub stale_ms: u64,
    /// EWMA weight of the newest local and fleet rates per period, in (0, 1]. Default 0.7.
    pub smoothing: f64,
    /// Most tenants whose deltas, and most whose rates, one sync sends (K), 1..=4096. Default
    /// 256.
    pub top_k: u32,
}

/// Where a fleet's sync loop stands (feature `fleet`; declared when `FAIRQ_FLEET` is defined).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fairq_fleet_status {
    /// `now_ns` of the last successful sync; meaningful only when `has_synced`.
    pub last_sync_ns: u64,
    /// Sync requests sent to Redis (one `EVALSHA` per sync; two in a sync that had to reload
    /// the script after a Redis restart or failover).
    pub pipelines: u64,
    /// Syncs attempted.
    pub syncs: u64,
    /// Tenants with local fleet state.
    pub tenants_tracked: u64,
    /// Failed syncs since the last success.
    pub consecutive_failures: u32,
    /// A sync has succeeded at least once.
    pub has_synced: bool,
    /// Factors are relaxing back to full weight (3 failures in a row, or stale data).
    pub degraded: bool,
    /// The library sync thread is running (`fairq_fleet_start`).
    pub running: bool,
}

impl fairq_fleet_status {
    fn new(status: &FleetStatus, running: bool) -> Self {
        fairq_fleet_status {
            last_sync_ns: status.last_sync_ns.unwrap_or(0),
            pipelines: status.pipelines,
            syncs: status.syncs,
            tenants_tracked: status.tenants_tracked as u64,
            consecutive_failures: status.consecutive_failures,
            has_synced: status.last_sync_ns.is_some(),
            degraded: status.degraded,
            running,
        }
    }
}

/// Who holds the fleet now.
enum Slot {
    /// Synced by the caller (`fairq_fleet_sync`). Boxed: a `Fleet` is several times the size
    /// of a `FleetThread`.
    Idle(Box<Fleet>),
    /// Moved into the library thread; `stop` gives it back.
    Running(FleetThread),
    /// A thread spawn failed and took the fleet with it.
    Lost,
}

/// A fleet member (feature `fleet`; declared when `FAIRQ_FLEET` is defined). Opaque: made by
/// `fairq_fleet_new`, released by `fairq_fleet_free`.
pub struct fairq_fleet {
    /// `FLEET_MAGIC` while the fleet is live; a cheap check against pointers to other objects.
    magic: u64,
    /// A mutex, not lock-free state: start, stop and sync are control calls made every period
    /// at most, never on the grant path. A caller's sync holds it for the whole sync (up to the
    /// socket timeout), so start, stop and a concurrent sync wait for it.
    slot: Mutex<Slot>,
    /// The status as of the last call that held `slot`; `fairq_fleet_get_status` returns it
    /// when `slot` is busy, so reading the status never waits on a sync.
    last_status: Mutex<fairq_fleet_status>,
}

/// "fairq-fl" in ASCII.
const FLEET_MAGIC: u64 = 0x6661_6972_712d_666c;

// Every call but `fairq_fleet_free` may run concurrently from any thread: that rests on the
// handle being `Send + Sync`. This fails to compile if it stops being.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<fairq_fleet>();
};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic caught at the boundary while holding it left consistent data: a slot is replaced
    // whole, a status is plain data.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl fairq_fleet {
    /// The status of what `slot` holds, also saved for `fairq_fleet_get_status`.
    fn refresh_status(&self, slot: &Slot) -> fairq_fleet_status {
        let status = match slot {
            Slot::Idle(fleet) => fairq_fleet_status::new(&fleet.status(), false),
            Slot::Running(thread) => fairq_fleet_status::new(&thread.status(), true),
            Slot::Lost => fairq_fleet_status {
                running: false,
                ..*lock(&self.last_status)
            },
        };
        *lock(&self.last_status) = status;
        status
    }
}

/// Borrows the fleet behind a handle.
///
/// # Safety
/// A non-NULL `ptr` must point to a live fleet from `fairq_fleet_new` (or, for the best-effort
/// handle check, to readable memory at least as large as one).
unsafe fn fleet_ref<'a>(ptr: *const fairq_fleet) -> Result<&'a fairq_fleet, i32> {
    // A misaligned pointer cannot be a fleet: call it a bad handle, not a bad argument.
    let ptr = required(ptr).map_err(|e| match e {
        FAIRQ_ERR_NULL => FAIRQ_ERR_NULL,
        _ => FAIRQ_ERR_INVALID_HANDLE,
    })?;
    // SAFETY: non-NULL and aligned, and by the caller's contract readable for the size of a
    // fleet. A volatile read of the plain `u64` tag keeps the compiler from assuming it is
    // always `FLEET_MAGIC`.
    let magic = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*ptr).magic)) };
    if magic != FLEET_MAGIC {
        return Err(FAIRQ_ERR_INVALID_HANDLE);
    }
    // SAFETY: the tag matches, so this is a live fleet; the caller keeps it alive (no
    // concurrent `fairq_fleet_free`) for the call. `fairq_fleet` is `Sync` (checked above).
    Ok(unsafe { &*ptr })
}

/// A config string: NULL → `FAIRQ_ERR_NULL`, non-UTF-8 → `FAIRQ_ERR_INVALID_ARGUMENT`.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string readable for the call.
unsafe fn config_str(ptr: *const c_char, name: &str) -> Result<String, (i32, String)> {
    if ptr.is_null() {
        return Err((FAIRQ_ERR_NULL, format!("fleet config: {name} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract, not written during the call.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map(str::to_owned).map_err(|_| {
        (
            FAIRQ_ERR_INVALID_ARGUMENT,
            format!("fleet config: {name} is not UTF-8"),
        )
    })
}

/// The Rust config from the C one; ranges are checked by `Fleet::new`.
///
/// # Safety
/// The config's string pointers must be NULL or NUL-terminated strings.
unsafe fn to_fleet_config(c: &fairq_fleet_config) -> Result<FleetConfig, (i32, String)> {
    // SAFETY: NULL or NUL-terminated, by the caller's contract.
    let url = unsafe { config_str(c.url, "url") }?;
    // SAFETY: as above.
    let fleet = unsafe { config_str(c.fleet, "fleet") }?;
    // SAFETY: as above.
    let replica = unsafe { config_str(c.replica, "replica") }?;
    Ok(FleetConfig {
        url,
        fleet,
        replica,
        period_ms: c.period_ms,
        top_k: c.top_k as usize,
        epoch_ms: c.epoch_ms,
        smoothing: c.smoothing,
        stale_ms: c.stale_ms,
    })
}

const DEFAULT_URL: &CStr = c"redis://127.0.0.1:6379/";
const DEFAULT_FLEET: &CStr = c"default";
const DEFAULT_REPLICA: &CStr = c"replica";

fn default_config() -> fairq_fleet_config {
    let d = FleetConfig::default();
    fairq_fleet_config {
        url: DEFAULT_URL.as_ptr(),
        fleet: DEFAULT_FLEET.as_ptr(),
        replica: DEFAULT_REPLICA.as_ptr(),
        period_ms: d.period_ms,
        epoch_ms: d.epoch_ms,
        stale_ms: d.stale_ms,
        smoothing: d.smoothing,
        top_k: d.top_k as u32,
    }
}

/// Fills `*config` with the defaults of `FleetConfig` (period 100 ms, K 256, epoch 5 min, EWMA
/// 0.5, stale 1 s; url `"redis://127.0.0.1:6379/"`, fleet `"default"`, replica `"replica"`, as
/// static strings: never free them). NULL is a no-op. Feature `fleet`; declared when
/// `FAIRQ_FLEET` is defined.
///
/// # Safety
/// A non-NULL `config` must be valid for a write of a `fairq_fleet_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_config_default(config: *mut fairq_fleet_config) {
    ffi_value!((), {
        if let Ok(Some(out)) = optional_out(config) {
            // SAFETY: checked non-NULL and aligned; writable by the caller's contract.
            unsafe { write_out(out, default_config()) };
        }
    })
}

/// Makes a fleet member for `engine` from `*config` and writes it to `*fleet_out`. It connects
/// lazily, at the first sync, and holds the engine alive until `fairq_fleet_free` (even past
/// `fairq_engine_free`). Nothing runs until `fairq_fleet_sync` or `fairq_fleet_start`.
/// `FAIRQ_ERR_INVALID_CONFIG` for a field out of range or a URL Redis cannot parse,
/// `FAIRQ_ERR_NULL` for a NULL string, `FAIRQ_ERR_INVALID_ARGUMENT` for a non-UTF-8 one; on
/// these a message naming the field is copied into `err` (truncated, NUL-terminated; `err` may
/// be NULL or `err_len` 0). Feature `fleet`; declared when `FAIRQ_FLEET` is defined.
///
/// # Safety
/// `engine` must be NULL or a live engine; `config` must point to an initialised
/// `fairq_fleet_config` whose strings are NULL or NUL-terminated; `fleet_out` must be writable;
/// a non-NULL `err` must be valid for writes of `err_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_new(
    engine: *const fairq_engine,
    config: *const fairq_fleet_config,
    fleet_out: *mut *mut fairq_fleet,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live engine, by contract.
        let engine = unsafe { engine_shared(engine) }?;
        let config = required(config)?;
        let out = required_out(fleet_out)?;
        // SAFETY: non-NULL and aligned (checked), initialised by contract; the struct is Copy.
        let config = unsafe { config.read() };
        let fail = |(status, message): (i32, String)| {
            // SAFETY: `err` is NULL (ignored) or valid for `err_len` bytes by contract.
            unsafe { copy_message(&message, err, err_len) };
            status
        };
        // SAFETY: the strings are NULL or NUL-terminated by contract.
        let config = unsafe { to_fleet_config(&config) }.map_err(fail)?;
        let fleet = Fleet::new(engine, config).map_err(|e| {
            let message = match &e {
                FleetError::Redis(e) => format!("invalid fleet config: url: {e}"),
                other => other.to_string(),
            };
            fail((FAIRQ_ERR_INVALID_CONFIG, message))
        })?;
        let status = fairq_fleet_status::new(&fleet.status(), false);
        let handle = Box::into_raw(Box::new(fairq_fleet {
            magic: FLEET_MAGIC,
            slot: Mutex::new(Slot::Idle(Box::new(fleet))),
            last_status: Mutex::new(status),
        }));
        // SAFETY: checked non-NULL and aligned, writable by the caller's contract.
        unsafe { write_out(out, handle) };
        Ok(FAIRQ_OK)
    })
}

/// Releases a fleet: stops its sync thread if one runs (waiting for a sync in progress, at most
/// the socket timeout), closes its connection and drops its reference to the engine. NULL is a
/// no-op. Must be the last call on this fleet. Feature `fleet`; declared when `FAIRQ_FLEET` is
/// defined.
///
/// # Safety
/// A non-NULL `fleet` must come from `fairq_fleet_new` and not have been freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_free(fleet: *mut fairq_fleet) {
    ffi_value!((), {
        // SAFETY: non-NULL pointers are live fleets by the caller's contract; the tag check only
        // refuses obviously foreign memory.
        if unsafe { fleet_ref(fleet) }.is_err() {
            return;
        }
        // SAFETY: allocated by `Box::into_raw` in `fairq_fleet_new`, not freed before, and not
        // used by any other thread from now on (the caller's contract). Clearing the tag first
        // makes a later use of this dangling pointer more likely to be caught.
        let handle = unsafe {
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*fleet).magic), 0);
            Box::from_raw(fleet)
        };
        let slot = handle.slot.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Slot::Running(thread) = slot {
            drop(thread.stop());
        }
    })
}

/// `fairq_fleet_sync_at` at `fairq_now_ns()`.
///
/// # Safety
/// As `fairq_fleet_sync_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_sync(fleet: *const fairq_fleet) -> i32 {
    ffi_status!({
        let now = crate::clock::now_ns();
        // SAFETY: same contract.
        Ok(unsafe { fairq_fleet_sync_at(fleet, now) })
    })
}

/// One sync at `now_ns` (monotonic, the `fairq_now_ns` clock the library thread uses): one
/// round trip to Redis, blocking up to the socket timeout (P/2) at worst, so call it every period
/// from a thread where that is fine (evenly spaced or not: rates are measured over time).
/// `FAIRQ_OK`, or `FAIRQ_ERR_FLEET_SYNC` when Redis failed: the failure is recorded in the
/// status and the unsent deltas are kept (a batch that may have reached Redis is resent
/// unchanged, and Redis applies it once). `FAIRQ_ERR_BUSY` while
/// the library thread runs (nothing is done). Concurrent syncs on one fleet run one after the
/// other. Feature `fleet`; declared when `FAIRQ_FLEET` is defined.
///
/// # Safety
/// `fleet` must be NULL or a live fleet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_sync_at(fleet: *const fairq_fleet, now_ns: u64) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live fleet, by contract.
        let handle = unsafe { fleet_ref(fleet) }?;
        let mut slot = lock(&handle.slot);
        let result = match &mut *slot {
            Slot::Idle(fleet) => fleet.sync(now_ns),
            Slot::Running(_) => return Err(FAIRQ_ERR_BUSY),
            Slot::Lost => return Err(FAIRQ_ERR_THREAD),
        };
        handle.refresh_status(&slot);
        result.map_err(|_| FAIRQ_ERR_FLEET_SYNC)?;
        Ok(FAIRQ_OK)
    })
}

/// Starts the library-owned sync thread: it syncs every period (±10% jitter) until
/// `fairq_fleet_stop` or `fairq_fleet_free`. Start it after `fork()` (NGINX: in
/// `init_process`), and do not fork while it runs: the child would not have the thread.
/// `FAIRQ_ERR_BUSY` when it already runs, `FAIRQ_ERR_THREAD` when the OS cannot start a
/// thread (the fleet is then lost: free it). Feature `fleet`; declared when `FAIRQ_FLEET` is
/// defined.
///
/// # Safety
/// `fleet` must be NULL or a live fleet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_start(fleet: *const fairq_fleet) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live fleet, by contract.
        let handle = unsafe { fleet_ref(fleet) }?;
        let mut slot = lock(&handle.slot);
        match std::mem::replace(&mut *slot, Slot::Lost) {
            Slot::Idle(fleet) => {
                // On a spawn error the closure, and the fleet in it, is dropped: `Lost` stays.
                if let Ok(thread) = fleet.start() {
                    *slot = Slot::Running(thread);
                }
            }
            running @ Slot::Running(_) => {
                *slot = running;
                return Err(FAIRQ_ERR_BUSY);
            }
            Slot::Lost => return Err(FAIRQ_ERR_THREAD),
        }
        handle.refresh_status(&slot);
        match *slot {
            Slot::Running(_) => Ok(FAIRQ_OK),
            _ => Err(FAIRQ_ERR_THREAD),
        }
    })
}

/// Stops the library sync thread and waits for it (a sync in progress finishes first, at most
/// the socket timeout); the fleet can then be synced by the caller or started again.
/// `FAIRQ_OK`, or `FAIRQ_NOT_RUNNING` when no thread ran (stopping twice is harmless). Feature
/// `fleet`; declared when `FAIRQ_FLEET` is defined.
///
/// # Safety
/// `fleet` must be NULL or a live fleet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_stop(fleet: *const fairq_fleet) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live fleet, by contract.
        let handle = unsafe { fleet_ref(fleet) }?;
        let mut slot = lock(&handle.slot);
        if !matches!(*slot, Slot::Running(_)) {
            return Ok(FAIRQ_NOT_RUNNING);
        }
        // `Lost` only while joining: if the thread panicked, `stop` re-raises it (caught by the
        // boundary) and the fleet stays lost.
        if let Slot::Running(thread) = std::mem::replace(&mut *slot, Slot::Lost) {
            *slot = Slot::Idle(Box::new(thread.stop()));
        }
        handle.refresh_status(&slot);
        Ok(FAIRQ_OK)
    })
}

/// Writes where the sync loop stands to `*status`: last successful sync, consecutive failures,
/// degraded, tenants tracked, pipelines, syncs, and whether the library thread runs. Never
/// waits for a sync: while another call holds the fleet (a caller's sync, a start or a stop) it
/// writes the status as of the call before. (Named `_get_` because in C the struct
/// `fairq_fleet_status` takes that name.) Feature `fleet`; declared when `FAIRQ_FLEET` is
/// defined.
///
/// # Safety
/// `fleet` must be NULL or a live fleet; `status` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fairq_fleet_get_status(
    fleet: *const fairq_fleet,
    status: *mut fairq_fleet_status,
) -> i32 {
    ffi_status!({
        // SAFETY: NULL or a live fleet, by contract.
        let handle = unsafe { fleet_ref(fleet) }?;
        let out = required_out(status)?;
        let value = match handle.slot.try_lock() {
            Ok(slot) => handle.refresh_status(&slot),
            Err(std::sync::TryLockError::Poisoned(e)) => handle.refresh_status(&e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => *lock(&handle.last_status),
        };
        // SAFETY: checked non-NULL and aligned, writable by the caller's contract.
        unsafe { write_out(out, value) };
        Ok(FAIRQ_OK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_rust_defaults() {
        let c = default_config();
        let d = FleetConfig::default();
        // SAFETY: the defaults are static NUL-terminated strings.
        let rust = unsafe { to_fleet_config(&c) }.unwrap();
        assert_eq!(rust.url, d.url);
        assert_eq!(rust.fleet, d.fleet);
        assert_eq!(rust.replica, d.replica);
        assert_eq!(
            (rust.period_ms, rust.top_k, rust.epoch_ms, rust.stale_ms),
            (d.period_ms, d.top_k, d.epoch_ms, d.stale_ms)
        );
        assert_eq!(rust.smoothing, d.smoothing);
    }
}
