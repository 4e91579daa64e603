//! The ticket slab: a fixed array of request records and a lock-free free list.
//!
//! The free list is a LIFO (Treiber) stack, so `enqueue` reuses the cell `complete` just freed,
//! which is still in the cache; a FIFO handed out the coldest cell, a miss per cycle at thousands
//! of tenants. Its head packs `tag << 32 | index + 1` (0: empty); the tag grows with every push
//! and pop, so a pop that read a stale link fails its CAS (no ABA). A free cell's `position`
//! holds its link.
//!
//! Each record's `state` word packs `generation << 32 | state`. Every transition is a CAS on that
//! word, so exactly one caller wins any race (grant against cancel, complete against complete),
//! and a handle whose generation differs is stale. Ending a ticket bumps the generation before the
//! slot returns to the free list, so an old handle can never reach the next request.
//!
//! The other fields are written only by the thread that owns the ticket (the enqueuer before it
//! publishes the handle, a completer that won the CAS into `REQUEUING`), and read by the thread
//! that pops the handle from a tenant queue. The queue's push (Release) / pop (Acquire) carries
//! them, so they are plain `Relaxed` atomics.

use crate::core::packed::Field;
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Ordering};
use crate::table::Table;
use crate::types::Ticket;

/// Free: on the free list.
pub(crate) const FREE: u32 = 0;
/// In a tenant queue (or staged as its head), waiting for a grant.
pub(crate) const QUEUED: u32 = 1;
/// Granted: holds an in-flight permit until complete or cancel.
pub(crate) const GRANTED: u32 = 2;
/// Owned by one completer while it requeues the ticket.
pub(crate) const REQUEUING: u32 = 3;

/// The fields of a cell's `state` word: its state, and the generation of the handle that owns it.
const STATE: Field = Field::first(32);
const GENERATION: Field = Field::after(STATE, 32);

fn pack(generation: u32, state: u32) -> u64 {
    GENERATION.put(u64::from(generation)) | STATE.put(u64::from(state))
}

/// The state in a cell's `state` word.
fn state_of(word: u64) -> u32 {
    STATE.get(word) as u32
}

/// The generation in a cell's `state` word.
fn generation_of(word: u64) -> u32 {
    GENERATION.get(word) as u32
}

/// One request record, one cache line.
#[repr(align(64))]
struct TicketCell {
    /// `GENERATION` and `STATE`; the single source of truth for who owns the ticket.
    state: AtomicU64,
    /// Tenant slot index.
    tenant: AtomicU32,
    /// Cost in resource units.
    cost: AtomicU32,
    /// Position at (re)enqueue. While the cell is free: the free-list link (`index + 1` of the
    /// next free cell, 0 at the bottom).
    position: AtomicU32,
    /// Downstream class (bulkhead pool) it goes to; fills the padding before `user_data`.
    downstream: AtomicU32,
    /// Caller data.
    user_data: AtomicU64,
    /// Absolute deadline (ns): never granted after it.
    deadline: AtomicU64,
    /// Not ready before this time (ns).
    not_before: AtomicU64,
    /// First enqueue time (ns).
    enqueued_at: AtomicU64,
    /// Estimated wait made at (re)enqueue (ns).
    estimated_wait: AtomicU64,
}

/// A ticket's fields, as written at (re)enqueue and read by whoever owns the ticket next.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fields {
    /// Tenant slot index.
    pub(crate) tenant: u32,
    /// Cost in resource units.
    pub(crate) cost: u32,
    /// Position at (re)enqueue.
    pub(crate) position: u32,
    /// Downstream class (bulkhead pool).
    pub(crate) downstream: u32,
    /// Caller data.
    pub(crate) user_data: u64,
    /// Absolute deadline (ns): never granted after it.
    pub(crate) deadline: u64,
    /// Not ready before this time (ns).
    pub(crate) not_before: u64,
    /// First enqueue time (ns).
    pub(crate) enqueued_at: u64,
    /// Estimated wait made at (re)enqueue (ns).
    pub(crate) estimated_wait: u64,
}

/// The state of a ticket as seen through a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The handle's generation is current; this is the state.
    Live(u32),
    /// The handle is stale or out of range.
    Stale,
}

pub(crate) struct TicketSlab {
    cells: Table<TicketCell>,
    /// Head of the free stack: `TAG` and `LINK` (the top cell's index + 1, 0 when empty).
    free: CachePadded<AtomicU64>,
}

/// The free stack head's fields: the top cell's index + 1, and a tag that every push and pop
/// moves on (so a stale head's CAS fails, however the stack changed meanwhile).
const LINK: Field = Field::first(32);
const TAG: Field = Field::after(LINK, 32);
const TAG_ONE: u64 = TAG.one();
const LINK_MASK: u64 = LINK.mask();

impl TicketSlab {
    pub(crate) fn new(capacity: usize) -> TicketSlab {
        let cells: Table<TicketCell> = (0..capacity)
            .map(|_| TicketCell {
                // Generation starts at 1, so no valid handle is 0.
                state: AtomicU64::new(pack(1, FREE)),
                tenant: AtomicU32::new(0),
                cost: AtomicU32::new(0),
                position: AtomicU32::new(0),
                downstream: AtomicU32::new(0),
                user_data: AtomicU64::new(0),
                deadline: AtomicU64::new(0),
                not_before: AtomicU64::new(0),
                enqueued_at: AtomicU64::new(0),
                estimated_wait: AtomicU64::new(0),
            })
            .collect();
        // Every cell free, cell 0 on top: each links to the next one.
        for (i, cell) in cells.as_slice().iter().enumerate() {
            let next = if i + 1 < capacity { i as u32 + 2 } else { 0 };
            cell.position.store(next, Ordering::Relaxed);
        }
        let top = if capacity > 0 { 1 } else { 0 };
        TicketSlab {
            cells,
            free: CachePadded::new(AtomicU64::new(top)),
        }
    }

    /// Takes a free cell; returns its handle. The cell is `FREE` and owned by the caller until it
    /// moves it to `QUEUED` with [`TicketSlab::publish`].
    pub(crate) fn alloc(&self) -> Option<Ticket> {
        // Acquire: pairs with the Release of the push that put the top cell there, so its link
        // and its freed state are visible.
        let mut head = self.free.load(Ordering::Acquire);
        let mut wait = crate::sync::FIRST_CONTENDED_HINTS;
        let index = loop {
            let top = LINK.get(head);
            if top == 0 {
                return None;
            }
            let index = (top - 1) as u32;
            // Relaxed: ordered by the Acquire above. If another caller popped this cell since,
            // the link may be garbage, but the tag moved on and the CAS below fails.
            let next = u64::from(self.cells[index as usize].position.load(Ordering::Relaxed));
            let popped = (head & !LINK_MASK).wrapping_add(TAG_ONE) | next;
            broken!(FreeList, {
                // Broken on purpose: two allocs can pop the same cell.
                self.free.store(popped, Ordering::Release);
                break index;
            });
            // Acquire on failure too: the next round reads the new top's link.
            match self.free.compare_exchange_weak(
                head,
                popped,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => break index,
                Err(seen) => {
                    crate::sync::contended(&mut wait);
                    head = seen;
                }
            }
        };
        // Acquire: pairs with the Release that freed the cell, so its old fields are settled.
        let word = self.cells[index as usize].state.load(Ordering::Acquire);
        debug_assert_eq!(state_of(word), FREE, "a popped ticket cell is not free");
        Some(Ticket::new(index, generation_of(word)))
    }

    /// Pushes a cell the caller just freed onto the free stack.
    fn release(&self, index: u32) {
        let cell = &self.cells[index as usize];
        let mut head = self.free.load(Ordering::Relaxed);
        let mut wait = crate::sync::FIRST_CONTENDED_HINTS;
        loop {
            // Relaxed: published by the Release CAS below.
            cell.position
                .store(LINK.get(head) as u32, Ordering::Relaxed);
            let pushed = (head & !LINK_MASK).wrapping_add(TAG_ONE) | (u64::from(index) + 1);
            // Release: the link and the cell's FREE state before the cell is reachable.
            match self.free.compare_exchange_weak(
                head,
                pushed,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => {
                    crate::sync::contended(&mut wait);
                    head = seen;
                }
            }
        }
    }

    /// Starts loading cell `index` into the cache (a hint; out of range does nothing).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn prefetch(&self, index: u32) {
        if let Some(cell) = self.cells.get(index as usize) {
            crate::sync::prefetch(cell, std::mem::size_of::<TicketCell>());
        }
    }

    /// The cell a handle names, if the index is in range. The generation is not checked here.
    fn cell(&self, ticket: Ticket) -> Option<&TicketCell> {
        self.cells.get(ticket.index() as usize)
    }

    /// Writes a freshly allocated ticket's fields (the caller owns it until `publish`).
    pub(crate) fn fill(&self, ticket: Ticket, f: Fields) {
        if let Some(cell) = self.cell(ticket) {
            // Relaxed: published by `publish` (state Release) and the queue push (Release).
            cell.tenant.store(f.tenant, Ordering::Relaxed);
            cell.cost.store(f.cost, Ordering::Relaxed);
            cell.position.store(f.position, Ordering::Relaxed);
            cell.downstream.store(f.downstream, Ordering::Relaxed);
            cell.user_data.store(f.user_data, Ordering::Relaxed);
            cell.deadline.store(f.deadline, Ordering::Relaxed);
            cell.not_before.store(f.not_before, Ordering::Relaxed);
            cell.enqueued_at.store(f.enqueued_at, Ordering::Relaxed);
            cell.estimated_wait
                .store(f.estimated_wait, Ordering::Relaxed);
        }
    }

    /// Rewrites what a requeue changes; the caller owns the ticket (`REQUEUING`).
    pub(crate) fn requeue(&self, ticket: Ticket, not_before: u64, position: u32, estimate: u64) {
        if let Some(cell) = self.cell(ticket) {
            // Relaxed: as `fill`.
            cell.not_before.store(not_before, Ordering::Relaxed);
            cell.position.store(position, Ordering::Relaxed);
            cell.estimated_wait.store(estimate, Ordering::Relaxed);
        }
    }

    /// The fields of the cell a handle names (not checked against the generation: they are the
    /// ticket's own if a later state CAS at the handle's generation succeeds, or if the caller
    /// owns the ticket).
    pub(crate) fn fields(&self, ticket: Ticket) -> Option<Fields> {
        let cell = self.cell(ticket)?;
        // Relaxed: ordered by whatever made the ticket the caller's (queue pop Acquire, state
        // CAS AcqRel); see the module docs.
        Some(Fields {
            tenant: cell.tenant.load(Ordering::Relaxed),
            cost: cell.cost.load(Ordering::Relaxed),
            position: cell.position.load(Ordering::Relaxed),
            downstream: cell.downstream.load(Ordering::Relaxed),
            user_data: cell.user_data.load(Ordering::Relaxed),
            deadline: cell.deadline.load(Ordering::Relaxed),
            not_before: cell.not_before.load(Ordering::Relaxed),
            enqueued_at: cell.enqueued_at.load(Ordering::Relaxed),
            estimated_wait: cell.estimated_wait.load(Ordering::Relaxed),
        })
    }

    /// A staged head's not-before time (0 for a handle out of range).
    pub(crate) fn not_before(&self, ticket: Ticket) -> u64 {
        // Relaxed: as `fields`.
        self.cell(ticket)
            .map_or(0, |c| c.not_before.load(Ordering::Relaxed))
    }

    /// Marks an allocated (or requeuing) ticket as queued. Release: a thread that sees `QUEUED`
    /// through the state word also sees the fields written before.
    pub(crate) fn publish(&self, ticket: Ticket) {
        if let Some(cell) = self.cell(ticket) {
            cell.state
                .store(pack(ticket.generation(), QUEUED), Ordering::Release);
        }
    }

    /// The state of the ticket a handle names.
    pub(crate) fn lookup(&self, ticket: Ticket) -> Lookup {
        match self.cell(ticket) {
            Some(cell) => {
                // Acquire: a live state implies the fields written before it are visible.
                let word = cell.state.load(Ordering::Acquire);
                if generation_of(word) == ticket.generation() && state_of(word) != FREE {
                    Lookup::Live(state_of(word))
                } else {
                    Lookup::Stale
                }
            }
            None => Lookup::Stale,
        }
    }

    /// Moves a ticket from state `from` to `to` within its generation. Fails if another caller
    /// moved it first or the handle is stale.
    pub(crate) fn transition(&self, ticket: Ticket, from: u32, to: u32) -> bool {
        let Some(cell) = self.cell(ticket) else {
            return false;
        };
        let generation = ticket.generation();
        broken!(Ticket, {
            return broken_cas(&cell.state, pack(generation, from), pack(generation, to));
        });
        // AcqRel: acquire the fields the previous owner wrote; release ours to the next owner.
        cell.state
            .compare_exchange(
                pack(generation, from),
                pack(generation, to),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Ends a ticket in state `from`: bumps the generation and returns the cell to the free list.
    /// Fails (changing nothing) if the ticket is not in `from` at its generation.
    pub(crate) fn end(&self, ticket: Ticket, from: u32) -> bool {
        let Some(cell) = self.cell(ticket) else {
            return false;
        };
        let generation = ticket.generation();
        broken!(Ticket, {
            let next = pack(generation.wrapping_add(1).max(1), FREE);
            let ok = broken_cas(&cell.state, pack(generation, from), next);
            if ok {
                self.release(ticket.index());
            }
            return ok;
        });
        // AcqRel: the winner sees the fields (to report them) and publishes the bump.
        let ok = cell
            .state
            .compare_exchange(
                pack(generation, from),
                pack(generation.wrapping_add(1).max(1), FREE),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok();
        if ok {
            self.release(ticket.index());
        }
        ok
    }
}

/// Broken on purpose: compare, then store; two callers can both "win".
#[cfg(fairq_broken)]
fn broken_cas(word: &AtomicU64, from: u64, to: u64) -> bool {
    if word.load(Ordering::Acquire) != from {
        return false;
    }
    word.store(to, Ordering::Release);
    true
}

/// Loom model of the free stack on its own (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::AtomicBool;

    /// Takes a cell, holds it (no other thread may hold it meanwhile), and frees it.
    fn churn(slab: &TicketSlab, held: &[AtomicBool; 2]) {
        let ticket = slab
            .alloc()
            .expect("a free cell: at most two are held at once");
        let index = ticket.index() as usize;
        // Plain std atomics: the model's check, not part of what loom explores.
        assert!(
            !held[index].swap(true, std::sync::atomic::Ordering::SeqCst),
            "cell {index} handed out twice"
        );
        slab.publish(ticket);
        held[index].store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(
            slab.end(ticket, QUEUED),
            "cell {index} was ended by another holder"
        );
    }

    /// On a slab of two cells, one thread takes and frees a cell twice while another does it
    /// once: pops and pushes race on the tagged head, and the second pop can meet a head it
    /// read before (the ABA the tag is for). No cell is held twice at once, and afterwards both
    /// cells are free: two allocations get distinct cells, a third gets none.
    #[test]
    fn pops_and_pushes_lose_or_share_no_cell() {
        loom::model(|| {
            let slab = Arc::new(TicketSlab::new(2));
            let held = std::sync::Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
            let twice = {
                let (slab, held) = (slab.clone(), held.clone());
                thread::spawn(move || {
                    churn(&slab, &held);
                    churn(&slab, &held);
                })
            };
            let once = {
                let (slab, held) = (slab.clone(), held.clone());
                thread::spawn(move || churn(&slab, &held))
            };
            twice.join().unwrap();
            once.join().unwrap();
            let a = slab.alloc().expect("a cell was lost");
            let b = slab.alloc().expect("a cell was lost");
            assert_ne!(a.index(), b.index(), "one cell is on the stack twice");
            assert!(slab.alloc().is_none(), "more cells than the slab holds");
        });
    }

    /// A pop by load and store: two callers can take the same cell.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "was ended by another holder")]
    fn broken_free_stack_pop_is_caught() {
        crate::broken::with(
            crate::broken::Break::FreeList,
            pops_and_pushes_lose_or_share_no_cell,
        );
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_state_word_and_the_free_head_pack_two_halves() {
        crate::core::packed::tests::round_trips(&[STATE, GENERATION]);
        crate::core::packed::tests::round_trips(&[LINK, TAG]);
        let word = pack(u32::MAX, GRANTED);
        assert_eq!((generation_of(word), state_of(word)), (u32::MAX, GRANTED));
        // A push moves the tag on and leaves the link to the caller.
        let head = TAG.put(7) | LINK.put(3);
        let pushed = (head & !LINK_MASK).wrapping_add(TAG_ONE) | 9;
        assert_eq!((TAG.get(pushed), LINK.get(pushed)), (8, 9));
    }
}
