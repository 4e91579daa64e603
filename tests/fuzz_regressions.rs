//! Inputs the fuzz targets (`fuzz/`) found, replayed as plain tests. Each test says what the
//! target checked, what went wrong, and why.

use std::ptr::null_mut;

use fairq::ffi::*;

fn engine() -> *mut fairq_engine {
    let mut config = std::mem::MaybeUninit::<fairq_config>::uninit();
    let mut engine = null_mut();
    // SAFETY: valid pointers to local storage.
    unsafe {
        fairq_config_default(config.as_mut_ptr());
        let mut config = config.assume_init();
        config.enabled = true;
        assert_eq!(fairq_engine_new(&config, &mut engine), FAIRQ_OK);
    }
    engine
}

/// 8-aligned storage for a `fairq_completion`, one byte off: misaligned for it.
#[repr(C, align(8))]
struct Storage([u8; 64]);

/// `fairq_expire_at` wrote its `refusal` without checking its alignment, after the ticket had
/// already ended (`fairq_complete_at` rejects the same pointer before doing anything). The c_abi
/// target's contract check: a misaligned out-pointer is `FAIRQ_ERR_INVALID_ARGUMENT`, nothing
/// changes and nothing is written.
#[test]
fn expire_rejects_a_misaligned_refusal_before_ending_the_ticket() {
    let engine = engine();
    let request = fairq_request {
        tenant_key: 7,
        ..Default::default()
    };
    let mut result = fairq_enqueue_result::default();
    let mut storage = Storage([0xA5; 64]);
    let misaligned = storage
        .0
        .as_mut_ptr()
        .wrapping_add(1)
        .cast::<fairq_completion>();
    let mut refusal = fairq_completion::default();
    let mut stats = fairq_stats::default();
    // SAFETY: a live engine and local storage; `misaligned` is the argument under test, which
    // the function must reject without writing through it.
    unsafe {
        assert_eq!(
            fairq_enqueue_at(engine, &request, 1, &mut result),
            FAIRQ_QUEUED
        );
        assert_eq!(
            fairq_expire_at(engine, result.ticket, 2, misaligned),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
        assert!(storage.0.iter().all(|&b| b == 0xA5), "wrote through it");
        assert_eq!(fairq_get_stats(engine, &mut stats), FAIRQ_OK);
        assert_eq!(
            (stats.queued, stats.expired),
            (1, 0),
            "the ticket ended anyway"
        );
        assert_eq!(
            fairq_expire_at(engine, result.ticket, 3, &mut refusal),
            FAIRQ_OK
        );
        assert_eq!(refusal.reason, FAIRQ_REASON_DEADLINE_EXCEEDED);
        fairq_engine_free(engine);
    }
}

/// A tenant's head with a Retry-After was cancelled; the next request of the same tenant, ready
/// at once, must not wait out the cancelled one's Retry-After. Found by the c_abi target's drain
/// (every request must end once every Retry-After has passed).
///
/// Fails on today's engine: the tenant stays parked in the timing wheel under the cancelled
/// head's time, and the entry is swept only when the wheel wakes the tenant, up to one
/// revolution of the wheel later (about 268 ms; 193 ms here). Run it with `--ignored`.
#[test]
#[ignore = "engine defect: a cancelled head keeps its tenant parked (fails until fixed)"]
fn a_cancelled_heads_retry_after_does_not_hold_back_the_next_request() {
    use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Request, TenantKey};
    const MS: u64 = 1_000_000;
    let engine = Engine::new(Config {
        enabled: true,
        ..Config::default()
    })
    .unwrap();
    let tenant = TenantKey::from_raw(b"acme");
    let t0 = 1_000 * MS;
    let mut head = Request::new(tenant, Dimension::User);
    head.retry_after_ns = 1_000 * MS;
    let Ok(Enqueued::Queued { ticket: first, .. }) = engine.enqueue_at(&head, t0) else {
        panic!("queued")
    };
    let next = Request::new(tenant, Dimension::User);
    let Ok(Enqueued::Queued { ticket: second, .. }) = engine.enqueue_at(&next, t0) else {
        panic!("queued")
    };
    assert!(matches!(engine.next_grant_at(t0), NextGrant::Empty));
    engine.cancel_at(first, t0 + MS).unwrap();
    let mut now = t0 + MS;
    let granted_at = loop {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                assert_eq!(g.ticket, second);
                break now;
            }
            NextGrant::Empty => now = engine.next_wakeup_ns().expect("parked").max(now + 1),
            other => panic!("{other:?}"),
        }
    };
    assert!(
        granted_at <= t0 + 10 * MS,
        "the next request, ready at once, was granted {} ms after the cancel",
        (granted_at - t0 - MS) / MS
    );
}

/// A request queued near the end of the clock (`now` close to `u64::MAX` ns) must still end:
/// granted, or expired. Found by the c_abi target's drain (its clock reaches `u64::MAX`).
///
/// Fails on today's engine: once the timing wheel's cursor is at the clock's last tick, a tenant
/// parks in the tick after it, which no time reaches, so no `next_grant` ever wakes it, and
/// `next_wakeup_ns` reports 0 (the next tick's start overflows). What the engine promises near
/// `u64::MAX` is still to be decided and documented; run it with `--ignored`.
#[test]
#[ignore = "engine defect: a request parked in the clock's last tick never ends (fails until fixed)"]
fn a_request_queued_at_the_end_of_the_clock_still_ends() {
    use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Request, TenantKey};
    let engine = Engine::new(Config {
        enabled: true,
        ..Config::default()
    })
    .unwrap();
    // A request parked by its Retry-After long ago, found expired at `now`: the wheel's cursor
    // moves to `now`'s tick, the clock's last.
    let now = u64::MAX - 65_431;
    let mut early = Request::new(TenantKey::from_raw(b"early"), Dimension::User);
    early.retry_after_ns = 1_282;
    assert!(matches!(
        engine.enqueue_at(&early, 1_000_000_000),
        Ok(Enqueued::Queued { .. })
    ));
    assert!(matches!(engine.next_grant_at(now), NextGrant::Expired(_)));
    let mut request = Request::new(TenantKey::from_raw(b"acme"), Dimension::User);
    request.retry_after_ns = 117_000_000;
    assert!(matches!(
        engine.enqueue_at(&request, now),
        Ok(Enqueued::Queued { .. })
    ));
    let end = engine.next_grant_at(u64::MAX);
    assert!(
        matches!(end, NextGrant::Granted(_) | NextGrant::Expired(_)),
        "at u64::MAX: {end:?}, next_wakeup_ns {:?}",
        engine.next_wakeup_ns()
    );
}
