//! Serving one tenant taken from a class: its DRR credit, the permit, the grant, and what
//! happens to the tenant after it (the wide slot for a request that needs every permit).

use super::turn::Staging;
use super::*;

/// Most visits a tenant can make up at once after missing turns while held.
const MAKEUP_VISITS: i64 = 8;

/// Most cost debt (from `complete` corrections) a tenant carries, in class quanta.
const DEBT_QUANTA: i64 = 8;

/// Tenant slots above which a grant prefetches the next grantee's lines: below, they stay in the
/// caches anyway (2048 slots are about 1 MB with their rings).
#[cfg(not(loom))]
const PREFETCH_ABOVE: usize = 2048;

/// How a held tenant came to be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Visit {
    /// A new visit of the rotation: its DRR credit earns a quantum.
    New,
    /// Its visit goes on (its credit covered the head before this one).
    Continues,
    /// A visit through the light-tenant lane (a new one, counted as a lane grant).
    Lane,
}

impl Visit {
    pub(super) fn of(new_visit: bool) -> Visit {
        if new_visit {
            Visit::New
        } else {
            Visit::Continues
        }
    }
}

/// What serving one held tenant produced.
pub(super) enum Served {
    Grant(Grant, u32),
    Expired(Expired),
    /// The tenant had nothing to grant now (parked, idle, blocked): pick again.
    Nothing,
    /// Its DRR visit was spent (credit short of its head's cost): the class's next tenant may
    /// use the pick.
    Spent,
    /// Every permit was out when it came to granting: the tenant was put back.
    AtCapacity,
    /// Its head needs every permit and some were out: the tenant waits in the wide slot.
    WaitsWide,
}

/// What serving the wide slot came to.
pub(super) enum Wide {
    /// `next_grant`'s answer.
    Answer(NextGrant),
    /// Nothing granted, the permits free again: pick as usual.
    Pick,
    /// A wide request was held again: look again.
    Again,
}

impl<H: Hooks> Core<H> {
    /// The permits a grant of `cost` takes: 1, or with seats on its cost (at least 1), at most
    /// all of them.
    #[inline]
    pub(super) fn width(&self, cost: u32) -> u64 {
        if self.limits.seats {
            u64::from(cost).clamp(1, self.permits.max())
        } else {
            1
        }
    }

    /// Holds tenant `t` of `class`, whose head needs every permit, in the wide slot and stops
    /// other grants until the permits out come back. False when another wide request waits
    /// already (then `t` goes back to its class and tries again later).
    fn hold_wide(&self, class: ClassId, t: SlotId) -> bool {
        let held = WIDE_CLASS.put(u64::from(class)) | WIDE_TENANT.put(u64::from(t));
        // Release: the holder's writes to the tenant slot happen before the next holder's take
        // (`serve_wide`), as for a ring push.
        if self
            .wide
            .compare_exchange(NO_WIDE, held, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.permits.wait_wide();
        true
    }

    /// A wide request waits: once no permit is out, takes them all and serves its tenant
    /// (charged its SWRR steps, as a pick would have); until then, `AtCapacity`.
    pub(super) fn serve_wide(&self, now: u64) -> Wide {
        let Some(seats) = self.permits.reserve_wide() else {
            return Wide::Answer(NextGrant::AtCapacity);
        };
        // Acquire: pairs with `hold_wide`'s Release (`reserve_wide`'s Acquire has seen the bit
        // raised after that store).
        let held = self.wide.swap(NO_WIDE, Ordering::AcqRel);
        debug_assert!(held != NO_WIDE, "the wide bit without a wide tenant");
        if held == NO_WIDE {
            self.permits.ungrant(seats);
            return Wide::Pick;
        }
        let (class, t) = (
            WIDE_CLASS.get(held) as ClassId,
            WIDE_TENANT.get(held) as SlotId,
        );
        let total = self.classes.view().total();
        let mut reserved = Some(seats);
        let served = self.serve(t, class, Visit::Continues, total, now, &mut reserved);
        if let Some(seats) = reserved {
            // Not granted with them (its head was cancelled or expired meanwhile).
            self.permits.ungrant(seats);
        }
        match served {
            Served::Grant(grant, cost) => {
                self.classes.charge(class as usize, i64::from(cost.max(1)));
                Wide::Answer(NextGrant::Granted(grant))
            }
            Served::Expired(expired) => Wide::Answer(NextGrant::Expired(expired)),
            Served::AtCapacity => Wide::Answer(NextGrant::AtCapacity),
            Served::WaitsWide => Wide::Again,
            Served::Nothing | Served::Spent => Wide::Pick,
        }
    }

    /// Serves the tenant `t`, just taken from class `class`: sweeps dead heads, reports an expired
    /// one, parks a not-ready one, else grants its head if its DRR credit covers the cost.
    /// `total` is the SWRR weight of the pick (the ready weight), for the fairness indicators.
    /// `reserved`: permits already taken for this tenant's head (a wide request's, from
    /// `serve_wide`); a grant uses them, and what is left in it the caller gives back.
    pub(super) fn serve(
        &self,
        t: SlotId,
        class: ClassId,
        visit: Visit,
        total: i64,
        now: u64,
        reserved: &mut Option<u64>,
    ) -> Served {
        let slot = self.tenants.slot(t);
        let mut new_visit = visit != Visit::Continues;
        loop {
            let head = Ticket(slot.staged.load(Ordering::Relaxed));
            let Some(fields) = self.tickets.fields(head) else {
                debug_assert!(false, "staged handle out of range");
                return Served::Nothing;
            };
            if self.tickets.lookup(head) != Lookup::Live(QUEUED) {
                // Cancelled: sweep the tombstone.
                match self.next_head(t, false, class, now) {
                    Staging::Staged => continue,
                    Staging::Idle => self.leave_ready(t, class, now),
                    Staging::HandedOver => {}
                }
                return Served::Nothing;
            }
            if now > fields.deadline {
                let Some(expired) = self.expire_head(t, head, now) else {
                    continue; // a cancel won; the next round sweeps it
                };
                self.after_turn(t, class, false, now);
                return Served::Expired(expired);
            }
            if fields.not_before > now {
                self.leave_ready(t, class, now);
                self.park(t, fields.not_before, now);
                return Served::Nothing;
            }
            if self.hooks.admit(fields.downstream, now) == Admit::No {
                // Its bulkhead pool is full: it waits there, uncharged, its turn handed over.
                self.leave_ready(t, class, now);
                // Relaxed: the configured weight, a snapshot.
                let weight = slot.weight.load(Ordering::Relaxed);
                if let Some(u) = self
                    .hooks
                    .block(t, fields.downstream, fields.deadline, weight)
                {
                    self.place(u, None, false, now);
                }
                return Served::Nothing;
            }
            let cost = fields.cost;
            let mut credit = slot.credit.load(Ordering::Relaxed);
            if new_visit {
                if slot.debt.load(Ordering::Relaxed) != 0 {
                    let debt = slot.debt.swap(0, Ordering::Relaxed);
                    credit = credit.saturating_sub(debt.saturating_mul(i64::from(FACTOR_ONE)));
                }
                let quantum = i64::from(self.classes.quantum(class, cost));
                // Visits it missed while another granter held it are made up (a few at most). A
                // lane visit is outside the ring's turns: it neither counts as one nor makes any
                // up, or the ring's tenants would take the lane's visits for missed turns.
                let owed = if visit == Visit::Lane {
                    self.classes.lane_visit(class, &slot.last_visit)
                } else {
                    self.classes
                        .start_visit(class, &slot.last_visit, MAKEUP_VISITS)
                };
                // A tenant at a reduced effective weight (fleet mode) earns credit in proportion.
                let earned = quantum * owed * i64::from(slot.factor.load(Ordering::Relaxed));
                // Debt is capped at DEBT_QUANTA quanta, so a few visits always cover the head.
                credit = credit.max(-DEBT_QUANTA * quantum * i64::from(FACTOR_ONE)) + earned;
                slot.credit.store(credit, Ordering::Relaxed);
                new_visit = false;
            }
            if credit < i64::from(cost) * i64::from(FACTOR_ONE) {
                // This visit is spent; the next one adds a quantum.
                if let Some(u) = self.hooks.unadmit(fields.downstream) {
                    self.place(u, None, false, now);
                }
                self.classes.put_back(class, t, false, slot);
                return Served::Spent;
            }
            // The permit: one CAS (the request's global place stays counted until it ends).
            let width = self.width(cost);
            let permitted = match reserved.take() {
                Some(seats) => {
                    self.permits.trim_reserved(seats, width);
                    Ok(())
                }
                None => self.permits.grant(width),
            };
            if permitted.is_err() {
                if let Some(u) = self.hooks.unadmit(fields.downstream) {
                    self.place(u, None, false, now);
                }
                if width == self.permits.max() && self.limits.seats && self.hold_wide(class, t) {
                    // It needs every permit: it waits for them in the wide slot, and no other
                    // grant starts meanwhile.
                    broken!(Held, {
                        // Broken on purpose: answers at once, though the grants out may have
                        // ended before the bit was raised.
                        return Served::AtCapacity;
                    });
                    return Served::WaitsWide;
                }
                // Its credit covers the head: it stays next in its class.
                self.classes.put_back(class, t, true, slot);
                self.note_wait();
                return Served::AtCapacity;
            }
            if self.limits.seats {
                // Relaxed: a gauge. Counted before the ticket can be ended (a cancel may end it
                // the moment it is granted), so the count never reads below zero.
                self.grants_out.fetch_add(1, Ordering::Relaxed);
            }
            if !self.tickets.transition(head, QUEUED, GRANTED) {
                // A cancel won, and gave the request's place back itself.
                self.permits.ungrant(width);
                if self.limits.seats {
                    // Relaxed: a gauge.
                    self.grants_out.fetch_sub(1, Ordering::Relaxed);
                }
                if let Some(u) = self.hooks.unadmit(fields.downstream) {
                    self.place(u, None, false, now);
                }
                continue; // the next round sweeps it
            }
            slot.credit.store(
                credit - i64::from(cost) * i64::from(FACTOR_ONE),
                Ordering::Relaxed,
            );
            // Its place in the tenant's queue goes back in `after_turn`, with its entry (the
            // global place when the grant ends).
            self.hooks.queued(fields.downstream, -1);
            let ready_at = fields.not_before.max(fields.enqueued_at);
            if let Some(spacing) = slot.record_grant(cost, now, ready_at) {
                // Relaxed: a hint for estimates, written by one grant in 64 of a tenant.
                let hint = u64::from(spacing).saturating_mul(slot.effective_weight());
                self.spacing_hint.store(hint, Ordering::Relaxed);
            }
            if visit == Visit::Lane {
                slot.record_lane_grant();
            }
            let start = self.classes.start();
            if self.limits.light_lane || start != Start::Done {
                self.record_served(slot, class, cost, total, visit, start);
            }
            let waited_ns = now.saturating_sub(fields.enqueued_at);
            let event = GrantEvent {
                slot: t,
                class,
                weight: slot.effective_weight(),
                cost,
                total,
                waited_ns,
                now,
            };
            if let Some(boosted) = self.hooks.granted(&event) {
                self.classes.add_extra(boosted, -1);
            }
            let grant = Grant {
                ticket: head,
                tenant: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
                user_data: fields.user_data,
                cost,
                waited_ns,
                position: fields.position,
                estimated_wait_ns: fields.estimated_wait,
                remaining_budget_ns: fields.deadline.saturating_sub(now),
            };
            if visit == Visit::Lane && self.requeue_in_lane(t, class, now) {
                return Served::Grant(grant, cost);
            }
            self.after_turn(t, class, true, now);
            // Hints for a prefetch, which is a no-op under loom (their atomics would only
            // multiply the interleavings the models explore), and pays only when the tenant table
            // outgrows the caches.
            #[cfg(not(loom))]
            if self.tenants.len() > PREFETCH_ABOVE {
                self.prefetch_successor(t, class);
            }
            return Served::Grant(grant, cost);
        }
    }

    /// Counts a grant of `cost` in `class` on the lane's clock and, with the lane on, charges
    /// it to tenant `slot`. During the start-up (`classes/start.rs`), a grant in
    /// the first window is shared against every class present, and a lane grant right after it
    /// pays its SWRR step, so the start-up's lane entries take nothing from the split.
    fn record_served(
        &self,
        slot: &TenantSlot,
        class: ClassId,
        cost: u32,
        mut total: i64,
        visit: Visit,
        start: Start,
    ) {
        match start {
            Start::Open | Start::Waiting => total = total.max(self.classes.present_total()),
            Start::Charged if visit == Visit::Lane => {
                self.classes.charge(class as usize, i64::from(cost));
            }
            _ => {}
        }
        if self.limits.light_lane {
            lane::charge(slot, cost, total, self.classes.served());
            self.classes.lane().granted(cost, visit == Visit::Lane);
        }
        self.classes.record_served(class, cost);
        if start != Start::Done {
            let window = self.permits.max();
            let limit = if start == Start::Charged {
                2 * window
            } else {
                window
            };
            if self.classes.served() > limit {
                self.classes.end_start();
            }
        }
    }

    /// Round robin makes the next grant in a class predictable: the tenant granted after `t`
    /// last round. Records `t` (and its staged head) as the successor of the class's previous
    /// grantee, whose lines are still warm, and prefetches the lines of `t`'s own successor and of
    /// its head ticket, which with thousands of tenants are cache misses otherwise. Hints only:
    /// Relaxed, stored only when they change, and a stale one costs a wasted prefetch.
    #[cfg(not(loom))]
    fn prefetch_successor(&self, t: SlotId, class: ClassId) {
        let slot = self.tenants.slot(t);
        let before = self.classes.swap_last_granted(class, t);
        if before != t && (before as usize) < self.tenants.len() {
            let previous = self.tenants.slot(before);
            let head = Ticket(slot.staged.load(Ordering::Relaxed)).index();
            previous.set_successor(t, head);
        }
        let (next, next_head) = slot.successor();
        if (next as usize) < self.tenants.len() {
            self.tenants.slot(next).prefetch();
            self.tickets.prefetch(next_head);
            self.hooks.prefetch(next);
        }
    }

    /// The holder of tenant `t`, counted ready in `class`, is done with the staged head: stage
    /// the next one if any. `granted`: the head was granted, so its place in the tenant's queue
    /// goes back with its entry.
    fn next_head(&self, t: SlotId, granted: bool, class: ClassId, now: u64) -> Staging {
        if self.tenants.release_entry(t, granted, now).queued() <= 1 {
            return Staging::Idle;
        }
        self.stage(t, Some(class), now)
    }

    /// Holder: whether tenant `t`, taken by the rotation while the lane holds tenants, goes
    /// before the lane (`lane::due`) at virtual time `now_v`, the ready weight being `total`.
    pub(super) fn due(&self, t: SlotId, now_v: u64, total: i64) -> bool {
        let slot = self.tenants.slot(t);
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        let cost = self.tickets.fields(head).map_or(1, |fields| fields.cost);
        let (streak, depth) = (self.classes.lane().streak(), self.tenants.depth(t));
        lane::due(slot, cost, total, now_v, streak, depth)
    }

    /// After a lane grant: a tenant with a ready head that is still within its share goes back
    /// to the lane's tail instead of its class's ring. True when it was placed (or went idle).
    fn requeue_in_lane(&self, t: SlotId, class: ClassId, now: u64) -> bool {
        let slot = self.tenants.slot(t);
        let now_v = self.classes.served();
        if !(self.lane_open.load(Ordering::Relaxed) && lane::within_share(slot, now_v)) {
            return false;
        }
        // Each lane visit earns a quantum and grants once: what it left unspent is dropped, as
        // DRR drops an emptied flow's deficit, or lane visits would bank credit for the ring.
        // Relaxed: the turn holder's.
        let credit = slot.credit.load(Ordering::Relaxed);
        slot.credit.store(credit.min(0), Ordering::Relaxed);
        match self.next_head(t, true, class, now) {
            Staging::Staged => {}
            Staging::Idle => {
                self.leave_ready(t, class, now);
                return true;
            }
            Staging::HandedOver => return true,
        }
        let head = Ticket(slot.staged.load(Ordering::Relaxed));
        if self.tickets.not_before(head) > now || slot.class.load(Ordering::Relaxed) != class {
            self.place(t, Some(class), false, now);
        } else {
            self.classes.lane_push(class, t);
        }
        true
    }

    /// After a grant or an expiry: stage the next head and place the tenant, or let it go idle.
    fn after_turn(&self, t: SlotId, class: ClassId, granted: bool, now: u64) {
        match self.next_head(t, granted, class, now) {
            Staging::Staged => {}
            Staging::Idle => return self.leave_ready(t, class, now),
            Staging::HandedOver => return,
        }
        let slot = self.tenants.slot(t);
        let visit_continues = granted && {
            let next_cost = self
                .tickets
                .fields(Ticket(slot.staged.load(Ordering::Relaxed)))
                .map_or(u32::MAX, |f| f.cost);
            slot.credit.load(Ordering::Relaxed) >= i64::from(next_cost) * i64::from(FACTOR_ONE)
        };
        self.place(t, Some(class), visit_continues, now);
    }

    /// Ends a queued head whose deadline passed. `None` if a cancel ended it first.
    fn expire_head(&self, t: SlotId, head: Ticket, now: u64) -> Option<Expired> {
        let fields = self.tickets.fields(head)?;
        if !self.tickets.end(head, QUEUED) {
            return None;
        }
        self.unreserve(t);
        self.hooks.queued(fields.downstream, -1);
        let waited_ns = now.saturating_sub(fields.enqueued_at);
        // Before the release below: the slot is still pinned by this ticket.
        self.hooks
            .refused_after_wait(t, waited_ns, true, true, u64::from(head.index()));
        let key = self.tenants.slot(t).key.load(Ordering::Relaxed);
        self.tenants.release_live(t, 1, now);
        self.counters.bump(|c| &c.expired);
        self.counters
            .bump(|c| &c.refused[Reason::DeadlineExceeded.index()]);
        Some(Expired {
            ticket: head,
            tenant: TenantKey::from_hash(key),
            user_data: fields.user_data,
            refusal: Refusal {
                reason: Reason::DeadlineExceeded,
                position: fields.position,
                waited_ns,
            },
        })
    }
}
