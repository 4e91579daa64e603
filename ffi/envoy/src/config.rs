//! The filter's JSON configuration: what names a tenant, and the engine's controls.
//!
//! Names and defaults are the C ABI's (`fairq_config`, the `fairq_engine_builder_*` calls) where
//! they exist. Unknown keys, wrong types and values out of range are errors that name the key, so
//! a typo fails the configuration load instead of being ignored.

use std::collections::BTreeMap;

use fairq::{Config, FeedbackController, Shedding, StarvationGuard, Tier, WaitBoost};
use serde::Deserialize;

/// The request headers that may name the tenant, looked at in the order `preferred`, user,
/// team, api key; the first non-empty one wins.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantHeaders {
    pub user: Option<String>,
    pub team: Option<String>,
    pub api_key: Option<String>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RawGuard {
    min_grants_per_minute: Option<u32>,
    min_share_percent: Option<u32>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RawBoost {
    after_ms: Option<u64>,
    max_boosted: Option<u32>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RawFeedback {
    period_ms: Option<u64>,
    floor_percent: Option<u32>,
    ceiling_percent: Option<u32>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct RawShedding {
    error_percent: Option<u32>,
    window_ms: Option<u64>,
    min_requests: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    tenant: TenantHeaders,
    tenant_dimension: Option<String>,
    tier_header: Option<String>,
    max_in_flight: Option<u32>,
    queue_capacity: Option<u32>,
    tenant_queue_capacity: Option<u32>,
    max_tenants: Option<u32>,
    default_weight: Option<u32>,
    max_weight_classes: Option<u32>,
    max_wait_ms: Option<u64>,
    tenant_idle_ms: Option<u64>,
    #[serde(default)]
    weights: BTreeMap<String, u32>,
    tiers: Option<BTreeMap<String, u32>>,
    starvation_guard: Option<RawGuard>,
    wait_boost: Option<RawBoost>,
    feedback: Option<RawFeedback>,
    #[serde(default)]
    pools: BTreeMap<String, u32>,
    shedding: Option<RawShedding>,
    light_lane: Option<bool>,
    refusal_status: Option<u16>,
    status_path: Option<String>,
}

/// A parsed, checked configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The engine's configuration (already validated).
    pub engine: Config,
    pub tenant: TenantHeaders,
    pub preferred: fairq::TenantDimension,
    /// Lower-cased header whose value names the tenant's tier.
    pub tier_header: Option<String>,
    /// Raw tenant id and weight, set on the engine when it is built.
    pub weights: Vec<(String, u32)>,
    /// Upstream cluster name and its pool's index; requests to other clusters use `default_pool`.
    pub pools: Vec<(String, u32)>,
    pub default_pool: u32,
    pub refusal_status: u16,
    /// With shedding on, responses from 500 up count against their pool.
    pub shedding: bool,
    /// With a wait boost or a feedback controller, the engine's tick runs every second.
    pub ticks: bool,
    /// A request for this path (query aside) is answered with the status dump.
    pub status_path: Option<String>,
}

fn dimension(name: &str) -> Result<fairq::TenantDimension, String> {
    match name {
        "user" => Ok(fairq::TenantDimension::User),
        "team" => Ok(fairq::TenantDimension::Team),
        "api_key" => Ok(fairq::TenantDimension::ApiKey),
        other => Err(format!(
            "tenant_dimension: \"{other}\" is not one of user, team, api_key"
        )),
    }
}

/// Parses the filter's configuration. The error says which key is wrong and why.
pub fn parse(json: &[u8]) -> Result<Settings, String> {
    let text = std::str::from_utf8(json).map_err(|_| "configuration is not UTF-8".to_string())?;
    let de = &mut serde_json::Deserializer::from_str(text);
    let raw: Raw =
        serde_path_to_error::deserialize(de).map_err(|e| match e.path().to_string() {
            p if p == "." || p == "?" => format!("configuration: {}", e.inner()),
            p => format!("{p}: {}", e.inner()),
        })?;

    let mut tenant = raw.tenant;
    for name in [&mut tenant.user, &mut tenant.team, &mut tenant.api_key]
        .into_iter()
        .flatten()
    {
        if name.is_empty() {
            return Err("tenant: a header name is empty".into());
        }
        *name = name.to_ascii_lowercase();
    }
    if tenant.user.is_none() && tenant.team.is_none() && tenant.api_key.is_none() {
        return Err("tenant: name at least one of the user, team and api_key headers".into());
    }

    let mut engine = Config {
        enabled: true,
        ..Config::default()
    };
    let preferred = dimension(raw.tenant_dimension.as_deref().unwrap_or("user"))?;
    engine.tenant_dimension = preferred;
    macro_rules! set {
        ($($field:ident),*) => {$(
            if let Some(v) = raw.$field {
                engine.$field = v;
            }
        )*};
    }
    set!(
        max_in_flight,
        queue_capacity,
        tenant_queue_capacity,
        max_tenants,
        default_weight,
        max_weight_classes,
        max_wait_ms,
        tenant_idle_ms
    );
    if let Some(on) = raw.light_lane {
        engine.light_lane = on;
    }
    if let Some(tiers) = raw.tiers {
        engine.policy.tiers = tiers.iter().map(|(n, w)| Tier::new(n, *w)).collect();
    }
    if let Some(g) = raw.starvation_guard {
        let d = StarvationGuard::default();
        engine.policy.starvation_guard = Some(StarvationGuard {
            min_grants_per_minute: g.min_grants_per_minute.unwrap_or(d.min_grants_per_minute),
            min_share_percent: g.min_share_percent.unwrap_or(d.min_share_percent),
        });
    }
    if let Some(b) = raw.wait_boost {
        let d = WaitBoost::default();
        engine.policy.wait_boost = Some(WaitBoost {
            after_ms: b.after_ms.unwrap_or(d.after_ms),
            max_boosted: b.max_boosted.unwrap_or(d.max_boosted),
        });
    }
    if let Some(f) = raw.feedback {
        let d = FeedbackController::default();
        engine.policy.feedback = Some(FeedbackController {
            period_ms: f.period_ms.unwrap_or(d.period_ms),
            floor_percent: f.floor_percent.unwrap_or(d.floor_percent),
            ceiling_percent: f.ceiling_percent.unwrap_or(d.ceiling_percent),
            ..d
        });
    }

    let mut pools = Vec::new();
    let mut default_pool = 0;
    if !raw.pools.is_empty() {
        if !raw.pools.contains_key("default") {
            return Err(
                "pools: add a \"default\" pool, for the clusters that have none of their own"
                    .into(),
            );
        }
        for (i, (cluster, max)) in raw.pools.iter().enumerate() {
            engine.downstream_max_in_flight.push(*max);
            if cluster == "default" {
                default_pool = i as u32;
            } else {
                pools.push((cluster.clone(), i as u32));
            }
        }
    }
    let shedding = match raw.shedding {
        None => false,
        Some(_) if raw.pools.is_empty() => {
            return Err("shedding: configure pools first; a pool is what sheds".into())
        }
        Some(s) => {
            let d = Shedding::default();
            engine.shedding = Some(Shedding {
                error_percent: s.error_percent.unwrap_or(d.error_percent),
                window_ms: s.window_ms.unwrap_or(d.window_ms),
                min_requests: s.min_requests.unwrap_or(d.min_requests),
            });
            true
        }
    };
    engine
        .validate()
        .map_err(|e| format!("{}: {}", e.field, e.message))?;

    for (id, w) in &raw.weights {
        if *w == 0 || *w > fairq::MAX_WEIGHT {
            return Err(format!(
                "weights: \"{id}\" has weight {w}; allowed 1..={}",
                fairq::MAX_WEIGHT
            ));
        }
    }
    let refusal_status = raw.refusal_status.unwrap_or(429);
    if !(400..=599).contains(&refusal_status) {
        return Err(format!(
            "refusal_status: {refusal_status} is not a 4xx or 5xx status"
        ));
    }
    let tier_header = match raw.tier_header {
        Some(h) if h.is_empty() => return Err("tier_header: empty header name".into()),
        h => h.map(|h| h.to_ascii_lowercase()),
    };
    if let Some(p) = &raw.status_path {
        if !p.starts_with('/') || p.contains(['?', '#']) || p.contains(char::is_whitespace) {
            return Err(format!(
                "status_path: \"{p}\" must start with / and hold no ?, # or space"
            ));
        }
    }
    let ticks = engine.policy.wait_boost.is_some() || engine.policy.feedback.is_some();
    Ok(Settings {
        engine,
        tenant,
        preferred,
        tier_header,
        weights: raw.weights.into_iter().collect(),
        pools,
        default_pool,
        refusal_status,
        shedding,
        ticks,
        status_path: raw.status_path,
    })
}

/// What names the configuration's engine: the configuration as parsed, without `status_path`
/// (which leaves the engine as it is). Listeners whose configurations differ in nothing else, not
/// even in spacing or the order of keys, share one engine. Call on a configuration `parse`
/// accepted.
pub fn engine_key(json: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(json) {
        Ok(mut v) => {
            if let Some(o) = v.as_object_mut() {
                o.remove("status_path");
            }
            v.to_string().into_bytes()
        }
        Err(_) => json.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_c_abis() {
        let s = parse(br#"{"tenant": {"user": "X-User"}}"#).unwrap();
        let d = Config::default();
        assert_eq!(s.engine.max_in_flight, d.max_in_flight);
        assert_eq!(s.engine.queue_capacity, d.queue_capacity);
        assert_eq!(s.engine.max_wait_ms, d.max_wait_ms);
        assert!(s.engine.enabled);
        assert_eq!(s.tenant.user.as_deref(), Some("x-user"));
        assert_eq!(s.refusal_status, 429);
        assert!(!s.shedding && !s.ticks);
        assert_eq!(s.status_path, None);
    }

    #[test]
    fn every_control_is_read() {
        let s = parse(
            br#"{"tenant": {"user": "x-user", "team": "x-team", "api_key": "x-api-key"},
                 "tenant_dimension": "team", "tier_header": "X-Tier",
                 "max_in_flight": 16, "queue_capacity": 100, "tenant_queue_capacity": 10,
                 "max_tenants": 50, "default_weight": 2, "max_weight_classes": 4,
                 "max_wait_ms": 1500, "tenant_idle_ms": 200,
                 "weights": {"a": 3}, "tiers": {"gold": 8, "free": 1},
                 "starvation_guard": {"min_share_percent": 5},
                 "wait_boost": {"after_ms": 2000},
                 "feedback": {"period_ms": 60000, "floor_percent": 50},
                 "pools": {"default": 16, "slow": 2},
                 "shedding": {"error_percent": 50},
                 "light_lane": false, "refusal_status": 503,
                 "status_path": "/fairq/status"}"#,
        )
        .unwrap();
        assert_eq!(s.preferred, fairq::TenantDimension::Team);
        assert_eq!(s.tier_header.as_deref(), Some("x-tier"));
        assert_eq!(s.engine.max_in_flight, 16);
        assert_eq!(s.engine.tenant_queue_capacity, 10);
        assert_eq!(s.engine.max_wait_ms, 1500);
        assert_eq!(s.weights, vec![("a".to_string(), 3)]);
        assert_eq!(s.engine.policy.tiers.len(), 2);
        assert_eq!(
            s.engine.policy.starvation_guard.unwrap().min_share_percent,
            5
        );
        assert_eq!(s.engine.policy.wait_boost.unwrap().after_ms, 2000);
        let f = s.engine.policy.feedback.unwrap();
        assert_eq!((f.period_ms, f.floor_percent), (60000, 50));
        assert_eq!(s.engine.downstream_max_in_flight, vec![16, 2]);
        assert_eq!(s.pools, vec![("slow".to_string(), 1)]);
        assert_eq!(s.default_pool, 0);
        assert_eq!(s.engine.shedding.unwrap().error_percent, 50);
        assert!(s.shedding && s.ticks && !s.engine.light_lane);
        assert_eq!(s.refusal_status, 503);
        assert_eq!(s.status_path.as_deref(), Some("/fairq/status"));
    }

    #[test]
    fn the_engine_key_leaves_out_the_status_path() {
        let plain = br#"{"tenant": {"user": "u"}, "max_in_flight": 4}"#;
        let key = engine_key(plain);
        assert_eq!(
            engine_key(br#"{"max_in_flight":4, "status_path": "/s", "tenant":{"user":"u"}}"#),
            key
        );
        assert_ne!(
            engine_key(br#"{"tenant": {"user": "u"}, "max_in_flight": 5}"#),
            key
        );
    }

    #[test]
    fn bad_input_names_the_key() {
        let cases: [(&[u8], &str); 10] = [
            (b"{", "configuration"),
            (br#"{"tenant": {}}"#, "tenant"),
            (br#"{"tenant": {"user": ""}}"#, "tenant"),
            (
                br#"{"tenant": {"user": "u"}, "max_inflight": 3}"#,
                "max_inflight",
            ),
            (
                br#"{"tenant": {"user": "u"}, "max_in_flight": 0}"#,
                "max_in_flight",
            ),
            (
                br#"{"tenant": {"user": "u"}, "max_in_flight": -1}"#,
                "max_in_flight",
            ),
            (
                br#"{"tenant": {"user": "u"}, "weights": {"a": 0}}"#,
                "weights",
            ),
            (
                br#"{"tenant": {"user": "u"}, "pools": {"slow": 2}}"#,
                "pools",
            ),
            (br#"{"tenant": {"user": "u"}, "shedding": {}}"#, "shedding"),
            (
                br#"{"tenant": {"user": "u"}, "tenant_dimension": "org"}"#,
                "tenant_dimension",
            ),
        ];
        for (json, key) in cases {
            let err = parse(json).unwrap_err();
            assert!(err.contains(key), "{err:?} should name {key}");
        }
        assert!(parse(br#"{"tenant": {"user": "u"}, "refusal_status": 200}"#).is_err());
        for path in ["", "fairq/status", "/fairq/status?k=3", "/a#b", "/a b"] {
            let json = format!(r#"{{"tenant": {{"user": "u"}}, "status_path": "{path}"}}"#);
            let err = parse(json.as_bytes()).unwrap_err();
            assert!(err.starts_with("status_path:"), "{path:?}: {err}");
        }
    }
}
