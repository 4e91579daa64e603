//! A ledger over random mixes of every call: threads enqueue, grant, complete (admitted, still
//! refused, with a corrected cost), cancel, expire, change weights, tiers and fleet factors,
//! switch the engine off and on, send invalid requests and read the metrics, on a clock that
//! sometimes goes backwards, with random sizes and features. Every ticket must end exactly once,
//! a full drain must empty the engine, `stats` must agree with the ledger, and afterwards every
//! tenant must be served at once.
//!
//! Seeded: a failure names its seed and config, and `FAIRQ_CHAOS_SEED=17 cargo test --test
//! chaos_ledger` reruns that config alone (the threads interleave differently each run).
//! `FAIRQ_CHAOS_SEEDS`, `FAIRQ_CHAOS_THREADS` and `FAIRQ_CHAOS_OPS` set the size (defaults: 24
//! seeds of 3 threads × 20,000 calls). More threads than cores preempt callers mid-call.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use common::Rng;
use fairq::{
    Completion, Config, Dimension, Engine, Enqueued, Error, FeedbackController, NextGrant, Outcome,
    Policy, Request, Shedding, StarvationGuard, TenantKey, Ticket, WaitBoost,
};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().expect(name))
}

#[test]
fn every_ticket_ends_exactly_once_under_random_mixes() {
    let ops = env("FAIRQ_CHAOS_OPS").unwrap_or(20_000);
    let threads = env("FAIRQ_CHAOS_THREADS").unwrap_or(3);
    match env("FAIRQ_CHAOS_SEED") {
        Some(seed) => run(seed, threads, ops),
        None => {
            (1..=env("FAIRQ_CHAOS_SEEDS").unwrap_or(24)).for_each(|seed| run(seed, threads, ops))
        }
    }
}

/// A random config: small tables (so bounds are hit), and every second seed the features
/// (bulkheads, shedding, the policies).
fn config(seed: u64, r: &mut Rng) -> (Config, u32) {
    let mut config = Config {
        enabled: true,
        max_tenants: 4 + r.below(12) as u32,
        tenant_queue_capacity: 1 + r.below(6) as u32,
        queue_capacity: 2 + r.below(30) as u32,
        max_in_flight: 1 + r.below(4) as u32,
        max_weight_classes: 2 + r.below(4) as u32,
        max_wait_ms: 1 + r.below(20),
        tenant_idle_ms: r.below(3),
        seats: r.chance(3),
        light_lane: r.chance(2),
        indicators: r.chance(2),
        ..Config::default()
    };
    let mut pools = 0;
    if seed % 2 == 0 {
        pools = 1 + r.below(3) as u32;
        let most = u64::from(config.max_in_flight);
        config.downstream_max_in_flight = (0..pools).map(|_| 1 + r.below(most) as u32).collect();
        config.indicators = true;
        if r.chance(2) {
            config.shedding = Some(Shedding {
                window_ms: 100,
                min_requests: 1,
                ..Shedding::default()
            });
        }
        if r.chance(2) {
            config.policy.starvation_guard = Some(StarvationGuard::default());
        }
        if r.chance(2) {
            config.policy.tiers = Policy::standard_tiers();
            config.max_weight_classes = config.max_weight_classes.max(4);
        }
        if r.chance(2) {
            config.policy.wait_boost = Some(WaitBoost {
                after_ms: 1_000,
                ..WaitBoost::default()
            });
        }
        if r.chance(2) {
            config.policy.feedback = Some(FeedbackController {
                period_ms: 60_000,
                ..FeedbackController::default()
            });
        }
    }
    (config, pools)
}

/// Ends counted per ticket; an entry exists from the moment its enqueue returned.
struct Ledger {
    what: String,
    ends: Mutex<HashMap<u64, u32>>,
}

impl Ledger {
    fn end(&self, ticket: Ticket, how: &str) {
        let mut ends = self.ends.lock().unwrap();
        let Some(count) = ends.get_mut(&ticket.0) else {
            panic!(
                "{}: {how} ended a ticket never issued: {ticket:?}",
                self.what
            );
        };
        *count += 1;
        assert_eq!(*count, 1, "{}: {how} ended {ticket:?} again", self.what);
    }
}

fn run(seed: u64, threads: u64, ops: u64) {
    let mut r = Rng::new(seed);
    let (config, pools) = config(seed, &mut r);
    let tenants = 2 + r.below(14);
    let ledger = Ledger {
        what: format!("seed {seed} ({tenants} tenants, {config:?})"),
        ends: Mutex::new(HashMap::new()),
    };
    let engine = Engine::new(config).expect("valid config");
    // Tickets any thread may cancel or expire (queued, granted to another thread, or ended).
    let known: Mutex<Vec<Ticket>> = Mutex::new(Vec::new());
    let clock = AtomicU64::new(1_000_000);
    std::thread::scope(|s| {
        for id in 0..threads {
            let (engine, ledger, known, clock) = (&engine, &ledger, &known, &clock);
            s.spawn(move || {
                let mut r = Rng::new(seed * 1_000 + id + 1);
                let mut held: Vec<Ticket> = Vec::new();
                for _ in 0..ops {
                    call(
                        engine, ledger, known, clock, &mut r, &mut held, tenants, pools,
                    );
                }
                let now = clock.load(Ordering::Relaxed);
                for ticket in held {
                    match engine.complete_at(ticket, Outcome::Admitted, None, now) {
                        Ok(Completion::Completed) => ledger.end(ticket, "complete"),
                        Err(Error::StaleTicket) => {} // another thread cancelled it
                        other => panic!("{}: completing a held grant: {other:?}", ledger.what),
                    }
                }
            });
        }
    });
    let now = drain(&engine, &ledger, clock.load(Ordering::Relaxed));
    engine.set_enabled(true);
    let stats = engine.stats();
    let ends = ledger.ends.lock().unwrap();
    let wrong: Vec<_> = ends.iter().filter(|(_, &n)| n != 1).take(8).collect();
    assert!(
        wrong.is_empty(),
        "{}: tickets not ended exactly once (ticket, ends): {wrong:?}",
        ledger.what
    );
    let issued = ends.len() as u64;
    assert_eq!(stats.enqueued, issued, "{}: {stats:?}", ledger.what);
    assert_eq!(stats.ended(), issued, "{}: {stats:?}", ledger.what);
    assert_eq!(
        (stats.queued, stats.in_flight, stats.tenants),
        (0, 0, 0),
        "{}: {stats:?}",
        ledger.what
    );
    // Every tenant is still served: one more request each is granted at once.
    let mut probes = Vec::new();
    for tenant in 1..=tenants {
        let request = Request::new(TenantKey::from_hash(tenant), Dimension::User);
        // Refused only when there are more tenants than `max_tenants`.
        if let Enqueued::Queued { ticket, .. } = engine.enqueue_at(&request, now).unwrap() {
            probes.push(ticket);
        }
    }
    let mut served = 0;
    while let NextGrant::Granted(grant) = engine.next_grant_at(now) {
        assert!(probes.contains(&grant.ticket), "{}: {grant:?}", ledger.what);
        let done = engine.complete_at(grant.ticket, Outcome::Admitted, None, now);
        assert_eq!(done, Ok(Completion::Completed), "{}", ledger.what);
        served += 1;
    }
    assert_eq!(
        served,
        probes.len(),
        "{}: tenants not served after the drain: {:?}",
        ledger.what,
        engine.stats()
    );
}

/// One random call, checked against the ledger.
#[allow(clippy::too_many_arguments)]
fn call(
    engine: &Engine,
    ledger: &Ledger,
    known: &Mutex<Vec<Ticket>>,
    clock: &AtomicU64,
    r: &mut Rng,
    held: &mut Vec<Ticket>,
    tenants: u64,
    pools: u32,
) {
    let what = &ledger.what;
    let now = if r.chance(50) {
        // Behind the others' clocks (the engine holds its clock at its high-water mark).
        clock
            .load(Ordering::Relaxed)
            .saturating_sub(r.below(5 * 1_000_000))
    } else {
        clock.fetch_add(r.below(20_000), Ordering::Relaxed)
    };
    let tenant = TenantKey::from_hash(1 + r.below(tenants));
    match r.below(100) {
        0..=34 => {
            let mut request = Request::new(tenant, Dimension::User);
            request.cost = match r.below(20) {
                0 => 1_000_000,
                1..=4 => 1 + r.below(8) as u32,
                _ => 1,
            };
            if r.chance(8) {
                request.retry_after_ns = r.below(3_000_000);
            }
            if r.chance(8) {
                request.timeout_ns = r.below(10_000_000);
            }
            if pools > 0 {
                request.downstream = r.below(u64::from(pools)) as u32;
            }
            // Held across the call, so the ticket is in the ledger before anyone can end it.
            let mut ends = ledger.ends.lock().unwrap();
            if let Enqueued::Queued { ticket, .. } = engine.enqueue_at(&request, now).unwrap() {
                let fresh = ends.insert(ticket.0, 0).is_none();
                assert!(fresh, "{what}: ticket {ticket:?} issued twice");
                drop(ends);
                known.lock().unwrap().push(ticket);
            }
        }
        35..=64 => match engine.next_grant_at(now) {
            NextGrant::Granted(grant) => held.push(grant.ticket),
            NextGrant::Expired(expired) => ledger.end(expired.ticket, "an expiry in next_grant"),
            NextGrant::Empty | NextGrant::AtCapacity => {}
        },
        65..=84 if !held.is_empty() => {
            let ticket = held.swap_remove(r.below(held.len() as u64) as usize);
            let outcome = if r.chance(4) {
                Outcome::StillRefused {
                    retry_after_ns: r.below(2_000_000),
                }
            } else {
                Outcome::Admitted
            };
            let actual = r.chance(5).then(|| r.below(10) as u32);
            match engine.complete_at(ticket, outcome, actual, now) {
                Ok(Completion::Completed) => ledger.end(ticket, "complete"),
                Ok(Completion::Refused(_)) => ledger.end(ticket, "a requeue that did not fit"),
                Ok(Completion::Requeued { .. }) => return, // it may be granted again
                Err(Error::StaleTicket) => {}              // another thread cancelled it
                Err(e) => panic!("{what}: completing a held grant: {e:?}"),
            }
            if r.chance(10) {
                // Completed twice: the ticket ended.
                let again = engine.complete_at(ticket, Outcome::Admitted, None, now);
                assert_eq!(again, Err(Error::StaleTicket), "{what}: a second complete");
            }
        }
        85..=91 => {
            let ticket = {
                let known = known.lock().unwrap();
                if known.is_empty() {
                    return;
                }
                known[r.below(known.len() as u64) as usize]
            };
            if r.chance(2) {
                if engine.cancel_at(ticket, now).is_ok() {
                    ledger.end(ticket, "cancel");
                }
            } else if engine.expire_at(ticket, now).is_ok() {
                ledger.end(ticket, "expire");
            }
        }
        92..=94 => {
            let span = if r.chance(2) { 4 } else { 1_000 };
            match engine.set_weight_key(tenant, 1 + r.below(span) as u32) {
                Ok(()) | Err(Error::TooManyWeightClasses) => {}
                Err(e) => panic!("{what}: set_weight: {e:?}"),
            }
        }
        95 => {
            let tier = ["enterprise", "pro", "starter", "free", "platinum"][r.below(5) as usize];
            let known = engine.tier_weight(tier).is_some();
            match engine.set_tier_key(tenant, tier) {
                Ok(()) | Err(Error::TooManyWeightClasses) => assert!(known, "{what}: {tier}"),
                Err(Error::InvalidArgument(_)) => assert!(!known, "{what}: {tier}"),
                Err(e) => panic!("{what}: set_tier: {e:?}"),
            }
            if r.chance(20) {
                // Off for a while: new requests are refused `disabled`, the queued ones drain.
                engine.set_enabled(!engine.is_enabled());
            }
            // Invalid requests change nothing.
            let mut invalid = Request::new(tenant, Dimension::User);
            invalid.cost = if r.chance(2) { 0 } else { 1_000_001 };
            let refused = engine.enqueue_at(&invalid, now);
            assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{what}");
        }
        96 => {
            let entries: Vec<(u64, u32)> = (0..r.below(6))
                .map(|_| (1 + r.below(tenants), 1 + r.below(9) as u32))
                .collect();
            match engine.replace_weight_keys(&entries, 1 + r.below(3) as u32) {
                Ok(()) | Err(Error::TooManyWeightClasses) => {}
                Err(e) => panic!("{what}: replace_weights: {e:?}"),
            }
        }
        97 => {
            engine
                .set_fleet_factor(tenant, 20 + r.below(1_005) as u32)
                .unwrap();
            let mut out = Vec::new();
            engine.fleet_tenants(&mut out);
            let _ = engine.next_wakeup_ns();
        }
        98 => {
            let _ = engine.stats();
            let _ = engine.tick_at(now);
            let _ = engine.fairness_report_at(now);
            let _ = engine.tenant_indicators_at(tenant, now);
            let _ = engine.prometheus_text_at(now);
            if pools > 0 {
                let downstream = r.below(u64::from(pools) + 1) as u32;
                let _ = engine.report_downstream_at(downstream, r.below(3) != 0, now);
            }
        }
        _ => {
            // Forged tickets end nothing.
            let forged = Ticket(r.next());
            let _ = engine.cancel_at(forged, now);
            let _ = engine.complete_at(forged, Outcome::Admitted, None, now);
            let mut known = known.lock().unwrap();
            if known.len() > 256 {
                let old = known.len() - 128;
                known.drain(..old);
            }
        }
    }
}

/// Grants and completes everything left, moving the clock past every parked request.
/// Returns the clock it ended at.
fn drain(engine: &Engine, ledger: &Ledger, mut now: u64) -> u64 {
    for _ in 0..1_000_000 {
        match engine.next_grant_at(now) {
            NextGrant::Granted(grant) => {
                let done = engine.complete_at(grant.ticket, Outcome::Admitted, None, now);
                assert_eq!(done, Ok(Completion::Completed), "{}", ledger.what);
                ledger.end(grant.ticket, "complete in the drain");
            }
            NextGrant::Expired(expired) => ledger.end(expired.ticket, "an expiry in the drain"),
            // Nothing queued, and no tenant parked behind a cancelled head (it is swept when
            // its wake-up comes, which the next branch moves the clock to).
            NextGrant::Empty if engine.stats().queued == 0 && engine.next_wakeup_ns().is_none() => {
                return now
            }
            NextGrant::Empty => {
                now = match engine.next_wakeup_ns() {
                    Some(wakeup) if wakeup > now => wakeup,
                    _ => now + 1_000_000,
                }
            }
            NextGrant::AtCapacity => {
                panic!(
                    "{}: at capacity with nothing out: {:?}",
                    ledger.what,
                    engine.stats()
                )
            }
        }
    }
    panic!(
        "{}: the drain does not end: {:?}",
        ledger.what,
        engine.stats()
    );
}
