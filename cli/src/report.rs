//! The simulation's outputs: the per-tenant tables, the verdict lines against the alert
//! thresholds, the isolation verdict against the `ideal` reference, the bottom line per
//! scheduler, and the `--json` document.

use std::fmt::Write as _;

use fairq::Reason;
use serde_json::{json, Value};

use crate::scenario::Scenario;
use crate::sim::{percentile_us, RowResult, RunResult};
use crate::trace::SEC;

/// Alert threshold: a 10-minute moving average of fair_share_ratio under this is unfair.
pub const FAIR_SHARE_ALERT: f64 = 0.7;
/// Alert threshold: a starvation window longer than this (ns) needs recovery first.
pub const STARVATION_ALERT_NS: u64 = 30 * SEC;
/// Alert threshold: one tenant over this share of throughput…
pub const DOMINANCE_SHARE: f64 = 0.4;
/// …while another tenant's p95 rises by more than this factor…
pub const P95_RISE_FACTOR: f64 = 1.2;
/// …and by at least this much (ms), so that sub-millisecond noise is not called a rise.
pub const P95_RISE_FLOOR_MS: f64 = 1.0;
/// Alert threshold: refusal rates further apart than this (percentage points) call for re-tuning.
pub const REFUSAL_SPREAD_PP: f64 = 15.0;
/// The refusal-spread alert is expected by design when every tenant not marked bursting lost
/// under this share (%) of its requests: the spread is the bursting tenants' excess refused.
pub const SPARED_REFUSAL_PCT: f64 = 1.0;
/// Isolation: a tenant not marked bursting is isolated while its p95 wait is at most this
/// factor times its p95 under the `ideal` reference…
pub const ISOLATION_FACTOR: f64 = 1.2;
/// …plus this much (ms), so that a reference p95 near 0 does not ask for the impossible.
pub const ISOLATION_SLACK_MS: f64 = 0.5;

const REASONS: [(Reason, &str); 5] = [
    (Reason::QueueFull, "q_full"),
    (Reason::TenantQueueFull, "tq_full"),
    (Reason::TenantTableFull, "tbl_full"),
    (Reason::WaitExceedsBudget, "no_fit"),
    (Reason::DeadlineExceeded, "expired"),
];

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A one-line description of the scenario's backend and load.
pub fn header(scenario: &Scenario, tenants: u64) -> String {
    let service = &scenario.backend.service;
    let dist = match service {
        crate::scenario::Service::Constant { .. } => "constant",
        crate::scenario::Service::Exponential { .. } => "exponential",
        crate::scenario::Service::Lognormal { .. } => "lognormal",
    };
    format!(
        "scenario {}: {:.0} s virtual, {} tenants in {} rows, {} slots x {} {} ms service \
         ({:.0} req/s), queue {} / tenant {} / table {}, budget {} ms",
        scenario.name,
        scenario.duration_s,
        tenants,
        scenario.tenants.len(),
        scenario.backend.max_in_flight,
        dist,
        service.mean_ms(),
        scenario.capacity_per_s(),
        scenario.queue.queue_capacity,
        scenario.queue.tenant_queue_capacity,
        scenario.queue.max_tenants,
        scenario.queue.max_wait_ms,
    )
}

/// The per-tenant table of one scheduler.
pub fn table(run: &RunResult) -> String {
    let name_width = run
        .rows
        .iter()
        .map(|r| r.name.len() + if r.count > 1 { 8 } else { 0 })
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = String::new();
    let granted: u64 = run.rows.iter().map(|r| r.granted).sum();
    let offered: u64 = run.rows.iter().map(|r| r.offered).sum();
    let _ = writeln!(
        out,
        "== {}: {} offered, {} granted ({:.1}%), {} events",
        run.name,
        offered,
        granted,
        100.0 * granted as f64 / offered.max(1) as f64,
        run.events,
    );
    if run.name == crate::sched::REFERENCE && !run.rows.iter().any(|r| r.bursting) {
        let _ = writeln!(
            out,
            "(no tenant is marked bursting: {} serves every request in arrival order)",
            run.name
        );
    }
    let _ = write!(
        out,
        "{:<name_width$} {:>4} {:>9} {:>9}",
        "tenant", "w", "offered", "granted"
    );
    for (_, label) in REASONS {
        let _ = write!(out, " {label:>8}");
    }
    // Scenarios with downstreams: fairq's load shedding may refuse (the column is 0 elsewhere).
    let shed = !run.downstreams.is_empty();
    if shed {
        let _ = write!(out, " {:>8}", "shed");
    }
    let _ = writeln!(
        out,
        " {:>8} {:>8} {:>8} {:>10} {:>8} {:>9}",
        "p50 ms", "p95 ms", "p99 ms", "fair_share", "backlog", "starve s"
    );
    for row in &run.rows {
        let label = if row.count > 1 {
            format!("{} (x{})", row.name, row.count)
        } else {
            row.name.clone()
        };
        let _ = write!(
            out,
            "{label:<name_width$} {:>4} {:>9} {:>9}",
            row.weight, row.offered, row.granted
        );
        for (reason, _) in REASONS {
            let _ = write!(out, " {:>8}", row.refused_for(reason));
        }
        if shed {
            let _ = write!(out, " {:>8}", row.refused_for(Reason::DownstreamShedding));
        }
        let _ = writeln!(
            out,
            " {:>8} {:>8} {:>8} {:>10} {:>7.0}% {:>9.2}",
            ms(row.wait_percentile_ms(0.50)),
            ms(row.wait_percentile_ms(0.95)),
            ms(row.wait_percentile_ms(0.99)),
            row.fair_share_ratio()
                .map_or("-".into(), |r| format!("{r:.3}")),
            100.0 * row.backlogged_windows as f64 / row.active_windows.max(1) as f64,
            row.max_starvation_ns as f64 / SEC as f64,
        );
    }
    out
}

/// The legend's line for scenarios with downstreams.
pub const SHED_LEGEND: &str = "\
shed = downstream_shedding (fairq refused it at once: its downstream's pool sheds load and could
  not serve it within its budget).";

/// A downstream's phases around a scenario's first failure, and how fast fairq's pool reacted.
pub fn downstreams(scenario: &Scenario, run: &RunResult) -> String {
    let mut out = String::new();
    let Some((failing, start, end)) = scenario.first_failure() else {
        return out;
    };
    let (start_s, end_s) = ((start / SEC) as usize, (end / SEC) as usize);
    let total_s = run
        .downstreams
        .first()
        .map_or(0, |d| d.in_flight_by_s.len());
    // Before: the 5 minutes before the failure; after: from a minute after its end, 5 minutes.
    let before = start_s.saturating_sub(300)..start_s;
    let during = start_s..end_s.min(total_s);
    let after = (end_s + 60).min(total_s)..(end_s + 360).min(total_s);
    let mean = |v: &[f64], r: &std::ops::Range<usize>| -> Option<f64> {
        let s = v.get(r.clone())?;
        (!s.is_empty()).then(|| s.iter().sum::<f64>() / s.len() as f64)
    };
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let _ = writeln!(
        out,
        "  downstreams, mean in flight (before {}-{}, failing {}-{}, after {}-{}):",
        clock(before.start),
        clock(before.end),
        clock(during.start),
        clock(during.end),
        clock(after.start),
        clock(after.end)
    );
    for (i, d) in run.downstreams.iter().enumerate() {
        let level = mean(&d.in_flight_by_s, &before);
        let _ = write!(
            out,
            "    {:<10} bound {:>3}: {:>6} {:>6} {:>6}   {} granted, {} failed",
            d.name,
            d.bound,
            f(level),
            f(mean(&d.in_flight_by_s, &during)),
            f(mean(&d.in_flight_by_s, &after)),
            d.granted,
            d.failed
        );
        let _ = writeln!(out);
        if i != failing {
            continue;
        }
        // fairq's pool: when its limit was first cut, and back at its bound.
        if !d.limit_by_s.is_empty() {
            let bound = u64::from(d.bound);
            let cut = d.limit_by_s[start_s.min(d.limit_by_s.len())..]
                .iter()
                .position(|&l| l < bound);
            let restored = d.limit_by_s[end_s.min(d.limit_by_s.len())..]
                .iter()
                .position(|&l| l >= bound);
            let lowest = d
                .limit_by_s
                .get(during.clone())
                .and_then(|s| s.iter().min());
            let cut = cut.map_or("never cut".into(), |s| {
                format!("first cut {s} s into the failure")
            });
            let restored = restored.map_or(
                format!("not back at its bound ({bound}) by the end of the run"),
                |s| format!("back at its bound ({bound}) {s} s after it"),
            );
            out += &wrap(
                &format!(
                    "pool limit: {cut} (lowest {}), {restored}",
                    lowest.map_or("-".into(), |l| l.to_string()),
                ),
                WIDTH,
                "      ",
                "        ",
            );
        }
        // In flight: halved (5 s mean at most half the level before) and restored (10 s mean
        // at least 90 % of it).
        if let Some(level) = level {
            let run_mean = |from: usize, len: usize| mean(&d.in_flight_by_s, &(from..from + len));
            let halved = (start_s..end_s)
                .find(|&s| run_mean(s, 5).is_some_and(|m| m <= level / 2.0))
                .map(|s| s - start_s);
            let restored = (end_s..total_s.saturating_sub(10))
                .find(|&s| run_mean(s, 10).is_some_and(|m| m >= 0.9 * level))
                .map(|s| s - end_s);
            let halved = halved.map_or("never half its level before".into(), |s| {
                format!("half its level before {s} s into the failure")
            });
            let restored = restored
                .map_or("never 90% of it again by the end of the run".into(), |s| {
                    format!("90% of it again {s} s after it")
                });
            out += &wrap(
                &format!("in flight: {halved}, {restored}"),
                WIDTH,
                "      ",
                "        ",
            );
        }
    }
    // The other downstreams' tenants: their p95 wait and throughput across the phases.
    let bucket_s = (run.bucket_ns / SEC).max(1) as usize;
    let buckets = |r: &std::ops::Range<usize>| r.start / bucket_s..r.end.div_ceil(bucket_s);
    let _ = writeln!(
        out,
        "  tenants of the other downstreams: p95 wait ms and grants/s, before / failing / after"
    );
    for (g, row) in scenario.tenants.iter().zip(&run.rows) {
        if scenario.downstream_of(g) == Some(failing as u32) {
            continue;
        }
        let p95 = |r: &std::ops::Range<usize>| {
            let mut all: Vec<u32> = row
                .waits
                .get(buckets(r))
                .unwrap_or(&[])
                .iter()
                .flatten()
                .copied()
                .collect();
            percentile_us(&mut all, 0.95).map(|us| us as f64 / 1000.0)
        };
        let rate = |r: &std::ops::Range<usize>| {
            let b = buckets(r);
            let n: u64 = row
                .grants_by_bucket
                .get(b.clone())
                .unwrap_or(&[])
                .iter()
                .sum();
            n as f64 / ((b.end - b.start).max(1) * bucket_s) as f64
        };
        let _ = writeln!(
            out,
            "    {:<12} p95 {:>7} / {:>7} / {:>7} ms   {:>6.1} / {:>6.1} / {:>6.1} grants/s",
            row.name,
            ms(p95(&before)),
            ms(p95(&during)),
            ms(p95(&after)),
            rate(&before),
            rate(&during),
            rate(&after)
        );
    }
    out
}

fn clock(s: usize) -> String {
    format!("{:02}:{:02}", s / 60, s % 60)
}

/// The legend printed once under the tables (lines of at most [`WIDTH`] columns).
pub const LEGEND: &str = "\
refusals: q_full = queue_full (global bound), tq_full = tenant_queue_full,
  tbl_full = tenant_table_full, no_fit = wait_exceeds_budget,
  expired = deadline_exceeded (the budget ran out while queued).
wait = arrival to grant, granted requests only.
fair_share = granted / weighted max-min fair share of the capacity actually granted, per window
  (10 s by default), summed. backlog = share of those windows in which the tenant asked for more
  than its fair share. starve = longest time with a ready waiter and no grant.
Definitions: docs/simulation.md, \"Fairness measures\".";

/// The widest line the text report prints, tables aside.
pub const WIDTH: usize = 100;

/// `text` wrapped at spaces into lines of at most `width` columns (a longer word stands alone),
/// the first line indented by `first`, the others by `rest`; each line ends with a newline.
/// Runs of spaces inside a line are kept (aligned columns stay aligned); a no-break space
/// (U+00A0) joins a number to its unit and is printed as a space.
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut line_has_word = false;
    let (mut empties, mut seen_word) = (0usize, false);
    for token in text.split(' ') {
        if token.is_empty() {
            empties += 1;
            continue;
        }
        let spaces = if seen_word { empties + 1 } else { 0 };
        (empties, seen_word) = (0, true);
        if line_has_word && line.chars().count() + spaces + token.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_string();
            line_has_word = false;
        }
        if line_has_word {
            line.extend(std::iter::repeat_n(' ', spaces));
        }
        line.push_str(&token.replace('\u{a0}', " "));
        line_has_word = true;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// One verdict line.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The check's short name, for the bottom line.
    pub name: &'static str,
    /// Whether the threshold was crossed.
    pub alert: bool,
    /// The alert is expected by design: only the tenants the scenario marks bursting crossed
    /// it (refusing a burster's excess is the point). The reason, printed with it.
    pub expected: Option<&'static str>,
    /// The line, without the status word.
    pub text: String,
}

impl Verdict {
    fn new(name: &'static str, alert: bool, text: String) -> Verdict {
        Verdict {
            name,
            alert,
            expected: None,
            text,
        }
    }

    /// `ALERT`, `note` (a threshold crossed as the design intends) or `ok`, then the text.
    pub fn line(&self) -> String {
        match (self.alert, self.expected) {
            (true, Some(why)) => format!("note  by design ({why}): {}", self.text),
            (true, None) => format!("ALERT {}", self.text),
            (false, _) => format!("ok    {}", self.text),
        }
    }

    /// An alert that is not expected by design.
    pub fn unexpected_alert(&self) -> bool {
        self.alert && self.expected.is_none()
    }
}

/// Why an alert that only bursting tenants crossed is expected.
const ONLY_BURSTING: &str = "only tenants marked bursting";

fn mmss(ns: u64) -> String {
    let s = ns / SEC;
    format!("{:02}:{:02}", s / 60, s % 60)
}

/// The lowest 10-minute moving fair_share_ratio of a row: (ratio, window start ns).
pub fn min_moving_fair_share(row: &RowResult, window_ns: u64) -> Option<(f64, u64)> {
    let k = ((600 * SEC) / window_ns).max(1) as usize;
    let k = k.min(row.windows.len()).max(1);
    let mut best: Option<(f64, u64)> = None;
    let (mut g, mut e) = (0.0, 0.0);
    for (i, &(wg, we)) in row.windows.iter().enumerate() {
        g += wg;
        e += we;
        if i >= k {
            g -= row.windows[i - k].0;
            e -= row.windows[i - k].1;
        }
        // Judge full spans only, and only where at least a few requests were expected.
        if i + 1 >= k && e >= 10.0 {
            let ratio = g / e;
            let start = (i + 1 - k) as u64 * window_ns;
            if best.is_none_or(|(b, _)| ratio < b) {
                best = Some((ratio, start));
            }
        }
    }
    best
}

/// The verdict lines of one run against the alert thresholds, and, when `reference` (the
/// `ideal` run of the same trace) is given, the isolation verdict.
pub fn verdicts(run: &RunResult, reference: Option<&RunResult>) -> Vec<Verdict> {
    let mut out = Vec::new();
    let bursting = |name: &str| run.rows.iter().any(|r| r.name == name && r.bursting);

    // 1. fair_share_ratio, 10-minute moving average, under 0.7.
    let mut worst: Vec<(String, f64, u64)> = run
        .rows
        .iter()
        .filter_map(|r| {
            min_moving_fair_share(r, run.window_ns).map(|(v, at)| (r.name.clone(), v, at))
        })
        .collect();
    worst.sort_by(|a, b| a.1.total_cmp(&b.1));
    let below: Vec<&(String, f64, u64)> = worst.iter().filter(|w| w.1 < FAIR_SHARE_ALERT).collect();
    let bad: Vec<String> = below
        .iter()
        .map(|(n, v, at)| format!("{n} {v:.2} from {}", mmss(*at)))
        .collect();
    out.push(Verdict {
        name: "fair\u{a0}share",
        alert: !bad.is_empty(),
        expected: below
            .iter()
            .all(|w| bursting(&w.0))
            .then_some(ONLY_BURSTING),
        text: if bad.is_empty() {
            format!(
                "fair_share_ratio (10-min moving) >= {FAIR_SHARE_ALERT} for every tenant; \
                 lowest {}",
                worst
                    .first()
                    .map_or("-".into(), |(n, v, _)| format!("{n} {v:.2}"))
            )
        } else {
            format!(
                "fair_share_ratio (10-min moving) < {FAIR_SHARE_ALERT}: {}",
                bad.join(", ")
            )
        },
    });

    // 2. starvation over 30 s.
    let longest = run
        .rows
        .iter()
        .max_by_key(|r| r.max_starvation_ns)
        .expect("at least one row");
    let starved_rows: Vec<&RowResult> = run
        .rows
        .iter()
        .filter(|r| r.max_starvation_ns > STARVATION_ALERT_NS)
        .collect();
    let starved: Vec<String> = starved_rows
        .iter()
        .map(|r| {
            format!(
                "{} {:.1}\u{a0}s",
                r.name,
                r.max_starvation_ns as f64 / SEC as f64
            )
        })
        .collect();
    out.push(Verdict {
        name: "starvation",
        alert: !starved.is_empty(),
        expected: starved_rows
            .iter()
            .all(|r| r.bursting)
            .then_some(ONLY_BURSTING),
        text: if starved.is_empty() {
            format!(
                "starvation_window <=\u{a0}30\u{a0}s for every tenant; longest {} {:.2}\u{a0}s",
                longest.name,
                longest.max_starvation_ns as f64 / SEC as f64
            )
        } else {
            format!("starvation_window >\u{a0}30\u{a0}s: {}", starved.join(", "))
        },
    });

    let (mut dominated, only_bursting) = dominance(run);

    // 4. refusal-rate spread over 15 pp.
    let rates: Vec<(&RowResult, f64)> = run
        .rows
        .iter()
        .filter(|r| r.offered > 0)
        .map(|r| (r, 100.0 * r.refused_total() as f64 / r.offered as f64))
        .collect();
    let spread = |rates: &[(&RowResult, f64)]| -> Option<(f64, String, String)> {
        let max = rates.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
        let min = rates.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
        Some((
            max.1 - min.1,
            format!("{} {:.1}%", max.0.name, max.1),
            format!("{} {:.1}%", min.0.name, min.1),
        ))
    };
    let within: Vec<(&RowResult, f64)> = rates
        .iter()
        .filter(|(r, _)| within_share(r))
        .copied()
        .collect();
    if let Some((all, hi, lo)) = spread(&rates) {
        let inside =
            spread(&within).map_or("no tenant stayed within its share".into(), |(s, h, l)| {
                format!(
                    "among tenants that asked no more than their fair share: {s:.1}\u{a0}pp ({h}, {l})"
                )
            });
        // Expected by design when the refusals are the bursting tenants' excess: some tenant
        // is marked bursting, and every other one lost under `SPARED_REFUSAL_PCT` of its
        // requests.
        let spared = rates.iter().any(|(r, _)| r.bursting)
            && rates
                .iter()
                .all(|(r, rate)| r.bursting || *rate < SPARED_REFUSAL_PCT);
        out.push(Verdict {
            name: "refusal\u{a0}spread",
            alert: all > REFUSAL_SPREAD_PP,
            expected: spared.then_some("only tenants marked bursting are refused"),
            text: format!(
                "refusal-rate spread {}\u{a0}{REFUSAL_SPREAD_PP}\u{a0}pp: {all:.1}\u{a0}pp ({hi}, {lo}); {inside}",
                if all > REFUSAL_SPREAD_PP { ">" } else { "<=" }
            ),
        });
    }
    // The tenants marked bursting taking the capacity the others leave is work conservation:
    // expected by design while the others stay isolated (the reference isolates by definition).
    let isolation = reference
        .filter(|r| r.name != run.name)
        .and_then(|reference| isolation(run, reference));
    let isolated = match &isolation {
        Some(v) => !v.alert,
        None => reference.is_some_and(|r| r.name == run.name && isolation_rows(r, r).is_some()),
    };
    if only_bursting && isolated {
        dominated.expected = Some("only tenants marked bursting, and the others isolated");
    }
    out.insert(2, dominated);
    out.extend(isolation);
    out
}

/// One tenant row's isolation figures: (name, p95 ms, reference p95 ms, limit ms).
pub type Isolation = (String, f64, f64, f64);

/// Per row not marked bursting, with granted requests under both runs: its p95 wait, its p95
/// under `reference`, and the limit (`ISOLATION_FACTOR` x the reference + `ISOLATION_SLACK_MS`).
/// `None` when the scenario marks no tenant bursting, or every tenant.
pub fn isolation_rows(run: &RunResult, reference: &RunResult) -> Option<Vec<Isolation>> {
    let marked = run.rows.iter().filter(|r| r.bursting).count();
    if marked == 0 || marked == run.rows.len() {
        return None;
    }
    Some(
        run.rows
            .iter()
            .zip(&reference.rows)
            .filter(|(r, _)| !r.bursting)
            .filter_map(|(r, base)| {
                let p95 = r.wait_percentile_ms(0.95)?;
                let base = base.wait_percentile_ms(0.95)?;
                Some((
                    r.name.clone(),
                    p95,
                    base,
                    ISOLATION_FACTOR * base + ISOLATION_SLACK_MS,
                ))
            })
            .collect(),
    )
}

/// Whether the tenants not marked bursting were isolated from those marked: each one's p95 wait
/// within `ISOLATION_FACTOR` x its p95 under `reference` plus `ISOLATION_SLACK_MS`.
fn isolation(run: &RunResult, reference: &RunResult) -> Option<Verdict> {
    let rows = isolation_rows(run, reference)?;
    let over: Vec<&Isolation> = rows.iter().filter(|r| r.1 > r.3).collect();
    let fmt = |r: &Isolation| {
        format!(
            "{} {}\u{a0}ms (ideal {}\u{a0}ms, limit {}\u{a0}ms)",
            r.0,
            ms(Some(r.1)),
            ms(Some(r.2)),
            ms(Some(r.3))
        )
    };
    let rule = format!(
        "p95 wait of every tenant not marked bursting <=\u{a0}{ISOLATION_FACTOR}x its p95 under {} \
         +\u{a0}{ISOLATION_SLACK_MS}\u{a0}ms",
        reference.name
    );
    let text = if over.is_empty() {
        let closest = rows
            .iter()
            .max_by(|a, b| (a.1 / a.3).total_cmp(&(b.1 / b.3)))
            .map_or("-".into(), fmt);
        format!("isolated: {rule}; closest {closest}")
    } else {
        let list: Vec<String> = over.iter().map(|r| fmt(r)).collect();
        format!("not isolated: {rule} fails for {}", list.join(", "))
    };
    Some(Verdict::new("isolation", !over.is_empty(), text))
}

/// The throttling trigger: one tenant over 40% of throughput while the others' p95 rises.
///
/// Per chart bucket, a row *dominates* when one of its tenants took over 40% of the bucket's
/// grants (a group counts its average member). Another row's p95 *rises* when its p95 wait in
/// the dominated buckets is over 1.2× and at least 1 ms above its p95 in the buckets nobody
/// dominates.
///
/// Also whether every tenant that dominated while the others' p95 rose is marked bursting.
fn dominance(run: &RunResult) -> (Verdict, bool) {
    let buckets = run.rows[0].grants_by_bucket.len();
    let totals: Vec<u64> = (0..buckets)
        .map(|b| run.rows.iter().map(|r| r.grants_by_bucket[b]).sum())
        .collect();
    let dominates = |r: &RowResult, b: usize| {
        totals[b] >= 20
            && r.grants_by_bucket[b] as f64 / f64::from(r.count)
                > DOMINANCE_SHARE * totals[b] as f64
    };
    let calm: Vec<usize> = (0..buckets)
        .filter(|&b| totals[b] > 0 && !run.rows.iter().any(|r| dominates(r, b)))
        .collect();
    let p95_in = |r: &RowResult, set: &[usize]| -> Option<f64> {
        let mut w: Vec<u32> = set
            .iter()
            .flat_map(|&b| r.waits[b].iter().copied())
            .collect();
        if w.len() < 20 {
            return None;
        }
        percentile_us(&mut w, 0.95).map(|us| f64::from(us) / 1000.0)
    };
    let mut notes = Vec::new();
    let mut alert = false;
    let mut only_bursting = true;
    for x in &run.rows {
        let dom: Vec<usize> = (0..buckets).filter(|&b| dominates(x, b)).collect();
        if dom.is_empty() {
            continue;
        }
        let share = dom.iter().map(|&b| x.grants_by_bucket[b]).sum::<u64>() as f64
            / dom.iter().map(|&b| totals[b]).sum::<u64>() as f64;
        let span = format!(
            "{} took {:.0}% of grants in {:.0}\u{a0}s",
            x.name,
            100.0 * share,
            dom.len() as f64 * run.bucket_ns as f64 / SEC as f64
        );
        if calm.is_empty() {
            notes.push(format!("{span}; no calm period to compare p95 with"));
            continue;
        }
        let mut risen = Vec::new();
        let mut worst: Option<(f64, String)> = None;
        for y in run.rows.iter().filter(|y| y.name != x.name) {
            let (Some(during), Some(calm_p95)) = (p95_in(y, &dom), p95_in(y, &calm)) else {
                continue;
            };
            let factor = during / calm_p95.max(1e-3);
            if during > P95_RISE_FACTOR * calm_p95 && during - calm_p95 >= P95_RISE_FLOOR_MS {
                risen.push(format!(
                    "{} p95 {}\u{a0}ms vs {}\u{a0}ms",
                    y.name,
                    ms(Some(during)),
                    ms(Some(calm_p95))
                ));
            }
            if worst.as_ref().is_none_or(|(f, _)| factor > *f) {
                worst = Some((
                    factor,
                    format!(
                        "{} {}\u{a0}ms vs {}\u{a0}ms",
                        y.name,
                        ms(Some(during)),
                        ms(Some(calm_p95))
                    ),
                ));
            }
        }
        if risen.is_empty() {
            notes.push(format!(
                "{span}; others' p95 held (largest change: {})",
                worst.map_or("-".into(), |w| w.1)
            ));
        } else {
            alert = true;
            only_bursting &= x.bursting;
            notes.push(format!(
                "{span} while others' p95 rose: {}",
                risen.join(", ")
            ));
        }
    }
    let verdict = Verdict {
        name: "one\u{a0}tenant\u{a0}>\u{a0}40%",
        alert,
        expected: None,
        text: if notes.is_empty() {
            format!(
                "no tenant took over {:.0}% of throughput",
                DOMINANCE_SHARE * 100.0
            )
        } else {
            format!(
                "one tenant > {:.0}% of throughput with others' p95 up > {P95_RISE_FACTOR}x: {}",
                DOMINANCE_SHARE * 100.0,
                notes.join("; ")
            )
        },
    };
    (verdict, only_bursting)
}

/// Whether a row asked for no more than its fair share (within 5%) over the run.
fn within_share(r: &RowResult) -> bool {
    r.fair_demand <= 1.05 * r.fair_expected
}

/// The `ideal` run among `runs`, the reference of the isolation verdict.
pub fn reference(runs: &[RunResult]) -> Option<&RunResult> {
    runs.iter().find(|r| r.name == crate::sched::REFERENCE)
}

/// Whether `run` isolated the tenants not marked bursting (see [`isolation_rows`]); `None` when
/// it is the reference itself, no reference ran, or the scenario marks no tenant bursting.
pub fn isolated(run: &RunResult, runs: &[RunResult]) -> Option<bool> {
    let reference = reference(runs).filter(|r| r.name != run.name)?;
    isolation_rows(run, reference).map(|rows| rows.iter().all(|r| r.1 <= r.3))
}

/// One line per scheduler: whether the tenants not marked bursting were isolated from those
/// marked (with the tenant nearest to, or furthest over, its limit), how many of the other
/// checks alert (and how many of those as expected by design), and what the tenants that asked
/// no more than their fair share got (their worst p95 wait, the share of their requests
/// refused).
pub fn bottom_lines(runs: &[RunResult]) -> String {
    let reference = reference(runs);
    let judged = reference.is_some_and(|r| isolation_rows(r, r).is_some());
    let mut out = if judged {
        wrap(
            &format!(
                "bottom line (isolated: every tenant not marked bursting waits p95 <=\u{a0}\
                 {ISOLATION_FACTOR}x its p95 under {} +\u{a0}{ISOLATION_SLACK_MS}\u{a0}ms; then \
                 the other checks' alerts; then the tenants within their fair share: worst p95 \
                 wait, share of requests refused):",
                crate::sched::REFERENCE
            ),
            WIDTH,
            "",
            "  ",
        )
    } else {
        String::from(
            "bottom line (tenants within their fair share: worst p95 wait, share of requests refused):\n",
        )
    };
    let width = runs.iter().map(|r| r.name.len()).max().unwrap_or(0);
    for run in runs {
        let verdicts: Vec<Verdict> = verdicts(run, reference)
            .into_iter()
            .filter(|v| v.name != "isolation")
            .collect();
        let name_list = |pick: &dyn Fn(&Verdict) -> bool| -> Vec<&str> {
            verdicts
                .iter()
                .filter(|v| pick(v))
                .map(|v| v.name)
                .collect()
        };
        let alerts = name_list(&|v| v.unexpected_alert());
        let expected = name_list(&|v| v.alert && v.expected.is_some());
        let mut checks = if alerts.is_empty() {
            format!("no check of {} alerts", verdicts.len())
        } else {
            format!(
                "{} of {} checks alert ({})",
                alerts.len(),
                verdicts.len(),
                alerts.join(", ")
            )
        };
        if !expected.is_empty() {
            let by_design = if alerts.is_empty() {
                " except".to_string()
            } else {
                format!(" and {}", expected.len())
            };
            let _ = write!(
                checks,
                "{by_design} as expected by design ({})",
                expected.join(", ")
            );
        }
        let isolation = match reference.filter(|r| judged && r.name != run.name) {
            None if judged => "the reference; ".to_string(),
            None => String::new(),
            Some(reference) => {
                let rows = isolation_rows(run, reference).unwrap_or_default();
                let worst = rows
                    .iter()
                    .max_by(|a, b| (a.1 / a.3).total_cmp(&(b.1 / b.3)));
                let (word, which) = if rows.iter().all(|r| r.1 <= r.3) {
                    ("isolated", "closest")
                } else {
                    ("NOT isolated", "worst")
                };
                match worst {
                    Some(w) => format!(
                        "{word} ({which}: {} p95 {}\u{a0}ms, limit {}\u{a0}ms); ",
                        w.0,
                        ms(Some(w.1)),
                        ms(Some(w.3))
                    ),
                    None => format!("{word}; "),
                }
            }
        };
        let within: Vec<&RowResult> = run.rows.iter().filter(|r| within_share(r)).collect();
        let fared = if within.is_empty() {
            "no tenant stayed within its share".to_string()
        } else {
            let p95 = within
                .iter()
                .filter_map(|r| r.wait_percentile_ms(0.95))
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            let offered: u64 = within.iter().map(|r| r.offered).sum();
            let refused: u64 = within.iter().map(|r| r.refused_total()).sum();
            format!(
                "{} ms, {:.1}%",
                ms(p95),
                100.0 * refused as f64 / offered.max(1) as f64
            )
        };
        let line = format!("{:<width$}  {isolation}{checks}; {fared}", run.name);
        out += &wrap(&line, WIDTH, "  ", "    ");
    }
    out
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

/// The `--json` document: `{"scenario", "schedulers": [{"name", "victims_isolated",
/// "tenants": [...]}]}`. `victims_isolated` is the isolation verdict (`null` for the reference
/// itself, without the reference, or when the scenario marks no tenant bursting). fairq's entry
/// also has `estimated_wait`: its estimates against the waits that followed (`null` ratios are
/// estimates of 0).
pub fn json(scenario: &Scenario, runs: &[RunResult]) -> Value {
    json!({
        "scenario": scenario.name,
        "schedulers": runs.iter().map(|run| {
            let mut doc = json!({
                "name": run.name,
                "victims_isolated": isolated(run, runs),
                "tenants": run.rows.iter().map(|r| json!({
                    "id": r.name,
                    "weight": r.weight,
                    "bursting": r.bursting,
                    "offered": r.offered,
                    "granted": r.granted,
                    "refused": r.refused_total(),
                    "p50_wait_ms": r.wait_percentile_ms(0.50).map(|v| round(v, 3)),
                    "p95_wait_ms": r.wait_percentile_ms(0.95).map(|v| round(v, 3)),
                    "p99_wait_ms": r.wait_percentile_ms(0.99).map(|v| round(v, 3)),
                    "fair_share_ratio": r.fair_share_ratio().map(|v| round(v, 4)),
                    "max_starvation_ms": round(r.max_starvation_ns as f64 / 1e6, 3),
                })).collect::<Vec<_>>(),
            });
            // Only a scheduler that gives estimates (fairq) has the key.
            if let Some(e) = &run.estimates {
                let ratio = |v: f64| if v.is_finite() { json!(round(v, 3)) } else { Value::Null };
                doc["estimated_wait"] = json!({
                    "compared": e.n,
                    "told_zero": e.zero,
                    "actual_over_estimated_p10": ratio(e.p10),
                    "actual_over_estimated_p50": ratio(e.p50),
                    "actual_over_estimated_p90": ratio(e.p90),
                });
            }
            // Only scenarios with downstreams have the key.
            if !run.downstreams.is_empty() {
                doc["downstreams"] = run.downstreams.iter().map(|d| json!({
                    "name": d.name,
                    "bound": d.bound,
                    "granted": d.granted,
                    "failed": d.failed,
                    "lowest_limit": d.limit_by_s.iter().min(),
                })).collect::<Vec<_>>().into();
            }
            doc
        }).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        let text = "one two three four five six seven eight nine ten";
        let out = wrap(text, 20, "  ", "    ");
        assert_eq!(
            out,
            "  one two three four\n    five six seven\n    eight nine ten\n"
        );
        assert!(out.lines().all(|l| l.len() <= 20));
        assert_eq!(wrap("fifo   3 of 4", 100, "  ", ""), "  fifo   3 of 4\n");
        assert_eq!(wrap("in 35\u{a0}s now", 6, "", ""), "in\n35 s\nnow\n");
        let long = "x".repeat(30);
        assert_eq!(
            wrap(&format!("a {long} b"), 10, "", ""),
            format!("a\n{long}\nb\n")
        );
    }
}
