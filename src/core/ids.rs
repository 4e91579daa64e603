//! The two indices the core's tables and the features' side tables share. They live apart from
//! the seam (`hooks.rs`) so that the tables that use them do not depend on it.

/// A tenant slot's index in the tenant table. A slot keeps its index for the engine's life; it
/// holds one tenant at a time (see `tenants/`, "Slot life cycle").
pub(crate) type SlotId = u32;

/// A weight class's index.
pub(crate) type ClassId = u32;
