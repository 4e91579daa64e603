//! `fairq fleet-replica` (hidden, feature `fleet`): one gateway replica for the fleet harness
//! (`cli/tests/fleet.rs`). Fleet mode can only be judged with several real processes
//! sharing a real Redis, so the harness spawns three of these and reads what they print.
//!
//! A replica is an [`fairq::Engine`] (`max_in_flight` 8 by default) fed by closed-loop flows and
//! drained by a simulated backend (each grant holds its permit for the service time, then
//! `complete`), with fleet mode on (the library's sync thread, or a loop of its own that syncs at random
//! intervals) or off.

mod replica;

pub use replica::{run, ReplicaArgs};
