//! The grant-cycle workload, shared by the criterion bench (`benches/grants.rs`) and the quick
//! comparison (`examples/compare.rs`), so both time exactly the same code.
//!
//! A *cycle* is: enqueue one request for a tenant, take the next grant, complete it. Every tenant
//! starts with `backlog(threads)` queued requests, and each thread re-enqueues for the tenant it
//! was last granted, so every tenant stays backlogged and ready for the whole run (a tenant's
//! count never drops more than `threads` below its start).
//!
//! Four contenders implement [`Contender`]:
//! - `fairq`: the real engine through its Rust API (and `fairq_lean`, its features off; and
//!   `fairq_core`, the core with no feature plugged in, for instruction counts only).
//! - `floor`: the work no cycle can avoid: one `ArrayQueue` push and pop, a CAS-acquired
//!   in-flight permit and its release.
//! - `mutex_swrr`: `parking_lot::Mutex<(HashMap<u64, VecDeque<u64>>, Vec<SWRR state>)>` with
//!   nginx's O(n) smooth weighted round robin scan; one lock per call, as a gateway would call it.
//! - `firq_core`: crates.io `firq-core` 0.1.3 (DRR over sharded mutexes) through its own API, with
//!   the same CAS permit as `floor` for the in-flight bound it does not have.

#![allow(dead_code)] // each binary uses a different part of this module

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

/// Tenant counts the issue asks for.
pub const TENANTS: [usize; 4] = [1, 64, 1024, 16384];
/// Tenant weights are drawn from these.
pub const WEIGHTS: [u32; 4] = [1, 2, 4, 8];
/// Contender names, in report order.
pub const IMPLS: [&str; 5] = ["fairq", "fairq_lean", "floor", "mutex_swrr", "firq_core"];

/// Whether contenders built from now on get the hot-tenant backlog (see [`backlog`]).
static SHALLOW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets the backlog of the contenders built from now on: shallow (the hot-tenant cases) or the
/// default.
pub fn set_shallow(shallow: bool) {
    // Relaxed: set by the driving thread before it builds a contender.
    SHALLOW.store(shallow, Ordering::Relaxed);
}

/// Requests queued per tenant at the start: by default enough that no tenant runs dry while
/// `threads` callers each hold one of its requests between grant and re-enqueue. Shallow (the
/// hot-tenant cases): one, so a tenant has 2 queued when a caller, having enqueued, asks for a
/// grant; with two callers one of them often finds the only ready tenant held by the other.
pub fn backlog(threads: usize) -> usize {
    // Relaxed: see `set_shallow`.
    if SHALLOW.load(Ordering::Relaxed) {
        1
    } else {
        threads + 2
    }
}

/// The hot-tenant cases: one tenant; two tenants of weights 8 and 1.
pub fn hot_cases() -> [(&'static str, Vec<(u64, u32)>); 2] {
    [
        ("1 tenant", vec![(0x9E37_79B9_7F4A_7C15, 1)]),
        (
            "2 tenants 8:1",
            vec![(0x9E37_79B9_7F4A_7C15, 8), (0x2545_F491_4F6C_DD1D, 1)],
        ),
    ]
}

/// The tenant keys (never 0) and weights of a run: deterministic, so every contender and every
/// run sees the same tenants.
pub fn tenants(count: usize) -> Vec<(u64, u32)> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..count)
        .map(|i| {
            // xorshift64*: a fixed, well-spread sequence.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            let key = r | 1;
            let weight = WEIGHTS[((r >> 33) as usize + i) % WEIGHTS.len()];
            (key, weight)
        })
        .collect()
}

/// One implementation of the cycle. `Sync`: all threads share one instance.
pub trait Contender: Sync + Send + Sized {
    /// Builds the scheduler for `tenants` (key, weight) and `threads` callers, with every tenant
    /// holding `backlog(threads)` queued requests.
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self;
    /// One cycle: enqueue for `tenant` (a key), grant, complete. Returns the key of the tenant
    /// granted, which the caller enqueues for next. `now` is the caller's coarse monotonic clock
    /// (ns): like nginx's cached `ngx_current_msec`, read once per batch, not once per call.
    fn cycle(&self, tenant: u64, now: u64) -> u64;
}

// ------------------------------------------------------------------------------------ fairq

/// The real engine, sized so the benchmark's backlog fits, with the default features (the
/// fairness indicators on).
pub struct Fairq {
    engine: fairq::Engine,
}

/// The real engine with every feature off (the indicators included): the price of the
/// features is the difference between the two rows.
pub struct FairqLean(Fairq);

/// The scheduler core with no feature plugged in (`fairq::BareCore`): against `fairq_lean`, the
/// price of the seam's checks for features that are off. Not in [`IMPLS`]: only the instruction
/// counts (`benches/instructions.sh`) report it.
pub struct FairqCore {
    core: fairq::BareCore,
}

impl Contender for FairqCore {
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self {
        let core = fairq::BareCore::new(bench_config(tenants, threads, false)).expect("config");
        fill(
            tenants,
            threads,
            |key, weight| core.set_weight_key(key, weight),
            |r, now| core.enqueue_at(r, now),
        );
        FairqCore { core }
    }

    #[inline]
    fn cycle(&self, tenant: u64, now: u64) -> u64 {
        grant_cycle(
            tenant,
            now,
            |r, now| self.core.enqueue_at(r, now),
            |now| self.core.next_grant_at(now),
            |ticket, now| {
                self.core
                    .complete_at(ticket, fairq::Outcome::Admitted, None, now)
            },
        )
    }
}

impl Contender for FairqLean {
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self {
        FairqLean(Fairq::build(tenants, threads, false))
    }

    #[inline]
    fn cycle(&self, tenant: u64, now: u64) -> u64 {
        self.0.cycle(tenant, now)
    }
}

impl Contender for Fairq {
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self {
        Fairq::build(tenants, threads, true)
    }

    #[inline]
    fn cycle(&self, tenant: u64, now: u64) -> u64 {
        self.cycle_inner(tenant, now)
    }
}

impl Fairq {
    fn build(tenants: &[(u64, u32)], threads: usize, indicators: bool) -> Self {
        let engine =
            fairq::Engine::new(bench_config(tenants, threads, indicators)).expect("config");
        fill(
            tenants,
            threads,
            |key, weight| engine.set_weight_key(key, weight),
            |r, now| engine.enqueue_at(r, now),
        );
        Fairq { engine }
    }

    #[inline]
    fn cycle_inner(&self, tenant: u64, now: u64) -> u64 {
        grant_cycle(
            tenant,
            now,
            |r, now| self.engine.enqueue_at(r, now),
            |now| self.engine.next_grant_at(now),
            |ticket, now| {
                self.engine
                    .complete_at(ticket, fairq::Outcome::Admitted, None, now)
            },
        )
    }
}

/// The engine's config for `tenants` and `threads`: sized so the backlog fits.
fn bench_config(tenants: &[(u64, u32)], threads: usize, indicators: bool) -> fairq::Config {
    let backlog = backlog(threads);
    fairq::Config {
        indicators,
        enabled: true,
        // Twice the tenants: the open-addressed table keeps its probes short.
        max_tenants: (tenants.len() * 2) as u32,
        tenant_queue_capacity: (backlog + threads + 1) as u32,
        queue_capacity: (tenants.len() * (backlog + threads + 1)) as u32,
        max_in_flight: threads as u32,
        max_weight_classes: WEIGHTS.len() as u32,
        // Nothing may expire however long criterion keeps one engine busy.
        max_wait_ms: 24 * 3_600_000,
        ..fairq::Config::default()
    }
}

/// Sets the weights and queues `backlog(threads)` requests for every tenant.
fn fill(
    tenants: &[(u64, u32)],
    threads: usize,
    set_weight: impl Fn(fairq::TenantKey, u32) -> Result<(), fairq::Error>,
    enqueue: impl Fn(&fairq::Request, u64) -> Result<fairq::Enqueued, fairq::Error>,
) {
    use fairq::{Dimension, Enqueued, Request, TenantKey};
    for &(key, weight) in tenants {
        set_weight(TenantKey::from_hash(key), weight).expect("weight");
    }
    let now = fairq::now_ns();
    for _ in 0..backlog(threads) {
        for &(key, _) in tenants {
            let request = Request::new(TenantKey::from_hash(key), Dimension::User);
            let queued = enqueue(&request, now).expect("enqueue");
            assert!(matches!(queued, Enqueued::Queued { .. }), "{queued:?}");
        }
    }
}

/// One cycle through the given enqueue, grant and complete.
#[inline(always)]
fn grant_cycle(
    tenant: u64,
    now: u64,
    enqueue: impl Fn(&fairq::Request, u64) -> Result<fairq::Enqueued, fairq::Error>,
    next_grant: impl Fn(u64) -> fairq::NextGrant,
    complete: impl Fn(fairq::Ticket, u64) -> Result<fairq::Completion, fairq::Error>,
) -> u64 {
    use fairq::{NextGrant, Request, TenantKey};
    let request = Request::new(TenantKey::from_hash(tenant), fairq::Dimension::User);
    let queued = enqueue(&request, now);
    debug_assert!(matches!(queued, Ok(fairq::Enqueued::Queued { .. })));
    loop {
        match next_grant(now) {
            NextGrant::Granted(grant) => {
                let done = complete(grant.ticket, now);
                debug_assert!(done.is_ok());
                return grant.tenant.get();
            }
            // Another thread holds the tenant turn we need for a moment: try again.
            NextGrant::Empty | NextGrant::AtCapacity => std::hint::spin_loop(),
            NextGrant::Expired(e) => panic!("nothing expires in the bench: {e:?}"),
        }
    }
}

// ------------------------------------------------------------------------------------ floor

/// An in-flight permit count bounded by `max`, taken by CAS and released by `fetch_sub`.
pub struct Permits {
    count: CachePadded<AtomicU64>,
    max: u64,
}

impl Permits {
    pub fn new(max: usize) -> Self {
        Permits {
            count: CachePadded::new(AtomicU64::new(0)),
            max: max as u64,
        }
    }

    #[inline]
    pub fn acquire(&self) -> bool {
        let mut current = self.count.load(Ordering::Relaxed);
        loop {
            if current >= self.max {
                return false;
            }
            // Relaxed: a bound on a number; nothing is published through it.
            match self.count.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    #[inline]
    pub fn release(&self) {
        // Relaxed: see `acquire`.
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The unavoidable work of one cycle: queue push and pop, permit CAS and release.
pub struct Floor {
    queue: ArrayQueue<u64>,
    permits: Permits,
}

impl Contender for Floor {
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self {
        let backlog = backlog(threads);
        let queue = ArrayQueue::new(tenants.len() * backlog + threads);
        for _ in 0..backlog {
            for &(key, _) in tenants {
                queue.push(key).expect("sized for the backlog");
            }
        }
        Floor {
            queue,
            permits: Permits::new(threads),
        }
    }

    #[inline]
    fn cycle(&self, tenant: u64, _now: u64) -> u64 {
        let pushed = self.queue.push(tenant);
        debug_assert!(pushed.is_ok());
        while !self.permits.acquire() {
            std::hint::spin_loop();
        }
        let granted = self.queue.pop();
        self.permits.release();
        granted.unwrap_or(tenant)
    }
}

// ------------------------------------------------------------------------------------ mutex_swrr

/// One tenant in the SWRR scan.
struct SwrrEntry {
    key: u64,
    weight: i64,
    current: i64,
    queued: usize,
}

struct SwrrState {
    queues: HashMap<u64, VecDeque<u64>>,
    /// Tenant key -> index in `entries`.
    index: HashMap<u64, usize>,
    entries: Vec<SwrrEntry>,
    in_flight: usize,
    max_in_flight: usize,
}

/// The plain baseline: one mutex, nginx's SWRR scan over every backlogged tenant per pick.
pub struct MutexSwrr {
    state: parking_lot::Mutex<SwrrState>,
}

impl MutexSwrr {
    fn enqueue(&self, tenant: u64, item: u64) {
        let mut state = self.state.lock();
        let state = &mut *state;
        state.queues.entry(tenant).or_default().push_back(item);
        let i = state.index[&tenant];
        state.entries[i].queued += 1;
    }

    /// nginx `ngx_http_upstream_get_peer`: every ready peer gains its weight, the largest wins
    /// and pays the total.
    fn grant(&self) -> Option<(u64, u64)> {
        let mut state = self.state.lock();
        let state = &mut *state;
        if state.in_flight >= state.max_in_flight {
            return None;
        }
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        for (i, entry) in state.entries.iter_mut().enumerate() {
            if entry.queued == 0 {
                continue;
            }
            entry.current += entry.weight;
            total += entry.weight;
            if best.is_none_or(|(_, top)| entry.current > top) {
                best = Some((i, entry.current));
            }
        }
        let (best, _) = best?;
        let entry = &mut state.entries[best];
        entry.current -= total;
        entry.queued -= 1;
        let key = entry.key;
        let item = state.queues.get_mut(&key)?.pop_front()?;
        state.in_flight += 1;
        Some((key, item))
    }

    fn complete(&self) {
        self.state.lock().in_flight -= 1;
    }
}

impl Contender for MutexSwrr {
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self {
        let backlog = backlog(threads);
        let mut queues = HashMap::new();
        let mut index = HashMap::new();
        let mut entries = Vec::new();
        for (i, &(key, weight)) in tenants.iter().enumerate() {
            queues.insert(key, (0..backlog as u64).collect::<VecDeque<u64>>());
            index.insert(key, i);
            entries.push(SwrrEntry {
                key,
                weight: i64::from(weight),
                current: 0,
                queued: backlog,
            });
        }
        MutexSwrr {
            state: parking_lot::Mutex::new(SwrrState {
                queues,
                index,
                entries,
                in_flight: 0,
                max_in_flight: threads,
            }),
        }
    }

    #[inline]
    fn cycle(&self, tenant: u64, now: u64) -> u64 {
        self.enqueue(tenant, now);
        loop {
            if let Some((key, _item)) = self.grant() {
                self.complete();
                return key;
            }
            std::hint::spin_loop();
        }
    }
}

// ------------------------------------------------------------------------------------ firq_core

/// The nearest Rust peer, through its own API: enqueue a `Task`, `try_dequeue`, and a CAS permit
/// for the in-flight bound (firq-core has none; a caller would add one).
pub struct FirqCore {
    scheduler: firq_core::Scheduler<u64>,
    permits: Permits,
}

impl FirqCore {
    fn task(item: u64) -> firq_core::Task<u64> {
        firq_core::Task {
            payload: item,
            enqueue_ts: Instant::now(),
            deadline: None,
            priority: firq_core::Priority::Normal,
            cost: 1,
        }
    }
}

impl Contender for FirqCore {
    fn new(tenants: &[(u64, u32)], threads: usize) -> Self {
        use firq_core::{EnqueueResult, SchedulerConfig, TenantKey};
        let backlog = backlog(threads);
        let config = SchedulerConfig {
            shards: 8,
            max_global: tenants.len() * (backlog + threads + 1),
            max_per_tenant: backlog + threads + 1,
            quantum: 1,
            // DRR quantum = weight: firq-core's way of weighting a tenant.
            quantum_by_tenant: tenants
                .iter()
                .map(|&(key, weight)| (TenantKey::from(key), u64::from(weight)))
                .collect(),
            ..SchedulerConfig::default()
        };
        let scheduler = firq_core::Scheduler::new(config);
        for item in 0..backlog as u64 {
            for &(key, _) in tenants {
                let queued = scheduler.enqueue(TenantKey::from(key), Self::task(item));
                assert!(matches!(queued, EnqueueResult::Enqueued), "{queued:?}");
            }
        }
        FirqCore {
            scheduler,
            permits: Permits::new(threads),
        }
    }

    #[inline]
    fn cycle(&self, tenant: u64, now: u64) -> u64 {
        use firq_core::{DequeueResult, TenantKey};
        let queued = self
            .scheduler
            .enqueue(TenantKey::from(tenant), Self::task(now));
        debug_assert!(matches!(queued, firq_core::EnqueueResult::Enqueued));
        loop {
            if self.permits.acquire() {
                match self.scheduler.try_dequeue() {
                    DequeueResult::Task { tenant, .. } => {
                        self.permits.release();
                        return tenant.as_u64();
                    }
                    _ => self.permits.release(),
                }
            }
            std::hint::spin_loop();
        }
    }
}

// ------------------------------------------------------------------------------------ timing

/// Runs `cycles` cycles on each of `threads` threads sharing `contender`, all starting together at
/// a barrier, and returns the wall time from the first thread's start to the last thread's end.
/// Thread spawn and join are outside the timed span. The workers read the clock themselves: with
/// as many workers as cores (and real-time priority), a timing thread of its own may not run
/// until a worker has finished, and would then start the clock late.
///
/// Every thread passes the same `now`, read once before the run: a coarse clock, as a gateway
/// caches it per event-loop turn. With per-thread clocks one thread's enqueue could carry a later
/// `now` than another's grant, and fairq would rightly treat that entry as not ready yet.
pub fn run_timed<C: Contender>(
    contender: &C,
    tenants: &[(u64, u32)],
    threads: usize,
    cycles: u64,
) -> Duration {
    let now = fairq::now_ns();
    if threads == 1 {
        let start = Instant::now();
        drive(contender, tenants, 0, cycles, now);
        return start.elapsed();
    }
    let start_line = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let start_line = &start_line;
                scope.spawn(move || {
                    start_line.wait();
                    let start = Instant::now();
                    drive(contender, tenants, worker, cycles, now);
                    (start, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench worker panicked"))
            .collect()
    });
    let first_start = spans.iter().map(|s| s.0).min().expect("threads > 1");
    let last_end = spans.iter().map(|s| s.1).max().expect("threads > 1");
    last_end - first_start
}

/// One caller's loop: the first enqueue goes to a tenant picked by the worker index, every later
/// one to the tenant just granted.
#[inline(never)]
fn drive<C: Contender>(
    contender: &C,
    tenants: &[(u64, u32)],
    worker: usize,
    cycles: u64,
    now: u64,
) {
    let mut tenant = tenants[worker % tenants.len()].0;
    for _ in 0..cycles {
        tenant = contender.cycle(tenant, now);
    }
    std::hint::black_box(tenant);
}

/// A shared, built contender, ready to be timed repeatedly (criterion's `iter_custom` calls it).
pub struct Prepared<C> {
    pub contender: Arc<C>,
    pub tenants: Vec<(u64, u32)>,
    pub threads: usize,
}

impl<C: Contender> Prepared<C> {
    pub fn new(tenant_count: usize, threads: usize) -> Self {
        Self::with_tenants(tenants(tenant_count), threads)
    }

    /// A contender over the given (key, weight) tenants.
    pub fn with_tenants(tenants: Vec<(u64, u32)>, threads: usize) -> Self {
        let contender = Arc::new(C::new(&tenants, threads));
        Prepared {
            contender,
            tenants,
            threads,
        }
    }

    /// Times `total` cycles split evenly across the threads (at least one each).
    pub fn time(&self, total: u64) -> Duration {
        let per_thread = (total / self.threads as u64).max(1);
        run_timed(&*self.contender, &self.tenants, self.threads, per_thread)
    }

    /// Cycles actually run by `time(total)`.
    pub fn cycles_for(&self, total: u64) -> u64 {
        (total / self.threads as u64).max(1) * self.threads as u64
    }
}
