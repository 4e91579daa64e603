//! Off the hot path: weights (by key, whole tables, classes), what features read and set,
//! and the statistics.

use super::*;

impl<H: Hooks> Core<H> {
    /// Sets the weight of a tenant by key. A live tenant takes it at its next turn.
    pub(crate) fn set_weight_key(&self, key: TenantKey, weight: u32) -> Result<(), Error> {
        if weight == 0 || weight > MAX_WEIGHT {
            return Err(Error::InvalidArgument("weight must be in 1..=10000"));
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let next = self.weights.with(|w| w.with_entry(key.get(), weight));
        if !self.within_class_limit(&next) {
            return Err(Error::TooManyWeightClasses);
        }
        let class = self
            .class_for(weight, Some(&next))
            .ok_or(Error::TooManyWeightClasses)?;
        self.weights.store(next);
        self.apply_weight(key.get(), weight, class);
        Ok(())
    }

    /// Replaces the whole weight table (hashed keys) and the default weight, at run time.
    pub(crate) fn replace_weight_keys(
        &self,
        entries: &[(u64, u32)],
        default_weight: u32,
    ) -> Result<(), Error> {
        let valid = |w: u32| (1..=MAX_WEIGHT).contains(&w);
        if !valid(default_weight) || entries.iter().any(|&(_, w)| !valid(w)) {
            return Err(Error::InvalidArgument("weight must be in 1..=10000"));
        }
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let next = WeightTable::from_entries(entries.iter().copied(), default_weight);
        let mut distinct: Vec<u32> = next.weights().collect();
        distinct.sort_unstable();
        distinct.dedup();
        if !self.within_class_limit(&next) {
            return Err(Error::TooManyWeightClasses);
        }
        if !self.classes.can_hold(&distinct) {
            self.classes.collect(self.referenced_classes(Some(&next)));
            if !self.classes.can_hold(&distinct) {
                return Err(Error::TooManyWeightClasses);
            }
        }
        for &w in &distinct {
            self.classes.ensure(w);
        }
        self.weights.store(next);
        for index in 0..self.tenants.len() as SlotId {
            let key = self.tenants.slot(index).key.load(Ordering::Relaxed);
            if key != 0 {
                let w = self.weights.with(|table| table.get(key));
                let class = self.classes.find(w).unwrap_or(0);
                self.apply_weight(key, w, class);
            }
        }
        Ok(())
    }

    /// Whether `table`'s distinct weights, with the permanent ones (tiers), fit `max_weight_classes`.
    fn within_class_limit(&self, table: &WeightTable) -> bool {
        let mut distinct: Vec<u32> = table
            .weights()
            .chain(self.limits.permanent_weights.iter().copied())
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        distinct.len() <= self.limits.max_weight_classes as usize
    }

    /// The class of `weight`, freeing the classes no one refers to any more if every class is
    /// taken (`next`: the weight table about to be published, whose weights must keep theirs).
    /// Admin lock held.
    fn class_for(&self, weight: u32, next: Option<&WeightTable>) -> Option<ClassId> {
        if let Some(class) = self.classes.ensure(weight) {
            return Some(class);
        }
        self.classes.collect(self.referenced_classes(next));
        self.classes.ensure(weight)
    }

    /// A bit for every class something refers to: a tenant slot's class, a weight of `next` (the
    /// table about to be published) or else of the table in use. O(slots + table entries); admin
    /// lock held.
    fn referenced_classes(&self, next: Option<&WeightTable>) -> u64 {
        let mut referenced = 0u64;
        for slot in self.tenants.slots() {
            // Relaxed: admin lock held; a slot being claimed reads the weight table, whose
            // weights are kept below.
            if slot.key.load(Ordering::Relaxed) != 0 {
                referenced |= 1 << slot.class.load(Ordering::Relaxed);
            }
        }
        let mut keep = |table: &WeightTable| {
            for w in table.weights() {
                if let Some(c) = self.classes.find(w) {
                    referenced |= 1 << c;
                }
            }
        };
        // The table about to replace the current one, else the current one: a weight only the
        // outgoing table has may be freed now (see `weight_and_class`).
        match next {
            Some(next) => keep(next),
            None => self.weights.with(&mut keep),
        }
        referenced
    }

    fn apply_weight(&self, key: u64, weight: u32, class: ClassId) {
        if let Some(t) = self.tenants.pin_existing(key) {
            let slot = self.tenants.slot(t);
            slot.weight.store(weight, Ordering::Relaxed);
            slot.class.store(class, Ordering::Relaxed);
            self.tenants.release_live(t, 1, 0);
        }
    }

    /// The weight a tenant gets now: its live slot's, else the table's.
    pub(crate) fn weight_of(&self, key: TenantKey) -> u32 {
        if let Some(t) = self.tenants.pin_existing(key.get()) {
            let w = self.tenants.slot(t).weight.load(Ordering::Relaxed);
            self.tenants.release_live(t, 1, 0);
            return w;
        }
        self.weights.with(|w| w.get(key.get()))
    }

    /// Schedules a live tenant at effective weight `weight × factor / 1024` (fleet mode).
    /// Returns whether the tenant holds a slot.
    pub(crate) fn set_fleet_factor(&self, key: TenantKey, factor: u32) -> Result<bool, Error> {
        if !(MIN_FLEET_FACTOR..=FACTOR_ONE).contains(&factor) {
            return Err(Error::InvalidArgument("fleet factor must be in 20..=1024"));
        }
        let Some(t) = self.tenants.pin_existing(key.get()) else {
            return Ok(false);
        };
        // Relaxed: the tenant's turn holder reads it at its next placement or visit.
        self.tenants.slot(t).factor.store(factor, Ordering::Relaxed);
        if self.lane_open.load(Ordering::Relaxed) {
            // Relaxed: as above.
            self.lane_open.store(false, Ordering::Relaxed);
        }
        self.tenants.release_live(t, 1, 0);
        Ok(true)
    }

    /// Every tenant holding a slot (off the hot path: it scans the table).
    pub(crate) fn fleet_tenants(&self, out: &mut Vec<FleetTenant>) {
        for index in 0..self.tenants.len() as SlotId {
            let Some(t) = self.tenants.pin_index(index) else {
                continue;
            };
            let slot = self.tenants.slot(t);
            // Relaxed: a snapshot of counters.
            out.push(FleetTenant {
                tenant: TenantKey::from_hash(slot.key.load(Ordering::Relaxed)),
                weight: slot.weight.load(Ordering::Relaxed),
                factor: slot.factor.load(Ordering::Relaxed),
                served_cost: slot.granted_cost(),
                queued: self.tenants.depth(t),
            });
            self.tenants.release_live(t, 1, 0);
        }
    }

    /// Places tenants a feature hands back outside the hooks' own returns (load shedding's
    /// pool limit grew, so blocked tenants may be granted without a release to wake them).
    pub(crate) fn place_unblocked(&self, slots: impl IntoIterator<Item = SlotId>, now: u64) {
        let now = self.monotonic(now);
        for t in slots {
            self.place(t, None, false, now);
        }
    }

    /// When a parked or blocked tenant may next become ready (monotonic ns).
    pub(crate) fn next_wakeup_ns(&self) -> Option<u64> {
        match (self.wheel.next_tick_ns(), self.hooks.wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// With seats on, the permits the grants out hold now.
    pub(crate) fn seats_in_flight(&self) -> Option<u64> {
        self.limits.seats.then(|| self.permits.load().1)
    }

    /// The gauges of `stats` (queued, in flight, tenants), the counters left at zero.
    pub(crate) fn load(&self) -> Stats {
        let (queued, mut in_flight) = self.permits.load();
        if self.limits.seats {
            // Relaxed: a gauge (the permit word counts seats).
            in_flight = self.grants_out.load(Ordering::Relaxed);
        }
        Stats {
            queued,
            in_flight,
            tenants: self.tenants.active(),
            ..Stats::default()
        }
    }

    /// A snapshot of gauges and counters. Reads every tenant slot (O(`max_tenants`)).
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.load();
        // Grants are counted per slot by the tenant's turn holder (no shared RMW per grant);
        // the slot's lifetime total is never reset, so the sum only grows.
        for slot in self.tenants.slots() {
            stats.granted += slot.grants_total();
            stats.lane_granted += slot.lane_grants_total();
        }
        self.counters.each(|line| {
            // Relaxed: a snapshot of statistics.
            let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
            stats.enqueued += get(&line.enqueued);
            stats.completed += get(&line.completed);
            stats.requeued += get(&line.requeued);
            stats.cancelled += get(&line.cancelled);
            stats.expired += get(&line.expired);
            stats.refused_after_wait += get(&line.refused_after_wait);
            for (total, c) in stats.refused.iter_mut().zip(line.refused.iter()) {
                *total += get(c);
            }
        });
        stats
    }

    /// Weight classes in use (allocated and not freed).
    pub(crate) fn classes_in_use(&self) -> usize {
        self.classes.snapshot().iter().filter(|c| c.0 != 0).count()
    }

    /// Tests and loom models: `(weight, ready tenants, SWRR current weight)` of every class in
    /// use.
    pub(crate) fn debug_classes(&self) -> Vec<(u32, i64, i64)> {
        self.classes.snapshot()
    }

    /// Debug builds: tenant slots touched so far (the scale test's probe).
    pub(crate) fn debug_slot_touches(&self) -> u64 {
        self.tenants.touches()
    }
}

impl<H: Hooks> CoreAccess for Core<H> {
    fn slot_count(&self) -> usize {
        self.tenants.len()
    }

    fn tenant_view(&self, t: SlotId) -> Option<TenantView> {
        let slot = self.tenants.get(t)?;
        // Relaxed: a snapshot of statistics.
        let key = slot.key.load(Ordering::Relaxed);
        if key == 0 {
            return None;
        }
        let class = slot.class.load(Ordering::Relaxed);
        Some(TenantView {
            slot: t,
            key: TenantKey::from_hash(key),
            weight: slot.weight.load(Ordering::Relaxed),
            class_weight: self.classes.weight(class),
            class,
            effective_weight: slot.effective_weight(),
            granted: slot.granted(),
            granted_cost: slot.granted_cost(),
        })
    }

    fn with_tenant<R>(&self, key: TenantKey, f: impl FnOnce(TenantView) -> R) -> Option<R> {
        let t = self.tenants.pin_existing(key.get())?;
        let out = self.tenant_view(t).map(f);
        self.tenants.release_live(t, 1, 0);
        out
    }

    fn add_class_extra(&self, class: ClassId, delta: i64) {
        self.classes.add_extra(class, delta);
    }

    fn move_to_class(&self, key: TenantKey, weight: u32) -> bool {
        let _admin = self.admin.lock().unwrap_or_else(|e| e.into_inner());
        let Some(class) = self.class_for(weight, None) else {
            return false; // no weight class left for it
        };
        let Some(t) = self.tenants.pin_existing(key.get()) else {
            return false;
        };
        // Relaxed: the tenant's turn holder picks the new class up at its next placement, like
        // a `set_weight`.
        self.tenants.slot(t).class.store(class, Ordering::Relaxed);
        self.tenants.release_live(t, 1, 0);
        true
    }
}
