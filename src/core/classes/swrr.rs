//! The pick: smooth weighted round robin over the classes, one step at a time or from a batch
//! of precomputed picks.
//!
//! # Batched picks
//! A pick that adds every ready class's gain costs one RMW per class, on lines every granter
//! writes. So one caller computes the next picks in a batch (up to `BATCH`) from a snapshot of
//! the credits and gains, applies the batch's net credit change per class at once (one
//! `fetch_add` each, which conserves the sum just as the single steps would), and publishes it;
//! each later pick takes the next entry with one `fetch_add` on the batch cursor. Single-threaded
//! with constant gains, the sequence is exactly the step-by-step one. A batch is dropped when a
//! class becomes ready or idle, or its extra weight changes (`epoch`); a change in a class's ready count
//! alone leaves it at most `BATCH` picks stale. When only the ready set changed and every gain is
//! back to the batch's (a light tenant went idle and came back between two picks), the next
//! computer resumes the batch instead: from the refunded credits and the same gains a new batch
//! would compute the same picks, unless a refund or a single step moved a credit meanwhile, and
//! the resumed batch leaves those to the next computation, as a batch never dropped does.
//! Otherwise the next batch's computer first closes the cursor
//! on the old one (a swap, which also says how many of its picks were claimed) and refunds the
//! unclaimed picks, so dropping a batch costs no class its service. A batch rewritten while being
//! read is detected by its sequence word (a seqlock), and the reader falls back to a single step.
//! A refund of a batched pick undoes exactly that step, with the batch's gains.

use super::*;
use crate::core::packed::Field;

/// Whether picks are batched: always, except under loom, where the batch's atomics would
/// multiply every model's interleavings; the models of picks turn it on (`with_batched_picks`).
#[cfg(not(loom))]
#[inline(always)]
fn batching() -> bool {
    true
}

#[cfg(loom)]
thread_local! {
    // Thread-local: loom runs a model's threads on the thread that called the model.
    static BATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(loom)]
fn batching() -> bool {
    BATCHING.with(|b| b.get())
}

/// Loom models: runs `f` with batched picks on (they are off by default under loom).
#[cfg(loom)]
pub fn with_batched_picks<R>(f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BATCHING.with(|b| b.set(false));
        }
    }
    BATCHING.with(|b| b.set(true));
    let _reset = Reset;
    f()
}

/// Most picks one batch holds; a handful under loom, where every atomic is a branch point.
#[cfg(not(loom))]
pub(super) const BATCH: usize = 64;

#[cfg(loom)]
pub(super) const BATCH: usize = 3;

/// The epoch's step for a change a batch cannot be resumed after (`Classes::epoch`).
pub(super) const HARD_EPOCH: u64 = 1 << 32;

/// The cursor's fields: the next pick's index, and the batch's generation (its low bit says
/// which of the two batches).
const INDEX: Field = Field::first(32);
const GENERATION: Field = Field::after(INDEX, 32);

/// The index of a generation being computed: past any batch, with room for the claims that
/// land meanwhile.
const CLOSED_INDEX: u64 = 1 << 31;
// A closed generation's index stays in its field, with room for the claims that land late.
const _: () = assert!(CLOSED_INDEX < INDEX.max() && (BATCH as u64) < CLOSED_INDEX);

/// One batch of picks. Written only by the caller holding `Schedule::computing`.
pub(super) struct Batch {
    /// Seqlock word: odd while being written.
    pub(super) seq: AtomicU64,
    /// The cursor generation these picks belong to.
    pub(super) generation: AtomicU64,
    /// `Classes::epoch` when computed.
    pub(super) epoch: AtomicU64,
    pub(super) len: AtomicU32,
    /// The SWRR total every pick of the batch paid (gains are constant within a batch).
    pub(super) total: AtomicI64,
    pub(super) picks: [AtomicU32; BATCH],
    /// Each class's gain per pick, for refunds.
    pub(super) gains: Box<[AtomicI64]>,
}

pub(super) struct Schedule {
    /// `GENERATION` and `INDEX` (the next pick's); one `fetch_add` per pick.
    pub(super) cursor: CachePadded<AtomicU64>,
    /// Held by the one caller computing the next batch; the others step singly meanwhile.
    pub(super) computing: AtomicBool,
    /// Picks to compute next time: halved when a batch is dropped early, doubled when used up.
    pub(super) target: AtomicU32,
    /// The total gain the classes' credits were last earned at (written by the computer).
    pub(super) scale_total: AtomicI64,
    /// Two batches, by generation parity: readers of the current one never meet the writer.
    pub(super) batches: [Batch; 2],
}

impl Batch {
    pub(super) fn new(classes: usize) -> Batch {
        Batch {
            seq: AtomicU64::new(0),
            generation: AtomicU64::new(u64::MAX),
            epoch: AtomicU64::new(0),
            len: AtomicU32::new(0),
            total: AtomicI64::new(0),
            picks: std::array::from_fn(|_| AtomicU32::new(0)),
            gains: (0..classes).map(|_| AtomicI64::new(0)).collect(),
        }
    }
}

/// Moves the idle classes' (`gains == 0`) credits to the ready ones in proportion to their gains,
/// then rescales the ready ones by `total / earned_at` (when `earned_at` is set and differs). The
/// sum of all credits is kept exactly (rounding goes to the last ready class). No allocation: it
/// runs in `next_grant`.
pub(super) fn settle(current: &mut [i64], gains: &[i64], total: i64, earned_at: i64) {
    let all: i128 = current.iter().map(|&c| i128::from(c)).sum();
    let mut idle = 0i128;
    for (c, &gain) in current.iter_mut().zip(gains) {
        if gain == 0 {
            idle += i128::from(*c);
            *c = 0;
        }
    }
    let rescale = earned_at > 0 && earned_at != total;
    if idle == 0 && !rescale {
        // No idle credit to hand over and the total unchanged: nothing moves.
        return;
    }
    let Some(last) = gains.iter().rposition(|&g| g != 0) else {
        return;
    };
    for (c, &gain) in current.iter_mut().zip(gains) {
        if gain == 0 {
            continue;
        }
        let mut credit = i128::from(*c) + idle * i128::from(gain) / i128::from(total);
        if rescale {
            credit = credit * i128::from(total) / i128::from(earned_at);
        }
        *c = credit as i64;
    }
    let kept: i128 = current.iter().map(|&c| i128::from(c)).sum();
    current[last] = (i128::from(current[last]) + all - kept) as i64;
}

impl Classes {
    /// Credits or gains changed (a charge, a first window, an extra weight, a freed class): the
    /// batch no longer applies, and cannot be resumed.
    pub(super) fn invalidate(&self) {
        self.bump_epoch(HARD_EPOCH);
    }

    /// A class became ready or idle: the batch no longer applies, unless the gains come back to
    /// its own before the next batch is computed (`resume_batch`).
    pub(super) fn ready_set_changed(&self) {
        self.bump_epoch(1);
    }

    fn bump_epoch(&self, by: u64) {
        // Release: the ready-count change (or extra weight) made before this bump is visible to a batch
        // computer that reads the new epoch (its Acquire load in `load_epoch`). Without it a
        // computer could record the new epoch with the old, empty ready set: a batch of length 0
        // that every later pick trusts, answering Empty for good. The bump carries liveness.
        broken!(Epoch, {
            // Broken on purpose: the bump as a mere hint.
            self.epoch.fetch_add(by, Ordering::Relaxed);
            return;
        });
        self.epoch.fetch_add(by, Ordering::Release);
    }

    /// The epoch, for a batch computer about to read the ready counts. Acquire: pairs with the
    /// Release bump in `bump_epoch`, so the ready counts read after it are at least as new as the
    /// epoch the batch will carry.
    fn load_epoch(&self) -> u64 {
        broken!(Epoch, {
            return self.epoch.load(Ordering::Relaxed); // broken on purpose: see `bump_epoch`
        });
        self.epoch.load(Ordering::Acquire)
    }

    /// The next SWRR pick over the classes with ready tenants, skipping `exclude`: from the batch
    /// when it applies (module docs), else one step. Returns the winner and the total it paid;
    /// `weights` records what each class gained, for `refund`.
    pub(crate) fn pick(&self, exclude: u64, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        if exclude == 0 {
            if let Some(sole) = self.sole_ready(weights) {
                return Some(sole);
            }
            if batching() {
                if let Some(picked) = self.pick_batched(weights) {
                    return picked;
                }
            }
        }
        self.step(exclude, weights)
    }

    /// When exactly one class has ready tenants, SWRR over one class changes no credit (it gains
    /// the total and pays it): the pick is that class, with no shared write. Reads each class's
    /// ready count once; a class that becomes ready meanwhile waits one pick, as it would for a
    /// pick already under way. `weights` records the no-op step for `refund` and `repeat`.
    fn sole_ready(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        let mut sole = None;
        for (c, class) in self.classes[..self.allocated()].iter().enumerate() {
            // Relaxed: a snapshot, as in `step`.
            let ready = class.ready.load(Ordering::Relaxed);
            if ready > 0 {
                if sole.is_some() {
                    return None;
                }
                sole = Some((c, class.gain(ready)));
            }
        }
        let (winner, gain) = sole?;
        weights.clear();
        for c in 0..=winner {
            weights.push(if c == winner { gain } else { 0 });
        }
        Some((winner, gain))
    }

    /// A pick from the batch, or from a new batch; `None` when the caller should step singly.
    fn pick_batched(&self, weights: &mut ClassWeights) -> Option<Option<(usize, i64)>> {
        let schedule = &self.schedule;
        // Acquire: pairs with the Release that published this generation's batch.
        let word = schedule.cursor.load(Ordering::Acquire);
        let batch = &schedule.batches[(GENERATION.get(word) & 1) as usize];
        match self.batch_len(batch, GENERATION.get(word)) {
            // No class was ready at this epoch, and a class becoming ready bumps it: empty,
            // without writing a shared line (callers poll until `Empty`).
            Some(0) => return Some(None),
            Some(len) if INDEX.get(word) < u64::from(len) => {
                if let Some(picked) = self.claim_pick(weights) {
                    return Some(Some(picked));
                }
            }
            _ => {}
        }
        // Used up or stale: compute the next batch, unless someone else is.
        // Acquire: the previous computer's writes happen before ours.
        if schedule
            .computing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let picked = self.compute_batch(weights);
        // Release: the next computer sees our writes.
        schedule.computing.store(false, Ordering::Release);
        Some(picked)
    }

    /// The length of `batch` if it is generation `generation`'s, still applies (same epoch) and
    /// is not being rewritten; a hint, re-validated when a pick is read.
    fn batch_len(&self, batch: &Batch, generation: u64) -> Option<u32> {
        // Acquire: see `read_batch`.
        let seq = batch.seq.load(Ordering::Acquire);
        // Relaxed: validated by the sequence re-check.
        let len = batch.len.load(Ordering::Relaxed);
        let valid = seq & 1 == 0
            && batch.generation.load(Ordering::Relaxed) == generation
            && batch.epoch.load(Ordering::Relaxed) == self.epoch.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (valid && batch.seq.load(Ordering::Relaxed) == seq).then_some(len)
    }

    /// Pick `index` of `batch`, if the batch is generation `generation`'s, still applies, and was
    /// not rewritten while read. Inlined: it is most of a batched pick.
    #[inline(always)]
    fn read_batch(
        &self,
        batch: &Batch,
        generation: u64,
        index: usize,
        weights: &mut ClassWeights,
    ) -> Option<(usize, i64)> {
        // Acquire: the fields read below are at least as new as this sequence number.
        let seq = batch.seq.load(Ordering::Acquire);
        // Relaxed: validated by the sequence re-check below.
        // No epoch check here: a claimed pick was charged and counts as used, so it is served
        // even if the batch was dropped since the claim (`batch_len` checked the epoch).
        if seq & 1 != 0
            || batch.generation.load(Ordering::Relaxed) != generation
            || index >= batch.len.load(Ordering::Relaxed) as usize
        {
            return None;
        }
        let class = batch.picks[index].load(Ordering::Relaxed) as usize;
        let total = batch.total.load(Ordering::Relaxed);
        let allocated = self.allocated();
        weights.clear();
        for gain in &batch.gains[..allocated] {
            weights.push(gain.load(Ordering::Relaxed));
        }
        // The seqlock reader's check: an Acquire fence, then the sequence again. Unchanged, no
        // writer started since `seq`, so what we read is that batch.
        fence(Ordering::Acquire);
        if batch.seq.load(Ordering::Relaxed) != seq || class >= allocated {
            return None;
        }
        Some((class, total))
    }

    /// Holding `computing`: closes the current batch and refunds its unclaimed picks, runs the
    /// next picks from a snapshot of the credits, charges their net effect, publishes them as the
    /// next generation and returns the first.
    fn compute_batch(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        if let Some(picked) = self.resume_batch(weights) {
            return Some(picked);
        }
        let schedule = &self.schedule;
        let allocated = self.allocated();
        // Close the current generation: claims from here on land in the next one, whose batch
        // is not valid yet (the index is far past any length), so they step singly. The swap
        // returns how many picks of the old batch were claimed. AcqRel: Acquire for the old
        // batch's fields (we refund from them), Release so a claimer of the closed generation
        // reads what was published before.
        let word = schedule.cursor.load(Ordering::Relaxed);
        let generation = (GENERATION.get(word) + 1) & GENERATION.max();
        let closed = schedule
            .cursor
            .swap(GENERATION.put(generation) | CLOSED_INDEX, Ordering::AcqRel);
        // The old batch's unclaimed picks are refunded below (each was charged when the batch
        // was made), so a batch dropped early costs no class its service. Relaxed: we hold
        // `computing`, the only writer of batches, and the Acquire above ordered its last writes.
        let old = &schedule.batches[(GENERATION.get(closed) & 1) as usize];
        let old_len = if old.generation.load(Ordering::Relaxed) == GENERATION.get(closed) {
            old.len.load(Ordering::Relaxed)
        } else {
            0
        };
        let claimed = INDEX.get(closed).min(u64::from(old_len)) as u32;
        let epoch = self.load_epoch();
        // Sized by the classes in use, not `CLASS_LIMIT`: no 64-wide zeroing or copy per batch.
        let mut start = ClassWeights::new();
        let mut total = 0i64;
        weights.clear();
        for class in &self.classes[..allocated] {
            // A snapshot; the net change is applied with `fetch_add`, so concurrent single
            // steps and refunds are never lost.
            let gain = class.gain_now();
            weights.push(gain);
            start.push(class.current.load(Ordering::Relaxed));
            total += gain;
        }
        // Size: double after a batch that was used up, halve after one dropped early; an empty
        // batch (nothing ready) records just that, for `pick_batched`.
        let mut target = schedule.target.load(Ordering::Relaxed);
        if total > 0 && old_len > 0 {
            target = if claimed >= old_len {
                (target * 2).min(BATCH as u32)
            } else {
                (target / 2).max(1)
            };
            schedule.target.store(target, Ordering::Relaxed);
        }
        let len = if total > 0 { target } else { 0 };
        let batch = &schedule.batches[(generation & 1) as usize];
        // Seqlock writer: odd while writing. The Release fence orders the odd value before the
        // field writes for any reader that sees one of them.
        let seq = batch.seq.load(Ordering::Relaxed).wrapping_add(1);
        batch.seq.store(seq, Ordering::Relaxed);
        fence(Ordering::Release);
        // The refund: each unclaimed pick had every class gain its gain and the winner pay the
        // total; undo both. Relaxed: as for the old batch's fields above (a different batch
        // from the one being written).
        let mut current = start.clone();
        if claimed < old_len {
            let unclaimed = i64::from(old_len - claimed);
            for (c, credit) in current.iter_mut().enumerate() {
                *credit -= unclaimed * old.gains[c].load(Ordering::Relaxed);
            }
            let old_total = old.total.load(Ordering::Relaxed);
            for pick in &old.picks[claimed as usize..old_len as usize] {
                if let Some(credit) = current.get_mut(pick.load(Ordering::Relaxed) as usize) {
                    *credit += old_total;
                }
            }
        }
        // A class's credit is minus its lag times the total gain it was earned at (SWRR picks the
        // class most behind). An idle class's lag is forgiven: its credit goes to the ready
        // classes, in proportion to their gains, so credit stays conserved and a class that
        // rejoins starts level. When the total changed (a class joined or left, a ready count
        // moved), the ready classes' credits are rescaled to it, so each keeps its lag in cost
        // units.
        if total > 0 {
            let earned_at = schedule.scale_total.load(Ordering::Relaxed);
            settle(&mut current, &weights[..allocated], total, earned_at);
        }
        if total > 0 {
            schedule.scale_total.store(total, Ordering::Relaxed);
        }
        // Plain slices for the loop, which runs up to `BATCH` times the classes: indexing a slice
        // needs no call even in a debug build, where indexing the `ArrayVec`s made a batch of
        // four classes take over 10 µs, longer than the engine's bounded waits.
        let gains: &[i64] = &weights[..allocated];
        let credits: &mut [i64] = &mut current[..allocated];
        for pick in &batch.picks[..len as usize] {
            let mut best: Option<(usize, i64)> = None;
            for c in 0..allocated {
                if gains[c] == 0 {
                    continue;
                }
                credits[c] += gains[c];
                if best.is_none_or(|(_, top)| credits[c] > top) {
                    best = Some((c, credits[c]));
                }
            }
            let Some((winner, _)) = best else {
                break; // unreachable: total > 0, so some class gains
            };
            credits[winner] -= total;
            pick.store(winner as u32, Ordering::Relaxed);
        }
        // Charge the refund and the batch's net change per class. Relaxed: credits are counters
        // (`step`).
        for (c, class) in self.classes[..allocated].iter().enumerate() {
            let delta = current[c] - start[c];
            broken!(Batch, {
                // Broken on purpose: overwrite with the snapshot's result; a concurrent single
                // step or refund is lost.
                class.current.store(current[c], Ordering::Relaxed);
                batch.gains[c].store(weights[c], Ordering::Relaxed);
                continue;
            });
            if delta != 0 {
                class.current.fetch_add(delta, Ordering::Relaxed);
            }
            batch.gains[c].store(weights[c], Ordering::Relaxed);
        }
        batch.len.store(len, Ordering::Relaxed);
        batch.total.store(total, Ordering::Relaxed);
        batch.epoch.store(epoch, Ordering::Relaxed);
        batch.generation.store(generation, Ordering::Relaxed);
        // Release: the batch is complete before its sequence number is even again, and before
        // the cursor opens its generation. Pick 0 is ours.
        batch.seq.store(seq.wrapping_add(1), Ordering::Release);
        schedule.cursor.store(
            GENERATION.put(generation) | u64::from(len.min(1)),
            Ordering::Release,
        );
        if len == 0 {
            return None;
        }
        let first = batch.picks[0].load(Ordering::Relaxed) as usize;
        Some((first, total))
    }

    /// Holding `computing`: when the current batch has picks left and was dropped only by
    /// ready-set changes that left every gain as the batch recorded it, stamps it with the new
    /// epoch and claims its next pick. Its remaining picks are what a new batch would compute
    /// (SWRR from the refunded credits with the same gains), but for credits moved since by a
    /// refund or a single step, which the next computation takes in. `None`: compute anew.
    fn resume_batch(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        let schedule = &self.schedule;
        // Relaxed: we hold `computing`, the only writer of the cursor's generation and of the
        // batches, and its Acquire ordered the last computer's writes.
        let word = schedule.cursor.load(Ordering::Relaxed);
        let batch = &schedule.batches[(GENERATION.get(word) & 1) as usize];
        let stamped = batch.epoch.load(Ordering::Relaxed);
        if batch.generation.load(Ordering::Relaxed) != GENERATION.get(word)
            || INDEX.get(word) >= u64::from(batch.len.load(Ordering::Relaxed))
        {
            return None;
        }
        let epoch = self.load_epoch();
        if epoch == stamped || epoch / HARD_EPOCH != stamped / HARD_EPOCH {
            return None;
        }
        for (class, gain) in self.classes[..self.allocated()].iter().zip(&batch.gains) {
            if class.gain_now() != gain.load(Ordering::Relaxed) {
                return None;
            }
        }
        // Relaxed: only the stamp changes; the picks, gains and total it vouches for were
        // published with the batch's sequence word, which readers Acquire.
        batch.epoch.store(epoch, Ordering::Relaxed);
        // Picks claimed by others meanwhile may leave none (`None`).
        self.claim_pick(weights)
    }

    /// Claims the cursor's next pick and reads it; `None` if the batch it lands in is used up,
    /// stale or being rewritten.
    #[inline(always)]
    fn claim_pick(&self, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        // Acquire: pairs with the Release that published the generation we land in.
        let word = self.schedule.cursor.fetch_add(1, Ordering::Acquire);
        let batch = &self.schedule.batches[(GENERATION.get(word) & 1) as usize];
        self.read_batch(
            batch,
            GENERATION.get(word),
            INDEX.get(word) as usize,
            weights,
        )
    }

    /// One SWRR step over the classes with ready tenants, skipping `exclude`. Returns the winner
    /// and the total it paid; `weights` records what each class gained, for `refund`.
    fn step(&self, exclude: u64, weights: &mut ClassWeights) -> Option<(usize, i64)> {
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        weights.clear();
        for (c, class) in self.classes[..self.allocated()].iter().enumerate() {
            weights.push(0);
            if exclude & (1 << c) != 0 {
                continue;
            }
            // Relaxed: a stale count only skews one pick's weights; credits stay conserved.
            let ready = class.ready.load(Ordering::Relaxed);
            if ready <= 0 {
                continue;
            }
            let gain = class.gain(ready);
            weights[c] = gain;
            broken!(Pick, {
                // Broken on purpose: load, then store; a concurrent pick's gain is lost.
                let current = class.current.load(Ordering::Relaxed) + gain;
                class.current.store(current, Ordering::Relaxed);
                total += gain;
                if best.is_none_or(|(_, top)| current > top) {
                    best = Some((c, current));
                }
                continue;
            });
            // Relaxed: the credit is a counter; no other data is published through it.
            let current = class.current.fetch_add(gain, Ordering::Relaxed) + gain;
            total += gain;
            if best.is_none_or(|(_, top)| current > top) {
                best = Some((c, current));
            }
        }
        let (winner, _) = best?;
        self.classes[winner]
            .current
            .fetch_sub(total, Ordering::Relaxed);
        Some((winner, total))
    }

    /// Undoes a pick: the winner gets its payment back and every class gives back its gain.
    pub(crate) fn refund(&self, winner: usize, total: i64, weights: &ClassWeights) {
        self.repeat(winner, total, weights, -1);
    }

    /// Applies `steps` more SWRR steps with the same weights and winner (a cost above 1 is that
    /// many unit steps; a negative count undoes steps).
    pub(crate) fn repeat(&self, winner: usize, total: i64, weights: &ClassWeights, steps: i64) {
        if steps == 0 {
            return;
        }
        // One RMW per class whose credit moves: the winner's gain and payment net out (a sole
        // ready class's refund writes nothing).
        let paid = total.saturating_mul(steps);
        let end = weights.len().max(winner + 1);
        for (c, class) in self.classes[..end].iter().enumerate() {
            let gain = weights.get(c).copied().unwrap_or(0);
            let mut delta = gain.saturating_mul(steps);
            if c == winner {
                delta = delta.saturating_sub(paid);
            }
            if delta != 0 {
                // Relaxed: SWRR credits are weights, read by picks as snapshots.
                class.current.fetch_add(delta, Ordering::Relaxed);
            }
        }
        if steps > 0 {
            // A charge beyond the unit step: the batch's later picks assumed the credits before.
            self.invalidate();
        }
    }

    /// Charges class `winner` for `steps` unit steps at today's weights (cost corrections).
    /// Returns the total gain it charged at.
    pub(crate) fn charge(&self, winner: usize, steps: i64) -> i64 {
        let mut weights = ClassWeights::new();
        let mut total = 0;
        for class in self.classes[..self.allocated()].iter() {
            let gain = class.gain_now();
            weights.push(gain);
            total += gain;
        }
        if total > 0 {
            self.repeat(winner, total, &weights, steps);
        }
        total
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_packs_index_and_generation() {
        crate::core::packed::tests::round_trips(&[INDEX, GENERATION]);
    }
}
