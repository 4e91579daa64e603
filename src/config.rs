//! Engine configuration and its validation.
//!
//! Every field has a documented range. `Config::validate` names the offending field and the
//! range, so a gateway's operator sees what to fix instead of a panic or a silent clamp.

use std::fmt;

use crate::bulkhead::MAX_DOWNSTREAMS;
use crate::identity::TenantDimension;
use crate::policy::Policy;
use crate::shedding::Shedding;

pub use crate::limits::{MAX_COST, MAX_WEIGHT};
/// Most weight classes (distinct weights in use) an engine can hold.
pub const MAX_WEIGHT_CLASSES: u32 = 64;
/// Most memory the fixed tables of one engine may take.
pub const MAX_ENGINE_BYTES: u64 = 4 << 30;

const MAX_TENANTS: u32 = 1 << 22;
const MAX_TENANT_QUEUE: u32 = 1 << 20;
const MAX_QUEUE: u32 = 1 << 24;
const MAX_IN_FLIGHT: u32 = 1 << 20;
const MAX_WAIT_MS: u64 = 24 * 3_600_000;
const MAX_TOP_K: u32 = 1_000;

/// How an engine is sized and what it does. Build one with `Config::default()` and change fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Off by default: a disabled engine refuses every request with `disabled`.
    pub enabled: bool,
    /// Tenant table capacity: most tenants with queued or in-flight requests. 1..=4194304.
    pub max_tenants: u32,
    /// Per-tenant queue bound. 1..=1048576.
    pub tenant_queue_capacity: u32,
    /// Global bound on queued requests, all tenants together. 1..=16777216.
    pub queue_capacity: u32,
    /// Most grants out at once. 1..=1048576. Default 8.
    pub max_in_flight: u32,
    /// Weight of a tenant with no entry in the weight table. 1..=10000. Default 1.
    pub default_weight: u32,
    /// Longest a request may wait in the queue, in ms. 1..=86400000.
    pub max_wait_ms: u64,
    /// Which identifier names the tenant. Default `user`.
    pub tenant_dimension: TenantDimension,
    /// How long an idle tenant keeps its slot (and weight, counters) before a new tenant may take
    /// it, in ms. 0..=86400000. Default 1000.
    pub tenant_idle_ms: u64,
    /// Most distinct weights the weight table (with the default weight and the tiers) may hold
    /// at once. 1..=64. Default 8. A weight no tenant and no table entry refers to any more frees
    /// its class; the engine keeps up to twice this many classes (at most 64), so tenants still
    /// queued in the class of an old weight never block a change. The cost of a pick grows with
    /// the classes in use, never with the tenants.
    pub max_weight_classes: u32,
    /// Fairness indicators (per-tenant wait p95, refusal rate, fair-share ratio, starvation
    /// window) and the engine-wide wait histogram. On by default; off saves a few atomic writes
    /// per request (the `wait_seconds` histogram and the indicator families then leave the
    /// metrics). The wait boost and the feedback controller need them.
    pub indicators: bool,
    /// Tenants given their own fairness-indicator series in the Prometheus text: the top K by
    /// requests (the aggregate min/max covers every tenant). 0..=1000. Default 20.
    pub indicator_top_k: u32,
    /// Weight tiers, starvation guard, wait boost, feedback controller. All off by default.
    pub policy: Policy,
    /// Bulkheads: the most grants out at once for each downstream class, indexed by
    /// `Request::downstream`. Empty (the default): off, one shared pool. At most 64 classes, each
    /// 1..=`max_in_flight`.
    pub downstream_max_in_flight: Vec<u32>,
    /// Load shedding on the bulkhead pools: a pool whose downstream errors (reported with
    /// `Engine::report_downstream`) pass a threshold gets its in-flight limit cut, and requests
    /// it cannot serve within their budget are refused `downstream_shedding`. `None` (the
    /// default): off. Needs `downstream_max_in_flight`.
    pub shedding: Option<Shedding>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: false,
            max_tenants: 1024,
            tenant_queue_capacity: 64,
            queue_capacity: 4096,
            max_in_flight: 8,
            default_weight: 1,
            max_wait_ms: 30_000,
            tenant_dimension: TenantDimension::User,
            tenant_idle_ms: 1_000,
            max_weight_classes: 8,
            indicators: true,
            indicator_top_k: 20,
            policy: Policy::default(),
            downstream_max_in_flight: Vec::new(),
            shedding: None,
        }
    }
}

/// A configuration value out of its range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault, as named in `Config`.
    pub field: &'static str,
    /// What is allowed and what was given.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config `{}`: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}

fn check_range<T: PartialOrd + fmt::Display + Copy>(
    field: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError {
            field,
            message: format!("must be in {min}..={max}, got {value}"),
        });
    }
    Ok(())
}

impl Config {
    /// Checks every field and the memory the tables would take.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range("max_tenants", self.max_tenants, 1, MAX_TENANTS)?;
        check_range(
            "tenant_queue_capacity",
            self.tenant_queue_capacity,
            1,
            MAX_TENANT_QUEUE,
        )?;
        check_range("queue_capacity", self.queue_capacity, 1, MAX_QUEUE)?;
        check_range("max_in_flight", self.max_in_flight, 1, MAX_IN_FLIGHT)?;
        check_range("default_weight", self.default_weight, 1, MAX_WEIGHT)?;
        check_range("max_wait_ms", self.max_wait_ms, 1, MAX_WAIT_MS)?;
        check_range("tenant_idle_ms", self.tenant_idle_ms, 0, MAX_WAIT_MS)?;
        check_range(
            "max_weight_classes",
            self.max_weight_classes,
            1,
            MAX_WEIGHT_CLASSES,
        )?;
        check_range("indicator_top_k", self.indicator_top_k, 0, MAX_TOP_K)?;
        self.policy
            .validate(self.default_weight, self.max_weight_classes)?;
        if !self.indicators && (self.policy.wait_boost.is_some() || self.policy.feedback.is_some())
        {
            return Err(ConfigError {
                field: "indicators",
                message: "the wait boost and the feedback controller need the fairness \
                          indicators: turn them on, or the policies off"
                    .to_string(),
            });
        }
        if self.downstream_max_in_flight.len() > MAX_DOWNSTREAMS {
            return Err(ConfigError {
                field: "downstream_max_in_flight",
                message: format!(
                    "at most {MAX_DOWNSTREAMS} downstream classes, got {}",
                    self.downstream_max_in_flight.len()
                ),
            });
        }
        for &max in &self.downstream_max_in_flight {
            check_range("downstream_max_in_flight", max, 1, self.max_in_flight)?;
        }
        if let Some(shedding) = &self.shedding {
            shedding.validate(self.downstream_max_in_flight.len())?;
        }
        let bytes = self.table_bytes();
        if bytes > MAX_ENGINE_BYTES {
            return Err(ConfigError {
                field: "max_tenants",
                message: format!(
                    "max_tenants x tenant_queue_capacity (plus class rings and tickets) needs \
                     {bytes} bytes, over the {MAX_ENGINE_BYTES}-byte limit"
                ),
            });
        }
        Ok(())
    }

    /// Bytes the fixed tables take: tenant slots and queues, class rings, bulkhead rings, tickets.
    pub fn table_bytes(&self) -> u64 {
        let tenants = crate::core::slot_count(self.max_tenants as usize) as u64;
        let ring = crate::core::ring_capacity(self.tenant_queue_capacity as usize) as u64;
        let per_tenant = 640 + 16 * ring;
        let rings = u64::from(self.max_weight_classes) * (256 + 16 * tenants);
        let tickets = 64 * (u64::from(self.queue_capacity) + u64::from(self.max_in_flight));
        let pools = self.downstream_max_in_flight.len() as u64 * (256 + 16 * tenants);
        tenants * per_tenant + rings + pools + tickets
    }

    /// The core's sizes and bounds.
    pub(crate) fn core_limits(&self) -> crate::core::Limits {
        crate::core::Limits {
            max_tenants: self.max_tenants,
            tenant_queue_capacity: self.tenant_queue_capacity,
            queue_capacity: self.queue_capacity,
            max_in_flight: self.max_in_flight,
            default_weight: self.default_weight,
            max_wait_ns: self.max_wait_ms.saturating_mul(crate::limits::MS),
            tenant_idle_ns: self.tenant_idle_ms.saturating_mul(crate::limits::MS),
            max_weight_classes: self.max_weight_classes,
            pinned_weights: self.policy.tiers.iter().map(|t| t.weight).collect(),
        }
    }
}
