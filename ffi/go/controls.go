package fairq

// The controls fairq_config has no field for (tiers, the starvation guard, the wait boost, the
// feedback controller, bulkhead pools, the indicators' top K), set through fairq_engine_builder;
// and what reads the engine's state back: expiry, the policy tick, fairness indicators, pools.

/*
#include <stdlib.h>
#include "fairq.h"
*/
import "C"

import "unsafe"

// Tier is a named weight: Name is 1..=32 ASCII letters, digits, '_' or '-' (matched
// case-insensitively), Weight 1..=10000.
type Tier struct {
	Name   string
	Weight uint32
}

// StarvationGuard gives each weight class with ready tenants at least the larger of
// MinGrantsPerMinute (1..=60000) grants a minute or MinSharePercent (0..=50) % of all grants.
type StarvationGuard struct {
	MinGrantsPerMinute uint32
	MinSharePercent    uint32
}

// DefaultStarvationGuard is 30 grants a minute or 3 %.
func DefaultStarvationGuard() StarvationGuard { return StarvationGuard{30, 3} }

// WaitBoost gives +1 weight to a tenant ready and unserved for longer than AfterMs
// (1000..=3600000), at most MaxBoosted (1..=65536) tenants at once. Boosts start in Tick.
type WaitBoost struct {
	AfterMs    uint64
	MaxBoosted uint32
}

// DefaultWaitBoost is 20 s, 64 tenants.
func DefaultWaitBoost() WaitBoost { return WaitBoost{20000, 64} }

// FeedbackController nudges effective weights by 1 per PeriodMs (60000..=3600000) of Tick
// calls towards each tenant's fair share, within FloorPercent (10..=100) and CeilingPercent
// (100..=1000) of its configured weight; see include/fairq.h for the thresholds' ranges.
type FeedbackController struct {
	PeriodMs         uint64
	FloorPercent     uint32
	CeilingPercent   uint32
	LowRatioPercent  uint32
	HighRatioPercent uint32
	MinExpectedCost  uint64
}

// DefaultFeedbackController is a 5-minute period within 50..200 %, raising below 90 % and
// lowering above 110 % of the fair share, for tenants expecting at least 100 cost units.
func DefaultFeedbackController() FeedbackController {
	return FeedbackController{300000, 50, 200, 90, 110, 100}
}

// Controls are the settings Config has no field for; the zero value turns every one off.
type Controls struct {
	Tiers           []Tier
	StarvationGuard *StarvationGuard
	WaitBoost       *WaitBoost
	Feedback        *FeedbackController
	// Pools are the bulkhead pools' bounds (each 1..=MaxInFlight): pool i takes the requests
	// whose Downstream is i.
	Pools []uint32
	// Shedding turns load shedding on for the pools (fed by ReportDownstream).
	Shedding *Shedding
	// Indicators turns the fairness indicators on or off (nil: on, the default). The wait
	// boost and the feedback controller need them.
	Indicators *bool
	// IndicatorTopK (0..=1000) is how many tenants get their own indicator series in the
	// Prometheus text; nil keeps the default, 20.
	IndicatorTopK *uint32
	// Seats makes MaxInFlight count cost units: a grant takes its request's cost in permits,
	// and a request at least as costly as the limit runs alone. Off by default.
	Seats bool
	// LightLane turns the light-tenant lane on or off (nil: on, the default): a tenant that
	// becomes ready without having had more than its fair share is granted at the next free
	// permit, ahead of the weight classes' rotation, for one visit.
	LightLane *bool
}

// Shedding: a pool whose error rate over a window of WindowMs (100..=3600000) passes
// ErrorPercent (1..=100), with at least MinRequests (1..=1000000) reports, has its in-flight
// limit cut in half (never below 1); calm windows grow it back by an eighth of its bound. While
// cut, a request it cannot serve in budget is refused with ReasonDownstreamShedding.
type Shedding struct {
	ErrorPercent uint32
	WindowMs     uint64
	MinRequests  uint32
}

// DefaultShedding is 2 % errors over 5 s windows, with at least 20 reports.
func DefaultShedding() Shedding { return Shedding{2, 5000, 20} }

// builderError is the builder's message for a rejected setter.
func builderError(b *C.fairq_engine_builder, s C.int32_t) error {
	var msg [512]C.char
	C.fairq_engine_builder_message(b, &msg[0], C.size_t(len(msg)), nil)
	return &Error{Status: Status(s), Detail: C.GoString(&msg[0])}
}

// NewWithControls builds an engine from a Config and the Controls; a bad value gives
// ErrInvalidConfig naming the field and its range.
func NewWithControls(c Config, ctl Controls) (*Engine, error) {
	cc := c.toC()
	var msg [512]C.char
	var b *C.fairq_engine_builder
	if s := C.fairq_engine_builder_new(&cc, &b, &msg[0], C.size_t(len(msg))); s < 0 {
		return nil, &Error{Status: Status(s), Detail: C.GoString(&msg[0])}
	}
	defer C.fairq_engine_builder_free(b)
	set := func(s C.int32_t) error {
		if s < 0 {
			return builderError(b, s)
		}
		return nil
	}
	if on := ctl.Indicators; on != nil {
		if err := set(C.fairq_engine_builder_set_indicators(b, C.bool(*on))); err != nil {
			return nil, err
		}
	}
	for _, t := range ctl.Tiers {
		name := C.CString(t.Name)
		err := set(C.fairq_engine_builder_add_tier(b, name, C.size_t(len(t.Name)), C.uint32_t(t.Weight)))
		C.free(unsafe.Pointer(name))
		if err != nil {
			return nil, err
		}
	}
	if g := ctl.StarvationGuard; g != nil {
		if err := set(C.fairq_engine_builder_set_starvation_guard(b, C.uint32_t(g.MinGrantsPerMinute),
			C.uint32_t(g.MinSharePercent))); err != nil {
			return nil, err
		}
	}
	if w := ctl.WaitBoost; w != nil {
		if err := set(C.fairq_engine_builder_set_wait_boost(b, C.uint64_t(w.AfterMs),
			C.uint32_t(w.MaxBoosted))); err != nil {
			return nil, err
		}
	}
	if f := ctl.Feedback; f != nil {
		if err := set(C.fairq_engine_builder_set_feedback(b, C.uint64_t(f.PeriodMs),
			C.uint32_t(f.FloorPercent), C.uint32_t(f.CeilingPercent))); err != nil {
			return nil, err
		}
		if err := set(C.fairq_engine_builder_set_feedback_thresholds(b, C.uint32_t(f.LowRatioPercent),
			C.uint32_t(f.HighRatioPercent), C.uint64_t(f.MinExpectedCost))); err != nil {
			return nil, err
		}
	}
	for _, max := range ctl.Pools {
		if err := set(C.fairq_engine_builder_add_pool(b, C.uint32_t(max), nil)); err != nil {
			return nil, err
		}
	}
	if sh := ctl.Shedding; sh != nil {
		if err := set(C.fairq_engine_builder_set_shedding(b, C.uint32_t(sh.ErrorPercent),
			C.uint64_t(sh.WindowMs), C.uint32_t(sh.MinRequests))); err != nil {
			return nil, err
		}
	}
	if k := ctl.IndicatorTopK; k != nil {
		if err := set(C.fairq_engine_builder_set_indicator_top_k(b, C.uint32_t(*k))); err != nil {
			return nil, err
		}
	}
	if ctl.Seats {
		if err := set(C.fairq_engine_builder_set_seats(b, C.bool(true))); err != nil {
			return nil, err
		}
	}
	if on := ctl.LightLane; on != nil {
		if err := set(C.fairq_engine_builder_set_light_lane(b, C.bool(*on))); err != nil {
			return nil, err
		}
	}
	e := &Engine{}
	if _, err := check(C.fairq_engine_builder_build(b, &e.ptr)); err != nil {
		return nil, err
	}
	return e, nil
}

// cBytes is a C pointer to a copy of s (nil for ""), and its length; free it with C.free.
func cBytes(s string) (*C.char, C.size_t) {
	if s == "" {
		return nil, 0
	}
	return (*C.char)(C.CBytes([]byte(s))), C.size_t(len(s))
}

// SetTier puts the tenant with raw identifier raw in tier (case-insensitive): its weight
// becomes the tier's, and raw its name in the status dump. An unknown tier or an empty raw
// gives ErrInvalidArgument.
func (e *Engine) SetTier(raw, tier string) error {
	r, rn := cBytes(raw)
	defer C.free(unsafe.Pointer(r))
	t, tn := cBytes(tier)
	defer C.free(unsafe.Pointer(t))
	_, err := e.call(func(ptr *C.fairq_engine) C.int32_t { return C.fairq_set_tier(ptr, r, rn, t, tn) })
	return err
}

// SetTierKey is SetTier by tenant key (the status dump then shows no name).
func (e *Engine) SetTierKey(key uint64, tier string) error {
	p, n := cBytes(tier)
	defer C.free(unsafe.Pointer(p))
	_, err := e.call(func(ptr *C.fairq_engine) C.int32_t {
		return C.fairq_set_tier_key(ptr, C.uint64_t(key), p, n)
	})
	return err
}

// TierWeight is the weight of a tier; ok is false when the engine has no such tier.
func (e *Engine) TierWeight(tier string) (weight uint32, ok bool, err error) {
	p, n := cBytes(tier)
	defer C.free(unsafe.Pointer(p))
	var w C.uint32_t
	s, err := e.call(func(ptr *C.fairq_engine) C.int32_t { return C.fairq_tier_weight(ptr, p, n, &w) })
	return uint32(w), err == nil && s == StatusOK, err
}

// Refusal is how a request ended refused (Expire).
type Refusal struct {
	Reason   Reason
	Position uint32
	WaitedNs uint64
}

// Expire ends a queued ticket whose budget the caller's own timer says has run out (counted
// deadline_exceeded).
func (e *Engine) Expire(ticket uint64) (Refusal, error) { return e.expire(ticket, nil) }

// ExpireAt is Expire at monotonic time nowNs.
func (e *Engine) ExpireAt(ticket, nowNs uint64) (Refusal, error) { return e.expire(ticket, &nowNs) }

func (e *Engine) expire(ticket uint64, now *uint64) (Refusal, error) {
	var out C.fairq_completion
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		if now == nil {
			return C.fairq_expire(p, C.uint64_t(ticket), &out)
		}
		return C.fairq_expire_at(p, C.uint64_t(ticket), C.uint64_t(*now), &out)
	})
	if err != nil {
		return Refusal{}, err
	}
	return Refusal{Reason(out.reason), uint32(out.position), uint64(out.waited_ns)}, nil
}

// TickReport is what one Tick did.
type TickReport struct {
	BoostsStarted  uint32
	FeedbackRan    bool
	WeightsRaised  uint32
	WeightsLowered uint32
}

// Tick runs the slow policies (wait boosts, the feedback controller) on the caller's
// goroutine; call it about once a second when either is on.
func (e *Engine) Tick() (TickReport, error) { return e.tick(nil) }

// TickAt is Tick at monotonic time nowNs.
func (e *Engine) TickAt(nowNs uint64) (TickReport, error) { return e.tick(&nowNs) }

func (e *Engine) tick(now *uint64) (TickReport, error) {
	var out C.fairq_tick_report
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		if now == nil {
			return C.fairq_tick(p, &out)
		}
		return C.fairq_tick_at(p, C.uint64_t(*now), &out)
	})
	return TickReport{uint32(out.boosts_started), out.feedback_ran != 0, uint32(out.weights_raised),
		uint32(out.weights_lowered)}, err
}

// Indicators are one tenant's fairness indicators, cumulative since it took its slot.
// RefusalRate and FairShareRatio are NaN while undefined.
type Indicators struct {
	TenantKey           uint64
	Requests            uint64
	Refused             uint64
	Granted             uint64
	GrantedCost         uint64
	Waits               uint64
	WaitP95Ns           uint64
	StarvationCurrentNs uint64
	StarvationLongestNs uint64
	RefusalRate         float64
	ExpectedCost        float64
	FairShareRatio      float64
	Weight              uint32
	EffectiveWeight     uint32
	Boosted             bool
	Ready               bool
}

func indicatorsFromC(c *C.fairq_indicators) Indicators {
	return Indicators{
		TenantKey: uint64(c.tenant_key), Requests: uint64(c.requests), Refused: uint64(c.refused),
		Granted: uint64(c.granted), GrantedCost: uint64(c.granted_cost), Waits: uint64(c.waits),
		WaitP95Ns: uint64(c.wait_p95_ns), StarvationCurrentNs: uint64(c.starvation_current_ns),
		StarvationLongestNs: uint64(c.starvation_longest_ns), RefusalRate: float64(c.refusal_rate),
		ExpectedCost: float64(c.expected_cost), FairShareRatio: float64(c.fair_share_ratio),
		Weight: uint32(c.weight), EffectiveWeight: uint32(c.effective_weight),
		Boosted: c.boosted != 0, Ready: c.ready != 0,
	}
}

// TenantIndicators reads a tenant's indicators; ok is false when it holds no slot.
func (e *Engine) TenantIndicators(key uint64) (Indicators, bool, error) {
	return e.TenantIndicatorsAt(key, NowNs())
}

// TenantIndicatorsAt is TenantIndicators with starvation windows measured at nowNs.
func (e *Engine) TenantIndicatorsAt(key, nowNs uint64) (Indicators, bool, error) {
	var out C.fairq_indicators
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_tenant_indicators_at(p, C.uint64_t(key), C.uint64_t(nowNs), &out)
	})
	if err != nil || s != StatusOK {
		return Indicators{}, false, err
	}
	return indicatorsFromC(&out), true, nil
}

// Fairness is the indicators' min and max over every tenant holding a slot; NaN where no
// tenant has the indicator yet.
type Fairness struct {
	Tenants                                      uint64
	FairShareRatioMin, FairShareRatioMax         float64
	WaitP95MinS, WaitP95MaxS                     float64
	RefusalRateMin, RefusalRateMax               float64
	StarvationCurrentMinS, StarvationCurrentMaxS float64
	StarvationLongestMinS, StarvationLongestMaxS float64
}

// Fairness reads the min/max indicators over every tenant (it scans the tenant table).
func (e *Engine) Fairness() (Fairness, error) { return e.FairnessAt(NowNs()) }

// FairnessAt is Fairness with starvation windows measured at nowNs.
func (e *Engine) FairnessAt(nowNs uint64) (Fairness, error) {
	var c C.fairq_fairness
	if _, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_fairness_get_at(p, C.uint64_t(nowNs), &c)
	}); err != nil {
		return Fairness{}, err
	}
	return Fairness{
		Tenants:               uint64(c.tenants),
		FairShareRatioMin:     float64(c.fair_share_ratio_min),
		FairShareRatioMax:     float64(c.fair_share_ratio_max),
		WaitP95MinS:           float64(c.wait_p95_min_s),
		WaitP95MaxS:           float64(c.wait_p95_max_s),
		RefusalRateMin:        float64(c.refusal_rate_min),
		RefusalRateMax:        float64(c.refusal_rate_max),
		StarvationCurrentMinS: float64(c.starvation_current_min_s),
		StarvationCurrentMaxS: float64(c.starvation_current_max_s),
		StarvationLongestMinS: float64(c.starvation_longest_min_s),
		StarvationLongestMaxS: float64(c.starvation_longest_max_s),
	}, nil
}

// FairnessTop is the indicators of the tenants with the most requests, most first: at most
// limit and at most the engine's indicator top K.
func (e *Engine) FairnessTop(limit int) ([]Indicators, error) { return e.FairnessTopAt(limit, NowNs()) }

// FairnessTopAt is FairnessTop with starvation windows measured at nowNs.
func (e *Engine) FairnessTopAt(limit int, nowNs uint64) ([]Indicators, error) {
	if limit <= 0 {
		return nil, nil
	}
	// A Go array of a C struct without pointers: cgo lets C write into it during the call.
	buf := make([]C.fairq_indicators, limit)
	var n C.size_t
	if _, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_fairness_top_at(p, C.uint64_t(nowNs), &buf[0], C.size_t(limit), &n)
	}); err != nil {
		return nil, err
	}
	out := make([]Indicators, int(n))
	for i := range out {
		out[i] = indicatorsFromC(&buf[i])
	}
	return out, nil
}

// PoolStats are one bulkhead pool's gauges and counter.
type PoolStats struct {
	InFlight, BlockedTenants, Blocks uint64
	MaxInFlight                      uint32
}

// PoolCount is the number of bulkhead pools (0 when none is configured).
func (e *Engine) PoolCount() (uint32, error) {
	var n C.uint32_t
	_, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_pool_count(p, &n) })
	return uint32(n), err
}

// PoolStats reads pool downstream's gauges; ok is false when there is no such pool.
func (e *Engine) PoolStats(downstream uint32) (PoolStats, bool, error) {
	var c C.fairq_pool_stats
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_pool_get_stats(p, C.uint32_t(downstream), &c)
	})
	if err != nil || s != StatusOK {
		return PoolStats{}, false, err
	}
	return PoolStats{uint64(c.in_flight), uint64(c.blocked_tenants), uint64(c.blocks),
		uint32(c.max_in_flight)}, true, nil
}

// ReportDownstream reports whether a call to pool downstream succeeded (for HTTP: status under
// 500), for load shedding; a no-op while it is off.
func (e *Engine) ReportDownstream(downstream uint32, ok bool) error {
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_report_downstream(p, C.uint32_t(downstream), C.bool(ok))
	})
	return err
}

// ReportDownstreamAt is ReportDownstream at monotonic time nowNs.
func (e *Engine) ReportDownstreamAt(downstream uint32, ok bool, nowNs uint64) error {
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_report_downstream_at(p, C.uint32_t(downstream), C.bool(ok), C.uint64_t(nowNs))
	})
	return err
}

// PoolShedding is one pool's load-shedding stage. LastErrorRatio is NaN before the first
// judged window.
type PoolShedding struct {
	Limit          uint32
	Shedding       bool
	LastErrorRatio float64
	Cuts           uint64
	ReportsOK      uint64
	ReportsError   uint64
}

// PoolShedding reads pool downstream's shedding stage; ok is false when there is no such pool.
func (e *Engine) PoolShedding(downstream uint32) (PoolShedding, bool, error) {
	var c C.fairq_pool_shedding
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_pool_get_shedding(p, C.uint32_t(downstream), &c)
	})
	if err != nil || s != StatusOK {
		return PoolShedding{}, false, err
	}
	return PoolShedding{uint32(c.limit), c.shedding != 0, float64(c.last_error_ratio), uint64(c.cuts),
		uint64(c.reports_ok), uint64(c.reports_error)}, true, nil
}
