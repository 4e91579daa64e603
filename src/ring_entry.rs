//! The entries of both array rings (a tenant's queue, `core/ring.rs`, and the word ring behind
//! the class rings, `word_ring.rs`), and how a ring's table of them is built.
//!
//! Both are Vyukov array queues, in which entry `i` starts free for position `i`. An engine of
//! the default size holds about 125,000 entries, so the table is a zeroed allocation and one
//! store per stamp, not a collected iterator: under Miri, which interprets every step, that
//! difference is half of an engine's build time.

use crate::sync::AtomicU64;
use crate::table::{Table, Zeroed};

#[derive(Default)]
pub(crate) struct Entry {
    /// The position this entry is free for (`pos`) or full at (`pos + 1`), each ring adding its
    /// own flag bits and lap encoding (see there).
    pub(crate) stamp: AtomicU64,
    /// The value (a ticket handle, a tenant index), valid while full.
    pub(crate) value: AtomicU64,
}

// SAFETY: two `AtomicU64`s, each with the in-memory representation of a `u64`, and the default is
// 0 in both (under loom `Table::zeroed` builds each element instead).
#[allow(unsafe_code)]
unsafe impl Zeroed for Entry {}

/// A ring's `len` entries, entry `i` free for position `i`.
#[allow(unsafe_code)]
pub(crate) fn table(len: usize) -> Table<Entry> {
    let mut entries = Table::<Entry>::zeroed(len);
    if cfg!(loom) {
        // Loom's atomics are objects of the model: store through each, as any write.
        for (i, entry) in entries.as_slice().iter().enumerate() {
            entry.stamp.store(i as u64, crate::sync::Ordering::Relaxed);
        }
        return entries;
    }
    let first = entries.as_mut_ptr();
    let mut i = 0;
    // A plain loop over a raw pointer: under Miri an iterator's steps, or a reference made per
    // element, cost several times the store itself.
    while i < len {
        // SAFETY: `i < len`: an element of the table, which `entries` owns and nothing else
        // refers to yet; `AtomicU64` has no drop, so assigning over it only writes the word.
        unsafe { (*first.add(i)).stamp = AtomicU64::new(i as u64) };
        i += 1;
    }
    entries
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;

    #[test]
    fn a_new_table_has_entry_i_free_for_position_i_and_no_values() {
        for len in [0, 1, 7, 1000] {
            let entries = table(len);
            assert_eq!(entries.len(), len);
            for (i, entry) in entries.as_slice().iter().enumerate() {
                assert_eq!(entry.stamp.load(Ordering::Relaxed), i as u64);
                assert_eq!(entry.value.load(Ordering::Relaxed), 0);
            }
        }
    }
}
