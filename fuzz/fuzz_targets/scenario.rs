//! The simulator's scenario parser (`fairq_cli::scenario`) on arbitrary input: raw text, and
//! TOML documents built from the scenario's own keys with values of every type and range.
//!
//! Checks: parsing never panics; an error names the origin and, with a line, a line that exists;
//! an accepted scenario keeps its promises (the engine config it describes validates, a rate
//! or capacity is finite, unique non-empty group names, at most 64 distinct weights), and the
//! baseline without its first group parses the same way.
//!
//! The first input byte picks the form: even, the rest is the text as it is (the seed corpus
//! holds the example scenarios so); odd, the rest builds a document (`Doc`).

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use fairq_cli::scenario::Scenario;
use libfuzzer_sys::fuzz_target;

/// A TOML value of any kind, mostly numbers near the fields' ranges.
#[derive(Arbitrary, Debug)]
enum Value {
    Int(i64),
    SmallInt(i8),
    Float(f64),
    Str(String),
    Bool(bool),
    Special(u8),
    Inline(Vec<(Key, SmallValue)>),
    Array(Vec<SmallValue>),
}

#[derive(Arbitrary, Debug)]
enum SmallValue {
    Int(i64),
    SmallInt(i8),
    Float(f64),
    Str(String),
}

/// The keys the scenario format knows, and a few it does not.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Key {
    Name,
    Description,
    DurationS,
    Seed,
    MaxInFlight,
    Service,
    Dist,
    Ms,
    MeanMs,
    Sigma,
    MaxWaitMs,
    QueueCapacity,
    TenantQueueCapacity,
    MaxTenants,
    TenantIdleMs,
    WindowS,
    ChartBucketS,
    Weight,
    Count,
    Rate,
    PerS,
    Share,
    Cost,
    TimeoutMs,
    RetryAfterMs,
    Bursts,
    StartS,
    Retry,
    MaxAttempts,
    BackoffMs,
    Jitter,
    Multiplier,
    Unknown,
}

impl Key {
    fn as_str(self) -> &'static str {
        match self {
            Key::Name => "name",
            Key::Description => "description",
            Key::DurationS => "duration_s",
            Key::Seed => "seed",
            Key::MaxInFlight => "max_in_flight",
            Key::Service => "service",
            Key::Dist => "dist",
            Key::Ms => "ms",
            Key::MeanMs => "mean_ms",
            Key::Sigma => "sigma",
            Key::MaxWaitMs => "max_wait_ms",
            Key::QueueCapacity => "queue_capacity",
            Key::TenantQueueCapacity => "tenant_queue_capacity",
            Key::MaxTenants => "max_tenants",
            Key::TenantIdleMs => "tenant_idle_ms",
            Key::WindowS => "window_s",
            Key::ChartBucketS => "chart_bucket_s",
            Key::Weight => "weight",
            Key::Count => "count",
            Key::Rate => "rate",
            Key::PerS => "per_s",
            Key::Share => "share",
            Key::Cost => "cost",
            Key::TimeoutMs => "timeout_ms",
            Key::RetryAfterMs => "retry_after_ms",
            Key::Bursts => "bursts",
            Key::StartS => "start_s",
            Key::Retry => "retry",
            Key::MaxAttempts => "max_attempts",
            Key::BackoffMs => "backoff_ms",
            Key::Jitter => "jitter",
            Key::Multiplier => "multiplier",
            Key::Unknown => "wieght",
        }
    }
}

/// A scenario document: the top-level keys, then tables, each with its keys.
#[derive(Arbitrary, Debug)]
struct Doc {
    top: Vec<(Key, Value)>,
    tables: Vec<(Table, Vec<(Key, Value)>)>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Table {
    Backend,
    Queue,
    Report,
    Tenants,
    Other,
}

fn quote(s: &str) -> String {
    format!("{s:?}")
}

fn float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{f:?}")
    }
}

fn small(v: &SmallValue) -> String {
    match v {
        SmallValue::Int(i) => i.to_string(),
        SmallValue::SmallInt(i) => i.to_string(),
        SmallValue::Float(f) => float(*f),
        SmallValue::Str(s) => quote(s),
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::SmallInt(i) => i.to_string(),
        Value::Float(f) => float(*f),
        Value::Str(s) => quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Special(k) => match k % 8 {
            0 => r#"{ dist = "constant", ms = 1 }"#.into(),
            1 => r#"{ dist = "lognormal", mean_ms = 10.0, sigma = 0.5 }"#.into(),
            2 => r#"{ dist = "exponential", mean_ms = 0.001 }"#.into(),
            3 => "{ share = 1e308 }".into(),
            4 => "[{ start_s = 0, duration_s = 1e-300, rate = { per_s = 1 } }]".into(),
            5 => "{ max_attempts = 100, backoff_ms = 0, jitter = 1, multiplier = 10 }".into(),
            6 => "9223372036854775807".into(),
            _ => "-9223372036854775808".into(),
        },
        Value::Inline(kv) => {
            let body: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{} = {}", k.as_str(), small(v)))
                .collect();
            format!("{{ {} }}", body.join(", "))
        }
        Value::Array(items) => {
            let body: Vec<String> = items.iter().map(small).collect();
            format!("[{}]", body.join(", "))
        }
    }
}

impl Doc {
    fn text(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.top {
            out += &format!("{} = {}\n", k.as_str(), render(v));
        }
        for (table, kvs) in &self.tables {
            out += match table {
                Table::Backend => "[backend]\n",
                Table::Queue => "[queue]\n",
                Table::Report => "[report]\n",
                Table::Tenants => "[[tenants]]\n",
                Table::Other => "[other]\n",
            };
            for (k, v) in kvs {
                out += &format!("{} = {}\n", k.as_str(), render(v));
            }
        }
        out
    }
}

fn check(text: &str) {
    let origin = "fuzz.toml";
    match Scenario::parse(text, origin) {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(origin), "the error names the file: {msg}");
            // "origin:line:..." names a line of the text (1 for an empty one).
            if let Some(rest) = msg.split(&format!("{origin}:")).nth(1) {
                let line: usize = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                assert!(
                    (1..=text.lines().count().max(1) + 1).contains(&line),
                    "line {line} of {} in {msg}",
                    text.lines().count()
                );
            }
        }
        Ok(s) => {
            let config = s.engine_config();
            assert!(config.validate().is_ok(), "{:?}", config.validate());
            assert!(s.duration_s.is_finite() && s.duration_s > 0.0);
            let capacity = s.capacity_per_s();
            assert!(capacity > 0.0, "capacity {capacity}");
            let mut names = std::collections::HashSet::new();
            for g in &s.tenants {
                assert!(!g.name.is_empty() && names.insert(g.name.clone()));
                let share = s.fair_share_per_s(g);
                assert!(!share.is_nan(), "fair share of {} is NaN", g.name);
            }
            let mut weights: Vec<u32> = s.tenants.iter().map(|g| g.weight).collect();
            weights.sort_unstable();
            weights.dedup();
            assert!(weights.len() <= fairq::MAX_WEIGHT_CLASSES as usize);
            let first = vec![s.tenants[0].name.clone()];
            match s.without(&first) {
                Ok(b) => {
                    assert_eq!(b.tenants.len(), s.tenants.len() - 1);
                    assert!(b.tenants.iter().all(|g| g.name != first[0]));
                }
                Err(e) => assert_eq!(s.tenants.len(), 1, "{e}"),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    if form % 2 == 0 {
        if let Ok(text) = std::str::from_utf8(rest) {
            check(text);
        }
    } else if let Ok(doc) = Doc::arbitrary_take_rest(Unstructured::new(rest)) {
        check(&doc.text());
    }
});
