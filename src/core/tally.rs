//! The engine's statistics counters, bumped without a shared read-modify-write.
//!
//! Every request moves two counters (enqueued, then completed), and an atomic add on a line other
//! threads also add to costs more than the rest of a short call. So each thread that calls into
//! an engine holds one of `ROWS` rows for as long as it lives, and every engine keeps one line of
//! counters per row. Only the row's holder writes that line, with a load and a store; `stats`
//! sums the lines (each only grows, so the sum read by one thread never goes down).
//!
//! The rows are claimed from one bitmap for the whole process, once per thread, and freed by a
//! thread-local destructor when the thread exits. A row changes hands only through the bitmap:
//! the old holder's release (Release) and the new holder's claim (Acquire) order the old
//! holder's last writes before the new holder's first read, so its counts carry on. A thread
//! that finds every row taken (more than `ROWS` threads alive), or calls in while its
//! thread-locals are being torn down, adds with `fetch_add` to one shared line instead.

use crate::sync::{AtomicU64, CachePadded, Ordering};
use crate::types::Reason;

/// Rows in the process-wide bitmap (at most one word). Fewer under loom, whose models then
/// also reach the shared line.
pub(crate) const ROWS: usize = if cfg!(loom) { 2 } else { 64 };
/// The bits of the rows.
const ALL_ROWS: u64 = u64::MAX >> (64 - ROWS);

/// One line of counters (16 words: one 128-byte padded line).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) enqueued: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) requeued: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) refused_after_wait: AtomicU64,
    pub(crate) refused: [AtomicU64; Reason::ALL.len()],
}

/// The rows threads hold: bit `i` set while a thread holds row `i`.
pub(crate) struct RowBitmap {
    taken: AtomicU64,
}

impl RowBitmap {
    #[cfg(loom)]
    pub(crate) fn new() -> RowBitmap {
        RowBitmap {
            taken: AtomicU64::new(0),
        }
    }

    /// Takes a free row, or `None` when all are held.
    pub(crate) fn claim(&self) -> Option<usize> {
        // Relaxed: a first guess at the free bits; the CAS below decides.
        let mut taken = self.taken.load(Ordering::Relaxed);
        loop {
            let free = !taken & ALL_ROWS;
            if free == 0 {
                return None;
            }
            let row = free.trailing_zeros() as usize;
            // Acquire: the row's previous holder wrote its counters before its release; the
            // new holder goes on from what it left.
            // Broken on purpose: the new holder may read stale counts.
            let order = broken_or!(RowHandOff, Ordering::Relaxed, Ordering::Acquire);
            match self.taken.compare_exchange_weak(
                taken,
                taken | 1 << row,
                order,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(row),
                Err(seen) => taken = seen,
            }
        }
    }

    /// Gives row `row` back.
    pub(crate) fn release(&self, row: usize) {
        // Release: this holder's counter writes happen before the next holder's claim.
        // Broken on purpose (see `claim`).
        let order = broken_or!(RowHandOff, Ordering::Relaxed, Ordering::Release);
        self.taken.fetch_and(!(1 << row), order);
    }
}

#[cfg(not(loom))]
static BITMAP: RowBitmap = RowBitmap {
    taken: AtomicU64::new(0),
};

#[cfg(loom)]
loom::lazy_static! {
    // Under loom, one per model execution.
    static ref BITMAP: RowBitmap = RowBitmap::new();
}

/// A thread's row, given back when the thread exits. Not under loom, which tears a model's
/// statics down before its main thread's locals: there rows stay held, and the hand-off is
/// modelled on its own (`loom_models`).
struct Held(Option<usize>);

#[cfg(not(loom))]
impl Drop for Held {
    fn drop(&mut self) {
        if let Some(row) = self.0 {
            BITMAP.release(row);
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static HELD: Held = Held(BITMAP.claim());
}

#[cfg(loom)]
loom::thread_local! {
    static HELD: Held = Held(BITMAP.claim());
}

/// This thread's row, claimed on first use; `None` when none was free. Also names the caller
/// that last served a tenant (`Classes::put_back`).
pub(crate) fn row() -> Option<usize> {
    HELD.try_with(|held| held.0).ok().flatten()
}

/// One engine's counters: a line per row, and the shared line.
pub(crate) struct Tallies {
    rows: Box<[CachePadded<Counters>]>,
    shared: CachePadded<Counters>,
}

impl Tallies {
    pub(crate) fn new() -> Tallies {
        Tallies {
            rows: (0..ROWS).map(|_| CachePadded::default()).collect(),
            shared: CachePadded::default(),
        }
    }

    /// Adds 1 to the counter `which` picks, in this thread's line.
    #[inline]
    pub(crate) fn bump(&self, which: impl Fn(&Counters) -> &AtomicU64) {
        match row() {
            Some(row) => {
                let counter = which(&self.rows[row]);
                // Relaxed: only this thread writes its row's line (module docs); readers want
                // a statistic, not an order.
                counter.store(
                    counter.load(Ordering::Relaxed).wrapping_add(1),
                    Ordering::Relaxed,
                );
            }
            // Relaxed: a statistic.
            None => {
                which(&self.shared).fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Calls `f` on every line (`stats` sums them).
    pub(crate) fn each(&self, mut f: impl FnMut(&Counters)) {
        self.rows.iter().for_each(|line| f(line));
        f(&self.shared);
    }
}

/// Loom models of a row changing hands (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Counts as a row's holder does (`Tallies::bump`).
    fn count(line: &Counters) {
        let c = &line.enqueued;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Row 0 is held for good; two threads in turn claim the other row, count once and give it
    /// back (the second may find it still held and get none). No count is lost.
    #[test]
    fn counts_survive_a_row_changing_hands() {
        loom::model(|| {
            let bitmap = Arc::new(RowBitmap::new());
            assert_eq!(bitmap.claim(), Some(0));
            let lines: Arc<[Counters; 2]> = Arc::new(Default::default());
            let worker = || {
                let (bitmap, lines) = (Arc::clone(&bitmap), Arc::clone(&lines));
                thread::spawn(move || {
                    if let Some(row) = bitmap.claim() {
                        assert_eq!(row, 1);
                        count(&lines[row]);
                        bitmap.release(row);
                        1
                    } else {
                        0
                    }
                })
            };
            let (a, b) = (worker(), worker());
            let counted = a.join().unwrap() + b.join().unwrap();
            let total: u64 = lines
                .iter()
                .map(|l| l.enqueued.load(Ordering::Relaxed))
                .sum();
            assert_eq!(total, counted, "a count was lost when a row changed hands");
        });
    }

    /// A hand-off without Acquire/Release: the next holder may count from a stale value.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "a count was lost when a row changed hands")]
    fn broken_row_hand_off_is_caught() {
        crate::broken::with(
            crate::broken::Break::RowHandOff,
            counts_survive_a_row_changing_hands,
        );
    }

    /// Engine counters bumped from three threads, two of them in rows and one in the shared
    /// line, add up.
    #[test]
    fn tallies_from_rows_and_the_shared_line_add_up() {
        loom::model(|| {
            let tallies = Arc::new(Tallies::new());
            let spawn = || {
                let tallies = Arc::clone(&tallies);
                thread::spawn(move || tallies.bump(|c| &c.completed))
            };
            let (a, b) = (spawn(), spawn());
            tallies.bump(|c| &c.completed);
            a.join().unwrap();
            b.join().unwrap();
            let mut total = 0;
            tallies.each(|line| total += line.completed.load(Ordering::Relaxed));
            assert_eq!(total, 3);
        });
    }
}
