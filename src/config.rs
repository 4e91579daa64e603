//! Engine configuration and its validation.
//!
//! Every field has a documented range. `Config::validate` names the offending field and the
//! range, so a gateway's operator sees what to fix instead of a panic or a silent clamp.

use std::fmt;

use crate::bulkhead::MAX_DOWNSTREAMS;
use crate::identity::TenantDimension;
use crate::policy::Policy;
use crate::shedding::Shedding;
use crate::types::ConfigError;

pub use crate::limits::{MAX_COST, MAX_WEIGHT};
/// Most weight classes (distinct weights in use) an engine can hold.
pub const MAX_WEIGHT_CLASSES: u32 = 64;
/// Most memory the fixed tables of one engine may take: 4 GiB. See [`Config::table_bytes`].
pub const MAX_ENGINE_BYTES: u64 = 4 << 30;

const MAX_TENANTS: u32 = 1 << 22;
const MAX_TENANT_QUEUE: u32 = 1 << 20;
const MAX_QUEUE: u32 = 1 << 24;
const MAX_IN_FLIGHT: u32 = 1 << 20;
const MAX_WAIT_MS: u64 = 24 * 3_600_000;
const MAX_TOP_K: u32 = 1_000;

/// How an engine is sized and what it does. Build one with `Config::default()` and change fields.
///
/// Besides each field's range, the fixed tables ([`Config::table_bytes`]) must fit in
/// `MAX_ENGINE_BYTES` (4 GiB), so the largest values cannot all be used at once: about
/// `max_tenants × (820 + 30 × tenant_queue_capacity + 20 × (max_weight_classes + downstream
/// classes))` bytes plus `64 × (queue_capacity + max_in_flight)`. With the other fields at their
/// defaults, `max_tenants` 4194304 fits only with `tenant_queue_capacity` 1, and
/// `tenant_queue_capacity` 1048576 only with `max_tenants` up to 135. [`Config::validate`]
/// names the fields whose product is too large.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Off by default: a disabled engine refuses every request with `disabled`.
    pub enabled: bool,
    /// Tenant table capacity: a new tenant is refused `tenant_table_full` while `max_tenants`
    /// tenants hold queued or in-flight requests; a tenant coming back to its own idle slot is
    /// always let in, so up to `max_tenants + max_tenants / 4 + 1` (the table's slots) can be
    /// active. 1..=4194304, and within the table cap.
    pub max_tenants: u32,
    /// Per-tenant queue bound. 1..=1048576, and within the table cap.
    pub tenant_queue_capacity: u32,
    /// Global bound on queued requests, all tenants together. 1..=16777216.
    pub queue_capacity: u32,
    /// Most grants out at once. 1..=1048576. Default 8. With [`Config::seats`], the most cost
    /// units out at once.
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
    /// Seats: `max_in_flight` counts cost units, not requests. A grant takes its request's cost
    /// in permits (at least 1) and `complete` or `cancel` gives the same number back (a corrected
    /// cost corrects the tenant's charge, not the permits). A request whose cost is
    /// `max_in_flight` or more runs alone: once it is next, no other grant starts until the
    /// grants out have ended, then it takes every permit. Off by default (a grant takes one
    /// permit whatever its cost). Bulkhead pools and `Stats::in_flight` still count requests.
    pub seats: bool,
    /// The light-tenant lane: a tenant with a request ready that is less than two grants ahead
    /// of its fair share is served ahead of the weight classes' rotation, in arrival order among
    /// such tenants; a tenant of the rotation that falls behind its share goes before the lane,
    /// so no queued request is overtaken without end. Backlogged tenants keep exact weighted
    /// shares of what the others leave, and through the lane no tenant gets more than three
    /// grants ahead of its share (`docs/design.md`, "Scheduling discipline"). On by default;
    /// off, every tenant waits for its class's turn. Fleet mode turns it off once it sets
    /// a tenant's effective weight (`Engine::set_fleet_factor`): fleet mode steers shares through
    /// the rotation, which lane grants skip.
    pub light_lane: bool,
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
            seats: false,
            light_lane: true,
        }
    }
}

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
    /// Checks every field, then the memory the tables would take: over `MAX_ENGINE_BYTES`, the
    /// error's `field` names the factors of the largest table (`"max_tenants x
    /// tenant_queue_capacity"`, `"max_weight_classes x max_tenants"`, `"downstream_max_in_flight
    /// x max_tenants"` or `"queue_capacity + max_in_flight"`) and the message gives every
    /// table's bytes.
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
        let tables = self.tables();
        let bytes: u64 = tables.iter().map(|&(_, b)| b).sum();
        if bytes > MAX_ENGINE_BYTES {
            let field = tables
                .iter()
                .copied()
                .max_by_key(|&(_, b)| b)
                .map_or("max_tenants", |(field, _)| field);
            let parts: Vec<String> = tables
                .iter()
                .filter(|&&(_, b)| b > 0)
                .map(|(name, b)| format!("{name} {b}"))
                .collect();
            return Err(ConfigError {
                field,
                message: format!(
                    "the engine's tables would take {bytes} bytes, over the 4 GiB cap \
                     ({MAX_ENGINE_BYTES} bytes); bytes by table: {}",
                    parts.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// Bytes the fixed tables take: tenant slots and queues, class rings, bulkhead rings,
    /// tickets. With `S = max_tenants + max_tenants / 4 + 1` tenant slots and
    /// `R = tenant_queue_capacity + tenant_queue_capacity / 2 + 1` ring entries per tenant:
    /// `S × (640 + 16 × R) + (max_weight_classes + downstream classes) × (256 + 16 × S) +
    /// 64 × (queue_capacity + max_in_flight)`. At most `MAX_ENGINE_BYTES` is allowed.
    pub fn table_bytes(&self) -> u64 {
        self.tables().iter().map(|&(_, b)| b).sum()
    }

    /// Each fixed table's bytes, named by the fields that size it.
    fn tables(&self) -> [(&'static str, u64); 4] {
        let tenants = crate::core::slot_count(self.max_tenants as usize) as u64;
        let ring = crate::core::ring_capacity(self.tenant_queue_capacity as usize) as u64;
        let per_tenant = 640 + 16 * ring;
        let rings = u64::from(self.max_weight_classes) * (256 + 16 * tenants);
        let tickets = 64 * (u64::from(self.queue_capacity) + u64::from(self.max_in_flight));
        let pools = self.downstream_max_in_flight.len() as u64 * (256 + 16 * tenants);
        [
            ("max_tenants x tenant_queue_capacity", tenants * per_tenant),
            ("max_weight_classes x max_tenants", rings),
            ("downstream_max_in_flight x max_tenants", pools),
            ("queue_capacity + max_in_flight", tickets),
        ]
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
            permanent_weights: self.policy.tiers.iter().map(|t| t.weight).collect(),
            seats: self.seats,
            light_lane: self.light_lane,
        }
    }
}
