//! The Prometheus rendering (`Engine::prometheus_text_at`) of arbitrary tenant states: an engine
//! with arbitrary sizes, policies (starvation guard, wait boost, feedback) and bulkhead pools is
//! driven by arbitrary operations through the public Rust API, and rendered between them.
//!
//! Each rendering must:
//! - pass a strict line check (and, the last one where the input says so, parse with
//!   `prometheus-parse`, which must read every sample line): every line a `# HELP`/`# TYPE`
//!   comment or a `name{labels} value` sample; HELP before TYPE, each family declared once and
//!   before its samples; valid metric and label names; label values quoted with only `\\`, `\"`
//!   and `\n` escapes; finite values;
//! - agree with `Engine::stats()`: depth, in-flight, tenants, grants and every refusal reason;
//! - have cumulative histogram buckets ending in `+Inf` == `_count`;
//! - carry at most `indicator_top_k` tenants, each as a 16-hex-digit key;
//! - never let an engine-wide counter go down from one rendering to the next.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Arbitrary;
use fairq::{
    Config, Dimension, Engine, FeedbackController, NextGrant, Outcome, Policy, Reason, Request,
    StarvationGuard, TenantDimension, TenantKey, Ticket, WaitBoost,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Setup {
    tenant_dimension: u8,
    max_tenants: u8,
    tenant_queue_capacity: u8,
    queue_capacity: u8,
    max_in_flight: u8,
    max_wait_ms: u16,
    tenant_idle_ms: u16,
    top_k: u8,
    guard: Option<(u16, u8)>,
    boost: Option<(u32, u8)>,
    feedback: Option<(u32, u8, u8)>,
    pools: Vec<u8>,
}

impl Setup {
    /// A valid config near these values (the config checks are the C ABI target's business).
    fn config(&self) -> Config {
        let max_in_flight = u32::from(self.max_in_flight % 16) + 1;
        let mut policy = Policy::default();
        if let Some((n, p)) = self.guard {
            policy.starvation_guard = Some(StarvationGuard {
                min_grants_per_minute: u32::from(n).clamp(1, 60_000),
                min_share_percent: u32::from(p % 51),
            });
        }
        if let Some((after, max)) = self.boost {
            policy.wait_boost = Some(WaitBoost {
                after_ms: u64::from(after % 3_600_000).max(1_000),
                max_boosted: u32::from(max) + 1,
            });
        }
        if let Some((period, lo, hi)) = self.feedback {
            policy.feedback = Some(FeedbackController {
                period_ms: u64::from(period % 3_540_000) + 60_000,
                floor_percent: u32::from(lo % 91) + 10,
                ceiling_percent: 100 + u32::from(hi) * 3,
                ..FeedbackController::default()
            });
        }
        Config {
            enabled: true,
            max_tenants: u32::from(self.max_tenants % 32) + 1,
            tenant_queue_capacity: u32::from(self.tenant_queue_capacity % 16) + 1,
            queue_capacity: u32::from(self.queue_capacity) + 1,
            max_in_flight,
            default_weight: 1,
            max_wait_ms: u64::from(self.max_wait_ms) + 1,
            tenant_dimension: match self.tenant_dimension % 3 {
                0 => TenantDimension::User,
                1 => TenantDimension::ApiKey,
                _ => TenantDimension::Team,
            },
            tenant_idle_ms: u64::from(self.tenant_idle_ms),
            max_weight_classes: 16,
            indicator_top_k: u32::from(self.top_k % 40),
            policy,
            downstream_max_in_flight: self
                .pools
                .iter()
                .take(4)
                .map(|&m| u32::from(m) % max_in_flight + 1)
                .collect(),
            ..Config::default()
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Wait(u32),
    WaitLong(u16),
    Enqueue {
        tenant: u8,
        dimension: u8,
        cost: u32,
        retry_after_ms: u16,
        timeout_ms: u16,
        downstream: u8,
        none: bool,
    },
    Grant,
    Complete {
        which: u8,
        requeue: Option<u16>,
        actual_cost: Option<u32>,
    },
    Cancel {
        which: u8,
    },
    Expire {
        which: u8,
    },
    SetWeight {
        tenant: u8,
        weight: u16,
    },
    FleetFactor {
        tenant: u8,
        factor: u16,
    },
    Enabled(bool),
    Tick,
    Render,
}

#[derive(Arbitrary, Debug)]
struct Input {
    setup: Setup,
    /// Whether prometheus-parse also reads the last rendering (once per input at most: its
    /// regexes cost more than everything else, and the fuzzer would learn to ask for them).
    parse: bool,
    ops: Vec<Op>,
}

const MS: u64 = 1_000_000;

fn key(tenant: u8) -> TenantKey {
    TenantKey::from_raw(format!("tenant-{}", tenant % 24).as_bytes())
}

/// One sample line split into name, labels (raw values, escapes kept) and value.
fn split_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (series, value) = line.rsplit_once(' ').expect("a sample is `series value`");
    let value: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("bad value: {line}"));
    assert!(value.is_finite(), "non-finite value: {line}");
    let (name, labels) = match series.find('{') {
        None => (series, ""),
        Some(i) => {
            let inner = series[i..]
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .unwrap_or_else(|| panic!("unbalanced braces: {line}"));
            (&series[..i], inner)
        }
    };
    assert!(
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "bad metric name: {line}"
    );
    // Labels: name="value" pairs, commas between; a value escapes only \\, \" and \n.
    let mut out = Vec::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let (label, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("label without =\": {line}"));
        assert!(
            !label.is_empty()
                && !label.starts_with(|c: char| c.is_ascii_digit())
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad label name {label:?}: {line}"
        );
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars
                .next()
                .unwrap_or_else(|| panic!("unterminated label value: {line}"));
            match c {
                '"' => break i,
                '\\' => {
                    let (_, e) = chars.next().expect("escape at the end");
                    assert!(
                        matches!(e, '\\' | '"' | 'n'),
                        "bad escape \\{e} in a label value: {line}"
                    );
                    value.push('\\');
                    value.push(e);
                }
                '\n' => panic!("raw newline in a label value: {line}"),
                c => value.push(c),
            }
        };
        out.push((label.to_string(), value));
        rest = &after[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else {
            assert!(rest.is_empty(), "junk after a label value: {line}");
        }
    }
    (name.to_string(), out, value)
}

/// Renders at `now`, checks the text, and returns every counter sample (for monotonicity).
/// `parse`: also read it with prometheus-parse.
fn render(engine: &Engine, config: &Config, now: u64, parse: bool) -> BTreeMap<String, f64> {
    let stats = engine.stats();
    let text = engine.prometheus_text_at(now);
    if parse {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("prometheus-parse reads it");
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        let read: usize = scrape
            .samples
            .iter()
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(b) => b.len(),
                _ => 1,
            })
            .sum();
        assert_eq!(read, samples, "prometheus-parse read every sample line");
    }

    let mut helped = BTreeSet::new();
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut counters = BTreeMap::new();
    let mut tenants = BTreeSet::new();
    let mut buckets: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(!help.is_empty(), "empty HELP: {line}");
            assert!(
                helped.insert(name.to_string()),
                "family declared twice: {name}"
            );
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(helped.contains(name), "TYPE before HELP: {line}");
            assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
            assert!(
                typed.insert(name.to_string(), kind.to_string()).is_none(),
                "two TYPEs for {name}"
            );
            continue;
        }
        assert!(
            !line.is_empty() && !line.starts_with('#'),
            "stray line {line:?}"
        );
        let (name, labels, value) = split_sample(line);
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(&name)
            .to_string();
        let kind = typed
            .get(&family)
            .unwrap_or_else(|| panic!("sample before its TYPE: {line}"));
        let series = format!("{name}{labels:?}");
        assert!(seen.insert(series.clone()), "a series twice: {line}");
        assert!(value >= 0.0, "a negative value: {line}");
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        // A tenant's series count from when it took its slot (a reset when it comes back).
        let engine_wide = label("tenant").is_none();
        if engine_wide
            && (kind == "counter" || name.ends_with("_count") || name.ends_with("_bucket"))
        {
            counters.insert(series, value);
        }
        if let Some(t) = label("tenant") {
            assert!(
                t.len() == 16 && t.chars().all(|c| c.is_ascii_hexdigit()),
                "tenant label {t:?}"
            );
            tenants.insert(t);
        }
        if let Some(d) = label("tenant_dimension") {
            assert_eq!(d, config.tenant_dimension.as_str());
        }
        if name.ends_with("_bucket") {
            let le = label("le").expect("a bucket has le");
            let rest: Vec<_> = labels.iter().filter(|(k, _)| k != "le").collect();
            buckets
                .entry(format!("{family}{rest:?}"))
                .or_default()
                .push((le, value));
        }
        if name.ends_with("_count") && kind == "histogram" {
            counts.insert(format!("{family}{labels:?}"), value);
        }
        let want = match (name.as_str(), label("reason")) {
            ("rate_limit_fair_queue_depth", _) => Some(stats.queued),
            ("rate_limit_fair_queue_in_flight", _) => Some(stats.in_flight),
            ("rate_limit_fair_queue_tenants", _) => Some(stats.tenants),
            ("rate_limit_fair_queue_grants_total", _) => Some(stats.granted),
            ("rate_limit_fair_queue_refused_total", Some(r)) => {
                let reason = Reason::ALL
                    .into_iter()
                    .find(|x| x.as_str() == r)
                    .unwrap_or_else(|| panic!("unknown reason {r}"));
                Some(stats.refused_for(reason))
            }
            _ => None,
        };
        if let Some(want) = want {
            assert_eq!(value, want as f64, "{line} against {stats:?}");
        }
    }
    assert!(
        tenants.len() <= config.indicator_top_k as usize,
        "{} tenants with top_k {}",
        tenants.len(),
        config.indicator_top_k
    );
    for (series, bs) in &buckets {
        assert!(
            bs.windows(2).all(|w| w[0].1 <= w[1].1),
            "buckets not cumulative: {series} {bs:?}"
        );
        let (le, last) = bs.last().unwrap();
        assert_eq!(le, "+Inf", "the last bucket is +Inf: {series}");
        assert_eq!(
            Some(last),
            counts.get(series),
            "+Inf bucket == _count: {series}"
        );
    }
    for name in [
        "depth",
        "in_flight",
        "grants_total",
        "refused_total",
        "wait_seconds",
    ] {
        assert!(
            typed.contains_key(&format!("rate_limit_fair_queue_{name}")),
            "no family {name}"
        );
    }
    counters
}

fuzz_target!(|input: Input| {
    let config = input.setup.config();
    config.validate().expect("the setup builds valid configs");
    let engine = Engine::new(config.clone()).expect("a valid config");
    let mut now = 1_000 * MS;
    let mut granted: Vec<Ticket> = Vec::new();
    let mut queued: Vec<Ticket> = Vec::new();
    let mut last = render(&engine, &config, now, false);
    for op in &input.ops {
        match *op {
            Op::Wait(ns) => now = now.saturating_add(u64::from(ns)),
            Op::WaitLong(s) => now = now.saturating_add(u64::from(s) * 1_000 * MS),
            Op::Enqueue {
                tenant,
                dimension,
                cost,
                retry_after_ms,
                timeout_ms,
                downstream,
                none,
            } => {
                let request = Request {
                    tenant: (!none).then(|| key(tenant)),
                    dimension: Dimension::ALL[usize::from(dimension) % Dimension::ALL.len()],
                    user_data: 0,
                    cost: cost % 2_000 + 1,
                    retry_after_ns: u64::from(retry_after_ms) * MS,
                    timeout_ns: u64::from(timeout_ms) * MS,
                    downstream: u32::from(downstream) % 4,
                };
                if let Ok(fairq::Enqueued::Queued { ticket, .. }) = engine.enqueue_at(&request, now)
                {
                    queued.push(ticket);
                }
            }
            Op::Grant => match engine.next_grant_at(now) {
                NextGrant::Granted(g) => granted.push(g.ticket),
                NextGrant::Expired(_) | NextGrant::Empty | NextGrant::AtCapacity => {}
            },
            Op::Complete {
                which,
                requeue,
                actual_cost,
            } => {
                if !granted.is_empty() {
                    let t = granted.swap_remove(usize::from(which) % granted.len());
                    let outcome = match requeue {
                        None => Outcome::Admitted,
                        Some(ms) => Outcome::StillRefused {
                            retry_after_ns: u64::from(ms) * MS,
                        },
                    };
                    if let Ok(fairq::Completion::Requeued { .. }) =
                        engine.complete_at(t, outcome, actual_cost.map(|c| c % 3_000), now)
                    {
                        queued.push(t);
                    }
                }
            }
            Op::Cancel { which } => {
                let pool = if which % 2 == 0 {
                    &mut queued
                } else {
                    &mut granted
                };
                if !pool.is_empty() {
                    let t = pool.swap_remove(usize::from(which) % pool.len());
                    let _ = engine.cancel_at(t, now);
                }
            }
            Op::Expire { which } => {
                if !queued.is_empty() {
                    let t = queued.swap_remove(usize::from(which) % queued.len());
                    let _ = engine.expire_at(t, now);
                }
            }
            Op::SetWeight { tenant, weight } => {
                let _ = engine.set_weight_key(key(tenant), u32::from(weight % 10_000) + 1);
            }
            Op::FleetFactor { tenant, factor } => {
                let _ = engine.set_fleet_factor(key(tenant), u32::from(factor % 1_005) + 20);
            }
            Op::Enabled(on) => engine.set_enabled(on),
            Op::Tick => {
                engine.tick_at(now);
            }
            Op::Render => {
                let counters = render(&engine, &config, now, false);
                for (series, before) in &last {
                    if let Some(after) = counters.get(series) {
                        assert!(after >= before, "{series} went down: {before} -> {after}");
                    }
                }
                last = counters;
            }
        }
    }
    render(&engine, &config, now, input.parse);
});
