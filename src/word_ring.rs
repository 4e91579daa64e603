//! A bounded multi-producer multi-consumer ring of words: the class rings, the light-tenant lane
//! and the bulkhead's blocked list hold tenant indices in it.
//!
//! It is Dmitry Vyukov's bounded array queue, the algorithm of crossbeam's `ArrayQueue`: each
//! entry has a stamp that says which lap may use it next. A position is a lap number times
//! `one_lap` (the power of two above the capacity) plus an entry index, so finding the entry is
//! a mask, not a division, and positions only grow (2^64 is never reached). Entry `i` is free for
//! position `pos` when its stamp is `pos`, and holds `pos`'s value when its stamp is `pos + 1`;
//! a pop stamps it with the same index one lap on. A stamp below the position means the entry's
//! previous lap is not finished; above it, the caller's position is stale.
//!
//! It exists, instead of crossbeam's, for its waits. crossbeam's pop waits for a producer that
//! claimed the oldest entry and has not written it yet, with a backoff that also counts lost
//! CASes, so under two threads' contention on one tenant it reached its yield (a system call)
//! several times a second. Here the grant path takes with [`WordRing::try_pop`], which never
//! waits on another thread: such an entry reads as empty, and the caller's short spin comes back
//! for it. [`WordRing::pop`] (for a caller that must not miss a value: the bulkhead's wake-ups)
//! and a push that finds a consumer that has not released its entry wait for the other thread's
//! two stores with [`Backoff`], which spins for tens of microseconds before it yields. A lost CAS
//! is not a wait on anyone: it spins briefly ([`contended`]) and retries.

#![cfg_attr(loom, allow(dead_code))] // under loom the engine uses `sync`'s stand-in

use crate::ring_entry::{self, Entry};
use crate::sync::{
    contended, fence, AtomicU64, Backoff, CachePadded, Ordering, FIRST_CONTENDED_HINTS,
};
use crate::table::Table;

/// A value the ring carries in one 64-bit word.
pub(crate) trait Word: Copy {
    fn to_word(self) -> u64;
    fn from_word(word: u64) -> Self;
}

impl Word for u32 {
    fn to_word(self) -> u64 {
        u64::from(self)
    }
    fn from_word(word: u64) -> Self {
        word as u32 // only words made by `to_word` come back
    }
}

impl Word for u64 {
    fn to_word(self) -> u64 {
        self
    }
    fn from_word(word: u64) -> Self {
        word
    }
}

/// The ring; the API of crossbeam's `ArrayQueue` that fairq uses.
pub(crate) struct WordRing<T> {
    /// The next position to pop.
    head: CachePadded<AtomicU64>,
    /// The next position to push.
    tail: CachePadded<AtomicU64>,
    /// The power of two above the capacity: one lap's step in a position.
    one_lap: u64,
    entries: Table<Entry>,
    _values: std::marker::PhantomData<T>,
}

impl<T: Word> WordRing<T> {
    /// A ring of `cap` entries (at least 1).
    pub(crate) fn new(cap: usize) -> Self {
        assert!(cap > 0, "capacity must be non-zero");
        WordRing {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            one_lap: (cap as u64 + 1).next_power_of_two(),
            entries: ring_entry::table(cap),
            _values: std::marker::PhantomData,
        }
    }

    fn entry(&self, pos: u64) -> &Entry {
        &self.entries[(pos & (self.one_lap - 1)) as usize]
    }

    /// The position after `pos`: the next entry, or entry 0 of the next lap.
    fn after(&self, pos: u64) -> u64 {
        if (pos & (self.one_lap - 1)) + 1 < self.entries.len() as u64 {
            pos + 1
        } else {
            (pos & !(self.one_lap - 1)) + self.one_lap
        }
    }

    /// Appends `value`; gives it back when the ring is full.
    pub(crate) fn push(&self, value: T) -> Result<(), T> {
        let backoff = Backoff::new();
        let mut wait = FIRST_CONTENDED_HINTS;
        // Relaxed: a position guess; the stamp and the CAS decide.
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let entry = self.entry(tail);
            // Acquire: pairs with the consumer's Release of the stamp, so its read of the old
            // value happens before our write of the new one.
            let stamp = entry.stamp.load(Ordering::Acquire);
            if stamp == tail {
                // SeqCst: the stamp, not `tail`, publishes the value, but a pop's empty check
                // (a SeqCst fence, then a load of `tail`) must not read a tail older than this
                // CAS when the CAS precedes that fence, as with crossbeam's.
                match self.tail.compare_exchange_weak(
                    tail,
                    self.after(tail),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        broken!(RingPublish, {
                            // Broken on purpose: a consumer may read the entry before the value.
                            entry.stamp.store(tail + 1, Ordering::Release);
                            entry.value.store(value.to_word(), Ordering::Relaxed);
                            return Ok(());
                        });
                        entry.value.store(value.to_word(), Ordering::Relaxed);
                        // Release: the value is written before a consumer sees the entry full.
                        entry.stamp.store(tail + 1, Ordering::Release);
                        return Ok(());
                    }
                    Err(seen) => {
                        contended(&mut wait);
                        tail = seen;
                    }
                }
            } else if stamp < tail {
                // The entry still serves the previous lap (its value, or its producer's or
                // consumer's last store, is due). SeqCst fence: orders this check with the
                // consumers' head CASes, so "full" is never read off a stale head while a pop
                // has already made room.
                fence(Ordering::SeqCst);
                // Relaxed: ordered by the fence.
                let head = self.head.load(Ordering::Relaxed);
                if head + self.one_lap == tail {
                    return Err(value);
                }
                // Another thread claimed that entry and is about to store its stamp: wait.
                backoff.snooze();
                // Relaxed: a new guess, as above.
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                // Our guess is stale: another producer took this position.
                contended(&mut wait);
                // Relaxed: a new guess, as above.
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value; `None` when the ring is empty. A producer that claimed the
    /// oldest position and has not written it yet is waited for.
    pub(crate) fn pop(&self) -> Option<T> {
        self.take(true)
    }

    /// Takes the oldest value; `None` when the ring is empty, or when a producer claimed the
    /// oldest position and has not written it yet (it will be there for the next call). For a
    /// caller that can come back later: it never waits on another thread.
    pub(crate) fn try_pop(&self) -> Option<T> {
        self.take(false)
    }

    fn take(&self, wait: bool) -> Option<T> {
        let backoff = Backoff::new();
        let mut lost = FIRST_CONTENDED_HINTS;
        // Relaxed: a position guess; the stamp and the CAS decide.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let entry = self.entry(head);
            // Acquire: pairs with the producer's Release of the stamp: the value is visible.
            let stamp = entry.stamp.load(Ordering::Acquire);
            if stamp == head + 1 {
                // SeqCst: the stamp load above ordered the value for us, but a push's full check
                // (a SeqCst fence, then a load of `head`) must see this CAS when it precedes
                // that fence: a stale head would make a ring with room read as full, and the
                // engine's rings are sized never to be full.
                match self.head.compare_exchange_weak(
                    head,
                    self.after(head),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let value = entry.value.load(Ordering::Relaxed);
                        // Release: our read of the value happens before a producer of the next
                        // lap writes the entry.
                        entry.stamp.store(head + self.one_lap, Ordering::Release);
                        return Some(T::from_word(value));
                    }
                    Err(seen) => {
                        contended(&mut lost);
                        head = seen;
                    }
                }
            } else if stamp <= head {
                // Nothing written at `head` yet (or the previous lap's consumer has not released
                // the entry). SeqCst fence: orders this check with the producers' tail CASes, so
                // "empty" is never read off a stale tail after a push has finished.
                fence(Ordering::SeqCst);
                // Relaxed: ordered by the fence.
                let tail = self.tail.load(Ordering::Relaxed);
                if tail == head || !wait {
                    return None;
                }
                // A producer claimed `head` and is about to write it: wait for its stores.
                backoff.snooze();
                // Relaxed: a new guess, as above.
                head = self.head.load(Ordering::Relaxed);
            } else {
                // Our guess is stale: another consumer took this position.
                contended(&mut lost);
                // Relaxed: a new guess, as above.
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Whether the ring held nothing at some moment during the call.
    pub(crate) fn is_empty(&self) -> bool {
        // SeqCst: the two loads in one total order with the fences above, as crossbeam reads
        // them: a head equal to the tail means every pushed value was popped.
        let head = self.head.load(Ordering::SeqCst);
        let tail = self.tail.load(Ordering::SeqCst);
        tail == head
    }
}

/// Loom models of the ring (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    // Each model runs its racing calls on spawned threads and only joins on the model's main
    // thread: loom 0.7.3 explores a single execution of some models whose one spawned thread
    // loads and then stores an atomic the main thread reads (counted: 1 execution instead of
    // dozens). Two spawned threads are explored in full.

    /// Runs `f` on `ring` in a spawned thread.
    fn spawn_on<T, R>(
        ring: &Arc<WordRing<T>>,
        f: impl FnOnce(&WordRing<T>) -> R + Send + 'static,
    ) -> thread::JoinHandle<R>
    where
        T: Word + Send + Sync + 'static,
        R: Send + 'static,
    {
        let ring = Arc::clone(ring);
        thread::spawn(move || f(&ring))
    }

    /// Two producers push into a ring of two while a consumer pops: every value comes out once.
    #[test]
    fn pushes_and_pops_race_and_nothing_is_lost_or_doubled() {
        loom::model(|| {
            let ring = Arc::new(WordRing::<u32>::new(2));
            let producers: Vec<_> = [1u32, 2]
                .into_iter()
                .map(|v| spawn_on(&ring, move |ring| ring.push(v).is_ok()))
                .collect();
            let mut got = Vec::new();
            if let Some(v) = ring.pop() {
                got.push(v);
            }
            for p in producers {
                assert!(p.join().unwrap(), "a ring of two refused one of two values");
            }
            while let Some(v) = ring.pop() {
                got.push(v);
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2], "a value was lost or popped twice");
            assert!(ring.is_empty());
        });
    }

    /// A value pushed by one thread is the value another pops.
    #[test]
    fn a_pop_reads_what_the_push_wrote() {
        loom::model(|| {
            let ring = Arc::new(WordRing::<u64>::new(2));
            let producer = spawn_on(&ring, |ring| ring.push(5).unwrap());
            let consumer = spawn_on(&ring, |ring| ring.pop());
            producer.join().unwrap();
            let popped = consumer.join().unwrap().or_else(|| ring.pop());
            assert_eq!(popped, Some(5), "a pop read an entry before its value");
        });
    }

    /// A `try_pop` racing a push answers the value or nothing, never another word, and never
    /// takes the value away from the pop after it.
    #[test]
    fn a_try_pop_takes_the_value_or_leaves_it() {
        loom::model(|| {
            let ring = Arc::new(WordRing::<u64>::new(2));
            let producer = spawn_on(&ring, |ring| ring.push(9).unwrap());
            let trier = spawn_on(&ring, |ring| ring.try_pop());
            producer.join().unwrap();
            let tried = trier.join().unwrap();
            let after = ring.try_pop();
            assert!(matches!(tried, None | Some(9)), "a try_pop read {tried:?}");
            assert_eq!(
                [tried, after].iter().flatten().count(),
                1,
                "the value was lost or taken twice"
            );
        });
    }

    /// A push that marks its entry full before writing it: a pop can read the old value.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "a pop read an entry before its value")]
    fn broken_ring_publish_is_caught() {
        crate::broken::with(
            crate::broken::Break::RingPublish,
            a_pop_reads_what_the_push_wrote,
        );
    }

    /// A full ring of two: a pop races a push. The push fits exactly when the pop took the
    /// oldest value first; whatever was accepted comes out once, in order.
    #[test]
    fn a_full_ring_refuses_until_a_pop_makes_room() {
        loom::model(|| {
            let ring = Arc::new(WordRing::<u64>::new(2));
            ring.push(7).unwrap();
            ring.push(6).unwrap();
            let popper = spawn_on(&ring, |ring| ring.pop());
            let pusher = spawn_on(&ring, |ring| ring.push(8).is_ok());
            let first = popper.join().unwrap();
            let pushed = pusher.join().unwrap();
            assert_eq!(first, Some(7), "the old value is there for the pop");
            assert_eq!(ring.pop(), Some(6));
            let rest = ring.pop();
            assert_eq!(rest.is_some(), pushed, "an accepted push was lost");
            if pushed {
                assert_eq!(rest, Some(8));
            }
            assert_eq!(ring.pop(), None);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_empty_over_many_laps() {
        let one = WordRing::<u32>::new(1);
        for v in 0..5 {
            one.push(v).unwrap();
            assert_eq!(one.push(9), Err(9), "full after 1");
            assert_eq!(one.pop(), Some(v));
            assert_eq!(one.try_pop(), None);
        }
        let ring = WordRing::<u32>::new(3);
        assert!(ring.is_empty());
        assert_eq!(ring.pop(), None);
        for lap in 0..10u32 {
            for i in 0..3 {
                ring.push(lap * 3 + i).unwrap();
            }
            assert_eq!(ring.push(99), Err(99), "full after 3");
            for i in 0..3 {
                assert_eq!(ring.pop(), Some(lap * 3 + i));
            }
            assert!(ring.is_empty());
        }
    }

    #[test]
    fn try_pop_is_pop_without_a_writer_in_flight() {
        let ring = WordRing::<u32>::new(2);
        assert_eq!(ring.try_pop(), None);
        ring.push(4).unwrap();
        ring.push(5).unwrap();
        assert_eq!(ring.try_pop(), Some(4));
        assert_eq!(ring.pop(), Some(5));
        assert_eq!(ring.try_pop(), None);
    }

    #[test]
    fn four_threads_move_every_value_exactly_once() {
        let ring = WordRing::<u64>::new(8);
        let per = if cfg!(miri) { 300 } else { 20_000u64 };
        let popped: Vec<u64> = std::thread::scope(|s| {
            for t in 0..2u64 {
                let ring = &ring;
                s.spawn(move || {
                    for i in 0..per {
                        let mut v = t * per + i;
                        while let Err(back) = ring.push(v) {
                            v = back;
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let ring = &ring;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        while (mine.len() as u64) < per {
                            let next = if mine.len() % 2 == 0 {
                                ring.pop()
                            } else {
                                ring.try_pop()
                            };
                            if let Some(v) = next {
                                mine.push(v);
                            }
                        }
                        mine
                    })
                })
                .collect();
            consumers
                .into_iter()
                .flat_map(|c| c.join().unwrap())
                .collect()
        });
        let mut popped = popped;
        popped.sort_unstable();
        assert_eq!(popped, (0..2 * per).collect::<Vec<_>>());
        assert!(ring.is_empty());
    }
}
