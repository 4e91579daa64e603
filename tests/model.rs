//! Property test against a reference model: random sequences of enqueue, grant, complete
//! (admitted or still refused), cancel, clock advance and weight change are applied to the engine
//! and to a plain single-threaded model of the same semantics. The model decides every refusal
//! reason and position, which tickets may be granted or expired (the first live entry of its
//! tenant, ready, within budget), when the engine may say Empty or AtCapacity, and checks the
//! bounds and the conservation of tickets after every step.
//!
//! The model does not predict which tenant the SWRR picks (the window tests pin that down); it
//! checks that whatever the engine picks is allowed.

mod common;

use std::collections::{HashMap, VecDeque};

use common::*;
use fairq::{
    Completion, Config, Dimension, Enqueued, Error, NextGrant, Outcome, Reason, Request, Ticket,
};
use proptest::prelude::*;

const TENANTS: usize = 5;
const MAX_TENANTS: u32 = 3;
const TENANT_CAP: usize = 3;
const QUEUE_CAP: usize = 6;
const MAX_IN_FLIGHT: usize = 2;
const MAX_WAIT: u64 = 10 * MS;
/// A parked tenant wakes within two timing-wheel ticks of its time.
const WAKE_SLACK: u64 = 2 << 20;

#[derive(Clone, Debug)]
enum Action {
    Enqueue {
        tenant: usize,
        retry_ms: u64,
        timeout_ms: u64,
        cost: u32,
    },
    Grant,
    Complete {
        pick: usize,
        requeue_ms: Option<u64>,
        actual: Option<u32>,
    },
    Cancel {
        pick: usize,
    },
    Advance {
        us: u64,
    },
    SetWeight {
        tenant: usize,
        weight: u32,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0..TENANTS, 0..4u64, 0..25u64, 1..4u32).prop_map(|(tenant, retry_ms, timeout_ms, cost)| {
            Action::Enqueue { tenant, retry_ms, timeout_ms, cost }
        }),
        4 => Just(Action::Grant),
        3 => (any::<usize>(), proptest::option::of(0..12u64), proptest::option::of(0..6u32))
            .prop_map(|(pick, requeue_ms, actual)| Action::Complete { pick, requeue_ms, actual }),
        1 => any::<usize>().prop_map(|pick| Action::Cancel { pick }),
        3 => (0..4_000u64).prop_map(|us| Action::Advance { us }),
        1 => (0..TENANTS, 1..5u32).prop_map(|(tenant, weight)| Action::SetWeight { tenant, weight }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    Granted,
    Ended,
}

#[derive(Clone, Debug)]
struct ModelTicket {
    tenant: usize,
    state: State,
    not_before: u64,
    deadline: u64,
    enqueued_at: u64,
    position: u32,
}

#[derive(Default)]
struct Model {
    now: u64,
    tickets: Vec<(Ticket, ModelTicket)>,
    index: HashMap<Ticket, usize>,
    /// Per tenant: ticket indices in queue order, cancelled ones included until seen swept.
    queues: Vec<VecDeque<usize>>,
    seen: Vec<bool>,
    in_flight: usize,
    enqueued: u64,
    ended: u64,
    expired: u64,
    refused: HashMap<Reason, u64>,
}

impl Model {
    fn new() -> Model {
        Model {
            queues: vec![VecDeque::new(); TENANTS],
            seen: vec![false; TENANTS],
            ..Model::default()
        }
    }

    fn live_depth(&self, t: usize) -> usize {
        self.queues[t]
            .iter()
            .filter(|&&i| self.tickets[i].1.state == State::Queued)
            .count()
    }

    fn queued_total(&self) -> usize {
        (0..TENANTS).map(|t| self.live_depth(t)).sum()
    }

    fn live(&self, t: usize) -> usize {
        self.tickets
            .iter()
            .filter(|(_, m)| m.tenant == t && matches!(m.state, State::Queued | State::Granted))
            .count()
    }

    /// Tenants certainly active (live tickets) and possibly active (also unswept tombstones).
    fn active_bounds(&self) -> (usize, usize) {
        let lower = (0..TENANTS).filter(|&t| self.live(t) > 0).count();
        let upper = (0..TENANTS)
            .filter(|&t| self.live(t) > 0 || !self.queues[t].is_empty())
            .count();
        (lower, upper)
    }

    /// Drops the cancelled entries at the front of tenant `t`'s queue; returns the first live one.
    fn front_live(&mut self, t: usize) -> Option<usize> {
        while let Some(&i) = self.queues[t].front() {
            if self.tickets[i].1.state == State::Queued {
                return Some(i);
            }
            self.queues[t].pop_front();
        }
        None
    }

    /// The first live entry of tenant `t`'s queue, without dropping anything.
    fn peek_live(&self, t: usize) -> Option<usize> {
        self.queues[t]
            .iter()
            .copied()
            .find(|&i| self.tickets[i].1.state == State::Queued)
    }

    fn end(&mut self, i: usize) {
        self.tickets[i].1.state = State::Ended;
        self.ended += 1;
    }

    fn refuse(&mut self, reason: Reason) {
        *self.refused.entry(reason).or_default() += 1;
    }

    /// Decides a (re)queue attempt for tenant `t` by the engine's rules, in its order.
    fn admit(
        &self,
        t: usize,
        retry_ns: u64,
        deadline: u64,
        first_seen: bool,
        requeue: bool,
    ) -> Result<u32, Reason> {
        let (lower, _) = self.active_bounds();
        if !requeue && first_seen && lower >= MAX_TENANTS as usize {
            return Err(Reason::TenantTableFull);
        }
        let depth = self.live_depth(t);
        if depth >= TENANT_CAP {
            return Err(Reason::TenantQueueFull);
        }
        if self.queued_total() >= QUEUE_CAP {
            return Err(Reason::QueueFull);
        }
        if self.now.saturating_add(retry_ns) > deadline {
            return Err(Reason::WaitExceedsBudget);
        }
        Ok(depth as u32 + 1)
    }
}

fn run(actions: Vec<Action>) -> Result<(), TestCaseError> {
    let engine = engine(Config {
        max_tenants: MAX_TENANTS,
        tenant_queue_capacity: TENANT_CAP as u32,
        queue_capacity: QUEUE_CAP as u32,
        max_in_flight: MAX_IN_FLIGHT as u32,
        max_wait_ms: MAX_WAIT / MS,
        tenant_idle_ms: 0,
        max_weight_classes: 5,
        ..Config::default()
    });
    let names: Vec<String> = (0..TENANTS).map(|t| format!("tenant-{t}")).collect();
    let mut m = Model::new();
    for action in actions {
        match action {
            Action::Advance { us } => m.now += us * 1_000,
            Action::SetWeight { tenant, weight } => {
                prop_assert_eq!(engine.set_weight(&names[tenant], weight), Ok(()));
            }
            Action::Enqueue {
                tenant,
                retry_ms,
                timeout_ms,
                cost,
            } => {
                let req = Request {
                    retry_after_ns: retry_ms * MS,
                    timeout_ns: timeout_ms * MS,
                    cost,
                    user_data: m.tickets.len() as u64,
                    ..Request::new(key(&names[tenant]), Dimension::User)
                };
                let budget = if timeout_ms == 0 {
                    MAX_WAIT
                } else {
                    (timeout_ms * MS).min(MAX_WAIT)
                };
                let deadline = m.now + budget;
                // A tenant with live tickets holds its slot; others may need a new one.
                let needs_slot = m.live(tenant) == 0;
                let (_, upper) = m.active_bounds();
                let expected =
                    m.admit(tenant, req.retry_after_ns, deadline, !m.seen[tenant], false);
                let got = engine.enqueue_at(&req, m.now).unwrap();
                match got {
                    Enqueued::Queued {
                        ticket, position, ..
                    } => {
                        prop_assert_eq!(
                            expected,
                            Ok(position),
                            "queued but model said {:?}",
                            expected
                        );
                        let i = m.tickets.len();
                        m.tickets.push((
                            ticket,
                            ModelTicket {
                                tenant,
                                state: State::Queued,
                                not_before: m.now + req.retry_after_ns,
                                deadline,
                                enqueued_at: m.now,
                                position,
                            },
                        ));
                        m.index.insert(ticket, i);
                        m.queues[tenant].push_back(i);
                        m.seen[tenant] = true;
                        m.enqueued += 1;
                    }
                    Enqueued::Refused(r) => {
                        let depth = m.live_depth(tenant) as u32;
                        match r.reason {
                            Reason::TenantTableFull => {
                                prop_assert!(
                                    needs_slot && upper >= MAX_TENANTS as usize,
                                    "table full with {} possibly active",
                                    upper
                                );
                                prop_assert_eq!(r.position, 1);
                            }
                            // A queue physically full of cancelled, unswept entries.
                            Reason::TenantQueueFull if expected.is_ok() => {
                                prop_assert!(m.queues[tenant].len() >= TENANT_CAP);
                                prop_assert_eq!(r.position, depth + 1);
                            }
                            reason => {
                                prop_assert_eq!(
                                    Some(reason),
                                    expected.err(),
                                    "engine refused {:?}",
                                    reason
                                );
                                prop_assert_eq!(r.position, depth + 1);
                            }
                        }
                        prop_assert_eq!(r.waited_ns, 0);
                        m.refuse(r.reason);
                        // Past the table stage the engine claimed a slot, which may linger.
                        m.seen[tenant] |= r.reason != Reason::TenantTableFull;
                    }
                }
            }
            Action::Grant => {
                let got = engine.next_grant_at(m.now);
                if m.in_flight == MAX_IN_FLIGHT {
                    prop_assert_eq!(got, NextGrant::AtCapacity);
                    continue;
                }
                match got {
                    NextGrant::AtCapacity => {
                        prop_assert!(false, "at capacity with {} in flight", m.in_flight)
                    }
                    NextGrant::Granted(g) => {
                        let Some(&i) = m.index.get(&g.ticket) else {
                            return Err(TestCaseError::fail("unknown ticket granted"));
                        };
                        let t = m.tickets[i].1.tenant;
                        prop_assert_eq!(m.front_live(t), Some(i), "not its tenant's head");
                        let mt = m.tickets[i].1.clone();
                        prop_assert!(mt.not_before <= m.now, "granted before ready");
                        prop_assert!(m.now <= mt.deadline, "granted past its deadline");
                        prop_assert_eq!(g.tenant, key(&names[t]));
                        prop_assert_eq!(g.waited_ns, m.now - mt.enqueued_at);
                        prop_assert_eq!(g.remaining_budget_ns, mt.deadline - m.now);
                        prop_assert_eq!(g.position, mt.position);
                        prop_assert_eq!(g.user_data, i as u64);
                        m.queues[t].pop_front();
                        m.tickets[i].1.state = State::Granted;
                        m.in_flight += 1;
                    }
                    NextGrant::Expired(e) => {
                        let Some(&i) = m.index.get(&e.ticket) else {
                            return Err(TestCaseError::fail("unknown ticket expired"));
                        };
                        let t = m.tickets[i].1.tenant;
                        prop_assert_eq!(m.front_live(t), Some(i));
                        let mt = m.tickets[i].1.clone();
                        prop_assert!(m.now > mt.deadline, "expired before its deadline");
                        prop_assert_eq!(e.refusal.reason, Reason::DeadlineExceeded);
                        prop_assert_eq!(e.refusal.waited_ns, m.now - mt.enqueued_at);
                        m.queues[t].pop_front();
                        m.end(i);
                        m.expired += 1;
                        m.refuse(Reason::DeadlineExceeded);
                    }
                    NextGrant::Empty => {
                        // Nothing ready: every tenant's first live entry is not ready yet, or
                        // just became ready (wheel tick), or waits behind a cancelled head that
                        // was parked for a later time.
                        for t in 0..TENANTS {
                            let Some(i) = m.peek_live(t) else { continue };
                            let ready_at = m.tickets[i].1.not_before;
                            let parked_behind = m.queues[t]
                                .iter()
                                .take_while(|&&j| j != i)
                                .any(|&j| m.tickets[j].1.not_before + WAKE_SLACK > m.now);
                            prop_assert!(
                                ready_at + WAKE_SLACK > m.now || parked_behind,
                                "Empty while tenant {} has a head ready since {}",
                                t,
                                ready_at
                            );
                        }
                    }
                }
            }
            Action::Complete {
                pick,
                requeue_ms,
                actual,
            } => {
                if m.tickets.is_empty() {
                    continue;
                }
                let i = pick % m.tickets.len();
                let (ticket, mt) = m.tickets[i].clone();
                let outcome = match requeue_ms {
                    None => Outcome::Admitted,
                    Some(ms) => Outcome::StillRefused {
                        retry_after_ns: ms * MS,
                    },
                };
                let got = engine.complete_at(ticket, outcome, actual, m.now);
                match mt.state {
                    State::Ended => prop_assert_eq!(got, Err(Error::StaleTicket)),
                    State::Queued => prop_assert_eq!(got, Err(Error::TicketState)),
                    State::Granted => {
                        m.in_flight -= 1;
                        let got = got.unwrap();
                        let Some(ms) = requeue_ms else {
                            prop_assert_eq!(got, Completion::Completed);
                            m.end(i);
                            continue;
                        };
                        let t = mt.tenant;
                        let expected = m.admit(t, ms * MS, mt.deadline, false, true);
                        match got {
                            Completion::Requeued { position, .. } => {
                                prop_assert_eq!(expected, Ok(position));
                                let mt = &mut m.tickets[i].1;
                                mt.state = State::Queued;
                                mt.not_before = m.now + ms * MS;
                                mt.position = position;
                                m.queues[t].push_back(i);
                            }
                            Completion::Refused(r) => {
                                if r.reason == Reason::TenantQueueFull && expected.is_ok() {
                                    prop_assert!(m.queues[t].len() >= TENANT_CAP);
                                } else {
                                    prop_assert_eq!(Some(r.reason), expected.err());
                                }
                                prop_assert_eq!(r.waited_ns, m.now - mt.enqueued_at);
                                m.end(i);
                                m.refuse(r.reason);
                            }
                            Completion::Completed => prop_assert!(false, "requeue completed"),
                        }
                    }
                }
            }
            Action::Cancel { pick } => {
                if m.tickets.is_empty() {
                    continue;
                }
                let i = pick % m.tickets.len();
                let (ticket, mt) = m.tickets[i].clone();
                let got = engine.cancel_at(ticket, m.now);
                match mt.state {
                    State::Ended => prop_assert_eq!(got, Err(Error::StaleTicket)),
                    state => {
                        prop_assert_eq!(got, Ok(()));
                        if state == State::Granted {
                            m.in_flight -= 1;
                        }
                        m.end(i);
                        m.refuse(Reason::Cancelled);
                    }
                }
            }
        }
        // Bounds and conservation after every step.
        let s = engine.stats();
        prop_assert_eq!(s.queued, m.queued_total() as u64);
        prop_assert!(s.queued <= QUEUE_CAP as u64);
        prop_assert_eq!(s.in_flight, m.in_flight as u64);
        prop_assert!(s.in_flight <= MAX_IN_FLIGHT as u64);
        prop_assert_eq!(s.enqueued, m.enqueued);
        prop_assert_eq!(s.ended(), m.ended);
        prop_assert_eq!(s.expired, m.expired);
        prop_assert_eq!(s.enqueued, s.ended() + s.queued + s.in_flight);
        for reason in Reason::ALL {
            prop_assert_eq!(
                s.refused_for(reason),
                m.refused.get(&reason).copied().unwrap_or(0),
                "refusals for {}",
                reason
            );
        }
        let (lower, _) = m.active_bounds();
        prop_assert!(s.tenants >= lower as u64);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_matches_the_reference_model(actions in proptest::collection::vec(action(), 1..200)) {
        run(actions)?;
    }
}
