//! The contract `include/fairq.h` states for the cases it used to leave open, through the C
//! ABI: tenant key 0, the 4 GiB table cap, a cancel racing a still-refused completion, times
//! near `UINT64_MAX` and a clock that goes backwards, and what `fairq_get_stats` guarantees
//! while other calls run. (The error precedence is `tests/ffi_pointers.rs`.)

use std::collections::HashSet;
use std::os::raw::c_char;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use fairq::ffi::*;

/// An engine handle that may be shared by threads (the header allows every call but
/// `fairq_engine_free` from any thread).
#[derive(Clone, Copy)]
struct Handle(*mut fairq_engine);
// SAFETY: `fairq_engine` is `Send + Sync` (checked at compile time in `src/ffi/types.rs`); the
// tests free the handle only after joining every thread that used it.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    /// The pointer (a method, so a closure captures the whole `Send` handle).
    fn get(self) -> *mut fairq_engine {
        self.0
    }
}

fn default_config() -> fairq_config {
    let mut c = std::mem::MaybeUninit::<fairq_config>::uninit();
    // SAFETY: a writable, aligned `fairq_config`.
    unsafe {
        fairq_config_default(c.as_mut_ptr());
        c.assume_init()
    }
}

fn new_engine(change: impl FnOnce(&mut fairq_config)) -> Handle {
    let mut c = default_config();
    c.enabled = true;
    change(&mut c);
    let mut engine = null_mut();
    // SAFETY: local pointers.
    assert_eq!(unsafe { fairq_engine_new(&c, &mut engine) }, FAIRQ_OK);
    Handle(engine)
}

fn free(e: Handle) {
    // SAFETY: the test's own engine, used by no thread any more.
    unsafe { fairq_engine_free(e.get()) };
}

fn key(raw: &str) -> u64 {
    let mut k = 0;
    // SAFETY: `raw` is readable for its length; `k` is a local.
    assert_eq!(
        unsafe { fairq_tenant_key(raw.as_ptr().cast(), raw.len(), &mut k) },
        FAIRQ_OK
    );
    k
}

fn request(key: u64) -> fairq_request {
    fairq_request {
        tenant_key: key,
        dimension: FAIRQ_DIM_USER,
        ..Default::default()
    }
}

fn enqueue(e: Handle, r: fairq_request, now: u64) -> (i32, fairq_enqueue_result) {
    let mut out = fairq_enqueue_result::default();
    // SAFETY: a live engine, local pointers.
    let s = unsafe { fairq_enqueue_at(e.get(), &r, now, &mut out) };
    (s, out)
}

fn next(e: Handle, now: u64) -> (i32, fairq_grant) {
    let mut g = fairq_grant::default();
    // SAFETY: a live engine, a local out-pointer.
    let s = unsafe { fairq_next_grant_at(e.get(), now, &mut g) };
    (s, g)
}

fn complete(e: Handle, ticket: u64, outcome: u32, retry_after: u64, now: u64) -> i32 {
    // SAFETY: a live engine; no completion wanted.
    unsafe { fairq_complete_at(e.get(), ticket, outcome, retry_after, now, null_mut()) }
}

fn stats(e: Handle) -> fairq_stats {
    let mut s = fairq_stats::default();
    // SAFETY: a live engine, a local out-pointer.
    assert_eq!(unsafe { fairq_get_stats(e.get(), &mut s) }, FAIRQ_OK);
    s
}

fn ended(s: &fairq_stats) -> u64 {
    s.completed + s.cancelled + s.expired + s.refused_after_wait
}

fn assert_conserved(e: Handle) {
    let s = stats(e);
    assert_eq!(s.enqueued, ended(&s) + s.queued + s.in_flight, "{s:?}");
}

/// Grants and completes everything ready at `now`; returns (grants, expired).
fn drain(e: Handle, now: u64) -> (u64, u64) {
    let (mut grants, mut expired) = (0, 0);
    loop {
        match next(e, now) {
            (FAIRQ_OK, g) => {
                assert_eq!(
                    complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, now),
                    FAIRQ_OK
                );
                grants += 1;
            }
            (FAIRQ_EXPIRED, _) => expired += 1,
            (FAIRQ_EMPTY, _) => return (grants, expired),
            other => panic!("drain: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- tenant key 0

#[test]
fn key_zero_names_no_tenant_anywhere() {
    let e = new_engine(|_| {});
    let a = key("a");
    assert_ne!(a, 0);
    let before = stats(e);
    let (mut w, mut x, mut y) = (0u32, 0u64, 0u64);
    let mut ind = fairq_indicators::default();
    let zero = fairq_weight_entry {
        tenant_key: 0,
        weight: 2,
    };
    // SAFETY: a live engine, local pointers.
    unsafe {
        assert_eq!(
            fairq_set_weight_key(e.get(), 0, 2),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            fairq_weight_of(e.get(), 0, &mut w),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            fairq_tenant_granted(e.get(), 0, &mut x, &mut y),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            fairq_tenant_indicators_at(e.get(), 0, 1, &mut ind),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            fairq_replace_weights(e.get(), &zero, 1, 1),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
    }
    assert_eq!((w, x, y), (0, 0, 0), "out-parameters written on an error");
    // Key 1 is a tenant like any other: 0 is not an alias for it.
    // SAFETY: as above.
    unsafe {
        assert_eq!(fairq_set_weight_key(e.get(), 1, 3), FAIRQ_OK);
        assert_eq!(fairq_weight_of(e.get(), 1, &mut w), FAIRQ_OK);
    }
    assert_eq!(w, 3);
    // In a request, 0 means "no identifier": a refusal, not an error, counted as no_tenant.
    let (s, r) = enqueue(e, request(0), 1);
    assert_eq!(s, FAIRQ_REFUSED);
    assert_eq!((r.reason, r.ticket), (FAIRQ_REASON_NO_TENANT, 0));
    let after = stats(e);
    assert_eq!(after.enqueued, before.enqueued);
    assert_eq!(
        after.refused[FAIRQ_REASON_NO_TENANT as usize],
        before.refused[FAIRQ_REASON_NO_TENANT as usize] + 1
    );
    free(e);
}

#[test]
fn tenant_keys_are_never_zero() {
    // Hashing never gives 0 (a hash of 0 would become 1), and resolving uses the same hash.
    let mut seen = HashSet::new();
    for i in 0..20_000u32 {
        let k = key(&format!("tenant-{i}"));
        assert_ne!(k, 0);
        seen.insert(k);
    }
    assert_eq!(seen.len(), 20_000, "keys collide");
    let e = new_engine(|_| {});
    let user = "someone";
    let identity = fairq_identity {
        user: user.as_ptr().cast::<c_char>(),
        user_len: user.len(),
        team: std::ptr::null(),
        team_len: 0,
        api_key: std::ptr::null(),
        api_key_len: 0,
        team_is_placeholder: false,
    };
    let (mut k, mut dim) = (0u64, 99u32);
    // SAFETY: a live engine, local pointers.
    let s = unsafe { fairq_resolve_tenant(e.get(), &identity, &mut k, &mut dim) };
    assert_eq!(s, FAIRQ_OK);
    assert_eq!((k, dim), (key(user), FAIRQ_TENANT_DIM_USER));
    free(e);
}

// ---------------------------------------------------------------- the table cap

/// The header's formula for the table bytes (no bulkheads from C).
fn header_table_bytes(c: &fairq_config) -> u64 {
    let m = u64::from(c.max_tenants);
    let q = u64::from(c.tenant_queue_capacity);
    let s = m + m / 4 + 1;
    let r = q + q / 2 + 1;
    s * (640 + 16 * r)
        + u64::from(c.max_weight_classes) * (256 + 16 * s)
        + 64 * (u64::from(c.queue_capacity) + u64::from(c.max_in_flight))
}

fn check(c: &fairq_config) -> (i32, String) {
    let mut buf = [0 as c_char; 512];
    // SAFETY: a local config and buffer.
    let s = unsafe { fairq_config_check(c, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: `fairq_config_check` NUL-terminates what it writes; the buffer started zeroed.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    (s, text.to_string_lossy().into_owned())
}

const CAP: u64 = 4 << 30;

#[test]
fn the_table_cap_and_the_limits_the_header_states() {
    let base = default_config();
    let with = |m: u32, q: u32| fairq_config {
        max_tenants: m,
        tenant_queue_capacity: q,
        ..base
    };
    // The examples in the header, each at its limit and one step past it.
    for (fits, over) in [
        (with(4_194_304, 1), with(4_194_304, 2)),
        (with(135, 1_048_576), with(136, 1_048_576)),
    ] {
        assert!(header_table_bytes(&fits) <= CAP);
        assert!(header_table_bytes(&over) > CAP);
        assert_eq!(check(&fits), (FAIRQ_OK, String::new()));
        let (s, message) = check(&over);
        assert_eq!(s, FAIRQ_ERR_INVALID_CONFIG, "{message}");
        assert!(
            message.starts_with("invalid config `max_tenants x tenant_queue_capacity`"),
            "{message}"
        );
        let bytes = header_table_bytes(&over).to_string();
        assert!(message.contains(&bytes), "{message} lacks {bytes}");
        assert!(message.contains("4 GiB"), "{message}");
    }
    // Both documented maxima at once: far over the cap.
    let (s, message) = check(&with(4_194_304, 1_048_576));
    assert_eq!(s, FAIRQ_ERR_INVALID_CONFIG);
    assert!(
        message.contains("max_tenants x tenant_queue_capacity"),
        "{message}"
    );
    // When the weight-class rings are the largest table, the message names their factors.
    let classes = fairq_config {
        max_tenants: 4_194_304,
        tenant_queue_capacity: 1,
        max_weight_classes: 64,
        ..base
    };
    let (s, message) = check(&classes);
    assert_eq!(s, FAIRQ_ERR_INVALID_CONFIG);
    assert!(
        message.starts_with("invalid config `max_weight_classes x max_tenants`"),
        "{message}"
    );
}

#[test]
fn the_header_formula_is_the_engine_s() {
    // Random configs within the field ranges: the header's formula gives the engine's bytes.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..2_000 {
        let config = fairq::Config {
            max_tenants: 1 + rand(4_194_304) as u32,
            tenant_queue_capacity: 1 + rand(1_048_576) as u32,
            queue_capacity: 1 + rand(16_777_216) as u32,
            max_in_flight: 1 + rand(1_048_576) as u32,
            max_weight_classes: 1 + rand(64) as u32,
            ..fairq::Config::default()
        };
        let c = fairq_config {
            max_tenants: config.max_tenants,
            tenant_queue_capacity: config.tenant_queue_capacity,
            queue_capacity: config.queue_capacity,
            max_in_flight: config.max_in_flight,
            max_weight_classes: config.max_weight_classes,
            ..default_config()
        };
        assert_eq!(config.table_bytes(), header_table_bytes(&c), "{config:?}");
        let over = config.table_bytes() > CAP;
        assert_eq!(config.validate().is_err(), over, "{config:?}");
        assert_eq!(check(&c).0 == FAIRQ_ERR_INVALID_CONFIG, over, "{config:?}");
    }
}

// ---------------------------------------------------------------- cancel during a requeue

/// `fairq_complete(still refused)` racing `fairq_cancel` on one grant, with the tenant's queue
/// holding cancelled entries: the pairs of statuses the header allows, and one end each time.
#[test]
fn a_cancel_racing_a_requeue_gives_the_documented_statuses() {
    const ITERATIONS: u64 = 3_000;
    let barrier = Arc::new(Barrier::new(2));
    let mut seen = std::collections::BTreeMap::new();
    for iteration in 0..ITERATIONS {
        let e = new_engine(|c| {
            c.max_tenants = 4;
            c.tenant_queue_capacity = 2;
            c.queue_capacity = 16;
            c.max_in_flight = 1;
            c.tenant_idle_ms = 0;
        });
        let a = key("a");
        let (_, first) = enqueue(e, request(a), 0);
        let (s, g) = next(e, 0);
        assert_eq!((s, g.ticket), (FAIRQ_OK, first.ticket));
        assert_eq!(enqueue(e, request(a), 0).0, FAIRQ_QUEUED); // a live second request
        for _ in 0..2 {
            let (s, r) = enqueue(e, request(a), 0);
            assert_eq!(s, FAIRQ_QUEUED);
            // SAFETY: a live engine.
            assert_eq!(unsafe { fairq_cancel_at(e.get(), r.ticket, 0) }, FAIRQ_OK);
        }
        let canceller = {
            let barrier = barrier.clone();
            let ticket = g.ticket;
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..iteration % 89 {
                    std::hint::spin_loop();
                }
                // SAFETY: a live engine, freed only after this thread is joined.
                unsafe { fairq_cancel_at(e.get(), ticket, 1) }
            })
        };
        barrier.wait();
        let completed = complete(e, g.ticket, FAIRQ_OUTCOME_STILL_REFUSED, 0, 1);
        let cancelled = canceller.join().unwrap();
        let pair = (completed, cancelled);
        assert!(
            [
                (FAIRQ_ERR_STALE_TICKET, FAIRQ_OK), // the cancel ended it first
                (FAIRQ_REQUEUED, FAIRQ_OK),         // the cancel ended the requeued ticket
                (FAIRQ_REFUSED, FAIRQ_ERR_STALE_TICKET), // the requeue did not fit: it ended
            ]
            .contains(&pair),
            "iteration {iteration}: complete {completed}, cancel {cancelled}"
        );
        *seen.entry(pair).or_insert(0u64) += 1;
        // Whatever the order, the request ended once: cancelled, or refused after waiting.
        let s = stats(e);
        assert_eq!(s.cancelled + s.refused_after_wait, 3, "{s:?}");
        assert_eq!((s.queued, s.in_flight), (1, 0), "{s:?}");
        assert_eq!(drain(e, 2), (1, 0));
        assert_conserved(e);
        free(e);
    }
    println!("(complete, cancel) statuses seen: {seen:?}");
}

// ---------------------------------------------------------------- time at its limits

/// Every time-taking call at `UINT64_MAX - small` and at `UINT64_MAX`: deadlines and
/// not-before times saturate, nothing wraps, errs, panics or is stranded in the queue, and the
/// books balance.
#[test]
fn times_near_u64_max_saturate() {
    const STEP: u64 = 1 << 19; // half a millisecond, about
    for base in [
        u64::MAX - 10 * STEP,
        u64::MAX - 4 * STEP - 3,
        u64::MAX - 1_000,
        u64::MAX - 10,
        u64::MAX,
    ] {
        let e = new_engine(|c| c.max_in_flight = 2);
        let (a, b) = (key("a"), key("b"));
        let at = |k: u64, retry_after_ns: u64| fairq_request {
            retry_after_ns,
            timeout_ns: u64::MAX,
            ..request(k)
        };
        for (k, retry) in [(a, 0), (b, 7), (a, 5 * STEP), (b, 3)] {
            assert_eq!(
                enqueue(e, at(k, retry), base).0,
                FAIRQ_QUEUED,
                "base {base}"
            );
        }
        // A Retry-After as large as they come does not fit the budget.
        let (s, r) = enqueue(e, at(a, u64::MAX), base);
        assert_eq!(
            (s, r.reason),
            (FAIRQ_REFUSED, FAIRQ_REASON_WAIT_EXCEEDS_BUDGET)
        );
        // Walk time to its end: grant, requeue each grant once, then admit it.
        let mut requeued = HashSet::new();
        let (mut now, mut idle_at_end) = (base, 0);
        for _ in 0..10_000 {
            match next(e, now) {
                (FAIRQ_OK, g) => {
                    assert!(g.remaining_budget_ns <= 30_000_000_000, "{g:?}");
                    assert!(g.waited_ns <= now - base, "{g:?}");
                    let s = if requeued.insert(g.ticket) {
                        complete(e, g.ticket, FAIRQ_OUTCOME_STILL_REFUSED, 2 * STEP, now)
                    } else {
                        complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, now)
                    };
                    assert!(
                        [FAIRQ_OK, FAIRQ_REQUEUED, FAIRQ_REFUSED].contains(&s),
                        "{s}"
                    );
                }
                (FAIRQ_EXPIRED, g) => assert_eq!(g.reason, FAIRQ_REASON_DEADLINE_EXCEEDED),
                (s, _) => {
                    assert!(s == FAIRQ_EMPTY || s == FAIRQ_AT_CAPACITY, "{s}");
                    let st = stats(e);
                    if st.queued + st.in_flight == 0 {
                        break;
                    }
                    // Something is parked: the wake-up the engine gives is ahead of now (after
                    // this call advanced its wheel), or the end of time, never a wrapped one.
                    let mut wakeup = 0u64;
                    // SAFETY: a live engine, a local out-pointer.
                    let w = unsafe { fairq_next_wakeup_ns(e.get(), &mut wakeup) };
                    if w == FAIRQ_OK {
                        assert!(
                            wakeup > now || wakeup == u64::MAX,
                            "wake-up {wakeup} at {now}"
                        );
                    }
                    if now == u64::MAX {
                        idle_at_end += 1;
                        assert!(idle_at_end < 3, "stranded at the end of time: {st:?}");
                    }
                    now = now.saturating_add(STEP);
                }
            }
        }
        let st = stats(e);
        assert_eq!((st.queued, st.in_flight), (0, 0), "base {base}: {st:?}");
        // Cancel and expire at the end of time.
        let (s, c) = enqueue(e, at(a, 0), u64::MAX);
        assert_eq!(s, FAIRQ_QUEUED);
        // SAFETY: a live engine.
        assert_eq!(
            unsafe { fairq_cancel_at(e.get(), c.ticket, u64::MAX) },
            FAIRQ_OK
        );
        let (s, x) = enqueue(e, at(b, 9), u64::MAX);
        assert_eq!(s, FAIRQ_QUEUED);
        let mut refusal = fairq_completion::default();
        // SAFETY: a live engine, a local out-pointer.
        let s = unsafe { fairq_expire_at(e.get(), x.ticket, u64::MAX, &mut refusal) };
        assert_eq!(
            (s, refusal.reason),
            (FAIRQ_OK, FAIRQ_REASON_DEADLINE_EXCEEDED)
        );
        // The slow paths at the end of time.
        let mut ind = fairq_indicators::default();
        let mut tick = fairq_tick_report::default();
        // SAFETY: a live engine, local out-pointers.
        unsafe {
            assert_eq!(fairq_tick_at(e.get(), u64::MAX, &mut tick), FAIRQ_OK);
            let s = fairq_tenant_indicators_at(e.get(), a, u64::MAX, &mut ind);
            assert!(s == FAIRQ_OK || s == FAIRQ_NOT_FOUND, "{s}");
        }
        assert_conserved(e);
        free(e);
    }
}

/// A clock that jumps back (to 0, after `UINT64_MAX`) is held at the latest time seen: nothing
/// wraps, expires early, or gets stuck.
#[test]
fn a_clock_that_goes_backwards_is_held() {
    const S: u64 = 1_000_000_000;
    let e = new_engine(|c| c.max_in_flight = 1);
    let a = key("a");
    let (s, first) = enqueue(e, request(a), 100 * S);
    assert_eq!(s, FAIRQ_QUEUED);
    let (s, g) = next(e, 100 * S);
    assert_eq!((s, g.ticket), (FAIRQ_OK, first.ticket));
    // The clock jumps back 99 s: the request queued now is not seen as waiting 99 s less, and
    // the grant completes normally.
    let (s, second) = enqueue(e, request(a), S);
    assert_eq!(s, FAIRQ_QUEUED);
    assert_eq!(
        complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, 0),
        FAIRQ_OK
    );
    let (s, g) = next(e, 0);
    assert_eq!((s, g.ticket), (FAIRQ_OK, second.ticket));
    assert!(g.waited_ns < S, "waited {} ns", g.waited_ns);
    assert!(g.remaining_budget_ns > 29 * S, "{}", g.remaining_budget_ns);
    assert_eq!(
        complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, 0),
        FAIRQ_OK
    );
    // To the end of time, then back to 0.
    let (s, third) = enqueue(e, request(a), u64::MAX);
    assert_eq!(s, FAIRQ_QUEUED);
    let (s, g) = next(e, 0);
    assert_eq!((s, g.ticket), (FAIRQ_OK, third.ticket));
    assert_eq!(g.waited_ns, 0);
    assert_eq!(
        complete(e, g.ticket, FAIRQ_OUTCOME_STILL_REFUSED, 0, 0),
        FAIRQ_REQUEUED
    );
    let (s, g) = next(e, 0);
    assert_eq!((s, g.ticket), (FAIRQ_OK, third.ticket));
    assert_eq!(
        complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, 0),
        FAIRQ_OK
    );
    assert_conserved(e);
    free(e);
}

// ---------------------------------------------------------------- stats

/// While a concurrent workload runs, a reader checks what `fairq_get_stats` promises: gauges
/// within their bounds, counters never decreasing; once every thread is done, the books
/// balance.
#[test]
fn stats_guarantees_under_a_concurrent_workload() {
    const THREADS: u64 = 3;
    const OPS: u64 = 30_000;
    const QUEUE: u32 = 16;
    const IN_FLIGHT: u32 = 3;
    const TENANTS: u32 = 4;
    const SLOTS: u64 = (TENANTS + TENANTS / 4 + 1) as u64;
    let e = new_engine(|c| {
        c.max_tenants = TENANTS;
        c.tenant_queue_capacity = 6;
        c.queue_capacity = QUEUE;
        c.max_in_flight = IN_FLIGHT;
        c.tenant_idle_ms = 0;
    });
    let keys: Vec<u64> = (0..6).map(|i| key(&format!("t{i}"))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(AtomicU64::new(1));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let counters = |s: &fairq_stats| {
                let mut v = vec![
                    s.enqueued,
                    s.granted,
                    s.completed,
                    s.requeued,
                    s.cancelled,
                    s.expired,
                    s.refused_after_wait,
                ];
                v.extend_from_slice(&s.refused);
                v
            };
            let mut last = counters(&stats(e));
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let s = stats(e);
                assert!(s.queued <= u64::from(QUEUE), "{s:?}");
                assert!(s.in_flight <= u64::from(IN_FLIGHT), "{s:?}");
                // The table's slots, plus one slot changing hands per calling thread at most.
                assert!(s.tenants <= SLOTS + THREADS, "{s:?}");
                let now = counters(&s);
                for (i, (a, b)) in last.iter().zip(&now).enumerate() {
                    assert!(b >= a, "counter {i} went from {a} to {b}");
                }
                last = now;
                reads += 1;
            }
            reads
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|id| {
            let (keys, clock) = (keys.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (id + 1);
                let mut mine: Vec<u64> = Vec::new();
                for _ in 0..OPS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let now = clock.fetch_add(1_000, Ordering::Relaxed);
                    match x % 8 {
                        0..=2 => {
                            let r = fairq_request {
                                tenant_key: keys[(x >> 8) as usize % keys.len()],
                                dimension: FAIRQ_DIM_USER,
                                retry_after_ns: (x >> 16) % 3 * 1_000,
                                timeout_ns: (x >> 20) % 4 * 200_000,
                                ..Default::default()
                            };
                            let (s, out) = enqueue(e, r, now);
                            assert!(s == FAIRQ_QUEUED || s == FAIRQ_REFUSED, "{s}");
                            if s == FAIRQ_QUEUED {
                                mine.push(out.ticket);
                            }
                        }
                        3 | 4 => match next(e, now) {
                            (FAIRQ_OK, g) => {
                                let outcome = u32::from(x >> 30 & 1 == 1);
                                let s = complete(e, g.ticket, outcome, 2_000, now);
                                assert!(
                                    [FAIRQ_OK, FAIRQ_REQUEUED, FAIRQ_REFUSED].contains(&s)
                                        || s == FAIRQ_ERR_STALE_TICKET, // another thread's cancel
                                    "{s}"
                                );
                            }
                            (s, _) => assert!(
                                [FAIRQ_EXPIRED, FAIRQ_EMPTY, FAIRQ_AT_CAPACITY].contains(&s),
                                "{s}"
                            ),
                        },
                        5 | 6 if !mine.is_empty() => {
                            let t = mine.swap_remove((x >> 8) as usize % mine.len());
                            // SAFETY: a live engine, freed only after the join.
                            let s = if x % 8 == 5 {
                                unsafe { fairq_cancel_at(e.get(), t, now) }
                            } else {
                                unsafe { fairq_expire_at(e.get(), t, now, null_mut()) }
                            };
                            assert!(
                                [FAIRQ_OK, FAIRQ_ERR_STALE_TICKET, FAIRQ_ERR_TICKET_STATE]
                                    .contains(&s),
                                "{s}"
                            );
                        }
                        _ => {
                            let mut tick = fairq_tick_report::default();
                            // SAFETY: a live engine, a local out-pointer.
                            assert_eq!(unsafe { fairq_tick_at(e.get(), now, &mut tick) }, FAIRQ_OK);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    // No call is running: the books balance, with requests still queued and in flight ...
    let s = stats(e);
    assert_eq!(
        s.enqueued,
        s.completed + s.cancelled + s.expired + s.refused_after_wait + s.queued + s.in_flight,
        "{s:?}"
    );
    assert!(s.enqueued > 1_000, "{s:?}");
    // ... and after the rest drained.
    drain(e, clock.load(Ordering::Relaxed) + 60_000_000_000);
    let s = stats(e);
    assert_eq!((s.queued, s.in_flight, s.tenants), (0, 0, 0), "{s:?}");
    assert_conserved(e);
    free(e);
}

/// `tenants` may pass `max_tenants`: a tenant coming back to its own idle slot is let in, up to
/// the table's `max_tenants + max_tenants / 4 + 1` slots; a new tenant is refused at
/// `max_tenants`.
#[test]
fn the_tenants_gauge_is_bounded_by_the_table_s_slots() {
    let e = new_engine(|c| {
        c.max_tenants = 2; // 2 + 0 + 1 = 3 slots
        c.max_in_flight = 1;
    });
    let (a, b, c, d) = (key("a"), key("b"), key("c"), key("d"));
    let (_, first) = enqueue(e, request(a), 1);
    let (s, g) = next(e, 1);
    assert_eq!((s, g.ticket), (FAIRQ_OK, first.ticket));
    assert_eq!(
        complete(e, g.ticket, FAIRQ_OUTCOME_ADMITTED, 0, 1),
        FAIRQ_OK
    );
    // a is idle and keeps its slot (tenant_idle_ms); b and c take the others.
    assert_eq!(enqueue(e, request(b), 2).0, FAIRQ_QUEUED);
    assert_eq!(enqueue(e, request(c), 2).0, FAIRQ_QUEUED);
    assert_eq!(stats(e).tenants, 2);
    // A new tenant is refused at max_tenants ...
    let (s, r) = enqueue(e, request(d), 3);
    assert_eq!(
        (s, r.reason),
        (FAIRQ_REFUSED, FAIRQ_REASON_TENANT_TABLE_FULL)
    );
    // ... a returning one is not.
    assert_eq!(enqueue(e, request(a), 3).0, FAIRQ_QUEUED);
    assert_eq!(stats(e).tenants, 3);
    free(e);
}
