//! The weight table: tenant key → weight, replaced whole at run time.
//!
//! Readers (a tenant claiming a slot) see one consistent table through the shim's `SharedPtr`
//! (`ArcSwap`), without locking. Writers build a new table and swap it in.
//!
//! A new table shares what it does not change with the one it replaces: the entries are split
//! over `SHARDS` maps by key, each behind an `Arc`, so `set_weight` copies one shard, not the
//! whole table. The table also counts its entries per distinct weight, so checking the engine's
//! limit on weight classes reads those counts instead of every entry. A control plane that sets
//! the weights of many tenants one at a time then pays a small, nearly constant cost per call.

use std::collections::HashMap;
use std::sync::Arc;

/// Maps a table's entries are split over, by key. Keys are hashes, so the split is even.
const SHARDS: usize = 64;

type Shard = HashMap<u64, u32, std::hash::BuildHasherDefault<ahash::AHasher>>;

/// An immutable weight table.
#[derive(Clone, Debug)]
pub(crate) struct WeightTable {
    shards: [Arc<Shard>; SHARDS],
    /// Each distinct weight of the entries with the number of entries that have it, ascending
    /// by weight. Short: a table the engine publishes has at most `max_weight_classes` of them.
    distinct: Vec<(u32, u32)>,
    default_weight: u32,
}

fn shard_of(key: u64) -> usize {
    (key % SHARDS as u64) as usize
}

impl WeightTable {
    pub(crate) fn new(default_weight: u32) -> WeightTable {
        let empty = Arc::new(Shard::default());
        WeightTable {
            shards: std::array::from_fn(|_| Arc::clone(&empty)),
            distinct: Vec::new(),
            default_weight,
        }
    }

    /// The weight of `key`: its entry, else the default.
    pub(crate) fn get(&self, key: u64) -> u32 {
        self.shards[shard_of(key)]
            .get(&key)
            .copied()
            .unwrap_or(self.default_weight)
    }

    /// Every weight the table can give: its entries' distinct weights and the default.
    pub(crate) fn weights(&self) -> impl Iterator<Item = u32> + '_ {
        self.distinct
            .iter()
            .map(|&(weight, _)| weight)
            .chain(std::iter::once(self.default_weight))
    }

    /// This table with `key`'s entry set to `weight`. Copies only the shard that holds `key`.
    pub(crate) fn with_entry(&self, key: u64, weight: u32) -> WeightTable {
        let mut next = self.clone();
        let before = Arc::make_mut(&mut next.shards[shard_of(key)]).insert(key, weight);
        if let Some(old) = before {
            count(&mut next.distinct, old, -1);
        }
        count(&mut next.distinct, weight, 1);
        next
    }

    pub(crate) fn from_entries(
        entries: impl IntoIterator<Item = (u64, u32)>,
        default_weight: u32,
    ) -> WeightTable {
        let mut shards: [Shard; SHARDS] = std::array::from_fn(|_| Shard::default());
        for (key, weight) in entries {
            // A key given twice keeps its last weight.
            shards[shard_of(key)].insert(key, weight);
        }
        let mut distinct = Vec::new();
        for &weight in shards.iter().flat_map(Shard::values) {
            count(&mut distinct, weight, 1);
        }
        WeightTable {
            shards: shards.map(Arc::new),
            distinct,
            default_weight,
        }
    }
}

/// Adds `delta` (±1) to the entries `distinct` counts at `weight`; a weight no entry has any more
/// leaves it.
fn count(distinct: &mut Vec<(u32, u32)>, weight: u32, delta: i32) {
    match distinct.binary_search_by_key(&weight, |&(w, _)| w) {
        Ok(at) => {
            let entries = &mut distinct[at].1;
            *entries = entries.saturating_add_signed(delta);
            if *entries == 0 {
                distinct.remove(at);
            }
        }
        Err(at) if delta > 0 => distinct.insert(at, (weight, delta as u32)),
        Err(_) => debug_assert!(false, "uncounted weight {weight}"),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The distinct weights with their counts, recounted from every entry.
    fn recount(table: &WeightTable) -> Vec<(u32, u32)> {
        let mut counts: Vec<(u32, u32)> = Vec::new();
        for shard in &table.shards {
            for &weight in shard.values() {
                match counts.iter_mut().find(|(w, _)| *w == weight) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((weight, 1)),
                }
            }
        }
        counts.sort_unstable();
        counts
    }

    #[test]
    fn counts_follow_every_change_and_old_tables_keep_their_entries() {
        let mut table = WeightTable::from_entries([(7, 2), (9, 2), (7, 3), (200, 5)], 1);
        assert_eq!(table.get(7), 3, "a key given twice keeps its last weight");
        assert_eq!(table.distinct, recount(&table));
        assert_eq!(table.distinct, [(2, 1), (3, 1), (5, 1)]);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let changes: Vec<(u64, u32)> = (0..5_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 300 + 1, (state >> 32) as u32 % 6 + 1)
            })
            .collect();
        let mut tables = vec![table.clone()];
        for &(key, weight) in &changes {
            let next = table.with_entry(key, weight);
            assert_eq!(next.get(key), weight);
            assert_eq!(next.distinct, recount(&next), "after {key} -> {weight}");
            tables.push(next.clone());
            table = next;
        }
        // Each table still reads as it was made: a change copied its shard, never shared it.
        let mut replay = WeightTable::from_entries([(7, 2), (9, 2), (7, 3), (200, 5)], 1);
        for (old, &(key, weight)) in tables[1..].iter().zip(&changes) {
            replay = replay.with_entry(key, weight);
            for key in 1..=300 {
                assert_eq!(old.get(key), replay.get(key));
            }
        }
        assert_eq!(tables[0].get(7), 3);
        assert_eq!(
            tables[0].get(8),
            1,
            "the default for a key without an entry"
        );
    }

    #[test]
    fn weights_are_the_distinct_entry_weights_and_the_default() {
        let table = WeightTable::from_entries((1..=1000).map(|k| (k, (k % 3) as u32 + 2)), 1);
        let weights: Vec<u32> = table.weights().collect();
        assert_eq!(weights, [2, 3, 4, 1]);
        let table = table.with_entry(5000, 9);
        assert_eq!(table.weights().collect::<Vec<_>>(), [2, 3, 4, 9, 1]);
        // Moving the only entry of weight 9 away drops 9.
        let table = table.with_entry(5000, 2);
        assert_eq!(table.weights().collect::<Vec<_>>(), [2, 3, 4, 1]);
    }
}
