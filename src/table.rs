//! Fixed tables (tenant slots, ticket cells, ring entries) that lend one element at a time.
//!
//! A `Box<[T]>` would do natively. But a slice's own methods (`len`, `get`, `iter`) take a
//! reference to the whole slice, and Miri's borrow tracker retags every byte a reference covers.
//! A per-element `len()` or `get()` on a table of thousands of entries then costs the whole table
//! each time: a table walk turns quadratic, and one grant on an engine of the default size took
//! seconds under Miri. `Table` reads the length from the pointer and indexes in place, so only
//! the element is borrowed. Natively it costs nothing: the length is read from the same pointer.
//!
//! The largest tables (the rings' entries, the indicators' side table) are allocated zeroed
//! ([`Table::zeroed`]) rather than collected element by element: under Miri, which interprets
//! every step of a collect, building an engine of the default size took about 40 s, nearly all
//! of it collecting those tables.

use std::ops::Index;

/// A type whose `Default` value is all zero bytes, so a table of defaults can be one zeroed
/// allocation.
///
/// # Safety
/// All-zero bytes must be a valid value of the type, equal to its `Default`.
#[allow(unsafe_code)]
pub(crate) unsafe trait Zeroed: Default {}

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

    /// The first element, for a constructor that writes the elements in place.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.items.as_mut_ptr()
    }

    /// A table of `len` default values, allocated zeroed (see the module docs). Under loom,
    /// whose atomics are not plain memory, each element is built.
    #[allow(unsafe_code)]
    pub(crate) fn zeroed(len: usize) -> Table<T>
    where
        T: Zeroed,
    {
        let layout = std::alloc::Layout::array::<T>(len).expect("table size overflows");
        if cfg!(loom) || layout.size() == 0 {
            return (0..len).map(|_| T::default()).collect();
        }
        // SAFETY: `layout` has a non-zero size (checked above).
        let first = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
        if first.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `first` is a live allocation of the global allocator with the layout of
        // `[T; len]`, which is what a `Box<[T]>` of `len` elements frees; its bytes are all zero,
        // a valid `T` (the `Zeroed` contract), so every element is initialized.
        let items = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(first, len)) };
        Table { items }
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
