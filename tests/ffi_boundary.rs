//! Drives every exported function with NULL pointers, a garbage engine handle, and random
//! garbage tickets, codes and lengths: each call must return an error status (never crash), and
//! the engine's books must still balance afterwards.
//!
//! Run under Miri too (`cargo +nightly miri test -p fairq --test ffi_boundary`), with a smaller
//! engine and fewer random rounds: Miri interprets hundreds of times slower than native code.

mod common;

use std::ptr::{null, null_mut};

use common::Rng;
use fairq::ffi::*;

/// Aligned, readable memory that is not an engine.
#[repr(C, align(128))]
struct Junk([u64; 2048]);

fn junk() -> Box<Junk> {
    let mut j = Box::new(Junk([0; 2048]));
    for (i, w) in j.0.iter_mut().enumerate() {
        *w = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1);
    }
    j
}

fn new_engine() -> *mut fairq_engine {
    let mut config = std::mem::MaybeUninit::<fairq_config>::uninit();
    let mut engine = null_mut();
    // SAFETY: valid pointers to local storage.
    unsafe {
        fairq_config_default(config.as_mut_ptr());
        let mut config = config.assume_init();
        config.enabled = true;
        config.max_in_flight = 4;
        if cfg!(miri) {
            // Every stats and metrics call walks the whole tenant table: keep it small.
            config.max_tenants = 8;
            config.tenant_queue_capacity = 16;
            config.queue_capacity = 64;
        }
        assert_eq!(fairq_engine_new(&config, &mut engine), FAIRQ_OK);
    }
    engine
}

/// Every function that takes an engine, called with `engine`; returns each status.
///
/// # Safety
/// `engine` is NULL, a live engine, or readable junk (the functions must cope with all three).
unsafe fn call_all(engine: *const fairq_engine) -> Vec<(&'static str, i32)> {
    let request = fairq_request {
        tenant_key: 7,
        dimension: FAIRQ_DIM_USER,
        ..Default::default()
    };
    let identity = fairq_identity {
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
    let mut result = fairq_enqueue_result::default();
    let mut grant = fairq_grant::default();
    let mut completion = fairq_completion::default();
    let mut stats = fairq_stats::default();
    let (mut a, mut b, mut n) = (0u64, 0u64, 0usize);
    let (mut w, mut flag) = (0u32, false);
    let mut buf = [0 as std::os::raw::c_char; 64];
    let mut totals = fairq_status_totals::default();
    // SAFETY: plain integers and bytes, for which all zeros is a value.
    let mut rows: [fairq_tenant_status; 2] = unsafe { std::mem::zeroed() };
    // SAFETY: every pointer below is NULL-free local storage; `engine` per the contract above.
    unsafe {
        vec![
            ("set_enabled", fairq_set_enabled(engine, true)),
            ("is_enabled", fairq_is_enabled(engine, &mut flag)),
            (
                "resolve_tenant",
                fairq_resolve_tenant(engine, &identity, &mut a, &mut w),
            ),
            ("set_weight", fairq_set_weight(engine, c"x".as_ptr(), 1, 2)),
            ("set_weight_key", fairq_set_weight_key(engine, 7, 2)),
            (
                "replace_weights",
                fairq_replace_weights(engine, &entry, 1, 1),
            ),
            ("weight_of", fairq_weight_of(engine, 7, &mut w)),
            (
                "tenant_granted",
                fairq_tenant_granted(engine, 7, &mut a, &mut b),
            ),
            ("enqueue", fairq_enqueue(engine, &request, &mut result)),
            (
                "enqueue_at",
                fairq_enqueue_at(engine, &request, 1, &mut result),
            ),
            ("next_grant", fairq_next_grant(engine, &mut grant)),
            ("next_grant_at", fairq_next_grant_at(engine, 1, &mut grant)),
            ("next_wakeup_ns", fairq_next_wakeup_ns(engine, &mut a)),
            (
                "complete",
                fairq_complete(engine, 99, 0, 0, &mut completion),
            ),
            (
                "complete_at",
                fairq_complete_at(engine, 99, 0, 0, 1, &mut completion),
            ),
            (
                "complete_with_cost",
                fairq_complete_with_cost(engine, 99, 0, 0, 1, &mut completion),
            ),
            (
                "complete_with_cost_at",
                fairq_complete_with_cost_at(engine, 99, 0, 0, 1, 1, &mut completion),
            ),
            ("cancel", fairq_cancel(engine, 99)),
            ("cancel_at", fairq_cancel_at(engine, 99, 1)),
            ("get_stats", fairq_get_stats(engine, &mut stats)),
            (
                "metrics_prometheus",
                fairq_metrics_prometheus(engine, buf.as_mut_ptr(), buf.len(), &mut n),
            ),
            (
                "queue_status",
                fairq_queue_status(engine, 0, &mut totals, rows.as_mut_ptr(), 2, &mut n),
            ),
            (
                "queue_status_at",
                fairq_queue_status_at(engine, 1, 1, &mut totals, rows.as_mut_ptr(), 2, &mut n),
            ),
            (
                "queue_status_text",
                fairq_queue_status_text(engine, 0, 2, 0, buf.as_mut_ptr(), buf.len(), &mut n),
            ),
            (
                "queue_status_text_at",
                fairq_queue_status_text_at(engine, 1, 2, 1, 1, buf.as_mut_ptr(), buf.len(), &mut n),
            ),
        ]
    }
}

#[test]
fn null_engine_gives_err_null_everywhere() {
    // SAFETY: NULL is part of every function's contract.
    for (name, status) in unsafe { call_all(null()) } {
        assert_eq!(status, FAIRQ_ERR_NULL, "{name}");
    }
    // SAFETY: as above.
    unsafe {
        fairq_engine_free(null_mut());
        fairq_config_default(null_mut());
        assert_eq!(fairq_config_check(null(), null_mut(), 0), FAIRQ_ERR_NULL);
        assert_eq!(fairq_engine_new(null(), null_mut()), FAIRQ_ERR_NULL);
        assert_eq!(fairq_tenant_key(null(), 1, null_mut()), FAIRQ_ERR_NULL);
    }
}

#[test]
fn garbage_engine_gives_invalid_handle_everywhere() {
    let junk = junk();
    let engine = (&*junk as *const Junk).cast::<fairq_engine>();
    // SAFETY: readable, aligned junk; the functions must reject it without using it.
    for (name, status) in unsafe { call_all(engine) } {
        assert_eq!(status, FAIRQ_ERR_INVALID_HANDLE, "{name}");
    }
    // SAFETY: as above; free must ignore it.
    unsafe { fairq_engine_free(engine.cast_mut()) };
    assert!(junk.0.iter().all(|&w| w != 0), "junk was written to");
}

#[test]
fn live_engine_answers_every_function() {
    let engine = new_engine();
    // SAFETY: a live engine.
    for (name, status) in unsafe { call_all(engine) } {
        assert!((-9..=7).contains(&status), "{name}: {status}");
        assert_ne!(status, FAIRQ_ERR_PANIC, "{name}");
        assert_ne!(status, FAIRQ_ERR_NULL, "{name}");
    }
    // SAFETY: last use.
    unsafe { fairq_engine_free(engine) };
}

/// The status dump with a random `order` and `format` (the known ones are 0 and 1), a random
/// row count and buffer length: an unknown code is `FAIRQ_ERR_INVALID_ARGUMENT` with nothing
/// written; a known one fills the rows, or the buffer or `needed` alone when it is too short.
///
/// # Safety
/// `engine` is a live engine.
unsafe fn status_dump_with_random_codes(engine: *mut fairq_engine, rng: &mut Rng, now: u64) {
    const UNTOUCHED: usize = 0xA5A5;
    let order = (rng.next() % 4) as u32;
    let format = (rng.next() % 4) as u32;
    let known = order <= 1 && format <= 1;
    let mut totals = fairq_status_totals::default();
    let mut poisoned = std::mem::MaybeUninit::<fairq_tenant_status>::uninit();
    // SAFETY: plain integers and bytes, for which any bit pattern is a value.
    let poisoned = unsafe {
        poisoned.as_mut_ptr().write_bytes(0xA5, 1);
        poisoned.assume_init()
    };
    let mut rows = [poisoned; 4];
    let cap = (rng.next() % 5) as usize;
    let mut count = UNTOUCHED;
    // SAFETY: a live engine (the caller's contract) and local storage for `cap <= 4` rows.
    let s = unsafe {
        fairq_queue_status_at(
            engine,
            order,
            now,
            &mut totals,
            rows.as_mut_ptr(),
            cap,
            &mut count,
        )
    };
    if order <= 1 {
        assert_eq!(s, FAIRQ_OK);
        assert!(
            count <= cap && count as u64 <= totals.busy_tenants,
            "{count}"
        );
        for row in &rows[..count] {
            assert!(
                row.tenant_key != 0 && row.queued + row.in_flight > 0,
                "{row:?}"
            );
        }
        assert!(rows[count..].iter().all(|r| *r == poisoned));
    } else {
        assert_eq!(s, FAIRQ_ERR_INVALID_ARGUMENT);
        assert_eq!(count, UNTOUCHED);
        assert_eq!(totals, fairq_status_totals::default());
        assert!(rows.iter().all(|r| *r == poisoned));
    }

    let mut buf = [0x5a as std::os::raw::c_char; 2048];
    let len = rng.next() as usize % (buf.len() + 1);
    let mut needed = UNTOUCHED;
    let k = (rng.next() % 6) as usize;
    // SAFETY: a live engine and a local buffer of at least `len` bytes.
    let s = unsafe {
        fairq_queue_status_text_at(
            engine,
            order,
            k,
            format,
            now,
            buf.as_mut_ptr(),
            len,
            &mut needed,
        )
    };
    let untouched = buf.iter().all(|&b| b == 0x5a);
    match s {
        FAIRQ_OK => {
            assert!(
                known && needed <= len && buf[needed - 1] == 0,
                "{needed} {len}"
            );
            assert!(buf[..needed - 1].iter().all(|&b| b != 0));
        }
        FAIRQ_ERR_BUFFER_TOO_SMALL => assert!(known && needed > len && untouched),
        _ => {
            assert_eq!(s, FAIRQ_ERR_INVALID_ARGUMENT);
            assert!(!known && needed == UNTOUCHED && untouched);
        }
    }
}

#[test]
fn random_tickets_codes_and_lengths_never_break_the_books() {
    let engine = new_engine();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut live: Vec<u64> = Vec::new();
    let mut now = 1_000_000_000u64;
    let rounds: u64 = if cfg!(miri) { 200 } else { 50_000 };
    for round in 0..rounds {
        now += 1_000;
        let roll = rng.next();
        // SAFETY: a live engine and local out-pointers throughout.
        unsafe {
            match roll % 6 {
                0 => {
                    let request = fairq_request {
                        tenant_key: rng.next() % 5,
                        dimension: (rng.next() % 10) as u32,
                        cost: (rng.next() % 1_200_000) as u32,
                        retry_after_ns: rng.next() % 3 * 1_000_000,
                        timeout_ns: rng.next() % 4 * 10_000_000,
                        user_data: round,
                    };
                    let mut result = fairq_enqueue_result::default();
                    let s = fairq_enqueue_at(engine, &request, now, &mut result);
                    assert!(
                        [FAIRQ_QUEUED, FAIRQ_REFUSED, FAIRQ_ERR_INVALID_ARGUMENT].contains(&s),
                        "{s}"
                    );
                    if s == FAIRQ_QUEUED {
                        live.push(result.ticket);
                    }
                }
                1 => {
                    let mut grant = fairq_grant::default();
                    let s = fairq_next_grant_at(engine, now, &mut grant);
                    assert!((0..=5).contains(&s), "{s}");
                    if s == FAIRQ_OK {
                        live.push(grant.ticket);
                    }
                }
                2 | 3 => {
                    // A real ticket, a mangled one, or pure garbage.
                    let ticket = match (live.is_empty(), rng.next() % 3) {
                        (false, 0) => live[(rng.next() as usize) % live.len()],
                        (false, 1) => {
                            live[(rng.next() as usize) % live.len()] ^ (1 << (rng.next() % 64))
                        }
                        _ => rng.next(),
                    };
                    let outcome = (rng.next() % 3) as u32;
                    let s = if roll % 2 == 0 {
                        fairq_complete_at(
                            engine,
                            ticket,
                            outcome,
                            rng.next() % 5_000_000,
                            now,
                            null_mut(),
                        )
                    } else {
                        fairq_cancel_at(engine, ticket, now)
                    };
                    assert!(
                        [
                            FAIRQ_OK,
                            FAIRQ_REQUEUED,
                            FAIRQ_REFUSED,
                            FAIRQ_ERR_STALE_TICKET,
                            FAIRQ_ERR_TICKET_STATE,
                            FAIRQ_ERR_INVALID_ARGUMENT,
                        ]
                        .contains(&s),
                        "{s}"
                    );
                }
                4 => {
                    let len = (rng.next() % 4) as usize;
                    let mut key = 0u64;
                    let raw = [b'a' as std::os::raw::c_char; 4];
                    let s = fairq_tenant_key(raw.as_ptr(), len, &mut key);
                    assert_eq!(
                        s,
                        if len == 0 {
                            FAIRQ_ERR_INVALID_ARGUMENT
                        } else {
                            FAIRQ_OK
                        }
                    );
                    let s = fairq_set_weight_key(engine, rng.next() % 5, (rng.next() % 4) as u32);
                    assert!(s <= FAIRQ_OK, "{s}");
                }
                _ => {
                    let mut buf = [0 as std::os::raw::c_char; 32];
                    let mut needed = 0usize;
                    let s = fairq_metrics_prometheus(
                        engine,
                        buf.as_mut_ptr(),
                        rng.next() as usize % 33,
                        &mut needed,
                    );
                    assert_eq!(s, FAIRQ_ERR_BUFFER_TOO_SMALL);
                    assert!(needed > 32);
                    assert!(!fairq_status_str(rng.next() as i32).is_null());
                    assert!(!fairq_reason_str(rng.next() as u32).is_null());
                    status_dump_with_random_codes(engine, &mut rng, now);
                }
            }
        }
        if live.len() > 4096 {
            live.drain(..2048);
        }
    }
    let mut stats = fairq_stats::default();
    // SAFETY: a live engine; then its last use.
    unsafe {
        assert_eq!(fairq_get_stats(engine, &mut stats), FAIRQ_OK);
        fairq_engine_free(engine);
    }
    assert_eq!(
        stats.enqueued,
        stats.queued
            + stats.in_flight
            + stats.completed
            + stats.cancelled
            + stats.expired
            + stats.refused_after_wait
    );
    assert!(stats.in_flight <= 4);
}
