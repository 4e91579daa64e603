//! The discrete-event simulation: one trace, one scheduler, one shared backend model, on a
//! virtual clock.
//!
//! Events are arrivals (from the trace), service completions, client retries, Retry-After
//! expiries and scheduler wake-ups. After every event the simulation asks the scheduler for work
//! while a backend slot is free (`max_in_flight` slots, each busy for the request's service time
//! drawn in the trace), exactly as a gateway calls `next_grant` after every enqueue and complete.
//!
//! # The measures
//! - **wait**: from a request's arrival to its grant, over granted requests. A request that is
//!   refused, on arrival or after waiting, counts under its reason instead.
//! - **fair_share_ratio**: time is cut into windows (`report.window_s`, 10 s by default). In each
//!   window a tenant's *demand* is the cost it had queued at the window's start plus the cost it
//!   offered during the window, and the capacity is the total cost granted in the window, all
//!   tenants together. The *expected* service is the weighted max-min fair share of that capacity
//!   (water-filling: a tenant that demands less than its weighted share gets its demand, the rest
//!   is shared out again by weight among the others). The ratio is Σ granted / Σ expected over
//!   the windows. 1.0 is exactly fair; under 1 the tenant got less than its weight entitles it to
//!   given what it asked for. A tenant is *backlogged* in a window when its demand exceeded its
//!   expected share there by more than 5% (plus one cost unit). The verdict uses the 10-minute moving sum.
//! - **downstreams** (scenarios with `[[downstreams]]`): each downstream's mean in-flight count
//!   per second, and the in-flight limit fairq's pool had in force at the end of each second. A
//!   request granted while its downstream fails (a `failures` period) fails with the period's
//!   probability, decided by its own seed (the same request fails under every scheduler), and
//!   then holds its slot for the period's `error_ms` (a timeout) instead of its service time; the
//!   scheduler learns the outcome at completion (fairq reports it to its pool).
//! - **starvation_window**: the longest continuous time during which the tenant had at least
//!   one ready waiter (queued and past its Retry-After, answered or not) and received no grant.
//!   It opens when a waiter becomes ready while none was, restarts at every grant that leaves
//!   another ready waiter, and closes at a grant or when the last ready waiter leaves unserved.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use fairq::Reason;

use crate::scenario::Failure;
use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::scenario::Scenario;
use crate::sched::{Offer, Pick, Scheduler};
use crate::trace::{mix, Trace, SEC};

const NONE: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Done(u32),
    Ready(u32),
    Retry { tenant: u32, attempt: u32, key: u64 },
    Wakeup,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Delayed,
    Ready,
    InFlight,
}

#[derive(Clone, Copy)]
struct Req {
    arrival: u64,
    not_before: u64,
    deadline: u64,
    tenant: u32,
    service_us: u32,
    attempt: u32,
    key: u64,
    state: State,
    downstream: u32,
    /// Granted while its downstream failed, and failed.
    failed: bool,
}

#[derive(Clone, Default)]
struct TenantAcc {
    offered: u64,
    granted: u64,
    refused: [u64; Reason::ALL.len()],
    queued_cost: u64,
    win_start_queued: u64,
    win_arrived: u64,
    win_granted: u64,
    touched: bool,
    ready: u32,
    starving_since: u64,
    max_starvation: u64,
    fair_granted: f64,
    fair_expected: f64,
    fair_demand: f64,
    backlogged_windows: u32,
    active_windows: u32,
}

/// One report row's results under one scheduler.
#[derive(Clone, Debug)]
pub struct RowResult {
    /// Group name.
    pub name: String,
    /// Weight of each member.
    pub weight: u32,
    /// Members.
    pub count: u32,
    /// Marked bursting in the scenario (not judged by the isolation verdict).
    pub bursting: bool,
    /// Requests offered (every attempt, retries included).
    pub offered: u64,
    /// Requests granted.
    pub granted: u64,
    /// Refusals by reason code (index = code - 1).
    pub refused: [u64; Reason::ALL.len()],
    /// Waits of granted requests, µs, by chart bucket of their grant.
    pub waits: Vec<Vec<u32>>,
    /// Σ granted cost over the fair-share windows.
    pub fair_granted: f64,
    /// Σ expected cost (weighted max-min share) over the windows.
    pub fair_expected: f64,
    /// Σ demand over the windows.
    pub fair_demand: f64,
    /// Per window: (granted, expected) cost, for the moving average.
    pub windows: Vec<(f64, f64)>,
    /// Member-windows in which a member was backlogged, and in which it had demand.
    pub backlogged_windows: u64,
    /// Member-windows with demand.
    pub active_windows: u64,
    /// Longest starvation window of any member, ns.
    pub max_starvation_ns: u64,
    /// Grants by chart bucket.
    pub grants_by_bucket: Vec<u64>,
}

impl RowResult {
    /// All refusals.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }

    /// Refusals with `reason`.
    pub fn refused_for(&self, reason: Reason) -> u64 {
        self.refused[reason as usize - 1]
    }

    /// fair_share_ratio over the whole run; `None` when nothing was expected.
    pub fn fair_share_ratio(&self) -> Option<f64> {
        (self.fair_expected > 0.0).then(|| self.fair_granted / self.fair_expected)
    }

    /// The wait percentile `p` (0..=1) over the whole run, ms.
    pub fn wait_percentile_ms(&self, p: f64) -> Option<f64> {
        let mut all: Vec<u32> = self.waits.iter().flatten().copied().collect();
        percentile_us(&mut all, p).map(|us| us as f64 / 1000.0)
    }
}

/// The `p` (0..=1) percentile, nearest rank, of `values` (reordered).
pub fn percentile_us(values: &mut [u32], p: f64) -> Option<u32> {
    if values.is_empty() {
        return None;
    }
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
    Some(*values.select_nth_unstable(rank).1)
}

/// What one scheduler did with the trace.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// `fifo`, `drr`, `fairq` or `ideal`.
    pub name: &'static str,
    /// One per tenant group.
    pub rows: Vec<RowResult>,
    /// Chart bucket length, ns.
    pub bucket_ns: u64,
    /// Fair-share window length, ns.
    pub window_ns: u64,
    /// Wall time of the run.
    pub wall: Duration,
    /// Events handled.
    pub events: u64,
    /// Things a correct scheduler never does (granted before its Retry-After, after its deadline).
    pub anomalies: Vec<String>,
    /// One per `[[downstreams]]` entry (empty without).
    pub downstreams: Vec<DownstreamResult>,
    /// How the estimated waits compared with the waits that followed (schedulers that give
    /// estimates: fairq).
    pub estimates: Option<EstimateResult>,
}

/// Estimated against actual waits, over the requests queued after the first tenth of the run
/// (warm) that waited at least 1 ms: actual / estimated, an estimate of 0 counting as infinite.
#[derive(Clone, Debug)]
pub struct EstimateResult {
    /// Requests compared.
    pub n: usize,
    /// 10th, 50th and 90th percentile of actual / estimated.
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    /// Of them, those told 0.
    pub zero: usize,
}

impl EstimateResult {
    fn from_ratios(mut ratios: Vec<f64>) -> Option<EstimateResult> {
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        let at = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
        Some(EstimateResult {
            n: ratios.len(),
            p10: at(0.1),
            p50: at(0.5),
            p90: at(0.9),
            zero: ratios.iter().filter(|r| r.is_infinite()).count(),
        })
    }
}

/// What one downstream saw under one scheduler.
#[derive(Clone, Debug)]
pub struct DownstreamResult {
    /// Its name.
    pub name: String,
    /// Its pool's configured bound.
    pub bound: u32,
    /// Mean in-flight count in each second of the run.
    pub in_flight_by_s: Vec<f64>,
    /// fairq's pool limit in force at the end of each second (empty for the others).
    pub limit_by_s: Vec<u64>,
    /// Requests granted to it.
    pub granted: u64,
    /// Of which failed.
    pub failed: u64,
}

/// A downstream's live accounting during a run.
#[derive(Clone, Default)]
struct DownstreamAcc {
    in_flight: u32,
    /// When `in_flight` last changed.
    since: u64,
    /// ns × requests in flight, per second.
    area_by_s: Vec<f64>,
    limit_by_s: Vec<u64>,
    granted: u64,
    failed: u64,
    failures: Vec<Failure>,
}

impl DownstreamAcc {
    /// `in_flight` changes by `delta` at `now`: books the time at the old count.
    fn change(&mut self, now: u64, delta: i32) {
        let mut t = self.since;
        while t < now {
            let s = (t / SEC) as usize;
            let end = ((s as u64 + 1) * SEC).min(now);
            if let Some(a) = self.area_by_s.get_mut(s) {
                *a += f64::from(self.in_flight) * (end - t) as f64;
            }
            t = end;
        }
        self.since = now;
        self.in_flight = self.in_flight.saturating_add_signed(delta);
    }

    /// The failure in force at `now`, if any.
    fn failing(&self, now: u64) -> Option<Failure> {
        let sec = SEC as f64;
        self.failures.iter().copied().find(|f| {
            let start = (f.start_s * sec) as u64;
            let end = ((f.start_s + f.duration_s) * sec) as u64;
            (start..end).contains(&now)
        })
    }
}

/// Runs `sched` over `trace`.
pub fn run(
    scenario: &Scenario,
    trace: &Trace,
    mut sched: Box<dyn Scheduler>,
    progress: Option<&ProgressBar>,
) -> RunResult {
    let started = Instant::now();
    let mut sim = Sim::new(scenario, trace);
    let mut ai = 0usize;
    let mut progressed_s = 0u64;
    loop {
        let next_arrival = trace.arrivals.get(ai).map_or(NONE, |a| a.t);
        let next_event = sim.heap.peek().map_or(NONE, |Reverse((t, _, _))| *t);
        let now = next_arrival.min(next_event);
        if now == NONE || now >= trace.duration_ns {
            break;
        }
        sim.close_windows_until(now);
        sim.sample_limits(&*sched, now);
        if let Some(bar) = progress {
            let s = now / SEC;
            if s > progressed_s {
                bar.inc(s - progressed_s);
                progressed_s = s;
            }
        }
        sim.events += 1;
        if next_event <= next_arrival {
            let Some(Reverse((_, _, ev))) = sim.heap.pop() else {
                unreachable!()
            };
            match ev {
                Ev::Done(id) => {
                    sim.in_flight -= 1;
                    let req = sim.reqs[id as usize];
                    if let Some(d) = sim.downstreams.get_mut(req.downstream as usize) {
                        d.change(now, -1);
                    }
                    sched.complete(id, now, !req.failed);
                    sim.free(id);
                }
                // Ids are reused: the event is stale if its request ended and the id now
                // holds a request with another Retry-After.
                Ev::Ready(id) if sim.reqs[id as usize].not_before == now => {
                    sim.became_ready(id, now)
                }
                Ev::Ready(_) => {}
                Ev::Retry {
                    tenant,
                    attempt,
                    key,
                } => {
                    let mut rng = SmallRng::seed_from_u64(key);
                    let service_us = trace.service.sample(&mut rng);
                    sim.offer(&mut *sched, now, tenant, service_us, attempt, key);
                }
                Ev::Wakeup => {
                    if sim.wakeup_at == now {
                        sim.wakeup_at = NONE;
                    }
                }
            }
        } else {
            let a = trace.arrivals[ai];
            ai += 1;
            let key = mix(a.t ^ (u64::from(a.tenant) << 40) ^ scenario.seed);
            sim.offer(&mut *sched, now, a.tenant, a.service_us, 0, key);
        }
        sim.dispatch(&mut *sched, now);
    }
    let end = trace.duration_ns;
    sim.close_windows_until(end);
    sim.close_window(end);
    sim.sample_limits(&*sched, end);
    for d in &mut sim.downstreams {
        d.change(end, 0);
    }
    if let Some(bar) = progress {
        bar.inc((end / SEC).saturating_sub(progressed_s));
    }
    sim.finish(sched.name(), started.elapsed())
}

struct Sim<'a> {
    scenario: &'a Scenario,
    trace: &'a Trace,
    reqs: Vec<Req>,
    free_ids: Vec<u32>,
    tenants: Vec<TenantAcc>,
    touched: Vec<u32>,
    rows: Vec<RowResult>,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    in_flight: u32,
    max_in_flight: u32,
    max_wait_ns: u64,
    wakeup_at: u64,
    window_ns: u64,
    window_end: u64,
    bucket_ns: u64,
    buckets: usize,
    events: u64,
    anomalies: Vec<String>,
    downstreams: Vec<DownstreamAcc>,
    /// Seconds whose pool limits are sampled.
    limits_sampled: u64,
    /// actual / estimated wait of the warm requests that waited (see [`EstimateResult`]).
    estimate_ratios: Vec<f64>,
    /// Whether the scheduler gave any estimate.
    estimated: bool,
}

impl<'a> Sim<'a> {
    fn new(scenario: &'a Scenario, trace: &'a Trace) -> Sim<'a> {
        let bucket_ns = ((scenario.report.chart_bucket_s * SEC as f64) as u64).max(1);
        let buckets = trace.duration_ns.div_ceil(bucket_ns).max(1) as usize;
        let window_ns = ((scenario.report.window_s * SEC as f64) as u64).max(1);
        let rows = trace
            .rows
            .iter()
            .map(|r| RowResult {
                name: r.name.clone(),
                weight: r.weight,
                count: r.count,
                bursting: r.bursting,
                offered: 0,
                granted: 0,
                refused: [0; Reason::ALL.len()],
                waits: vec![Vec::new(); buckets],
                fair_granted: 0.0,
                fair_expected: 0.0,
                fair_demand: 0.0,
                windows: Vec::new(),
                backlogged_windows: 0,
                active_windows: 0,
                max_starvation_ns: 0,
                grants_by_bucket: vec![0; buckets],
            })
            .collect();
        Sim {
            scenario,
            trace,
            reqs: Vec::new(),
            free_ids: Vec::new(),
            tenants: vec![
                TenantAcc {
                    starving_since: NONE,
                    ..TenantAcc::default()
                };
                trace.tenants.len()
            ],
            touched: Vec::new(),
            rows,
            heap: BinaryHeap::new(),
            seq: 0,
            in_flight: 0,
            max_in_flight: scenario.backend.max_in_flight,
            max_wait_ns: scenario.queue.max_wait_ms * crate::trace::MS,
            wakeup_at: NONE,
            window_ns,
            window_end: window_ns,
            bucket_ns,
            buckets,
            events: 0,
            anomalies: Vec::new(),
            estimate_ratios: Vec::new(),
            estimated: false,
            downstreams: scenario
                .downstreams
                .iter()
                .map(|d| DownstreamAcc {
                    area_by_s: vec![0.0; trace.duration_ns.div_ceil(SEC) as usize],
                    failures: d.failures.clone(),
                    ..DownstreamAcc::default()
                })
                .collect(),
            limits_sampled: 0,
        }
    }

    /// Records the pools' limits for every second that ended by `now`.
    fn sample_limits(&mut self, sched: &dyn Scheduler, now: u64) {
        if self.downstreams.is_empty() || now / SEC <= self.limits_sampled {
            return;
        }
        let limits = sched.downstream_limits();
        while self.limits_sampled < now / SEC {
            for (d, limit) in self.downstreams.iter_mut().zip(&limits) {
                d.limit_by_s.push(*limit);
            }
            self.limits_sampled += 1;
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    fn alloc(&mut self, req: Req) -> u32 {
        match self.free_ids.pop() {
            Some(id) => {
                self.reqs[id as usize] = req;
                id
            }
            None => {
                self.reqs.push(req);
                (self.reqs.len() - 1) as u32
            }
        }
    }

    fn free(&mut self, id: u32) {
        self.reqs[id as usize].state = State::Free;
        self.free_ids.push(id);
    }

    fn touch(&mut self, tenant: u32) {
        let acc = &mut self.tenants[tenant as usize];
        if !acc.touched {
            acc.touched = true;
            self.touched.push(tenant);
        }
    }

    fn offer(
        &mut self,
        sched: &mut dyn Scheduler,
        now: u64,
        tenant: u32,
        service_us: u32,
        attempt: u32,
        key: u64,
    ) {
        let trace = self.trace;
        let spec = &trace.tenants[tenant as usize];
        let (cost, retry_after_ns, timeout_ns) = (spec.cost, spec.retry_after_ns, spec.timeout_ns);
        let downstream = spec.downstream;
        let budget = match timeout_ns {
            0 => self.max_wait_ns,
            t => t.min(self.max_wait_ns),
        };
        let id = self.alloc(Req {
            arrival: now,
            not_before: now + retry_after_ns,
            deadline: now + budget,
            tenant,
            service_us,
            attempt,
            key,
            state: State::Delayed,
            downstream,
            failed: false,
        });
        self.touch(tenant);
        let acc = &mut self.tenants[tenant as usize];
        acc.offered += 1;
        acc.win_arrived += u64::from(cost);
        let offer = Offer {
            id,
            tenant,
            cost,
            retry_after_ns,
            timeout_ns,
            downstream,
        };
        match sched.enqueue(offer, now) {
            Ok(()) => {
                self.tenants[tenant as usize].queued_cost += u64::from(cost);
                if retry_after_ns == 0 {
                    self.became_ready(id, now);
                } else {
                    self.push(now + retry_after_ns, Ev::Ready(id));
                }
            }
            Err(reason) => {
                self.tenants[tenant as usize].refused[reason as usize - 1] += 1;
                self.free(id);
                self.maybe_retry(tenant, attempt, key, now);
            }
        }
    }

    fn maybe_retry(&mut self, tenant: u32, attempt: u32, key: u64, now: u64) {
        let Some(retry) = self.trace.tenants[tenant as usize].retry else {
            return;
        };
        if attempt + 1 >= retry.max_attempts {
            return;
        }
        let next_key = mix(key ^ 0x5bd1_e995);
        let u = (next_key >> 11) as f64 / (1u64 << 53) as f64;
        let factor = 1.0 + retry.jitter * (2.0 * u - 1.0);
        let delay_ms = retry.backoff_ms * retry.multiplier.powi(attempt as i32) * factor;
        let at = now + (delay_ms * 1e6) as u64;
        self.push(
            at.max(now + 1),
            Ev::Retry {
                tenant,
                attempt: attempt + 1,
                key: next_key,
            },
        );
    }

    fn became_ready(&mut self, id: u32, now: u64) {
        let req = &mut self.reqs[id as usize];
        if req.state != State::Delayed {
            return; // answered before its Retry-After passed
        }
        req.state = State::Ready;
        let acc = &mut self.tenants[req.tenant as usize];
        acc.ready += 1;
        if acc.starving_since == NONE {
            acc.starving_since = now;
        }
    }

    /// A ready waiter of `tenant` leaves: granted (`granted`) or answered without a grant.
    fn ready_leaves(&mut self, tenant: u32, granted: bool, now: u64) {
        let acc = &mut self.tenants[tenant as usize];
        acc.ready -= 1;
        if granted || acc.ready == 0 {
            let window = now - acc.starving_since;
            acc.max_starvation = acc.max_starvation.max(window);
            acc.starving_since = if acc.ready > 0 { now } else { NONE };
        }
    }

    fn dispatch(&mut self, sched: &mut dyn Scheduler, now: u64) {
        while self.in_flight < self.max_in_flight {
            match sched.next(now) {
                Pick::Granted(id) => {
                    self.compare_estimate(id, sched.estimated_wait_ns(id), now);
                    self.granted(id, now);
                }
                Pick::Expired(id) => self.expired(id, now),
                Pick::Empty => break,
            }
        }
        // At capacity the next completion dispatches again; a wake-up is only needed while a
        // slot is free and the scheduler holds requests that are not ready yet.
        if self.in_flight >= self.max_in_flight {
            return;
        }
        if let Some(at) = sched.wakeup() {
            let at = at.max(now + 1);
            if at < self.wakeup_at {
                self.wakeup_at = at;
                self.push(at, Ev::Wakeup);
            }
        }
    }

    /// Records request `id`'s actual wait against its estimate `estimate` at its grant.
    fn compare_estimate(&mut self, id: u32, estimate: Option<u64>, now: u64) {
        let Some(estimate) = estimate else { return };
        self.estimated = true;
        let arrival = self.reqs[id as usize].arrival;
        let wait = now.saturating_sub(arrival);
        if arrival >= self.trace.duration_ns / 10 && wait > 0 {
            self.estimate_ratios.push(if estimate == 0 {
                f64::INFINITY
            } else {
                wait as f64 / estimate as f64
            });
        }
    }

    fn granted(&mut self, id: u32, now: u64) {
        let mut req = self.reqs[id as usize];
        if req.state == State::Delayed && now >= req.not_before {
            // Its Retry-After ends at this very instant and the scheduler saw it first.
            self.became_ready(id, now);
            req.state = State::Ready;
        }
        let name = &self.trace.tenants[req.tenant as usize].raw;
        match req.state {
            State::Ready => {}
            State::Delayed => self.anomaly(format!(
                "request {id} of {name} granted at {now} ns before its Retry-After"
            )),
            State::Free | State::InFlight => {
                self.anomaly(format!("request {id} of {name} granted while not queued"));
                return;
            }
        }
        if now > req.deadline {
            self.anomaly(format!(
                "request {id} of {name} granted at {now} ns, after its deadline {}",
                req.deadline
            ));
        }
        self.reqs[id as usize].state = State::InFlight;
        self.in_flight += 1;
        let cost = u64::from(self.trace.tenants[req.tenant as usize].cost);
        let acc = &mut self.tenants[req.tenant as usize];
        acc.granted += 1;
        acc.win_granted += cost;
        acc.queued_cost -= cost;
        if req.state == State::Ready {
            self.ready_leaves(req.tenant, true, now);
        }
        let row = &mut self.rows[self.trace.tenants[req.tenant as usize].row as usize];
        let bucket = ((now / self.bucket_ns) as usize).min(self.buckets - 1);
        let wait_us = ((now - req.arrival) / 1000).min(u64::from(u32::MAX)) as u32;
        row.waits[bucket].push(wait_us);
        row.grants_by_bucket[bucket] += 1;
        let mut service_ns = u64::from(req.service_us) * 1000;
        if let Some(d) = self.downstreams.get_mut(req.downstream as usize) {
            d.change(now, 1);
            d.granted += 1;
            if let Some(f) = d.failing(now) {
                // The request's own seed decides, so it fails under every scheduler alike.
                let draw = (mix(req.key ^ 0xfa11_ed00) >> 11) as f64 / (1u64 << 53) as f64;
                if draw * 100.0 < f.error_percent {
                    d.failed += 1;
                    self.reqs[id as usize].failed = true;
                    service_ns = (f.error_ms * 1e6) as u64;
                }
            }
        }
        self.push(now + service_ns.max(1), Ev::Done(id));
    }

    fn expired(&mut self, id: u32, now: u64) {
        let req = self.reqs[id as usize];
        if !matches!(req.state, State::Ready | State::Delayed) {
            let name = &self.trace.tenants[req.tenant as usize].raw;
            self.anomaly(format!("request {id} of {name} expired while not queued"));
            return;
        }
        if now <= req.deadline {
            let name = &self.trace.tenants[req.tenant as usize].raw;
            self.anomaly(format!(
                "request {id} of {name} expired at {now} ns, before its deadline {}",
                req.deadline
            ));
        }
        let cost = u64::from(self.trace.tenants[req.tenant as usize].cost);
        let acc = &mut self.tenants[req.tenant as usize];
        acc.queued_cost -= cost;
        acc.refused[Reason::DeadlineExceeded as usize - 1] += 1;
        if req.state == State::Ready {
            self.ready_leaves(req.tenant, false, now);
        }
        self.free(id);
        self.maybe_retry(req.tenant, req.attempt, req.key, now);
    }

    fn anomaly(&mut self, what: String) {
        if self.anomalies.len() < 20 {
            self.anomalies.push(what);
        }
    }

    fn close_windows_until(&mut self, now: u64) {
        while now >= self.window_end {
            let end = self.window_end;
            self.close_window(end);
            self.window_end += self.window_ns;
        }
    }

    /// Shares the window's granted capacity out by weighted max-min fairness over the demands,
    /// and books granted and expected per tenant and row.
    fn close_window(&mut self, _end: u64) {
        let mut items: Vec<(u32, f64, f64)> = Vec::with_capacity(self.touched.len());
        let mut capacity = 0.0;
        for &t in &self.touched {
            let acc = &self.tenants[t as usize];
            capacity += acc.win_granted as f64;
            let demand = (acc.win_start_queued + acc.win_arrived) as f64;
            if demand > 0.0 {
                items.push((t, demand, f64::from(self.trace.tenants[t as usize].weight)));
            }
        }
        // Water-filling: serve tenants in order of demand per weight; each gets its demand while
        // that is below the level the remaining capacity allows, the rest share by weight.
        items.sort_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)));
        let mut left = capacity;
        let mut weight_left: f64 = items.iter().map(|i| i.2).sum();
        let mut row_window = vec![(0.0, 0.0); self.rows.len()];
        for &(t, demand, weight) in &items {
            let level = if weight_left > 0.0 {
                left / weight_left
            } else {
                0.0
            };
            let expected = demand.min(level * weight);
            left -= expected;
            weight_left -= weight;
            let acc = &mut self.tenants[t as usize];
            let granted = acc.win_granted as f64;
            acc.fair_granted += granted;
            acc.fair_expected += expected;
            acc.fair_demand += demand;
            acc.active_windows += 1;
            // Backlogged: asked clearly more than its share. The tolerance absorbs the work
            // still queued (or waiting out its Retry-After) when the window closes, which
            // always leaves the total demand a little above the capacity granted.
            if demand > 1.05 * expected + 1.0 {
                acc.backlogged_windows += 1;
            }
            let row = self.trace.tenants[t as usize].row as usize;
            row_window[row].0 += granted;
            row_window[row].1 += expected;
        }
        for (row, w) in self.rows.iter_mut().zip(row_window) {
            row.windows.push(w);
        }
        let touched = std::mem::take(&mut self.touched);
        for t in touched {
            let acc = &mut self.tenants[t as usize];
            acc.win_arrived = 0;
            acc.win_granted = 0;
            acc.win_start_queued = acc.queued_cost;
            acc.touched = false;
            if acc.queued_cost > 0 {
                acc.touched = true;
                self.touched.push(t);
            }
        }
    }

    fn finish(mut self, name: &'static str, wall: Duration) -> RunResult {
        let end = self.trace.duration_ns;
        for (t, acc) in self.tenants.iter_mut().enumerate() {
            if acc.starving_since != NONE {
                acc.max_starvation = acc.max_starvation.max(end - acc.starving_since);
            }
            let row = &mut self.rows[self.trace.tenants[t].row as usize];
            row.offered += acc.offered;
            row.granted += acc.granted;
            for (r, a) in row.refused.iter_mut().zip(acc.refused) {
                *r += a;
            }
            row.fair_granted += acc.fair_granted;
            row.fair_expected += acc.fair_expected;
            row.fair_demand += acc.fair_demand;
            row.backlogged_windows += u64::from(acc.backlogged_windows);
            row.active_windows += u64::from(acc.active_windows);
            row.max_starvation_ns = row.max_starvation_ns.max(acc.max_starvation);
        }
        let downstreams = self
            .scenario
            .downstreams
            .iter()
            .zip(self.downstreams)
            .map(|(spec, d)| DownstreamResult {
                name: spec.name.clone(),
                bound: spec.max_in_flight,
                in_flight_by_s: d.area_by_s.iter().map(|a| a / SEC as f64).collect(),
                limit_by_s: d.limit_by_s,
                granted: d.granted,
                failed: d.failed,
            })
            .collect();
        RunResult {
            name,
            rows: self.rows,
            bucket_ns: self.bucket_ns,
            window_ns: self.window_ns,
            wall,
            events: self.events,
            anomalies: self.anomalies,
            downstreams,
            estimates: if self.estimated {
                EstimateResult::from_ratios(self.estimate_ratios)
            } else {
                None
            },
        }
    }
}
