// The fairq quick start from Go: two tenants weighted 3:1 share a gateway's admission capacity
// (the cycle of ffi/c/quickstart.c). A module of its own, as a user's program would be: go.mod
// requires fairq.local/fairq and replaces it with ../ (the binding's directory).
//
//	ffi/c/install.sh PREFIX
//	cd ffi/go/example && PKG_CONFIG_PATH=PREFIX/lib/pkgconfig LD_LIBRARY_PATH=PREFIX/lib go run .
package main

import (
	"fmt"
	"os"

	"fairq.local/fairq"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	config := fairq.DefaultConfig().WithEnabled(true) // off by default: enable it
	config.MaxInFlight = 4
	q, err := fairq.New(config)
	if err != nil {
		return err
	}
	defer q.Close()
	acme, _ := fairq.TenantKey("acme")
	globex, _ := fairq.TenantKey("globex")
	if err := q.SetWeightKey(acme, 3); err != nil {
		return err
	}
	if err := q.SetWeightKey(globex, 1); err != nil {
		return err
	}

	// The limiter refused 8 requests of each tenant: hold them instead of answering 429.
	for i := uint64(0); i < 16; i++ {
		key := acme
		if i%2 == 1 {
			key = globex
		}
		r, err := q.Enqueue(fairq.Request{TenantKey: key, UserData: i})
		if err != nil {
			return err
		}
		if !r.Queued { // answer 429 with the reason and position
			fmt.Printf("refused %d: %s\n", i, r.Reason)
		}
	}

	// Whenever capacity frees up: take grants until EMPTY or AT_CAPACITY (ok false).
	grants := map[string]int{}
	first8 := map[string]int{}
	for {
		g, ok, err := q.NextGrant()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if g.Expired {
			continue // answer 429: deadline_exceeded
		}
		name := "globex"
		if g.TenantKey == acme {
			name = "acme"
		}
		grants[name]++
		if n := grants["acme"] + grants["globex"]; n <= 8 {
			first8[name]++
			fmt.Printf("grant %d: request %d of %s\n", n, g.UserData, name)
		}
		// Re-check the limiter; it passes, so the request is admitted.
		if _, err := q.Complete(g.Ticket, true, 0); err != nil {
			return err
		}
	}
	// While both tenants wait, grants follow the weights; then the rest drains.
	fmt.Printf("first 8 grants, both waiting: acme %d, globex %d (weights 3:1)\n",
		first8["acme"], first8["globex"])
	fmt.Printf("all granted: acme %d, globex %d\n", grants["acme"], grants["globex"])

	s, err := q.Stats()
	if err != nil {
		return err
	}
	fmt.Printf("enqueued %d, granted %d, completed %d, queued %d\n",
		s.Enqueued, s.Granted, s.Completed, s.Queued)
	fmt.Printf("version %s\n", fairq.Version())
	return nil
}
