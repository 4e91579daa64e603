//! Every pointer argument of every export, NULL and misaligned, and the error precedence.
//!
//! `EXPORTS` lists each function of `include/fairq.h` outside `FAIRQ_FLEET` with its pointer
//! arguments in order; a test checks that list against the header, so a new export, or a new
//! pointer argument, must be added here. For each export the harness calls it with every
//! combination of good and bad pointers (NULL where one is required, misaligned wherever the
//! type's alignment allows) and of good and bad values, and checks:
//! - the status is the first failed check's, in the order the header documents: the engine
//!   handle, or the builder handle of `fairq_engine_builder_*` (`FAIRQ_ERR_NULL`,
//!   `FAIRQ_ERR_INVALID_HANDLE`), then the other pointers in argument order (`FAIRQ_ERR_NULL`,
//!   `FAIRQ_ERR_INVALID_ARGUMENT`), then values, then the engine's own answer;
//! - on an error nothing changed: the engine's stats, weights, enabled flag, wake-up, tier and
//!   pools are the same (for the builder's exports, so are the builder's message, except that a
//!   rejected setter leaves one, and the pools, tiers and Prometheus text of an engine it
//!   builds), no good out-parameter was written, and nothing was written through the misaligned
//!   pointer.
//!
//! Run under Miri too (`cargo +nightly miri test -p fairq --test ffi_pointers`), which reports
//! any read or write through a misaligned pointer as undefined behaviour. Miri runs the cases
//! with at most one bad pointer (each pointer NULL and misaligned, with good and bad values);
//! the native run adds every combination of several bad pointers, for the precedence, and
//! compares an engine each builder builds, which Miri is slow to build and render (there, the
//! builder's exports compare its message only).

use std::cell::{RefCell, UnsafeCell};
use std::collections::BTreeMap;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{null, null_mut};

use fairq::ffi::*;

// ---------------------------------------------------------------- the table

/// How an export treats one pointer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The engine handle: NULL → `FAIRQ_ERR_NULL`, misaligned → `FAIRQ_ERR_INVALID_HANDLE`.
    Handle,
    /// The builder handle, checked as the engine handle is (and `fairq_engine_builder_free`
    /// ignores a NULL or misaligned one).
    Builder,
    /// NULL → `FAIRQ_ERR_NULL`, misaligned → `FAIRQ_ERR_INVALID_ARGUMENT`.
    Required,
    /// NULL is allowed (not wanted, or a no-op); misaligned → `FAIRQ_ERR_INVALID_ARGUMENT`.
    Optional,
}
use Kind::*;

/// What the harness puts in a pointer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bad {
    Null,
    Misaligned,
}

/// One call's arguments: for each pointer argument, good or bad; and whether the values
/// (codes, ranges, keys, tickets) are good or bad.
struct Args {
    modes: Vec<Option<Bad>>,
    bad_values: bool,
    /// Where a misaligned pointer points: writable, poisoned, checked after the call.
    junk: Box<UnsafeCell<Slot>>,
    /// The alignment of each pointer argument's type, as the call reports it.
    aligns: RefCell<BTreeMap<usize, usize>>,
}

impl Args {
    fn new(modes: Vec<Option<Bad>>, bad_values: bool) -> Args {
        Args {
            modes,
            bad_values,
            junk: Box::new(UnsafeCell::new(Slot::poisoned())),
            aligns: RefCell::new(BTreeMap::new()),
        }
    }

    /// Pointer argument `i`: `good`, NULL or misaligned.
    fn ptr<T>(&self, i: usize, good: *const T) -> *const T {
        self.mut_ptr(i, good.cast_mut()).cast_const()
    }

    fn mut_ptr<T>(&self, i: usize, good: *mut T) -> *mut T {
        self.aligns
            .borrow_mut()
            .insert(i, std::mem::align_of::<T>());
        match self.modes.get(i).copied().flatten() {
            None => good,
            Some(Bad::Null) => null_mut(),
            Some(Bad::Misaligned) => self.junk.get().cast::<u8>().wrapping_add(1).cast::<T>(),
        }
    }

    /// `good`, or `bad` when the call is to have bad values.
    fn val<T>(&self, good: T, bad: T) -> T {
        if self.bad_values {
            bad
        } else {
            good
        }
    }

    fn junk_untouched(&self) -> bool {
        // SAFETY: the call has returned; nothing else refers to the junk.
        unsafe { &*self.junk.get() }.is_poisoned()
    }
}

/// 512 bytes of out-parameter storage, poisoned with 0xA5 so a write shows. Only ever read as
/// bytes (0xA5 is not a valid `bool`).
#[repr(C, align(64))]
struct Slot([u8; 512]);

impl Slot {
    fn poisoned() -> Slot {
        Slot([0xA5; 512])
    }
    fn is_poisoned(&self) -> bool {
        // A slice comparison (memcmp), which Miri runs natively, not a loop it interprets.
        self.0[..] == [0xA5; 512][..]
    }
    fn out<T>(&mut self) -> *mut T {
        assert!(std::mem::size_of::<T>() <= 512);
        self.0.as_mut_ptr().cast()
    }
}

/// A live builder and an engine it built (a tier, two bulkhead pools, load shedding, the
/// feedback controller), the engine in a known state, the inputs a call needs, and poisoned
/// out-parameters.
struct Fixture {
    builder: *mut fairq_engine_builder,
    engine: *mut fairq_engine,
    key: u64,
    /// Granted: completing it would end it.
    granted: u64,
    /// Queued and ready: cancelling or expiring it would end it, `next_grant` would grant it.
    queued: u64,
    config: fairq_config,
    request: fairq_request,
    identity: fairq_identity,
    entry: fairq_weight_entry,
    outs: [Slot; 2],
    /// Room for the whole metrics text, poisoned like the slots.
    text: Vec<u8>,
}

const NOW: u64 = 1_000_000_000;
/// Room for the metrics text of the fixture's engine (the good call checks it fits).
const TEXT: usize = 1 << 15;
const BAD_UTF8: &[u8] = b"\xff\xfe";
/// The fixture's tier and its weight.
const TIER: &str = "gold";
const TIER_WEIGHT: u32 = 5;
/// The fixture's bulkhead pools and their bounds; `POOLS.len()` names no pool.
const POOLS: [u32; 2] = [2, 1];

fn config() -> fairq_config {
    let mut c = std::mem::MaybeUninit::<fairq_config>::uninit();
    // SAFETY: a writable, aligned `fairq_config`.
    let mut c = unsafe {
        fairq_config_default(c.as_mut_ptr());
        c.assume_init()
    };
    c.enabled = true;
    c.max_tenants = 4;
    c.tenant_queue_capacity = 4;
    c.queue_capacity = 8;
    c.max_in_flight = 2;
    c.max_weight_classes = 4;
    c
}

fn request(key: u64) -> fairq_request {
    fairq_request {
        tenant_key: key,
        dimension: FAIRQ_DIM_USER,
        ..Default::default()
    }
}

/// A builder with every control the fixture's engine has.
fn builder(config: &fairq_config) -> *mut fairq_engine_builder {
    let mut builder = null_mut();
    let mut pool = u32::MAX;
    // SAFETY: valid pointers to locals and constants; a live builder.
    unsafe {
        assert_eq!(
            fairq_engine_builder_new(config, &mut builder, null_mut(), 0),
            FAIRQ_OK
        );
        let tier = TIER.as_ptr().cast();
        let status = fairq_engine_builder_add_tier(builder, tier, TIER.len(), TIER_WEIGHT);
        assert_eq!(status, FAIRQ_OK);
        for (i, max) in POOLS.into_iter().enumerate() {
            assert_eq!(
                fairq_engine_builder_add_pool(builder, max, &mut pool),
                FAIRQ_OK
            );
            assert_eq!(pool as usize, i);
        }
        assert_eq!(
            fairq_engine_builder_set_shedding(builder, 50, 1000, 1),
            FAIRQ_OK
        );
        assert_eq!(
            fairq_engine_builder_set_feedback(builder, 60_000, 50, 200),
            FAIRQ_OK
        );
    }
    builder
}

impl Fixture {
    fn new() -> Fixture {
        let config = config();
        let builder = builder(&config);
        let mut engine = null_mut();
        let mut key = 0u64;
        let mut result = fairq_enqueue_result::default();
        let mut grant = fairq_grant::default();
        // SAFETY: valid pointers to locals; a live builder and engine.
        let (granted, queued) = unsafe {
            assert_eq!(fairq_engine_builder_build(builder, &mut engine), FAIRQ_OK);
            assert_eq!(fairq_tenant_key(c"a".as_ptr(), 1, &mut key), FAIRQ_OK);
            let r = request(key);
            assert_eq!(fairq_enqueue_at(engine, &r, NOW, &mut result), FAIRQ_QUEUED);
            assert_eq!(fairq_next_grant_at(engine, NOW, &mut grant), FAIRQ_OK);
            assert_eq!(grant.ticket, result.ticket);
            let granted = grant.ticket;
            assert_eq!(fairq_enqueue_at(engine, &r, NOW, &mut result), FAIRQ_QUEUED);
            (granted, result.ticket)
        };
        Fixture {
            builder,
            engine,
            key,
            granted,
            queued,
            config,
            request: request(key),
            identity: fairq_identity {
                user: c"u".as_ptr(),
                user_len: 1,
                team: null(),
                team_len: 0,
                api_key: null(),
                api_key_len: 0,
                team_is_placeholder: false,
            },
            entry: fairq_weight_entry {
                tenant_key: key,
                weight: 3,
            },
            outs: [Slot::poisoned(), Slot::poisoned()],
            text: vec![0xA5; TEXT],
        }
    }

    fn outs_untouched(&self) -> bool {
        self.outs.iter().all(Slot::is_poisoned) && self.text[..] == vec![0xA5; TEXT][..]
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: the fixture's own engine and builder (or NULL once a call freed them).
        unsafe {
            fairq_engine_free(self.engine);
            fairq_engine_builder_free(self.builder);
        }
    }
}

/// What a test can observe of an engine (and, for the builder's exports, of the builder)
/// without changing it.
#[derive(Debug, PartialEq)]
struct Observed {
    stats: fairq_stats,
    weight: u32,
    weight_x: u32,
    enabled: bool,
    wakeup: (i32, u64),
    tier_weight: (i32, u32),
    pool_count: u32,
    /// Each pool, and one past the last pool.
    pools: Vec<PoolSeen>,
    builder: Option<ObservedBuilder>,
}

/// What shows of a builder: its message, and an engine it builds.
#[derive(Debug, PartialEq)]
struct ObservedBuilder {
    message: String,
    /// The built engine's pools (count, bounds), tier weights ("silver" is the one
    /// `fairq_engine_builder_add_tier` adds), and Prometheus text, which shows whether the
    /// starvation guard, the wait boost, load shedding and the indicators are on.
    pools: Vec<u32>,
    tiers: [(i32, u32); 2],
    metrics: String,
}

impl Observed {
    /// The parts that differ, before -> after (the whole would be pages of metrics text).
    fn differences(&self, after: &Observed) -> String {
        let mut out = Vec::new();
        let mut field = |name: &str, b: &dyn std::fmt::Debug, a: &dyn std::fmt::Debug| {
            let (b, a) = (format!("{b:?}"), format!("{a:?}"));
            if b != a {
                out.push(format!("{name}: {b} -> {a}"));
            }
        };
        let (b, a) = (self, after);
        field("stats", &b.stats, &a.stats);
        field("weight", &b.weight, &a.weight);
        field("weight_x", &b.weight_x, &a.weight_x);
        field("enabled", &b.enabled, &a.enabled);
        field("wakeup", &b.wakeup, &a.wakeup);
        field("tier_weight", &b.tier_weight, &a.tier_weight);
        field("pool_count", &b.pool_count, &a.pool_count);
        field("pools", &b.pools, &a.pools);
        if let (Some(b), Some(a)) = (&b.builder, &a.builder) {
            field("builder message", &b.message, &a.message);
            field("builder pools", &b.pools, &a.pools);
            field("builder tiers", &b.tiers, &a.tiers);
            let lines = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
            let (lb, la) = (lines(&b.metrics), lines(&a.metrics));
            let gone: Vec<_> = lb.iter().filter(|l| !la.contains(l)).collect();
            let new: Vec<_> = la.iter().filter(|l| !lb.contains(l)).collect();
            if !gone.is_empty() || !new.is_empty() {
                out.push(format!("builder metrics: -{gone:?} +{new:?}"));
            }
        }
        out.join("; ")
    }
}

/// A pool's `fairq_pool_get_stats` status and stats, and `fairq_pool_get_shedding` status and
/// stage (the error ratio as bits: it may be NaN).
type PoolSeen = (i32, fairq_pool_stats, i32, [u64; 6]);

fn observe_pools(engine: *mut fairq_engine) -> (u32, Vec<PoolSeen>) {
    let mut count = 0;
    // SAFETY: a live engine and local out-pointers.
    unsafe {
        assert_eq!(fairq_pool_count(engine, &mut count), FAIRQ_OK);
        let pools = (0..=count)
            .map(|i| {
                let mut stats = fairq_pool_stats::default();
                let mut shed = fairq_pool_shedding::default();
                let s1 = fairq_pool_get_stats(engine, i, &mut stats);
                let s2 = fairq_pool_get_shedding(engine, i, &mut shed);
                let shed = [
                    shed.last_error_ratio.to_bits(),
                    shed.cuts,
                    shed.reports_ok,
                    shed.reports_error,
                    u64::from(shed.limit),
                    u64::from(shed.shedding),
                ];
                (s1, stats, s2, shed)
            })
            .collect();
        (count, pools)
    }
}

fn tier_weight(engine: *mut fairq_engine, tier: &str) -> (i32, u32) {
    let mut weight = 0;
    // SAFETY: a live engine, a string and a local out-pointer.
    let status =
        unsafe { fairq_tier_weight(engine, tier.as_ptr().cast(), tier.len(), &mut weight) };
    (status, weight)
}

/// Whether to compare an engine each builder builds (its pools, tiers and Prometheus text):
/// natively only, as Miri takes seconds to build and render it, and what Miri looks for (a read
/// or write through a bad pointer) does not depend on it.
const BUILT_ENGINE: bool = !cfg!(miri);

fn observe_builder(builder: *mut fairq_engine_builder) -> ObservedBuilder {
    let mut message_needed = 0;
    let mut message = [0u8; 256];
    // SAFETY: a live builder, a local buffer and out-pointer.
    let status = unsafe {
        let buf = message.as_mut_ptr().cast();
        fairq_engine_builder_message(builder, buf, message.len(), &mut message_needed)
    };
    assert_eq!(status, FAIRQ_OK);
    let mut seen = ObservedBuilder {
        message: String::from_utf8(message[..message_needed - 1].to_vec()).expect("UTF-8"),
        pools: Vec::new(),
        tiers: [(0, 0); 2],
        metrics: String::new(),
    };
    if !BUILT_ENGINE {
        return seen;
    }
    let mut engine = null_mut();
    let mut needed = 0;
    let mut text = vec![0u8; TEXT];
    // SAFETY: a live builder, local buffers and out-pointers; the engine is freed here.
    unsafe {
        assert_eq!(fairq_engine_builder_build(builder, &mut engine), FAIRQ_OK);
        let (count, pools) = observe_pools(engine);
        assert_eq!(pools.len(), count as usize + 1);
        seen.pools = pools.iter().map(|p| p.1.max_in_flight).collect();
        seen.tiers = [tier_weight(engine, TIER), tier_weight(engine, "silver")];
        let buf = text.as_mut_ptr().cast();
        let status = fairq_metrics_prometheus(engine, buf, text.len(), &mut needed);
        fairq_engine_free(engine);
        assert_eq!(status, FAIRQ_OK);
    }
    seen.metrics = String::from_utf8(text[..needed - 1].to_vec()).expect("UTF-8");
    seen
}

fn observe(f: &Fixture, with_builder: bool) -> Observed {
    let mut stats = fairq_stats::default();
    let (mut weight, mut weight_x, mut enabled, mut wakeup) = (0, 0, false, 0);
    let mut key_x = 0;
    let (pool_count, pools) = observe_pools(f.engine);
    // SAFETY: the fixture's live engine and local out-pointers.
    unsafe {
        assert_eq!(fairq_get_stats(f.engine, &mut stats), FAIRQ_OK);
        assert_eq!(fairq_weight_of(f.engine, f.key, &mut weight), FAIRQ_OK);
        assert_eq!(fairq_tenant_key(c"x".as_ptr(), 1, &mut key_x), FAIRQ_OK);
        assert_eq!(fairq_weight_of(f.engine, key_x, &mut weight_x), FAIRQ_OK);
        assert_eq!(fairq_is_enabled(f.engine, &mut enabled), FAIRQ_OK);
        let status = fairq_next_wakeup_ns(f.engine, &mut wakeup);
        Observed {
            stats,
            weight,
            weight_x,
            enabled,
            wakeup: (status, wakeup),
            tier_weight: tier_weight(f.engine, TIER),
            pool_count,
            pools,
            builder: with_builder.then(|| observe_builder(f.builder)),
        }
    }
}

/// An export: its pointer arguments in order (as named in the header) and how it treats them,
/// the status its bad values give (`None`: it takes no value that can be bad), and a call.
struct Export {
    name: &'static str,
    pointers: &'static [(&'static str, Kind)],
    bad_values: Option<i32>,
    /// Calls the export on the fixture with `args`; `None` for a function without a status.
    call: fn(&mut Fixture, &Args) -> Option<i32>,
}

/// Entries of `fairq_indicators` the out-parameter slot holds.
const TOP_CAP: usize = 512 / std::mem::size_of::<fairq_indicators>();
/// Rows of `fairq_tenant_status` the out-parameter slot holds.
const STATUS_CAP: usize = 512 / std::mem::size_of::<fairq_tenant_status>();
/// An `order` and a `format` no status dump knows.
const BAD_ORDER: u32 = 2;
const BAD_FORMAT: u32 = 2;

/// `fairq_queue_status`'s totals and count, both in the second slot (the rows fill the first).
/// One pointer into the slot, offset: a second borrow of it would end the first's (Miri).
fn totals_and_count(f: &mut Fixture) -> (*mut fairq_status_totals, *mut usize) {
    const COUNT_AT: usize = 256;
    const _: () = assert!(std::mem::size_of::<fairq_status_totals>() <= COUNT_AT);
    let slot = f.outs[1].out::<u8>();
    (slot.cast(), slot.wrapping_add(COUNT_AT).cast())
}

/// The engine handle, good or bad. A misaligned one points into the live engine itself, so a
/// read through it would be a read of real memory at the wrong alignment (Miri reports it).
fn handle(f: &Fixture, a: &Args) -> *mut fairq_engine {
    a.aligns
        .borrow_mut()
        .insert(0, std::mem::align_of::<*mut fairq_engine>());
    match a.modes[0] {
        None => f.engine,
        Some(Bad::Null) => null_mut(),
        Some(Bad::Misaligned) => f.engine.cast::<u8>().wrapping_add(1).cast(),
    }
}

/// The builder handle, good or bad: as [`handle`], a misaligned one points into the live
/// builder.
fn builder_handle(f: &Fixture, a: &Args) -> *mut fairq_engine_builder {
    a.aligns
        .borrow_mut()
        .insert(0, std::mem::align_of::<*mut fairq_engine_builder>());
    match a.modes[0] {
        None => f.builder,
        Some(Bad::Null) => null_mut(),
        Some(Bad::Misaligned) => f.builder.cast::<u8>().wrapping_add(1).cast(),
    }
}

const STATUS_ONLY: &[(&str, Kind)] = &[];
const ENGINE_ONLY: &[(&str, Kind)] = &[("engine", Handle)];
const BUILDER_ONLY: &[(&str, Kind)] = &[("builder", Builder)];

fn exports() -> Vec<Export> {
    // Every closure: `a.ptr(i, ..)` for pointer argument `i`, in header order.
    // SAFETY (every `unsafe` below): the pointers are the fixture's live engine and storage,
    // NULL, or a misaligned pointer into writable junk, which every export must reject unread.
    vec![
        Export {
            name: "fairq_version",
            pointers: STATUS_ONLY,
            bad_values: None,
            call: |_, _| {
                assert!(!fairq_version().is_null());
                None
            },
        },
        Export {
            name: "fairq_now_ns",
            pointers: STATUS_ONLY,
            bad_values: None,
            call: |_, _| {
                fairq_now_ns();
                None
            },
        },
        Export {
            name: "fairq_status_str",
            pointers: STATUS_ONLY,
            bad_values: None,
            call: |_, a| {
                assert!(!fairq_status_str(a.val(0, 1234)).is_null());
                None
            },
        },
        Export {
            name: "fairq_reason_str",
            pointers: STATUS_ONLY,
            bad_values: None,
            call: |_, a| {
                assert!(!fairq_reason_str(a.val(0, 1234)).is_null());
                None
            },
        },
        Export {
            name: "fairq_dimension_str",
            pointers: STATUS_ONLY,
            bad_values: None,
            call: |_, a| {
                assert!(!fairq_dimension_str(a.val(0, 1234)).is_null());
                None
            },
        },
        Export {
            name: "fairq_config_default",
            pointers: &[("config", Optional)],
            bad_values: None,
            call: |f, a| {
                unsafe { fairq_config_default(a.mut_ptr(0, f.outs[0].out())) };
                None
            },
        },
        Export {
            name: "fairq_config_check",
            pointers: &[("config", Required), ("buf", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let mut config = f.config;
                config.max_in_flight = a.val(config.max_in_flight, 0);
                let buf = a.mut_ptr(1, f.outs[1].out::<c_char>());
                // The message is written on INVALID_CONFIG only: give it a separate buffer so
                // the "untouched" check holds for every other status.
                let len = if a.bad_values { 0 } else { 64 };
                Some(unsafe { fairq_config_check(a.ptr(0, &config), buf, len) })
            },
        },
        Export {
            name: "fairq_engine_new",
            pointers: &[("config", Required), ("engine_out", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let mut config = f.config;
                config.queue_capacity = a.val(config.queue_capacity, 0);
                let out = a.mut_ptr(1, f.outs[0].out::<*mut fairq_engine>());
                let status = unsafe { fairq_engine_new(a.ptr(0, &config), out) };
                if status == FAIRQ_OK {
                    // The new engine is not the fixture's: free it, and poison its slot again.
                    unsafe { fairq_engine_free(out.read()) };
                    f.outs[0] = Slot::poisoned();
                }
                Some(status)
            },
        },
        Export {
            name: "fairq_engine_free",
            pointers: ENGINE_ONLY,
            bad_values: None,
            call: |f, a| {
                let engine = handle(f, a);
                unsafe { fairq_engine_free(engine) };
                if engine == f.engine {
                    f.engine = null_mut(); // freed: the fixture must not free it again
                }
                None
            },
        },
        Export {
            name: "fairq_set_enabled",
            pointers: ENGINE_ONLY,
            bad_values: None,
            call: |f, a| Some(unsafe { fairq_set_enabled(handle(f, a), false) }),
        },
        Export {
            name: "fairq_is_enabled",
            pointers: &[("engine", Handle), ("enabled", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<bool>());
                Some(unsafe { fairq_is_enabled(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_tenant_key",
            pointers: &[("raw", Required), ("key_out", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let raw = a.ptr(0, c"b".as_ptr());
                let len = a.val(1, usize::MAX);
                let out = a.mut_ptr(1, f.outs[0].out::<u64>());
                Some(unsafe { fairq_tenant_key(raw, len, out) })
            },
        },
        Export {
            name: "fairq_resolve_tenant",
            pointers: &[
                ("engine", Handle),
                ("identity", Required),
                ("key_out", Required),
                ("dimension_out", Optional),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let mut identity = f.identity;
                if a.bad_values {
                    identity.user = BAD_UTF8.as_ptr().cast();
                    identity.user_len = BAD_UTF8.len();
                }
                let engine = handle(f, a);
                let key_out = a.mut_ptr(2, f.outs[0].out::<u64>());
                let dim_out = a.mut_ptr(3, f.outs[1].out::<u32>());
                Some(unsafe { fairq_resolve_tenant(engine, a.ptr(1, &identity), key_out, dim_out) })
            },
        },
        Export {
            name: "fairq_set_weight",
            pointers: &[("engine", Handle), ("raw", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let raw = a.ptr(1, c"x".as_ptr());
                Some(unsafe { fairq_set_weight(handle(f, a), raw, 1, a.val(5, 0)) })
            },
        },
        Export {
            name: "fairq_set_weight_key",
            pointers: ENGINE_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let key = a.val(f.key, 0);
                Some(unsafe { fairq_set_weight_key(handle(f, a), key, 5) })
            },
        },
        Export {
            name: "fairq_replace_weights",
            pointers: &[("engine", Handle), ("entries", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let mut entry = f.entry;
                entry.weight = a.val(entry.weight, 0);
                let entries = a.ptr(1, &entry);
                Some(unsafe { fairq_replace_weights(handle(f, a), entries, 1, 1) })
            },
        },
        Export {
            name: "fairq_weight_of",
            pointers: &[("engine", Handle), ("weight_out", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<u32>());
                Some(unsafe { fairq_weight_of(handle(f, a), a.val(f.key, 0), out) })
            },
        },
        Export {
            name: "fairq_tenant_granted",
            pointers: &[
                ("engine", Handle),
                ("grants_out", Required),
                ("cost_out", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let grants = a.mut_ptr(1, f.outs[0].out::<u64>());
                let cost = a.mut_ptr(2, f.outs[1].out::<u64>());
                let key = a.val(f.key, 0);
                Some(unsafe { fairq_tenant_granted(handle(f, a), key, grants, cost) })
            },
        },
        Export {
            name: "fairq_enqueue",
            pointers: &[
                ("engine", Handle),
                ("request", Required),
                ("result", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let mut r = f.request;
                r.dimension = a.val(r.dimension, 99);
                let out = a.mut_ptr(2, f.outs[0].out::<fairq_enqueue_result>());
                Some(unsafe { fairq_enqueue(handle(f, a), a.ptr(1, &r), out) })
            },
        },
        Export {
            name: "fairq_enqueue_at",
            pointers: &[
                ("engine", Handle),
                ("request", Required),
                ("result", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let mut r = f.request;
                r.cost = a.val(r.cost, 2_000_000);
                let out = a.mut_ptr(2, f.outs[0].out::<fairq_enqueue_result>());
                Some(unsafe { fairq_enqueue_at(handle(f, a), a.ptr(1, &r), NOW, out) })
            },
        },
        Export {
            name: "fairq_next_grant",
            pointers: &[("engine", Handle), ("grant", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_grant>());
                Some(unsafe { fairq_next_grant(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_next_grant_at",
            pointers: &[("engine", Handle), ("grant", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_grant>());
                Some(unsafe { fairq_next_grant_at(handle(f, a), NOW, out) })
            },
        },
        Export {
            name: "fairq_next_wakeup_ns",
            pointers: &[("engine", Handle), ("wakeup_out", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<u64>());
                Some(unsafe { fairq_next_wakeup_ns(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_complete",
            pointers: &[("engine", Handle), ("completion", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_completion>());
                let outcome = a.val(FAIRQ_OUTCOME_ADMITTED, 7);
                Some(unsafe { fairq_complete(handle(f, a), f.granted, outcome, 0, out) })
            },
        },
        Export {
            name: "fairq_complete_at",
            pointers: &[("engine", Handle), ("completion", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_completion>());
                let outcome = a.val(FAIRQ_OUTCOME_STILL_REFUSED, 7);
                Some(unsafe { fairq_complete_at(handle(f, a), f.granted, outcome, 0, NOW, out) })
            },
        },
        Export {
            name: "fairq_complete_with_cost",
            pointers: &[("engine", Handle), ("completion", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_completion>());
                let cost = a.val(3, 2_000_000);
                Some(unsafe { fairq_complete_with_cost(handle(f, a), f.granted, 0, 0, cost, out) })
            },
        },
        Export {
            name: "fairq_complete_with_cost_at",
            pointers: &[("engine", Handle), ("completion", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_completion>());
                let (ticket, cost) = (f.granted, a.val(3, 1_000_001));
                Some(unsafe {
                    fairq_complete_with_cost_at(handle(f, a), ticket, 0, 0, cost, NOW, out)
                })
            },
        },
        Export {
            name: "fairq_cancel",
            pointers: ENGINE_ONLY,
            bad_values: Some(FAIRQ_ERR_STALE_TICKET),
            call: |f, a| {
                let ticket = a.val(f.queued, f.queued ^ (1 << 40));
                Some(unsafe { fairq_cancel(handle(f, a), ticket) })
            },
        },
        Export {
            name: "fairq_cancel_at",
            pointers: ENGINE_ONLY,
            bad_values: Some(FAIRQ_ERR_STALE_TICKET),
            call: |f, a| {
                let ticket = a.val(f.granted, f.granted ^ (1 << 40));
                Some(unsafe { fairq_cancel_at(handle(f, a), ticket, NOW) })
            },
        },
        Export {
            name: "fairq_expire",
            pointers: &[("engine", Handle), ("refusal", Optional)],
            bad_values: Some(FAIRQ_ERR_TICKET_STATE),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_completion>());
                let ticket = a.val(f.queued, f.granted);
                Some(unsafe { fairq_expire(handle(f, a), ticket, out) })
            },
        },
        Export {
            name: "fairq_expire_at",
            pointers: &[("engine", Handle), ("refusal", Optional)],
            bad_values: Some(FAIRQ_ERR_STALE_TICKET),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_completion>());
                let ticket = a.val(f.queued, f.queued ^ (1 << 40));
                Some(unsafe { fairq_expire_at(handle(f, a), ticket, NOW, out) })
            },
        },
        Export {
            name: "fairq_get_stats",
            pointers: &[("engine", Handle), ("stats", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_stats>());
                Some(unsafe { fairq_get_stats(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_metrics_prometheus",
            pointers: &[("engine", Handle), ("buf", Required), ("needed", Optional)],
            bad_values: None,
            call: |f, a| {
                let len = f.text.len();
                let buf = a.mut_ptr(1, f.text.as_mut_ptr().cast::<c_char>());
                let needed = a.mut_ptr(2, f.outs[1].out::<usize>());
                Some(unsafe { fairq_metrics_prometheus(handle(f, a), buf, len, needed) })
            },
        },
        Export {
            name: "fairq_tenant_indicators",
            pointers: &[("engine", Handle), ("out", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_indicators>());
                let key = a.val(f.key, 0);
                Some(unsafe { fairq_tenant_indicators(handle(f, a), key, out) })
            },
        },
        Export {
            name: "fairq_tenant_indicators_at",
            pointers: &[("engine", Handle), ("out", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_indicators>());
                let key = a.val(f.key, 0);
                Some(unsafe { fairq_tenant_indicators_at(handle(f, a), key, NOW, out) })
            },
        },
        Export {
            name: "fairq_tick",
            pointers: &[("engine", Handle), ("report", Optional)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_tick_report>());
                Some(unsafe { fairq_tick(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_tick_at",
            pointers: &[("engine", Handle), ("report", Optional)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_tick_report>());
                Some(unsafe { fairq_tick_at(handle(f, a), NOW, out) })
            },
        },
        Export {
            name: "fairq_engine_builder_new",
            pointers: &[
                ("config", Required),
                ("builder_out", Required),
                ("buf", Optional),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let mut config = f.config;
                config.queue_capacity = a.val(config.queue_capacity, 0);
                let out = a.mut_ptr(1, f.outs[0].out::<*mut fairq_engine_builder>());
                let buf = a.mut_ptr(2, f.outs[1].out::<c_char>());
                // The message is written on INVALID_CONFIG only (as `fairq_config_check`).
                let len = if a.bad_values { 0 } else { 64 };
                let status = unsafe { fairq_engine_builder_new(a.ptr(0, &config), out, buf, len) };
                if status == FAIRQ_OK {
                    // Not the fixture's builder: free it, and poison its slot again.
                    unsafe { fairq_engine_builder_free(out.read()) };
                    f.outs[0] = Slot::poisoned();
                }
                Some(status)
            },
        },
        Export {
            name: "fairq_engine_builder_free",
            pointers: BUILDER_ONLY,
            bad_values: None,
            call: |f, a| {
                let builder = builder_handle(f, a);
                unsafe { fairq_engine_builder_free(builder) };
                if builder == f.builder {
                    f.builder = null_mut(); // freed: the fixture must not free it again
                }
                None
            },
        },
        Export {
            name: "fairq_engine_builder_message",
            pointers: &[
                ("builder", Builder),
                ("buf", Required),
                ("needed", Optional),
            ],
            bad_values: None,
            call: |f, a| {
                let builder = builder_handle(f, a);
                let buf = a.mut_ptr(1, f.outs[0].out::<c_char>());
                let needed = a.mut_ptr(2, f.outs[1].out::<usize>());
                Some(unsafe { fairq_engine_builder_message(builder, buf, 64, needed) })
            },
        },
        Export {
            name: "fairq_engine_builder_add_tier",
            pointers: &[("builder", Builder), ("name", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let name = a.val(&b"silver"[..], BAD_UTF8);
                let builder = builder_handle(f, a);
                let ptr = a.ptr(1, name.as_ptr().cast::<c_char>());
                Some(unsafe { fairq_engine_builder_add_tier(builder, ptr, name.len(), 3) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_starvation_guard",
            pointers: BUILDER_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let share = a.val(10, 99);
                let builder = builder_handle(f, a);
                Some(unsafe { fairq_engine_builder_set_starvation_guard(builder, 60, share) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_wait_boost",
            pointers: BUILDER_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let after_ms = a.val(1000, 5);
                let builder = builder_handle(f, a);
                Some(unsafe { fairq_engine_builder_set_wait_boost(builder, after_ms, 4) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_feedback",
            pointers: BUILDER_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let period_ms = a.val(120_000, 1000);
                let builder = builder_handle(f, a);
                Some(unsafe { fairq_engine_builder_set_feedback(builder, period_ms, 50, 200) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_feedback_thresholds",
            pointers: BUILDER_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let low = a.val(80, 5);
                let builder = builder_handle(f, a);
                Some(unsafe {
                    fairq_engine_builder_set_feedback_thresholds(builder, low, 120, 100)
                })
            },
        },
        Export {
            name: "fairq_engine_builder_add_pool",
            pointers: &[("builder", Builder), ("downstream_out", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let max = a.val(1, 0);
                let builder = builder_handle(f, a);
                let out = a.mut_ptr(1, f.outs[0].out::<u32>());
                Some(unsafe { fairq_engine_builder_add_pool(builder, max, out) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_shedding",
            pointers: BUILDER_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let window_ms = a.val(2000, 10);
                let builder = builder_handle(f, a);
                Some(unsafe { fairq_engine_builder_set_shedding(builder, 2, window_ms, 20) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_indicators",
            pointers: BUILDER_ONLY,
            // Off while the feedback controller is on is invalid.
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let on = a.val(true, false);
                Some(unsafe { fairq_engine_builder_set_indicators(builder_handle(f, a), on) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_indicator_top_k",
            pointers: BUILDER_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_CONFIG),
            call: |f, a| {
                let top_k = a.val(5, 5000);
                Some(unsafe {
                    fairq_engine_builder_set_indicator_top_k(builder_handle(f, a), top_k)
                })
            },
        },
        Export {
            name: "fairq_engine_builder_set_seats",
            pointers: BUILDER_ONLY,
            bad_values: None,
            call: |f, a| {
                let on = a.val(true, false);
                Some(unsafe { fairq_engine_builder_set_seats(builder_handle(f, a), on) })
            },
        },
        Export {
            name: "fairq_engine_builder_set_light_lane",
            pointers: BUILDER_ONLY,
            bad_values: None,
            call: |f, a| {
                let on = a.val(true, false);
                Some(unsafe { fairq_engine_builder_set_light_lane(builder_handle(f, a), on) })
            },
        },
        Export {
            name: "fairq_engine_builder_build",
            pointers: &[("builder", Builder), ("engine_out", Required)],
            bad_values: None,
            call: |f, a| {
                let builder = builder_handle(f, a);
                let out = a.mut_ptr(1, f.outs[0].out::<*mut fairq_engine>());
                let status = unsafe { fairq_engine_builder_build(builder, out) };
                if status == FAIRQ_OK {
                    // Not the fixture's engine: free it, and poison its slot again.
                    unsafe { fairq_engine_free(out.read()) };
                    f.outs[0] = Slot::poisoned();
                }
                Some(status)
            },
        },
        Export {
            name: "fairq_set_tier",
            pointers: &[("engine", Handle), ("raw", Required), ("tier", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let tier = a.val(TIER.as_bytes(), BAD_UTF8);
                let raw = a.ptr(1, c"x".as_ptr());
                let tier_ptr = a.ptr(2, tier.as_ptr().cast::<c_char>());
                Some(unsafe { fairq_set_tier(handle(f, a), raw, 1, tier_ptr, tier.len()) })
            },
        },
        Export {
            name: "fairq_set_tier_key",
            pointers: &[("engine", Handle), ("tier", Required)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let key = a.val(f.key, 0);
                let tier = a.ptr(1, TIER.as_ptr().cast::<c_char>());
                Some(unsafe { fairq_set_tier_key(handle(f, a), key, tier, TIER.len()) })
            },
        },
        Export {
            name: "fairq_tier_weight",
            pointers: &[
                ("engine", Handle),
                ("tier", Required),
                ("weight_out", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let tier = a.val(TIER.as_bytes(), BAD_UTF8);
                let tier_ptr = a.ptr(1, tier.as_ptr().cast::<c_char>());
                let out = a.mut_ptr(2, f.outs[0].out::<u32>());
                Some(unsafe { fairq_tier_weight(handle(f, a), tier_ptr, tier.len(), out) })
            },
        },
        Export {
            name: "fairq_enqueue_downstream",
            pointers: &[
                ("engine", Handle),
                ("request", Required),
                ("result", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let downstream = a.val(1, POOLS.len() as u32);
                let out = a.mut_ptr(2, f.outs[0].out::<fairq_enqueue_result>());
                let r = a.ptr(1, &f.request);
                Some(unsafe { fairq_enqueue_downstream(handle(f, a), r, downstream, out) })
            },
        },
        Export {
            name: "fairq_enqueue_downstream_at",
            pointers: &[
                ("engine", Handle),
                ("request", Required),
                ("result", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let downstream = a.val(1, POOLS.len() as u32);
                let out = a.mut_ptr(2, f.outs[0].out::<fairq_enqueue_result>());
                let r = a.ptr(1, &f.request);
                Some(unsafe { fairq_enqueue_downstream_at(handle(f, a), r, downstream, NOW, out) })
            },
        },
        Export {
            name: "fairq_pool_count",
            pointers: &[("engine", Handle), ("count_out", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<u32>());
                Some(unsafe { fairq_pool_count(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_pool_get_stats",
            pointers: &[("engine", Handle), ("stats", Required)],
            bad_values: Some(FAIRQ_NOT_FOUND),
            call: |f, a| {
                let downstream = a.val(0, POOLS.len() as u32);
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_pool_stats>());
                Some(unsafe { fairq_pool_get_stats(handle(f, a), downstream, out) })
            },
        },
        Export {
            name: "fairq_report_downstream",
            pointers: ENGINE_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let downstream = a.val(0, POOLS.len() as u32);
                Some(unsafe { fairq_report_downstream(handle(f, a), downstream, false) })
            },
        },
        Export {
            name: "fairq_report_downstream_at",
            pointers: ENGINE_ONLY,
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let downstream = a.val(1, POOLS.len() as u32);
                Some(unsafe { fairq_report_downstream_at(handle(f, a), downstream, true, NOW) })
            },
        },
        Export {
            name: "fairq_pool_get_shedding",
            pointers: &[("engine", Handle), ("out", Required)],
            bad_values: Some(FAIRQ_NOT_FOUND),
            call: |f, a| {
                let downstream = a.val(1, POOLS.len() as u32);
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_pool_shedding>());
                Some(unsafe { fairq_pool_get_shedding(handle(f, a), downstream, out) })
            },
        },
        Export {
            name: "fairq_fairness_get",
            pointers: &[("engine", Handle), ("out", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_fairness>());
                Some(unsafe { fairq_fairness_get(handle(f, a), out) })
            },
        },
        Export {
            name: "fairq_fairness_get_at",
            pointers: &[("engine", Handle), ("out", Required)],
            bad_values: None,
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_fairness>());
                Some(unsafe { fairq_fairness_get_at(handle(f, a), NOW, out) })
            },
        },
        Export {
            name: "fairq_fairness_top",
            pointers: &[
                ("engine", Handle),
                ("out", Required),
                ("count_out", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_indicators>());
                let count = a.mut_ptr(2, f.outs[1].out::<usize>());
                let cap = a.val(TOP_CAP, usize::MAX);
                Some(unsafe { fairq_fairness_top(handle(f, a), out, cap, count) })
            },
        },
        Export {
            name: "fairq_fairness_top_at",
            pointers: &[
                ("engine", Handle),
                ("out", Required),
                ("count_out", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let out = a.mut_ptr(1, f.outs[0].out::<fairq_indicators>());
                let count = a.mut_ptr(2, f.outs[1].out::<usize>());
                let cap = a.val(TOP_CAP, usize::MAX / 2);
                Some(unsafe { fairq_fairness_top_at(handle(f, a), NOW, out, cap, count) })
            },
        },
        Export {
            name: "fairq_queue_status",
            pointers: &[
                ("engine", Handle),
                ("totals", Optional),
                ("rows", Required),
                ("count", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let order = a.val(FAIRQ_STATUS_BY_DEPTH, BAD_ORDER);
                let (totals, count) = totals_and_count(f);
                let totals = a.mut_ptr(1, totals);
                let rows = a.mut_ptr(2, f.outs[0].out::<fairq_tenant_status>());
                let count = a.mut_ptr(3, count);
                Some(unsafe {
                    fairq_queue_status(handle(f, a), order, totals, rows, STATUS_CAP, count)
                })
            },
        },
        Export {
            name: "fairq_queue_status_at",
            pointers: &[
                ("engine", Handle),
                ("totals", Optional),
                ("rows", Required),
                ("count", Required),
            ],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let order = a.val(FAIRQ_STATUS_BY_OLDEST_WAIT, BAD_ORDER);
                let (totals, count) = totals_and_count(f);
                let totals = a.mut_ptr(1, totals);
                let rows = a.mut_ptr(2, f.outs[0].out::<fairq_tenant_status>());
                let count = a.mut_ptr(3, count);
                let e = handle(f, a);
                Some(unsafe {
                    fairq_queue_status_at(e, order, NOW, totals, rows, STATUS_CAP, count)
                })
            },
        },
        Export {
            name: "fairq_queue_status_text",
            pointers: &[("engine", Handle), ("buf", Required), ("needed", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let order = a.val(FAIRQ_STATUS_BY_DEPTH, BAD_ORDER);
                let len = f.text.len();
                let buf = a.mut_ptr(1, f.text.as_mut_ptr().cast::<c_char>());
                let needed = a.mut_ptr(2, f.outs[1].out::<usize>());
                let (e, json) = (handle(f, a), FAIRQ_STATUS_JSON);
                Some(unsafe { fairq_queue_status_text(e, order, 8, json, buf, len, needed) })
            },
        },
        Export {
            name: "fairq_queue_status_text_at",
            pointers: &[("engine", Handle), ("buf", Required), ("needed", Optional)],
            bad_values: Some(FAIRQ_ERR_INVALID_ARGUMENT),
            call: |f, a| {
                let format = a.val(FAIRQ_STATUS_TEXT, BAD_FORMAT);
                let len = f.text.len();
                let buf = a.mut_ptr(1, f.text.as_mut_ptr().cast::<c_char>());
                let needed = a.mut_ptr(2, f.outs[1].out::<usize>());
                let (e, order) = (handle(f, a), FAIRQ_STATUS_BY_DEPTH);
                Some(unsafe {
                    fairq_queue_status_text_at(e, order, 8, format, NOW, buf, len, needed)
                })
            },
        },
    ]
}

// ---------------------------------------------------------------- the header

/// The functions of `include/fairq.h` outside `#if defined(FAIRQ_FLEET)`, each with the names
/// of its pointer parameters in order.
fn header_functions() -> BTreeMap<String, Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/fairq.h");
    let header = std::fs::read_to_string(path).expect("include/fairq.h");
    let mut functions = BTreeMap::new();
    let mut in_fleet = false;
    let mut declaration = String::new();
    for line in header.lines() {
        let code = line.trim();
        if code == "#if defined(FAIRQ_FLEET)" {
            in_fleet = true;
            continue;
        }
        if code.starts_with('#') {
            // cbindgen closes each gated item with its own `#endif`.
            in_fleet = false;
            continue;
        }
        if in_fleet || code.starts_with("//") || code.starts_with('*') || code.starts_with("/*") {
            continue;
        }
        if declaration.is_empty() && !(code.contains("fairq_") && code.contains('(')) {
            continue;
        }
        declaration.push_str(code);
        declaration.push(' ');
        if !code.ends_with(';') {
            continue;
        }
        let open = declaration.find('(').expect("a parameter list");
        let name = declaration[..open]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
            .expect("a name")
            .to_string();
        let close = declaration.rfind(')').expect("a parameter list");
        let pointers = declaration[open + 1..close]
            .split(',')
            .filter(|p| p.contains('*'))
            .map(|p| {
                p.trim()
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .expect("a parameter name")
                    .to_string()
            })
            .collect();
        if name.starts_with("fairq_") {
            functions.insert(name, pointers);
        }
        declaration.clear();
    }
    functions
}

#[test]
#[cfg_attr(
    miri,
    ignore = "reads include/fairq.h, which Miri's isolation forbids; runs natively"
)]
fn the_table_lists_every_export_and_every_pointer_argument_of_the_header() {
    let header = header_functions();
    assert!(header.len() >= 35, "parsed too few functions: {header:?}");
    let table: BTreeMap<String, Vec<String>> = exports()
        .iter()
        .map(|e| {
            let names = e.pointers.iter().map(|(n, _)| n.to_string()).collect();
            (e.name.to_string(), names)
        })
        .collect();
    for (name, pointers) in &header {
        assert_eq!(
            table.get(name),
            Some(pointers),
            "{name}: add it to EXPORTS with these pointer arguments, in this order"
        );
    }
    for name in table.keys() {
        assert!(header.contains_key(name), "{name} is not in the header");
    }
    // The engine handle is always called `engine` and checked as a handle; the builder's,
    // `builder`.
    for e in exports() {
        for (i, (name, kind)) in e.pointers.iter().enumerate() {
            assert_eq!(*name == "engine", *kind == Handle, "{}: {name}", e.name);
            assert_eq!(*name == "builder", *kind == Builder, "{}: {name}", e.name);
            if matches!(kind, Handle | Builder) {
                assert_eq!(i, 0, "{}: the handle comes first", e.name);
            }
        }
    }
}

// ---------------------------------------------------------------- the harness

/// The status a check gives for a bad pointer of this kind.
fn expected(kind: Kind, bad: Bad) -> i32 {
    match (kind, bad) {
        (Handle | Builder | Required, Bad::Null) => FAIRQ_ERR_NULL,
        (Handle | Builder, Bad::Misaligned) => FAIRQ_ERR_INVALID_HANDLE,
        (_, Bad::Misaligned) => FAIRQ_ERR_INVALID_ARGUMENT,
        (Optional, Bad::Null) => unreachable!("NULL is allowed"),
    }
}

/// The bad pointers an argument can take: NULL where it is required, misaligned where its type
/// has an alignment above 1.
fn bad_modes(kind: Kind, align: usize) -> Vec<Bad> {
    let mut modes = Vec::new();
    if kind != Optional {
        modes.push(Bad::Null);
    }
    if align > 1 {
        modes.push(Bad::Misaligned);
    }
    modes
}

/// Every combination of good and bad pointers (each argument good or one of its bad modes).
fn combinations(choices: &[Vec<Bad>]) -> Vec<Vec<Option<Bad>>> {
    let mut out = vec![Vec::new()];
    for modes in choices {
        let mut next = Vec::new();
        for prefix in &out {
            for mode in std::iter::once(None).chain(modes.iter().copied().map(Some)) {
                let mut c = prefix.clone();
                c.push(mode);
                next.push(c);
            }
        }
        out = next;
    }
    out
}

/// At most one bad pointer per call: Miri interprets hundreds of times slower than native code.
const ONE_BAD_POINTER_ONLY: bool = cfg!(miri);

/// Runs one export through every combination; returns how many calls it made, and what went
/// wrong.
fn exercise(export: &Export) -> (usize, Vec<String>) {
    let mut fixture = Fixture::new();
    // A good call first: it must succeed (so an error below comes from the bad argument), and
    // it reports each pointer argument's alignment.
    let args = Args::new(vec![None; export.pointers.len()], false);
    let status = (export.call)(&mut fixture, &args);
    if let Some(status) = status {
        assert!(
            status >= 0,
            "{}: the good call failed: {status}",
            export.name
        );
    }
    let aligns = args.aligns.into_inner();
    assert_eq!(
        aligns.len(),
        export.pointers.len(),
        "{}: the call must pass every pointer through Args",
        export.name
    );
    let choices: Vec<Vec<Bad>> = export
        .pointers
        .iter()
        .enumerate()
        .map(|(i, &(_, kind))| match kind {
            // A handle is not passed through `Args::ptr`: it is misaligned into its object.
            Handle | Builder => vec![Bad::Null, Bad::Misaligned],
            _ => bad_modes(kind, aligns[&i]),
        })
        .collect();
    let mut calls = 0;
    let mut failures = Vec::new();
    // The builder's exports change the builder, not the engine: observe it too.
    let of_builder = export.pointers.first().is_some_and(|p| p.1 == Builder);
    fixture = Fixture::new();
    let mut before = observe(&fixture, of_builder);
    for modes in combinations(&choices) {
        if ONE_BAD_POINTER_ONLY && modes.iter().flatten().count() > 1 {
            continue;
        }
        for bad_values in [false, true] {
            if bad_values && export.bad_values.is_none() {
                continue;
            }
            let first_bad = modes
                .iter()
                .enumerate()
                .find_map(|(i, m)| m.map(|m| (i, m)));
            let want = match first_bad {
                Some((i, bad)) => Some(expected(export.pointers[i].1, bad)),
                None if bad_values => export.bad_values,
                None => None, // a good call: it changes the engine; checked above
            };
            let Some(want) = want else { continue };
            let args = Args::new(modes.clone(), bad_values);
            let status = (export.call)(&mut fixture, &args);
            calls += 1;
            let what = format!(
                "{}: pointers {modes:?}, bad values {bad_values}",
                export.name
            );
            let mut fail = |problem: String| failures.push(format!("{what}: {problem}"));
            match status {
                Some(status) if status != want => fail(format!("status {status}, want {want}")),
                _ => {}
            }
            if !args.junk_untouched() {
                fail("wrote through a misaligned pointer".into());
            }
            // The engine's own answers (a stale ticket, a granted ticket for expire) leave the
            // out-parameters untouched too, like every error.
            if !fixture.outs_untouched() {
                fail("wrote an out-parameter".into());
            }
            let mut after = observe(&fixture, of_builder);
            let mut message = None;
            if let (Some(b), Some(a)) = (&before.builder, &mut after.builder) {
                // A setter the builder rejects leaves the reason for `..._message`, by design.
                if status == Some(FAIRQ_ERR_INVALID_CONFIG) {
                    if a.message.is_empty() {
                        fail("rejected without a message".into());
                    }
                    message = Some(std::mem::replace(&mut a.message, b.message.clone()));
                }
            }
            if after != before {
                fail(format!("changed: {}", before.differences(&after)));
            }
            if after != before || !fixture.outs_untouched() {
                // Start again from a known state.
                fixture = Fixture::new();
                before = observe(&fixture, of_builder);
            } else if let (Some(b), Some(m)) = (&mut before.builder, message) {
                b.message = m;
            }
        }
    }
    (calls, failures)
}

/// A floor on the calls made, so a harness that silently skips cases fails.
const MIN_CALLS: usize = if cfg!(miri) { 100 } else { 500 };

#[test]
fn every_pointer_of_every_export_null_and_misaligned_changes_nothing() {
    let mut calls = 0;
    let mut failures = Vec::new();
    for export in exports() {
        let (n, mut f) = exercise(&export);
        calls += n;
        failures.append(&mut f);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{calls} calls with a bad pointer or value");
    assert!(calls >= MIN_CALLS, "only {calls} bad calls");
}
