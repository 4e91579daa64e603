//! The weight table: tenant key → weight, replaced whole at run time.
//!
//! Readers (a tenant claiming a slot) see one consistent table through the shim's `SharedPtr`
//! (`ArcSwap`), without locking. Writers build a new table and swap it in.

use std::collections::HashMap;

/// An immutable weight table.
#[derive(Clone, Debug, Default)]
pub(crate) struct WeightTable {
    by_key: HashMap<u64, u32, std::hash::BuildHasherDefault<ahash::AHasher>>,
    default_weight: u32,
}

impl WeightTable {
    pub(crate) fn new(default_weight: u32) -> WeightTable {
        WeightTable {
            by_key: HashMap::default(),
            default_weight,
        }
    }

    /// The weight of `key`: its entry, else the default.
    pub(crate) fn get(&self, key: u64) -> u32 {
        self.by_key
            .get(&key)
            .copied()
            .unwrap_or(self.default_weight)
    }

    /// Every weight the table can give: its entries' and the default (with repeats).
    pub(crate) fn weights(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_key
            .values()
            .copied()
            .chain(std::iter::once(self.default_weight))
    }

    pub(crate) fn with_entry(&self, key: u64, weight: u32) -> WeightTable {
        let mut next = self.clone();
        next.by_key.insert(key, weight);
        next
    }

    pub(crate) fn from_entries(
        entries: impl IntoIterator<Item = (u64, u32)>,
        default_weight: u32,
    ) -> WeightTable {
        WeightTable {
            by_key: entries.into_iter().collect(),
            default_weight,
        }
    }
}
