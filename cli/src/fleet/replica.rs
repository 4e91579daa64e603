//! The replica's single-threaded event loop: complete what is due, enqueue what the flows send,
//! grant while permits are free, print a line every tick, sleep until the next event.
//!
//! Output, one JSON object per line on stdout: a `tick` line every `tick_ms` with cumulative
//! grants per tenant, the duration of every `next_grant` call that granted since the previous
//! line (ns, clock reads included), fleet factors and fleet status; then one `done` line.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use fairq::fleet::{Fleet, FleetConfig, FleetStatus, FleetThread};
use fairq::{
    Config, Dimension, Engine, Enqueued, FleetTenant, NextGrant, Outcome, Request, TenantKey,
    Ticket,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

const MS: u64 = 1_000_000;

/// One replica of a fleet run.
#[derive(Args, Clone, Debug)]
pub struct ReplicaArgs {
    /// Replica name (unique in the fleet).
    #[arg(long)]
    pub replica: String,
    /// The flows, as a JSON array of `FlowSpec`.
    #[arg(long)]
    pub flows: String,
    /// Common start instant, Unix ms: every replica of a run counts time from it.
    #[arg(long)]
    pub start_unix_ms: u64,
    /// Run length from the start instant, ms.
    #[arg(long)]
    pub duration_ms: u64,
    /// Redis URL; fleet mode is off without it.
    #[arg(long)]
    pub redis: Option<String>,
    /// Fleet name.
    #[arg(long, default_value = "harness")]
    pub fleet: String,
    /// Sync period P, ms.
    #[arg(long, default_value_t = 100)]
    pub period_ms: u64,
    /// Sync at random intervals instead, each drawn uniformly from MIN..=MAX ms (`50-500`), by a
    /// loop of this program calling `Fleet::sync` (a replica whose period drifts); `--period-ms`
    /// then only sets the socket timeouts (P/2).
    #[arg(long, value_parser = parse_range)]
    pub period_range_ms: Option<(u64, u64)>,
    /// EWMA weight of the newest sample (the library's default).
    #[arg(long, default_value_t = 0.7)]
    pub smoothing: f64,
    /// Simulated service time of one grant, µs.
    #[arg(long, default_value_t = 2000)]
    pub service_us: u64,
    /// The engine's `max_in_flight`.
    #[arg(long, default_value_t = 8)]
    pub max_in_flight: u32,
    /// The engine's `max_tenants` (fleet mode's sync scans the whole table every period).
    #[arg(long, default_value_t = 1024)]
    pub max_tenants: u32,
    /// Interval between output lines, ms.
    #[arg(long, default_value_t = 100)]
    pub tick_ms: u64,
}

/// A tenant's traffic at this replica.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct FlowSpec {
    /// Tenant name (raw identifier).
    pub tenant: String,
    /// Tenant weight.
    #[serde(default = "one")]
    pub weight: u32,
    /// Requests kept outstanding (queued or in service) at this replica.
    #[serde(default = "window")]
    pub window: u32,
    /// Arrival cap, req/s; none: backlogged (a completion is replaced at once).
    #[serde(default)]
    pub rate: Option<f64>,
    /// Active from this ms after the start instant.
    #[serde(default)]
    pub from_ms: u64,
    /// Active until this ms (none: to the end).
    #[serde(default)]
    pub to_ms: Option<u64>,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once('-').ok_or("expected MIN-MAX")?;
    let (a, b): (u64, u64) = (
        a.trim().parse().map_err(|e| format!("{e}"))?,
        b.trim().parse().map_err(|e| format!("{e}"))?,
    );
    if a == 0 || a > b {
        return Err(format!("expected 0 < MIN <= MAX, got {a}-{b}"));
    }
    Ok((a, b))
}

/// The sync loop: the library's thread, or this program's loop at random intervals.
enum SyncLoop {
    Library(FleetThread),
    Drifting {
        stop: mpsc::Sender<()>,
        handle: JoinHandle<Fleet>,
        status: Arc<Mutex<FleetStatus>>,
    },
}

impl SyncLoop {
    fn start(fleet: Fleet, range: Option<(u64, u64)>) -> std::io::Result<SyncLoop> {
        let Some((lo, hi)) = range else {
            return fleet.start().map(SyncLoop::Library);
        };
        let (stop, stopped) = mpsc::channel::<()>();
        let status = Arc::new(Mutex::new(fleet.status()));
        let shared = status.clone();
        let mut rng = SmallRng::seed_from_u64(fairq::now_ns() ^ u64::from(std::process::id()));
        let handle = std::thread::Builder::new()
            .name("drifting-sync".into())
            .spawn(move || {
                let mut fleet = fleet;
                loop {
                    let began = fairq::now_ns();
                    let _ = fleet.sync(began);
                    *shared.lock().unwrap_or_else(|e| e.into_inner()) = fleet.status();
                    let due = began + rng.gen_range(lo..=hi) * MS;
                    let wait = due.saturating_sub(fairq::now_ns());
                    match stopped.recv_timeout(Duration::from_nanos(wait)) {
                        Err(mpsc::RecvTimeoutError::Timeout) => continue,
                        _ => break,
                    }
                }
                fleet
            })?;
        Ok(SyncLoop::Drifting {
            stop,
            handle,
            status,
        })
    }

    fn status(&self) -> FleetStatus {
        match self {
            SyncLoop::Library(t) => t.status(),
            SyncLoop::Drifting { status, .. } => {
                status.lock().unwrap_or_else(|e| e.into_inner()).clone()
            }
        }
    }

    fn stop(self) -> Fleet {
        match self {
            SyncLoop::Library(t) => t.stop(),
            SyncLoop::Drifting { stop, handle, .. } => {
                let _ = stop.send(());
                handle.join().expect("the sync loop does not panic")
            }
        }
    }
}

fn one() -> u32 {
    1
}

fn window() -> u32 {
    32
}

#[derive(Serialize)]
struct TickLine<'a> {
    tick: u64,
    /// When the line was taken, ms after the start instant.
    t_ms: f64,
    granted: &'a BTreeMap<String, u64>,
    expired: u64,
    refused: u64,
    lat_ns: &'a [u32],
    /// Longest the loop woke up late since the previous line, µs: a stalled process, not fleet
    /// mode, when large.
    late_us: u64,
    factors: BTreeMap<String, u32>,
    fleet: Option<StatusLine>,
}

#[derive(Serialize)]
struct StatusLine {
    syncs: u64,
    pipelines: u64,
    failures: u32,
    degraded: bool,
}

impl From<FleetStatus> for StatusLine {
    fn from(s: FleetStatus) -> Self {
        StatusLine {
            syncs: s.syncs,
            pipelines: s.pipelines,
            failures: s.consecutive_failures,
            degraded: s.degraded,
        }
    }
}

#[derive(Serialize)]
struct DoneLine<'a> {
    done: bool,
    t_ms: f64,
    granted: &'a BTreeMap<String, u64>,
    fleet: Option<StatusLine>,
    /// How long the sync thread ran, ms.
    fleet_alive_ms: f64,
}

struct Flow {
    spec: FlowSpec,
    request: Request,
    from_ns: u64,
    to_ns: u64,
    gap_ns: Option<u64>,
    outstanding: u32,
    next_arrival_ns: u64,
}

impl Flow {
    fn active(&self, t: u64) -> bool {
        (self.from_ns..self.to_ns).contains(&t)
    }
}

/// Runs one replica to the end of its duration; errors are setup errors.
pub fn run(args: &ReplicaArgs) -> Result<(), String> {
    let specs: Vec<FlowSpec> =
        serde_json::from_str(&args.flows).map_err(|e| format!("--flows: {e}"))?;
    let engine = Arc::new(
        Engine::new(Config {
            enabled: true,
            max_in_flight: args.max_in_flight,
            max_tenants: args.max_tenants,
            ..Config::default()
        })
        .map_err(|e| format!("engine config: {e:?}"))?,
    );
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let mut flows = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        engine
            .set_weight(&spec.tenant, spec.weight)
            .map_err(|e| format!("weight of {}: {e:?}", spec.tenant))?;
        let key = TenantKey::from_raw(spec.tenant.as_bytes());
        names.insert(key.get(), spec.tenant.clone());
        let mut request = Request::new(key, Dimension::User);
        request.user_data = i as u64;
        let gap_ns = match spec.rate {
            Some(r) if r > 0.0 && r.is_finite() => Some((1e9 / r) as u64),
            Some(r) => return Err(format!("rate of {} must be > 0, got {r}", spec.tenant)),
            None => None,
        };
        flows.push(Flow {
            from_ns: spec.from_ms * MS,
            to_ns: spec.to_ms.map_or(u64::MAX, |t| t * MS),
            next_arrival_ns: spec.from_ms * MS,
            spec,
            request,
            gap_ns,
            outstanding: 0,
        });
    }
    let mut granted: BTreeMap<String, u64> = names.values().map(|n| (n.clone(), 0)).collect();

    let fleet_started = Instant::now();
    let thread: Option<SyncLoop> = match &args.redis {
        None => None,
        Some(url) => {
            let config = FleetConfig {
                url: url.clone(),
                fleet: args.fleet.clone(),
                replica: args.replica.clone(),
                period_ms: args.period_ms,
                smoothing: args.smoothing,
                ..FleetConfig::default()
            };
            let fleet = Fleet::new(engine.clone(), config).map_err(|e| e.to_string())?;
            Some(SyncLoop::start(fleet, args.period_range_ms).map_err(|e| e.to_string())?)
        }
    };

    // The common start instant, mapped onto this process's monotonic clock.
    let wall_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    std::thread::sleep(Duration::from_millis(
        args.start_unix_ms.saturating_sub(wall_now),
    ));
    let origin = fairq::now_ns();
    let rel = || fairq::now_ns() - origin;

    let service_ns = args.service_us * 1000;
    let tick_ns = args.tick_ms * MS;
    let end_ns = args.duration_ms * MS;
    let mut in_service: VecDeque<(u64, Ticket, usize)> = VecDeque::new();
    let mut lat_ns: Vec<u32> = Vec::with_capacity(4096);
    let (mut expired, mut refused) = (0u64, 0u64);
    let mut next_tick = tick_ns;
    let mut late_ns = 0u64;
    let mut planned_wake = 0u64;
    let mut snapshot: Vec<FleetTenant> = Vec::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();

    loop {
        let t = rel();
        late_ns = late_ns.max(t.saturating_sub(planned_wake));
        if t >= end_ns {
            break;
        }
        let now = origin + t;
        while in_service.front().is_some_and(|&(due, _, _)| due <= t) {
            let (_, ticket, f) = in_service.pop_front().expect("front checked");
            engine
                .complete_at(ticket, Outcome::Admitted, None, now)
                .map_err(|e| format!("complete: {e:?}"))?;
            flows[f].outstanding -= 1;
        }
        for flow in flows.iter_mut() {
            if !flow.active(t) {
                continue;
            }
            while flow.outstanding < flow.spec.window {
                if let Some(gap) = flow.gap_ns {
                    if flow.next_arrival_ns > t {
                        break;
                    }
                    flow.next_arrival_ns += gap;
                }
                match engine.enqueue_at(&flow.request, now) {
                    Ok(Enqueued::Queued { .. }) => flow.outstanding += 1,
                    _ => {
                        refused += 1;
                        break;
                    }
                }
            }
            // A full window loses its arrivals (closed loop): no burst when a slot frees.
            if flow.gap_ns.is_some() && flow.next_arrival_ns < t {
                flow.next_arrival_ns = t;
            }
        }
        loop {
            let started = Instant::now();
            let next = engine.next_grant();
            let took = started.elapsed();
            match next {
                NextGrant::Granted(g) => {
                    lat_ns.push(u32::try_from(took.as_nanos()).unwrap_or(u32::MAX));
                    let f = g.user_data as usize;
                    *granted
                        .get_mut(&flows[f].spec.tenant)
                        .expect("every flow's tenant is counted") += 1;
                    in_service.push_back((rel() + service_ns, g.ticket, f));
                }
                NextGrant::Expired(e) => {
                    expired += 1;
                    flows[e.user_data as usize].outstanding -= 1;
                }
                NextGrant::Empty | NextGrant::AtCapacity => break,
            }
        }
        let t = rel();
        if t >= next_tick {
            snapshot.clear();
            engine.fleet_tenants(&mut snapshot);
            let factors = snapshot
                .iter()
                .filter_map(|ft| names.get(&ft.tenant.get()).map(|n| (n.clone(), ft.factor)))
                .collect();
            let line = TickLine {
                tick: t / tick_ns,
                t_ms: t as f64 / MS as f64,
                granted: &granted,
                expired,
                refused,
                lat_ns: &lat_ns,
                late_us: late_ns / 1000,
                factors,
                fleet: thread.as_ref().map(|th| th.status().into()),
            };
            let text = serde_json::to_string(&line).expect("serialises");
            writeln!(out, "{text}").map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
            lat_ns.clear();
            late_ns = 0;
            // A late line still stands for its own tick; skipped ticks are not invented.
            next_tick = (t / tick_ns + 1) * tick_ns;
        }
        let mut wake = next_tick.min(end_ns);
        if let Some(&(due, _, _)) = in_service.front() {
            wake = wake.min(due);
        }
        for flow in &flows {
            if flow.from_ns > t {
                wake = wake.min(flow.from_ns);
            } else if flow.active(t) && flow.outstanding < flow.spec.window && flow.gap_ns.is_some()
            {
                wake = wake.min(flow.next_arrival_ns);
            }
        }
        let t = rel();
        planned_wake = wake.max(t);
        if wake > t {
            std::thread::sleep(Duration::from_nanos(wake - t));
        }
    }
    let status = thread.map(|th| th.stop().status().into());
    let line = DoneLine {
        done: true,
        t_ms: rel() as f64 / MS as f64,
        granted: &granted,
        fleet: status,
        fleet_alive_ms: fleet_started.elapsed().as_secs_f64() * 1e3,
    };
    let text = serde_json::to_string(&line).expect("serialises");
    writeln!(out, "{text}").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}
