//! Scenario files: the workload and the rules a simulation replays through every scheduler.
//!
//! A scenario is TOML (see `examples/scenarios/`). Every value is range-checked while it is
//! parsed, so a bad file is rejected with the line, the column and the field at fault instead of
//! a simulation that silently means something else. Every scenario of `examples/scenarios/` is
//! compiled into the binary, so `--scenario NAME` works from any directory; the default is
//! `noisy-neighbour`.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Deserializer};

/// The built-in scenarios, by name: the files of `examples/scenarios/`, compiled in. The first
/// is the one a bare `fairq` (and `cargo run --release`) simulates.
/// A scenario name as the built-in names spell it: lower case, `-` between words, British
/// "neighbour".
fn canonical_name(name: &str) -> String {
    name.trim()
        .to_lowercase()
        .replace(['_', ' '], "-")
        .replace("neighbor", "neighbour")
}

/// The built-in scenario whose name is nearest to `name` (edit distance), if it is near enough
/// to be a slip: at most a third of its length away.
pub fn nearest_builtin(name: &str) -> Option<&'static str> {
    let wanted = canonical_name(name);
    BUILTIN
        .iter()
        .map(|(n, _)| (edit_distance(&wanted, n), *n))
        .min()
        .filter(|(d, n)| *d <= n.len() / 3)
        .map(|(_, n)| n)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

pub const BUILTIN: [(&str, &str); 6] = [
    (
        "noisy-neighbour",
        include_str!("../../examples/scenarios/noisy-neighbour.toml"),
    ),
    (
        "tiers-steady",
        include_str!("../../examples/scenarios/tiers-steady.toml"),
    ),
    (
        "many-tenants",
        include_str!("../../examples/scenarios/many-tenants.toml"),
    ),
    (
        "many-light-tenants",
        include_str!("../../examples/scenarios/many-light-tenants.toml"),
    ),
    (
        "retry-storm",
        include_str!("../../examples/scenarios/retry-storm.toml"),
    ),
    (
        "downstream-errors",
        include_str!("../../examples/scenarios/downstream-errors.toml"),
    ),
];

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, printed in reports and in `--json`.
    pub name: String,
    /// One or two sentences on what the scenario shows.
    #[serde(default)]
    pub description: String,
    /// Virtual time simulated, in seconds.
    #[serde(deserialize_with = "positive_f64")]
    pub duration_s: f64,
    /// Seed of the arrival trace: the same seed gives the same trace.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The shared backend every scheduler feeds.
    pub backend: Backend,
    /// The budget and bound rules every scheduler applies.
    #[serde(default)]
    pub queue: QueueRules,
    /// Accounting and chart resolution.
    #[serde(default)]
    pub report: ReportRules,
    /// The downstreams behind the backend's slots (none: one anonymous downstream). fairq gives
    /// each a bulkhead pool; a downstream may fail for a while.
    #[serde(default)]
    pub downstreams: Vec<Downstream>,
    /// fairq's load shedding on those pools (none: off).
    #[serde(default)]
    pub shedding: Option<ShedRules>,
    /// Tenant groups. A group of `count` identical tenants is one row in the report.
    #[serde(deserialize_with = "non_empty")]
    pub tenants: Vec<TenantGroup>,
}

fn default_seed() -> u64 {
    1
}

/// Backend capacity: `max_in_flight` slots, each busy for one service time per request.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Requests served at once (the engine's `max_in_flight`). 1..=1048576.
    #[serde(deserialize_with = "in_flight_range")]
    pub max_in_flight: u32,
    /// Service time distribution.
    pub service: Service,
}

/// A service time distribution, in milliseconds.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "dist", rename_all = "lowercase")]
pub enum Service {
    /// Always `ms`.
    Constant {
        /// Service time, ms.
        #[serde(deserialize_with = "positive_f64")]
        ms: f64,
    },
    /// Exponential with mean `mean_ms`.
    Exponential {
        /// Mean service time, ms.
        #[serde(deserialize_with = "positive_f64")]
        mean_ms: f64,
    },
    /// Log-normal with mean `mean_ms` and shape `sigma` (0.5 gives p99 ≈ 2.6× the mean).
    Lognormal {
        /// Mean service time, ms.
        #[serde(deserialize_with = "positive_f64")]
        mean_ms: f64,
        /// Standard deviation of the underlying normal, 0..=3.
        #[serde(deserialize_with = "sigma_range")]
        sigma: f64,
    },
}

impl Service {
    /// Mean service time in ms.
    pub fn mean_ms(&self) -> f64 {
        match *self {
            Service::Constant { ms } => ms,
            Service::Exponential { mean_ms } | Service::Lognormal { mean_ms, .. } => mean_ms,
        }
    }
}

/// A downstream a tenant group's requests go to: fairq's bulkhead pool for it, and when it fails.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Downstream {
    /// Name, referred to by `[[tenants]] downstream`.
    pub name: String,
    /// fairq's bulkhead pool for it: most of its requests in service at once,
    /// 1..=`backend.max_in_flight` (fifo, drr and ideal only have the backend's slots).
    #[serde(deserialize_with = "in_flight_range")]
    pub max_in_flight: u32,
    /// Periods during which some of its calls fail.
    #[serde(default)]
    pub failures: Vec<Failure>,
}

/// A period during which a downstream fails part of its calls, each after a timeout.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// Start, s from the beginning.
    #[serde(deserialize_with = "non_negative_f64")]
    pub start_s: f64,
    /// Length, s.
    #[serde(deserialize_with = "positive_f64")]
    pub duration_s: f64,
    /// Calls granted in the period that fail, %, 0..=100.
    #[serde(deserialize_with = "percent_f64")]
    pub error_percent: f64,
    /// How long a failing call holds its slot, ms (a timeout), instead of its service time.
    #[serde(deserialize_with = "non_negative_f64")]
    pub error_ms: f64,
}

/// fairq's load shedding (`fairq::Shedding`), fed with each downstream call's outcome.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShedRules {
    /// Error rate above which a window cuts the pool's limit, %.
    pub error_percent: u32,
    /// The judging window, ms.
    pub window_ms: u64,
    /// Fewest reports in a window for it to cut.
    #[serde(default = "twenty")]
    pub min_requests: u32,
}

fn twenty() -> u32 {
    20
}

/// Budget, timeout and bound rules, applied alike by every scheduler.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueRules {
    /// Longest a request may wait, ms (the engine's `max_wait_ms`).
    #[serde(deserialize_with = "wait_range")]
    pub max_wait_ms: u64,
    /// Global bound on queued requests (all schedulers).
    #[serde(deserialize_with = "queue_range")]
    pub queue_capacity: u32,
    /// Per-tenant bound (drr, fairq and ideal; a single FIFO queue has none).
    #[serde(deserialize_with = "queue_range")]
    pub tenant_queue_capacity: u32,
    /// Most tenants with queued or in-flight requests (drr, fairq and ideal).
    #[serde(deserialize_with = "tenants_range")]
    pub max_tenants: u32,
    /// How long fairq keeps an idle tenant's slot, ms.
    #[serde(deserialize_with = "idle_range")]
    pub tenant_idle_ms: u64,
}

impl Default for QueueRules {
    fn default() -> Self {
        let engine = fairq::Config::default();
        QueueRules {
            max_wait_ms: engine.max_wait_ms,
            queue_capacity: engine.queue_capacity,
            tenant_queue_capacity: engine.tenant_queue_capacity,
            max_tenants: engine.max_tenants,
            tenant_idle_ms: engine.tenant_idle_ms,
        }
    }
}

/// How results are accounted.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportRules {
    /// Fair-share accounting window, s: each window's granted capacity is shared out by weight.
    #[serde(deserialize_with = "positive_f64")]
    pub window_s: f64,
    /// Chart resolution, s: one p95 point per tenant row per bucket.
    #[serde(deserialize_with = "positive_f64")]
    pub chart_bucket_s: f64,
}

impl Default for ReportRules {
    fn default() -> Self {
        ReportRules {
            window_s: 10.0,
            chart_bucket_s: 60.0,
        }
    }
}

/// A group of identical tenants (one tenant when `count` is 1).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantGroup {
    /// Row name; members are `name` (count 1) or `name-0`, `name-1`, ….
    pub name: String,
    /// Tenant weight (tier), 1..=10000.
    #[serde(deserialize_with = "weight_range")]
    pub weight: u32,
    /// Tenants in the group, 1..=1000000.
    #[serde(default = "one", deserialize_with = "count_range")]
    pub count: u32,
    /// Steady Poisson rate per tenant: requests/s, or a multiple of its fair share.
    #[serde(default)]
    pub rate: Rate,
    /// Cost of each request in resource units, 1..=1000000.
    #[serde(default = "one", deserialize_with = "cost_range")]
    pub cost: u32,
    /// The request's own total timeout, ms; 0: none (the budget is `max_wait_ms`).
    #[serde(default)]
    pub timeout_ms: u64,
    /// The limiter's Retry-After carried by each request, ms: not servable before it.
    #[serde(default)]
    pub retry_after_ms: u64,
    /// Periods with a different rate (bursts, floods).
    #[serde(default)]
    pub bursts: Vec<Burst>,
    /// Client retries after a refusal.
    #[serde(default)]
    pub retry: Option<Retry>,
    /// The downstream its requests go to (`[[downstreams]] name`); default: the first.
    #[serde(default)]
    pub downstream: Option<String>,
    /// The group is the load the others are to be isolated from (a burster, a flood): the
    /// `ideal` scheduler serves it only when no other tenant waits, and the isolation verdict
    /// judges every group that is not bursting.
    #[serde(default)]
    pub bursting: bool,
}

fn one() -> u32 {
    1
}

/// A Poisson rate per tenant.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Requests per second.
    #[serde(default, deserialize_with = "non_negative_f64")]
    pub per_s: f64,
    /// Multiple of the tenant's fair share (capacity × weight / Σ weights), added to `per_s`.
    #[serde(default, deserialize_with = "non_negative_f64")]
    pub share: f64,
}

impl Rate {
    /// Requests per second for a tenant whose fair share is `fair_share` requests/s.
    pub fn resolve(&self, fair_share: f64) -> f64 {
        self.per_s + self.share * fair_share
    }
}

/// A period during which a group's rate is replaced.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// Start, s from the beginning.
    #[serde(deserialize_with = "non_negative_f64")]
    pub start_s: f64,
    /// Length, s.
    #[serde(deserialize_with = "positive_f64")]
    pub duration_s: f64,
    /// Rate during the period.
    pub rate: Rate,
}

/// Client behaviour after a refusal (any reason): send the request again.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Most attempts per request, the first included, 1..=100.
    #[serde(deserialize_with = "attempts_range")]
    pub max_attempts: u32,
    /// Delay before a retry, ms.
    #[serde(deserialize_with = "non_negative_f64")]
    pub backoff_ms: f64,
    /// Each delay is multiplied by a uniform factor in [1 - jitter, 1 + jitter]. 0..=1.
    #[serde(default, deserialize_with = "unit_f64")]
    pub jitter: f64,
    /// Each retry's delay is the previous one times this (1: constant). 1..=10.
    #[serde(default = "one_f64", deserialize_with = "multiplier_range")]
    pub multiplier: f64,
}

fn one_f64() -> f64 {
    1.0
}

/// A scenario that could not be loaded. Its message names the file, line, column and field.
#[derive(Debug)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

impl Scenario {
    /// Parses a scenario; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| {
            let place = match e.span() {
                Some(span) => {
                    let (line, col) = line_col(text, span.start);
                    format!("{origin}:{line}:{col}")
                }
                None => origin.to_string(),
            };
            ScenarioError(format!("bad scenario {place}: {e}"))
        })?;
        scenario.check(text, origin)?;
        Ok(scenario)
    }

    /// Reads and parses a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError(format!("cannot read scenario {origin}: {e}")))?;
        Scenario::parse(&text, &origin)
    }

    /// The default scenario, noisy-neighbour.
    pub fn builtin() -> Scenario {
        Scenario::named(BUILTIN[0].0).expect("the default scenario is built in")
    }

    /// A built-in scenario by name (`None`: no such name).
    /// A built-in scenario by name. Case, `_` for `-` and the US spelling "neighbor" are
    /// accepted.
    pub fn named(name: &str) -> Option<Scenario> {
        let wanted = canonical_name(name);
        let (name, text) = BUILTIN.iter().find(|(n, _)| *n == wanted)?;
        let origin = format!("examples/scenarios/{name}.toml");
        Some(Scenario::parse(text, &origin).expect("every built-in scenario parses"))
    }

    /// Checks that span fields (the engine's own limits, names), with the line of the field.
    fn check(&self, text: &str, origin: &str) -> Result<(), ScenarioError> {
        let fail = |key: &str, what: String| {
            let line = find_line(text, key);
            ScenarioError(format!(
                "bad scenario {origin}:{line}: field `{key}`: {what}"
            ))
        };
        let mut names = std::collections::HashSet::new();
        for group in &self.tenants {
            if group.name.is_empty() || !names.insert(group.name.as_str()) {
                return Err(fail(
                    "name",
                    format!(
                        "tenant names must be unique and non-empty: {:?}",
                        group.name
                    ),
                ));
            }
        }
        let tenants: u64 = self.tenants.iter().map(|g| u64::from(g.count)).sum();
        if tenants > 4_000_000 {
            return Err(fail(
                "count",
                format!("{tenants} tenants in all, most 4000000"),
            ));
        }
        let mut weights: Vec<u32> = self.tenants.iter().map(|g| g.weight).collect();
        weights.sort_unstable();
        weights.dedup();
        if weights.len() > fairq::MAX_WEIGHT_CLASSES as usize {
            return Err(fail(
                "weight",
                format!(
                    "{} distinct weights, the engine holds at most {}",
                    weights.len(),
                    fairq::MAX_WEIGHT_CLASSES
                ),
            ));
        }
        for group in &self.tenants {
            if group.downstream.is_some() && self.downstream_of(group).is_none() {
                return Err(fail(
                    "downstream",
                    format!(
                        "tenant group {:?} names downstream {:?}, which no [[downstreams]] \
                         declares",
                        group.name,
                        group.downstream.as_deref().unwrap_or("")
                    ),
                ));
            }
        }
        if self.engine_config().validate().is_err() {
            let e = self.engine_config().validate().unwrap_err();
            return Err(fail(e.field, e.message));
        }
        Ok(())
    }

    /// The engine configuration these rules describe (enabled).
    pub fn engine_config(&self) -> fairq::Config {
        let mut distinct: Vec<u32> = self.tenants.iter().map(|g| g.weight).collect();
        distinct.sort_unstable();
        distinct.dedup();
        fairq::Config {
            enabled: true,
            max_tenants: self.queue.max_tenants,
            tenant_queue_capacity: self.queue.tenant_queue_capacity,
            queue_capacity: self.queue.queue_capacity,
            max_in_flight: self.backend.max_in_flight,
            default_weight: 1,
            max_wait_ms: self.queue.max_wait_ms,
            tenant_idle_ms: self.queue.tenant_idle_ms,
            // One class per distinct weight, plus the default weight's.
            max_weight_classes: (distinct.len() as u32 + 1).min(fairq::MAX_WEIGHT_CLASSES),
            downstream_max_in_flight: self.downstreams.iter().map(|d| d.max_in_flight).collect(),
            shedding: self.shedding.map(|s| fairq::Shedding {
                error_percent: s.error_percent,
                window_ms: s.window_ms,
                min_requests: s.min_requests,
            }),
            ..fairq::Config::default()
        }
    }

    /// The index of the downstream `group`'s requests go to (0 without downstreams); `None`
    /// when it names one that is not declared.
    pub fn downstream_of(&self, group: &TenantGroup) -> Option<u32> {
        match &group.downstream {
            None => Some(0),
            Some(name) => self
                .downstreams
                .iter()
                .position(|d| &d.name == name)
                .map(|i| i as u32),
        }
    }

    /// The first failure of any downstream: (downstream, start ns, end ns).
    pub fn first_failure(&self) -> Option<(usize, u64, u64)> {
        let sec = 1e9; // nanoseconds per second
        self.downstreams
            .iter()
            .enumerate()
            .flat_map(|(i, d)| d.failures.iter().map(move |f| (i, f)))
            .min_by(|a, b| a.1.start_s.total_cmp(&b.1.start_s))
            .map(|(i, f)| {
                (
                    i,
                    (f.start_s * sec) as u64,
                    ((f.start_s + f.duration_s) * sec) as u64,
                )
            })
    }

    /// Requests per second the backend serves when busy: slots / mean service time.
    pub fn capacity_per_s(&self) -> f64 {
        f64::from(self.backend.max_in_flight) * 1000.0 / self.backend.service.mean_ms()
    }

    /// Σ weights over every tenant.
    pub fn total_weight(&self) -> f64 {
        self.tenants
            .iter()
            .map(|g| f64::from(g.weight) * f64::from(g.count))
            .sum()
    }

    /// Fair share of one tenant of `group`, in requests/s (capacity × weight / Σ weights, with
    /// each request costing `cost` units).
    pub fn fair_share_per_s(&self, group: &TenantGroup) -> f64 {
        self.capacity_per_s() * f64::from(group.weight)
            / self.total_weight()
            / f64::from(group.cost)
    }

    /// This scenario without the named groups (e.g. the burster, for a baseline run).
    pub fn without(&self, names: &[String]) -> Result<Scenario, ScenarioError> {
        for name in names {
            if !self.tenants.iter().any(|g| &g.name == name) {
                return Err(ScenarioError(format!(
                    "--without {name}: no tenant group of that name in scenario {}",
                    self.name
                )));
            }
        }
        let mut out = self.clone();
        // Rates expressed as shares keep their absolute value: the baseline differs only by the
        // removed tenants' traffic.
        let total_weight = self.total_weight();
        let capacity = self.capacity_per_s();
        for g in &mut out.tenants {
            let share = capacity * f64::from(g.weight) / total_weight / f64::from(g.cost);
            g.rate = Rate {
                per_s: g.rate.resolve(share),
                share: 0.0,
            };
            for b in &mut g.bursts {
                b.rate = Rate {
                    per_s: b.rate.resolve(share),
                    share: 0.0,
                };
            }
        }
        out.tenants.retain(|g| !names.contains(&g.name));
        if out.tenants.is_empty() {
            return Err(ScenarioError("--without removed every tenant".into()));
        }
        Ok(out)
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// The line of the first `key =` assignment in `text` (1 if none), for checks made after parsing.
fn find_line(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(1, |i| i + 1)
}

// ------------------------------------------------------------------ range-checked fields

fn range_u64<'de, D: Deserializer<'de>>(d: D, min: u64, max: u64) -> Result<u64, D::Error> {
    let v = i64::deserialize(d)?;
    if v < 0 || (v as u64) < min || (v as u64) > max {
        return Err(serde::de::Error::custom(format!(
            "must be in {min}..={max}, got {v}"
        )));
    }
    Ok(v as u64)
}

fn f64_where<'de, D: Deserializer<'de>>(
    d: D,
    ok: impl Fn(f64) -> bool,
    what: &str,
) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Num {
        I(i64),
        F(f64),
    }
    let v = match Num::deserialize(d)? {
        Num::I(i) => i as f64,
        Num::F(f) => f,
    };
    if !v.is_finite() || !ok(v) {
        return Err(serde::de::Error::custom(format!("must be {what}, got {v}")));
    }
    Ok(v)
}

macro_rules! u_range {
    ($name:ident, $t:ty, $min:expr, $max:expr) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
            range_u64(d, $min, $max).map(|v| v as $t)
        }
    };
}

u_range!(in_flight_range, u32, 1, 1 << 20);
u_range!(wait_range, u64, 1, 86_400_000);
u_range!(idle_range, u64, 0, 86_400_000);
u_range!(queue_range, u32, 1, 1 << 24);
u_range!(tenants_range, u32, 1, 1 << 22);
u_range!(weight_range, u32, 1, u64::from(fairq::MAX_WEIGHT));
u_range!(count_range, u32, 1, 1_000_000);
u_range!(cost_range, u32, 1, u64::from(fairq::MAX_COST));
u_range!(attempts_range, u32, 1, 100);

fn positive_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    f64_where(d, |v| v > 0.0, "a number > 0")
}

fn non_negative_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    f64_where(d, |v| v >= 0.0, "a number >= 0")
}

fn percent_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    f64_where(d, |v| (0.0..=100.0).contains(&v), "in 0..=100")
}

fn unit_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    f64_where(d, |v| (0.0..=1.0).contains(&v), "in 0..=1")
}

fn sigma_range<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    f64_where(d, |v| (0.0..=3.0).contains(&v), "in 0..=3")
}

fn multiplier_range<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    f64_where(d, |v| (1.0..=10.0).contains(&v), "in 1..=10")
}

fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TenantGroup>, D::Error> {
    let v = Vec::<TenantGroup>::deserialize(d)?;
    if v.is_empty() {
        return Err(serde::de::Error::custom(
            "needs at least one [[tenants]] group",
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_spellings_name_the_builtin_scenarios_and_slips_get_a_suggestion() {
        for spelling in ["noisy-neighbor", "Noisy_Neighbour", "noisy neighbor"] {
            assert_eq!(
                Scenario::named(spelling).map(|s| s.name),
                Some("noisy-neighbour".to_string()),
                "{spelling}"
            );
        }
        assert_eq!(nearest_builtin("many-tenant"), Some("many-tenants"));
        assert_eq!(nearest_builtin("retry-strom"), Some("retry-storm"));
        assert_eq!(nearest_builtin("something-else"), None);
        assert!(Scenario::named("tiers").is_none());
    }

    #[test]
    fn builtin_parses() {
        let s = Scenario::builtin();
        assert_eq!(s.name, "noisy-neighbour");
        assert!(s
            .tenants
            .iter()
            .any(|g| g.name == "burster" && !g.bursts.is_empty()));
    }

    #[test]
    fn every_file_of_examples_scenarios_is_built_in_and_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scenarios");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut built_in: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
        built_in.sort();
        assert_eq!(files, built_in, "add new scenario files to BUILTIN");
        for (name, text) in BUILTIN {
            let on_disk = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
            assert_eq!(text, on_disk);
            assert_eq!(Scenario::named(name).unwrap().name, name);
        }
        assert!(Scenario::named("no-such-scenario").is_none());
    }

    #[test]
    fn bad_value_names_line_and_field() {
        let text = "name = \"x\"\nduration_s = 10\n[backend]\nmax_in_flight = 8\n\
                    service = { dist = \"constant\", ms = 1 }\n[[tenants]]\nname = \"a\"\n\
                    weight = 0\n";
        let e = Scenario::parse(text, "x.toml").unwrap_err().0;
        assert!(e.contains("x.toml:8:"), "{e}");
        assert!(e.contains("weight"), "{e}");
    }

    #[test]
    fn unknown_field_is_named() {
        let text = "name = \"x\"\nduration_s = 10\n[backend]\nmax_in_flight = 8\n\
                    service = { dist = \"constant\", ms = 1 }\n[[tenants]]\nname = \"a\"\n\
                    wieght = 2\n";
        let e = Scenario::parse(text, "x.toml").unwrap_err().0;
        assert!(e.contains("x.toml:8:"), "{e}");
        assert!(e.contains("wieght"), "{e}");
    }
}
