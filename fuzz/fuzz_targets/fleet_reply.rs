//! Fleet mode's reading of Redis replies (`fairq::fleet::parse_sync_reply` and
//! `parse_sync_reply_resp`), and what the fleet rules make of an accepted one.
//!
//! Each input is one of:
//! - raw bytes, read as a RESP reply (the seed corpus holds valid replies): never a panic; an
//!   accepted reply is exactly what the value the RESP parser reads out of the bytes promises;
//! - a `redis::Value` tree of every type (nesting, maps, sets, doubles, wrong types, huge and
//!   negative numbers) for an arbitrary entry count: the result is checked against the
//!   documented rule (an array of `4 + entries` non-negative integers whose first and third are
//!   0 or 1), and the tree written as RESP must read back to the same result;
//! - a sequence of syncs of a `FleetState` (arbitrary tenants, service, times and replies, mostly
//!   well-shaped with extreme numbers): every factor it sets is within
//!   `MIN_FLEET_FACTOR..=FULL_FLEET_FACTOR` and for a tenant of the sync, a published rate stays
//!   within its bound, a rejected reply counts as a failure, and a batch or attempt number that
//!   Redis reports as taken is never reused.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use fairq::fleet::{parse_sync_reply, parse_sync_reply_resp, FleetState, SyncReply};
use fairq::fleet::{SyncPlan, FULL_FLEET_FACTOR};
use fairq::{FleetTenant, TenantKey, MIN_FLEET_FACTOR};
use libfuzzer_sys::fuzz_target;
use redis::{PushKind, Value, VerbatimFormat};

/// The bound on a published rate (milli-units per second): fleet mode's `MAX_RATE`.
const MAX_RATE: u64 = 1 << 40;

/// Deepest nesting of a generated tree.
const MAX_DEPTH: u32 = 6;

/// Numbers a reply may carry: edges first, then anything.
fn number(u: &mut Unstructured) -> Result<i64> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => -1,
        4 => i64::MAX,
        5 => i64::MIN,
        6 => u32::MAX as i64,
        7 => MAX_RATE as i64 + u.int_in_range(-1..=1)?,
        8 => u.int_in_range(0..=100_000)?,
        _ => u.arbitrary()?,
    })
}

/// A line of text RESP can carry in a simple string (no CR or LF).
fn line(u: &mut Unstructured) -> Result<String> {
    let s: String = u.arbitrary()?;
    Ok(s.replace(['\r', '\n'], " "))
}

/// A value of any type; `exact` is cleared when its RESP form may not read back the same.
fn value(u: &mut Unstructured, depth: u32, exact: &mut bool) -> Result<Value> {
    let leaf = depth >= MAX_DEPTH;
    let pick = u.int_in_range(0..=if leaf { 9 } else { 16u8 })?;
    Ok(match pick {
        0 | 1 | 2 => Value::Int(number(u)?),
        3 => Value::Nil,
        4 => Value::BulkString(u.arbitrary()?),
        5 => {
            let s = line(u)?;
            if s == "OK" {
                Value::Okay
            } else {
                Value::SimpleString(s)
            }
        }
        6 => Value::Okay,
        7 => Value::Boolean(u.arbitrary()?),
        8 => {
            *exact = false;
            Value::Double(u.arbitrary()?)
        }
        9 => {
            *exact = false;
            Value::BigNumber(number(u)?.to_string().into_bytes())
        }
        10..=13 => {
            // Mostly the right shape: a valid reply's count, sometimes one off.
            let n = u.int_in_range(0..=8usize)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(value(u, depth + 1, exact)?);
            }
            Value::Array(items)
        }
        14 => Value::Set(values(u, depth, exact)?),
        15 => {
            let n = u.int_in_range(0..=4usize)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((value(u, depth + 1, exact)?, value(u, depth + 1, exact)?));
            }
            if u.arbitrary()? {
                *exact = false;
                Value::Attribute {
                    data: Box::new(value(u, depth + 1, exact)?),
                    attributes: pairs,
                }
            } else {
                Value::Map(pairs)
            }
        }
        _ => {
            *exact = false;
            if u.arbitrary()? {
                Value::Push {
                    kind: PushKind::Message,
                    data: values(u, depth, exact)?,
                }
            } else {
                Value::VerbatimString {
                    format: VerbatimFormat::Text,
                    text: line(u)?,
                }
            }
        }
    })
}

fn values(u: &mut Unstructured, depth: u32, exact: &mut bool) -> Result<Vec<Value>> {
    let n = u.int_in_range(0..=6usize)?;
    (0..n).map(|_| value(u, depth + 1, exact)).collect()
}

/// A reply of the right shape for `entries`, with extreme numbers and, now and then, a flag
/// that is not 0 or 1 or an item of another type.
fn shaped(u: &mut Unstructured, entries: usize) -> Result<Value> {
    let flag = |u: &mut Unstructured| -> Result<i64> {
        Ok(if u.ratio(1, 16)? {
            number(u)?
        } else {
            i64::from(u.arbitrary::<bool>()?)
        })
    };
    let mut items = vec![
        Value::Int(flag(u)?),
        Value::Int(number(u)?.max(0)),
        Value::Int(flag(u)?),
        Value::Int(number(u)?.max(0)),
    ];
    for _ in 0..entries {
        items.push(Value::Int(if u.ratio(1, 32)? {
            number(u)?
        } else {
            number(u)?.max(0)
        }));
    }
    if u.ratio(1, 32)? && !items.is_empty() {
        let i = u.choose_index(items.len())?;
        let mut exact = true;
        items[i] = value(u, MAX_DEPTH, &mut exact)?;
    }
    Ok(Value::Array(items))
}

/// The documented rule, written out independently: an array of `4 + entries` non-negative
/// integers, the first and third 0 or 1.
fn expected(reply: &Value, entries: usize) -> Option<SyncReply> {
    let Value::Array(items) = reply else {
        return None;
    };
    if entries.checked_add(4) != Some(items.len()) {
        return None;
    }
    let mut n = Vec::new();
    for item in items {
        match item {
            Value::Int(i) if *i >= 0 => n.push(*i as u64),
            _ => return None,
        }
    }
    if n[0] > 1 || n[2] > 1 {
        return None;
    }
    Some(SyncReply {
        batch_applied: n[0] == 1,
        last_seq: n[1],
        rates_applied: n[2] == 1,
        last_attempt: n[3],
        fleet_rates: n[4..].to_vec(),
    })
}

/// `value` as RESP (version 3 where the type needs it).
fn resp(v: &Value, out: &mut Vec<u8>) {
    fn head(out: &mut Vec<u8>, kind: u8, n: usize) {
        out.push(kind);
        out.extend_from_slice(n.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    fn text(out: &mut Vec<u8>, kind: u8, s: &str) {
        out.push(kind);
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match v {
        Value::Nil => out.extend_from_slice(b"_\r\n"),
        Value::Int(i) => text(out, b':', &i.to_string()),
        Value::BulkString(b) => {
            head(out, b'$', b.len());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Value::Array(items) => {
            head(out, b'*', items.len());
            items.iter().for_each(|i| resp(i, out));
        }
        Value::Set(items) => {
            head(out, b'~', items.len());
            items.iter().for_each(|i| resp(i, out));
        }
        Value::SimpleString(s) => text(out, b'+', s),
        Value::Okay => out.extend_from_slice(b"+OK\r\n"),
        Value::Map(pairs) => {
            head(out, b'%', pairs.len());
            for (k, v) in pairs {
                resp(k, out);
                resp(v, out);
            }
        }
        Value::Attribute { data, attributes } => {
            head(out, b'|', attributes.len());
            for (k, v) in attributes {
                resp(k, out);
                resp(v, out);
            }
            resp(data, out);
        }
        Value::Double(d) => text(out, b',', &d.to_string()),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Value::VerbatimString { text: t, .. } => {
            head(out, b'=', t.len() + 4);
            out.extend_from_slice(b"txt:");
            out.extend_from_slice(t.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Value::BigNumber(n) => text(out, b'(', &String::from_utf8_lossy(n)),
        Value::Push { data, .. } => {
            head(out, b'>', data.len() + 1);
            resp(&Value::BulkString(b"message".to_vec()), out);
            data.iter().for_each(|i| resp(i, out));
        }
        _ => out.extend_from_slice(b"-ERR unexpected\r\n"),
    }
}

/// An accepted reply keeps the rule's promises.
fn check_accepted(r: &SyncReply, entries: usize) {
    assert_eq!(r.fleet_rates.len(), entries, "one fleet rate per entry");
    assert!(r.last_seq <= i64::MAX as u64 && r.last_attempt <= i64::MAX as u64);
    assert!(r.fleet_rates.iter().all(|&f| f <= i64::MAX as u64));
}

/// Reads `reply` both ways (as a value and, when exact, as its RESP bytes) and checks them.
fn read(reply: &Value, entries: usize, exact: bool) -> Option<SyncReply> {
    let got = parse_sync_reply(reply, entries);
    assert_eq!(
        got.as_ref().ok(),
        expected(reply, entries).as_ref(),
        "{reply:?}"
    );
    if let Ok(r) = &got {
        check_accepted(r, entries);
    }
    let mut bytes = Vec::new();
    resp(reply, &mut bytes);
    let via_resp = parse_sync_reply_resp(&bytes, entries);
    if exact {
        assert_eq!(
            via_resp.as_ref().ok(),
            got.as_ref().ok(),
            "{reply:?} as RESP {:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
    got.ok()
}

/// One tenant of a snapshot: a small index (so tenants recur), its service and queue.
#[derive(Arbitrary, Debug)]
struct Tenant {
    index: u8,
    served: u64,
    queued: u8,
    factor: u16,
}

#[derive(Arbitrary, Debug)]
enum Answer {
    /// A well-shaped reply with extreme numbers.
    Shaped,
    /// Any value tree.
    Tree,
    /// Raw RESP bytes.
    Resp(Vec<u8>),
    /// No reply (an error or a timeout).
    Failed,
}

#[derive(Arbitrary, Debug)]
struct Sync {
    tenants: Vec<Tenant>,
    /// Time since the previous sync, ns (wrapping past the end of the clock saturates).
    elapsed: u64,
    epoch: u8,
    sent: bool,
    answer: Answer,
}

/// A run of syncs: each plan's reply is read and handed to the fleet rules.
fn syncs(u: &mut Unstructured) -> Result<()> {
    let top_k = u.int_in_range(1..=16usize)?;
    let smoothing = f64::from(u.int_in_range(1..=1000u16)?) / 1000.0;
    let period_ns = u.int_in_range(1..=500u64)? * 1_000_000;
    let stale_ns = period_ns.saturating_mul(u.int_in_range(1..=100u64)?);
    let mut state = FleetState::new(top_k, smoothing, period_ns, stale_ns);
    if u.ratio(1, 4)? {
        state.number_from(number(u)?.unsigned_abs());
    }
    let mut now = 0u64;
    let mut numbers = Numbers::default();
    let rounds = u.int_in_range(1..=8u8)?;
    for _ in 0..rounds {
        let sync: Sync = u.arbitrary()?;
        now = now.saturating_add(sync.elapsed);
        let mut snapshot: Vec<FleetTenant> = Vec::new();
        for t in &sync.tenants {
            let tenant = TenantKey::from_hash(u64::from(t.index % 32) + 1);
            if snapshot.iter().any(|s| s.tenant == tenant) {
                continue;
            }
            snapshot.push(FleetTenant {
                tenant,
                weight: 1,
                factor: u32::from(t.factor).clamp(MIN_FLEET_FACTOR, FULL_FLEET_FACTOR),
                served_cost: t.served,
                queued: u64::from(t.queued),
            });
        }
        let plan: SyncPlan = state.plan(&snapshot, now, u64::from(sync.epoch));
        check_plan(&plan, top_k);
        numbers.check(&plan);
        if sync.sent {
            state.on_sent(&plan);
        }
        let entries = plan.rates.len() + plan.reads.len();
        let reply = match &sync.answer {
            Answer::Shaped => read(&shaped(u, entries)?, entries, true),
            Answer::Tree => {
                let mut exact = true;
                let v = value(u, 0, &mut exact)?;
                read(&v, entries, exact)
            }
            Answer::Resp(bytes) => {
                let r = parse_sync_reply_resp(bytes, entries).ok();
                if let Some(r) = &r {
                    check_accepted(r, entries);
                }
                r
            }
            Answer::Failed => None,
        };
        let failures = state.consecutive_failures();
        let factors = match &reply {
            Some(r) => {
                let f = state.on_success(&plan, r, now);
                assert_eq!(state.consecutive_failures(), 0);
                assert_eq!(state.last_success(), Some(now));
                // Numbers Redis reports as taken are never issued again.
                if plan.batch.is_some() && !r.batch_applied {
                    numbers.seq_floor = numbers.seq_floor.max(r.last_seq.saturating_add(1));
                }
                if !r.rates_applied {
                    numbers.attempt_floor =
                        numbers.attempt_floor.max(r.last_attempt.saturating_add(1));
                    assert!(f.is_empty(), "factors from rates that were not taken");
                }
                f
            }
            None => {
                let f = state.on_failure(&plan, now);
                assert_eq!(state.consecutive_failures(), failures.saturating_add(1));
                f
            }
        };
        for (i, (key, factor)) in factors.iter().enumerate() {
            assert!(
                (MIN_FLEET_FACTOR..=FULL_FLEET_FACTOR).contains(factor),
                "factor {factor} for {key:?}"
            );
            assert!(
                snapshot.iter().any(|t| t.tenant == *key),
                "a factor for {key:?}, not in the snapshot"
            );
            assert!(
                factors[..i].iter().all(|(k, _)| k != key),
                "two factors for {key:?}"
            );
        }
    }
    Ok(())
}

/// The batch and attempt numbers seen so far.
#[derive(Default)]
struct Numbers {
    /// The largest number issued.
    issued: u64,
    /// The previous plan's batch (resent with the same number while in doubt).
    last_batch: Option<u64>,
    /// Above the last batch number Redis reported when it skipped ours.
    seq_floor: u64,
    /// Above the last attempt number Redis reported when it did not take ours.
    attempt_floor: u64,
}

impl Numbers {
    /// Every attempt is new; a batch is new or the previous one resent; neither reuses a
    /// number Redis reported as taken.
    fn check(&mut self, plan: &SyncPlan) {
        let before = self.issued;
        assert!(
            plan.attempt > before && plan.attempt >= self.attempt_floor,
            "attempt {} (issued up to {before}, floor {})",
            plan.attempt,
            self.attempt_floor
        );
        if let Some(b) = &plan.batch {
            assert!(
                (b.seq > before || self.last_batch == Some(b.seq))
                    && b.seq >= self.seq_floor
                    && b.seq != plan.attempt,
                "batch {} (attempt {}, issued up to {before}, previous batch {:?}, floor {})",
                b.seq,
                plan.attempt,
                self.last_batch,
                self.seq_floor
            );
        }
        self.issued = plan.attempt.max(plan.batch.as_ref().map_or(0, |b| b.seq));
        self.last_batch = plan.batch.as_ref().map(|b| b.seq);
    }
}

/// What a plan promises: at most K rates and K deltas, rates bounded, no tenant twice.
fn check_plan(plan: &SyncPlan, top_k: usize) {
    assert!(
        plan.rates.len() <= top_k,
        "{} rates for K = {top_k}",
        plan.rates.len()
    );
    assert!(
        plan.rates.iter().all(|&(_, r)| r <= MAX_RATE),
        "{:?}",
        plan.rates
    );
    let mut keys: Vec<TenantKey> = plan.rates.iter().map(|&(k, _)| k).collect();
    keys.extend(&plan.reads);
    let n = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), n, "a tenant twice in {plan:?}");
    if let Some(b) = &plan.batch {
        assert!(b.deltas.len() <= top_k && !b.deltas.is_empty());
        assert!(b.deltas.iter().all(|&(_, d)| d > 0));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        // Raw RESP: the seed corpus's replies, then whatever libFuzzer makes of them.
        0 => {
            let Some((&entries, resp)) = rest.split_first() else {
                return;
            };
            let entries = usize::from(entries);
            let got = parse_sync_reply_resp(resp, entries);
            if let Ok(r) = &got {
                check_accepted(r, entries);
                let value = redis::parse_redis_value(resp).expect("accepted bytes parse");
                assert_eq!(expected(&value, entries).as_ref(), Some(r));
            }
        }
        1 | 2 => {
            let mut u = Unstructured::new(rest);
            let Ok(entries) = entry_count(&mut u) else {
                return;
            };
            let mut exact = true;
            let reply = if mode % 4 == 1 {
                shaped(&mut u, entries.min(64))
            } else {
                value(&mut u, 0, &mut exact)
            };
            if let Ok(reply) = reply {
                read(&reply, entries, exact);
            }
        }
        _ => {
            let _ = syncs(&mut Unstructured::new(rest));
        }
    }
});

/// An entry count: mostly small, sometimes the edges.
fn entry_count(u: &mut Unstructured) -> Result<usize> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => usize::MAX,
        1 => usize::MAX - 3,
        _ => u.int_in_range(0..=8usize)?,
    })
}
