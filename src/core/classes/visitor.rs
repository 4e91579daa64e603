//! Taking a tenant from a picked class and putting it back: the class ring and the visitor
//! slot ahead of it.
//!
//! A class's only ready tenant waits in a slot ahead of its ring (behind a tenant whose visit
//! continues, so single-threaded the order is the ring's), tagged with the caller that put it
//! there (`Visitor`). While its class holds most of the ready weight, a caller on another thread
//! leaves it to that caller for a short wait and answers `Empty` if that caller came back for it;
//! it takes it if it stayed put. So one hot tenant is served by one caller at a time, its lines
//! staying in that caller's cache, instead of changing cores on every grant. Such a visitor never
//! holds up the class's ring: a caller passes over it to the ring's next tenant.

use super::*;
use crate::core::packed::Field;

/// A visitor slot is empty.
pub(super) const NO_VISITOR: u64 = u64::MAX;

/// The visitor slot of a tenant whose visit continues; served first.
pub(super) const CONTINUING: usize = 0;

/// The visitor slot of a class's only ready tenant, starting a new visit; served next.
pub(super) const FIRST: usize = 1;

/// A class's visitor, packed in one word: `seq << 40 | owner << 33 | new_visit << 32 | tenant`.
/// `owner` is the calling thread's statistics row plus one (`tally::row`), 0 for a caller without
/// one; `seq` is the low bits of the tenant's grant count when it was put there, so a caller
/// that waits on it sees whether its owner took it again meanwhile.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Visitor(u64);

/// The fields of a [`Visitor`], from bit 0 up.
const TENANT: Field = Field::first(32);
const NEW_VISIT: Field = Field::after(TENANT, 1);
const OWNER: Field = Field::after(NEW_VISIT, 7);
const SEQ: Field = Field::after(OWNER, 24);
// Owner tags are a statistics row plus one, 0 for none.
const _: () = assert!(OWNER.max() >= crate::core::tally::ROWS as u64);

impl Visitor {
    pub(super) fn new(tenant: u32, new_visit: bool, owner: u64, seq: u64) -> Visitor {
        Visitor(
            SEQ.put(seq)
                | OWNER.put(owner)
                | NEW_VISIT.put(u64::from(new_visit))
                | TENANT.put(u64::from(tenant)),
        )
    }

    pub(crate) fn tenant(self) -> u32 {
        TENANT.get(self.0) as u32
    }

    fn new_visit(self) -> bool {
        NEW_VISIT.get(self.0) == 1
    }

    /// The slot it waits in: a new visit in `FIRST`, a continued one in `CONTINUING`.
    fn slot(self) -> usize {
        if self.new_visit() {
            FIRST
        } else {
            CONTINUING
        }
    }

    /// Whether a caller with owner tag `me` (`owner_tag`) should leave it to the caller that
    /// put it here.
    fn owned_by_other(self, me: u64) -> bool {
        let owner = OWNER.get(self.0);
        owner != 0 && owner != me
    }
}

/// This thread's owner tag: its statistics row plus one, or 0.
#[inline]
fn owner_tag() -> u64 {
    crate::core::tally::row().map_or(0, |row| row as u64 + 1)
}

/// What `Classes::take` found.
pub(crate) enum Take {
    /// A tenant to serve, and whether it starts a new visit.
    Tenant(u32, bool),
    /// Only the visitor, put there by another caller that may take it again at once.
    Owned(Visitor),
    /// Nothing to take.
    Empty,
}

impl Classes {
    /// Takes the next tenant to serve from `class`: the continuing visitor, else the first one
    /// (a new visit), else the ring head, starting a new visit. A visitor that another caller
    /// put there is passed over for the rest (its caller is likely to come back for it), and
    /// when nothing else is there, left to the taker's caller to decide on (`Take::Owned`; see
    /// `take_visitor`).
    pub(crate) fn take(&self, class: usize) -> Take {
        let class = &self.classes[class];
        let mut owned = None;
        for slot in &*class.visiting {
            // Relaxed peek: the CAS below takes it with Acquire.
            let mut word = slot.load(Ordering::Relaxed);
            while word != NO_VISITOR {
                let visitor = Visitor(word);
                if visitor.owned_by_other(owner_tag()) {
                    owned = owned.or(Some(visitor));
                    break;
                }
                // Acquire: pairs with the Release in `put_back`; the holder's slot writes are
                // ours. A lost CAS means another caller took it: the next load reads
                // `NO_VISITOR`.
                match slot.compare_exchange(word, NO_VISITOR, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => return Take::Tenant(visitor.tenant(), visitor.new_visit()),
                    Err(seen) => word = seen,
                }
            }
        }
        // A push still being written reads as empty: `take_tenant` spins briefly and comes back.
        match (class.ring.try_pop(), owned) {
            (Some(t), _) => Take::Tenant(t, true),
            (None, Some(visitor)) => Take::Owned(visitor),
            (None, None) => Take::Empty,
        }
    }

    /// Takes `visitor` from `class` if it is still there, unchanged: its owner did not come back
    /// for it. Reads the slot first: a failed CAS would take the line from an owner using it.
    pub(crate) fn take_visitor(&self, class: usize, visitor: Visitor) -> Option<(u32, bool)> {
        let slot = &self.classes[class].visiting[visitor.slot()];
        // Relaxed: a pre-check; the CAS below decides.
        if slot.load(Ordering::Relaxed) != visitor.0 {
            return None;
        }
        // Acquire: pairs with the Release in `put_back`, as in `take`. Broken on purpose: the
        // putter's slot writes are not ordered before ours.
        let order = broken_or!(Steal, Ordering::Relaxed, Ordering::AcqRel);
        slot.compare_exchange(visitor.0, NO_VISITOR, order, Ordering::Relaxed)
            .ok()
            .map(|_| (visitor.tenant(), visitor.new_visit()))
    }

    /// Puts a held tenant back: as the visitor if its visit goes on, else at the ring's tail. A
    /// factor changed since the tenant was counted in is counted again first.
    pub(crate) fn put_back(
        &self,
        class: u32,
        tenant: u32,
        visit_continues: bool,
        slot: &TenantSlot,
    ) {
        let class = &self.classes[class as usize];
        Self::recount_factor(class, slot);
        // The class's only ready tenant (the holder counts it) would be its ring's head: it
        // waits in `FIRST` instead, where the caller that just served it takes it back without
        // another caller pulling its lines across (`Take::Owned`). A tenant whose visit
        // continues still goes ahead of it, and a newcomer counted meanwhile queues behind it,
        // as behind a ring push (Relaxed: a stale count only sends it to the ring).
        let sole = !visit_continues && class.ready.load(Ordering::Relaxed) == 1;
        if (visit_continues || sole) && Self::hold_as_visitor(class, tenant, sole, slot) {
            return;
        }
        let pushed = class.ring.push(tenant);
        debug_assert!(pushed.is_ok(), "class ring sized for every tenant");
    }

    /// Puts the held `tenant` in `class`'s visitor slot for a new visit or a continued one;
    /// false when the slot is taken.
    fn hold_as_visitor(class: &Class, tenant: u32, new_visit: bool, slot: &TenantSlot) -> bool {
        // Relaxed: written only by the turn holder, which we are.
        let seq = slot.grants_total.load(Ordering::Relaxed);
        let visitor = Visitor::new(tenant, new_visit, owner_tag(), seq);
        // Release: the holder's writes to the tenant slot happen before the next holder's take.
        class.visiting[visitor.slot()]
            .compare_exchange(NO_VISITOR, visitor.0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Puts a held tenant that was taken but not served back where `take` found it, as far as
    /// it can: in the visitor slot of its visit (`new_visit`), else at the ring's tail.
    pub(crate) fn put_back_unserved(
        &self,
        class: u32,
        tenant: u32,
        new_visit: bool,
        slot: &TenantSlot,
    ) {
        let class = &self.classes[class as usize];
        Self::recount_factor(class, slot);
        if !Self::hold_as_visitor(class, tenant, new_visit, slot) {
            let pushed = class.ring.push(tenant);
            debug_assert!(pushed.is_ok(), "class ring sized for every tenant");
        }
    }

    /// A factor changed since the held tenant `slot` was counted in `class` is counted again.
    fn recount_factor(class: &Class, slot: &TenantSlot) {
        let factor = slot.factor.load(Ordering::Relaxed);
        let counted = slot.counted_factor.load(Ordering::Relaxed);
        if factor != counted {
            slot.counted_factor.store(factor, Ordering::Relaxed);
            class
                .derate
                .fetch_add(i64::from(counted) - i64::from(factor), Ordering::Relaxed);
        }
    }
}

/// Loom models of the visitor slot changing hands (run by `loom-tests/run.sh`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::core::tenants::TenantTable;
    use loom::sync::Arc;
    use loom::thread;

    /// One class (weight 1) with tenants `0..count` ready, after this thread claimed its
    /// statistics row: a claim later on would order the model's threads through the row
    /// bitmap, not through the class. The first tenant is taken (held by this thread).
    fn one_class_holding_the_first(count: usize) -> (Arc<Classes>, Arc<TenantTable>, u32) {
        crate::core::tally::row();
        let classes = Arc::new(Classes::new(1, 2 * count));
        let tenants = Arc::new(TenantTable::new(count, 2, 0));
        let class = classes.ensure(1).expect("a class");
        for t in 0..count {
            classes.make_ready(class, t as u32, tenants.slot(t as u32), false);
        }
        assert!(matches!(classes.take(0), Take::Tenant(0, true)));
        (classes, tenants, class)
    }

    /// The holder of a class's only ready tenant writes its slot and puts it back as the
    /// visitor, then takes it again, while another caller (another statistics row) finds it
    /// and takes it over: exactly one of them gets it, and a taker sees the holder's writes.
    #[test]
    fn an_owned_visitor_is_taken_once() {
        loom::model(|| {
            let (classes, tenants, class) = one_class_holding_the_first(1);
            let other = {
                let (classes, tenants) = (Arc::clone(&classes), Arc::clone(&tenants));
                thread::spawn(move || {
                    crate::core::tally::row();
                    let got = match classes.take(0) {
                        Take::Owned(visitor) => classes.take_visitor(0, visitor).is_some(),
                        Take::Tenant(t, _) => t == 0,
                        Take::Empty => false,
                    };
                    if got {
                        // Relaxed: ordered by the take (the point of the model).
                        let credit = tenants.slot(0).credit.load(Ordering::Relaxed);
                        assert_eq!(credit, 42, "the holder's slot write is not visible");
                    }
                    got
                })
            };
            // Relaxed: published by the put-back's Release.
            tenants.slot(0).credit.store(42, Ordering::Relaxed);
            classes.put_back(class, 0, false, tenants.slot(0));
            let mine = matches!(classes.take(0), Take::Tenant(0, _));
            let theirs = other.join().unwrap();
            assert!(
                mine != theirs,
                "taken by both or by neither: {mine} {theirs}"
            );
        });
    }

    /// A tenant whose visit continues, put back by its holder, does not hold up the class: a
    /// caller on another thread takes the ring's next tenant instead, whether it comes before
    /// or after the put-back, and the holder takes its own tenant back.
    #[test]
    fn a_continuing_visitor_lets_the_ring_go_first() {
        loom::model(|| {
            let (classes, tenants, class) = one_class_holding_the_first(2);
            let other = {
                let classes = Arc::clone(&classes);
                thread::spawn(move || {
                    crate::core::tally::row();
                    match classes.take(0) {
                        Take::Tenant(t, _) => Some(t),
                        Take::Owned(_) | Take::Empty => None,
                    }
                })
            };
            classes.put_back(class, 0, true, tenants.slot(0));
            let mine = matches!(classes.take(0), Take::Tenant(0, false));
            assert_eq!(other.join().unwrap(), Some(1), "the ring's tenant waited");
            assert!(mine, "the holder did not get its continuing tenant back");
        });
    }

    /// `take_visitor` with a Relaxed CAS: the holder's slot write may be missed.
    #[cfg(fairq_broken)]
    #[test]
    #[should_panic(expected = "not visible")]
    fn broken_steal_is_caught() {
        crate::broken::with(crate::broken::Break::Steal, an_owned_visitor_is_taken_once);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_visitor_word_round_trips_and_holds_every_owner_tag() {
        crate::core::packed::tests::round_trips(&[TENANT, NEW_VISIT, OWNER, SEQ]);
        assert_eq!(SEQ.end(), 64, "the fields fill the word");
        let v = Visitor::new(u32::MAX - 1, true, 5, u64::MAX);
        assert_eq!(
            (v.tenant(), v.new_visit(), v.slot()),
            (u32::MAX - 1, true, FIRST)
        );
        assert!(v.owned_by_other(6) && !v.owned_by_other(5));
        // The grant count is kept to its low bits; a tenant index never reads as NO_VISITOR.
        assert_eq!(SEQ.get(v.0), SEQ.max());
        assert_ne!(v.0, NO_VISITOR);
    }
}
