package fairq

import (
	"errors"
	"math"
	"strings"
	"testing"
)

const sec = 1000 * ms

func newControlled(t *testing.T, edit func(*Config), ctl Controls) *Engine {
	t.Helper()
	c := DefaultConfig().WithEnabled(true)
	c.MaxWaitMs = 86_400_000
	if edit != nil {
		edit(&c)
	}
	e, err := NewWithControls(c, ctl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func enqueueAt(t *testing.T, e *Engine, r Request, now uint64) EnqueueResult {
	t.Helper()
	res, err := e.EnqueueAt(r, now)
	if err != nil || !res.Queued {
		t.Fatalf("enqueue %+v: %+v %v", r, res, err)
	}
	return res
}

func grantAt(t *testing.T, e *Engine, now uint64) Grant {
	t.Helper()
	g, ok, err := e.NextGrantAt(now)
	if err != nil || !ok || g.Expired {
		t.Fatalf("grant: %+v %v %v", g, ok, err)
	}
	return g
}

func completeAt(t *testing.T, e *Engine, ticket, now uint64) {
	t.Helper()
	if _, err := e.CompleteAt(ticket, true, 0, now); err != nil {
		t.Fatal(err)
	}
}

func indicatorsAt(t *testing.T, e *Engine, key, now uint64) Indicators {
	t.Helper()
	ind, ok, err := e.TenantIndicatorsAt(key, now)
	if err != nil || !ok {
		t.Fatalf("indicators: %v %v", ok, err)
	}
	return ind
}

func TestBadControlsNameTheirField(t *testing.T) {
	over := uint32(1001)
	cases := []struct {
		ctl   Controls
		field string
	}{
		{Controls{StarvationGuard: &StarvationGuard{30, 51}}, "policy.starvation_guard.min_share_percent"},
		{Controls{WaitBoost: &WaitBoost{999, 64}}, "policy.wait_boost.after_ms"},
		{Controls{Feedback: &FeedbackController{1000, 50, 200, 90, 110, 100}}, "policy.feedback.period_ms"},
		{Controls{Feedback: &FeedbackController{60000, 50, 200, 5, 110, 100}}, "policy.feedback.low_ratio_percent"},
		{Controls{Tiers: []Tier{{"pro", 4}, {"PRO", 2}}}, "duplicate tier"},
		{Controls{Pools: []uint32{9}}, "downstream_max_in_flight"},
		{Controls{IndicatorTopK: &over}, "indicator_top_k"},
	}
	for _, c := range cases {
		_, err := NewWithControls(DefaultConfig().WithEnabled(true), c.ctl)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: want ErrInvalidConfig naming %s, got %v", c.ctl, c.field, err)
		}
	}
	bad := DefaultConfig()
	bad.MaxInFlight = 0
	if _, err := NewWithControls(bad, Controls{}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "max_in_flight") {
		t.Fatalf("bad base config: %v", err)
	}
}

func TestTiersSetWeightsAndTheSplit(t *testing.T) {
	e := newControlled(t, func(c *Config) { c.TenantQueueCapacity = 1024 },
		Controls{Tiers: []Tier{{"enterprise", 8}, {"pro", 3}, {"free", 1}}})
	if w, ok, err := e.TierWeight("PRO"); err != nil || !ok || w != 3 {
		t.Fatalf("tier weight: %d %v %v", w, ok, err)
	}
	if _, ok, err := e.TierWeight("gold"); err != nil || ok {
		t.Fatalf("unknown tier: %v %v", ok, err)
	}
	acme, globex := mustKey(t, "acme"), mustKey(t, "globex")
	if err := e.SetTier("acme", "pro"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTierKey(globex, "FREE"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTier("acme", "gold"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown tier: %v", err)
	}
	for i := 0; i < 400; i++ {
		enqueueAt(t, e, Request{TenantKey: acme}, t0)
		enqueueAt(t, e, Request{TenantKey: globex}, t0)
	}
	for w := 0; w < 100; w++ {
		got := 0
		for i := 0; i < 4; i++ {
			g := grantAt(t, e, t0)
			if g.TenantKey == acme {
				got++
			}
			completeAt(t, e, g.Ticket, t0)
		}
		if got != 3 {
			t.Fatalf("window %d: %d of 4 to pro", w, got)
		}
	}
	if ind := indicatorsAt(t, e, acme, t0); ind.Weight != 3 || ind.Granted != 300 {
		t.Fatalf("%+v", ind)
	}
}

func crowd(t *testing.T, guard *StarvationGuard, grants int) int {
	e := newControlled(t, func(c *Config) { c.TenantQueueCapacity = 4 }, Controls{StarvationGuard: guard})
	weak := mustKey(t, "weak")
	enqueueAt(t, e, Request{TenantKey: weak}, 0)
	enqueueAt(t, e, Request{TenantKey: weak}, 0)
	for i := 0; i < 100; i++ {
		k := mustKey(t, "big"+string(rune('A'+i/26))+string(rune('a'+i%26)))
		if err := e.SetWeightKey(k, 8); err != nil {
			t.Fatal(err)
		}
		enqueueAt(t, e, Request{TenantKey: k}, 0)
		enqueueAt(t, e, Request{TenantKey: k}, 0)
	}
	mine := 0
	for i := 1; i <= grants; i++ {
		now := uint64(i) * ms
		g := grantAt(t, e, now)
		if g.TenantKey == weak {
			mine++
		}
		completeAt(t, e, g.Ticket, now)
		enqueueAt(t, e, Request{TenantKey: g.TenantKey}, now)
	}
	return mine
}

func TestStarvationGuardGivesAShareFloor(t *testing.T) {
	without := crowd(t, nil, 20000)
	g := DefaultStarvationGuard()
	with := crowd(t, &g, 20000)
	if without > 40 || with < 600 || with > 800 {
		t.Fatalf("weak tenant: %d of 20000 without the guard, %d with (floor 600)", without, with)
	}
}

func TestWaitBoostStartsOnTick(t *testing.T) {
	e := newControlled(t, func(c *Config) { c.MaxInFlight = 1 }, Controls{WaitBoost: &WaitBoost{1000, 2}})
	enqueueAt(t, e, Request{TenantKey: mustKey(t, "holder")}, t0)
	held := grantAt(t, e, t0)
	keys := []uint64{mustKey(t, "w0"), mustKey(t, "w1"), mustKey(t, "w2")}
	for _, k := range keys {
		enqueueAt(t, e, Request{TenantKey: k}, t0)
	}
	if r, err := e.TickAt(t0 + sec/2); err != nil || r.BoostsStarted != 0 {
		t.Fatalf("under the threshold: %+v %v", r, err)
	}
	if r, err := e.TickAt(t0 + 2*sec); err != nil || r != (TickReport{BoostsStarted: 2}) {
		t.Fatalf("two boosts (capped): %+v %v", r, err)
	}
	boosted := 0
	for _, k := range keys {
		if indicatorsAt(t, e, k, t0+2*sec).Boosted {
			boosted++
		}
	}
	if boosted != 2 {
		t.Fatalf("%d boosted", boosted)
	}
	completeAt(t, e, held.Ticket, t0+2*sec)
	g := grantAt(t, e, t0+2*sec)
	if indicatorsAt(t, e, g.TenantKey, t0+2*sec).Boosted {
		t.Fatal("the boost ends when served")
	}
	completeAt(t, e, g.Ticket, t0+2*sec)
}

func TestFeedbackNudgesWeights(t *testing.T) {
	// a weighs 4, b 2; a guard of 50 % hands b every other grant, against its third by weight:
	// a falls below its share, b above. One step a period, within 50..200 % of each weight.
	fb := DefaultFeedbackController()
	fb.PeriodMs = 60000
	guard := StarvationGuard{1, 50}
	e := newControlled(t, nil, Controls{Feedback: &fb, StarvationGuard: &guard})
	a, b := mustKey(t, "a"), mustKey(t, "b")
	for k, w := range map[uint64]uint32{a: 4, b: 2} {
		if err := e.SetWeightKey(k, w); err != nil {
			t.Fatal(err)
		}
		enqueueAt(t, e, Request{TenantKey: k}, 0)
		enqueueAt(t, e, Request{TenantKey: k}, 0)
	}
	var history [][2]uint32
	for step := uint64(1); step <= 12*600; step++ {
		now := step * 100 * ms
		r, err := e.TickAt(now)
		if err != nil {
			t.Fatal(err)
		}
		if r.FeedbackRan {
			history = append(history, [2]uint32{indicatorsAt(t, e, a, now).EffectiveWeight,
				indicatorsAt(t, e, b, now).EffectiveWeight})
		}
		g := grantAt(t, e, now)
		completeAt(t, e, g.Ticket, now)
		enqueueAt(t, e, Request{TenantKey: g.TenantKey}, now)
	}
	if n := len(history); n < 11 || n > 12 || history[0] != [2]uint32{5, 1} || history[n-1] != [2]uint32{7, 1} {
		t.Fatalf("runs, first and last nudge: %v", history)
	}
	for _, h := range history {
		if h[0] < 2 || h[0] > 8 || h[1] < 1 || h[1] > 4 {
			t.Fatalf("outside floor and ceiling: %v", history)
		}
	}
}

func TestIndicatorsSwitch(t *testing.T) {
	off := false
	e := newControlled(t, nil, Controls{Indicators: &off})
	k := mustKey(t, "a")
	enqueueAt(t, e, Request{TenantKey: k}, t0)
	if _, ok, err := e.TenantIndicatorsAt(k, t0); ok || err != nil {
		t.Fatalf("indicators off: %v %v", ok, err)
	}
	boost := DefaultWaitBoost()
	if _, err := NewWithControls(DefaultConfig(), Controls{Indicators: &off, WaitBoost: &boost}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "indicators") {
		t.Fatalf("boost without indicators: %v", err)
	}
}

func TestAStuckPoolLeavesTheOtherFlowing(t *testing.T) {
	e := newControlled(t, func(c *Config) { c.MaxInFlight = 8 }, Controls{Pools: []uint32{2, 4}})
	if n, err := e.PoolCount(); err != nil || n != 2 {
		t.Fatalf("pools: %d %v", n, err)
	}
	s1, s2, fast := mustKey(t, "slow-1"), mustKey(t, "slow-2"), mustKey(t, "fast")
	for i := 0; i < 4; i++ {
		enqueueAt(t, e, Request{TenantKey: s1, Downstream: 0}, t0)
		enqueueAt(t, e, Request{TenantKey: s2, Downstream: 0}, t0)
	}
	held := []Grant{grantAt(t, e, t0), grantAt(t, e, t0)}
	if _, ok, _ := e.NextGrantAt(t0); ok {
		t.Fatal("pool 0 is full: nothing to grant")
	}
	if ps, ok, err := e.PoolStats(0); err != nil || !ok || ps.InFlight != 2 || ps.BlockedTenants != 2 ||
		ps.MaxInFlight != 2 {
		t.Fatalf("pool 0: %+v %v %v", ps, ok, err)
	}
	for i := uint64(0); i < 20; i++ {
		enqueueAt(t, e, Request{TenantKey: fast, Downstream: 1}, t0+i*ms)
		g := grantAt(t, e, t0+i*ms)
		if g.TenantKey != fast {
			t.Fatalf("grant %d went to %x", i, g.TenantKey)
		}
		completeAt(t, e, g.Ticket, t0+i*ms)
	}
	if _, ok, err := e.PoolStats(2); ok || err != nil {
		t.Fatalf("pool 2: %v %v", ok, err)
	}
	if _, err := e.Enqueue(Request{TenantKey: fast, Downstream: 2}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("downstream 2: %v", err)
	}
	for _, g := range held {
		completeAt(t, e, g.Ticket, t0+30*ms)
	}
	drained := 0
	for {
		g, ok, err := e.NextGrantAt(t0 + 30*ms)
		if err != nil || !ok {
			break
		}
		completeAt(t, e, g.Ticket, t0+30*ms)
		drained++
	}
	if drained != 6 {
		t.Fatalf("drained %d", drained)
	}
}

func TestExpireIndicatorsFairnessAndTopK(t *testing.T) {
	k := uint32(2)
	e := newControlled(t, func(c *Config) { c.MaxInFlight = 1; c.MaxWaitMs = 30000 }, Controls{IndicatorTopK: &k})
	if f, err := e.FairnessAt(t0); err != nil || f.Tenants != 0 || !math.IsNaN(f.FairShareRatioMin) {
		t.Fatalf("empty: %+v %v", f, err)
	}
	if _, ok, err := e.TenantIndicators(mustKey(t, "nobody")); ok || err != nil {
		t.Fatalf("nobody: %v %v", ok, err)
	}
	keys := make([]uint64, 5)
	for i := range keys {
		keys[i] = mustKey(t, "k"+string(rune('0'+i)))
		for j := 0; j <= i; j++ {
			enqueueAt(t, e, Request{TenantKey: keys[i]}, t0)
		}
	}
	held := grantAt(t, e, t0)
	late := mustKey(t, "late")
	victim := enqueueAt(t, e, Request{TenantKey: late}, t0)
	r, err := e.ExpireAt(victim.Ticket, t0+5*ms)
	if err != nil || r != (Refusal{ReasonDeadlineExceeded, 1, 5 * ms}) {
		t.Fatalf("expire: %+v %v", r, err)
	}
	if _, err := e.ExpireAt(victim.Ticket, t0+5*ms); !errors.Is(err, ErrStaleTicket) {
		t.Fatalf("expire twice: %v", err)
	}
	if _, err := e.ExpireAt(held.Ticket, t0); !errors.Is(err, ErrTicketState) {
		t.Fatalf("expire a granted ticket: %v", err)
	}
	if ind := indicatorsAt(t, e, late, t0+5*ms); ind.Requests != 1 || ind.Refused != 1 || ind.RefusalRate != 1 {
		t.Fatalf("late: %+v", ind)
	}
	completeAt(t, e, held.Ticket, t0+5*ms)
	for {
		g, ok, err := e.NextGrantAt(t0 + 10*ms)
		if err != nil || !ok {
			break
		}
		completeAt(t, e, g.Ticket, t0+10*ms)
	}
	top, err := e.FairnessTopAt(10, t0+10*ms)
	if err != nil || len(top) != 2 || top[0].Requests != 5 || top[1].Requests != 4 || top[0].TenantKey != keys[4] {
		t.Fatalf("top: %+v %v", top, err)
	}
	if one, err := e.FairnessTop(1); err != nil || len(one) != 1 {
		t.Fatalf("top 1: %+v %v", one, err)
	}
	f, err := e.FairnessAt(t0 + 10*ms)
	if err != nil || f.Tenants != 6 || f.RefusalRateMin != 0 || f.RefusalRateMax != 1 || !(f.FairShareRatioMax > 0) {
		t.Fatalf("fairness: %+v %v", f, err)
	}
	if s, _ := e.Stats(); s.Refused[ReasonDeadlineExceeded] != 1 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestSheddingCutsAFailingPoolAndRefusesWhatItCannotServe(t *testing.T) {
	sh := DefaultShedding()
	if _, err := NewWithControls(DefaultConfig().WithEnabled(true), Controls{Shedding: &sh}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "shedding") {
		t.Fatalf("shedding without pools: %v", err)
	}
	sh = Shedding{2, 1000, 10}
	e := newControlled(t, func(c *Config) { c.MaxInFlight = 8 }, Controls{Pools: []uint32{4, 4}, Shedding: &sh})
	if ps, ok, err := e.PoolShedding(0); err != nil || !ok || ps.Limit != 4 || ps.Shedding || !math.IsNaN(ps.LastErrorRatio) {
		t.Fatalf("before: %+v %v %v", ps, ok, err)
	}
	w := 1000 * ms
	for i := uint64(0); i < 20; i++ {
		if err := e.ReportDownstreamAt(0, i%2 == 0, t0+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ReportDownstreamAt(0, true, t0+w); err != nil { // judges the window: 50 %
		t.Fatal(err)
	}
	if ps, _, _ := e.PoolShedding(0); ps != (PoolShedding{2, true, 0.5, 1, 11, 10}) {
		t.Fatalf("after a failing window: %+v", ps)
	}
	if err := e.ReportDownstream(9, true); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("pool 9: %v", err)
	}
	now := t0 + w
	a, b, c := mustKey(t, "a"), mustKey(t, "b"), mustKey(t, "c")
	for _, k := range []uint64{a, a, b} {
		enqueueAt(t, e, Request{TenantKey: k}, now)
	}
	held := []Grant{grantAt(t, e, now), grantAt(t, e, now)}
	if _, ok, _ := e.NextGrantAt(now); ok {
		t.Fatal("b must block on the cut pool")
	}
	now += 300 * ms
	r, err := e.EnqueueAt(Request{TenantKey: c, TimeoutNs: 200 * ms}, now)
	if err != nil || r.Queued || r.Reason != ReasonDownstreamShedding || r.Reason.String() != "downstream_shedding" {
		t.Fatalf("refused at once: %+v %v", r, err)
	}
	enqueueAt(t, e, Request{TenantKey: c, TimeoutNs: 200 * ms, Downstream: 1}, now)
	if s, _ := e.Stats(); s.Refused[ReasonDownstreamShedding] != 1 {
		t.Fatalf("stats: %+v", s)
	}
	for _, g := range held {
		completeAt(t, e, g.Ticket, now)
	}
}

// lightTenantServedFirst: whether a tenant that comes back below its share is granted before a
// backlogged one.
func lightTenantServedFirst(t *testing.T, ctl Controls) bool {
	e := newControlled(t, func(c *Config) { c.MaxInFlight = 1 }, ctl)
	noisy, light := mustKey(t, "noisy"), mustKey(t, "light")
	if err := e.SetWeightKey(noisy, 8); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		enqueueAt(t, e, Request{TenantKey: noisy}, t0)
	}
	for i := 0; i < 20; i++ {
		g := grantAt(t, e, t0)
		if _, err := e.CompleteAt(g.Ticket, true, 0, t0); err != nil {
			t.Fatal(err)
		}
		enqueueAt(t, e, Request{TenantKey: noisy}, t0)
	}
	enqueueAt(t, e, Request{TenantKey: light, UserData: 7}, t0)
	return grantAt(t, e, t0).UserData == 7
}

func TestLightLaneServesAReturningTenantFirst(t *testing.T) {
	on, off := true, false
	if !lightTenantServedFirst(t, Controls{}) {
		t.Fatal("on by default, yet the light tenant waited")
	}
	if !lightTenantServedFirst(t, Controls{LightLane: &on}) {
		t.Fatal("on, yet the light tenant waited")
	}
	if lightTenantServedFirst(t, Controls{LightLane: &off}) {
		t.Fatal("off, yet the light tenant went first")
	}
}

func TestSeatsCountCostUnits(t *testing.T) {
	e := newControlled(t, func(c *Config) { c.MaxInFlight = 4 }, Controls{Seats: true})
	for i := 0; i < 3; i++ {
		enqueueAt(t, e, Request{TenantKey: mustKey(t, "a"), Cost: 2}, t0)
	}
	first := grantAt(t, e, t0)
	if second := grantAt(t, e, t0); first.Cost != 2 || second.Cost != 2 {
		t.Fatalf("costs %d %d", first.Cost, second.Cost)
	}
	if _, ok, err := e.NextGrantAt(t0); ok || err != nil {
		t.Fatalf("4 seats out, yet granted: %v %v", ok, err)
	}
	if s, _ := e.Stats(); s.InFlight != 2 { // two grants hold the 4 seats
		t.Fatalf("in flight %d", s.InFlight)
	}
	if _, err := e.CompleteAt(first.Ticket, true, 0, t0); err != nil {
		t.Fatal(err)
	}
	grantAt(t, e, t0)
}
