//! A tenant's queue of ticket handles: a bounded ring that can drop its dead entries.
//!
//! The ring is Dmitry Vyukov's bounded MPMC array queue, as in crossbeam's `ArrayQueue`: each
//! entry carries a `stamp`, the position it is free for (`stamp == pos`: a producer at `pos` may
//! write it) or full at (`stamp == pos + 1`: a consumer at `pos` may read it); positions only grow,
//! and an entry serves position `pos` on lap `pos / capacity`.
//!
//! What it adds: **compaction**. A cancelled request leaves its handle in the ring (a dead entry)
//! until the tenant's turn holder pops it. While nobody serves the tenant (every permit is out, or
//! its head waits for a Retry-After), cancels could fill the ring with dead entries, and a tenant
//! with few live requests would be refused. So a producer that finds the ring full compacts it:
//! it takes the consumer side (the `LOCKED` bit in `head`), moves the live entries of the settled
//! prefix toward the tail in order, frees the prefix, and moves `head` past it. The tenant's
//! `queued` count still counts the removed entries, so their number goes to `swept`, which the
//! turn holder takes instead of an entry (and treats as a dead one) when the ring runs dry.
//!
//! Consumers (the turn holder's `pop`, a compaction) exclude each other through `head`: a pop is
//! a CAS from `pos` to `pos + 1`, which fails while a compaction holds `LOCKED` or after it moved
//! `head`. A compaction touches only entries a producer has finished writing, so producers never
//! wait for it.
//!
//! # Handing the turn to a writer
//! The tenant's `queued` count can say an entry is due while the entry at `head` is not there to
//! take: an earlier producer claimed that position and has not written it yet (a later one
//! counted its own entry first), or a compaction holds the ring. Both are a few stores away,
//! unless that thread was descheduled, and the turn holder must not wait for it. So it marks
//! what it found (`WANTED` in the entry's stamp, or in `head` during a compaction) with a CAS and
//! leaves: the turn is the marker's now. The producer publishes its entry with a CAS on the stamp
//! (the compaction unlocks with a swap), so exactly one of the two wins: a holder whose mark
//! fails takes the entry, and a writer that finds the mark holds the tenant's turn
//! ([`Turn::Received`]).

use crate::ring_entry::{self, Entry};
use crate::sync::{AtomicU64, Ordering};
use crate::table::Table;

/// Set in `head` while a compaction owns the consumer side.
const LOCKED: u64 = 1 << 62;
/// Set in an unwritten entry's stamp (or in a locked `head`) by a turn holder that found it not
/// written yet: its writer takes over the turn.
const WANTED: u64 = 1 << 63;

/// What the turn holder takes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The next handle, in arrival order.
    Handle(u64),
    /// A dead entry a compaction removed: account it like a popped dead handle.
    Swept,
    /// The next entry is not written yet (or a compaction holds the ring): its writer (or the
    /// compaction) holds the turn now, and the caller no longer does.
    HandedOver,
}

/// Turns handed over in this process (`hand_overs`).
#[cfg(not(loom))]
static HAND_OVERS: AtomicU64 = AtomicU64::new(0);

/// Tests: how many times a turn holder has handed a tenant's turn to a writer or a compaction
/// in this process.
#[cfg(not(loom))]
pub(crate) fn hand_overs() -> u64 {
    // Relaxed: a statistic.
    HAND_OVERS.load(Ordering::Relaxed)
}

/// Counts a hand-over received (off the hot path: only when one happens).
fn count_hand_over() {
    // Relaxed: a statistic.
    #[cfg(not(loom))]
    HAND_OVERS.fetch_add(1, Ordering::Relaxed);
}

/// Whether a push or a compaction gave its caller the tenant's turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// As before the call.
    Unchanged,
    /// The turn holder found this caller's entry not written yet (or the ring locked by this
    /// caller's compaction) and handed the tenant's turn over: the caller holds it now.
    Received,
}

impl Turn {
    pub(crate) fn or(self, other: Turn) -> Turn {
        if self == Turn::Received {
            self
        } else {
            other
        }
    }
}

pub(crate) struct TenantQueue {
    /// Consumer position, plus `LOCKED` while a compaction runs.
    head: AtomicU64,
    /// Producer position.
    tail: AtomicU64,
    /// Entries compactions removed that the turn holder has not taken yet.
    swept: AtomicU64,
    entries: Table<Entry>,
}

impl TenantQueue {
    pub(crate) fn new(capacity: usize) -> TenantQueue {
        assert!(capacity > 0, "capacity must be non-zero");
        TenantQueue {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            swept: AtomicU64::new(0),
            entries: ring_entry::table(capacity),
        }
    }

    fn entry(&self, pos: u64) -> &Entry {
        &self.entries[(pos % self.entries.len() as u64) as usize]
    }

    /// Appends `value`; gives it back if the ring is full (dead entries included).
    pub(crate) fn push(&self, value: u64) -> Result<Turn, u64> {
        #[cfg(loom)]
        if FULL.with(|full| full.get()) {
            return Err(value);
        }
        let cap = self.entries.len() as u64;
        // Relaxed: a position guess; the CAS below decides.
        let mut tail = self.tail.load(Ordering::Relaxed);
        let mut wait = crate::sync::FIRST_CONTENDED_HINTS;
        loop {
            let entry = self.entry(tail);
            // Acquire: pairs with the consumer's Release of the stamp, so its read of the old
            // value happens before our write of the new one. A holder's mark is on a position
            // already claimed, so it only ever reads as "not free yet" here.
            let stamp = entry.stamp.load(Ordering::Acquire) & !WANTED;
            if stamp == tail {
                // Relaxed: the stamp, not `tail`, publishes the value.
                match self.tail.compare_exchange_weak(
                    tail,
                    tail + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        entry.value.store(value, Ordering::Relaxed);
                        return Ok(Self::publish(entry, tail));
                    }
                    Err(seen) => {
                        crate::sync::contended(&mut wait);
                        tail = seen;
                    }
                }
            } else if stamp + cap == tail + 1 {
                // Still full from the previous lap: the ring is full (or a pop is finishing).
                return Err(value);
            } else {
                // Another producer took this position first.
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Marks the entry claimed for `pos` full, now that its value is written. A CAS, not a
    /// store, so that a turn holder's mark (see the module docs) is never overwritten unseen.
    fn publish(entry: &Entry, pos: u64) -> Turn {
        broken!(Unwritten, {
            // Broken on purpose: a plain store drops the holder's mark, and with it the turn.
            entry.stamp.store(pos + 1, Ordering::Release);
            return Turn::Unchanged;
        });
        // Release: the value is written before a consumer sees the entry full. Acquire on
        // failure: pairs with the holder's Release in its mark, so what it left for the next
        // holder (the tenant's pending placement) is ours.
        match entry
            .stamp
            .compare_exchange(pos, pos + 1, Ordering::Release, Ordering::Acquire)
        {
            Ok(_) => Turn::Unchanged,
            Err(marked) => {
                debug_assert_eq!(marked, pos | WANTED, "only a holder marks a claimed entry");
                // Release: as above; nobody else writes a marked stamp.
                entry.stamp.store(pos + 1, Ordering::Release);
                count_hand_over();
                Turn::Received
            }
        }
    }

    /// Pops the oldest entry, if one is ready and no compaction runs (the loom models' drain).
    #[cfg(all(test, loom))]
    fn pop(&self) -> Option<u64> {
        // Acquire: pairs with a compaction's Release of `head`: the entries it moved are ours.
        let head = self.head.load(Ordering::Acquire);
        if head & LOCKED != 0 {
            return None;
        }
        let entry = self.entry(head);
        // Acquire: pairs with the producer's Release of the stamp: the value is visible.
        if entry.stamp.load(Ordering::Acquire) != head + 1 {
            return None;
        }
        self.claim(entry, head)
    }

    /// Takes the entry at `head`, seen full at `head` (by an Acquire load of its stamp after an
    /// Acquire load of `head`); `None` if a compaction locked or moved `head` meanwhile.
    fn claim(&self, entry: &Entry, head: u64) -> Option<u64> {
        // Relaxed: the stamp and `head` loads ordered what we read; this CAS only claims the
        // position against a compaction (which would have moved or locked `head`).
        self.head
            .compare_exchange(head, head + 1, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        let value = entry.value.load(Ordering::Relaxed);
        // Release: our read of the value happens before a producer of the next lap writes it.
        entry
            .stamp
            .store(head + self.entries.len() as u64, Ordering::Release);
        Some(value)
    }

    /// Hands the turn over by marking `word`, seen as `seen`, with `WANTED`: true if the mark
    /// took. Release: what the caller wrote for the next holder (`before_handing_over`) goes with
    /// the turn, to the writer's CAS of the stamp or the compaction's swap of `head`. Acquire on
    /// failure: what changed the word (the writer's value, the compaction's moves) is ours.
    fn mark(word: &AtomicU64, seen: u64, before_handing_over: &impl Fn()) -> bool {
        before_handing_over();
        word.compare_exchange(seen, seen | WANTED, Ordering::Release, Ordering::Acquire)
            .is_ok()
    }

    /// The turn holder's next entry, when the tenant's `queued` count says one is due (it was
    /// pushed before it was counted): an entry a compaction swept, first, so `swept` never
    /// builds up behind a ring that never runs dry; else the oldest handle. If that entry is not
    /// written yet, or a compaction holds the ring, the turn goes to that writer or compaction
    /// (`Next::HandedOver`; the module docs): the caller writes what the next holder needs before
    /// it calls this (`before_handing_over`, called only then, right before the mark). Never waits
    /// on another thread.
    ///
    /// A swept entry may stand for one whose producer has not counted it yet (a forged cancel
    /// ended it between its push and its count): the holder then accounts one entry early, and
    /// the producer's count, a few instructions later, activates the tenant again if need be.
    pub(crate) fn take_next(&self, before_handing_over: impl Fn()) -> Next {
        loop {
            // Acquire: pairs with the compaction's Release of `head` (it counts before it
            // unlocks). Relaxed decrement: only the turn holder takes from `swept`.
            if self.swept.load(Ordering::Acquire) > 0 {
                self.swept.fetch_sub(1, Ordering::Relaxed);
                return Next::Swept;
            }
            // Acquire: pairs with a compaction's Release of `head`: the entries it moved are ours.
            let head = self.head.load(Ordering::Acquire);
            if head & LOCKED != 0 {
                // A compaction holds the ring: hand it the turn, or look again once it is over.
                if Self::mark(&self.head, head, &before_handing_over) {
                    return Next::HandedOver;
                }
                continue;
            }
            let entry = self.entry(head);
            // Acquire: pairs with the producer's Release of the stamp: the value is visible.
            let stamp = entry.stamp.load(Ordering::Acquire);
            if stamp == head + 1 {
                if let Some(value) = self.claim(entry, head) {
                    return Next::Handle(value);
                }
                continue;
            }
            if stamp != head {
                // Freed by a compaction that moved `head` since we read it: look again.
                continue;
            }
            // Claimed, not written: hand its writer the turn, or take the entry if it is
            // written now.
            if Self::mark(&entry.stamp, head, &before_handing_over) {
                return Next::HandedOver;
            }
        }
    }

    /// Drops the dead entries (`is_dead`) of the settled part of the ring, keeping the live ones
    /// in order. Returns how many it dropped (0 if another consumer holds the ring), and whether
    /// the turn holder, finding the ring locked, handed the tenant's turn to this caller.
    pub(crate) fn compact(&self, is_dead: impl Fn(u64) -> bool) -> (u64, Turn) {
        let cap = self.entries.len() as u64;
        // Acquire: the entries consumed before are settled.
        let head = self.head.load(Ordering::Acquire);
        let unlocked = broken_or!(Compact, true, false);
        if head & LOCKED != 0
            || (!unlocked
                && self
                    .head
                    .compare_exchange(head, head | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_err())
        {
            // Broken on purpose when `unlocked`: compact without taking the consumer side.
            return (0, Turn::Unchanged);
        }
        // The settled part: entries whose producer has finished (full at their position).
        let mut end = head;
        // Acquire: pairs with each producer's Release of the stamp; its value is visible.
        while end < head + cap && self.entry(end).stamp.load(Ordering::Acquire) == end + 1 {
            end += 1;
        }
        // Keep the live entries, packed toward `end` in their order; free the rest at the front.
        let mut keep = end;
        for pos in (head..end).rev() {
            // Relaxed: this entry is ours (full, behind `head`'s lock); see the Acquire above.
            let value = self.entry(pos).value.load(Ordering::Relaxed);
            if !is_dead(value) {
                keep -= 1;
                self.entry(keep).value.store(value, Ordering::Relaxed);
            }
        }
        for pos in head..keep {
            // Release: our reads of these entries happen before a producer rewrites them.
            self.entry(pos).stamp.store(pos + cap, Ordering::Release);
        }
        let dropped = keep - head;
        if dropped > 0 {
            // Relaxed: published by the Release store of `head` below.
            self.swept.fetch_add(dropped, Ordering::Relaxed);
        }
        // Release: the moved values and `swept` are visible to the next consumer (its Acquire
        // load of `head`); unlocks. Acquire: pairs with a holder's Release in its mark, so what
        // it left for the next holder is ours. A swap, so that mark is never missed.
        let locked = self.head.swap(keep, Ordering::AcqRel);
        let turn = if locked & WANTED != 0 {
            count_hand_over();
            Turn::Received
        } else {
            Turn::Unchanged
        };
        (dropped, turn)
    }

    /// Start of the ring's storage and its size in bytes, for a prefetch.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn storage(&self) -> (*const u8, usize) {
        self.entries.bytes()
    }
}

#[cfg(loom)]
thread_local! {
    // Thread-local: loom runs a model's threads on the thread that called the model.
    static FULL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Loom models: makes every ring push fail (`true`) or work again (`false`), as when producers
/// that have not finished writing hold a ring's free entries (rare, and not reachable in a tiny
/// model otherwise). Reset it before the model's execution ends.
#[cfg(loom)]
pub fn set_full_rings(full: bool) {
    FULL.with(|f| f.set(full));
}

/// Loom models of the ring: a compaction racing a pop and a push (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Odd values are dead.
    fn dead(value: u64) -> bool {
        value % 2 == 1
    }

    /// Everything left, in order: handles popped, and swept entries counted.
    fn drain(queue: &TenantQueue) -> (Vec<u64>, u64) {
        let mut got = Vec::new();
        while let Some(v) = queue.pop() {
            got.push(v);
        }
        (got, queue.swept.load(Ordering::Relaxed))
    }

    #[test]
    fn compaction_races_pop_and_push() {
        loom::model(|| {
            let queue = Arc::new(TenantQueue::new(3));
            for v in [1, 2, 3] {
                queue.push(v).unwrap();
            }
            let compactor = {
                let queue = Arc::clone(&queue);
                thread::spawn(move || queue.compact(dead))
            };
            let producer = {
                let queue = Arc::clone(&queue);
                // Full until the pop or the compaction frees an entry; then it must fit.
                thread::spawn(move || queue.push(4).is_ok())
            };
            let popped = queue.pop();
            let (dropped, turn) = compactor.join().unwrap();
            assert_eq!(turn, Turn::Unchanged, "nobody handed a turn over");
            let pushed = producer.join().unwrap();
            let (rest, swept) = drain(&queue);
            let mut seen: Vec<u64> = popped.into_iter().chain(rest.iter().copied()).collect();
            if pushed {
                assert_eq!(seen.pop(), Some(4), "the push lands last: {seen:?}");
            }
            // The live entry is delivered once; dead ones are delivered or swept, never both.
            assert_eq!(seen.iter().filter(|&&v| v == 2).count(), 1, "{seen:?}");
            let dead_seen = seen.iter().filter(|&&v| dead(v)).count() as u64;
            assert_eq!(dead_seen + swept, 2, "{seen:?}, swept {swept}");
            assert_eq!(swept, dropped);
            // Order: 1 (if delivered) before 2 before 3 (if delivered).
            let order: Vec<u64> = seen.iter().copied().filter(|&v| v <= 3).collect();
            assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        });
    }

    /// A compaction that does not take the consumer side: it moves entries a pop is reading.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "swept 2")]
    fn broken_compact_is_caught() {
        crate::broken::with(crate::broken::Break::Compact, compaction_races_pop_and_push);
    }

    #[test]
    fn two_compactions_and_a_consumer() {
        loom::model(|| {
            let queue = Arc::new(TenantQueue::new(2));
            queue.push(1).unwrap();
            queue.push(2).unwrap();
            let other = {
                let queue = Arc::clone(&queue);
                thread::spawn(move || queue.compact(dead))
            };
            let (mine, _) = queue.compact(dead);
            let dropped = mine + other.join().unwrap().0;
            assert_eq!(dropped, 1, "the dead entry is dropped once");
            // Swept entries are taken first, then the live handle.
            assert_eq!(queue.take_next(|| ()), Next::Swept);
            assert_eq!(queue.take_next(|| ()), Next::Handle(2));
            assert_eq!(drain(&queue), (vec![], 0));
        });
    }

    /// The turn holder takes the next entry while its producer writes it, or while a
    /// compaction (of a ring holding a dead entry) runs: either the holder gets the entry, or it
    /// hands the turn over and exactly one of the writer and the compaction receives it, and
    /// then sees the note the holder left. The entry is never lost, never taken twice.
    #[test]
    fn holder_races_writer_and_compaction() {
        loom::model(|| {
            let queue = Arc::new(TenantQueue::new(3));
            // A dead entry, taken as a swept one or popped before the live one.
            queue.push(1).unwrap();
            let note = Arc::new(AtomicU64::new(0));
            let writer = {
                let (queue, note) = (Arc::clone(&queue), Arc::clone(&note));
                thread::spawn(move || {
                    let turn = queue.push(2).unwrap();
                    (turn, note.load(Ordering::Relaxed))
                })
            };
            let compactor = {
                let (queue, note) = (Arc::clone(&queue), Arc::clone(&note));
                thread::spawn(move || {
                    let (_, turn) = queue.compact(dead);
                    (turn, note.load(Ordering::Relaxed))
                })
            };
            // The holder takes two entries: the dead one (as a handle or swept) and the live one.
            let mut taken = Vec::new();
            let handed = loop {
                match queue.take_next(|| note.store(7, Ordering::Relaxed)) {
                    Next::Handle(v) => taken.push(v),
                    Next::Swept => taken.push(0),
                    Next::HandedOver => break true,
                }
                if taken.len() == 2 {
                    break false;
                }
            };
            let (writer_turn, writer_note) = writer.join().unwrap();
            let (compactor_turn, compactor_note) = compactor.join().unwrap();
            let received: Vec<u64> = [(writer_turn, writer_note), (compactor_turn, compactor_note)]
                .iter()
                .filter(|(turn, _)| *turn == Turn::Received)
                .map(|&(_, note)| note)
                .collect();
            if handed {
                assert_eq!(
                    received,
                    vec![7],
                    "the turn reaches one thread, with the note"
                );
                // The new holder takes what is left; 2 is there for it.
                while taken.len() < 2 {
                    match queue.take_next(|| panic!("written and settled: nothing to wait for")) {
                        Next::Handle(v) => taken.push(v),
                        Next::Swept => taken.push(0),
                        Next::HandedOver => unreachable!(),
                    }
                }
            } else {
                assert!(received.is_empty(), "nobody holds a turn the holder kept");
            }
            // A compaction may sweep the dead entry after the holder looked at `swept`, so
            // the order of the two is open; each comes once.
            taken.sort_unstable();
            assert!(
                taken == [1, 2] || taken == [0, 2],
                "the live entry once, the dead one popped or swept: {taken:?}"
            );
        });
    }

    /// A writer that publishes with a plain store drops the holder's mark: nobody holds the
    /// turn, and the entry is stranded.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "the turn reaches one thread, with the note")]
    fn broken_unwritten_is_caught() {
        crate::broken::with(
            crate::broken::Break::Unwritten,
            holder_races_writer_and_compaction,
        );
    }
}
