//! Load shedding on a failing downstream: when a bulkhead pool's error rate passes a threshold,
//! protecting that downstream comes before fairness.
//!
//! The caller reports how each call to a downstream went (`Engine::report_downstream`). Each
//! pool counts the reports of a fixed window (`Shedding::window_ms`); when a window ends its
//! error rate is judged once:
//!
//! - **over the threshold** (`error_percent`, default 2 %, with at least `min_requests` reports
//!   in the window): the pool's in-flight limit is cut in half (never below 1). The pool is then
//!   in its *shedding stage*;
//! - **at or under it**: the limit grows back by `max / 8` (at least 1) per window, up to the
//!   pool's configured bound, so a pool cut to 1 is whole again within 8 calm windows. The stage
//!   ends when the limit is back at the bound.
//!
//! A window with too few reports never cuts (one error in three calls says little), but it may
//! grow the limit back. Windows in which nothing was reported count as calm.
//!
//! While a pool sheds, a request to it that can no longer be served within its budget is refused
//! at once with `downstream_shedding` instead of waiting for its deadline in the queue. Its wait
//! is estimated from what the pool does now: the requests queued for it, over the rate at which
//! it admitted requests in the last judged window that admitted any; and, while tenants wait for
//! a permit of it, at least the time since it last admitted one (a stuck downstream admits
//! nothing: that wait grows until every request is refused). So the shared queue does not fill with requests a failing downstream cannot reach in
//! time, and the other pools' tenants keep their share of it.
//!
//! All state is atomics in the pool's record: the limit is read with one relaxed load per grant
//! attempt; reports are one counter increment, plus the window's judgment by the one caller that
//! wins the window's compare-and-swap.

use std::fmt;

use crate::limits::MS;
use crate::sync::{AtomicI64, AtomicU64, Ordering};
use crate::types::ConfigError;
/// `last_ratio_ppm` and `last_admitted` before any window was judged.
const NONE: u64 = u64::MAX;

/// Load shedding for the bulkhead pools (see the module docs). Needs
/// `Config::downstream_max_in_flight`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shedding {
    /// The error rate, in %, above which a window cuts the pool's limit: 1..=100. Default 2.
    pub error_percent: u32,
    /// The window over which the error rate is judged, in ms: 100..=3600000. Default 5000.
    pub window_ms: u64,
    /// Fewest reports in a window for it to cut the limit: 1..=1000000. Default 20.
    pub min_requests: u32,
}

impl Default for Shedding {
    fn default() -> Self {
        Shedding {
            error_percent: 2,
            window_ms: 5_000,
            min_requests: 20,
        }
    }
}

impl fmt::Display for Shedding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "over {} % errors in {} ms (at least {} reports)",
            self.error_percent, self.window_ms, self.min_requests
        )
    }
}

impl Shedding {
    /// Checks every knob.
    pub(crate) fn validate(&self, pools: usize) -> Result<(), ConfigError> {
        let range = |field: &'static str, value: u64, min: u64, max: u64| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError {
                    field,
                    message: format!("must be in {min}..={max}, got {value}"),
                })
            }
        };
        range("shedding.error_percent", self.error_percent.into(), 1, 100)?;
        range("shedding.window_ms", self.window_ms, 100, 3_600_000)?;
        range(
            "shedding.min_requests",
            self.min_requests.into(),
            1,
            1_000_000,
        )?;
        if pools == 0 {
            return Err(ConfigError {
                field: "shedding",
                message: "load shedding works on bulkhead pools: set downstream_max_in_flight"
                    .to_string(),
            });
        }
        Ok(())
    }
}

/// One pool's shedding state. With shedding off the limit stays at the pool's bound.
pub(crate) struct PoolShed {
    /// The pool's configured bound.
    max: u64,
    /// Additive growth per calm window.
    step: u64,
    /// The in-flight limit in force: 1..=`max`. Read (Relaxed) by every grant attempt: a stale
    /// read lets one grant more or fewer through around a change, never above `max`.
    limit: AtomicU64,
    /// Start of the current window (ns); 0 before the first report.
    window_start: AtomicU64,
    /// Reports of the current window.
    ok: AtomicU64,
    errors: AtomicU64,
    /// Error ratio of the last judged window, in parts per million (`NO_RATIO`: none yet).
    last_ratio_ppm: AtomicU64,
    /// Times the limit was cut.
    cuts: AtomicU64,
    /// Reports since the engine started.
    ok_total: AtomicU64,
    errors_total: AtomicU64,
    /// Requests queued for the pool now. Signed: a decrement may briefly pass its increment
    /// between two threads; read clamped at 0.
    queued: AtomicI64,
    /// Requests the pool admitted in the current window, and per window in the last judged one
    /// that admitted any (`NONE` before it).
    admitted: AtomicU64,
    last_admitted: AtomicU64,
    /// When the pool last admitted a request (ns).
    last_admit: AtomicU64,
}

/// A pool's shedding gauges and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ShedStats {
    pub(crate) limit: u64,
    pub(crate) queued: u64,
    pub(crate) shedding: bool,
    pub(crate) last_error_ratio: Option<f64>,
    pub(crate) cuts: u64,
    pub(crate) ok: u64,
    pub(crate) errors: u64,
}

impl PoolShed {
    pub(crate) fn new(max: u64) -> PoolShed {
        PoolShed {
            max,
            step: max.div_ceil(8).max(1),
            limit: AtomicU64::new(max),
            window_start: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_ratio_ppm: AtomicU64::new(NONE),
            cuts: AtomicU64::new(0),
            ok_total: AtomicU64::new(0),
            errors_total: AtomicU64::new(0),
            queued: AtomicI64::new(0),
            admitted: AtomicU64::new(0),
            last_admitted: AtomicU64::new(NONE),
            last_admit: AtomicU64::new(0),
        }
    }

    /// The in-flight limit in force.
    #[inline]
    pub(crate) fn limit(&self) -> u64 {
        // Relaxed: see the field.
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether the pool is in its shedding stage (its limit is under its bound).
    #[inline]
    pub(crate) fn shedding(&self) -> bool {
        self.limit() < self.max
    }

    /// A request for the pool entered (`1`) or left (`-1`) the queue.
    #[inline]
    pub(crate) fn queued(&self, delta: i64) {
        // Relaxed: a gauge for an estimate.
        self.queued.fetch_add(delta, Ordering::Relaxed);
    }

    /// The pool admitted a request at `now`.
    #[inline]
    pub(crate) fn admitted(&self, now: u64) {
        // Relaxed: statistics for an estimate.
        self.admitted.fetch_add(1, Ordering::Relaxed);
        self.last_admit.store(now, Ordering::Relaxed);
    }

    /// The wait a request arriving at `now` can expect (see the module docs); `blocked`: tenants
    /// wait for the pool now.
    pub(crate) fn expected_wait(&self, config: &Shedding, blocked: bool, now: u64) -> u64 {
        // Relaxed: estimates.
        let queued = self.queued.load(Ordering::Relaxed).max(0) as u64;
        let admitted = self.last_admitted.load(Ordering::Relaxed);
        let window = config.window_ms.saturating_mul(MS);
        let backlog = match admitted {
            _ if queued == 0 => 0,
            NONE => 0, // no rate known yet: only a stall says something
            n => (u128::from(queued) * u128::from(window) / u128::from(n.max(1)))
                .min(u128::from(u64::MAX)) as u64,
        };
        if !blocked {
            return backlog;
        }
        backlog.max(now.saturating_sub(self.last_admit.load(Ordering::Relaxed)))
    }

    /// Counts a report at `now`, first judging the window that ended, if one did. Returns how
    /// much the limit grew (the caller wakes as many blocked tenants).
    pub(crate) fn report(&self, config: &Shedding, ok: bool, now: u64) -> u64 {
        let window = config.window_ms.saturating_mul(MS).max(1);
        // Relaxed: the window word is claimed by the CAS below; the counters are statistics.
        let start = self.window_start.load(Ordering::Relaxed);
        let mut grown = 0;
        if start == 0 {
            let _ = self.window_start.compare_exchange(
                0,
                now.max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else if now.saturating_sub(start) >= window
            && self
                .window_start
                .compare_exchange(start, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // This caller alone judges the window [start, now).
            let ok_n = self.ok.swap(0, Ordering::Relaxed);
            let err_n = self.errors.swap(0, Ordering::Relaxed);
            let admitted = self.admitted.swap(0, Ordering::Relaxed);
            let windows = ((now - start) / window).max(1);
            if admitted > 0 {
                // At least 1 per window: a rate, never a division by zero.
                self.last_admitted
                    .store((admitted / windows).max(1), Ordering::Relaxed);
            }
            grown = self.judge(config, ok_n, err_n, windows);
        }
        let (counter, total) = if ok {
            (&self.ok, &self.ok_total)
        } else {
            (&self.errors, &self.errors_total)
        };
        counter.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(1, Ordering::Relaxed);
        grown
    }

    /// The judgment of one ended window (and `windows - 1` empty ones after it).
    fn judge(&self, config: &Shedding, ok: u64, errors: u64, windows: u64) -> u64 {
        let total = ok + errors;
        if let Some(ppm) = errors.saturating_mul(1_000_000).checked_div(total) {
            self.last_ratio_ppm.store(ppm, Ordering::Relaxed);
        }
        let over = errors * 100 > u64::from(config.error_percent) * total;
        // Only judging threads write the limit, one at a time (the window CAS), so a plain
        // load and store is enough; Relaxed as for every reader.
        let limit = self.limit.load(Ordering::Relaxed);
        let next = if over && total >= u64::from(config.min_requests) {
            let cut = (limit / 2).max(1);
            if cut < limit {
                self.cuts.fetch_add(1, Ordering::Relaxed);
            }
            cut
        } else if over {
            limit // too few reports to cut, too many errors to grow
        } else {
            limit
                .saturating_add(self.step.saturating_mul(windows))
                .min(self.max)
        };
        self.limit.store(next, Ordering::Relaxed);
        next.saturating_sub(limit)
    }

    pub(crate) fn stats(&self) -> ShedStats {
        // Relaxed: gauges and counters.
        let ratio = self.last_ratio_ppm.load(Ordering::Relaxed);
        ShedStats {
            limit: self.limit(),
            queued: self.queued.load(Ordering::Relaxed).max(0) as u64,
            shedding: self.shedding(),
            last_error_ratio: (ratio != NONE).then(|| ratio as f64 / 1e6),
            cuts: self.cuts.load(Ordering::Relaxed),
            ok: self.ok_total.load(Ordering::Relaxed),
            errors: self.errors_total.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 5_000 * MS;

    fn window(shed: &PoolShed, config: &Shedding, start: u64, ok: u64, errors: u64) -> u64 {
        let mut grown = 0;
        for i in 0..ok + errors {
            grown += shed.report(config, i >= errors, start + i);
        }
        grown
    }

    #[test]
    fn cuts_by_half_over_the_threshold_and_grows_back_by_steps() {
        let config = Shedding::default();
        let shed = PoolShed::new(16);
        assert_eq!(shed.limit(), 16);
        window(&shed, &config, 1, 100, 0); // opens the first window
                                           // A window is judged at the first report after it: windows 1..=5 have 3 % errors
                                           // (over 2 %), so from window 2 on the limit halves: 8, 4, 2, 1, and stays at 1.
        for (w, want) in [(1u64, 16), (2, 8), (3, 4), (4, 2), (5, 1)] {
            window(&shed, &config, 1 + w * W, 97, 3);
            assert_eq!(shed.limit(), want, "window {w}");
        }
        assert!(shed.shedding());
        // Exactly 2 % is not over: calm windows grow the limit by 16 / 8 = 2 each.
        let mut grown = 0;
        for w in 6..=14u64 {
            grown += window(&shed, &config, 1 + w * W, 98, 2);
            let want = if w == 6 { 1 } else { (1 + 2 * (w - 6)).min(16) };
            assert_eq!(shed.limit(), want, "window {w}");
        }
        assert_eq!(grown, 15);
        assert!(!shed.shedding());
        let stats = shed.stats();
        assert_eq!(stats.cuts, 4);
        assert_eq!(stats.errors, 3 * 5 + 2 * 9);
        assert_eq!(stats.last_error_ratio, Some(0.02));
    }

    #[test]
    fn too_few_reports_never_cut_and_idle_windows_are_calm() {
        let config = Shedding::default(); // at least 20 reports to cut
        let shed = PoolShed::new(8);
        window(&shed, &config, 1, 1, 0);
        window(&shed, &config, 1 + W, 5, 5); // 50 % errors in 10 reports
        window(&shed, &config, 1 + 2 * W, 1, 0);
        assert_eq!(shed.limit(), 8, "10 reports are too few to cut");
        window(&shed, &config, 1 + 3 * W, 16, 4); // 20 % errors in 20 reports
        assert_eq!(shed.report(&config, true, 1 + 4 * W), 0);
        assert_eq!(shed.limit(), 4);
        assert_eq!(shed.stats().last_error_ratio, Some(0.2));
        // Five windows end with one report: all calm, 1 (8 / 8) each.
        assert_eq!(shed.report(&config, true, 1 + 9 * W), 4);
        assert_eq!(shed.limit(), 8);
    }

    #[test]
    fn the_expected_wait_is_the_backlog_over_the_admission_rate_or_a_stall() {
        let config = Shedding::default();
        let shed = PoolShed::new(4);
        for _ in 0..30 {
            shed.queued(1);
        }
        // No judged window yet: only a stall counts.
        assert_eq!(shed.expected_wait(&config, false, W), 0);
        shed.report(&config, true, 1);
        for _ in 0..10 {
            shed.admitted(W / 2);
            shed.queued(-1);
        }
        shed.report(&config, true, 1 + W); // judges: 10 admitted in a 5 s window
                                           // 20 queued at 2 a second: 10 s.
        assert_eq!(shed.expected_wait(&config, false, W + 1), 10_000 * MS);
        // Tenants blocked and nothing admitted for 12 s: at least that.
        assert_eq!(
            shed.expected_wait(&config, true, W / 2 + 12_000 * MS),
            12_000 * MS
        );
        // A window without admissions keeps the last rate; the stall grows with the time.
        shed.report(&config, true, 1 + 2 * W);
        assert_eq!(shed.expected_wait(&config, false, 2 * W + 1), 10_000 * MS);
        assert_eq!(
            shed.expected_wait(&config, true, W / 2 + 60_000 * MS),
            60_000 * MS
        );
        for _ in 0..20 {
            shed.queued(-1);
        }
        assert_eq!(shed.expected_wait(&config, false, 2 * W + 1), 0);
    }

    #[test]
    fn every_knob_is_bounded() {
        let ok = Shedding::default();
        assert!(ok.validate(1).is_ok());
        assert_eq!(ok.validate(0).unwrap_err().field, "shedding");
        let bad = |s: Shedding| s.validate(1).unwrap_err().field;
        assert_eq!(
            bad(Shedding {
                error_percent: 0,
                ..ok
            }),
            "shedding.error_percent"
        );
        assert_eq!(
            bad(Shedding {
                window_ms: 99,
                ..ok
            }),
            "shedding.window_ms"
        );
        assert_eq!(
            bad(Shedding {
                min_requests: 0,
                ..ok
            }),
            "shedding.min_requests"
        );
    }
}
