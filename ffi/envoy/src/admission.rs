//! One engine shared by every Envoy worker, and the hand-over of a grant to the worker that holds
//! the request.
//!
//! A request that cannot proceed at once waits on its own worker, paused. Whichever thread ends
//! its ticket in the engine (a worker whose request completed and took the next grants, the
//! deadline thread when the budget runs out) records the outcome in the request's [`Waiter`] and
//! wakes the owning worker through its [`Wake`] (Envoy's per-stream scheduler), which resumes or
//! refuses the request there.
//!
//! Exactly once: the engine decides who ends a queued ticket (`next_grant`, `expire` and
//! `withdraw` race, one wins), and the winner owns the reference the engine held. The waiter's
//! state decides who acts on that end. The owner leaving (client gone) moves `QUEUED` to `GONE`
//! and then withdraws the ticket, which ends it only while it is queued; if a grant was handed
//! out first, the thread that took it sees `GONE` and gives the permit back itself. So a grant is
//! either resumed or completed, never both and never neither.

use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::Duration;

// The hand-over's atomics are loom's in a loom build, so the models below permute them (the
// reference counts stay std's: loom's Arc has no Weak).
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use fairq::{Engine, Enqueued, NextGrant, Outcome, Reason, Refusal, Request, Ticket};

/// Wakes the worker that owns a request. Called from any thread, at most once per waiter.
pub trait Wake: Send + Sync + 'static {
    fn wake(&self);
}

const QUEUED: u8 = 0;
const GRANTED: u8 = 1;
const REFUSED: u8 = 2;
const GONE: u8 = 3;

/// What a request learned when its ticket ended: written by the thread that ended it before the
/// state leaves `QUEUED`, read by the owner after it sees the new state.
pub struct Waiter<W> {
    state: AtomicU8,
    position: AtomicU32,
    reason: AtomicU32,
    waited_ns: AtomicU64,
    estimated_wait_ns: AtomicU64,
    wake: W,
}

/// How a request's ticket ended, as its owner reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Queued,
    Granted(Info),
    Refused(Reason, Info),
}

/// Where the request stood and how long it waited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    pub position: u32,
    pub waited_ns: u64,
    pub estimated_wait_ns: u64,
}

impl<W: Wake> Waiter<W> {
    fn new(wake: W) -> Waiter<W> {
        Waiter {
            state: AtomicU8::new(QUEUED),
            position: AtomicU32::new(0),
            reason: AtomicU32::new(0),
            waited_ns: AtomicU64::new(0),
            estimated_wait_ns: AtomicU64::new(0),
            wake,
        }
    }

    fn info(&self) -> Info {
        // Relaxed: ordered by the Acquire load of `state` in `ended`, which follows the
        // Release CAS that published these.
        Info {
            position: self.position.load(Ordering::Relaxed),
            waited_ns: self.waited_ns.load(Ordering::Relaxed),
            estimated_wait_ns: self.estimated_wait_ns.load(Ordering::Relaxed),
        }
    }

    /// The outcome as the owner sees it now.
    pub fn ended(&self) -> Ended {
        // Acquire: pairs with the Release CAS in `settle`, so the fields it published are seen.
        match self.state.load(Ordering::Acquire) {
            GRANTED => Ended::Granted(self.info()),
            REFUSED => {
                let reason = Reason::from_code(self.reason.load(Ordering::Relaxed))
                    .unwrap_or(Reason::DeadlineExceeded);
                Ended::Refused(reason, self.info())
            }
            _ => Ended::Queued,
        }
    }

    /// Publishes an outcome. False when the owner left first (the caller then cleans up).
    fn settle(&self, to: u8, info: Info, reason: Option<Reason>) -> bool {
        // Relaxed stores: published by the Release half of the CAS below.
        self.position.store(info.position, Ordering::Relaxed);
        self.waited_ns.store(info.waited_ns, Ordering::Relaxed);
        if info.estimated_wait_ns != 0 {
            self.estimated_wait_ns
                .store(info.estimated_wait_ns, Ordering::Relaxed);
        }
        if let Some(r) = reason {
            self.reason.store(r as u32, Ordering::Relaxed);
        }
        #[cfg(fairq_broken)]
        if broken::IGNORE_GONE.with(|b| b.get()) {
            self.state.store(to, Ordering::Release);
            return true;
        }
        // AcqRel: Release publishes the fields to the owner; Acquire orders this thread after
        // the owner's move to GONE when the CAS fails.
        self.state
            .compare_exchange(QUEUED, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// A queued ticket's deadline, kept by the deadline thread.
struct Deadline<W> {
    at_ns: u64,
    ticket: Ticket,
    waiter: Weak<Waiter<W>>,
}

impl<W> PartialEq for Deadline<W> {
    fn eq(&self, other: &Self) -> bool {
        self.at_ns == other.at_ns
    }
}
impl<W> Eq for Deadline<W> {}
impl<W> PartialOrd for Deadline<W> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<W> Ord for Deadline<W> {
    /// Earliest first out of a max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at_ns.cmp(&self.at_ns)
    }
}

/// What `admit` decided.
pub enum Admission<W> {
    /// Proceed now; hold the ticket until the stream ends.
    Now(Ticket),
    /// Wait: the waiter's `wake` runs once the ticket ends.
    Wait(Ticket, Arc<Waiter<W>>),
    /// Answer with a refusal now, for this reason.
    Refused(Reason, Info),
}

/// Counts the module keeps beside the engine's.
#[derive(Default)]
pub struct Counts {
    /// Grants whose request had gone (client left in the same instant): completed at once.
    pub abandoned_grants: AtomicU64,
    /// Queued requests whose client went away.
    pub client_cancels: AtomicU64,
    /// Tickets the deadline thread expired (all permits busy at the deadline).
    pub budget_timeouts: AtomicU64,
}

/// The engine and its deadline thread; shared by every worker.
pub struct Queue<W: Wake> {
    pub engine: Engine,
    pub counts: Counts,
    budget_ns: u64,
    deadlines: mpsc::Sender<Deadline<W>>,
    ticks: bool,
    /// The monotonic clock in ns; a fixed one in the loom models, so each run is repeatable.
    clock: fn() -> u64,
}

impl<W: Wake> Queue<W> {
    /// Builds the queue and starts its deadline thread, which ends with the queue.
    pub fn new(engine: Engine, ticks: bool) -> std::io::Result<Arc<Queue<W>>> {
        let (queue, rx) = Queue::without_deadlines(engine, ticks, fairq::now_ns);
        let weak = Arc::downgrade(&queue);
        std::thread::Builder::new()
            .name("fairq-deadlines".into())
            .spawn(move || deadline_thread(weak, rx))?;
        Ok(queue)
    }

    /// The queue alone; the caller runs (or, in a model, stands in for) the deadline thread.
    fn without_deadlines(
        engine: Engine,
        ticks: bool,
        clock: fn() -> u64,
    ) -> (Arc<Queue<W>>, mpsc::Receiver<Deadline<W>>) {
        let (tx, rx) = mpsc::channel();
        let queue = Arc::new(Queue {
            budget_ns: engine.config().max_wait_ms.saturating_mul(1_000_000),
            engine,
            counts: Counts::default(),
            deadlines: tx,
            ticks,
            clock,
        });
        (queue, rx)
    }

    /// Enqueues a request and takes the grants that are due. `wake` is made only for a request
    /// that has a tenant (one without is refused at once).
    pub fn admit(&self, mut request: Request, wake: impl FnOnce() -> W) -> Admission<W> {
        request.timeout_ns = self.budget_ns;
        let refused = |r: Refusal| {
            let info = Info {
                position: r.position,
                waited_ns: r.waited_ns,
                estimated_wait_ns: 0,
            };
            Admission::Refused(r.reason, info)
        };
        if request.tenant.is_none() {
            return match self.engine.enqueue_at(&request, (self.clock)()) {
                Ok(Enqueued::Refused(r)) => refused(r),
                // The engine refuses a request without a tenant; anything else is a bug there.
                _ => Admission::Refused(Reason::NoTenant, Info::default()),
            };
        }
        let waiter = Arc::new(Waiter::new(wake()));
        let raw = Arc::into_raw(waiter.clone());
        request.user_data = raw as u64;
        let enqueued_at = (self.clock)();
        match self.engine.enqueue_at(&request, enqueued_at) {
            Ok(Enqueued::Queued {
                ticket,
                estimated_wait_ns,
                ..
            }) => {
                // Relaxed: read by this thread, or published with the state by `settle`.
                waiter
                    .estimated_wait_ns
                    .store(estimated_wait_ns, Ordering::Relaxed);
                self.pump(Some(&waiter));
                match waiter.ended() {
                    Ended::Granted(_) => Admission::Now(ticket),
                    Ended::Refused(reason, info) => Admission::Refused(reason, info),
                    Ended::Queued => {
                        // The deadline thread only reads a copy; a send fails only when that
                        // thread is gone, and then the engine's next grant reports the expiry.
                        let _ = self.deadlines.send(Deadline {
                            at_ns: enqueued_at.saturating_add(self.budget_ns),
                            ticket,
                            waiter: Arc::downgrade(&waiter),
                        });
                        Admission::Wait(ticket, waiter)
                    }
                }
            }
            Ok(Enqueued::Refused(r)) => {
                // SAFETY: `raw` came from `Arc::into_raw` above and the engine did not keep it.
                drop(unsafe { Arc::from_raw(raw) });
                refused(r)
            }
            Err(_) => {
                // SAFETY: as above; an enqueue error keeps nothing.
                drop(unsafe { Arc::from_raw(raw) });
                Admission::Refused(Reason::NotQueueable, Info::default())
            }
        }
    }

    /// Takes every grant (and expiry at a queue's head) the engine has ready and hands each to
    /// its owner. `me` is the caller's own waiter, which is not woken (the caller reads it).
    pub fn pump(&self, me: Option<&Arc<Waiter<W>>>) {
        loop {
            let now = (self.clock)();
            let (ticket, user_data, granted, info, reason) = match self.engine.next_grant_at(now) {
                NextGrant::Granted(g) => (
                    g.ticket,
                    g.user_data,
                    true,
                    Info {
                        position: g.position,
                        waited_ns: g.waited_ns,
                        estimated_wait_ns: g.estimated_wait_ns,
                    },
                    None,
                ),
                NextGrant::Expired(e) => (
                    e.ticket,
                    e.user_data,
                    false,
                    Info {
                        position: e.refusal.position,
                        waited_ns: e.refusal.waited_ns,
                        estimated_wait_ns: 0,
                    },
                    Some(e.refusal.reason),
                ),
                NextGrant::Empty | NextGrant::AtCapacity => return,
            };
            // SAFETY: every queued ticket's user_data is an `Arc::into_raw` from `admit`, and the
            // engine hands each ticket's end to exactly one caller: this one.
            let waiter = unsafe { Arc::from_raw(user_data as *const Waiter<W>) };
            let to = if granted { GRANTED } else { REFUSED };
            if waiter.settle(to, info, reason) {
                if !me.is_some_and(|m| Arc::ptr_eq(m, &waiter)) {
                    waiter.wake.wake();
                }
            } else if granted {
                // The owner left while this grant was being taken: give the permit back.
                let _ = self
                    .engine
                    .complete_at(ticket, Outcome::Admitted, None, now);
                // Relaxed: a statistic.
                self.counts.abandoned_grants.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The owner of a waiting request leaves (client gone). Ends its ticket once, whatever state
    /// the engine has it in, and hands on a freed permit.
    pub fn leave(&self, ticket: Ticket, waiter: &Arc<Waiter<W>>) {
        // AcqRel: Release orders this move before the ender's failed CAS reads it; Acquire
        // pairs with a `settle` that won, so its outcome is seen below.
        match waiter
            .state
            .compare_exchange(QUEUED, GONE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                // Relaxed: a statistic.
                self.counts.client_cancels.fetch_add(1, Ordering::Relaxed);
                // Withdraw, not cancel: a grant already handed out to another thread (which
                // has not settled it yet) is that thread's to end; it will see GONE.
                if self.engine.withdraw_at(ticket, (self.clock)()).is_ok() {
                    // Ended while queued, so no other thread took the engine's reference.
                    // SAFETY: the pointer is the one `admit` gave the engine; the ticket ended
                    // queued, so neither a grant nor an expiry can hand it to anyone else.
                    unsafe { Arc::decrement_strong_count(Arc::as_ptr(waiter)) };
                }
            }
            Err(GRANTED) => {
                // Granted but never resumed: the grant is counted; give the permit back.
                self.finish(ticket, None);
                // Relaxed: a statistic.
                self.counts.abandoned_grants.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {} // refused: the ticket ended already
        }
    }

    /// A request that proceeded ends: its permit goes back (with its downstream's verdict when
    /// shedding is on) and the next grants go out.
    pub fn finish(&self, ticket: Ticket, downstream_ok: Option<(u32, bool)>) {
        let now = (self.clock)();
        if let Some((pool, ok)) = downstream_ok {
            let _ = self.engine.report_downstream_at(pool, ok, now);
        }
        let _ = self
            .engine
            .complete_at(ticket, Outcome::Admitted, None, now);
        self.pump(None);
    }

    /// The deadline thread's expiry of a ticket still queued at its deadline.
    fn expire(&self, ticket: Ticket, waiter: &Arc<Waiter<W>>) {
        if waiter.ended() != Ended::Queued {
            return;
        }
        let Ok(refusal) = self.engine.expire_at(ticket, (self.clock)()) else {
            return; // granted, cancelled or expired by another thread first
        };
        // Relaxed: a statistic.
        self.counts.budget_timeouts.fetch_add(1, Ordering::Relaxed);
        let info = Info {
            position: refusal.position,
            waited_ns: refusal.waited_ns,
            estimated_wait_ns: 0,
        };
        if waiter.settle(REFUSED, info, Some(refusal.reason)) {
            waiter.wake.wake();
        }
        // This thread ended the ticket: release the engine's reference.
        // SAFETY: as in `leave`; the engine gave this ticket's end to this call only.
        unsafe { Arc::decrement_strong_count(Arc::as_ptr(waiter)) };
    }
}

/// Expires tickets at their deadline while every permit is busy (then no grant would report
/// it), wakes parked tenants, and runs the engine's tick every second when a control needs it.
fn deadline_thread<W: Wake>(queue: Weak<Queue<W>>, rx: mpsc::Receiver<Deadline<W>>) {
    let mut heap: BinaryHeap<Deadline<W>> = BinaryHeap::new();
    let mut next_tick = fairq::now_ns();
    loop {
        let now = fairq::now_ns();
        let Some(q) = queue.upgrade() else { return };
        let mut wake_at = now + 50_000_000;
        if let Some(d) = heap.peek() {
            wake_at = wake_at.min(d.at_ns);
        }
        if let Some(at) = q.engine.next_wakeup_ns() {
            wake_at = wake_at.min(at);
        }
        if q.ticks {
            wake_at = wake_at.min(next_tick);
        }
        drop(q);
        let wait = Duration::from_nanos(wake_at.saturating_sub(now));
        match rx.recv_timeout(wait) {
            Ok(d) => {
                heap.push(d);
                heap.extend(rx.try_iter());
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(q) = queue.upgrade() else { return };
        let now = fairq::now_ns();
        while heap.peek().is_some_and(|d| d.at_ns <= now) {
            let d = heap.pop().expect("peeked");
            if let Some(w) = d.waiter.upgrade() {
                q.expire(d.ticket, &w);
            }
        }
        q.pump(None);
        if q.ticks && now >= next_tick {
            let _ = q.engine.tick();
            next_tick = now + 1_000_000_000;
        }
        // Requests served before their deadline leave entries behind: drop them once they
        // outnumber what can be queued, so memory stays bounded by the queue's capacity.
        let cap = q.engine.config().queue_capacity as usize + 1024;
        if heap.len() > 2 * cap {
            heap.retain(|d| d.waiter.strong_count() > 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairq::{Config, Dimension, TenantKey};
    use std::sync::atomic::AtomicUsize;

    #[derive(Default, Clone)]
    struct Bell(Arc<AtomicUsize>);
    impl Wake for Bell {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn queue(max_in_flight: u32, max_wait_ms: u64) -> Arc<Queue<Bell>> {
        let engine = Engine::new(Config {
            enabled: true,
            max_in_flight,
            max_wait_ms,
            ..Config::default()
        })
        .unwrap();
        Queue::new(engine, false).unwrap()
    }

    fn req(tenant: &str) -> Request {
        Request::new(TenantKey::from_raw(tenant.as_bytes()), Dimension::User)
    }

    #[test]
    fn a_freed_permit_wakes_the_next_waiter_once() {
        let q = queue(1, 10_000);
        let Admission::Now(first) = q.admit(req("a"), Bell::default) else {
            panic!("first is admitted at once")
        };
        let bell = Bell::default();
        let Admission::Wait(_, w) = q.admit(req("b"), || bell.clone()) else {
            panic!("second waits")
        };
        assert_eq!(w.ended(), Ended::Queued);
        q.finish(first, None);
        assert!(matches!(w.ended(), Ended::Granted(_)));
        assert_eq!(bell.0.load(Ordering::SeqCst), 1);
        assert_eq!(q.engine.stats().in_flight, 1);
    }

    #[test]
    fn leaving_while_queued_cancels_and_frees_nothing_twice() {
        let q = queue(1, 10_000);
        let Admission::Now(first) = q.admit(req("a"), Bell::default) else {
            panic!()
        };
        let Admission::Wait(t, w) = q.admit(req("b"), Bell::default) else {
            panic!()
        };
        q.leave(t, &w);
        assert_eq!(
            Arc::strong_count(&w),
            1,
            "the engine's reference is released"
        );
        assert_eq!(q.engine.stats().queued, 0);
        q.finish(first, None);
        assert_eq!(q.engine.stats().in_flight, 0);
        assert_eq!(q.counts.client_cancels.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn leaving_after_a_grant_landed_gives_the_permit_back() {
        let q = queue(1, 10_000);
        let Admission::Now(first) = q.admit(req("a"), Bell::default) else {
            panic!()
        };
        let Admission::Wait(t, w) = q.admit(req("b"), Bell::default) else {
            panic!()
        };
        q.finish(first, None); // grants b, which never resumes
        q.leave(t, &w);
        assert_eq!(q.engine.stats().in_flight, 0);
        assert_eq!(q.counts.abandoned_grants.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_waiter_past_its_budget_is_refused_by_the_deadline_thread() {
        let q = queue(1, 50);
        let Admission::Now(first) = q.admit(req("a"), Bell::default) else {
            panic!()
        };
        let bell = Bell::default();
        let Admission::Wait(_, w) = q.admit(req("b"), || bell.clone()) else {
            panic!()
        };
        let started = std::time::Instant::now();
        while w.ended() == Ended::Queued && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(matches!(
            w.ended(),
            Ended::Refused(Reason::DeadlineExceeded, _)
        ));
        assert_eq!(bell.0.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&w), 1);
        q.finish(first, None);
        assert_eq!(q.engine.stats().in_flight, 0);
    }

    #[test]
    fn no_tenant_is_refused_without_a_waiter() {
        let q = queue(1, 1000);
        let mut r = req("a");
        r.tenant = None;
        let made = std::cell::Cell::new(false);
        let Admission::Refused(reason, info) = q.admit(r, || {
            made.set(true);
            Bell::default()
        }) else {
            panic!()
        };
        assert_eq!(reason, Reason::NoTenant);
        assert_eq!(info, Info::default());
        assert!(!made.get());
    }

    /// Many threads admit, leave at random moments and finish: every ticket ends once, no
    /// permit leaks and every waiter is released.
    #[test]
    fn racing_owners_and_granters_lose_nothing() {
        let q = queue(4, 20);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..3000u32 {
                        let tenant = format!("t{}", (i + t) % 7);
                        match q.admit(req(&tenant), Bell::default) {
                            Admission::Now(ticket) => held.push(ticket),
                            Admission::Wait(ticket, w) => {
                                // Waiting while holding a permit could hold the last one.
                                for t in held.drain(..) {
                                    q.finish(t, None);
                                }
                                if i % 3 == 0 {
                                    q.leave(ticket, &w);
                                } else {
                                    loop {
                                        match w.ended() {
                                            Ended::Queued => std::thread::yield_now(),
                                            Ended::Granted(_) => {
                                                held.push(ticket);
                                                break;
                                            }
                                            Ended::Refused(..) => break,
                                        }
                                    }
                                }
                            }
                            Admission::Refused(..) => {}
                        }
                        if held.len() > 1 || i % 5 == 0 {
                            for t in held.drain(..) {
                                q.finish(t, None);
                            }
                        }
                    }
                    for t in held {
                        q.finish(t, None);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        q.pump(None);
        let s = q.engine.stats();
        assert_eq!(s.in_flight, 0, "{s:?}");
        assert_eq!(s.queued, 0, "{s:?}");
    }
}

/// A deliberately broken hand-over, compiled only with `--cfg fairq_broken`: each loom model
/// below has a twin that switches it on and expects the model to catch it.
#[cfg(fairq_broken)]
mod broken {
    thread_local! {
        /// `settle` overwrites the state instead of a CAS from QUEUED, so it does not see that
        /// the owner left.
        pub static IGNORE_GONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
}

/// Loom models of the hand-over: the engine's real code (its atomics are loom's too) with the
/// threads that can end a waiting request's ticket racing each other.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use fairq::{Config, Dimension, TenantKey};
    use loom::sync::atomic::AtomicUsize;

    /// Runs `f` under loom with the bounds the engine's own models use (the preemption bound
    /// from LOOM_MAX_PREEMPTIONS, else 2; room for the engine's few hundred atomics a run) and
    /// prints how many executions it explored.
    fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = runs.clone();
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound.get_or_insert(2);
        if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
            builder.max_branches = 100_000;
        }
        let started = std::time::Instant::now();
        builder.check(move || {
            // std atomic, outside the model.
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            f();
        });
        println!(
            "loom model {name}: {} executions in {:.2?}",
            runs.load(std::sync::atomic::Ordering::Relaxed),
            started.elapsed()
        );
    }

    struct Bell(Arc<AtomicUsize>);
    impl Wake for Bell {
        fn wake(&self) {
            // SeqCst: read after the threads are joined; any ordering would do.
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn queue() -> Arc<Queue<Bell>> {
        let engine = Engine::new(Config {
            enabled: true,
            max_tenants: 2,
            tenant_queue_capacity: 2,
            queue_capacity: 4,
            max_in_flight: 1,
            max_weight_classes: 2,
            tenant_idle_ms: 0,
            ..Config::default()
        })
        .unwrap();
        Queue::without_deadlines(engine, false, || 1_000).0
    }

    fn req(hash: u64) -> Request {
        Request::new(TenantKey::from_hash(hash), Dimension::User)
    }

    /// One permit, held by A; B waits. Returns A's ticket, B's ticket and waiter, B's bell.
    fn setup(q: &Queue<Bell>) -> (Ticket, Ticket, Arc<Waiter<Bell>>, Arc<AtomicUsize>) {
        let Admission::Now(a) = q.admit(req(1), || Bell(Arc::new(AtomicUsize::new(0)))) else {
            panic!("A is admitted at once")
        };
        let rings = Arc::new(AtomicUsize::new(0));
        let bell = rings.clone();
        let Admission::Wait(b, w) = q.admit(req(u64::MAX), move || Bell(bell)) else {
            panic!("B waits")
        };
        (a, b, w, rings)
    }

    /// After the race: nothing held, B's ticket ended once, the engine's reference released.
    fn books(q: &Queue<Bell>, w: &Arc<Waiter<Bell>>, rings: &AtomicUsize) {
        let s = q.engine.stats();
        assert_eq!(s.in_flight, 0, "a permit was left out: {s:?}");
        assert_eq!(s.queued, 0, "a request was left queued: {s:?}");
        // B's ticket ended once: granted (and completed), cancelled or expired.
        let b_ends = (s.completed - 1) + s.cancelled + s.expired;
        assert_eq!(b_ends, 1, "B's ticket ended {b_ends} times: {s:?}");
        assert_eq!(
            Arc::strong_count(w),
            1,
            "the engine's reference to B's waiter leaked: {s:?} abandoned {} cancels {} timeouts {} state {:?}",
            q.counts.abandoned_grants.load(Ordering::SeqCst),
            q.counts.client_cancels.load(Ordering::SeqCst),
            q.counts.budget_timeouts.load(Ordering::SeqCst),
            w.ended()
        );
        assert!(rings.load(Ordering::SeqCst) <= 1, "B was woken twice");
    }

    /// A's end grants B while B's client leaves.
    fn grant_races_leave() {
        model("hand-over: grant races leave", || {
            let q = queue();
            let (a, b, w, rings) = setup(&q);
            let granter = {
                let q = q.clone();
                loom::thread::spawn(move || q.finish(a, None))
            };
            q.leave(b, &w);
            granter.join().unwrap();
            books(&q, &w, &rings);
            // The owner left, so it never resumes: a wake-up may still ring (it came first),
            // but the grant was given back either way.
            assert_eq!(q.engine.stats().completed + q.engine.stats().cancelled, 2);
        });
    }

    /// The deadline thread expires B while A's end grants it and B's client leaves.
    fn expiry_races_grant_and_leave() {
        model("hand-over: expiry races grant and leave", || {
            let q = queue();
            let (a, b, w, rings) = setup(&q);
            let granter = {
                let q = q.clone();
                loom::thread::spawn(move || q.finish(a, None))
            };
            let deadline = {
                let (q, w) = (q.clone(), w.clone());
                loom::thread::spawn(move || q.expire(b, &w))
            };
            q.leave(b, &w);
            granter.join().unwrap();
            deadline.join().unwrap();
            books(&q, &w, &rings);
        });
    }

    /// A's end grants B while B's owner is still on its worker: exactly one wake-up, and the
    /// owner then finds the grant and ends it once.
    fn grant_wakes_the_owner_once() {
        model("hand-over: a grant wakes its owner once", || {
            let q = queue();
            let (a, b, w, rings) = setup(&q);
            let granter = {
                let q = q.clone();
                loom::thread::spawn(move || q.finish(a, None))
            };
            // The owner's worker: resumes when it sees the grant, else leaves.
            let resumed = matches!(w.ended(), Ended::Granted(_));
            if resumed {
                q.finish(b, None);
            }
            granter.join().unwrap();
            if !resumed {
                match w.ended() {
                    Ended::Granted(_) => q.finish(b, None),
                    _ => q.leave(b, &w),
                }
            }
            assert_eq!(
                rings.load(Ordering::SeqCst),
                1,
                "B was granted but not woken once"
            );
            books(&q, &w, &rings);
        });
    }

    #[test]
    fn handover_grant_races_leave() {
        grant_races_leave();
    }

    #[test]
    fn handover_expiry_races_grant_and_leave() {
        expiry_races_grant_and_leave();
    }

    #[test]
    fn handover_grant_wakes_the_owner_once() {
        grant_wakes_the_owner_once();
    }

    /// Without the CAS the granter wakes an owner that left and never gives the permit back.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "a permit was left out")]
    fn broken_handover_ignoring_a_gone_owner_is_caught() {
        broken::IGNORE_GONE.with(|b| b.set(true));
        grant_races_leave();
    }
}
