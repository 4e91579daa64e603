//! Units and bounds that the core and the features share: one definition each.

/// Nanoseconds in a millisecond: every time in the engine is monotonic ns.
pub(crate) const MS: u64 = 1_000_000;

/// Largest weight a tenant may have.
pub const MAX_WEIGHT: u32 = 10_000;

/// Largest cost (in resource units) of one request.
pub const MAX_COST: u32 = 1_000_000;

/// The fixed-point unit of an effective-weight factor: 1024 is full weight. A tenant is scheduled
/// at `weight × factor / FACTOR_ONE` (fleet mode lowers its factor), and DRR credit is kept in
/// 1/`FACTOR_ONE` cost units so a factor scales it without rounding.
pub(crate) const FACTOR_ONE: u32 = 1 << 10;

/// Smallest fleet factor: a tenant keeps at least 2% of its weight on every replica.
pub const MIN_FLEET_FACTOR: u32 = 20;
