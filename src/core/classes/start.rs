//! The start-up: grants made before requests first waited are charged once they do.
//!
//! # The first window
//! SWRR charges a pick only against the classes ready with it. When the engine starts, the
//! first arrivals find free permits and are granted at once, each alone, so those grants would
//! never be paid back: with 15 permits and weights 8/4/2/1, the weight-1 tenant's first minute
//! was well over its share. So the start-up is tracked (`Start`):
//! - *Open*: until a request first waits for a permit. A grant is counted in its class's
//!   `served` and its lane tag is charged against every class present (granted or ready).
//!   More than a window of cost units (`max_in_flight`) granted first ends the start-up
//!   uncharged: the engine has been serving without contention for a while.
//! - *Waiting*: requests wait. The next grant first charges the window: each present class's
//!   credit gains what SWRR would have charged it had every present class been ready for those
//!   grants (picked alone, they changed no credit), at most a window of picks either way. A
//!   tenant that arrived while the others waited is present too: it is owed its share.
//! - *Charged*: for one more window a lane grant pays its SWRR step (the start-up's tenants all
//!   come back "from idle", and would otherwise take a grant each outside the split).
//! - *Done*: grants are charged as usual. The state is read once per grant.

use super::*;

/// The start-up's stages (module docs, "The first window").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Start {
    /// Nothing has waited for a permit yet, and at most a window of cost units was granted.
    Open = 0,
    /// Requests wait for permits; the next grant charges the first window first.
    Waiting = 1,
    /// The first window was charged; lane grants are charged too until two windows are out.
    Charged = 2,
    /// Grants are charged as usual.
    Done = 3,
}

impl Classes {
    /// Counts `cost` units granted in `class` (the lane's clock).
    pub(crate) fn record_served(&self, class: u32, cost: u32) {
        let served = &self.classes[class as usize].served;
        // Relaxed load + store, not an RMW: a clock that may run a little slow when two
        // granters of one class race (`lane.rs`); it orders nothing.
        served.store(
            served.load(Ordering::Relaxed) + u64::from(cost),
            Ordering::Relaxed,
        );
    }

    /// Where the start-up stands (module docs, "The first window").
    #[inline]
    pub(crate) fn start(&self) -> Start {
        // Relaxed: a switch; a granter that misses a change counts one grant more in the
        // stage before.
        match self.start.load(Ordering::Relaxed) {
            0 => Start::Open,
            1 => Start::Waiting,
            2 => Start::Charged,
            _ => Start::Done,
        }
    }

    /// Requests wait for permits for the first time: the next grant charges the first window.
    pub(crate) fn first_wait(&self) {
        // Relaxed: as in `start`; a CAS, so a start-up that ended stays ended.
        let _ = self.start.compare_exchange(
            Start::Open as u32,
            Start::Waiting as u32,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Ends the start-up: later grants are charged as usual.
    pub(crate) fn end_start(&self) {
        // Relaxed: as in `start`.
        self.start.store(Start::Done as u32, Ordering::Relaxed);
    }

    /// The SWRR total of the classes present in the first window (those granted in it or with
    /// tenants ready), each at `weight × ready tenants`, at least one tenant: the weight a
    /// grant in it is shared against.
    pub(crate) fn present_total(&self) -> i64 {
        self.present().map(|(_, gain, _)| gain).sum()
    }

    /// `(class, gain, served)` of each class present in the first window.
    fn present(&self) -> impl Iterator<Item = (&Class, i64, u64)> + '_ {
        self.classes[..self.allocated()].iter().filter_map(|class| {
            // Relaxed: snapshots, as in `step`.
            let ready = class.ready.load(Ordering::Relaxed).max(0);
            let served = class.served.load(Ordering::Relaxed);
            let used = class.weight.load(Ordering::Relaxed) != 0;
            (used && (ready > 0 || served > 0))
                .then(|| (&**class, class.gain(ready.max(1)), served))
        })
    }

    /// The first grant after requests first waited: the first window's grants are charged to
    /// the SWRR credits as if every class present now had been ready for all of them (a class
    /// whose tenants arrived while the others waited is present too). Each class's credit
    /// gains what those unit steps would have given it, `S·g − s·G` (`S`, `G`: cost units and
    /// gains of all present classes; `s`, `g`: the class's), at most `permits` picks either way;
    /// the changes sum to 0, and are added, so picks racing the charge keep their steps. The
    /// charger holds the batch computer's flag, as the credits' scale is the batch's (`settle`);
    /// while another caller computes a batch it leaves the charge to the next grant. Only one
    /// caller charges.
    pub(crate) fn charge_first_window(&self, permits: u64) {
        let schedule = &self.schedule;
        // Acquire: as in `pick_batched`, the previous computer's writes happen before ours.
        if schedule
            .computing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.charge_holding_schedule(permits);
        // Release: the next computer sees our writes.
        schedule.computing.store(false, Ordering::Release);
    }

    fn charge_holding_schedule(&self, permits: u64) {
        // Relaxed: one CAS elects the charger; the stage publishes nothing.
        if self
            .start
            .compare_exchange(
                Start::Waiting as u32,
                Start::Charged as u32,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return;
        }
        // One snapshot: ready counts move meanwhile, and the changes must sum to 0 over it.
        let present: arrayvec::ArrayVec<_, CLASS_LIMIT> = self.present().collect();
        let units: i128 = present.iter().map(|&(_, _, s)| i128::from(s)).sum();
        let gains: i128 = present.iter().map(|&(_, g, _)| i128::from(g)).sum();
        let mut targets = arrayvec::ArrayVec::<(&Class, i128), CLASS_LIMIT>::new();
        for (class, gain, served) in present {
            targets.push((class, units * i128::from(gain) - i128::from(served) * gains));
        }
        // The targets sum to 0, as SWRR credits do. Past the cap they are scaled down together,
        // and the rounding goes to the last, so they still do.
        // (Under a quarter of `i64::MAX` too, so the credits can still move both ways.)
        let cap = (i128::from(permits).max(1) * gains).min(i128::from(i64::MAX / 4));
        let largest = targets.iter().map(|(_, t)| t.abs()).max().unwrap_or(0);
        if largest > cap {
            // Divided by a whole factor (no product to overflow): at most `cap` each after.
            let factor = (largest + cap - 1) / cap;
            for (_, target) in targets.iter_mut() {
                *target /= factor;
            }
            let rest: i128 = targets.iter().map(|(_, t)| t).sum();
            if let Some((_, last)) = targets.last_mut() {
                *last -= rest;
            }
        }
        for (class, target) in targets {
            // In range: within the cap (the rounding moves the last by less than a class each).
            let target = i64::try_from(target).unwrap_or(0);
            broken!(FirstWindow, {
                // Broken on purpose: store the target; a concurrent pick's step is lost.
                class.current.store(target, Ordering::Relaxed);
                continue;
            });
            // Relaxed: SWRR credits are weights, read by picks as snapshots. Added, not stored:
            // the picks that step meanwhile keep their steps, and the credits' sum is kept.
            class.current.fetch_add(target, Ordering::Relaxed);
        }
        // The credits are now earned at the present classes' total: the next batch rescales
        // them to the total of the classes ready then (`settle`).
        if let Ok(gains @ 1..) = i64::try_from(gains) {
            self.schedule.scale_total.store(gains, Ordering::Relaxed);
        }
        self.invalidate();
    }

    /// Cost units granted so far, all classes: the light-tenant lane's virtual clock.
    #[inline]
    pub(crate) fn served(&self) -> u64 {
        self.classes[..self.allocated()]
            .iter()
            // Relaxed: a clock reading, see `record_served`.
            .map(|c| c.served.load(Ordering::Relaxed))
            .sum()
    }
}
