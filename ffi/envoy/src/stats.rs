//! The filter's Envoy stats (shown on the admin port, `/stats/prometheus` among others).
//!
//! Gauges and the wait histogram have no labels: Envoy resolves them once, so setting one costs
//! little and they are set on every change. A labelled counter costs a stat-name lookup per call
//! in Envoy, so grants and refusals are counted here and added to Envoy's counters at most every
//! 100 ms, and at once whenever the engine holds nothing (no request queued or in flight).

use std::sync::atomic::{AtomicU64, Ordering};

use fairq::{Dimension, Engine, Reason};

use crate::abi::{self, ConfigEnvoy, ModuleBuffer};

type Define =
    unsafe extern "C" fn(ConfigEnvoy, ModuleBuffer, *const ModuleBuffer, usize, *mut usize) -> u32;

const P: &str = "rate_limit_fair_queue";
const FLUSH_NS: u64 = 100_000_000;
const DIMS: usize = Dimension::ALL.len();
const REASONS: usize = Reason::ALL.len();

/// One configuration's stats in Envoy.
pub struct Stats {
    envoy: ConfigEnvoy,
    depth: usize,
    tenants: usize,
    in_flight: usize,
    wait_ms: usize,
    grants: usize,
    refused: usize,
}

/// What an engine's requests owe Envoy's stats, shared by every configuration that uses the
/// engine (a reload keeps the engine; Envoy keeps stats by name), so that any of them can
/// settle it.
#[derive(Default)]
pub struct Pending {
    grants: [AtomicU64; DIMS],
    refused: [[AtomicU64; REASONS]; DIMS],
    last_flush_ns: AtomicU64,
    /// The gauges (depth, tenants, in flight) as last set, so an unchanged one is not set again.
    shown: [AtomicU64; 3],
}

// SAFETY: `envoy` is the filter configuration's Envoy object, which outlives every stream that
// reaches these stats; Envoy's stats are thread-safe, and the configuration-level callbacks
// take no stream.
unsafe impl Send for Stats {}
// SAFETY: as above; everything else is atomics.
unsafe impl Sync for Stats {}

fn define(envoy: ConfigEnvoy, kind: Define, name: &str, labels: &[&str]) -> Result<usize, String> {
    let name = format!("{P}_{name}");
    let labels: Vec<ModuleBuffer> = labels
        .iter()
        .map(|l| ModuleBuffer::of(l.as_bytes()))
        .collect();
    let mut id = 0usize;
    // SAFETY: Envoy's config pointer from config_new (on the main thread, before stats freeze);
    // the buffers live for the call.
    let rc = unsafe {
        kind(
            envoy,
            ModuleBuffer::of(name.as_bytes()),
            labels.as_ptr(),
            labels.len(),
            &mut id,
        )
    };
    if rc == abi::METRICS_SUCCESS {
        Ok(id)
    } else {
        Err(format!("defining the stat {name} failed (result {rc})"))
    }
}

impl Stats {
    /// Defines the stats; only while Envoy makes the filter configuration.
    pub fn define(envoy: ConfigEnvoy) -> Result<Stats, String> {
        use abi::{
            envoy_dynamic_module_callback_http_filter_config_define_counter as counter,
            envoy_dynamic_module_callback_http_filter_config_define_gauge as gauge,
            envoy_dynamic_module_callback_http_filter_config_define_histogram as histogram,
        };
        Ok(Stats {
            envoy,
            depth: define(envoy, gauge, "depth", &[])?,
            tenants: define(envoy, gauge, "tenants", &[])?,
            in_flight: define(envoy, gauge, "in_flight", &[])?,
            wait_ms: define(envoy, histogram, "wait_ms", &[])?,
            grants: define(envoy, counter, "grants_total", &["tenant_dimension"])?,
            refused: define(
                envoy,
                counter,
                "refused_total",
                &["tenant_dimension", "reason"],
            )?,
        })
    }

    /// A grant, and how long its request waited.
    pub fn granted(&self, pending: &Pending, dimension: Dimension, waited_ns: u64) {
        // Relaxed: a count, summed by whoever flushes.
        pending.grants[dimension as usize].fetch_add(1, Ordering::Relaxed);
        // SAFETY: see the Send impl; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_record_histogram_value(
                self.envoy,
                self.wait_ms,
                std::ptr::null(),
                0,
                waited_ns / 1_000_000,
            )
        };
    }

    /// A refusal (cancelled: the client went away while queued).
    pub fn refused(pending: &Pending, dimension: Dimension, reason: Reason) {
        // Relaxed: as in `granted`.
        pending.refused[dimension as usize][reason as usize - 1].fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the gauges from the engine, and adds the counts to Envoy's when due.
    pub fn update(&self, engine: &Engine, pending: &Pending) {
        let load = engine.load();
        for (i, (id, value)) in [
            (self.depth, load.queued),
            (self.tenants, load.tenants),
            (self.in_flight, load.in_flight),
        ]
        .into_iter()
        .enumerate()
        {
            // Relaxed: skips a call that would set the value Envoy has; a race only repeats one.
            if pending.shown[i].swap(value, Ordering::Relaxed) == value {
                continue;
            }
            // SAFETY: see the Send impl; no labels.
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_config_set_gauge(
                    self.envoy,
                    id,
                    std::ptr::null(),
                    0,
                    value,
                )
            };
        }
        let idle = load.queued == 0 && load.in_flight == 0;
        let now = fairq::now_ns();
        // Relaxed: only elects one flusher per period; the counts are swapped atomically.
        let last = pending.last_flush_ns.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= FLUSH_NS
            && pending
                .last_flush_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if idle || due {
            self.flush(pending);
        }
    }

    /// Adds the counts not yet in Envoy's counters.
    pub fn flush(&self, pending: &Pending) {
        for dim in Dimension::ALL {
            let label = dim.as_str().as_bytes();
            // Relaxed: each count is taken once by the swap.
            let n = pending.grants[dim as usize].swap(0, Ordering::Relaxed);
            if n > 0 {
                self.add(self.grants, &[ModuleBuffer::of(label)], n);
            }
            for reason in Reason::ALL {
                let n =
                    pending.refused[dim as usize][reason as usize - 1].swap(0, Ordering::Relaxed);
                if n > 0 {
                    let labels = [
                        ModuleBuffer::of(label),
                        ModuleBuffer::of(reason.as_str().as_bytes()),
                    ];
                    self.add(self.refused, &labels, n);
                }
            }
        }
    }

    fn add(&self, id: usize, labels: &[ModuleBuffer], n: u64) {
        // SAFETY: see the Send impl; the label buffers live for the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.envoy,
                id,
                labels.as_ptr(),
                labels.len(),
                n,
            )
        };
    }
}
