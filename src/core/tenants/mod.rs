//! The fixed tenant table: open addressing over a fixed array of tenant slots.
//!
//! A slot is found by linear probing from its key's hash, within a window of `PROBE_WINDOW`
//! slots. The table has a quarter more slots than `max_tenants`, which bounds how many tenants
//! may be active (hold requests) at once; a tenant that comes back to its own idle slot is always
//! let in. A slot with key 0 has never been used and ends a probe; once used, a slot always holds
//! some key, so probe chains never break.
//!
//! # Slot life cycle
//! `counts` packs three counts, `live << 42 | depth << 21 | queued` ([`Counts`]):
//! - `queued` (21 bits): entries pushed into the slot's queue and announced, staged head
//!   included, cancelled ones too until the scheduler sweeps them. It decides who holds the
//!   tenant's turn: the enqueuer that moves it from 0 to 1 activates the tenant; the holder that
//!   moves it from 1 to 0 lets it go idle.
//! - `depth` (21 bits): the tenant's requests waiting now, cancelled ones excluded, and places
//!   reserved for requests about to be pushed: the tenant queue's bound and the positions. An
//!   enqueue takes its place with the same CAS that pins the slot; a grant gives it back with the
//!   same RMW that consumes its entry.
//! - `live` (22 bits): tickets of this tenant not yet ended (queued or granted), plus callers
//!   that pinned the slot while they work on it. All ones (`STEALING`, unreachable as a count:
//!   a tenant has at most 2^20 queued and 2^20 in flight) marks a slot being claimed.
//!
//! A slot is reused ("stolen") for another tenant only when `counts == 0` and it has been idle for
//! `tenant_idle_ms`. The thief CASes `counts` from 0 to `STEALING`, rewrites the key and the
//! fields, and releases with `counts` = its own pins (`LIVE_ONE` each) and its place. Anyone else
//! pins with a CAS that waits out `STEALING` (never walking past a slot being claimed, maybe for
//! its own key), then re-reads the key: a pin that succeeded after a steal sees the new key
//! (the CAS acquires the thief's release) and backs out. So a caller works only on a slot that
//! holds its own key, never one that now belongs to someone else.

use crate::core::ids::SlotId;
use crate::core::packed::Field;
use crate::core::ring::TenantQueue;
use crate::limits::FACTOR_ONE;
use crate::sync::{AtomicI64, AtomicU32, AtomicU64, Backoff, CachePadded, Ordering};
use crate::table::Table;

mod slot;

pub(crate) use slot::{TenantSlot, Waits};

/// The fields of `counts`, from bit 0 up (module docs, "Slot life cycle").
const QUEUED_FIELD: Field = Field::first(21);
const DEPTH_FIELD: Field = Field::after(QUEUED_FIELD, 21);
const LIVE_FIELD: Field = Field::after(DEPTH_FIELD, 22);
const QUEUED_ONE: u64 = QUEUED_FIELD.one();
const QUEUED_MASK: u64 = QUEUED_FIELD.mask();
const DEPTH_ONE: u64 = DEPTH_FIELD.one();
const DEPTH_MASK: u64 = DEPTH_FIELD.mask();
const LIVE_ONE: u64 = LIVE_FIELD.one();
const LIVE_MASK: u64 = LIVE_FIELD.mask();
/// `live` all ones: the slot is being claimed (no count reaches it).
const STEALING: u64 = LIVE_MASK;
/// The largest `queued` and `depth` the fields hold.
const COUNT_MAX: u64 = QUEUED_FIELD.max();
// The config caps a tenant's queue at 2^20 requests.
const _: () = assert!(COUNT_MAX >= 1 << 20 && LIVE_FIELD.mask() >> 63 == 1);
/// Most slots one lookup probes. Bounds enqueue's cost on a crowded table.
pub(crate) const PROBE_WINDOW: usize = 512;
/// "No tenant" in links and staged handles.
pub(crate) const NIL: u32 = u32::MAX;

/// A snapshot of a slot's `counts` word (module docs, "Slot life cycle").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::core) struct Counts(u64);

impl Counts {
    /// Entries announced: the staged head included, dead ones until swept.
    pub(in crate::core) fn queued(self) -> u64 {
        QUEUED_FIELD.get(self.0)
    }

    /// Requests waiting (cancelled ones excluded) and places reserved.
    pub(in crate::core) fn depth(self) -> u64 {
        DEPTH_FIELD.get(self.0)
    }

    fn stealing(self) -> bool {
        self.0 & LIVE_MASK == STEALING
    }

    /// Tickets not yet ended plus pins.
    pub(in crate::core) fn live(self) -> u64 {
        LIVE_FIELD.get(self.0)
    }
}

/// Entries in a tenant's ring for a queue bound of `capacity` live requests: half as many again
/// for cancelled entries, so a compaction (when the ring is full) frees at least that many.
pub(crate) fn ring_capacity(capacity: usize) -> usize {
    capacity + capacity / 2 + 1
}

/// Physical slots for a table of `capacity` tenants: a quarter more, for short probe chains.
pub(crate) fn slot_count(capacity: usize) -> usize {
    capacity + capacity / 4 + 1
}

/// What a pin that asks for a spot in the tenant's queue gets: `Ok` with the requests ahead of
/// the spot taken, or `Err` with the requests waiting when the queue is full (or no spot was
/// asked: a bound of 0). ("Place" is kept for placing a tenant: in a ring, the wheel, the lane.)
pub(crate) type Spot = Result<u32, u32>;

enum Claim {
    Claimed,
    /// Someone else changed the slot first: look again.
    Lost,
    /// `max_tenants` tenants are active.
    Full,
}

/// Why a lookup found no slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

pub(crate) struct TenantTable {
    /// `max_tenants` plus a quarter of slack, so probe chains stay short when the table is full.
    slots: Table<TenantSlot>,
    /// Most tenants a claim may bring the active count to (`max_tenants`).
    limit: u64,
    idle_ns: u64,
    /// Slots with `counts != 0`: the tenants gauge.
    active: AtomicU64,
    /// Debug probe: slots inspected by lookups and grants (counted in debug builds only).
    touches: AtomicU64,
    /// Per calling thread (its statistics row, `tally::row`): the tenant it last left to the
    /// caller serving it, or `NIL` (`granted_while_waiting`).
    left: Box<[CachePadded<AtomicU32>]>,
    /// Rows whose `left` holds a tenant: while 0, a call skips the thread-local lookup.
    leaving: CachePadded<AtomicU32>,
}

impl TenantTable {
    pub(crate) fn new(capacity: usize, queue_capacity: usize, idle_ns: u64) -> TenantTable {
        // The config's bounds (2^20 per tenant queue) keep both counts within their fields.
        debug_assert!(ring_capacity(queue_capacity) as u64 <= COUNT_MAX);
        TenantTable {
            slots: (0..slot_count(capacity))
                .map(|_| TenantSlot::new(queue_capacity))
                .collect(),
            limit: capacity as u64,
            idle_ns,
            active: AtomicU64::new(0),
            touches: AtomicU64::new(0),
            left: (0..crate::core::tally::ROWS)
                .map(|_| CachePadded::new(AtomicU32::new(NIL)))
                .collect(),
            leaving: CachePadded::new(AtomicU32::new(0)),
        }
    }

    /// This caller found tenant `t` served again and again by another caller and left it to
    /// that caller (`Core::wait_for_visitor`): its next call looks at `t` first.
    pub(crate) fn leave_to_server(&self, t: SlotId) {
        if let Some(row) = crate::core::tally::row() {
            // Relaxed: only this thread reads or writes its row.
            if self.left[row].swap(t, Ordering::Relaxed) == NIL {
                // Relaxed: a thread reads the count only for its own row's sake, and sees the
                // increments made for that row: its own (coherence), or its row's previous
                // holder's (ordered by the row's hand-off, `tally::row`).
                self.leaving.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether the tenant this caller last left to another caller is granted again while it
    /// waits (`wait`): that caller is still serving it, so this one has nothing to take and
    /// answers `Empty` having read one line, where a full pick would read the permits, the
    /// classes and the visitor slots the server writes on every grant. When it is not (or no
    /// tenant was left), the tenant is forgotten and the caller picks as usual, so a server
    /// that went away is taken over by the full pick's steal.
    pub(crate) fn granted_while_waiting(&self, wait: impl FnOnce()) -> bool {
        // Relaxed: see `leave_to_server`; 0 unless some caller left a tenant.
        if self.leaving.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.granted_while_waiting_slow(wait)
    }

    #[inline(never)]
    fn granted_while_waiting_slow(&self, wait: impl FnOnce()) -> bool {
        let Some(row) = crate::core::tally::row() else {
            return false;
        };
        // Relaxed: only this thread reads or writes its row.
        let t = self.left[row].load(Ordering::Relaxed);
        let Some(slot) = self.slots.get(t as usize) else {
            return false; // NIL: none left
        };
        // Relaxed, both: a hint. A stale read answers one `Empty` too many or too few, and
        // the full pick decides what is taken; only a change counts, never a value, so
        // nothing here waits on a store becoming visible.
        let before = slot.grants_total.load(Ordering::Relaxed);
        wait();
        if slot.grants_total.load(Ordering::Relaxed) != before {
            return true;
        }
        broken!(Left, {
            // Broken on purpose: keeps answering `Empty` after its server went away.
            return true;
        });
        self.left[row].store(NIL, Ordering::Relaxed);
        // Relaxed: see `leave_to_server`.
        self.leaving.fetch_sub(1, Ordering::Relaxed);
        false
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Every slot, for scans off the hot path (metrics, `tick`); not counted in `touches`.
    pub(crate) fn slots(&self) -> &[TenantSlot] {
        self.slots.as_slice()
    }

    /// The slot at `index`, if in range, for reads off the hot path; not counted in `touches`.
    pub(crate) fn get(&self, index: u32) -> Option<&TenantSlot> {
        self.slots.get(index as usize)
    }

    /// The slot at `index`. Callers pass indices taken from this table.
    pub(crate) fn slot(&self, index: u32) -> &TenantSlot {
        debug_assert!((index as usize) < self.slots.len());
        self.touch();
        &self.slots[index as usize]
    }

    /// Debug builds: slots touched so far.
    pub(crate) fn touches(&self) -> u64 {
        // Relaxed: a probe counter.
        self.touches.load(Ordering::Relaxed)
    }

    pub(crate) fn touch(&self) {
        if cfg!(debug_assertions) {
            self.touches.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    fn home(&self, key: u64) -> usize {
        ((u128::from(key) * self.slots.len() as u128) >> 64) as usize
    }

    fn probe(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let n = self.slots.len();
        let home = self.home(key);
        (0..n.min(PROBE_WINDOW)).map(move |i| {
            let index = home + i;
            if index >= n {
                index - n
            } else {
                index
            }
        })
    }

    /// Pins the slot if it holds `key` and is not being stolen. On success the caller owns
    /// `pins` `LIVE` counts on it, and a place in its queue if the queue held fewer than `bound`
    /// requests ([`Spot`]; a bound of 0 asks none).
    fn try_pin(&self, index: usize, key: u64, pins: u64, bound: u32) -> Option<Spot> {
        let slot = &self.slots[index];
        self.touch();
        let backoff = Backoff::new();
        let mut current = slot.counts.load(Ordering::Acquire);
        let mut wait = crate::sync::FIRST_CONTENDED_HINTS;
        let got: Spot = loop {
            broken!(Claim, Counts(current).stealing(), {
                return None; // Broken on purpose: the walk-past the loom models caught.
            });
            if Counts(current).stealing() {
                // A claim is rewriting this slot, possibly for our own key: wait for it (a few
                // stores, never blocked) instead of walking past. Walking past (found by the loom
                // models) let a second enqueue of a new tenant claim another slot for the same
                // key, or refuse it `tenant_table_full` with a slot free, and let `set_weight`
                // miss the slot being claimed while the claimer read the old weight table,
                // losing the new weight.
                backoff.snooze();
                current = slot.counts.load(Ordering::Acquire);
                continue;
            }
            let ahead = Counts(current).depth() as u32;
            let got = if ahead < bound { Ok(ahead) } else { Err(ahead) };
            let take = if got.is_ok() { DEPTH_ONE } else { 0 };
            // Acquire: pairs with a thief's Release of `counts`, so the key read below is the
            // thief's. Release: orders our pin before the key check for a concurrent thief.
            match slot.counts.compare_exchange_weak(
                current,
                current + pins * LIVE_ONE + take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break got,
                Err(seen) => {
                    crate::sync::contended(&mut wait);
                    current = seen;
                }
            }
        };
        if current == 0 {
            self.active.fetch_add(1, Ordering::Relaxed);
        }
        broken!(Slot, {
            return Some(got); // Broken on purpose: trust the key read before the pin.
        });
        // Acquire: see the key the last thief wrote before it released `counts`.
        if slot.key.load(Ordering::Acquire) == key {
            return Some(got);
        }
        let took = if got.is_ok() { DEPTH_ONE } else { 0 };
        self.release(index as u32, pins * LIVE_ONE + took, 0);
        None
    }

    /// Slot `index`'s counts now, for a caller that holds a pin on it (a status read).
    pub(in crate::core) fn counts(&self, index: SlotId) -> Counts {
        // Acquire: with the pin, the counts' last writers' slot writes are visible.
        Counts(self.slots[index as usize].counts.load(Ordering::Acquire))
    }

    /// Pins the slot at `index` if it holds a tenant (any key), for table scans.
    pub(crate) fn pin_index(&self, index: u32) -> Option<u32> {
        let slot = self.slots.get(index as usize)?;
        let key = slot.key.load(Ordering::Acquire);
        (key != 0 && self.try_pin(index as usize, key, 1, 0).is_some()).then_some(index)
    }

    /// Finds `key`'s slot without claiming one, pinned.
    pub(crate) fn pin_existing(&self, key: u64) -> Option<u32> {
        for index in self.probe(key) {
            let seen = self.slots[index].key.load(Ordering::Acquire);
            if seen == 0 {
                return None;
            }
            if seen == key && self.try_pin(index, key, 1, 0).is_some() {
                return Some(index as u32);
            }
        }
        None
    }

    /// Pins `key`'s slot as [`pin_or_claim`](Self::pin_or_claim) does, if the key has one;
    /// `None` when it has none or the slot changed hands meanwhile (`pin_or_claim` settles
    /// both). Inline: most enqueues find their tenant's slot, and end here without the claim
    /// loop's set-up.
    pub(crate) fn pin_found(&self, key: u64, pins: u64, bound: u32) -> Option<(u32, Spot)> {
        let index = self.locate(key)?;
        let place = self.try_pin(index, key, pins, bound)?;
        Some((index as u32, place))
    }

    /// The slot holding `key` in its probe window, looking no further than an empty slot (where
    /// a claim would put it). A hint: the slot may change hands before it is pinned.
    fn locate(&self, key: u64) -> Option<usize> {
        let n = self.slots.len();
        let mut index = self.home(key);
        for _ in 0..n.min(PROBE_WINDOW) {
            // Acquire, as in the claim loop's scan; only a hint either way: `try_pin` reads the
            // key again after its CAS, which pairs with a thief's Release of `counts`.
            match self.slots[index].key.load(Ordering::Acquire) {
                seen if seen == key => return Some(index),
                0 => return None,
                _ => {}
            }
            index += 1;
            if index == n {
                index = 0;
            }
        }
        None
    }

    /// Finds or claims `key`'s slot, pinned `pins` times, and asks a place in its queue (of at
    /// most `bound` requests) in the same RMW: `enqueue` takes its ticket's count, `push_queued`'s
    /// extra pin and its place at once. `init` sets up a freshly claimed slot (weight, class)
    /// while the caller holds it exclusively.
    pub(crate) fn pin_or_claim(
        &self,
        key: u64,
        now: u64,
        pins: u64,
        bound: u32,
        init: impl Fn(SlotId, &TenantSlot),
    ) -> Result<(u32, Spot), TableFull> {
        // A claim can lose a race for its slot; a few rounds settle it.
        let backoff = Backoff::new();
        for _ in 0..8 {
            let mut candidate = None;
            for index in self.probe(key) {
                let slot = &self.slots[index];
                let seen = slot.key.load(Ordering::Acquire);
                if seen == key {
                    if let Some(place) = self.try_pin(index, key, pins, bound) {
                        return Ok((index as u32, place));
                    }
                }
                if seen == 0 {
                    candidate.get_or_insert(index);
                    break;
                }
                if candidate.is_none() && self.stealable(slot, now) {
                    candidate = Some(index);
                }
            }
            let Some(index) = candidate else {
                return Err(TableFull);
            };
            match self.try_steal(index, key, now, pins, &init) {
                // A fresh slot: the queue is empty, so the place is the first.
                Claim::Claimed => return Ok((index as u32, Ok(0))),
                // Lost to another claim, maybe still in progress: let it finish before the next
                // round looks again, or the rounds run out and refuse with a slot free.
                Claim::Lost => backoff.snooze(),
                Claim::Full => return Err(TableFull),
            }
        }
        Err(TableFull)
    }

    fn stealable(&self, slot: &TenantSlot, now: u64) -> bool {
        // Acquire: pairs with the Release in `release`, so `last_active` is the idle time.
        slot.counts.load(Ordering::Acquire) == 0
            && now.saturating_sub(slot.last_active.load(Ordering::Relaxed)) >= self.idle_ns
    }

    fn try_steal(
        &self,
        index: usize,
        key: u64,
        now: u64,
        pins: u64,
        init: &impl Fn(SlotId, &TenantSlot),
    ) -> Claim {
        let slot = &self.slots[index];
        self.touch();
        // Acquire: the previous owner's last writes (it released `counts` to 0) happen before.
        // Acquire on failure too: if another claim took the slot, the next round's key read
        // sees that claim's key (its Release of `counts`), not a stale 0.
        if slot
            .counts
            .compare_exchange(0, STEALING, Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
            return Claim::Lost;
        }
        let old = slot.key.load(Ordering::Relaxed);
        if old != 0
            && (old == key
                || now.saturating_sub(slot.last_active.load(Ordering::Relaxed)) < self.idle_ns)
        {
            // Its owner came back between our scan and the CAS: leave it, and retry the lookup.
            slot.counts.store(0, Ordering::Release);
            return Claim::Lost;
        }
        // Relaxed: a bound counter; the RMW alone keeps it exact.
        if self.active.fetch_add(1, Ordering::Relaxed) >= self.limit {
            self.active.fetch_sub(1, Ordering::Relaxed);
            slot.counts.store(0, Ordering::Release);
            return Claim::Full;
        }
        // We own the slot exclusively: `counts` holds STEALING, so no pin can succeed.
        slot.key.store(key, Ordering::Relaxed);
        slot.credit.store(0, Ordering::Relaxed);
        slot.debt.store(0, Ordering::Relaxed);
        slot.factor.store(FACTOR_ONE, Ordering::Relaxed);
        slot.last_grant.store(now, Ordering::Relaxed);
        slot.first_wait.store(0, Ordering::Relaxed);
        slot.spacing.store(0, Ordering::Relaxed);
        slot.grants_base
            .store(slot.grants_total.load(Ordering::Relaxed), Ordering::Relaxed);
        slot.granted_cost.store(0, Ordering::Relaxed);
        slot.cost_corrections.store(0, Ordering::Relaxed);
        slot.lane_finish.store(0, Ordering::Relaxed);
        slot.lane_interval.store(0, Ordering::Relaxed);
        init(index as SlotId, slot);
        // Release: publishes the new key and fields to every later pin (their Acquire CAS).
        slot.counts
            .store(pins * LIVE_ONE + DEPTH_ONE, Ordering::Release);
        Claim::Claimed
    }

    /// Adds one pin (a `live` count) to a slot the caller already pinned.
    pub(in crate::core) fn pin_again(&self, index: SlotId) {
        // Relaxed: the caller's own pin keeps the slot; ordered before any release of ours by
        // the release's AcqRel RMW.
        self.slots[index as usize]
            .counts
            .fetch_add(LIVE_ONE, Ordering::Relaxed);
    }

    /// Takes a place in a pinned slot's queue of at most `bound` requests (a requeue). Returns
    /// the requests ahead, or `Err` with them when the queue is full. One CAS, so the count never
    /// reads above its bound.
    pub(in crate::core) fn take_spot(&self, index: SlotId, bound: u32) -> Result<u32, u32> {
        let counts = &self.slots[index as usize].counts;
        // Relaxed: a bound on a number (the caller's pin keeps the slot; no data moves with it).
        let mut current = counts.load(Ordering::Relaxed);
        let mut wait = crate::sync::FIRST_CONTENDED_HINTS;
        loop {
            let ahead = Counts(current).depth() as u32;
            if ahead >= bound {
                return Err(ahead);
            }
            match counts.compare_exchange_weak(
                current,
                current + DEPTH_ONE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(ahead),
                Err(seen) => {
                    crate::sync::contended(&mut wait);
                    current = seen;
                }
            }
        }
    }

    /// Gives back a place that no request fills (a refusal, a cancel, an expiry). The caller
    /// still holds a pin, so the slot never goes idle here.
    pub(in crate::core) fn release_spot(&self, index: SlotId) {
        // Relaxed: as `take_spot`.
        let before = self.slots[index as usize]
            .counts
            .fetch_sub(DEPTH_ONE, Ordering::Relaxed);
        debug_assert!(Counts(before).depth() > 0, "tenant depth below zero");
        debug_assert!(
            Counts(before).live() > 0,
            "a place given back without a pin"
        );
    }

    /// The requests the tenant in `index` has waiting now (a snapshot).
    pub(crate) fn depth(&self, index: SlotId) -> u64 {
        // Relaxed: a snapshot.
        Counts(self.slots[index as usize].counts.load(Ordering::Relaxed)).depth()
    }

    /// Announces one entry pushed into the slot's queue, turning one of the caller's pins into
    /// it, in one RMW. Returns the counts before: `queued() == 0` means the caller now holds the
    /// tenant's turn. AcqRel: Release makes the push visible to the holder that sees this count;
    /// Acquire takes over the previous holder's writes when we activate.
    pub(in crate::core) fn announce(&self, index: SlotId) -> Counts {
        Counts(
            self.slots[index as usize]
                .counts
                .fetch_add(QUEUED_ONE.wrapping_sub(LIVE_ONE), Ordering::AcqRel),
        )
    }

    /// Drops `pins` pins (tickets ended, or callers done with the slot). Returns the counts
    /// before.
    pub(in crate::core) fn release_live(&self, index: SlotId, pins: u64, now: u64) -> Counts {
        self.release(index, pins * LIVE_ONE, now)
    }

    /// The turn holder is done with one announced entry; `granted`: it was granted, so its place
    /// goes back too (in the same RMW). Returns the counts before: `queued() <= 1` means the
    /// tenant went idle and the turn is given up.
    pub(in crate::core) fn release_entry(&self, index: SlotId, granted: bool, now: u64) -> Counts {
        let place = if granted { DEPTH_ONE } else { 0 };
        self.release(index, QUEUED_ONE + place, now)
    }

    /// Subtracts `delta` (live and/or queued counts) from a slot. When that leaves it idle, the
    /// time is recorded so the slot can be reused after `tenant_idle_ms`.
    fn release(&self, index: SlotId, delta: u64, now: u64) -> Counts {
        let slot = &self.slots[index as usize];
        // Release: our writes to the slot happen before a thief's Acquire of `counts == 0`.
        let previous = slot.counts.fetch_sub(delta, Ordering::AcqRel);
        debug_assert!(
            previous & QUEUED_MASK >= delta & QUEUED_MASK
                && previous & DEPTH_MASK >= delta & DEPTH_MASK
                && previous & LIVE_MASK >= delta & LIVE_MASK,
            "tenant counts underflow"
        );
        if previous == delta {
            // Written after the slot went idle: a thief may see the older time and take the slot
            // a little early, which only resets an idle tenant's counters.
            if now != 0 {
                slot.last_active.store(now, Ordering::Relaxed);
            }
            let before = self.active.fetch_sub(1, Ordering::Relaxed);
            debug_assert!(before > 0, "active tenants below zero");
        }
        Counts(previous)
    }
}

/// Loom model of a caller that left a tenant to the caller serving it (run by
/// `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// This thread left tenant 0 to a server, which grants it twice more and stops. Each of
    /// this thread's calls answers from what it left (`Empty`) only when it saw a grant during
    /// its wait, so never more often than the server granted; once the server has stopped, the
    /// next call forgets the tenant (the caller picks as usual) and the count of rows that left
    /// one is back to 0.
    #[test]
    fn a_tenant_left_to_its_server_holds_a_caller_off_only_while_it_is_granted() {
        loom::model(|| {
            let table = Arc::new(TenantTable::new(1, 2, 0));
            crate::core::tally::row();
            table.leave_to_server(0);
            let server = {
                let table = Arc::clone(&table);
                thread::spawn(move || {
                    let slot = table.slot(0);
                    for _ in 0..2 {
                        // A load and a store, as the turn holder records a grant.
                        let total = slot.grants_total.load(Ordering::Relaxed);
                        slot.grants_total.store(total + 1, Ordering::Relaxed);
                    }
                })
            };
            let mut empties = 0;
            while table.granted_while_waiting(thread::yield_now) {
                empties += 1;
                assert!(empties <= 2, "held off more often than the server granted");
            }
            server.join().unwrap();
            assert!(
                !table.granted_while_waiting(thread::yield_now),
                "held off after the server stopped"
            );
            // Relaxed: this thread's own writes.
            assert_eq!(table.leaving.load(Ordering::Relaxed), 0);
        });
    }

    /// A caller that keeps answering `Empty` while it remembers a tenant.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "held off")]
    fn broken_left_is_caught() {
        crate::broken::with(
            crate::broken::Break::Left,
            a_tenant_left_to_its_server_holds_a_caller_off_only_while_it_is_granted,
        );
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_pack_three_fields_and_stealing_is_no_count() {
        crate::core::packed::tests::round_trips(&[QUEUED_FIELD, DEPTH_FIELD, LIVE_FIELD]);
        assert_eq!(LIVE_FIELD.end(), 64, "the fields fill the word");
        let counts = Counts(3 * LIVE_ONE + 2 * DEPTH_ONE + QUEUED_ONE);
        assert_eq!((counts.live(), counts.depth(), counts.queued()), (3, 2, 1));
        assert!(!counts.stealing());
        // STEALING is `live` all ones, above any count of pins and tickets.
        assert!(Counts(STEALING).stealing());
    }

    #[test]
    fn pin_found_finds_keys_placed_past_their_home_and_nothing_for_a_key_without_a_slot() {
        let table = TenantTable::new(8, 2, 0);
        // Keys sharing one home slot: the second and third are claimed past it.
        let home = table.home(1);
        let same_home = (1..).filter(|&key| table.home(key) == home);
        let keys: Vec<u64> = same_home.clone().take(3).collect();
        let slots: Vec<u32> = keys
            .iter()
            .map(|&key| table.pin_or_claim(key, 0, 1, 2, |_, _| {}).expect("free").0)
            .collect();
        assert!(slots[0] != slots[1] && slots[1] != slots[2] && slots[0] != slots[2]);
        for (&key, &slot) in keys.iter().zip(&slots) {
            assert_eq!(table.pin_found(key, 1, 2).map(|(s, _)| s), Some(slot));
        }
        let stranger = same_home.clone().nth(3).expect("a fourth key");
        assert_eq!(table.pin_found(stranger, 1, 2), None);
    }
}
