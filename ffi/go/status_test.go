package fairq

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// statusNow is when the flood's dumps are taken: its requests were queued at t0.
const statusNow = t0 + 500*ms

// flooded is an engine with 300 requests of "flood" queued at t0 and 4 of them granted (the
// grants returned), and one request of "victim" queued 2 ms before statusNow. Both were put in
// tier "std" by name, so the dump knows their names.
func flooded(t *testing.T) (*Engine, []Grant) {
	t.Helper()
	e := newControlled(t, func(c *Config) {
		c.MaxTenants, c.TenantQueueCapacity, c.QueueCapacity, c.MaxInFlight = 64, 512, 4096, 4
	}, Controls{Tiers: []Tier{{"std", 1}}})
	for _, name := range []string{"flood", "victim"} {
		if err := e.SetTier(name, "std"); err != nil {
			t.Fatal(err)
		}
	}
	flood := mustKey(t, "flood")
	for i := 0; i < 300; i++ {
		enqueueAt(t, e, Request{TenantKey: flood}, t0)
	}
	held := make([]Grant, 4)
	for i := range held {
		held[i] = grantAt(t, e, t0)
	}
	enqueueAt(t, e, Request{TenantKey: mustKey(t, "victim")}, statusNow-2*ms)
	return e, held
}

func statusAt(t *testing.T, e *Engine, k int, order StatusOrder, now uint64) QueueStatus {
	t.Helper()
	s, err := e.StatusAt(k, order, now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStatusShowsTheFloodAndTheVictimsShortWait(t *testing.T) {
	e, _ := flooded(t)
	s := statusAt(t, e, 10, StatusByDepth, statusNow)
	if !s.Enabled || s.InFlight != 4 || s.MaxInFlight != 4 || s.Seats || s.Queued != 297 ||
		s.QueueCapacity != 4096 || s.BusyTenants != 2 || s.Order != StatusByDepth {
		t.Fatalf("totals: %+v", s)
	}
	if len(s.Tenants) != 2 {
		t.Fatalf("rows: %+v", s.Tenants)
	}
	flood, victim := s.Tenants[0], s.Tenants[1]
	if flood.TenantKey != mustKey(t, "flood") || flood.Name != "flood" || flood.Tier != "std" {
		t.Fatalf("flood: %+v", flood)
	}
	if flood.Queued != 296 || flood.InFlight != 4 || flood.Granted != 4 || flood.OldestWaitNs != 500*ms ||
		flood.State() != "backlogged" || flood.Light || flood.Parked {
		t.Fatalf("flood: %+v %s", flood, flood.State())
	}
	if victim.Name != "victim" || victim.Queued != 1 || victim.InFlight != 0 || victim.OldestWaitNs != 2*ms ||
		victim.State() != "light" || !victim.Light {
		t.Fatalf("victim: %+v %s", victim, victim.State())
	}
	// By oldest wait the flood's head comes first too; cut to one row, the count is not.
	s = statusAt(t, e, 1, StatusByOldestWait, statusNow)
	if len(s.Tenants) != 1 || s.Tenants[0].Name != "flood" || s.BusyTenants != 2 || s.Order.String() != "oldest_wait" {
		t.Fatalf("oldest wait: %+v", s)
	}
	if s := statusAt(t, e, 0, StatusByDepth, statusNow); len(s.Tenants) != 0 || s.Queued != 297 {
		t.Fatalf("k 0: %+v", s)
	}
}

func TestStatusRowsGoAfterTheFloodDrains(t *testing.T) {
	e, held := flooded(t)
	for _, g := range held {
		completeAt(t, e, g.Ticket, statusNow)
	}
	held = held[:0]
	for {
		g, ok, err := e.NextGrantAt(statusNow)
		if err != nil || (ok && g.Expired) {
			t.Fatalf("grant: %+v %v", g, err)
		}
		if !ok {
			break
		}
		if held = append(held, g); len(held) == 4 {
			for _, g := range held {
				completeAt(t, e, g.Ticket, statusNow)
			}
			held = held[:0]
		}
	}
	if len(held) != 1 {
		t.Fatalf("297 requests, 4 at a time: %d left out", len(held))
	}
	s := statusAt(t, e, 10, StatusByDepth, statusNow)
	if len(s.Tenants) != 1 || s.Tenants[0].TenantKey != held[0].TenantKey || s.Tenants[0].Queued != 0 ||
		s.Tenants[0].InFlight != 1 || s.Tenants[0].State() != "idle" {
		t.Fatalf("a grant out keeps its row: %+v", s.Tenants)
	}
	completeAt(t, e, held[0].Ticket, statusNow)
	s = statusAt(t, e, 10, StatusByDepth, statusNow)
	if len(s.Tenants) != 0 || s.BusyTenants != 0 || s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("after the flood: %+v", s)
	}
}

func TestStatusTextJSONAgreesWithStatus(t *testing.T) {
	e, _ := flooded(t)
	s := statusAt(t, e, 10, StatusByDepth, statusNow)
	text, err := e.StatusTextAt(10, StatusByDepth, StatusFormatJSON, statusNow)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Enabled       bool    `json:"enabled"`
		InFlight      uint64  `json:"in_flight"`
		SeatsInFlight *uint64 `json:"seats_in_flight"`
		MaxInFlight   uint32  `json:"max_in_flight"`
		Queued        uint64  `json:"queued"`
		QueueCapacity uint32  `json:"queue_capacity"`
		BusyTenants   uint64  `json:"busy_tenants"`
		WeightClasses uint32  `json:"weight_classes"`
		Pools         []any   `json:"pools"`
		Order         string  `json:"order"`
		Tenants       []struct {
			Tenant          string  `json:"tenant"`
			Name            *string `json:"name"`
			Tier            *string `json:"tier"`
			Weight          uint32  `json:"weight"`
			EffectiveWeight uint32  `json:"effective_weight"`
			Queued          uint64  `json:"queued"`
			InFlight        uint64  `json:"in_flight"`
			Granted         uint64  `json:"granted"`
			OldestWaitNs    uint64  `json:"oldest_wait_ns"`
			State           string  `json:"state"`
			ParkedForNs     *uint64 `json:"parked_for_ns"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		t.Fatalf("%v: %s", err, text)
	}
	if j.Enabled != s.Enabled || j.InFlight != s.InFlight || j.SeatsInFlight != nil || j.MaxInFlight != s.MaxInFlight ||
		j.Queued != s.Queued || j.QueueCapacity != s.QueueCapacity || j.BusyTenants != s.BusyTenants ||
		j.WeightClasses != s.WeightClasses || len(j.Pools) != 0 || j.Order != s.Order.String() {
		t.Fatalf("totals: %s vs %+v", text, s)
	}
	if len(j.Tenants) != len(s.Tenants) {
		t.Fatalf("rows: %s vs %+v", text, s.Tenants)
	}
	for i, r := range j.Tenants {
		w := s.Tenants[i]
		key, err := strconv.ParseUint(r.Tenant, 16, 64)
		if err != nil || len(r.Tenant) != 16 || key != w.TenantKey || r.Name == nil || *r.Name != w.Name ||
			r.Tier == nil || *r.Tier != w.Tier || r.Weight != w.Weight || r.EffectiveWeight != w.EffectiveWeight ||
			r.Queued != w.Queued || r.InFlight != w.InFlight || r.Granted != w.Granted ||
			r.OldestWaitNs != w.OldestWaitNs || r.State != w.State() || r.ParkedForNs != nil {
			t.Fatalf("row %d: %+v vs %+v", i, r, w)
		}
	}
	table, err := e.StatusTextAt(10, StatusByDepth, StatusFormatText, statusNow)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "queued 297/4096") ||
		!strings.HasPrefix(lines[2], fmt.Sprintf("%016x", mustKey(t, "flood"))) ||
		!strings.Contains(lines[2], "backlogged") || !strings.Contains(lines[3], "victim") {
		t.Fatalf("totals, heading and two tenants:\n%s", table)
	}
	// Wider than any first guess: 60 more tenants.
	for i := 0; i < 60; i++ {
		enqueueAt(t, e, Request{TenantKey: mustKey(t, fmt.Sprintf("tenant-%02d", i))}, statusNow)
	}
	text, err = e.StatusText(100, StatusByDepth, StatusFormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(text), &j); err != nil || len(j.Tenants) != 62 {
		t.Fatalf("%v: %d rows", err, len(j.Tenants))
	}
}

func TestStatusNamesOnlyForRawIdentifiersParkingAndErrors(t *testing.T) {
	e := newControlled(t, nil, Controls{Tiers: []Tier{{"gold", 8}}})
	keyed, acme, keyedGold := mustKey(t, "keyed"), mustKey(t, "acme"), mustKey(t, "keyed-gold")
	if err := e.SetWeightKey(keyed, 2); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTier("acme", "gold"); err != nil {
		t.Fatal(err)
	}
	named := mustKey(t, "named")
	if err := e.SetWeight("named", 3); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTierKey(keyedGold, "gold"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTier("", "gold"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty identifier: %v", err)
	}
	if w, err := e.WeightOf(acme); err != nil || w != 8 {
		t.Fatalf("a raw identifier names the same key: %d %v", w, err)
	}
	for _, k := range []uint64{keyed, acme, keyedGold, named} {
		enqueueAt(t, e, Request{TenantKey: k}, t0)
	}
	enqueueAt(t, e, Request{TenantKey: acme, RetryAfterNs: 50 * ms}, t0)
	rows := map[uint64]TenantStatus{}
	for _, r := range statusAt(t, e, 10, StatusByDepth, t0+10*ms).Tenants {
		rows[r.TenantKey] = r
	}
	if r := rows[keyed]; r.Name != "" || r.Tier != "" || r.Weight != 2 {
		t.Fatalf("by key: %+v", r)
	}
	if r := rows[acme]; r.Name != "acme" || r.Tier != "gold" || r.Weight != 8 {
		t.Fatalf("by name: %+v", r)
	}
	if r := rows[keyedGold]; r.Name != "" || r.Tier != "gold" {
		t.Fatalf("tier by key: %+v", r)
	}
	if r := rows[named]; r.Name != "named" || r.Weight != 3 {
		t.Fatalf("weight by name: %+v", r)
	}
	// Grant every ready head: acme's second request, parked, becomes its head.
	for n := 0; ; n++ {
		_, ok, err := e.NextGrantAt(t0 + 10*ms)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if n != 4 {
				t.Fatalf("%d grants", n)
			}
			break
		}
	}
	parked := 0
	for _, r := range statusAt(t, e, 10, StatusByDepth, t0+20*ms).Tenants {
		if r.TenantKey == acme {
			if !r.Parked || r.ParkedForNs != 30*ms || r.State() != "parked" {
				t.Fatalf("its Retry-After ends at t0 + 50 ms: %+v %s", r, r.State())
			}
			parked++
		}
	}
	if parked != 1 {
		t.Fatal("acme has no row")
	}
	if _, err := e.Status(10, StatusOrder(7)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("order 7: %v", err)
	}
	if _, err := e.StatusText(10, StatusOrder(7), StatusFormatJSON); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("text, order 7: %v", err)
	}
	if _, err := e.StatusText(10, StatusByDepth, StatusFormat(9)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("format 9: %v", err)
	}
	e.Close()
	if _, err := e.Status(10, StatusByDepth); !errors.Is(err, ErrNull) {
		t.Fatalf("closed: %v", err)
	}
	if _, err := e.StatusText(10, StatusByDepth, StatusFormatText); !errors.Is(err, ErrNull) {
		t.Fatalf("closed, text: %v", err)
	}
}
