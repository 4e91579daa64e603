//! The dispatcher: one task per layer takes grants from the engine and wakes the requests they
//! belong to. The waiting requests, and the permits the granted ones hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fairq::{Completion, Engine, Error, Grant, NextGrant, Outcome, Refusal, Ticket};
use tokio::sync::{oneshot, Notify};

use crate::{Limiter, TenantFn};

type EventSender = oneshot::Sender<Event>;

/// What the dispatcher tells a waiting request.
pub(crate) enum Event {
    /// Its turn: it holds a permit.
    Granted(Grant, Permit),
    /// Its budget ran out while it waited (`deadline_exceeded`).
    Refused(Refusal),
}

/// What every service, request and permit of one layer share.
pub(crate) struct Shared {
    pub(crate) engine: Arc<Engine>,
    pub(crate) tenant: Arc<TenantFn>,
    pub(crate) limiter: Option<Arc<dyn Limiter>>,
    pub(crate) metrics_path: Option<String>,
    pub(crate) timeout: Option<Duration>,
    /// `min(timeout, max_wait_ms)`: how long a request may wait.
    pub(crate) budget: Duration,
    /// Waiting requests by id (the engine's `user_data`): the grant's way back to its request.
    waiters: Mutex<HashMap<u64, EventSender>>,
    next_id: AtomicU64,
    /// Wakes the dispatcher: a request was queued, a permit came back, or the layer is gone.
    /// A `notify_one` with no task waiting is stored, so no wake-up is lost between the
    /// dispatcher's last `next_grant` and its next wait.
    wake: Arc<Notify>,
    /// Whether a dispatcher task runs. Reset when the task ends, also when its runtime shuts
    /// down and drops it, so a layer used on a later runtime starts a new one there.
    started: Arc<AtomicBool>,
}

impl Shared {
    pub(crate) fn new(
        engine: Arc<Engine>,
        tenant: Arc<TenantFn>,
        limiter: Option<Arc<dyn Limiter>>,
        metrics_path: Option<String>,
        timeout: Option<Duration>,
        budget: Duration,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            engine,
            tenant,
            limiter,
            metrics_path,
            timeout,
            budget,
            waiters: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            wake: Arc::new(Notify::new()),
            started: Arc::new(AtomicBool::new(false)),
        })
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiters().len()
    }

    fn waiters(&self) -> MutexGuard<'_, HashMap<u64, EventSender>> {
        // The map is consistent after every statement that holds the lock (no user code runs
        // under it), so a panic elsewhere while it was held leaves nothing half-done.
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns the dispatcher on the current Tokio runtime, once.
    pub(crate) fn ensure_dispatcher(self: &Arc<Self>) {
        // Relaxed is enough: only the compare_exchange winner spawns, and the task needs nothing
        // published by it (it reads `Shared` through its own Weak).
        if self.started.load(Ordering::Relaxed)
            || self
                .started
                .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let running = Running(self.started.clone());
        tokio::spawn(dispatcher(Arc::downgrade(self), self.wake.clone(), running));
    }

    /// Takes every grant the engine has now and hands each to its request.
    fn drain(self: &Arc<Self>) {
        loop {
            match self.engine.next_grant() {
                NextGrant::Granted(grant) => {
                    let permit = Permit {
                        shared: self.clone(),
                        ticket: Some(grant.ticket),
                        admitted: false,
                    };
                    let waiter = self.waiters().remove(&grant.user_data);
                    if let Some(tx) = waiter {
                        // A receiver dropped meanwhile hands the event back, and the permit in
                        // it cancels the ticket as it drops.
                        let _ = tx.send(Event::Granted(grant, permit));
                    }
                    // No waiter: the request went away; dropping the permit cancels it.
                }
                NextGrant::Expired(expired) => {
                    let waiter = self.waiters().remove(&expired.user_data);
                    if let Some(tx) = waiter {
                        let _ = tx.send(Event::Refused(expired.refusal));
                    }
                }
                NextGrant::Empty | NextGrant::AtCapacity => return,
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The dispatcher holds only a Weak: wake it so it sees the layer is gone and returns.
        self.wake.notify_one();
    }
}

/// Clears `Shared::started` when the dispatcher task ends or is dropped.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        // Relaxed: see `ensure_dispatcher`.
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The dispatcher task: drains grants, then sleeps until woken or until the engine's next
/// parked tenant becomes ready. It ends when the layer and every request of it are gone.
async fn dispatcher(shared: Weak<Shared>, wake: Arc<Notify>, _running: Running) {
    loop {
        let wakeup = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            shared.drain();
            shared.engine.next_wakeup_ns()
        };
        match wakeup {
            None => wake.notified().await,
            Some(at) => {
                let delay = Duration::from_nanos(at.saturating_sub(fairq::now_ns()));
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// A request's place in the waiters map, from before its enqueue until its grant is taken or its
/// ticket ends. Dropping it (the client went away) cancels a ticket still queued.
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    id: u64,
    ticket: Option<Ticket>,
}

impl Waiter {
    /// Registers a new request: the dispatcher may grant it as soon as it is enqueued.
    pub(crate) fn register(shared: Arc<Shared>) -> (Waiter, oneshot::Receiver<Event>) {
        // Relaxed: the ids need only be distinct.
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        shared.waiters().insert(id, tx);
        let waiter = Waiter {
            shared,
            id,
            ticket: None,
        };
        (waiter, rx)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn queued(&mut self, ticket: Ticket) {
        self.ticket = Some(ticket);
    }

    /// Before a granted ticket goes back to its queue: a fresh channel for its next grant.
    pub(crate) fn requeue(&mut self) -> oneshot::Receiver<Event> {
        let (tx, rx) = oneshot::channel();
        self.shared.waiters().insert(self.id, tx);
        rx
    }

    /// The ticket ended without a grant (its refusal is being answered): nothing to cancel.
    pub(crate) fn ended(&mut self) {
        self.shared.waiters().remove(&self.id);
        self.ticket = None;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let registered = self.shared.waiters().remove(&self.id).is_some();
        if let (true, Some(ticket)) = (registered, self.ticket) {
            // Still queued (or granted a moment ago, the grant not yet handed over: then the
            // dispatcher finds no waiter and cancels too; one of the two gets StaleTicket).
            let _ = self.shared.engine.cancel(ticket);
            self.shared.wake();
        }
    }
}

/// One in-flight permit. It goes back exactly once: completed when the admitted request's
/// response ends, requeued when the limiter still refuses, cancelled if dropped before admission.
pub(crate) struct Permit {
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    admitted: bool,
}

impl Permit {
    /// The request runs: from now on, dropping the permit completes it.
    pub(crate) fn admit(&mut self) {
        self.admitted = true;
    }

    /// The limiter still refuses: the ticket goes back to its queue, or ends refused.
    pub(crate) fn requeue(&mut self, retry_after_ns: u64) -> Result<Completion, Error> {
        let ticket = self.ticket.take().ok_or(Error::TicketState)?;
        let outcome = Outcome::StillRefused { retry_after_ns };
        let result = self.shared.engine.complete(ticket, outcome, None);
        self.shared.wake();
        result
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        // Errors mean the ticket already ended: nothing is held.
        if self.admitted {
            let _ = self.shared.engine.complete(ticket, Outcome::Admitted, None);
        } else {
            let _ = self.shared.engine.cancel(ticket);
        }
        self.shared.wake();
    }
}
