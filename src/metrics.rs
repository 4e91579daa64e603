//! Prometheus text exposition of the engine's gauges and counters (R11).
//!
//! Rendered from atomic counters only: reading metrics never blocks the hot path.

use std::fmt::Write;

use crate::engine::Engine;
use crate::types::Reason;

impl Engine {
    /// Renders the metrics in the Prometheus text format (version 0.0.4).
    pub fn prometheus_text(&self) -> String {
        let mut out = String::with_capacity(2048);
        self.write_prometheus(&mut out);
        out
    }

    /// Appends the Prometheus text to `out`.
    pub fn write_prometheus(&self, out: &mut String) {
        let stats = self.stats();
        let dim = self.config().tenant_dimension.as_str();
        // `write!` into a String cannot fail.
        let _ = writeln!(
            out,
            "# HELP rate_limit_fair_queue_depth Requests held in the fair queue now.\n\
             # TYPE rate_limit_fair_queue_depth gauge\n\
             rate_limit_fair_queue_depth {}",
            stats.queued
        );
        let _ = writeln!(
            out,
            "# HELP rate_limit_fair_queue_tenants Tenant queues the scheduler tracks now.\n\
             # TYPE rate_limit_fair_queue_tenants gauge\n\
             rate_limit_fair_queue_tenants {}",
            stats.tenants
        );
        let _ = writeln!(
            out,
            "# HELP rate_limit_fair_queue_grants_total Admission attempts released by the queue.\n\
             # TYPE rate_limit_fair_queue_grants_total counter\n\
             rate_limit_fair_queue_grants_total{{tenant_dimension=\"{dim}\"}} {}",
            stats.granted
        );
        let _ = writeln!(
            out,
            "# HELP rate_limit_fair_queue_refused_total Requests refused on arrival or after waiting.\n\
             # TYPE rate_limit_fair_queue_refused_total counter"
        );
        for reason in Reason::ALL {
            let _ = writeln!(
                out,
                "rate_limit_fair_queue_refused_total{{tenant_dimension=\"{dim}\",reason=\"{}\"}} {}",
                reason.as_str(),
                stats.refused_for(reason)
            );
        }
    }
}
