//! The scheduler core: tickets, the tenant table, weight classes, the timing wheel and permits,
//! and the operations over them (`enqueue`, `next_grant`, `complete`, `cancel`, `expire`).
//!
//! The core is complete on its own. Features (fairness indicators, weight policies, bulkheads)
//! plug in through one seam, [`Hooks`] (`hooks.rs`), whose no-op defaults compile away; the core
//! imports none of them.
//!
//! # The life of a grant
//! One request on the default configuration (no Retry-After, unit cost, seats off), one file per
//! step:
//!
//! 1. `enqueue.rs`, `Core::enqueue`: the tenant's slot is found by its key's hash, or claimed
//!    (`tenants/`, open addressing), and pinned with a place in its queue in one RMW. The
//!    global queue bound is reserved (`permits.rs`), a ticket is taken from the slab and filled
//!    (`tickets.rs`), and its handle pushed into the tenant's ring (`ring.rs`). The enqueuer
//!    whose push raises the tenant's `queued` count from 0 holds the tenant's *turn* (below).
//! 2. `turn.rs`, `activate`: the turn holder stages the tenant's head (takes it from the ring
//!    into `staged`) and places the tenant: ready, so into its weight class's ring
//!    (`classes/`), or into the light-tenant lane if it has had no more than its share lately
//!    (`lane.rs`).
//! 3. `grant.rs`, `Core::next_grant`: a read of the permit word says whether a permit is free.
//!    The lane goes first; otherwise a pick runs smooth weighted round robin over the classes
//!    (`classes/swrr.rs`, batched picks), and the picked class gives the tenant at its ring head.
//! 4. `serve.rs`, `serve`: a new visit adds a quantum to the tenant's deficit-round-robin
//!    credit; if the credit covers the head's cost, one CAS takes the permit and one CAS moves
//!    the ticket from queued to granted. The tenant's next head is staged and the tenant placed
//!    again (`after_turn`), or it goes idle and gives up its turn.
//! 5. `complete.rs`, `Core::complete`: one CAS ends the ticket, the permit and the global place
//!    go back and the tenant's pin is released (`tenants/`); an idle slot is reused after
//!    `tenant_idle_ms`.
//!
//! Off that path: the timing wheel (`wheel.rs`, a head with a Retry-After), the wide slot (seats
//! on, a request that needs every permit), cost corrections and debt (`complete` with an actual
//! cost), the start-up charge (`classes/start.rs`, only until requests first
//! wait), visitors left to another caller and the spin on a held class (`classes/visitor.rs`, several
//! callers), and ring compaction and turn hand-overs (`ring.rs`, cancels and racing producers).
//! The hooks (`hooks.rs`) are called at each step; by default only the fairness indicators do
//! work there, and every feature that is off is a check of an `Option`. `admin.rs` holds what
//! runs off the hot path: weights, what features read and set, statistics. `docs/design.md`
//! has a table of the mechanisms.
//!
//! # Who holds a tenant's turn
//! At any time at most one thread holds a tenant's *turn*: the right to pop its queue, stage its
//! head and place it (in a class ring, the timing wheel, or nowhere when it goes idle). The turn
//! passes through the tenant's `queued` count (see `tenants/`): the enqueuer that raises it from
//! 0 activates the tenant; a granter that pops the tenant from its class ring holds it until it
//! puts it back; a wheel drainer holds it while it decides; a feature that blocked it (a full
//! bulkhead pool) holds it until it hands it back; a holder whose next entry is counted but not
//! written yet hands it to that entry's writer (`ring.rs`) rather than wait. So the staged head
//! and the DRR credit need no synchronisation of their own.
//!
//! # Hot path
//! `enqueue`, `next_grant`, `complete` and `cancel` allocate nothing and take no lock: atomics,
//! ring pushes and pops, and a read of the weight table through `ArcSwap`.

mod admin;
pub(crate) mod classes;
mod complete;
mod enqueue;
mod grant;
pub(crate) mod hooks;
mod ids;
mod lane;
mod packed;
mod permits;
mod ring;
mod serve;
mod status;
mod tally;
mod tenants;
mod tickets;
mod turn;
mod wheel;

use crate::identity::TenantKey;
use crate::limits::{FACTOR_ONE, MAX_COST, MAX_WEIGHT, MIN_FLEET_FACTOR, MS};
use crate::sync::{AtomicBool, AtomicU64, Backoff, CachePadded, Mutex, Ordering, SharedPtr};
use crate::types::{
    Completion, Enqueued, Error, Expired, Grant, NextGrant, Outcome, Reason, Refusal, Request,
    Stats, Ticket,
};
use crate::weights::WeightTable;

pub(crate) use classes::class_count;
pub(crate) use classes::ClassView;
use classes::{ClassWeights, Classes, Start, Take};
pub(crate) use hooks::{Admit, CoreAccess, GrantEvent, Hooks, NoHooks, TenantView};
pub(crate) use ids::{ClassId, SlotId};
use packed::Field;
use permits::{Capacity, Permits};
#[cfg(not(loom))]
pub(crate) use ring::hand_overs;
#[cfg(loom)]
pub use ring::set_full_rings;
use ring::{Next, Turn};
pub(crate) use status::SlotStatus;
use tally::Tallies;
pub(crate) use tenants::{ring_capacity, slot_count};
use tenants::{TenantSlot, TenantTable};
use tickets::{Lookup, TicketSlab, GRANTED, QUEUED, REQUEUING};
use wheel::{Wheel, LATEST_NOT_BEFORE};

#[cfg(loom)]
pub use classes::with_batched_picks;

/// The clock high-water mark is rewritten at most this often (ns).
const CLOCK_STEP: u64 = MS;

/// The wide slot is empty (no class index reaches `u32::MAX`).
const NO_WIDE: u64 = u64::MAX;
/// The wide slot's fields: the waiting tenant and its class.
const WIDE_TENANT: Field = Field::first(32);
const WIDE_CLASS: Field = Field::after(WIDE_TENANT, 32);

/// The sizes and bounds the core is built with (from `Config`, validated there).
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) max_tenants: u32,
    pub(crate) tenant_queue_capacity: u32,
    pub(crate) queue_capacity: u32,
    pub(crate) max_in_flight: u32,
    pub(crate) default_weight: u32,
    pub(crate) max_wait_ns: u64,
    pub(crate) tenant_idle_ns: u64,
    pub(crate) max_weight_classes: u32,
    /// Weights whose classes exist from the start and are never freed (tiers).
    pub(crate) permanent_weights: Vec<u32>,
    /// `max_in_flight` counts cost units (seats), not requests.
    pub(crate) seats: bool,
    /// Tenants that become ready below their share are served first (`lane.rs`).
    pub(crate) light_lane: bool,
}

/// One tenant as fleet mode's sync loop sees it (`Engine::fleet_tenants`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetTenant {
    /// The tenant.
    pub tenant: TenantKey,
    /// Its configured weight.
    pub weight: u32,
    /// Its effective-weight factor now (1024 = full weight).
    pub factor: u32,
    /// Cost units granted here since it took its slot.
    pub served_cost: u64,
    /// Requests it has queued here now.
    pub queued: u64,
}

/// The scheduler core, with the features `H` plugged into its seam.
pub(crate) struct Core<H> {
    limits: Limits,
    tickets: TicketSlab,
    tenants: TenantTable,
    classes: Classes,
    wheel: Wheel,
    weights: SharedPtr<WeightTable>,
    /// Serialises weight-table writers and class allocation (never taken on the hot path).
    admin: Mutex<()>,
    /// Requests queued and grants out: the global bound and the in-flight permits.
    permits: Permits,
    /// The tenant of a wide request waiting for every permit (seats on): `WIDE_CLASS` and
    /// `WIDE_TENANT`, or `NO_WIDE` (`permits.rs` explains the hand-off).
    wide: CachePadded<AtomicU64>,
    /// With seats on, the permit word counts seats: this counts the grants out (`stats`).
    grants_out: CachePadded<AtomicU64>,
    /// Whether tenants that become ready may enter the light-tenant lane: the config's switch,
    /// cleared for good once fleet mode schedules a tenant at an effective weight (lane grants
    /// would bypass the weights fleet mode steers by).
    lane_open: AtomicBool,
    /// The latest `now` seen, kept to `CLOCK_STEP`: a clock that goes backwards is held here.
    clock: CachePadded<AtomicU64>,
    /// A recent tenant's grant spacing times its effective weight (`tenants::Waits`): what a
    /// tenant with no measured waits of its own is estimated from.
    spacing_hint: CachePadded<AtomicU64>,
    counters: Tallies,
    hooks: H,
}

impl<H: Hooks> Core<H> {
    /// Builds the core: every table is allocated here, none later.
    pub(crate) fn new(limits: Limits, hooks: H) -> Core<H> {
        let slots = slot_count(limits.max_tenants as usize);
        let classes = Classes::new(class_count(limits.max_weight_classes), slots);
        classes.make_permanent(limits.default_weight);
        for &weight in &limits.permanent_weights {
            classes.make_permanent(weight); // validated to fit max_weight_classes
        }
        Core {
            tickets: TicketSlab::new(
                limits.queue_capacity as usize + limits.max_in_flight as usize,
            ),
            tenants: TenantTable::new(
                limits.max_tenants as usize,
                limits.tenant_queue_capacity as usize,
                limits.tenant_idle_ns,
            ),
            classes,
            wheel: Wheel::new(0),
            weights: SharedPtr::new(WeightTable::new(limits.default_weight)),
            admin: Mutex::new(()),
            permits: Permits::new(limits.queue_capacity, limits.max_in_flight),
            wide: CachePadded::new(AtomicU64::new(NO_WIDE)),
            grants_out: CachePadded::new(AtomicU64::new(0)),
            spacing_hint: CachePadded::new(AtomicU64::new(0)),
            lane_open: AtomicBool::new(limits.light_lane),
            clock: CachePadded::new(AtomicU64::new(0)),
            counters: Tallies::new(),
            limits,
            hooks,
        }
    }

    /// The features plugged in.
    pub(crate) fn hooks(&self) -> &H {
        &self.hooks
    }

    /// Makes the core's view of time monotonic: a `now` behind the high-water mark is raised
    /// to it. The mark is rewritten only when time moved `CLOCK_STEP` on, so the hot path
    /// mostly reads a shared line rather than writing it.
    fn monotonic(&self, now: u64) -> u64 {
        // Relaxed: the mark orders nothing; it only bounds how far back `now` may go.
        let mark = self.clock.load(Ordering::Relaxed);
        if now < mark {
            return mark;
        }
        if now - mark >= CLOCK_STEP {
            self.clock.fetch_max(now, Ordering::Relaxed);
        }
        now
    }
}
