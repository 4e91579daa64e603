//! Sequences of calls through the C ABI (`fairq::ffi`), made the way foreign code makes them:
//! an engine from an arbitrary `fairq_config`, then enqueue, next_grant, complete (every outcome
//! code, with and without a cost), cancel, expire, weights, stats, metrics, indicators and tick
//! with arbitrary arguments, NULL and misaligned pointers, and handles that are not engines. The
//! clock is the input's: the `_at` variants get a time that jumps, goes backwards and reaches
//! `u64::MAX`.
//!
//! A ledger of every ticket checks after each call:
//! - the status is one the function documents, and a known one (`fairq_status_str`); never
//!   `FAIRQ_ERR_PANIC`;
//! - an error changed nothing and wrote no out-parameter (the buffers keep their fill byte);
//! - a ticket goes queued -> granted -> ended, or granted -> queued on a requeue, and ends
//!   exactly once; a grant is for a queued ticket whose Retry-After has passed, with the
//!   enqueued tenant, user data and cost;
//! - in-flight never exceeds `max_in_flight` (with seats on, the permits the grants hold: each
//!   its cost, 1..=`max_in_flight`), queued never exceeds `queue_capacity`, no tenant
//!   holds more than `tenant_queue_capacity` queued, and a refusal for a full queue comes only
//!   when live requests fill it;
//! - `fairq_get_stats` agrees with the ledger counter by counter, its conservation law holds,
//!   and each request is counted once (grants + refusals + queued = requests, plus what a
//!   requeue or a cancel of a granted ticket adds).
//!
//! At the end the engine is drained at a time past every Retry-After: every request must end
//! (granted and completed, or expired), then the engine is freed (ASan's leak check runs on it).
//! A cancelled or expired request holds nothing back, and a request queued in the clock's last
//! second ends too.
//!
//! Only the public C ABI is used, so the target survives changes inside the engine.

#![no_main]

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result as AResult, Unstructured};
use fairq::ffi::*;
use libfuzzer_sys::fuzz_target;

// ------------------------------------------------------------------------------ input

/// A `u32` argument: mostly small (where the ranges' edges are), sometimes anything.
#[derive(Debug, Clone, Copy)]
enum Num32 {
    Small(u8),
    Any(u32),
    Max,
}

impl<'a> Arbitrary<'a> for Num32 {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=199 => Num32::Small(u.arbitrary()?),
            200..=247 => Num32::Any(u.arbitrary()?),
            _ => Num32::Max,
        })
    }
}

impl Num32 {
    fn get(self) -> u32 {
        match self {
            Num32::Small(v) => u32::from(v),
            Num32::Any(v) => v,
            Num32::Max => u32::MAX,
        }
    }
}

/// A duration or time in ns, at every scale up to `u64::MAX`; mostly the scales a gateway uses.
#[derive(Debug, Clone, Copy)]
enum Nanos {
    Zero,
    Ns(u16),
    Ms(u16),
    S(u16),
    Any(u64),
    NearMax(u16),
}

impl<'a> Arbitrary<'a> for Nanos {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=59 => Nanos::Zero,
            60..=99 => Nanos::Ns(u.arbitrary()?),
            100..=179 => Nanos::Ms(u.arbitrary()?),
            180..=219 => Nanos::S(u.arbitrary()?),
            220..=239 => Nanos::Any(u.arbitrary()?),
            _ => Nanos::NearMax(u.arbitrary()?),
        })
    }
}

impl Nanos {
    fn get(self) -> u64 {
        match self {
            Nanos::Zero => 0,
            Nanos::Ns(v) => u64::from(v),
            Nanos::Ms(v) => u64::from(v) * 1_000_000,
            Nanos::S(v) => u64::from(v) * 1_000_000_000,
            Nanos::Any(v) => v,
            Nanos::NearMax(v) => u64::MAX - u64::from(v),
        }
    }
}

/// A config field in ms: small, or anything.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Millis {
    Small(u16),
    Any(u64),
}

impl Millis {
    fn get(self) -> u64 {
        match self {
            Millis::Small(v) => u64::from(v),
            Millis::Any(v) => v,
        }
    }
}

/// How a pointer argument is passed. Mostly valid, so that calls get past their checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ptr {
    Valid,
    Null,
    Misaligned,
}

impl<'a> Arbitrary<'a> for Ptr {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=229 => Ptr::Valid,
            230..=242 => Ptr::Null,
            _ => Ptr::Misaligned,
        })
    }
}

/// A handle that is not a live engine.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum BadHandle {
    Null,
    /// One byte past the live handle's start: misaligned, and its last byte is out of bounds.
    Misaligned,
    /// Aligned, readable memory holding something else.
    Junk,
}

/// A tenant key: mostly one of a few known tenants (so queues fill), sometimes none (0) or any.
#[derive(Debug, Clone, Copy)]
enum Tenant {
    Known(u8),
    Zero,
    Any(u64),
}

impl<'a> Arbitrary<'a> for Tenant {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=209 => Tenant::Known(u.arbitrary()?),
            210..=229 => Tenant::Zero,
            _ => Tenant::Any(u.arbitrary()?),
        })
    }
}

/// A request's dimension code: mostly a queueable one, sometimes one refused at once or any.
#[derive(Debug, Clone, Copy)]
struct Dim(u32);

impl<'a> Arbitrary<'a> for Dim {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        let pick = u8::arbitrary(u)?;
        Ok(Dim(match pick {
            0..=219 => u32::from(pick % 4),
            220..=243 => 4 + u32::from(pick % 4),
            _ => u.arbitrary()?,
        }))
    }
}

const TENANTS: usize = 6;

fn tenant_name(i: usize) -> String {
    format!("tenant-{i}")
}

/// The keys of the known tenants, through `fairq_tenant_key`.
fn known_keys() -> &'static [u64; TENANTS] {
    static KEYS: OnceLock<[u64; TENANTS]> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = [0; TENANTS];
        for (i, key) in keys.iter_mut().enumerate() {
            let name = tenant_name(i);
            // SAFETY: `name` is readable for its length; `key` is writable.
            let rc = unsafe { fairq_tenant_key(name.as_ptr().cast(), name.len(), key) };
            assert_eq!(rc, FAIRQ_OK);
        }
        keys
    })
}

impl Tenant {
    fn key(self) -> u64 {
        match self {
            Tenant::Known(i) => known_keys()[usize::from(i) % TENANTS],
            Tenant::Zero => 0,
            Tenant::Any(k) => k,
        }
    }
}

/// Which ticket a call names: mostly a live one.
#[derive(Debug, Clone, Copy)]
enum TicketRef {
    /// The i-th live ticket (by ticket number).
    Live(u8),
    /// The i-th ticket ever issued, newest first (often ended: stale).
    Issued(u8),
    Forged(u64),
}

impl<'a> Arbitrary<'a> for TicketRef {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=191 => TicketRef::Live(u.arbitrary()?),
            192..=239 => TicketRef::Issued(u.arbitrary()?),
            _ => TicketRef::Forged(u.arbitrary()?),
        })
    }
}

/// The engine's config: each field the default, a small value or anything.
#[derive(Arbitrary, Debug, Clone)]
struct ConfigSpec {
    disabled: bool,
    tenant_dimension: Option<Num32>,
    max_tenants: Option<Num32>,
    tenant_queue_capacity: Option<Num32>,
    queue_capacity: Option<Num32>,
    max_in_flight: Option<Num32>,
    default_weight: Option<Num32>,
    max_weight_classes: Option<Num32>,
    max_wait_ms: Option<Millis>,
    tenant_idle_ms: Option<Millis>,
    /// Seats on (`fairq_engine_builder_set_seats`): `max_in_flight` counts cost units.
    seats: bool,
    /// The light-tenant lane off (`fairq_engine_builder_set_light_lane`; on by default).
    lane_off: bool,
}

impl ConfigSpec {
    fn build(&self) -> fairq_config {
        let mut c = std::mem::MaybeUninit::<fairq_config>::uninit();
        // SAFETY: `c` is writable storage for one config.
        let mut c = unsafe {
            fairq_config_default(c.as_mut_ptr());
            c.assume_init()
        };
        c.enabled = !self.disabled;
        let set32 = |field: &mut u32, v: Option<Num32>| {
            if let Some(v) = v {
                *field = v.get();
            }
        };
        set32(&mut c.tenant_dimension, self.tenant_dimension);
        set32(&mut c.max_tenants, self.max_tenants);
        set32(&mut c.tenant_queue_capacity, self.tenant_queue_capacity);
        set32(&mut c.queue_capacity, self.queue_capacity);
        set32(&mut c.max_in_flight, self.max_in_flight);
        set32(&mut c.default_weight, self.default_weight);
        set32(&mut c.max_weight_classes, self.max_weight_classes);
        if let Some(v) = self.max_wait_ms {
            c.max_wait_ms = v.get();
        }
        if let Some(v) = self.tenant_idle_ms {
            c.tenant_idle_ms = v.get();
        }
        c
    }
}

/// A raw identifier for `fairq_set_weight` / `fairq_tenant_key`.
#[derive(Arbitrary, Debug, Clone)]
enum Raw {
    /// A known tenant's name (so the weight lands on a tenant that queues).
    Name(u8),
    Bytes(Vec<u8>),
    Empty,
    /// NULL with a length: `FAIRQ_ERR_NULL`.
    NullWithLen(u8),
}

/// The buffer handed to `fairq_metrics_prometheus`.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum MetricsBuf {
    /// NULL, 0: the sizing call.
    Sizing,
    /// NULL with a length: `FAIRQ_ERR_NULL`.
    NullWithLen(u16),
    /// A buffer of this many bytes.
    Len(u16),
    /// Sized by a first call, plus some slack.
    Sized(u8),
}

/// One call (or a clock move). The ticket life cycle is drawn most often (see `Arbitrary`).
#[derive(Debug, Clone)]
enum Op {
    Forward(Nanos),
    Back(Nanos),
    SetTime(Nanos),
    Enqueue {
        tenant: Tenant,
        dimension: Dim,
        cost: Num32,
        retry_after: Nanos,
        timeout: Nanos,
        request: Ptr,
        result: Ptr,
    },
    NextGrant {
        grant: Ptr,
    },
    /// Takes grants until EMPTY or AT_CAPACITY, completing each with `outcome`.
    Pump {
        outcome: Num32,
        retry_after: Nanos,
    },
    Complete {
        ticket: TicketRef,
        outcome: Num32,
        retry_after: Nanos,
        actual_cost: Option<Num32>,
        completion: Ptr,
    },
    Cancel {
        ticket: TicketRef,
    },
    Expire {
        ticket: TicketRef,
        refusal: Ptr,
    },
    SetWeight {
        raw: Raw,
        weight: Num32,
    },
    SetWeightKey {
        tenant: Tenant,
        weight: Num32,
    },
    ReplaceWeights {
        entries: Vec<(Tenant, Num32)>,
        default_weight: Num32,
        null_entries: bool,
    },
    WeightOf {
        tenant: Tenant,
        out: Ptr,
    },
    TenantGranted {
        tenant: Tenant,
        grants: Ptr,
        cost: Ptr,
    },
    Indicators {
        tenant: Tenant,
        out: Ptr,
    },
    Wakeup {
        out: Ptr,
    },
    SetEnabled(bool),
    IsEnabled {
        out: Ptr,
    },
    Tick {
        report: Ptr,
    },
    Stats {
        out: Ptr,
    },
    Metrics {
        buf: MetricsBuf,
        needed: Ptr,
    },
    TenantKey {
        raw: Raw,
        out: Ptr,
    },
    Resolve {
        user: Option<Vec<u8>>,
        team: Option<Vec<u8>>,
        api_key: Option<Vec<u8>>,
        placeholder: bool,
        identity: Ptr,
        key_out: Ptr,
        dimension_out: Ptr,
    },
    WithBadHandle {
        handle: BadHandle,
        call: u8,
    },
    ConfigCheck {
        config: ConfigSpec,
        config_ptr: Ptr,
        buf_len: u8,
    },
    /// Drains and frees the engine, then makes a new one from `config`.
    Renew {
        config: ConfigSpec,
    },
}

impl<'a> Arbitrary<'a> for Op {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=29 => Op::Enqueue {
                tenant: u.arbitrary()?,
                dimension: u.arbitrary()?,
                cost: u.arbitrary()?,
                retry_after: u.arbitrary()?,
                timeout: u.arbitrary()?,
                request: u.arbitrary()?,
                result: u.arbitrary()?,
            },
            30..=59 => Op::NextGrant {
                grant: u.arbitrary()?,
            },
            60..=84 => Op::Complete {
                ticket: u.arbitrary()?,
                outcome: u.arbitrary()?,
                retry_after: u.arbitrary()?,
                actual_cost: u.arbitrary()?,
                completion: u.arbitrary()?,
            },
            85..=99 => Op::Cancel {
                ticket: u.arbitrary()?,
            },
            100..=114 => Op::Expire {
                ticket: u.arbitrary()?,
                refusal: u.arbitrary()?,
            },
            115..=124 => Op::Pump {
                outcome: u.arbitrary()?,
                retry_after: u.arbitrary()?,
            },
            125..=144 => Op::Forward(u.arbitrary()?),
            145..=149 => Op::Back(u.arbitrary()?),
            150..=152 => Op::SetTime(u.arbitrary()?),
            153..=160 => Op::SetWeight {
                raw: u.arbitrary()?,
                weight: u.arbitrary()?,
            },
            161..=166 => Op::SetWeightKey {
                tenant: u.arbitrary()?,
                weight: u.arbitrary()?,
            },
            167..=170 => Op::ReplaceWeights {
                entries: u.arbitrary()?,
                default_weight: u.arbitrary()?,
                null_entries: u.arbitrary()?,
            },
            171..=174 => Op::WeightOf {
                tenant: u.arbitrary()?,
                out: u.arbitrary()?,
            },
            175..=178 => Op::TenantGranted {
                tenant: u.arbitrary()?,
                grants: u.arbitrary()?,
                cost: u.arbitrary()?,
            },
            179..=182 => Op::Indicators {
                tenant: u.arbitrary()?,
                out: u.arbitrary()?,
            },
            183..=186 => Op::Wakeup {
                out: u.arbitrary()?,
            },
            187..=189 => Op::SetEnabled(u.arbitrary()?),
            190..=192 => Op::IsEnabled {
                out: u.arbitrary()?,
            },
            193..=197 => Op::Tick {
                report: u.arbitrary()?,
            },
            198..=202 => Op::Stats {
                out: u.arbitrary()?,
            },
            203..=210 => Op::Metrics {
                buf: u.arbitrary()?,
                needed: u.arbitrary()?,
            },
            211..=215 => Op::TenantKey {
                raw: u.arbitrary()?,
                out: u.arbitrary()?,
            },
            216..=221 => Op::Resolve {
                user: u.arbitrary()?,
                team: u.arbitrary()?,
                api_key: u.arbitrary()?,
                placeholder: u.arbitrary()?,
                identity: u.arbitrary()?,
                key_out: u.arbitrary()?,
                dimension_out: u.arbitrary()?,
            },
            222..=235 => Op::WithBadHandle {
                handle: u.arbitrary()?,
                call: u.arbitrary()?,
            },
            236..=245 => Op::ConfigCheck {
                config: u.arbitrary()?,
                config_ptr: u.arbitrary()?,
                buf_len: u.arbitrary()?,
            },
            _ => Op::Renew {
                config: u.arbitrary()?,
            },
        })
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    config: ConfigSpec,
    ops: Vec<Op>,
}

// ------------------------------------------------------------------------------ memory

const FILL: u8 = 0xA5;

/// Aligned scratch memory for in- and out-parameters, filled with `FILL`.
#[repr(C, align(64))]
struct Scratch([u8; 1024]);

impl Scratch {
    fn new() -> Box<Scratch> {
        Box::new(Scratch([FILL; 1024]))
    }

    fn reset(&mut self) {
        self.0.fill(FILL);
    }

    fn untouched(&self) -> bool {
        self.0.iter().all(|&b| b == FILL)
    }

    /// A pointer for an out-parameter of type `T`, as `p` says.
    fn out<T>(&mut self, p: Ptr) -> *mut T {
        let base = self.0.as_mut_ptr();
        match p {
            Ptr::Valid => base.cast(),
            Ptr::Null => null_mut(),
            Ptr::Misaligned => base.wrapping_add(1).cast(),
        }
    }

    /// Stores `value` and returns a pointer to it for an in-parameter, as `p` says (misaligned:
    /// the bytes are there, one byte off, so a missing alignment check reads the right value).
    fn put<T: Copy>(&mut self, p: Ptr, value: T) -> *const T {
        assert!(std::mem::size_of::<T>() < self.0.len());
        let base = self.0.as_mut_ptr();
        let at = match p {
            Ptr::Valid => base,
            Ptr::Null => return null(),
            Ptr::Misaligned => base.wrapping_add(1),
        };
        // SAFETY: `at` is inside the buffer with room for a `T` (checked above); unaligned
        // writes are allowed.
        unsafe { at.cast::<T>().write_unaligned(value) };
        at.cast()
    }

    /// Reads back a `T` the call wrote at the aligned start.
    fn get<T: Copy>(&self) -> T {
        // SAFETY: the buffer is 64-aligned and larger than `T`; the caller reads only what a
        // successful call wrote there (a valid `T`).
        unsafe { self.0.as_ptr().cast::<T>().read() }
    }
}

/// Aligned, readable memory that is not an engine: an `u64` pattern no engine tag matches
/// (the tag is `"fairq-en"` in ASCII; this is not ASCII).
#[repr(C, align(64))]
struct Junk([u64; 64]);

fn junk() -> Box<Junk> {
    Box::new(Junk([0xDEAD_BEEF_F00D_CAFE; 64]))
}

// ------------------------------------------------------------------------------ ledger

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Queued,
    Granted,
    Ended,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    st: St,
    tenant: u64,
    user_data: u64,
    cost: u32,
    /// Not grantable before this: the time of its last (re)enqueue plus its Retry-After. The
    /// engine's clock never goes back, so after the input's time went back it counts from
    /// later: this is the least the engine's own value can be...
    not_before: u64,
    /// ... and this the most (from the largest time handed to the engine).
    ready_by: u64,
}

#[derive(Default, Debug, Clone, PartialEq, Eq)]
struct Counts {
    enqueued: u64,
    granted: u64,
    completed: u64,
    requeued: u64,
    cancelled: u64,
    expired: u64,
    refused_after_wait: u64,
    refused: [u64; FAIRQ_REASON_SLOTS],
}

const ENQUEUE_REFUSALS: [u32; 7] = [
    FAIRQ_REASON_QUEUE_FULL,
    FAIRQ_REASON_TENANT_QUEUE_FULL,
    FAIRQ_REASON_TENANT_TABLE_FULL,
    FAIRQ_REASON_WAIT_EXCEEDS_BUDGET,
    FAIRQ_REASON_NOT_QUEUEABLE,
    FAIRQ_REASON_NO_TENANT,
    FAIRQ_REASON_DISABLED,
];

const REQUEUE_REFUSALS: [u32; 3] = [
    FAIRQ_REASON_WAIT_EXCEEDS_BUDGET,
    FAIRQ_REASON_TENANT_QUEUE_FULL,
    FAIRQ_REASON_QUEUE_FULL,
];

/// The engine's timing-wheel tick (2^20 ns, about 1 ms).
const TICK_NS: u64 = 1 << 20;

/// How long the drain may take once the clock is past every live Retry-After: a parked tenant
/// re-checks its head at least every 8 ticks (a cancelled or expired head no longer holds it),
/// and a wakeup may round up to the next tick.
const DRAIN_NS: u64 = 10 * TICK_NS;

/// The latest Retry-After end the engine keeps (the header's `UINT64_MAX - 2^21`): a request
/// due later is ready from then on.
const LATEST_NOT_BEFORE: u64 = u64::MAX - (1 << 21);

/// When a request queued at `now` with `retry_after` may be granted, at the latest.
fn not_before(now: u64, retry_after: u64) -> u64 {
    now.saturating_add(retry_after).min(LATEST_NOT_BEFORE)
}

/// One engine and what the ledger knows about it.
struct World {
    engine: *mut fairq_engine,
    config: fairq_config,
    /// `max_in_flight` counts cost units (each grant takes its cost, 1..=max_in_flight).
    seats: bool,
    enabled: bool,
    tickets: HashMap<u64, Entry>,
    /// Every ticket issued, in issue order.
    issued: Vec<u64>,
    counts: Counts,
    /// Grants per tenant over the engine's life.
    tenant_grants: HashMap<u64, u64>,
    now: u64,
    /// The largest time handed to the engine: its own clock never runs ahead of it.
    max_now: u64,
    /// Enqueue calls that queued or refused a request.
    requests: u64,
    /// Cancels of granted tickets.
    cancelled_granted: u64,
    next_user_data: u64,
    a: Box<Scratch>,
    b: Box<Scratch>,
    c: Box<Scratch>,
    junk: Box<Junk>,
}

/// The name of a status; panics on one `fairq_status_str` does not know.
fn status_name(rc: i32) -> &'static str {
    let name = fairq_status_str(rc);
    assert!(!name.is_null());
    // SAFETY: a static NUL-terminated string, by the function's contract.
    let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap();
    assert_ne!(name, "FAIRQ_UNKNOWN_STATUS", "unknown status {rc}");
    name
}

fn reason_name(reason: u32) -> &'static str {
    // SAFETY: a static NUL-terminated string, by the function's contract.
    let name = unsafe { CStr::from_ptr(fairq_reason_str(reason)) }
        .to_str()
        .unwrap();
    assert!(
        name != "unknown" && name != "none",
        "a refusal with reason {reason} ({name})"
    );
    name
}

/// Checks a status against the ones a call may return.
fn expect(what: &str, rc: i32, allowed: &[i32]) {
    let name = status_name(rc);
    assert_ne!(
        rc, FAIRQ_ERR_PANIC,
        "{what}: a panic was caught at the boundary"
    );
    assert!(
        allowed.contains(&rc),
        "{what}: status {name} ({rc}) not among {allowed:?}"
    );
}

/// The error a bad pointer gives: NULL for NULL, INVALID_ARGUMENT for misaligned.
fn pointer_error(p: Ptr) -> Option<i32> {
    match p {
        Ptr::Valid => None,
        Ptr::Null => Some(FAIRQ_ERR_NULL),
        Ptr::Misaligned => Some(FAIRQ_ERR_INVALID_ARGUMENT),
    }
}

/// The statuses allowed when some arguments are bad: each bad one's error (which of them wins
/// is not specified), else `otherwise`.
fn errors_or(bad: &[Option<i32>], otherwise: &[i32]) -> Vec<i32> {
    let errors: Vec<i32> = bad.iter().flatten().copied().collect();
    if errors.is_empty() {
        otherwise.to_vec()
    } else {
        errors
    }
}

/// Shrinks a valid config whose tables would take many MB, so that an input runs in
/// microseconds (the range checks themselves were already made on the full one).
fn small(mut c: fairq_config) -> fairq_config {
    c.max_tenants = c.max_tenants.min(256);
    c.tenant_queue_capacity = c.tenant_queue_capacity.min(64);
    c.queue_capacity = c.queue_capacity.min(512);
    c.max_in_flight = c.max_in_flight.min(64);
    c
}

/// Checks a config and makes an engine from it through every pointer path; returns a live
/// engine (from a default config when this one is invalid).
fn make_engine(
    spec: &ConfigSpec,
    scratch: &mut Scratch,
) -> (*mut fairq_engine, fairq_config, bool) {
    let config = spec.build();
    let mut msg = [0x55 as c_char; 256];
    // SAFETY: `config` is initialised; `msg` is writable for its length.
    let check = unsafe { fairq_config_check(&config, msg.as_mut_ptr(), msg.len()) };
    expect("config_check", check, &[FAIRQ_OK, FAIRQ_ERR_INVALID_CONFIG]);
    if check == FAIRQ_ERR_INVALID_CONFIG {
        // SAFETY: the message is NUL-terminated inside the buffer.
        let text = unsafe { CStr::from_ptr(msg.as_ptr()) }.to_str().unwrap();
        assert!(text.starts_with("invalid config `"), "{text}");
    }
    let config = if check == FAIRQ_OK {
        small(config)
    } else {
        config
    };
    // The error paths of engine_new: NULL config, NULL and misaligned out-pointers.
    // SAFETY: NULL and a misaligned pointer are both part of the contract (checked first).
    unsafe {
        expect(
            "engine_new(NULL config)",
            fairq_engine_new(null(), scratch.out(Ptr::Valid)),
            &[FAIRQ_ERR_NULL],
        );
        scratch.reset();
        expect(
            "engine_new(NULL out)",
            fairq_engine_new(&config, null_mut()),
            &[FAIRQ_ERR_NULL],
        );
        expect(
            "engine_new(misaligned out)",
            fairq_engine_new(&config, scratch.out(Ptr::Misaligned)),
            &[FAIRQ_ERR_INVALID_ARGUMENT, FAIRQ_ERR_INVALID_CONFIG],
        );
        assert!(
            scratch.untouched(),
            "engine_new wrote through a bad pointer"
        );
    }
    let mut engine: *mut fairq_engine = null_mut();
    // SAFETY: `config` is initialised, `engine` writable.
    let rc = unsafe { fairq_engine_new(&config, &mut engine) };
    assert_eq!(
        rc,
        check,
        "engine_new {} but config_check {}",
        status_name(rc),
        status_name(check)
    );
    if rc == FAIRQ_OK {
        assert!(!engine.is_null());
        if spec.seats || spec.lane_off {
            // The same config through the builder, with seats on or the lane off.
            // SAFETY: `engine` is live and ours; the builder calls get valid pointers.
            unsafe {
                fairq_engine_free(engine);
                let mut builder = null_mut();
                assert_eq!(
                    fairq_engine_builder_new(&config, &mut builder, null_mut(), 0),
                    FAIRQ_OK
                );
                assert_eq!(
                    fairq_engine_builder_set_seats(builder, spec.seats),
                    FAIRQ_OK
                );
                assert_eq!(
                    fairq_engine_builder_set_light_lane(builder, !spec.lane_off),
                    FAIRQ_OK
                );
                engine = null_mut();
                assert_eq!(fairq_engine_builder_build(builder, &mut engine), FAIRQ_OK);
                fairq_engine_builder_free(builder);
            }
        }
        return (engine, config, spec.seats);
    }
    assert!(
        engine.is_null(),
        "engine_new wrote its out-pointer on an error"
    );
    let fallback = ConfigSpec {
        disabled: false,
        tenant_dimension: None,
        max_tenants: Some(Num32::Small(4)),
        tenant_queue_capacity: Some(Num32::Small(3)),
        queue_capacity: Some(Num32::Small(8)),
        max_in_flight: Some(Num32::Small(2)),
        default_weight: None,
        max_weight_classes: Some(Num32::Small(3)),
        max_wait_ms: None,
        tenant_idle_ms: None,
        seats: false,
        lane_off: false,
    };
    let config = fallback.build();
    // SAFETY: as above.
    let rc = unsafe { fairq_engine_new(&config, &mut engine) };
    assert_eq!(rc, FAIRQ_OK);
    (engine, config, false)
}

impl World {
    fn new(spec: &ConfigSpec) -> World {
        let mut a = Scratch::new();
        let (engine, config, seats) = make_engine(spec, &mut a);
        World {
            engine,
            config,
            seats,
            enabled: config.enabled,
            tickets: HashMap::new(),
            issued: Vec::new(),
            counts: Counts::default(),
            tenant_grants: HashMap::new(),
            now: 1_000_000_000,
            max_now: 0,
            requests: 0,
            cancelled_granted: 0,
            next_user_data: 1,
            a,
            b: Scratch::new(),
            c: Scratch::new(),
            junk: junk(),
        }
    }

    fn reset_scratch(&mut self) {
        self.a.reset();
        self.b.reset();
        self.c.reset();
    }

    fn scratch_untouched(&self) -> bool {
        self.a.untouched() && self.b.untouched() && self.c.untouched()
    }

    /// The time for the next `_at` call.
    fn at(&mut self) -> u64 {
        self.max_now = self.max_now.max(self.now);
        self.now
    }

    fn live(&self) -> Vec<u64> {
        let mut live: Vec<u64> = self.tickets.keys().copied().collect();
        live.sort_unstable();
        live
    }

    fn ticket(&self, r: TicketRef) -> u64 {
        match r {
            TicketRef::Live(i) => {
                let live = self.live();
                if live.is_empty() {
                    return 0;
                }
                live[usize::from(i) % live.len()]
            }
            TicketRef::Issued(i) => {
                if self.issued.is_empty() {
                    return 0;
                }
                let n = self.issued.len();
                self.issued[n - 1 - usize::from(i) % n]
            }
            TicketRef::Forged(t) => t,
        }
    }

    fn state(&self, ticket: u64) -> Option<St> {
        self.tickets.get(&ticket).map(|e| e.st)
    }

    fn queued(&self) -> u64 {
        self.tickets.values().filter(|e| e.st == St::Queued).count() as u64
    }

    fn granted(&self) -> u64 {
        self.tickets
            .values()
            .filter(|e| e.st == St::Granted)
            .count() as u64
    }

    /// Permits the grants out hold: one each, or with seats their costs (1..=max_in_flight).
    fn permits_out(&self) -> u64 {
        if !self.seats {
            return self.granted();
        }
        let max = u64::from(self.config.max_in_flight);
        self.tickets
            .values()
            .filter(|e| e.st == St::Granted)
            .map(|e| u64::from(e.cost).clamp(1, max))
            .sum()
    }

    fn tenant_count(&self, tenant: u64, st: St) -> u64 {
        self.tickets
            .values()
            .filter(|e| e.tenant == tenant && e.st == st)
            .count() as u64
    }

    /// Moves a ticket; an ended one leaves the ledger (later references to it are stale).
    fn set(&mut self, ticket: u64, st: St) {
        if st == St::Ended {
            self.tickets.remove(&ticket).unwrap();
        } else {
            self.tickets.get_mut(&ticket).unwrap().st = st;
        }
    }

    fn check_bounds(&self) {
        let (queued, granted) = (self.queued(), self.permits_out());
        assert!(
            granted <= u64::from(self.config.max_in_flight),
            "{granted} permits out (seats {}), max_in_flight {}",
            self.seats,
            self.config.max_in_flight
        );
        assert!(
            queued <= u64::from(self.config.queue_capacity),
            "{queued} queued, queue_capacity {}",
            self.config.queue_capacity
        );
        let mut per_tenant: HashMap<u64, u64> = HashMap::new();
        for e in self.tickets.values().filter(|e| e.st == St::Queued) {
            *per_tenant.entry(e.tenant).or_default() += 1;
        }
        for (key, q) in per_tenant {
            assert!(
                q <= u64::from(self.config.tenant_queue_capacity),
                "tenant {key:#x}: {q} queued, tenant_queue_capacity {}",
                self.config.tenant_queue_capacity
            );
        }
    }

    /// `fairq_get_stats` against the ledger.
    fn check_stats(&mut self) {
        let mut s = fairq_stats::default();
        // SAFETY: a live engine and a writable struct.
        let rc = unsafe { fairq_get_stats(self.engine, &mut s) };
        expect("get_stats", rc, &[FAIRQ_OK]);
        let c = &self.counts;
        let got = Counts {
            enqueued: s.enqueued,
            granted: s.granted,
            completed: s.completed,
            requeued: s.requeued,
            cancelled: s.cancelled,
            expired: s.expired,
            refused_after_wait: s.refused_after_wait,
            refused: s.refused,
        };
        assert_eq!(&got, c, "stats counters (left) against the ledger (right)");
        assert_eq!(s.queued, self.queued(), "stats.queued against the ledger");
        assert_eq!(
            s.in_flight,
            self.granted(),
            "stats.in_flight against the ledger"
        );
        assert_eq!(
            s.enqueued,
            s.queued + s.in_flight + s.completed + s.cancelled + s.expired + s.refused_after_wait,
            "conservation: {s:?}"
        );
        assert_eq!(s.refused[0], 0, "refused[none] counts something");
        // Each request counted once (docs/operating.md's metrics statement): grants plus refusals
        // of every reason equal the requests (those still queued have not been counted yet), but
        // for the two things that count one twice, a requeue (granted again, or refused after
        // waiting) and a cancel of a granted ticket.
        let refusals: u64 = s.refused.iter().sum();
        assert_eq!(
            s.granted + refusals + s.queued,
            self.requests + s.requeued + s.refused_after_wait + self.cancelled_granted,
            "grants + refusals against requests: {s:?}"
        );
        self.check_bounds();
    }

    // -------------------------------------------------------------------------- ops

    fn apply(&mut self, op: &Op) {
        self.reset_scratch();
        match *op {
            Op::Forward(d) => self.now = self.now.saturating_add(d.get()),
            Op::Back(d) => self.now = self.now.saturating_sub(d.get()),
            Op::SetTime(t) => self.now = t.get(),
            Op::Enqueue {
                tenant,
                dimension,
                cost,
                retry_after,
                timeout,
                request,
                result,
            } => self.enqueue(
                tenant.key(),
                dimension.0,
                cost.get(),
                retry_after.get(),
                timeout.get(),
                request,
                result,
            ),
            Op::NextGrant { grant } => {
                self.next_grant(grant);
            }
            Op::Pump {
                outcome,
                retry_after,
            } => {
                for _ in 0..64 {
                    self.reset_scratch();
                    match self.next_grant(Ptr::Valid) {
                        Some((FAIRQ_OK, ticket)) => {
                            self.reset_scratch();
                            self.complete(
                                ticket,
                                outcome.get(),
                                retry_after.get(),
                                None,
                                Ptr::Null,
                            );
                        }
                        Some((FAIRQ_EXPIRED, _)) => {}
                        _ => break,
                    }
                }
            }
            Op::Complete {
                ticket,
                outcome,
                retry_after,
                actual_cost,
                completion,
            } => {
                let t = self.ticket(ticket);
                self.complete(
                    t,
                    outcome.get(),
                    retry_after.get(),
                    actual_cost.map(Num32::get),
                    completion,
                );
            }
            Op::Cancel { ticket } => {
                let t = self.ticket(ticket);
                self.cancel(t);
            }
            Op::Expire { ticket, refusal } => {
                let t = self.ticket(ticket);
                self.expire(t, refusal);
            }
            Op::SetWeight { ref raw, weight } => self.set_weight(raw, weight.get()),
            Op::SetWeightKey { tenant, weight } => {
                let (key, weight) = (tenant.key(), weight.get());
                // SAFETY: a live engine.
                let rc = unsafe { fairq_set_weight_key(self.engine, key, weight) };
                let allowed: &[i32] = if key == 0 || !(1..=10_000).contains(&weight) {
                    &[FAIRQ_ERR_INVALID_ARGUMENT]
                } else {
                    &[FAIRQ_OK, FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES]
                };
                expect("set_weight_key", rc, allowed);
            }
            Op::ReplaceWeights {
                ref entries,
                default_weight,
                null_entries,
            } => self.replace_weights(entries, default_weight.get(), null_entries),
            Op::WeightOf { tenant, out } => {
                let key = tenant.key();
                // SAFETY: a live engine; `out` is valid, NULL or misaligned scratch.
                let rc = unsafe { fairq_weight_of(self.engine, key, self.a.out(out)) };
                // Key 0 names no tenant.
                let ok = if key == 0 {
                    FAIRQ_ERR_INVALID_ARGUMENT
                } else {
                    FAIRQ_OK
                };
                expect("weight_of", rc, &errors_or(&[pointer_error(out)], &[ok]));
                if rc == FAIRQ_OK {
                    let w: u32 = self.a.get();
                    assert!((1..=10_000).contains(&w), "weight_of gave {w}");
                }
            }
            Op::TenantGranted {
                tenant,
                grants,
                cost,
            } => {
                let key = tenant.key();
                // SAFETY: a live engine; scratch out-pointers as chosen.
                let rc = unsafe {
                    fairq_tenant_granted(self.engine, key, self.a.out(grants), self.b.out(cost))
                };
                let ok: &[i32] = if key == 0 {
                    &[FAIRQ_ERR_INVALID_ARGUMENT]
                } else {
                    &[FAIRQ_OK, FAIRQ_NOT_FOUND]
                };
                expect(
                    "tenant_granted",
                    rc,
                    &errors_or(&[pointer_error(grants), pointer_error(cost)], ok),
                );
                if rc == FAIRQ_OK {
                    let n: u64 = self.a.get();
                    let ever = self.tenant_grants.get(&key).copied().unwrap_or(0);
                    assert!(n <= ever, "tenant_granted {n}, but {ever} grants ever");
                }
            }
            Op::Indicators { tenant, out } => {
                let (key, now) = (tenant.key(), self.at());
                // SAFETY: a live engine; scratch out-pointer as chosen.
                let rc =
                    unsafe { fairq_tenant_indicators_at(self.engine, key, now, self.a.out(out)) };
                let allowed = if key == 0 {
                    errors_or(&[pointer_error(out)], &[FAIRQ_ERR_INVALID_ARGUMENT])
                } else {
                    errors_or(&[pointer_error(out)], &[FAIRQ_OK, FAIRQ_NOT_FOUND])
                };
                expect("tenant_indicators_at", rc, &allowed);
                if rc == FAIRQ_OK {
                    let ind: fairq_indicators = self.a.get();
                    assert_eq!(ind.tenant_key, key);
                    assert!(ind.refused <= ind.requests, "{ind:?}");
                    assert!((1..=10_000).contains(&ind.weight), "{ind:?}");
                }
            }
            Op::Wakeup { out } => {
                // SAFETY: a live engine; scratch out-pointer as chosen.
                let rc = unsafe { fairq_next_wakeup_ns(self.engine, self.a.out(out)) };
                expect(
                    "next_wakeup_ns",
                    rc,
                    &errors_or(&[pointer_error(out)], &[FAIRQ_OK, FAIRQ_EMPTY]),
                );
                if rc == FAIRQ_EMPTY {
                    assert!(self.a.untouched(), "next_wakeup_ns wrote on EMPTY");
                }
            }
            Op::SetEnabled(on) => {
                // SAFETY: a live engine.
                let rc = unsafe { fairq_set_enabled(self.engine, on) };
                expect("set_enabled", rc, &[FAIRQ_OK]);
                self.enabled = on;
            }
            Op::IsEnabled { out } => {
                // SAFETY: a live engine; scratch out-pointer as chosen.
                let rc = unsafe { fairq_is_enabled(self.engine, self.a.out(out)) };
                // A bool has alignment 1: no pointer to one is misaligned.
                let null = (out == Ptr::Null).then_some(FAIRQ_ERR_NULL);
                expect("is_enabled", rc, &errors_or(&[null], &[FAIRQ_OK]));
                if rc == FAIRQ_OK {
                    let byte = self.a.0[usize::from(out == Ptr::Misaligned)];
                    assert_eq!(byte, u8::from(self.enabled), "is_enabled");
                }
            }
            Op::Tick { report } => {
                let now = self.at();
                let out = match report {
                    Ptr::Null => null_mut(),
                    p => self.a.out(p),
                };
                // SAFETY: a live engine; the report is optional.
                let rc = unsafe { fairq_tick_at(self.engine, now, out) };
                let bad = if report == Ptr::Misaligned {
                    Some(FAIRQ_ERR_INVALID_ARGUMENT)
                } else {
                    None
                };
                expect("tick_at", rc, &errors_or(&[bad], &[FAIRQ_OK]));
            }
            Op::Stats { out } => {
                // SAFETY: a live engine; scratch out-pointer as chosen.
                let rc = unsafe { fairq_get_stats(self.engine, self.a.out(out)) };
                expect(
                    "get_stats",
                    rc,
                    &errors_or(&[pointer_error(out)], &[FAIRQ_OK]),
                );
            }
            Op::Metrics { buf, needed } => self.metrics(buf, needed),
            Op::TenantKey { ref raw, out } => self.tenant_key(raw, out),
            Op::Resolve {
                ref user,
                ref team,
                ref api_key,
                placeholder,
                identity,
                key_out,
                dimension_out,
            } => self.resolve(
                [user.as_deref(), team.as_deref(), api_key.as_deref()],
                placeholder,
                identity,
                key_out,
                dimension_out,
            ),
            Op::WithBadHandle { handle, call } => self.bad_handle(handle, call),
            Op::ConfigCheck {
                ref config,
                config_ptr,
                buf_len,
            } => {
                let c = config.build();
                let p = self.a.put(config_ptr, c);
                let len = usize::from(buf_len);
                let buf = if len == 0 {
                    null_mut()
                } else {
                    self.b.out::<c_char>(Ptr::Valid)
                };
                // SAFETY: `p` is NULL, or holds a config (aligned or not); `buf` has `len`
                // writable bytes.
                let rc = unsafe { fairq_config_check(p, buf, len) };
                expect(
                    "config_check",
                    rc,
                    &errors_or(
                        &[pointer_error(config_ptr)],
                        &[FAIRQ_OK, FAIRQ_ERR_INVALID_CONFIG],
                    ),
                );
                if rc == FAIRQ_ERR_INVALID_CONFIG && len > 0 {
                    let written = &self.b.0[..len];
                    assert!(
                        written.contains(&0),
                        "config_check's message is not NUL-terminated in {len} bytes"
                    );
                    assert!(self.b.0[len..].iter().all(|&b| b == FILL), "wrote past len");
                } else if rc != FAIRQ_ERR_INVALID_CONFIG {
                    assert!(self.b.untouched(), "config_check wrote a message on {rc}");
                }
            }
            Op::Renew { ref config } => {
                self.drain();
                // SAFETY: the last call on this engine.
                unsafe { fairq_engine_free(self.engine) };
                let keep_time = (self.now, self.max_now);
                *self = World::new(config);
                (self.now, self.max_now) = keep_time;
            }
        }
        if !matches!(op, Op::Renew { .. }) {
            self.check_stats();
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        key: u64,
        dimension: u32,
        cost: u32,
        retry_after: u64,
        timeout: u64,
        request: Ptr,
        result: Ptr,
    ) {
        let user_data = self.next_user_data;
        self.next_user_data += 1;
        let req = fairq_request {
            tenant_key: key,
            user_data,
            retry_after_ns: retry_after,
            timeout_ns: timeout,
            dimension,
            cost,
        };
        let now = self.at();
        let req_ptr = self.a.put(request, req);
        let res_ptr = self.b.out::<fairq_enqueue_result>(result);
        // SAFETY: a live engine; the request is NULL or initialised (aligned or not); the
        // result is valid, NULL or misaligned scratch.
        let rc = unsafe { fairq_enqueue_at(self.engine, req_ptr, now, res_ptr) };
        let bad_args = dimension > FAIRQ_DIM_STORE || cost > 1_000_000;
        let allowed = errors_or(
            &[
                pointer_error(request),
                pointer_error(result),
                bad_args.then_some(FAIRQ_ERR_INVALID_ARGUMENT),
            ],
            &[FAIRQ_QUEUED, FAIRQ_REFUSED],
        );
        expect("enqueue_at", rc, &allowed);
        if rc < 0 {
            assert!(self.b.untouched(), "enqueue wrote its result on {rc}");
            return;
        }
        let res: fairq_enqueue_result = self.b.get();
        self.requests += 1;
        if rc == FAIRQ_REFUSED {
            reason_name(res.reason);
            assert!(
                ENQUEUE_REFUSALS.contains(&res.reason),
                "enqueue refused with reason {}",
                res.reason
            );
            assert_eq!(res.ticket, 0, "a refusal carries ticket 0");
            self.check_refusal_is_due(key, res.reason);
            self.counts.refused[res.reason as usize] += 1;
            return;
        }
        assert!(self.enabled, "a disabled engine queued a request ({res:?})");
        assert!(key != 0, "a request without a tenant was queued");
        assert!(
            dimension <= FAIRQ_DIM_MODEL,
            "dimension {dimension} is not queueable"
        );
        assert_eq!(res.reason, FAIRQ_REASON_NONE);
        assert!(
            (1..=self.config.tenant_queue_capacity).contains(&res.position),
            "position {} with tenant_queue_capacity {}",
            res.position,
            self.config.tenant_queue_capacity
        );
        assert!(
            self.state(res.ticket).is_none(),
            "enqueue returned live ticket {:#x}",
            res.ticket
        );
        self.tickets.insert(
            res.ticket,
            Entry {
                st: St::Queued,
                tenant: key,
                user_data,
                cost: cost.max(1),
                not_before: not_before(now, retry_after),
                ready_by: self.max_now.saturating_add(retry_after),
            },
        );
        self.issued.push(res.ticket);
        self.counts.enqueued += 1;
    }

    /// The bounds count live requests only: a refusal for a full queue comes only when the
    /// ledger's live requests fill it (cancelled and expired ones hold no place).
    fn check_refusal_is_due(&self, key: u64, reason: u32) {
        let live = |k| self.tenant_count(k, St::Queued) + self.tenant_count(k, St::Granted);
        if reason == FAIRQ_REASON_TENANT_QUEUE_FULL {
            assert!(
                live(key) >= u64::from(self.config.tenant_queue_capacity),
                "tenant_queue_full with {} live requests of {}",
                live(key),
                self.config.tenant_queue_capacity
            );
        }
        if reason == FAIRQ_REASON_QUEUE_FULL {
            assert!(
                self.queued() + self.granted() >= u64::from(self.config.queue_capacity),
                "queue_full with {} queued of {}",
                self.queued(),
                self.config.queue_capacity
            );
        }
    }

    /// One `next_grant_at`; returns its status and ticket when it granted or expired one.
    fn next_grant(&mut self, grant: Ptr) -> Option<(i32, u64)> {
        let now = self.at();
        let out = self.a.out::<fairq_grant>(grant);
        // SAFETY: a live engine; the grant is valid, NULL or misaligned scratch.
        let rc = unsafe { fairq_next_grant_at(self.engine, now, out) };
        expect(
            "next_grant_at",
            rc,
            &errors_or(
                &[pointer_error(grant)],
                &[FAIRQ_OK, FAIRQ_EXPIRED, FAIRQ_EMPTY, FAIRQ_AT_CAPACITY],
            ),
        );
        match rc {
            FAIRQ_OK | FAIRQ_EXPIRED => {}
            FAIRQ_AT_CAPACITY if self.seats => {
                // The next grant needs more permits than are free, or a request as wide as the
                // limit waits for every permit: either way one is out.
                assert!(self.granted() >= 1, "AT_CAPACITY with nothing out (seats)");
                return None;
            }
            FAIRQ_AT_CAPACITY => {
                assert_eq!(
                    self.granted(),
                    u64::from(self.config.max_in_flight),
                    "AT_CAPACITY with {} grants out of {}",
                    self.granted(),
                    self.config.max_in_flight
                );
                return None;
            }
            _ => {
                assert!(self.a.untouched(), "next_grant wrote on {rc}");
                return None;
            }
        }
        let g: fairq_grant = self.a.get();
        let Some(entry) = self.tickets.get(&g.ticket).copied() else {
            panic!(
                "next_grant {} ticket {:#x}, never issued",
                status_name(rc),
                g.ticket
            );
        };
        assert_eq!(
            entry.st,
            St::Queued,
            "next_grant {} ticket {:#x} in state {:?}",
            status_name(rc),
            g.ticket,
            entry.st
        );
        assert_eq!(g.tenant_key, entry.tenant, "grant's tenant");
        assert_eq!(g.user_data, entry.user_data, "grant's user_data");
        if rc == FAIRQ_OK {
            assert_eq!(g.reason, FAIRQ_REASON_NONE);
            assert_eq!(g.cost, entry.cost, "grant's cost");
            assert!(
                entry.not_before <= self.max_now,
                "granted at {} before its Retry-After ends at {}",
                self.max_now,
                entry.not_before
            );
            self.set(g.ticket, St::Granted);
            self.counts.granted += 1;
            *self.tenant_grants.entry(entry.tenant).or_default() += 1;
            assert!(
                self.permits_out() <= u64::from(self.config.max_in_flight),
                "a grant past max_in_flight"
            );
        } else {
            assert_eq!(g.reason, FAIRQ_REASON_DEADLINE_EXCEEDED);
            self.set(g.ticket, St::Ended);
            self.counts.expired += 1;
            self.counts.refused[FAIRQ_REASON_DEADLINE_EXCEEDED as usize] += 1;
        }
        Some((rc, g.ticket))
    }

    fn complete(
        &mut self,
        ticket: u64,
        outcome: u32,
        retry_after: u64,
        actual_cost: Option<u32>,
        completion: Ptr,
    ) {
        let now = self.at();
        let out = match completion {
            Ptr::Null => null_mut(),
            p => self.a.out::<fairq_completion>(p),
        };
        // SAFETY: a live engine; the completion is NULL (allowed) or scratch.
        let rc = unsafe {
            match actual_cost {
                None => fairq_complete_at(self.engine, ticket, outcome, retry_after, now, out),
                Some(cost) => fairq_complete_with_cost_at(
                    self.engine,
                    ticket,
                    outcome,
                    retry_after,
                    cost,
                    now,
                    out,
                ),
            }
        };
        let state = self.state(ticket);
        let ticket_error = match state {
            Some(St::Granted) => None,
            Some(St::Queued) => Some(FAIRQ_ERR_TICKET_STATE),
            _ => Some(FAIRQ_ERR_STALE_TICKET),
        };
        let bad_args =
            outcome > FAIRQ_OUTCOME_STILL_REFUSED || actual_cost.is_some_and(|c| c > 1_000_000);
        let outcomes: &[i32] = if outcome == FAIRQ_OUTCOME_ADMITTED {
            &[FAIRQ_OK]
        } else {
            &[FAIRQ_REQUEUED, FAIRQ_REFUSED]
        };
        let misaligned = (completion == Ptr::Misaligned).then_some(FAIRQ_ERR_INVALID_ARGUMENT);
        let allowed = errors_or(
            &[
                misaligned,
                bad_args.then_some(FAIRQ_ERR_INVALID_ARGUMENT),
                ticket_error,
            ],
            outcomes,
        );
        expect("complete_at", rc, &allowed);
        if rc < 0 {
            assert!(self.a.untouched(), "complete wrote on {rc}");
            return;
        }
        let detail: Option<fairq_completion> = (completion == Ptr::Valid).then(|| self.a.get());
        match rc {
            FAIRQ_OK => {
                self.set(ticket, St::Ended);
                self.counts.completed += 1;
            }
            FAIRQ_REQUEUED => {
                let e = self.tickets.get_mut(&ticket).unwrap();
                e.st = St::Queued;
                e.not_before = not_before(now, retry_after);
                e.ready_by = self.max_now.saturating_add(retry_after);
                self.counts.requeued += 1;
                if let Some(d) = detail {
                    assert_eq!(d.reason, FAIRQ_REASON_NONE);
                    assert!(
                        (1..=self.config.tenant_queue_capacity).contains(&d.position),
                        "requeued at position {}",
                        d.position
                    );
                }
            }
            _ => {
                self.set(ticket, St::Ended);
                self.counts.refused_after_wait += 1;
                if let Some(d) = detail {
                    reason_name(d.reason);
                    assert!(
                        REQUEUE_REFUSALS.contains(&d.reason),
                        "requeue refused with {}",
                        d.reason
                    );
                    self.counts.refused[d.reason as usize] += 1;
                } else {
                    // The reason is not known without the details: read it from the stats.
                    let mut s = fairq_stats::default();
                    // SAFETY: a live engine and a writable struct.
                    unsafe { fairq_get_stats(self.engine, &mut s) };
                    let grew: Vec<usize> = REQUEUE_REFUSALS
                        .iter()
                        .map(|&r| r as usize)
                        .filter(|&r| s.refused[r] == self.counts.refused[r] + 1)
                        .collect();
                    assert_eq!(grew.len(), 1, "one refusal reason grew: {s:?}");
                    self.counts.refused[grew[0]] += 1;
                }
            }
        }
    }

    fn cancel(&mut self, ticket: u64) {
        let now = self.at();
        // SAFETY: a live engine.
        let rc = unsafe { fairq_cancel_at(self.engine, ticket, now) };
        let live = matches!(self.state(ticket), Some(St::Queued | St::Granted));
        expect(
            "cancel_at",
            rc,
            &[if live {
                FAIRQ_OK
            } else {
                FAIRQ_ERR_STALE_TICKET
            }],
        );
        if rc == FAIRQ_OK {
            if self.state(ticket) == Some(St::Granted) {
                self.cancelled_granted += 1;
            }
            self.set(ticket, St::Ended);
            self.counts.cancelled += 1;
            self.counts.refused[FAIRQ_REASON_CANCELLED as usize] += 1;
        }
    }

    fn expire(&mut self, ticket: u64, refusal: Ptr) {
        let now = self.at();
        let out = match refusal {
            Ptr::Null => null_mut(),
            p => self.a.out::<fairq_completion>(p),
        };
        // SAFETY: a live engine; the refusal is NULL (allowed) or scratch.
        let rc = unsafe { fairq_expire_at(self.engine, ticket, now, out) };
        let ticket_error = match self.state(ticket) {
            Some(St::Queued) => None,
            Some(St::Granted) => Some(FAIRQ_ERR_TICKET_STATE),
            _ => Some(FAIRQ_ERR_STALE_TICKET),
        };
        let misaligned = (refusal == Ptr::Misaligned).then_some(FAIRQ_ERR_INVALID_ARGUMENT);
        expect(
            "expire_at",
            rc,
            &errors_or(&[misaligned, ticket_error], &[FAIRQ_OK]),
        );
        if rc < 0 {
            assert!(self.a.untouched(), "expire wrote on {rc}");
            return;
        }
        if refusal == Ptr::Valid {
            let d: fairq_completion = self.a.get();
            assert_eq!(d.reason, FAIRQ_REASON_DEADLINE_EXCEEDED);
        }
        self.set(ticket, St::Ended);
        self.counts.expired += 1;
        self.counts.refused[FAIRQ_REASON_DEADLINE_EXCEEDED as usize] += 1;
    }

    /// A raw identifier as (pointer, length); the bytes live in `self.c` or are static.
    fn raw(&mut self, raw: &Raw) -> (*const c_char, usize) {
        match raw {
            Raw::Name(i) => {
                let name = tenant_name(usize::from(*i) % TENANTS);
                let n = name.len();
                self.c.0[..n].copy_from_slice(name.as_bytes());
                (self.c.0.as_ptr().cast(), n)
            }
            Raw::Bytes(b) => {
                let n = b.len().min(self.c.0.len());
                self.c.0[..n].copy_from_slice(&b[..n]);
                (self.c.0.as_ptr().cast(), n)
            }
            Raw::Empty => (self.c.0.as_ptr().cast(), 0),
            Raw::NullWithLen(n) => (null(), usize::from(*n)),
        }
    }

    fn set_weight(&mut self, raw: &Raw, weight: u32) {
        let (ptr, len) = self.raw(raw);
        // SAFETY: a live engine; `ptr` is NULL or readable for `len` bytes.
        let rc = unsafe { fairq_set_weight(self.engine, ptr, len, weight) };
        let allowed: &[i32] = if ptr.is_null() && len > 0 {
            &[FAIRQ_ERR_NULL, FAIRQ_ERR_INVALID_ARGUMENT]
        } else if len == 0 || !(1..=10_000).contains(&weight) {
            &[FAIRQ_ERR_INVALID_ARGUMENT]
        } else {
            &[FAIRQ_OK, FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES]
        };
        expect("set_weight", rc, allowed);
    }

    fn replace_weights(&mut self, entries: &[(Tenant, Num32)], default_weight: u32, null: bool) {
        let table: Vec<fairq_weight_entry> = entries
            .iter()
            .map(|&(t, w)| fairq_weight_entry {
                tenant_key: t.key(),
                weight: w.get(),
            })
            .collect();
        let ptr = if null || table.is_empty() {
            std::ptr::null()
        } else {
            table.as_ptr()
        };
        // SAFETY: a live engine; `ptr` is NULL or `table.len()` readable entries.
        let rc = unsafe { fairq_replace_weights(self.engine, ptr, table.len(), default_weight) };
        let any_bad = table
            .iter()
            .any(|e| e.tenant_key == 0 || !(1..=10_000).contains(&e.weight))
            || !(1..=10_000).contains(&default_weight);
        let allowed: Vec<i32> = if null && !table.is_empty() {
            vec![FAIRQ_ERR_NULL, FAIRQ_ERR_INVALID_ARGUMENT]
        } else if any_bad {
            vec![FAIRQ_ERR_INVALID_ARGUMENT]
        } else {
            vec![FAIRQ_OK, FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES]
        };
        expect("replace_weights", rc, &allowed);
    }

    fn metrics(&mut self, buf: MetricsBuf, needed: Ptr) {
        let needed_out = match needed {
            Ptr::Null => null_mut(),
            p => self.b.out::<usize>(p),
        };
        let sized = |w: &mut World| -> usize {
            let mut n = 0usize;
            // SAFETY: a live engine; the sizing call (NULL, 0).
            let rc = unsafe { fairq_metrics_prometheus(w.engine, null_mut(), 0, &mut n) };
            expect("metrics sizing", rc, &[FAIRQ_ERR_BUFFER_TOO_SMALL]);
            n
        };
        let (mut storage, null_len) = match buf {
            MetricsBuf::Sizing => (None, 0),
            MetricsBuf::NullWithLen(n) => (None, usize::from(n).max(1)),
            MetricsBuf::Len(n) => (Some(vec![FILL; usize::from(n) + 64]), usize::from(n)),
            MetricsBuf::Sized(slack) => {
                let n = sized(self) + usize::from(slack) + 4096;
                (Some(vec![FILL; n + 64]), n)
            }
        };
        let len = null_len;
        let ptr = storage
            .as_mut()
            .map_or(null_mut(), |v| v.as_mut_ptr().cast::<c_char>());
        // SAFETY: a live engine; `ptr` is NULL or has `len` + 64 writable bytes; `needed` is
        // NULL (allowed) or scratch.
        let rc = unsafe { fairq_metrics_prometheus(self.engine, ptr, len, needed_out) };
        let null_buf = (ptr.is_null() && len > 0).then_some(FAIRQ_ERR_NULL);
        let misaligned = (needed == Ptr::Misaligned).then_some(FAIRQ_ERR_INVALID_ARGUMENT);
        expect(
            "metrics_prometheus",
            rc,
            &errors_or(
                &[misaligned, null_buf],
                &[FAIRQ_OK, FAIRQ_ERR_BUFFER_TOO_SMALL],
            ),
        );
        let reported: Option<usize> = (needed == Ptr::Valid
            && matches!(rc, FAIRQ_OK | FAIRQ_ERR_BUFFER_TOO_SMALL))
        .then(|| self.b.get());
        match (rc, storage.as_ref()) {
            (FAIRQ_OK, Some(v)) => {
                let end = v.iter().position(|&b| b == 0).expect("NUL-terminated");
                assert!(end < len, "the text and its NUL fit in len");
                if let Some(n) = reported {
                    assert_eq!(n, end + 1, "needed is the text length plus its NUL");
                }
                assert!(
                    v[end + 1..].iter().all(|&b| b == FILL),
                    "metrics wrote past its NUL"
                );
                let text = std::str::from_utf8(&v[..end]).expect("UTF-8");
                assert!(text.ends_with('\n') && text.contains("rate_limit_fair_queue_depth "));
            }
            (FAIRQ_ERR_BUFFER_TOO_SMALL, v) => {
                if let Some(v) = v {
                    assert!(v.iter().all(|&b| b == FILL), "wrote to a buffer too small");
                }
                if let Some(n) = reported {
                    assert!(n > len, "BUFFER_TOO_SMALL but needed {n} <= len {len}");
                }
            }
            _ => {}
        }
        if rc < 0 && rc != FAIRQ_ERR_BUFFER_TOO_SMALL {
            assert!(self.b.untouched(), "metrics wrote needed on {rc}");
        }
    }

    fn tenant_key(&mut self, raw: &Raw, out: Ptr) {
        let (ptr, len) = self.raw(raw);
        // SAFETY: `ptr` is NULL or readable for `len` bytes; `out` is scratch as chosen.
        let rc = unsafe { fairq_tenant_key(ptr, len, self.a.out(out)) };
        let arg = if ptr.is_null() && len > 0 {
            Some(FAIRQ_ERR_NULL)
        } else if len == 0 {
            Some(FAIRQ_ERR_INVALID_ARGUMENT)
        } else {
            None
        };
        expect(
            "tenant_key",
            rc,
            &errors_or(&[pointer_error(out), arg], &[FAIRQ_OK]),
        );
        if rc == FAIRQ_OK {
            let key: u64 = self.a.get();
            let mut again = 0u64;
            // SAFETY: as above, with a local out-pointer.
            let rc = unsafe { fairq_tenant_key(ptr, len, &mut again) };
            assert_eq!((rc, again), (FAIRQ_OK, key), "tenant_key is a function");
            if let Raw::Name(i) = raw {
                assert_eq!(key, known_keys()[usize::from(*i) % TENANTS]);
            }
        }
    }

    fn resolve(
        &mut self,
        ids: [Option<&[u8]>; 3],
        placeholder: bool,
        identity: Ptr,
        key_out: Ptr,
        dimension_out: Ptr,
    ) {
        let field = |b: Option<&[u8]>| b.map_or((null(), 0), |b| (b.as_ptr().cast(), b.len()));
        let (user, team, api_key) = (field(ids[0]), field(ids[1]), field(ids[2]));
        let id = fairq_identity {
            user: user.0,
            user_len: user.1,
            team: team.0,
            team_len: team.1,
            api_key: api_key.0,
            api_key_len: api_key.1,
            team_is_placeholder: placeholder,
        };
        let id_ptr = self.c.put(identity, id);
        let dim = match dimension_out {
            Ptr::Null => null_mut(),
            p => self.b.out::<u32>(p),
        };
        // SAFETY: a live engine; the identity's strings are readable for their lengths; the
        // out-pointers are scratch as chosen.
        let rc = unsafe { fairq_resolve_tenant(self.engine, id_ptr, self.a.out(key_out), dim) };
        let non_utf8 = ids
            .iter()
            .flatten()
            .any(|b| std::str::from_utf8(b).is_err())
            .then_some(FAIRQ_ERR_INVALID_ARGUMENT);
        let dim_bad = (dimension_out == Ptr::Misaligned).then_some(FAIRQ_ERR_INVALID_ARGUMENT);
        expect(
            "resolve_tenant",
            rc,
            &errors_or(
                &[
                    pointer_error(identity),
                    pointer_error(key_out),
                    dim_bad,
                    non_utf8,
                ],
                &[FAIRQ_OK, FAIRQ_NOT_FOUND],
            ),
        );
        if rc != FAIRQ_OK {
            assert!(
                self.a.untouched() && self.b.untouched(),
                "resolve wrote on {rc}"
            );
            return;
        }
        let key: u64 = self.a.get();
        let keys: Vec<u64> = ids
            .iter()
            .flatten()
            .filter(|b| !b.is_empty())
            .map(|b| {
                let mut k = 0;
                // SAFETY: readable bytes, a local out-pointer.
                unsafe { fairq_tenant_key(b.as_ptr().cast(), b.len(), &mut k) };
                k
            })
            .collect();
        assert!(
            keys.contains(&key),
            "resolved key {key:#x} is none of the identifiers'"
        );
        if dimension_out == Ptr::Valid {
            let d: u32 = self.b.get();
            assert!(d <= FAIRQ_TENANT_DIM_TEAM, "dimension {d}");
        }
    }

    /// Calls one function with a handle that is not a live engine: NULL gives ERR_NULL, the
    /// others ERR_INVALID_HANDLE; nothing is written anywhere.
    fn bad_handle(&mut self, handle: BadHandle, call: u8) {
        let engine: *const fairq_engine = match handle {
            BadHandle::Null => null(),
            BadHandle::Misaligned => self.engine.cast::<u8>().wrapping_add(1).cast(),
            BadHandle::Junk => (&*self.junk as *const Junk).cast(),
        };
        let want = match handle {
            BadHandle::Null => FAIRQ_ERR_NULL,
            _ => FAIRQ_ERR_INVALID_HANDLE,
        };
        let req = fairq_request {
            tenant_key: known_keys()[0],
            ..Default::default()
        };
        let id = fairq_identity {
            user: c"u".as_ptr(),
            user_len: 1,
            team: null(),
            team_len: 0,
            api_key: null(),
            api_key_len: 0,
            team_is_placeholder: false,
        };
        let entry = fairq_weight_entry {
            tenant_key: 7,
            weight: 2,
        };
        let live = self.live();
        let ticket = live.first().copied().unwrap_or(1);
        let (a, b) = (self.a.out::<u64>(Ptr::Valid), self.b.out::<u64>(Ptr::Valid));
        let buf = self.c.out::<c_char>(Ptr::Valid);
        let now = self.at();
        // SAFETY: every pointer is valid scratch; `engine` is NULL, misaligned or junk, which
        // each function must reject before using it.
        let rc = unsafe {
            match call % 32 {
                0 => fairq_set_enabled(engine, false),
                1 => fairq_is_enabled(engine, a.cast()),
                2 => fairq_resolve_tenant(engine, &id, a, b.cast()),
                3 => fairq_set_weight(engine, c"x".as_ptr(), 1, 2),
                4 => fairq_set_weight_key(engine, 7, 2),
                5 => fairq_replace_weights(engine, &entry, 1, 1),
                6 => fairq_weight_of(engine, 7, a.cast()),
                7 => fairq_tenant_granted(engine, 7, a, b),
                8 => fairq_enqueue(engine, &req, a.cast()),
                9 => fairq_enqueue_at(engine, &req, now, a.cast()),
                10 => fairq_next_grant(engine, a.cast()),
                11 => fairq_next_grant_at(engine, now, a.cast()),
                12 => fairq_next_wakeup_ns(engine, a),
                13 => fairq_complete(engine, ticket, 0, 0, a.cast()),
                14 => fairq_complete_at(engine, ticket, 0, 0, now, a.cast()),
                15 => fairq_complete_with_cost(engine, ticket, 0, 0, 1, a.cast()),
                16 => fairq_complete_with_cost_at(engine, ticket, 1, 0, 1, now, a.cast()),
                17 => fairq_cancel(engine, ticket),
                18 => fairq_cancel_at(engine, ticket, now),
                19 => fairq_expire(engine, ticket, a.cast()),
                20 => fairq_expire_at(engine, ticket, now, a.cast()),
                21 => fairq_get_stats(engine, a.cast()),
                22 => fairq_metrics_prometheus(engine, buf, 1024, b.cast()),
                23 => fairq_tenant_indicators(engine, 7, a.cast()),
                24 => fairq_tenant_indicators_at(engine, 7, now, a.cast()),
                25 => fairq_tick(engine, a.cast()),
                26 => fairq_tick_at(engine, now, a.cast()),
                27 => fairq_metrics_prometheus(engine, null_mut(), 0, b.cast()),
                28 => fairq_complete_at(engine, ticket, 1, 5, now, null_mut()),
                29 => fairq_expire_at(engine, ticket, now, null_mut()),
                30 => fairq_tick_at(engine, now, null_mut()),
                _ => {
                    fairq_engine_free(engine.cast_mut());
                    want
                }
            }
        };
        expect("a call with a bad handle", rc, &[want]);
        assert!(self.scratch_untouched(), "a call with a bad handle wrote");
        assert!(
            self.junk.0.iter().all(|&w| w == 0xDEAD_BEEF_F00D_CAFE),
            "junk was written to"
        );
    }

    /// Every request must end, even one queued in the clock's last second: complete what is
    /// granted, then take grants, moving the clock to past every live request's Retry-After
    /// (a cancelled or expired one's must not hold its tenant back) and then to each
    /// `fairq_next_wakeup_ns` (a parked tenant wakes on the engine's timer, which may round a
    /// Retry-After up), until nothing is queued.
    fn drain(&mut self) {
        let granted: Vec<u64> = self
            .live()
            .into_iter()
            .filter(|t| self.state(*t) == Some(St::Granted))
            .collect();
        for t in granted {
            self.reset_scratch();
            self.complete(t, FAIRQ_OUTCOME_ADMITTED, 0, None, Ptr::Null);
        }
        let latest = self
            .tickets
            .values()
            .filter(|e| e.st == St::Queued)
            .map(|e| e.ready_by)
            .max()
            .unwrap_or(0);
        self.now = self.max_now.max(latest).saturating_add(1);
        let start = self.now;
        let mut wakeups = 0;
        while self.queued() > 0 {
            self.reset_scratch();
            match self.next_grant(Ptr::Valid) {
                Some((FAIRQ_OK, t)) => {
                    self.reset_scratch();
                    self.complete(t, FAIRQ_OUTCOME_ADMITTED, 0, None, Ptr::Null);
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            let mut at = 0u64;
            // SAFETY: a live engine and a writable u64.
            let rc = unsafe { fairq_next_wakeup_ns(self.engine, &mut at) };
            wakeups += 1;
            assert!(
                rc == FAIRQ_OK && at > self.now && at <= start.saturating_add(DRAIN_NS),
                "the drain at {} ({} ns in, {wakeups} wakeups) left {} queued: next_grant EMPTY, \
                 next_wakeup_ns {} ({at})",
                self.now,
                self.now - start,
                self.queued(),
                status_name(rc)
            );
            self.now = at;
        }
        assert_eq!(self.granted(), 0, "the drain left grants out");
        self.check_stats();
    }
}

fuzz_target!(|input: Input| {
    let mut world = World::new(&input.config);
    for op in &input.ops {
        world.apply(op);
    }
    world.drain();
    // SAFETY: the last call on this engine; freeing NULL is a no-op.
    unsafe {
        fairq_engine_free(world.engine);
        fairq_engine_free(null_mut());
    }
});
