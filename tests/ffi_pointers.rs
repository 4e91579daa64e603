//! Every pointer argument of every export, NULL and misaligned, and the error precedence.
//!
//! `EXPORTS` lists each function of `include/fairq.h` outside `FAIRQ_FLEET` with its pointer
//! arguments in order; a test checks that list against the header, so a new export, or a new
//! pointer argument, must be added here. For each export the harness calls it with every
//! combination of good and bad pointers (NULL where one is required, misaligned wherever the
//! type's alignment allows) and of good and bad values, and checks:
//! - the status is the first failed check's, in the order the header documents: the engine
//!   handle (`FAIRQ_ERR_NULL`, `FAIRQ_ERR_INVALID_HANDLE`), then the other pointers in argument
//!   order (`FAIRQ_ERR_NULL`, `FAIRQ_ERR_INVALID_ARGUMENT`), then values, then the engine's own
//!   answer;
//! - on an error nothing changed: the engine's stats, weights, enabled flag and wake-up are the
//!   same, no good out-parameter was written, and nothing was written through the misaligned
//!   pointer.
//!
//! Run under Miri too (`cargo +nightly miri test -p fairq --test ffi_pointers`), which reports
//! any read or write through a misaligned pointer as undefined behaviour. Miri runs the cases
//! with at most one bad pointer (each pointer NULL and misaligned, with good and bad values);
//! the native run adds every combination of several bad pointers, for the precedence.

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

/// A live engine in a known state, the inputs a call needs, and poisoned out-parameters.
struct Fixture {
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

impl Fixture {
    fn new() -> Fixture {
        let config = config();
        let mut engine = null_mut();
        let mut key = 0u64;
        let mut result = fairq_enqueue_result::default();
        let mut grant = fairq_grant::default();
        // SAFETY: valid pointers to locals; a live engine.
        let (granted, queued) = unsafe {
            assert_eq!(fairq_engine_new(&config, &mut engine), FAIRQ_OK);
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
        // SAFETY: the fixture's own engine (or NULL once a call freed it).
        unsafe { fairq_engine_free(self.engine) };
    }
}

/// What a test can observe of an engine without changing it.
#[derive(Debug, PartialEq)]
struct Observed {
    stats: fairq_stats,
    weight: u32,
    weight_x: u32,
    enabled: bool,
    wakeup: (i32, u64),
}

fn observe(f: &Fixture) -> Observed {
    let mut stats = fairq_stats::default();
    let (mut weight, mut weight_x, mut enabled, mut wakeup) = (0, 0, false, 0);
    let mut key_x = 0;
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

const STATUS_ONLY: &[(&str, Kind)] = &[];
const ENGINE_ONLY: &[(&str, Kind)] = &[("engine", Handle)];

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
    // The engine handle is always called `engine` and checked as a handle.
    for e in exports() {
        for (i, (name, kind)) in e.pointers.iter().enumerate() {
            assert_eq!(*name == "engine", *kind == Handle, "{}: {name}", e.name);
            if *kind == Handle {
                assert_eq!(i, 0, "{}: the handle comes first", e.name);
            }
        }
    }
}

// ---------------------------------------------------------------- the harness

/// The status a check gives for a bad pointer of this kind.
fn expected(kind: Kind, bad: Bad) -> i32 {
    match (kind, bad) {
        (Handle, Bad::Null) | (Required, Bad::Null) => FAIRQ_ERR_NULL,
        (Handle, Bad::Misaligned) => FAIRQ_ERR_INVALID_HANDLE,
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
            // The handle is not passed through `Args::ptr`: it is misaligned into the engine.
            Handle => vec![Bad::Null, Bad::Misaligned],
            _ => bad_modes(kind, aligns[&i]),
        })
        .collect();
    let mut calls = 0;
    let mut failures = Vec::new();
    fixture = Fixture::new();
    let mut before = observe(&fixture);
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
            let after = observe(&fixture);
            if after != before {
                fail(format!("the engine changed: {before:?} -> {after:?}"));
            }
            if after != before || !fixture.outs_untouched() {
                // Start again from a known state.
                fixture = Fixture::new();
                before = observe(&fixture);
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
