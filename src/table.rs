//! Fixed tables (tenant slots, ticket cells, ring entries) that lend one element at a time.
//!
//! A `Box<[T]>` would do natively. But a slice's own methods (`len`, `get`, `iter`) take a
//! reference to the whole slice, and Miri's borrow tracker retags every byte a reference covers.
//! A per-element `len()` or `get()` on a table of thousands of entries then costs the whole table
//! each time: a table walk turns quadratic, and one grant on an engine of the default size took
//! seconds under Miri. `Table` reads the length from the pointer and indexes in place, so only
//! the element is borrowed. Natively it costs nothing: the length is read from the same pointer.

use std::ops::Index;

pub(crate) struct Table<T> {
    items: Box<[T]>,
}

impl<T> Table<T> {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // A raw pointer to the slice: its length without a reference to every element.
        (&raw const *self.items).len()
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        if index < self.len() {
            Some(&self.items[index])
        } else {
            None
        }
    }

    /// The first element's address and the table's size in bytes, for a prefetch.
    pub(crate) fn bytes(&self) -> (*const u8, usize) {
        let items = &raw const *self.items;
        (items.cast(), items.len() * std::mem::size_of::<T>())
    }

    /// The whole table, for scans off the hot path: one borrow for the whole walk.
    pub(crate) fn as_slice(&self) -> &[T] {
        &self.items
    }
}

impl<T> Index<usize> for Table<T> {
    type Output = T;

    #[inline]
    fn index(&self, index: usize) -> &T {
        &self.items[index]
    }
}

impl<T> FromIterator<T> for Table<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Table {
            items: iter.into_iter().collect(),
        }
    }
}
