//! Prometheus text exposition (format 0.0.4) of the engine's gauges, counters, wait histogram
//! and fairness indicators, rendered from the engine's reading API (never a tenant slot).
//!
//! Rendered from atomics only (sharded counters, histogram buckets, tenant slots): rendering takes
//! no lock and never blocks or slows the hot path. It allocates the output text, off the hot path.
//!
//! # Families
//! The required names, exactly:
//! - `rate_limit_fair_queue_depth` (gauge): requests queued now.
//! - `rate_limit_fair_queue_tenants` (gauge): tenants with queued or in-flight requests now.
//! - `rate_limit_fair_queue_wait_seconds{tenant_dimension}` (histogram, buckets 1 ms … 60 s):
//!   the wait of each request as it leaves the queue (granted or `deadline_exceeded`), from its
//!   first enqueue. Observed by the fairness indicators: absent when `Config::indicators` is off.
//! - `rate_limit_fair_queue_grants_total{tenant_dimension}` (counter).
//! - `rate_limit_fair_queue_lane_grants_total{tenant_dimension}` (counter): the grants of the
//!   light-tenant lane, also counted in `grants_total`.
//! - `rate_limit_fair_queue_refused_total{tenant_dimension,reason}` (counter): one series for
//!   every reason code, the five queue reasons, the immediate ones (`not_queueable`, `no_tenant`,
//!   `disabled`) and `cancelled` (a client's cancel; leave it out of refusal-rate queries).
//!
//! Also: `rate_limit_fair_queue_in_flight` (gauge), and with seats on
//! `rate_limit_fair_queue_seats_in_flight` (gauge); the fairness indicators of the top
//! `indicator_top_k` tenants by requests (`rate_limit_fair_queue_tenant_*{tenant_dimension,
//! tenant}`, `tenant` being the 16-hex-digit tenant key, never a raw identifier) and their
//! min/max over every tenant (`rate_limit_fair_queue_fair_share_ratio{stat}` etc.); and, when
//! the policies, bulkheads or load shedding are on, their gauges and counters. See
//! `docs/operating.md` for the list.

use std::fmt::Write;

use crate::engine::Engine;
use crate::histogram::{BOUNDS_LE, BUCKETS};
use crate::indicators::{MinMax, TenantIndicators};
use crate::types::Reason;

/// Metric name prefix.
const P: &str = "rate_limit_fair_queue";

/// A family rendered from a list of items: name, type, help, and the value of one item.
type Family<T, V> = (&'static str, &'static str, &'static str, fn(&T) -> V);

/// The metrics, rendered by the engine (`Engine::prometheus_text`).
impl Engine {
    /// Renders the metrics in the Prometheus text format (version 0.0.4), at the monotonic
    /// clock's now.
    pub fn prometheus_text(&self) -> String {
        self.prometheus_text_at(crate::clock::now_ns())
    }

    /// `prometheus_text` with starvation windows measured at `now` (monotonic ns).
    pub fn prometheus_text_at(&self, now: u64) -> String {
        let mut out = String::with_capacity(4096);
        self.write_prometheus_at(&mut out, now);
        out
    }

    /// Appends the Prometheus text to `out`, at the monotonic clock's now.
    pub fn write_prometheus(&self, out: &mut String) {
        self.write_prometheus_at(out, crate::clock::now_ns());
    }

    /// Appends the Prometheus text to `out`, with starvation windows measured at `now`.
    pub fn write_prometheus_at(&self, out: &mut String, now: u64) {
        write(self, out, now);
    }
}

/// Appends the engine's Prometheus text to `out`, with starvation windows measured at `now`.
pub(crate) fn write(engine: &Engine, out: &mut String, now: u64) {
    Render { engine }.write(out, now);
}

/// Renders from the engine's reading API only: never a tenant slot.
struct Render<'a> {
    engine: &'a Engine,
}

impl Render<'_> {
    fn write(&self, out: &mut String, now: u64) {
        let engine = self.engine;
        let stats = engine.stats();
        let dim = engine.config().tenant_dimension.as_str();
        let d = format!("tenant_dimension=\"{dim}\"");
        family(
            out,
            "depth",
            "gauge",
            "Requests held in the fair queue now.",
        );
        sample(out, "depth", "", stats.queued as f64);
        family(
            out,
            "tenants",
            "gauge",
            "Tenants with queued or in-flight requests now (cancelled ones until swept).",
        );
        sample(out, "tenants", "", stats.tenants as f64);
        family(
            out,
            "in_flight",
            "gauge",
            "Grants out now (admission attempts).",
        );
        sample(out, "in_flight", "", stats.in_flight as f64);
        if let Some(seats) = engine.seats_in_flight() {
            family(
                out,
                "seats_in_flight",
                "gauge",
                "Permits (cost units) the grants out hold now, with seats on.",
            );
            sample(out, "seats_in_flight", "", seats as f64);
        }

        // Observed by the fairness indicators: absent when they are off.
        if let Some(wait) = engine.wait_histogram() {
            family(
                out,
                "wait_seconds",
                "histogram",
                "Time from first enqueue to leaving the queue (granted or deadline_exceeded).",
            );
            let (counts, sum_ns) = wait;
            let mut cumulative = 0u64;
            for (i, count) in counts.iter().enumerate() {
                cumulative += count;
                let le = BOUNDS_LE.get(i).copied().unwrap_or("+Inf");
                debug_assert!(i < BUCKETS);
                sample(
                    out,
                    "wait_seconds_bucket",
                    &format!("{d},le=\"{le}\""),
                    cumulative as f64,
                );
            }
            sample(out, "wait_seconds_sum", &d, sum_ns as f64 / 1e9);
            sample(out, "wait_seconds_count", &d, cumulative as f64);
        }

        family(
            out,
            "grants_total",
            "counter",
            "Admission attempts released by the queue.",
        );
        sample(out, "grants_total", &d, stats.granted as f64);
        family(
            out,
            "lane_grants_total",
            "counter",
            "Of the grants, those made through the light-tenant lane, ahead of the rotation.",
        );
        sample(out, "lane_grants_total", &d, stats.lane_granted as f64);
        family(
            out,
            "refused_total",
            "counter",
            "Requests refused on arrival or after waiting, by reason (cancelled: client cancels).",
        );
        for reason in Reason::ALL {
            sample(
                out,
                "refused_total",
                &format!("{d},reason=\"{}\"", reason.as_str()),
                stats.refused_for(reason) as f64,
            );
        }

        self.write_indicators(out, &d, now);
        self.write_policies(out, &d);
    }

    fn write_indicators(&self, out: &mut String, d: &str, now: u64) {
        if self.engine.config().indicators {
            let report = self.engine.fairness_report_at(now);
            self.write_report(out, d, &report);
        }
    }

    fn write_report(&self, out: &mut String, d: &str, report: &crate::indicators::FairnessReport) {
        let top = &report.top;
        let per_tenant: [Family<TenantIndicators, Option<f64>>; 6] = [
            (
                "tenant_fair_share_ratio",
                "gauge",
                "Granted over expected cost units by weight while ready (top tenants by requests).",
                |t| t.fair_share_ratio,
            ),
            (
                "tenant_granted_cost_total",
                "counter",
                "Cost units granted (top tenants); rate() over expected gives a windowed ratio.",
                |t| Some(t.granted_cost as f64),
            ),
            (
                "tenant_expected_cost_total",
                "counter",
                "Cost units expected by weight while ready (top tenants).",
                |t| Some(t.expected_cost),
            ),
            (
                "tenant_wait_p95_seconds",
                "gauge",
                "0.95 quantile of the tenant's waits (top tenants).",
                |t| t.wait_p95_ns.map(|ns| ns as f64 / 1e9),
            ),
            (
                "tenant_refusal_ratio",
                "gauge",
                "Refused over requests, on arrival or after waiting (top tenants).",
                |t| t.refusal_rate,
            ),
            (
                "tenant_requests_total",
                "counter",
                "Enqueue calls that reached the tenant's slot (top tenants).",
                |t| Some(t.requests as f64),
            ),
        ];
        for (name, kind, help, value) in per_tenant {
            family(out, name, kind, help);
            for t in top {
                if let Some(v) = value(t) {
                    sample(out, name, &tenant_labels(d, t), v);
                }
            }
        }
        family(
            out,
            "tenant_starvation_seconds",
            "gauge",
            "Time ready with no grant: the open window (current) and the longest (top tenants).",
        );
        for t in top {
            let labels = tenant_labels(d, t);
            for (window, ns) in [
                ("current", t.starvation_current_ns),
                ("longest", t.starvation_longest_ns),
            ] {
                sample(
                    out,
                    "tenant_starvation_seconds",
                    &format!("{labels},window=\"{window}\""),
                    ns as f64 / 1e9,
                );
            }
        }

        let a = &report.aggregate;
        let aggregates = [
            (
                "fair_share_ratio",
                "Min and max fair_share_ratio over all tenants.",
                None,
                a.fair_share_ratio,
            ),
            (
                "wait_p95_seconds",
                "Min and max wait p95 over all tenants.",
                None,
                a.wait_p95_seconds,
            ),
            (
                "refusal_ratio",
                "Min and max refusal ratio over all tenants.",
                None,
                a.refusal_rate,
            ),
            (
                "starvation_seconds",
                "Min and max starvation window over all tenants (current and longest).",
                Some("current"),
                a.starvation_current_seconds,
            ),
            (
                "starvation_seconds",
                "",
                Some("longest"),
                a.starvation_longest_seconds,
            ),
        ];
        for (name, help, window, minmax) in aggregates {
            if !help.is_empty() {
                family(out, name, "gauge", help);
            }
            let Some(MinMax { min, max }) = minmax else {
                continue;
            };
            let window = window.map_or(String::new(), |w| format!(",window=\"{w}\""));
            sample(out, name, &format!("{d}{window},stat=\"min\""), min);
            sample(out, name, &format!("{d}{window},stat=\"max\""), max);
        }
        family(
            out,
            "indicator_tenants",
            "gauge",
            "Tenants holding a slot (the population of the min/max indicators).",
        );
        sample(out, "indicator_tenants", d, a.tenants as f64);
    }

    fn write_policies(&self, out: &mut String, d: &str) {
        let policy = &self.engine.config().policy;
        if policy.wait_boost.is_some() {
            family(
                out,
                "boosted_tenants",
                "gauge",
                "Tenants holding a +1 wait boost now.",
            );
            sample(
                out,
                "boosted_tenants",
                d,
                self.engine.boosted_tenants() as f64,
            );
        }
        if policy.starvation_guard.is_some() {
            family(
                out,
                "guard_grants_total",
                "counter",
                "Grants the starvation guard made ahead of SWRR order.",
            );
            sample(
                out,
                "guard_grants_total",
                d,
                self.engine.guard_grants() as f64,
            );
        }
        let pools = self.engine.downstream_stats();
        if pools.is_empty() {
            return;
        }
        let series: [Family<(u64, u64, u64), u64>; 3] = [
            (
                "downstream_in_flight",
                "gauge",
                "Grants out now, by downstream class (bulkhead pool).",
                |p| p.0,
            ),
            (
                "downstream_blocked_tenants",
                "gauge",
                "Tenants whose head waits for a permit of the pool now.",
                |p| p.1,
            ),
            (
                "downstream_blocks_total",
                "counter",
                "Times a tenant blocked on a full pool.",
                |p| p.2,
            ),
        ];
        for (name, kind, help, value) in series {
            family(out, name, kind, help);
            for (i, pool) in pools.iter().enumerate() {
                sample(
                    out,
                    name,
                    &format!("{d},downstream=\"{i}\""),
                    value(pool) as f64,
                );
            }
        }
        if self.engine.config().shedding.is_some() {
            self.write_shedding(out, d);
        }
    }

    fn write_shedding(&self, out: &mut String, d: &str) {
        let pools = self.engine.downstream_shedding();
        let label = |i: usize| format!("{d},downstream=\"{i}\"");
        let series: [Family<crate::shedding::ShedStats, Option<f64>>; 5] = [
            (
                "downstream_limit",
                "gauge",
                "In-flight limit in force for the pool (its bound, unless load shedding cut it).",
                |p| Some(p.limit as f64),
            ),
            (
                "downstream_shedding",
                "gauge",
                "1 while the pool is in its shedding stage (its limit is under its bound).",
                |p| Some(f64::from(u8::from(p.shedding))),
            ),
            (
                "downstream_queued",
                "gauge",
                "Requests queued for the pool now (load shedding's wait estimate counts them).",
                |p| Some(p.queued as f64),
            ),
            (
                "downstream_shed_cuts_total",
                "counter",
                "Times load shedding cut the pool's limit (its error rate passed the threshold).",
                |p| Some(p.cuts as f64),
            ),
            (
                "downstream_error_ratio",
                "gauge",
                "Error ratio of the pool's last judged window (absent before the first).",
                |p| p.last_error_ratio,
            ),
        ];
        for (name, kind, help, value) in series {
            family(out, name, kind, help);
            for (i, pool) in pools.iter().enumerate() {
                if let Some(v) = value(pool) {
                    sample(out, name, &label(i), v);
                }
            }
        }
        family(
            out,
            "downstream_reports_total",
            "counter",
            "Downstream calls reported for load shedding, by outcome.",
        );
        for (i, pool) in pools.iter().enumerate() {
            for (outcome, n) in [("ok", pool.ok), ("error", pool.errors)] {
                sample(
                    out,
                    "downstream_reports_total",
                    &format!("{},outcome=\"{outcome}\"", label(i)),
                    n as f64,
                );
            }
        }
    }
}

fn tenant_labels(d: &str, t: &TenantIndicators) -> String {
    format!("{d},tenant=\"{:016x}\"", t.tenant.get())
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    // `write!` into a String cannot fail.
    let _ = writeln!(out, "# HELP {P}_{name} {help}\n# TYPE {P}_{name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let value = if value.is_finite() { value } else { 0.0 };
    if labels.is_empty() {
        let _ = writeln!(out, "{P}_{name} {value}");
    } else {
        let _ = writeln!(out, "{P}_{name}{{{labels}}} {value}");
    }
}
