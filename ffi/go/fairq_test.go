package fairq

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

const ms = uint64(1_000_000)
const t0 = 1000 * ms

func mustKey(t *testing.T, raw string) uint64 {
	t.Helper()
	k, err := TenantKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newEngine(t *testing.T, edit func(*Config)) *Engine {
	t.Helper()
	c := DefaultConfig().WithEnabled(true)
	if edit != nil {
		edit(&c)
	}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestVersionAndNames(t *testing.T) {
	major, minor, patch := HeaderVersion()
	if got, want := Version(), fmt.Sprintf("%d.%d.%d", major, minor, patch); got != want {
		t.Fatalf("version %s, header %s", got, want)
	}
	if StatusErrStaleTicket.String() != "FAIRQ_ERR_STALE_TICKET" || StatusOK != 0 || StatusErrNull != -1 {
		t.Fatal("status names/numbers")
	}
	if ReasonQueueFull.String() != "queue_full" || ReasonCancelled != 9 || DimAPIKey.String() != "api_key" {
		t.Fatal("reason/dimension names")
	}
	if NowNs() == 0 {
		t.Fatal("clock")
	}
	if _, err := TenantKey(""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
}

// XXH3-64, seed 0, over the raw bytes: the same keys as every other binding and build. (Over no
// bytes it is 0x2d06800538d394c2, but an empty identifier is refused.)
func TestTenantKeyVectors(t *testing.T) {
	for _, v := range []struct {
		raw  string
		want uint64
	}{
		{"acme", 0x44ad98655d8858e1},
		{strings.Repeat("0123456789abcdef", 64), 0x540ffccbf24ea528},
		{"naïve-租户", 0xd812649601f883b6},
	} {
		if got := mustKey(t, v.raw); got != v.want {
			t.Errorf("TenantKey(%.20q) = %#x, want %#x", v.raw, got, v.want)
		}
	}
}

func TestShares3To1(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.TenantQueueCapacity = 1024 })
	if err := e.SetWeight("acme", 3); err != nil {
		t.Fatal(err)
	}
	acme, globex := mustKey(t, "acme"), mustKey(t, "globex")
	if w, _ := e.WeightOf(acme); w != 3 {
		t.Fatalf("weight %d", w)
	}
	for i := uint64(0); i < 400; i++ {
		for _, k := range []uint64{acme, globex} {
			r, err := e.EnqueueAt(Request{TenantKey: k, UserData: i}, t0)
			if err != nil || !r.Queued {
				t.Fatalf("enqueue: %v %+v", err, r)
			}
		}
	}
	for window := 0; window < 100; window++ {
		got := 0
		for k := 0; k < 4; k++ {
			g, ok, err := e.NextGrantAt(t0 + ms)
			if err != nil || !ok || g.Expired {
				t.Fatalf("grant: %v %v %+v", err, ok, g)
			}
			if g.TenantKey == acme {
				got++
			}
			if c, err := e.CompleteAt(g.Ticket, true, 0, t0+ms); err != nil || c.Status != StatusOK {
				t.Fatalf("complete: %v %+v", err, c)
			}
		}
		if got != 3 {
			t.Fatalf("window %d: %d grants of acme, want 3", window, got)
		}
	}
	if g, c, ok, _ := e.TenantGranted(acme); !ok || g != 300 || c != 300 {
		t.Fatalf("tenant granted %d %d %v", g, c, ok)
	}
	if err := e.ReplaceWeights(map[uint64]uint32{globex: 3}, 1); err != nil {
		t.Fatal(err)
	}
	if w, _ := e.WeightOf(globex); w != 3 {
		t.Fatalf("replaced weight %d", w)
	}
}

func TestRefusalReasons(t *testing.T) {
	e := newEngine(t, func(c *Config) {
		c.Enabled = false
		c.MaxTenants, c.TenantQueueCapacity, c.QueueCapacity = 2, 2, 3
		c.MaxWaitMs, c.TenantIdleMs = 100, 60000
	})
	a, b, x := mustKey(t, "a"), mustKey(t, "b"), mustKey(t, "x")
	reason := func(r Request) Reason {
		t.Helper()
		res, err := e.EnqueueAt(r, t0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Queued {
			return ReasonNone
		}
		return res.Reason
	}
	expect := func(got, want Reason) {
		t.Helper()
		if got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	expect(reason(Request{TenantKey: a}), ReasonDisabled)
	if err := e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	expect(reason(Request{TenantKey: a, Dimension: DimGlobal}), ReasonNotQueueable)
	expect(reason(Request{}), ReasonNoTenant)
	expect(reason(Request{TenantKey: a, RetryAfterNs: 200 * ms}), ReasonWaitExceedsBudget)
	expect(reason(Request{TenantKey: a, UserData: 77, TimeoutNs: 10 * ms}), ReasonNone)
	expect(reason(Request{TenantKey: a}), ReasonNone)
	expect(reason(Request{TenantKey: a}), ReasonTenantQueueFull)
	expect(reason(Request{TenantKey: b}), ReasonNone)
	expect(reason(Request{TenantKey: b}), ReasonQueueFull)
	expect(reason(Request{TenantKey: x}), ReasonTenantTableFull)
	g, ok, err := e.NextGrantAt(t0 + 20*ms)
	if err != nil || !ok || !g.Expired || g.UserData != 77 || g.Reason != ReasonDeadlineExceeded {
		t.Fatalf("expired grant: %v %v %+v", err, ok, g)
	}
	g, _, _ = e.NextGrantAt(t0 + 20*ms)
	if err := e.CancelAt(g.Ticket, t0+20*ms); err != nil {
		t.Fatal(err)
	}
	s, _ := e.Stats()
	for r := ReasonQueueFull; r <= ReasonCancelled; r++ {
		if s.Refused[r] != 1 {
			t.Errorf("%v: %d refusals, want 1", r, s.Refused[r])
		}
	}
}

func TestErrorsCarryStatusName(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "max_tenants") {
		t.Fatalf("invalid config: %v", err)
	}
	e := newEngine(t, nil)
	if _, err := e.EnqueueAt(Request{TenantKey: mustKey(t, "a")}, t0); err != nil {
		t.Fatal(err)
	}
	g, _, _ := e.NextGrantAt(t0)
	if _, err := e.CompleteWithCost(g.Ticket, true, 0, 2); err != nil {
		t.Fatal(err)
	}
	_, err := e.Complete(g.Ticket, true, 0)
	if !errors.Is(err, ErrStaleTicket) || err.Error() != "FAIRQ_ERR_STALE_TICKET" {
		t.Fatalf("double complete: %v", err)
	}
	if _, err := e.Enqueue(Request{TenantKey: 1, Dimension: 42}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad dimension: %v", err)
	}
	var fe *Error
	if !errors.As(e.Cancel(0xdeadbeef), &fe) || fe.Status != StatusErrStaleTicket {
		t.Fatalf("garbage ticket: %v", fe)
	}
	e.Close()
	e.Close() // idempotent
	if _, err := e.Stats(); !errors.Is(err, ErrNull) {
		t.Fatalf("closed engine: %v", err)
	}
}

func TestResolveTenantAndMetrics(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.TenantDimension = TenantDimTeam })
	k, d, ok, err := e.ResolveTenant(Identity{User: "alice", Team: "blue"})
	if err != nil || !ok || k != mustKey(t, "blue") || d != TenantDimTeam {
		t.Fatalf("team: %v %v %v", err, ok, d)
	}
	k, d, ok, _ = e.ResolveTenant(Identity{User: "alice", Team: "x", TeamIsPlaceholder: true})
	if !ok || k != mustKey(t, "alice") || d != TenantDimUser {
		t.Fatal("placeholder team falls back to the user")
	}
	if _, _, ok, _ = e.ResolveTenant(Identity{}); ok {
		t.Fatal("no identifier")
	}
	if _, err := e.Enqueue(Request{TenantKey: k}); err != nil {
		t.Fatal(err)
	}
	text, err := e.Metrics()
	if err != nil || !strings.Contains(text, "rate_limit_fair_queue_depth 1\n") {
		t.Fatalf("metrics: %v\n%s", err, text)
	}
}

func TestFourGoroutinesConserveEveryTicket(t *testing.T) {
	e := newEngine(t, func(c *Config) {
		c.MaxInFlight, c.TenantQueueCapacity, c.QueueCapacity = 3, 256, 2048
	})
	type tally struct{ ops, queued, completed, cancelled, expired, refusedAfter uint64 }
	tallies := make([]tally, 4)
	var wg sync.WaitGroup
	for n := 0; n < 4; n++ {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			t0 := &tallies[n]
			keys := make([]uint64, 4)
			for i := range keys {
				keys[i], _ = TenantKey(fmt.Sprintf("t%d-%d", n, i))
			}
			for i := uint64(0); i < 50000; i++ {
				r, err := e.Enqueue(Request{TenantKey: keys[i%4], UserData: i, Cost: uint32(1 + i%3)})
				t0.ops++
				if err != nil {
					t.Error(err)
					return
				}
				if r.Queued {
					t0.queued++
					if i%13 == 0 {
						err := e.Cancel(r.Ticket)
						t0.ops++
						if err == nil {
							t0.cancelled++
						} else if !errors.Is(err, ErrStaleTicket) && !errors.Is(err, ErrTicketState) {
							t.Error(err)
						}
					}
				}
				g, ok, err := e.NextGrant()
				t0.ops++
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				if g.Expired {
					t0.expired++
					continue
				}
				c, err := e.Complete(g.Ticket, i%7 != 0, 0)
				t0.ops++
				switch {
				case errors.Is(err, ErrStaleTicket): // cancelled by its enqueuer first
				case err != nil:
					t.Error(err)
				case c.Status == StatusOK:
					t0.completed++
				case c.Status == StatusRefused:
					t0.refusedAfter++
				}
			}
		}(n)
	}
	wg.Wait()
	var total tally
	for _, x := range tallies {
		total.ops += x.ops
		total.queued += x.queued
		total.completed += x.completed
		total.cancelled += x.cancelled
		total.expired += x.expired
		total.refusedAfter += x.refusedAfter
	}
	for {
		g, ok, err := e.NextGrant()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if g.Expired {
			total.expired++
			continue
		}
		if _, err := e.Complete(g.Ticket, true, 0); err != nil {
			t.Fatal(err)
		}
		total.completed++
	}
	s, _ := e.Stats()
	if s.Queued != 0 || s.InFlight != 0 {
		t.Fatalf("left over: %+v", s)
	}
	if s.Enqueued != total.queued || s.Completed != total.completed || s.Cancelled != total.cancelled ||
		s.Expired != total.expired || s.RefusedAfterWait != total.refusedAfter {
		t.Fatalf("engine %+v vs callers %+v", s, total)
	}
	if s.Enqueued != s.Completed+s.Cancelled+s.Expired+s.RefusedAfterWait {
		t.Fatalf("not conserved: %+v", s)
	}
	t.Logf("%d operations from 4 goroutines", total.ops)
}
