//! What a status dump reads of the live tables: one row per tenant with requests queued or in
//! flight, each read under a pin (a consistent view of that tenant), without stopping the
//! scheduler. Off the hot path: a scan of the tenant table, and nothing the grant path waits on.

use super::*;
use crate::sync::fence;
use crate::types::StatusOrder;

/// One tenant as a status dump sees it (`Core::busiest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotStatus {
    pub(crate) key: TenantKey,
    /// Configured weight.
    pub(crate) weight: u32,
    /// The weight it is scheduled at now: its class's weight (the feedback controller may have
    /// moved it) times its fleet factor.
    pub(crate) effective_weight: u32,
    /// Requests waiting (cancelled ones excluded).
    pub(crate) queued: u64,
    /// Grants out and not yet ended.
    pub(crate) in_flight: u64,
    /// Grants since the tenant took its slot.
    pub(crate) granted: u64,
    /// How long the request at the head of its queue has waited (ns); 0 with none queued.
    pub(crate) oldest_wait_ns: u64,
    /// At most one request waiting, and no more than its share lately: a tenant the light-tenant
    /// lane serves first whenever its request becomes ready.
    pub(crate) light: bool,
    /// Its head has a Retry-After: how long until it may be granted (ns).
    pub(crate) parked_for_ns: Option<u64>,
}

impl<H: Hooks> Core<H> {
    /// The `k` tenants with the most requests queued, or whose head has waited longest, first
    /// in that order, into `out` (cleared first). Returns how many tenants had requests queued
    /// or in flight. O(`max_tenants`); each row is read under a pin, the rows together are not
    /// one instant's picture.
    pub(crate) fn busiest(
        &self,
        k: usize,
        order: StatusOrder,
        now: u64,
        out: &mut Vec<SlotStatus>,
    ) -> usize {
        // Read, never raised: a dump must not move the engine's clock (a dump "an hour later"
        // would expire every queued request). Relaxed: as in `monotonic`.
        let now = now.max(self.clock.load(Ordering::Relaxed));
        out.clear();
        let rank = |s: &SlotStatus| match order {
            StatusOrder::Depth => (s.queued, s.oldest_wait_ns),
            StatusOrder::OldestWait => (s.oldest_wait_ns, s.queued),
        };
        let mut busy = 0;
        for t in 0..self.tenants.len() as SlotId {
            let Some(row) = self.slot_status(t, now) else {
                continue;
            };
            busy += 1;
            if k == 0 {
                continue;
            }
            // A sorted list of at most k rows: k is a page of a dump, not the table.
            let at = out.partition_point(|kept| rank(kept) >= rank(&row));
            if at < k {
                if out.len() == k {
                    out.pop();
                }
                out.insert(at, row);
            }
        }
        busy
    }

    /// The row of the tenant in slot `t`, if it has requests queued or in flight.
    fn slot_status(&self, t: SlotId, now: u64) -> Option<SlotStatus> {
        let slot = self.tenants.get(t)?;
        // Relaxed: a first look, to skip idle slots without pinning them.
        if slot.counts.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.tenants.pin_index(t)?;
        let row = self.read_pinned(t, now);
        // Time 0: a dump records no activity (nor a time from the caller's clock) on the slot.
        self.tenants.release_live(t, 1, 0);
        row
    }

    /// Reads the pinned slot `t`: the key cannot change while the pin holds.
    fn read_pinned(&self, t: SlotId, now: u64) -> Option<SlotStatus> {
        let slot = self.tenants.slot(t);
        // One read of the counts word: queued and live belong to the same instant.
        let counts = self.tenants.counts(t);
        // `live` counts the tickets not ended (queued and granted) and the pins, ours included.
        let in_flight = counts.live().saturating_sub(counts.depth() + 1);
        if counts.depth() == 0 && in_flight == 0 {
            return None;
        }
        // Relaxed: statistics, pinned to this tenant.
        let class = slot.class.load(Ordering::Relaxed);
        let factor = u64::from(slot.factor.load(Ordering::Relaxed));
        let effective = u64::from(self.classes.weight(class)) * factor / u64::from(FACTOR_ONE);
        let (oldest_wait_ns, parked_for_ns) = match self.head_of(t, slot) {
            Some(head) if counts.depth() > 0 => (
                now.saturating_sub(head.enqueued_at),
                (head.not_before > now).then(|| head.not_before - now),
            ),
            _ => (0, None),
        };
        Some(SlotStatus {
            key: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
            weight: slot.weight.load(Ordering::Relaxed),
            effective_weight: effective.min(u64::from(u32::MAX)) as u32,
            queued: counts.depth(),
            in_flight,
            granted: slot.granted(),
            oldest_wait_ns,
            light: self.limits.light_lane
                && counts.depth() <= 1
                && lane::at_or_below_share(slot, self.classes.served()),
            parked_for_ns,
        })
    }

    /// The fields of tenant `t`'s staged head while it is queued, read between two looks at its
    /// state word. The turn holder may grant the head meanwhile: a ticket reused by another
    /// tenant is never taken for it, and at worst the tenant's next request shows.
    fn head_of(&self, t: SlotId, slot: &TenantSlot) -> Option<tickets::Fields> {
        // Relaxed: the turn holder's; the state checks below decide whether it is still there.
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        if self.tickets.lookup(head) != Lookup::Live(QUEUED) {
            return None;
        }
        let fields = self.tickets.fields(head)?;
        // Acquire fence: the field loads above happen before the second look, so a writer that
        // refilled the cell must have moved its state word first, and the look sees that.
        fence(Ordering::Acquire);
        (fields.tenant == t && self.tickets.lookup(head) == Lookup::Live(QUEUED)).then_some(fields)
    }
}
