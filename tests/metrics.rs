//! Prometheus exposition checked with a real parser, and the fairness indicators
//! checked on a fake clock.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use fairq::{Config, Dimension, Engine, Enqueued, NextGrant, Outcome, Reason, Request};
use prometheus_parse::{Scrape, Value};

const S: u64 = 1_000 * MS;

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses")
}

/// A strict check the lenient parser does not make: every line is a comment or a well-formed
/// sample, every family has HELP then TYPE before its samples, and a family is declared once.
fn check_text_format(text: &str) -> usize {
    let mut declared = BTreeSet::new();
    let mut typed = BTreeMap::new();
    let mut samples = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(
                declared.insert(name.to_string()),
                "family declared twice: {name}"
            );
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            assert!(declared.contains(name), "TYPE before HELP: {line}");
            assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_string(), kind.to_string());
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "stray line {line:?}"
        );
        let (series, value) = line.rsplit_once(' ').expect("name and value");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name {name}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| typed.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(typed.contains_key(family), "sample before its TYPE: {line}");
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                let inner = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}'));
                for pair in inner.expect("braced labels").split(',') {
                    let (k, v) = pair.split_once('=').expect("label=value");
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}"
                    );
                    assert!(
                        v.starts_with('"') && v.ends_with('"') && v.len() >= 2,
                        "{line}"
                    );
                }
            }
        }
        samples += 1;
    }
    samples
}

/// An engine that has granted, completed, requeued, expired and refused for several reasons.
fn busy_engine() -> (Engine, u64) {
    let engine = engine(Config {
        tenant_queue_capacity: 2,
        max_in_flight: 2,
        max_wait_ms: 100,
        ..Config::default()
    });
    let mut now = 0;
    queued(&engine, &request("a"), now);
    queued(&engine, &request("a"), now);
    // tenant_queue_full
    assert!(matches!(
        engine.enqueue_at(&request("a"), now),
        Ok(Enqueued::Refused(_))
    ));
    // not_queueable, no_tenant
    let global = Request::new(key("a"), Dimension::Global);
    engine.enqueue_at(&global, now).unwrap();
    engine
        .enqueue_at(
            &Request {
                tenant: None,
                ..request("b")
            },
            now,
        )
        .unwrap();
    // disabled
    engine.set_enabled(false);
    engine.enqueue_at(&request("b"), now).unwrap();
    engine.set_enabled(true);
    now += 3 * MS;
    let g = granted(&engine, now);
    engine
        .complete_at(
            g.ticket,
            Outcome::StillRefused { retry_after_ns: MS },
            None,
            now,
        )
        .unwrap();
    let g = granted(&engine, now);
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, now)
        .unwrap();
    // The requeued one waits past its deadline.
    queued(&engine, &request("c"), now);
    let cancel = queued(&engine, &request("c"), now);
    engine.cancel_at(cancel, now).unwrap();
    now += 200 * MS;
    loop {
        match engine.next_grant_at(now) {
            NextGrant::Granted(g) => {
                engine
                    .complete_at(g.ticket, Outcome::Admitted, None, now)
                    .unwrap();
            }
            NextGrant::Expired(_) => {}
            NextGrant::Empty | NextGrant::AtCapacity => break,
        }
    }
    (engine, now)
}

#[test]
fn exposition_has_the_r11_names_and_labels_and_parses() {
    let (engine, now) = busy_engine();
    let stats = engine.stats();
    assert!(stats.granted >= 2 && stats.expired >= 1, "{stats:?}");
    let text = engine.prometheus_text_at(now);
    let lines = check_text_format(&text);
    let scrape = parse(&text);
    let parsed: usize = scrape
        .samples
        .iter()
        .map(|s| match &s.value {
            Value::Histogram(b) => b.len(),
            _ => 1,
        })
        .sum();
    assert_eq!(parsed, lines, "the parser read every sample line");

    let find = |name: &str| -> Vec<&prometheus_parse::Sample> {
        scrape.samples.iter().filter(|s| s.metric == name).collect()
    };
    let labels = |s: &prometheus_parse::Sample| -> BTreeMap<String, String> {
        s.labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let dim = BTreeMap::from([("tenant_dimension".to_string(), "user".to_string())]);

    let depth = find("rate_limit_fair_queue_depth");
    assert_eq!(depth.len(), 1);
    assert_eq!(depth[0].value, Value::Gauge(stats.queued as f64));
    assert!(labels(depth[0]).is_empty());
    let tenants = find("rate_limit_fair_queue_tenants");
    assert_eq!(tenants.len(), 1);
    assert_eq!(tenants[0].value, Value::Gauge(stats.tenants as f64));
    assert!(labels(tenants[0]).is_empty());

    let grants = find("rate_limit_fair_queue_grants_total");
    assert_eq!(grants.len(), 1);
    assert_eq!(labels(grants[0]), dim);
    assert_eq!(grants[0].value, Value::Counter(stats.granted as f64));

    let refused = find("rate_limit_fair_queue_refused_total");
    assert_eq!(refused.len(), Reason::ALL.len(), "one series per reason");
    for reason in Reason::ALL {
        let series = refused
            .iter()
            .find(|s| s.labels.get("reason") == Some(reason.as_str()))
            .unwrap_or_else(|| panic!("no series for {reason}"));
        let mut want = dim.clone();
        want.insert("reason".into(), reason.as_str().into());
        assert_eq!(labels(series), want);
        assert_eq!(
            series.value,
            Value::Counter(stats.refused_for(reason) as f64),
            "{reason}"
        );
    }
    for reason in [
        Reason::TenantQueueFull,
        Reason::NotQueueable,
        Reason::NoTenant,
        Reason::Disabled,
        Reason::DeadlineExceeded,
        Reason::Cancelled,
    ] {
        assert!(stats.refused_for(reason) >= 1, "{reason} was exercised");
    }

    let wait = find("rate_limit_fair_queue_wait_seconds");
    assert_eq!(wait.len(), 1);
    assert_eq!(labels(wait[0]), dim);
    let Value::Histogram(buckets) = &wait[0].value else {
        panic!("wait_seconds is a histogram");
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    let mut want = vec![
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
        60.0,
    ];
    want.push(f64::INFINITY);
    assert_eq!(bounds, want, "fixed buckets 1 ms .. 60 s, then +Inf");
    assert!(
        buckets.windows(2).all(|w| w[0].count <= w[1].count),
        "cumulative"
    );
    // Two grants (one waited 3 ms) and one expiry (waited > 100 ms).
    let total = buckets.last().unwrap().count;
    assert_eq!(total, (stats.granted + stats.expired) as f64);
    let count = find("rate_limit_fair_queue_wait_seconds_count");
    assert_eq!(count.len(), 1);
    assert_eq!(labels(count[0]), dim);
    assert_eq!(count[0].value, Value::Untyped(total));
    let sum = find("rate_limit_fair_queue_wait_seconds_sum");
    assert_eq!(labels(sum[0]), dim);
    let Value::Untyped(sum) = sum[0].value else {
        panic!()
    };
    assert!(sum > 0.1, "the expired request waited over 100 ms: {sum}");
    for name in [
        "rate_limit_fair_queue_depth",
        "rate_limit_fair_queue_tenants",
        "rate_limit_fair_queue_wait_seconds",
        "rate_limit_fair_queue_grants_total",
        "rate_limit_fair_queue_lane_grants_total",
        "rate_limit_fair_queue_refused_total",
    ] {
        assert!(scrape.docs.contains_key(name), "HELP for {name}");
    }
}

#[test]
fn wait_histogram_puts_each_wait_in_its_bucket() {
    let engine = engine(Config {
        max_wait_ms: 60_000,
        ..Config::default()
    });
    queued(&engine, &request("a"), 0);
    queued(&engine, &request("b"), 0);
    let g = granted(&engine, 3 * MS); // 3 ms: in (2.5 ms, 5 ms]
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, 3 * MS)
        .unwrap();
    let g = granted(&engine, 45 * S); // 45 s: in (30 s, 60 s]
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, 45 * S)
        .unwrap();
    let scrape = parse(&engine.prometheus_text_at(45 * S));
    let wait = scrape
        .samples
        .iter()
        .find(|s| s.metric == "rate_limit_fair_queue_wait_seconds")
        .unwrap();
    let Value::Histogram(buckets) = &wait.value else {
        panic!()
    };
    let at = |le: f64| buckets.iter().find(|b| b.less_than == le).unwrap().count;
    assert_eq!(at(0.0025), 0.0);
    assert_eq!(at(0.005), 1.0);
    assert_eq!(at(30.0), 1.0);
    assert_eq!(at(60.0), 2.0);
    assert_eq!(at(f64::INFINITY), 2.0);
}

/// Keeps every tenant backlogged: after each grant, completes it and queues a replacement.
fn run_backlogged(engine: &Engine, tenants: &[(&str, u32, u32)], grants: usize) -> u64 {
    let mut now = 0;
    for &(name, weight, cost) in tenants {
        engine.set_weight(name, weight).unwrap();
        for _ in 0..4 {
            queued(
                engine,
                &Request {
                    cost,
                    ..request(name)
                },
                now,
            );
        }
    }
    for _ in 0..grants {
        now += MS;
        let g = granted(engine, now);
        engine
            .complete_at(g.ticket, Outcome::Admitted, None, now)
            .unwrap();
        queued(
            engine,
            &Request {
                cost: g.cost,
                ..Request::new(g.tenant, Dimension::User)
            },
            now,
        );
    }
    now
}

#[test]
fn fair_share_ratio_is_one_for_a_backlogged_weighted_set() {
    let tenants = [
        ("e1", 8, 1),
        ("e2", 8, 1),
        ("p1", 4, 1),
        ("s1", 2, 1),
        ("s2", 2, 1),
        ("f1", 1, 1),
        ("f2", 1, 1),
        ("f3", 1, 1),
    ];
    let engine = engine(Config {
        max_wait_ms: 3_600_000,
        ..Config::default()
    });
    let now = run_backlogged(&engine, &tenants, 27 * 200);
    for (name, weight, _) in tenants {
        let ind = engine.tenant_indicators_at(key(name), now).unwrap();
        let ratio = ind.fair_share_ratio.unwrap();
        assert!(
            (ratio - 1.0).abs() <= 0.02,
            "{name} (w{weight}): {ratio} {ind:?}"
        );
        assert_eq!(ind.weight, weight);
        assert!(ind.ready);
    }
    let report = engine.fairness_report_at(now);
    let minmax = report.aggregate.fair_share_ratio.unwrap();
    assert!(minmax.min >= 0.98 && minmax.max <= 1.02, "{minmax:?}");
}

#[test]
fn fair_share_ratio_counts_cost_units() {
    // Same weights, different costs: shares are in cost units, and the ratio still is 1.
    let tenants = [("a", 3, 1), ("b", 3, 4), ("c", 1, 2), ("d", 1, 3)];
    let engine = engine(Config {
        max_wait_ms: 3_600_000,
        ..Config::default()
    });
    let now = run_backlogged(&engine, &tenants, 20_000);
    for (name, _, _) in tenants {
        let ind = engine.tenant_indicators_at(key(name), now).unwrap();
        let ratio = ind.fair_share_ratio.unwrap();
        assert!((ratio - 1.0).abs() <= 0.02, "{name}: {ratio} {ind:?}");
    }
}

#[test]
fn starvation_window_grows_only_while_ready_and_unserved() {
    let engine = engine(Config {
        max_in_flight: 1,
        max_wait_ms: 60_000,
        ..Config::default()
    });
    let current = |now| {
        let i = engine.tenant_indicators_at(key("a"), now).unwrap();
        (i.starvation_current_ns, i.starvation_longest_ns, i.ready)
    };
    // b holds the only permit.
    queued(&engine, &request("b"), 0);
    let b = granted(&engine, 0);
    // a's request is not ready for 5 s: parked, so its window does not open.
    queued(
        &engine,
        &Request {
            retry_after_ns: 5 * S,
            ..request("a")
        },
        0,
    );
    assert_eq!(current(3 * S), (0, 0, false));
    assert_eq!(engine.next_grant_at(3 * S), NextGrant::AtCapacity);
    assert_eq!(current(4 * S), (0, 0, false));
    // From 6 s it is ready, but the permit is taken: the window grows.
    assert_eq!(engine.next_grant_at(6 * S), NextGrant::AtCapacity);
    assert_eq!(current(6 * S), (0, 0, true));
    assert_eq!(current(10 * S), (4 * S, 4 * S, true));
    // Served at 10 s: the window closes; the longest stays.
    engine
        .complete_at(b.ticket, Outcome::Admitted, None, 10 * S)
        .unwrap();
    let a = granted(&engine, 10 * S);
    assert_eq!(a.tenant, key("a"));
    assert_eq!(current(10 * S), (0, 4 * S, false));
    assert_eq!(current(20 * S), (0, 4 * S, false));
    engine
        .complete_at(a.ticket, Outcome::Admitted, None, 20 * S)
        .unwrap();
    let agg = engine.fairness_report_at(20 * S).aggregate;
    assert_eq!(agg.starvation_longest_seconds.unwrap().max, 4.0);
    assert_eq!(agg.starvation_current_seconds.unwrap().max, 0.0);
}

#[test]
fn indicators_by_key_give_refusal_rate_and_wait_p95() {
    let engine = engine(Config {
        tenant_queue_capacity: 2,
        max_wait_ms: 1_000,
        ..Config::default()
    });
    assert_eq!(engine.tenant_indicators_at(key("a"), 0), None);
    queued(&engine, &request("a"), 0);
    queued(&engine, &request("a"), 0);
    for _ in 0..2 {
        let r = engine.enqueue_at(&request("a"), 0).unwrap();
        assert!(matches!(r, Enqueued::Refused(r) if r.reason == Reason::TenantQueueFull));
    }
    let ind = engine.tenant_indicators_at(key("a"), 0).unwrap();
    assert_eq!((ind.requests, ind.refused), (4, 2));
    assert_eq!(ind.refusal_rate, Some(0.5));
    assert_eq!(ind.wait_p95_ns, None);
    // One is granted after 7 ms; the other expires after its 1 s budget.
    let g = granted(&engine, 7 * MS);
    engine
        .complete_at(g.ticket, Outcome::Admitted, None, 7 * MS)
        .unwrap();
    assert!(matches!(engine.next_grant_at(2 * S), NextGrant::Expired(_)));
    let ind = engine.tenant_indicators_at(key("a"), 2 * S).unwrap();
    assert_eq!((ind.requests, ind.refused, ind.waits), (4, 3, 2));
    assert_eq!(ind.refusal_rate, Some(0.75));
    // p95 of {7 ms, 2 s}: in the (1 s, 2.5 s] bucket.
    let p95 = ind.wait_p95_ns.unwrap();
    assert!((S..=2_500 * MS).contains(&p95), "{p95}");
    assert_eq!(ind.granted, 1);
}

#[test]
fn per_tenant_series_only_for_the_top_k_plus_aggregate_min_max() {
    let engine = engine(Config {
        indicator_top_k: 3,
        ..Config::default()
    });
    // Tenant tN sends N requests.
    for n in 1..=10u32 {
        for _ in 0..n {
            queued(&engine, &request(&format!("t{n}")), 0);
        }
    }
    let report = engine.fairness_report_at(MS);
    let top: Vec<u64> = report.top.iter().map(|t| t.requests).collect();
    assert_eq!(top, vec![10, 9, 8]);
    assert_eq!(report.aggregate.tenants, 10);
    let scrape = parse(&engine.prometheus_text_at(MS));
    let tenants_in = |metric: &str| -> BTreeSet<String> {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .map(|s| s.labels.get("tenant").unwrap().to_string())
            .collect()
    };
    let want: BTreeSet<String> = ["t10", "t9", "t8"]
        .iter()
        .map(|n| format!("{:016x}", key(n).get()))
        .collect();
    for metric in [
        "rate_limit_fair_queue_tenant_requests_total",
        "rate_limit_fair_queue_tenant_refusal_ratio",
        "rate_limit_fair_queue_tenant_starvation_seconds",
    ] {
        assert_eq!(tenants_in(metric), want, "{metric}");
    }
    let stats: BTreeSet<(String, String)> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "rate_limit_fair_queue_starvation_seconds")
        .map(|s| {
            assert_eq!(s.labels.get("tenant_dimension"), Some("user"));
            (
                s.labels.get("window").unwrap().to_string(),
                s.labels.get("stat").unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(stats.len(), 4, "current/longest x min/max: {stats:?}");
    let refusal = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "rate_limit_fair_queue_refusal_ratio")
        .count();
    assert_eq!(refusal, 2, "min and max");

    // K = 0: no per-tenant series at all, aggregates stay.
    let none = engine_with_top_k(0);
    let text = none.prometheus_text_at(MS);
    assert!(!text.contains("tenant=\""), "no tenant label with K = 0");
    assert!(text
        .contains("rate_limit_fair_queue_refusal_ratio{tenant_dimension=\"user\",stat=\"max\"}"));
}

fn engine_with_top_k(k: u32) -> Engine {
    let engine = engine(Config {
        indicator_top_k: k,
        ..Config::default()
    });
    queued(&engine, &request("x"), 0);
    engine
}

#[test]
fn top_k_is_bounded_by_config() {
    let err = Engine::new(Config {
        indicator_top_k: 1_001,
        ..Config::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.field, "indicator_top_k");
}

#[test]
fn c_api_reads_one_tenants_indicators_by_key() {
    use fairq::ffi::*;
    use std::mem::MaybeUninit;
    use std::ptr::{null, null_mut};
    // SAFETY: every pointer passed below is valid for the call; the engine is freed last.
    unsafe {
        let mut config = MaybeUninit::<fairq_config>::uninit();
        fairq_config_default(config.as_mut_ptr());
        let mut config = config.assume_init();
        config.enabled = true;
        let mut engine = null_mut();
        assert_eq!(fairq_engine_new(&config, &mut engine), FAIRQ_OK);
        let k = key("acme").get();
        let request = fairq_request {
            tenant_key: k,
            dimension: 0,
            ..fairq_request::default()
        };
        let mut result = fairq_enqueue_result::default();
        assert_eq!(
            fairq_enqueue_at(engine, &request, 0, &mut result),
            FAIRQ_QUEUED
        );
        let mut out = fairq_indicators::default();
        assert_eq!(
            fairq_tenant_indicators_at(engine, k, 5 * MS, &mut out),
            FAIRQ_OK
        );
        assert_eq!((out.tenant_key, out.requests, out.refused), (k, 1, 0));
        assert_eq!((out.ready, out.weight, out.effective_weight), (1, 1, 1));
        assert_eq!(out.starvation_current_ns, 5 * MS);
        assert_eq!(out.refusal_rate, 0.0);
        assert!(out.fair_share_ratio.is_nan(), "nothing expected yet");
        let other = key("nobody").get();
        assert_eq!(
            fairq_tenant_indicators_at(engine, other, 0, &mut out),
            FAIRQ_NOT_FOUND
        );
        assert_eq!(
            fairq_tenant_indicators(engine, 0, &mut out),
            FAIRQ_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            fairq_tenant_indicators(engine, k, null_mut()),
            FAIRQ_ERR_NULL
        );
        assert_eq!(fairq_tenant_indicators(null(), k, &mut out), FAIRQ_ERR_NULL);
        let mut report = fairq_tick_report::default();
        assert_eq!(fairq_tick_at(engine, MS, &mut report), FAIRQ_OK);
        assert_eq!(report, fairq_tick_report::default(), "all policies off");
        assert_eq!(fairq_tick(engine, null_mut()), FAIRQ_OK);
        fairq_engine_free(engine);
    }
}
