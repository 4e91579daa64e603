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

use crate::sync::{AtomicU64, Backoff, Ordering};

/// Set in `head` while a compaction owns the consumer side.
const LOCKED: u64 = 1 << 63;

struct Entry {
    /// The position this entry is free for (`pos`) or full at (`pos + 1`).
    stamp: AtomicU64,
    /// The ticket handle, valid while full.
    value: AtomicU64,
}

/// What the turn holder takes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The next handle, in arrival order.
    Handle(u64),
    /// A dead entry a compaction removed: account it like a popped dead handle.
    Swept,
}

pub(crate) struct TenantQueue {
    /// Consumer position, plus `LOCKED` while a compaction runs.
    head: AtomicU64,
    /// Producer position.
    tail: AtomicU64,
    /// Entries compactions removed that the turn holder has not taken yet.
    swept: AtomicU64,
    entries: Box<[Entry]>,
}

impl TenantQueue {
    pub(crate) fn new(capacity: usize) -> TenantQueue {
        assert!(capacity > 0, "capacity must be non-zero");
        TenantQueue {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            swept: AtomicU64::new(0),
            entries: (0..capacity as u64)
                .map(|pos| Entry {
                    stamp: AtomicU64::new(pos),
                    value: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    fn entry(&self, pos: u64) -> &Entry {
        &self.entries[(pos % self.entries.len() as u64) as usize]
    }

    /// Appends `value`; gives it back if the ring is full (dead entries included).
    pub(crate) fn push(&self, value: u64) -> Result<(), u64> {
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
            // value happens before our write of the new one.
            let stamp = entry.stamp.load(Ordering::Acquire);
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
                        // Release: the value is written before a consumer sees the entry full.
                        entry.stamp.store(tail + 1, Ordering::Release);
                        return Ok(());
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

    /// Pops the oldest entry, if one is ready and no compaction runs.
    fn pop(&self) -> Option<u64> {
        let cap = self.entries.len() as u64;
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
        // Relaxed: the stamp and `head` loads above ordered what we read; this CAS only claims
        // the position against a compaction (which would have moved or locked `head`).
        if self
            .head
            .compare_exchange(head, head + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let value = entry.value.load(Ordering::Relaxed);
        // Release: our read of the value happens before a producer of the next lap writes it.
        entry.stamp.store(head + cap, Ordering::Release);
        Some(value)
    }

    /// The turn holder's next entry, when the tenant's `queued` count says one is due (it was
    /// pushed before it was counted): an entry a compaction swept, first, so `swept` never
    /// builds up behind a ring that never runs dry; else the oldest handle. Waits out a
    /// compaction in progress (a bounded pass over the ring).
    ///
    /// A swept entry may stand for one whose producer has not counted it yet (a forged cancel
    /// ended it between its push and its count): the holder then accounts one entry early, and
    /// the producer's count, a few instructions later, activates the tenant again if need be.
    pub(crate) fn take_next(&self) -> Next {
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with the compaction's Release of `head` (it counts before it
            // unlocks). Relaxed decrement: only the turn holder takes from `swept`.
            if self.swept.load(Ordering::Acquire) > 0 {
                self.swept.fetch_sub(1, Ordering::Relaxed);
                return Next::Swept;
            }
            if let Some(value) = self.pop() {
                return Next::Handle(value);
            }
            backoff.snooze();
        }
    }

    /// Drops the dead entries (`is_dead`) of the settled part of the ring, keeping the live ones
    /// in order. Returns how many it dropped; 0 if another consumer holds the ring.
    pub(crate) fn compact(&self, is_dead: impl Fn(u64) -> bool) -> u64 {
        let cap = self.entries.len() as u64;
        // Acquire: the entries consumed before are settled.
        let head = self.head.load(Ordering::Acquire);
        #[cfg(fairq_broken)]
        let unlocked = crate::broken::on(crate::broken::Break::Compact);
        #[cfg(not(fairq_broken))]
        let unlocked = false;
        if head & LOCKED != 0
            || (!unlocked
                && self
                    .head
                    .compare_exchange(head, head | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_err())
        {
            // Broken on purpose when `unlocked`: compact without taking the consumer side.
            return 0;
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
        // load of `head`); unlocks.
        self.head.store(keep, Ordering::Release);
        dropped
    }

    /// Start of the ring's storage and its size in bytes, for a prefetch.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn storage(&self) -> (*const u8, usize) {
        (
            self.entries.as_ptr().cast(),
            std::mem::size_of_val(&*self.entries),
        )
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
            let dropped = compactor.join().unwrap();
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
    #[should_panic]
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
            let mine = queue.compact(dead);
            let dropped = mine + other.join().unwrap();
            assert_eq!(dropped, 1, "the dead entry is dropped once");
            // Swept entries are taken first, then the live handle.
            assert_eq!(queue.take_next(), Next::Swept);
            assert_eq!(queue.take_next(), Next::Handle(2));
            assert_eq!(drain(&queue), (vec![], 0));
        });
    }
}
