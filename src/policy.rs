//! Weight policy and slow feedback: tiers, a starvation guard, a temporary wait boost, and a
//! feedback controller. A feature of the core's seam (`core/hooks.rs`). Every policy is off by default and every knob is bounded and
//! checked by `Config::validate`.
//!
//! # Weight tiers
//! `Policy::tiers` names weights (for example Enterprise 8, Pro 4, Starter 2, Free 1).
//! `Engine::set_tier(raw_id, "pro")` sets a tenant's weight to its tier's. The tiers' weight
//! classes are created when the engine is built, so assigning a tier never fails for want of a
//! class.
//!
//! # Starvation guard (minimum service per weight class)
//! Even a weight-1 tier keeps a minimum quota: the larger of N grants a minute
//! or P % of all grants. fairq applies it to each **weight class** (the tenants of one weight,
//! i.e. one tier), whose tenants share it round robin; a weight-1 tenant alone in its class gets
//! all of it. A class with ready tenants is *due* when it has had no grant for `60 s / N`, or for
//! `⌊100 / P⌋ - 1` grants of the whole engine in a row, whichever comes first; so it receives at least
//! `max(N per minute, P % of grants)` while it stays ready (less only if the engine itself grants
//! less than that). `next_grant` serves the due class that waited longest *before* running SWRR,
//! and such a guard grant takes no SWRR step: no class's SWRR credit changes, so SWRR's own
//! order continues undisturbed afterwards, and the guard only adds grants to the classes that
//! fall below their floor. The check reads each class's ready count and last-grant marks: O(number
//! of weight classes), never O(tenants). Bounded: it can take at most one grant in `⌊100/P⌋` per
//! class, and with P ≤ 50 and a time gap ≥ 1 ms it can never take every grant from SWRR
//! indefinitely unless every class is starving.
//!
//! # Wait boost (+1, capped)
//! A tenant whose starvation window (ready, unserved) has been open longer than `after_ms` gets
//! +1 weight until it is next served, or stops being ready. The +1 is added to its weight class's
//! SWRR weight (`weight × ready + boost`), so its class, and with it the tenant's turn in the
//! class ring, comes round sooner; the tenant is never moved. A tenant holds at most one boost,
//! and at most `max_boosted` tenants hold one at once. Boosts start on `Engine::tick` (the caller's
//! thread scans the tenant table) and end on the hot path in O(1) when the tenant is granted.
//!
//! # Feedback controller
//! On `Engine::tick(now)`, once per `period_ms`, for every tenant whose expected share in the
//! period was at least `min_expected_cost` units: the period's `fair_share_ratio` (actual over
//! expected cost units, by configured weight) below `low_ratio_percent` raises its effective
//! weight by 1, above `high_ratio_percent` lowers it by 1, always within
//! `[weight × floor_percent, weight × ceiling_percent]` (and 1..=10000). The effective weight is
//! the tenant's weight class; its configured weight (and so its expected share) is unchanged.
//! `set_weight` or `replace_weights` resets it to the configured weight. A nudge that would need a
//! new weight class beyond `max_weight_classes` is skipped.
//!
//! With the guard and boost off (the default), `next_grant` runs plain SWRR: the window
//! guarantee holds exactly.

use std::fmt;

use crate::core::{ClassId, ClassView, CoreAccess, SlotId};
use crate::indicators::{Indicators, TenantFairness};
use crate::limits::{MAX_WEIGHT, MS};
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Mutex, Ordering};
use crate::types::ConfigError;

/// Most tiers.
pub const MAX_TIERS: usize = 16;
/// Longest tier name, in bytes.
pub const MAX_TIER_NAME: usize = 32;

/// A named weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    /// ASCII letters, digits, `_` or `-`, 1..=32 bytes; matched case-insensitively.
    pub name: String,
    /// 1..=10000.
    pub weight: u32,
}

impl Tier {
    /// A tier.
    pub fn new(name: &str, weight: u32) -> Tier {
        Tier {
            name: name.to_string(),
            weight,
        }
    }
}

/// Minimum service per weight class: the larger of `min_grants_per_minute` or
/// `min_share_percent` % of all grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StarvationGuard {
    /// N: 1..=60000.
    pub min_grants_per_minute: u32,
    /// P: 0..=50 (0: no share floor, only N).
    pub min_share_percent: u32,
}

impl Default for StarvationGuard {
    /// 30 a minute or 3 %.
    fn default() -> Self {
        StarvationGuard {
            min_grants_per_minute: 30,
            min_share_percent: 3,
        }
    }
}

/// A temporary +1 weight for a tenant that waited (ready, unserved) longer than `after_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitBoost {
    /// 1000..=3600000. Default 20000.
    pub after_ms: u64,
    /// Most tenants boosted at once: 1..=65536.
    pub max_boosted: u32,
}

impl Default for WaitBoost {
    fn default() -> Self {
        WaitBoost {
            after_ms: 20_000,
            max_boosted: 64,
        }
    }
}

/// The slow weight controller, run by `Engine::tick`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackController {
    /// 60000..=3600000 (1 min to 1 h). Default 300000 (5 min).
    pub period_ms: u64,
    /// Lowest effective weight, in % of the configured weight: 10..=100. Default 50.
    pub floor_percent: u32,
    /// Highest effective weight, in % of the configured weight: 100..=1000. Default 200.
    pub ceiling_percent: u32,
    /// Raise below this period fair-share ratio, in %: 10..=100. Default 90.
    pub low_ratio_percent: u32,
    /// Lower above this period fair-share ratio, in %: 100..=1000. Default 110.
    pub high_ratio_percent: u32,
    /// Least expected cost units in a period for a tenant to be judged: 1..=1000000000.
    /// Default 100.
    pub min_expected_cost: u64,
}

impl Default for FeedbackController {
    fn default() -> Self {
        FeedbackController {
            period_ms: 300_000,
            floor_percent: 50,
            ceiling_percent: 200,
            low_ratio_percent: 90,
            high_ratio_percent: 110,
            min_expected_cost: 100,
        }
    }
}

/// The policies. `Policy::default()` turns every one off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Named weights; empty: no tiers. At most 16.
    pub tiers: Vec<Tier>,
    /// Minimum service per weight class; `None`: off.
    pub starvation_guard: Option<StarvationGuard>,
    /// +1 weight after a long wait; `None`: off.
    pub wait_boost: Option<WaitBoost>,
    /// Slow weight feedback on `tick`; `None`: off.
    pub feedback: Option<FeedbackController>,
}

impl Policy {
    /// The former name of [`Policy::standard_tiers`].
    #[deprecated(note = "renamed to `standard_tiers`")]
    #[doc(hidden)]
    pub fn seed_tiers() -> Vec<Tier> {
        Policy::standard_tiers()
    }

    /// Four common tiers: Enterprise 8, Pro 4, Starter 2, Free 1.
    pub fn standard_tiers() -> Vec<Tier> {
        vec![
            Tier::new("enterprise", 8),
            Tier::new("pro", 4),
            Tier::new("starter", 2),
            Tier::new("free", 1),
        ]
    }

    /// The weight of tier `name` (case-insensitive).
    pub fn tier_weight(&self, name: &str) -> Option<u32> {
        self.tiers
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
            .map(|t| t.weight)
    }

    /// Checks every knob. `default_weight` and `max_weight_classes` bound the tiers' classes.
    pub(crate) fn validate(
        &self,
        default_weight: u32,
        max_weight_classes: u32,
    ) -> Result<(), ConfigError> {
        let err = |field: &'static str, message: String| Err(ConfigError { field, message });
        if self.tiers.len() > MAX_TIERS {
            return err(
                "policy.tiers",
                format!("at most {MAX_TIERS} tiers, got {}", self.tiers.len()),
            );
        }
        let mut weights = vec![default_weight];
        for (i, tier) in self.tiers.iter().enumerate() {
            let valid_name = (1..=MAX_TIER_NAME).contains(&tier.name.len())
                && tier
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid_name {
                return err(
                    "policy.tiers",
                    format!(
                        "tier name must be 1..={MAX_TIER_NAME} ASCII letters, digits, '_' or \
                         '-', got {:?}",
                        tier.name
                    ),
                );
            }
            if self.tiers[..i]
                .iter()
                .any(|t| t.name.eq_ignore_ascii_case(&tier.name))
            {
                return err("policy.tiers", format!("duplicate tier {:?}", tier.name));
            }
            if !(1..=MAX_WEIGHT).contains(&tier.weight) {
                return err(
                    "policy.tiers",
                    format!(
                        "tier {:?} weight must be in 1..={MAX_WEIGHT}, got {}",
                        tier.name, tier.weight
                    ),
                );
            }
            weights.push(tier.weight);
        }
        weights.sort_unstable();
        weights.dedup();
        if weights.len() > max_weight_classes as usize {
            return err(
                "policy.tiers",
                format!(
                    "the tiers and default_weight need {} weight classes, over max_weight_classes \
                     {max_weight_classes}",
                    weights.len()
                ),
            );
        }
        if let Some(g) = self.starvation_guard {
            range(
                "policy.starvation_guard.min_grants_per_minute",
                g.min_grants_per_minute.into(),
                1,
                60_000,
            )?;
            range(
                "policy.starvation_guard.min_share_percent",
                g.min_share_percent.into(),
                0,
                50,
            )?;
        }
        if let Some(b) = self.wait_boost {
            range("policy.wait_boost.after_ms", b.after_ms, 1_000, 3_600_000)?;
            range(
                "policy.wait_boost.max_boosted",
                b.max_boosted.into(),
                1,
                65_536,
            )?;
        }
        if let Some(f) = self.feedback {
            range("policy.feedback.period_ms", f.period_ms, 60_000, 3_600_000)?;
            range(
                "policy.feedback.floor_percent",
                f.floor_percent.into(),
                10,
                100,
            )?;
            range(
                "policy.feedback.ceiling_percent",
                f.ceiling_percent.into(),
                100,
                1_000,
            )?;
            range(
                "policy.feedback.low_ratio_percent",
                f.low_ratio_percent.into(),
                10,
                100,
            )?;
            range(
                "policy.feedback.high_ratio_percent",
                f.high_ratio_percent.into(),
                100,
                1_000,
            )?;
            range(
                "policy.feedback.min_expected_cost",
                f.min_expected_cost,
                1,
                1_000_000_000,
            )?;
        }
        Ok(())
    }
}

fn range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(ConfigError {
        field,
        message: format!("must be in {min}..={max}, got {value}"),
    })
}

/// What one `tick` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Wait boosts started.
    pub boosts_started: u32,
    /// Whether the feedback controller ran (its period had passed).
    pub feedback_ran: bool,
    /// Effective weights raised by 1.
    pub weights_raised: u32,
    /// Effective weights lowered by 1.
    pub weights_lowered: u32,
}

impl fmt::Display for TickReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "boosts_started={} feedback_ran={} raised={} lowered={}",
            self.boosts_started, self.feedback_ran, self.weights_raised, self.weights_lowered
        )
    }
}

// ------------------------------------------------------------------ run-time state

/// One weight class's last grant, for the guard.
#[derive(Default)]
struct ClassMark {
    last_ns: AtomicU64,
    last_seq: AtomicU64,
}

struct GuardState {
    gap_ns: u64,
    gap_grants: u64,
    /// Grants made by the engine (only counted while the guard is on).
    seq: CachePadded<AtomicU64>,
    /// Grants the guard made out of SWRR order.
    guard_grants: AtomicU64,
    classes: Box<[CachePadded<ClassMark>]>,
}

struct BoostState {
    after_ns: u64,
    max_boosted: u32,
    boosted: AtomicU32,
}

/// The controller's per-slot memory of the previous period.
#[derive(Clone, Copy, Default)]
struct Snapshot {
    key: u64,
    granted_cost: u64,
    expected_cost: f64,
}

#[derive(Default)]
struct TickState {
    last_feedback: Option<u64>,
    snapshots: Vec<Snapshot>,
}

/// The engine's policy state. Built from `Policy`; the hot path only reads the `Option`s.
pub(crate) struct PolicyState {
    guard: Option<GuardState>,
    boost: Option<BoostState>,
    feedback: Option<FeedbackController>,
    tick: Mutex<TickState>,
}

impl PolicyState {
    pub(crate) fn new(policy: &Policy, classes: usize) -> PolicyState {
        PolicyState {
            guard: policy.starvation_guard.map(|g| GuardState {
                gap_ns: 60_000 * MS / u64::from(g.min_grants_per_minute),
                // Due once the others had `⌊100/P⌋ - 1` grants in a row: so at least one
                // grant in every `⌊100/P⌋` is the class's.
                gap_grants: match g.min_share_percent {
                    0 => u64::MAX,
                    p => 100 / u64::from(p) - 1,
                },
                seq: CachePadded::new(AtomicU64::new(0)),
                guard_grants: AtomicU64::new(0),
                classes: (0..classes).map(|_| CachePadded::default()).collect(),
            }),
            boost: policy.wait_boost.map(|b| BoostState {
                after_ns: b.after_ms.saturating_mul(MS),
                max_boosted: b.max_boosted,
                boosted: AtomicU32::new(0),
            }),
            feedback: policy.feedback,
            tick: Mutex::new(TickState::default()),
        }
    }

    /// Whether the guard is on (grants are noted only then).
    #[inline]
    pub(crate) fn guard_on(&self) -> bool {
        self.guard.is_some()
    }

    /// Whether the wait boost is on.
    #[inline]
    pub(crate) fn boost_on(&self) -> bool {
        self.boost.is_some()
    }

    /// Tenants holding a wait boost now.
    pub(crate) fn boosted(&self) -> u64 {
        // Relaxed: a gauge.
        self.boost
            .as_ref()
            .map_or(0, |b| u64::from(b.boosted.load(Ordering::Relaxed)))
    }

    /// Grants the starvation guard made out of SWRR order.
    pub(crate) fn guard_grants(&self) -> u64 {
        // Relaxed: a counter.
        self.guard
            .as_ref()
            .map_or(0, |g| g.guard_grants.load(Ordering::Relaxed))
    }
}

// ------------------------------------------------------------------ hot-path hooks

impl PolicyState {
    /// The starvation guard's pick: the due weight class that waited longest. `None` when the
    /// guard is off or no class is due.
    pub(crate) fn due_class(&self, classes: &ClassView<'_>, now: u64) -> Option<ClassId> {
        let guard = self.guard.as_ref()?;
        // Relaxed: the marks are heuristics; a stale one delays or advances one guard grant.
        let seq = guard.seq.load(Ordering::Relaxed);
        let mut due: Option<(usize, u64)> = None;
        for c in 0..classes.count() {
            if classes.gain(c) <= 0 {
                continue;
            }
            let mark = &guard.classes[c];
            let last_seq = mark.last_seq.load(Ordering::Relaxed);
            let last_ns = mark.last_ns.load(Ordering::Relaxed);
            let owed = now.saturating_sub(last_ns) >= guard.gap_ns
                || seq.wrapping_sub(last_seq) >= guard.gap_grants;
            if owed && due.is_none_or(|(_, oldest)| last_seq < oldest) {
                due = Some((c, last_seq));
            }
        }
        due.map(|(c, _)| c as ClassId)
    }

    /// The guard made a grant out of SWRR order.
    pub(crate) fn served_out_of_turn(&self) {
        if let Some(guard) = &self.guard {
            // Relaxed: a counter.
            guard.guard_grants.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every grant: class `class` was served at `now` (only kept while the guard is on).
    #[inline]
    pub(crate) fn note_grant(&self, class: ClassId, now: u64) {
        if let Some(guard) = &self.guard {
            // Relaxed: see `due_class`.
            let seq = guard.seq.fetch_add(1, Ordering::Relaxed) + 1;
            let mark = &guard.classes[class as usize];
            mark.last_ns.store(now, Ordering::Relaxed);
            mark.last_seq.store(seq, Ordering::Relaxed);
        }
    }

    /// Ends the tenant's wait boost, if it holds one (served, or no longer ready). O(1).
    /// Returns the class whose extra weight drops by one.
    #[inline]
    pub(crate) fn end_boost(&self, fair: &TenantFairness) -> Option<ClassId> {
        // Relaxed load: a cheap check on a line the caller writes anyway; the swap decides.
        if fair.boost.load(Ordering::Relaxed) == 0 {
            return None;
        }
        // AcqRel: pairs with the tick's CAS, so exactly one side undoes a boost unit.
        let held = fair.boost.swap(0, Ordering::AcqRel);
        if held == 0 {
            return None;
        }
        if let Some(boost) = &self.boost {
            // Relaxed: a bound counter; the swap above made this ours alone.
            boost.boosted.fetch_sub(1, Ordering::Relaxed);
        }
        Some(held - 1)
    }
}

// ------------------------------------------------------------------ tick

impl PolicyState {
    /// Runs the slow policies on the caller's thread: starts wait boosts that are due and, once
    /// per feedback period, nudges weights. Does nothing when the boost and the controller are
    /// off. O(max_tenants) when they are on; never on the hot path; a tick that finds another
    /// tick running returns at once.
    pub(crate) fn tick(
        &self,
        core: &impl CoreAccess,
        indicators: Option<&Indicators>,
        now: u64,
    ) -> TickReport {
        let mut report = TickReport::default();
        let Some(indicators) = indicators else {
            return report; // validated: the boost and the controller need the indicators
        };
        if self.boost.is_none() && self.feedback.is_none() {
            return report;
        }
        let Ok(mut state) = self.tick.try_lock() else {
            return report;
        };
        if let Some(boost) = &self.boost {
            report.boosts_started = self.start_boosts(core, indicators, boost, now);
        }
        if let Some(feedback) = self.feedback {
            let period = feedback.period_ms.saturating_mul(MS);
            match state.last_feedback {
                None => {
                    state.last_feedback = Some(now);
                    feedback_round(core, indicators, &feedback, &mut state, None);
                }
                Some(last) if now.saturating_sub(last) >= period => {
                    state.last_feedback = Some(now);
                    report.feedback_ran = true;
                    feedback_round(core, indicators, &feedback, &mut state, Some(&mut report));
                }
                Some(_) => {}
            }
        }
        report
    }

    fn start_boosts(
        &self,
        core: &impl CoreAccess,
        indicators: &Indicators,
        boost: &BoostState,
        now: u64,
    ) -> u32 {
        let mut started = 0;
        for t in 0..core.slot_count() as SlotId {
            let Some(view) = core.tenant_view(t) else {
                continue;
            };
            let fair = indicators.tenant(t);
            // Relaxed: a scan; the CAS below decides.
            if fair.boost.load(Ordering::Relaxed) != 0 {
                continue;
            }
            let Some(since) = fair.ready_since() else {
                continue;
            };
            if now.saturating_sub(since) < boost.after_ns {
                continue;
            }
            // Relaxed: a bound counter; the RMW alone keeps it within `max_boosted`.
            if boost.boosted.fetch_add(1, Ordering::Relaxed) >= boost.max_boosted {
                boost.boosted.fetch_sub(1, Ordering::Relaxed);
                break;
            }
            // AcqRel: pairs with `end_boost`'s swap: if the holder ended an earlier boost we see
            // the readiness it wrote before, checked just below.
            if fair
                .boost
                .compare_exchange(0, view.class + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                boost.boosted.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            core.add_class_extra(view.class, 1);
            if fair.ready_since() != Some(since) {
                // It was served or left meanwhile: this boost is not owed.
                if let Some(class) = self.end_boost(fair) {
                    core.add_class_extra(class, -1);
                }
                continue;
            }
            started += 1;
        }
        started
    }
}

/// One controller period: compares each tenant's period grants with its expected share.
/// `report` is `None` on the first tick, which only takes the baseline.
fn feedback_round(
    core: &impl CoreAccess,
    indicators: &Indicators,
    feedback: &FeedbackController,
    state: &mut TickState,
    mut report: Option<&mut TickReport>,
) {
    state
        .snapshots
        .resize(core.slot_count(), Snapshot::default());
    let mut nudges = Vec::new();
    for (t, snap) in state.snapshots.iter_mut().enumerate() {
        let Some(view) = core.tenant_view(t as SlotId) else {
            continue;
        };
        let ind = indicators.read(&view, 0);
        let key = view.key.get();
        let previous = *snap;
        *snap = Snapshot {
            key,
            granted_cost: ind.granted_cost,
            expected_cost: ind.expected_cost,
        };
        if report.is_none() || previous.key != key {
            continue;
        }
        let expected = ind.expected_cost - previous.expected_cost;
        if expected < feedback.min_expected_cost as f64 {
            continue;
        }
        let actual = ind.granted_cost.saturating_sub(previous.granted_cost) as f64;
        let ratio_percent = actual / expected * 100.0;
        let base = u64::from(ind.weight);
        let floor = (base * u64::from(feedback.floor_percent) / 100).max(1);
        let ceiling =
            (base * u64::from(feedback.ceiling_percent) / 100).clamp(1, u64::from(MAX_WEIGHT));
        let current = u64::from(ind.effective_weight);
        let target = if ratio_percent < f64::from(feedback.low_ratio_percent) {
            current + 1
        } else if ratio_percent > f64::from(feedback.high_ratio_percent) {
            current.saturating_sub(1)
        } else {
            current
        }
        .clamp(floor, ceiling);
        if target != current {
            nudges.push((view.key, target as u32, target > current));
        }
    }
    for (key, weight, raised) in nudges {
        if !core.move_to_class(key, weight) {
            continue; // no weight class left for it, or it left its slot
        }
        if let Some(r) = report.as_deref_mut() {
            if raised {
                r.weights_raised += 1;
            } else {
                r.weights_lowered += 1;
            }
        }
    }
}
