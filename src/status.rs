//! A status dump: which tenants are queued right now, how deep, how long their heads have
//! waited, who holds the permits, and at which weight. Bounded (the largest `k` tenants) and read
//! without stopping the scheduler: each row is a consistent view of one tenant, the rows together
//! are not one instant's picture. Rendered as JSON or as a text table for hosts' status pages.

use std::fmt::Write;

use crate::core::SlotStatus;
use crate::engine::Engine;
use crate::identity::TenantKey;
use crate::types::StatusOrder;

/// Most names the engine keeps for status rows (`Engine::set_weight` and friends record them).
pub(crate) const MAX_NAMES: usize = 65_536;

/// The engine's state now ([`Engine::status`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    /// Whether new requests are queued (`set_enabled`).
    pub enabled: bool,
    /// Grants out now (with seats on, grants, not seats).
    pub in_flight: u64,
    /// With seats on, the permits (cost units) the grants out hold.
    pub seats_in_flight: Option<u64>,
    /// The configured bound on grants out (seats, with seats on).
    pub max_in_flight: u32,
    /// Requests queued now.
    pub queued: u64,
    /// The configured bound on requests queued.
    pub queue_capacity: u32,
    /// Tenants with requests queued or in flight now.
    pub busy_tenants: u64,
    /// Weight classes in use.
    pub weight_classes: u32,
    /// The bulkhead pools, in `downstream` order; empty with none configured.
    pub pools: Vec<PoolStatus>,
    /// How `tenants` is ordered.
    pub order: StatusOrder,
    /// The largest tenants by `order`, at most the `k` asked for.
    pub tenants: Vec<TenantStatus>,
}

/// One bulkhead pool in a [`Status`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolStatus {
    /// Its `downstream` index.
    pub downstream: u32,
    /// Grants to it out now.
    pub in_flight: u64,
    /// The in-flight limit in force (load shedding may have cut it below the configured one).
    pub limit: u64,
    /// Tenants whose head waits for a permit of this pool.
    pub blocked: u64,
    /// Whether load shedding is cutting it now.
    pub shedding: bool,
}

/// One tenant in a [`Status`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantStatus {
    /// The tenant key.
    pub tenant: TenantKey,
    /// The identifier it was given a weight or a tier under, if the engine was told
    /// (`set_weight`, `replace_weights`, `set_tier` by identifier; not the `_key` variants).
    pub name: Option<String>,
    /// Configured weight.
    pub weight: u32,
    /// The weight it is scheduled at now (the feedback controller, fleet mode).
    pub effective_weight: u32,
    /// The configured tier whose weight it has, if any.
    pub tier: Option<String>,
    /// Requests waiting.
    pub queued: u64,
    /// Grants out.
    pub in_flight: u64,
    /// Grants since it took its slot.
    pub granted: u64,
    /// How long the request at the head of its queue has waited (ns; 0 with none queued).
    pub oldest_wait_ns: u64,
    /// At most one request waiting and no more than its share lately: the light-tenant lane
    /// serves it first whenever its request becomes ready. Otherwise it is backlogged.
    pub light: bool,
    /// Its head has a Retry-After: how long until it may be granted (ns).
    pub parked_for_ns: Option<u64>,
}

impl Engine {
    /// `status_at` at the monotonic clock's now.
    pub fn status(&self, k: usize, order: StatusOrder) -> Status {
        self.status_at(k, order, crate::clock::now_ns())
    }

    /// The engine's totals and its `k` largest tenants by `order`, at `now` (monotonic ns).
    /// O(`max_tenants`), off the hot path: it pins each busy tenant's slot in turn and takes no
    /// lock the grant path takes. Allocates the rows.
    pub fn status_at(&self, k: usize, order: StatusOrder, now: u64) -> Status {
        let mut rows = Vec::with_capacity(k.min(1024));
        let busy = self.core().busiest(k, order, now, &mut rows);
        let load = self.load();
        let limits = self
            .downstream_shedding()
            .into_iter()
            .zip(self.downstream_stats());
        Status {
            enabled: self.is_enabled(),
            in_flight: load.in_flight,
            seats_in_flight: self.seats_in_flight(),
            max_in_flight: self.config().max_in_flight,
            queued: load.queued,
            queue_capacity: self.config().queue_capacity,
            busy_tenants: busy as u64,
            weight_classes: self.core().classes_in_use() as u32,
            pools: limits
                .enumerate()
                .map(|(i, (shed, (in_flight, blocked, _)))| PoolStatus {
                    downstream: i as u32,
                    in_flight,
                    limit: shed.limit,
                    blocked,
                    shedding: shed.shedding,
                })
                .collect(),
            order,
            tenants: rows.iter().map(|row| self.tenant_status(row)).collect(),
        }
    }

    fn tenant_status(&self, row: &SlotStatus) -> TenantStatus {
        let tier = self
            .config()
            .policy
            .tiers
            .iter()
            .find(|t| t.weight == row.weight)
            .map(|t| t.name.clone());
        TenantStatus {
            tenant: row.key,
            name: self.name_of(row.key),
            weight: row.weight,
            effective_weight: row.effective_weight,
            tier,
            queued: row.queued,
            in_flight: row.in_flight,
            granted: row.granted,
            oldest_wait_ns: row.oldest_wait_ns,
            light: row.light,
            parked_for_ns: row.parked_for_ns,
        }
    }
}

impl StatusOrder {
    /// Its name in a dump: `depth` or `oldest_wait`.
    pub fn name(self) -> &'static str {
        match self {
            StatusOrder::Depth => "depth",
            StatusOrder::OldestWait => "oldest_wait",
        }
    }
}

impl Status {
    /// The dump as one JSON object (tenant keys as 16-digit hex strings, times in ns).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256 + 256 * self.tenants.len());
        let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
        let _ = write!(
            out,
            "{{\"enabled\":{},\"in_flight\":{},\"seats_in_flight\":{},\"max_in_flight\":{},\
             \"queued\":{},\"queue_capacity\":{},\"busy_tenants\":{},\"weight_classes\":{},\
             \"pools\":[",
            self.enabled,
            self.in_flight,
            opt(self.seats_in_flight),
            self.max_in_flight,
            self.queued,
            self.queue_capacity,
            self.busy_tenants,
            self.weight_classes
        );
        for (i, p) in self.pools.iter().enumerate() {
            let _ = write!(
                out,
                "{}{{\"downstream\":{},\"in_flight\":{},\"limit\":{},\"blocked\":{},\
                 \"shedding\":{}}}",
                if i == 0 { "" } else { "," },
                p.downstream,
                p.in_flight,
                p.limit,
                p.blocked,
                p.shedding
            );
        }
        let _ = write!(out, "],\"order\":\"{}\",\"tenants\":[", self.order.name());
        for (i, t) in self.tenants.iter().enumerate() {
            let _ = write!(
                out,
                "{}{{\"tenant\":\"{:016x}\",\"name\":{},\"weight\":{},\"effective_weight\":{},\
                 \"tier\":{},\"queued\":{},\"in_flight\":{},\"granted\":{},\
                 \"oldest_wait_ns\":{},\"state\":\"{}\",\"parked_for_ns\":{}}}",
                if i == 0 { "" } else { "," },
                t.tenant.get(),
                json_string(t.name.as_deref()),
                t.weight,
                t.effective_weight,
                json_string(t.tier.as_deref()),
                t.queued,
                t.in_flight,
                t.granted,
                t.oldest_wait_ns,
                t.state(),
                opt(t.parked_for_ns)
            );
        }
        out.push_str("]}");
        out
    }

    /// The dump as a text table: the totals on two lines, then a line per tenant.
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(256 + 128 * self.tenants.len());
        let _ = writeln!(
            out,
            "enabled {}  in flight {}/{}  queued {}/{}  busy tenants {}  weight classes {}",
            self.enabled,
            self.seats_in_flight.unwrap_or(self.in_flight),
            self.max_in_flight,
            self.queued,
            self.queue_capacity,
            self.busy_tenants,
            self.weight_classes
        );
        for p in &self.pools {
            let _ = writeln!(
                out,
                "pool {}  in flight {}/{}  blocked {}{}",
                p.downstream,
                p.in_flight,
                p.limit,
                p.blocked,
                if p.shedding { "  shedding" } else { "" }
            );
        }
        let _ = writeln!(
            out,
            "{:<18} {:<20} {:>6} {:>6} {:>8} {:>9} {:>10} {:>12} state",
            "tenant", "name", "weight", "eff", "queued", "in_flight", "granted", "oldest_ms"
        );
        for t in &self.tenants {
            let name: String = match (&t.name, &t.tier) {
                (Some(name), _) => name.chars().take(20).collect(),
                (None, Some(tier)) => format!("[{tier}]"),
                (None, None) => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "{:016x}   {:<20} {:>6} {:>6} {:>8} {:>9} {:>10} {:>12.1} {}",
                t.tenant.get(),
                name.replace(|c: char| c.is_control(), "?"),
                t.weight,
                t.effective_weight,
                t.queued,
                t.in_flight,
                t.granted,
                t.oldest_wait_ns as f64 / 1e6,
                t.state()
            );
        }
        out
    }
}

impl TenantStatus {
    /// `parked` (a Retry-After holds its head), `light` or `backlogged`; `idle` with nothing
    /// queued.
    pub fn state(&self) -> &'static str {
        if self.parked_for_ns.is_some() {
            "parked"
        } else if self.queued == 0 {
            "idle"
        } else if self.light {
            "light"
        } else {
            "backlogged"
        }
    }
}

/// `s` as a JSON string literal, or `null`.
fn json_string(s: Option<&str>) -> String {
    let Some(s) = s else {
        return "null".to_string();
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
