//go:build fairq_fleet

package fairq

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// redisServer starts a redis-server on a free port (no persistence), stopped at cleanup.
func redisServer(t *testing.T) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server (Debian package redis-server): %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if reply, err := redisCmd(addr, "PING"); err == nil && reply[0] == "PONG" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// redisCmd sends one command and returns a flat reply: a simple string, or an array's bulk
// strings.
func redisCmd(addr string, args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	switch line[0] {
	case '+':
		return []string{line[1:]}, nil
	case '-':
		return nil, errors.New(line[1:])
	case '*':
		var n int
		fmt.Sscan(line[1:], &n)
		out := make([]string, 0, n)
		for i := 0; i < n; i++ {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return nil, err
			}
			v, err := r.ReadString('\n')
			if err != nil {
				return nil, err
			}
			out = append(out, strings.TrimRight(v, "\r\n"))
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// servedEngine has tenant "acme" served once, so a fleet has a tenant to track.
func servedEngine(t *testing.T) *Engine {
	e := newEngine(t, nil)
	k := mustKey(t, "acme")
	if _, err := e.Enqueue(Request{TenantKey: k}); err != nil {
		t.Fatal(err)
	}
	g, ok, err := e.NextGrant()
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := e.Complete(g.Ticket, true, 0); err != nil {
		t.Fatal(err)
	}
	return e
}

func newFleet(t *testing.T, e *Engine, url, name string) *Fleet {
	c := DefaultFleetConfig()
	c.URL, c.Fleet, c.Replica, c.PeriodMs = url, name, "go-1", 50
	f, err := NewFleet(e, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFleetConfigErrors(t *testing.T) {
	d := DefaultFleetConfig()
	if d.PeriodMs != 100 || d.TopK != 256 || d.Fleet != "default" {
		t.Fatalf("defaults: %+v", d)
	}
	e := servedEngine(t)
	c := d
	c.PeriodMs = 20
	if _, err := NewFleet(e, c); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "period_ms") {
		t.Fatalf("period 20: %v", err)
	}
	c = d
	c.URL = "http://127.0.0.1/"
	if _, err := NewFleet(e, c); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("not a redis URL: %v", err)
	}
}

func TestFleetSyncAgainstALiveRedis(t *testing.T) {
	addr := redisServer(t)
	e := servedEngine(t)
	f := newFleet(t, e, "redis://"+addr+"/", "go-test")
	if st, err := f.Status(); err != nil || st.HasSynced || st.Syncs != 0 || st.Running {
		t.Fatalf("before: %+v %v", st, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	st, err := f.Status()
	if err != nil || !st.HasSynced || st.Degraded || st.Syncs != 1 || st.Pipelines != 1 || st.TenantsTracked != 1 {
		t.Fatalf("after one sync: %+v %v", st, err)
	}
	if err := f.SyncAt(st.LastSyncNs + 100*ms); err != nil {
		t.Fatal(err)
	}
	keys, err := redisCmd(addr, "KEYS", "{fairq:go-test}:served:*")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no fleet hash: %v %v", keys, err)
	}
	fields, err := redisCmd(addr, "HGETALL", keys[0])
	if err != nil || !strings.Contains(strings.Join(fields, " "), "hb:go-1") {
		t.Fatalf("no heartbeat of go-1: %v %v", fields, err)
	}
}

func TestFleetDeadRedisDegradesAfterThree(t *testing.T) {
	e := servedEngine(t)
	f := newFleet(t, e, fmt.Sprintf("redis://127.0.0.1:%d/", freePort(t)), "go-dead")
	now := NowNs()
	for i := uint64(1); i <= 4; i++ {
		if err := f.SyncAt(now + i*50*ms); !errors.Is(err, ErrFleetSync) {
			t.Fatalf("sync %d: %v", i, err)
		}
		st, _ := f.Status()
		if uint64(st.ConsecutiveFailures) != i || st.Degraded != (i >= 3) || st.HasSynced {
			t.Fatalf("after %d failures: %+v", i, st)
		}
	}
}

func TestFleetStartStopAndBusy(t *testing.T) {
	addr := redisServer(t)
	e := servedEngine(t)
	f := newFleet(t, e, "redis://"+addr+"/", "go-thread")
	if stopped, err := f.Stop(); stopped || err != nil {
		t.Fatalf("stop before start: %v %v", stopped, err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); !errors.Is(err, ErrBusy) {
		t.Fatalf("second start: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, ErrBusy) {
		t.Fatalf("sync while running: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if st, _ := f.Status(); st.Syncs >= 3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stopped, err := f.Stop(); !stopped || err != nil {
		t.Fatalf("stop: %v %v", stopped, err)
	}
	st, _ := f.Status()
	if st.Running || st.Syncs < 3 || !st.HasSynced || st.Pipelines != st.Syncs {
		t.Fatalf("after stop: %+v", st)
	}
	if err := f.Start(); err != nil { // Close stops it
		t.Fatal(err)
	}
}
