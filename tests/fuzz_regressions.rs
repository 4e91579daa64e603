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
