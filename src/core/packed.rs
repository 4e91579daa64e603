//! Packed words: several counts or indices in one `u64`, so that one atomic RMW changes them
//! together. A layout is a list of [`Field`]s, each declared after the one below it; shifts and
//! masks come from the widths, never written by hand at a use site.

/// `width` bits of a word, starting at bit `shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    shift: u32,
    width: u32,
}

impl Field {
    /// The field at bit 0.
    pub(crate) const fn first(width: u32) -> Field {
        Field::at(0, width)
    }

    /// The field just above `below`.
    pub(crate) const fn after(below: Field, width: u32) -> Field {
        Field::at(below.shift + below.width, width)
    }

    const fn at(shift: u32, width: u32) -> Field {
        assert!(
            width > 0 && shift + width <= 64,
            "a field must fit the word"
        );
        Field { shift, width }
    }

    /// The largest value the field holds.
    pub(crate) const fn max(self) -> u64 {
        u64::MAX >> (64 - self.width)
    }

    /// The field's bits in the word.
    pub(crate) const fn mask(self) -> u64 {
        self.max() << self.shift
    }

    /// One unit of the field, to add to or subtract from the word.
    pub(crate) const fn one(self) -> u64 {
        1 << self.shift
    }

    /// The field's value in `word`.
    #[inline(always)]
    pub(crate) const fn get(self, word: u64) -> u64 {
        (word >> self.shift) & self.max()
    }

    /// `value` in the field's place, its bits above the width dropped.
    #[inline(always)]
    pub(crate) const fn put(self, value: u64) -> u64 {
        (value & self.max()) << self.shift
    }

    /// The bit just above the field (the next field's shift).
    #[cfg(all(test, not(loom)))]
    pub(crate) const fn end(self) -> u32 {
        self.shift + self.width
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::Field;

    /// A small deterministic generator (xorshift), so the property runs the same every time.
    fn values(mut seed: u64, n: usize) -> impl Iterator<Item = u64> {
        (0..n).map(move |_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        })
    }

    /// Every value that fits each field comes back from a word holding all of them, and the
    /// fields' masks neither overlap nor leave the word.
    pub(crate) fn round_trips(fields: &[Field]) {
        let mut covered = 0u64;
        for f in fields {
            assert_eq!(covered & f.mask(), 0, "fields overlap: {fields:?}");
            covered |= f.mask();
            assert_eq!(f.get(f.mask()), f.max());
            // A value past the width loses its high bits, not a neighbour's.
            assert_eq!(f.put(f.max().wrapping_add(1)), 0);
        }
        let mut rng = values(0x9E37_79B9_7F4A_7C15, 10_000);
        for _ in 0..10_000 / fields.len().max(1) {
            let vals: Vec<u64> = fields
                .iter()
                .map(|f| rng.next().unwrap() & f.max())
                .chain([0])
                .collect();
            let word = fields.iter().zip(&vals).fold(0, |w, (f, &v)| w | f.put(v));
            for (f, &v) in fields.iter().zip(&vals) {
                assert_eq!(f.get(word), v, "{f:?} in {word:#x}");
                // Adding and taking one unit touches no other field.
                if v < f.max() {
                    let up = word + f.one();
                    assert_eq!(f.get(up), v + 1);
                    for g in fields.iter().filter(|g| *g != f) {
                        assert_eq!(g.get(up), g.get(word));
                    }
                }
            }
        }
    }

    #[test]
    fn widths_give_shifts_and_masks() {
        let a = Field::first(21);
        let b = Field::after(a, 21);
        let c = Field::after(b, 22);
        assert_eq!((a.mask(), a.one()), ((1 << 21) - 1, 1));
        assert_eq!((b.mask(), b.one()), (((1 << 21) - 1) << 21, 1 << 21));
        assert_eq!(
            (c.mask(), c.one(), c.end()),
            (((1 << 22) - 1) << 42, 1 << 42, 64)
        );
        assert_eq!(Field::first(64).max(), u64::MAX);
        round_trips(&[a, b, c]);
    }
}
