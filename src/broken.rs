//! Deliberately broken variants of the engine's atomic protocols, compiled only with
//! `--cfg fairq_broken` (never into a normal, test or bench build; the loom build has them, each
//! off unless a `broken_` test switches it on for its thread).
//!
//! Each loom model in `loom-tests/` has a twin test that switches one variant on and expects the
//! model to fail, proving the model can catch what it guards against. `loom-tests/run.sh` runs
//! them after the real models.

use std::cell::Cell;

/// One way to break the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// `Permits::grant` loads, checks and stores instead of one CAS.
    Permit,
    /// Ticket transitions load, compare and store instead of one CAS.
    Ticket,
    /// A pin does not re-check the slot's key, so it can land in a slot just stolen.
    Slot,
    /// A pin walks past a slot being claimed instead of waiting (the bug loom found).
    Claim,
    /// A granter puts a tenant back in the class it took it from, ignoring a weight change.
    Move,
    /// An SWRR pick adds a class's weight by load and store instead of `fetch_add`.
    Pick,
    /// The ticket free stack pops by load and store instead of a CAS on its head.
    FreeList,
    /// A batch of picks stores its credits instead of adding its net change.
    Batch,
    /// The epoch that drops a batch is bumped and read Relaxed, as a mere hint.
    Epoch,
    /// A requeue whose push failed reports the request refused although a cancel ended it.
    Requeue,
    /// A ring compaction runs without taking the consumer side.
    Compact,
    /// The permits for a waiting wide request are taken while other permits are still out.
    Seats,
    /// A wide request just held answers `AtCapacity` without looking whether the grants out
    /// ended meanwhile.
    Held,
    /// A tenant is handed to the light-tenant lane before it is counted ready in its class.
    Lane,
    /// The start-up's charge of the first window stores the SWRR credits instead of adding
    /// the change, so a pick stepping meanwhile loses its step.
    FirstWindow,
    /// A statistics row changes hands between threads without Acquire/Release.
    RowHandOff,
    /// A ready-ring push marks its entry full before it writes the value.
    RingPublish,
    /// A tenant-queue push publishes its entry with a plain store, dropping the mark of a turn
    /// holder that found the entry not written yet: nobody holds the tenant's turn.
    Unwritten,
    /// A caller takes a visitor another caller put back with a Relaxed CAS, so the putter's
    /// writes to the tenant slot need not be visible to it.
    Steal,
    /// A parker re-reads the wheel's cursor with a load instead of a read-modify-write, so it
    /// can miss an advance that drained its bucket before its push landed.
    Wheel,
    /// A caller that left a tenant to another caller serving it answers `Empty` for as long as
    /// it remembers it, whatever its wait saw, and never forgets it.
    Left,
    /// A freed pool permit wakes only the blocked ring's tenants, never the pool's visitor (a
    /// tenant blocked again with wakes of its visit left).
    PoolVisitor,
    /// A tenant blocking on a full pool reads the pool's in-flight count without the SeqCst
    /// fence after its push, so it and a wake can each miss the other.
    PoolFence,
}

thread_local! {
    // Thread-local, not global: loom runs a model's threads as coroutines on the thread that
    // called the model, so they all see it, and tests running in parallel do not.
    static ACTIVE: Cell<Option<Break>> = const { Cell::new(None) };
}

/// Runs `f` with `which` switched on for this thread, and off again afterwards.
pub fn with<R>(which: Break, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(None));
        }
    }
    ACTIVE.with(|a| a.set(Some(which)));
    let _reset = Reset;
    f()
}

/// Whether `which` is switched on.
pub(crate) fn on(which: Break) -> bool {
    ACTIVE.with(|a| a.get()) == Some(which)
}
