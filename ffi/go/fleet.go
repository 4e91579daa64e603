//go:build fairq_fleet

package fairq

// Fleet mode (the fairq_fleet_* API): replicas share served cost through Redis so fairness
// holds across a fleet. Built with -tags fairq_fleet (link_fleet.go), against a library built
// with cargo feature fleet.

/*
#include <stdlib.h>
#include "fairq.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// FleetConfig mirrors fairq_fleet_config. Start from DefaultFleetConfig.
type FleetConfig struct {
	URL       string // Redis URL
	Fleet     string // the same on every replica
	Replica   string // unique in the fleet
	PeriodMs  uint64 // sync period, 50..=500
	EpochMs   uint64
	StaleMs   uint64
	Smoothing float64
	TopK      uint32
}

// DefaultFleetConfig is fairq_fleet_config_default.
func DefaultFleetConfig() FleetConfig {
	var c C.fairq_fleet_config
	C.fairq_fleet_config_default(&c)
	return FleetConfig{
		URL: C.GoString(c.url), Fleet: C.GoString(c.fleet), Replica: C.GoString(c.replica),
		PeriodMs: uint64(c.period_ms), EpochMs: uint64(c.epoch_ms), StaleMs: uint64(c.stale_ms),
		Smoothing: float64(c.smoothing), TopK: uint32(c.top_k),
	}
}

// FleetStatus mirrors fairq_fleet_status.
type FleetStatus struct {
	LastSyncNs          uint64
	Pipelines           uint64
	Syncs               uint64
	TenantsTracked      uint64
	ConsecutiveFailures uint32
	HasSynced           bool
	Degraded            bool
	Running             bool
}

// Fleet is one engine's replica of a fleet. Safe for concurrent use; Close it when done (it
// keeps its engine alive until then).
type Fleet struct {
	mu  sync.RWMutex // read-held by every call, write-held by Close
	ptr *C.fairq_fleet
}

// NewFleet joins engine e to a fleet; it does not connect yet. A bad config gives
// ErrInvalidConfig naming the field.
func NewFleet(e *Engine, c FleetConfig) (*Fleet, error) {
	url, fleet, replica := C.CString(c.URL), C.CString(c.Fleet), C.CString(c.Replica)
	defer C.free(unsafe.Pointer(url))
	defer C.free(unsafe.Pointer(fleet))
	defer C.free(unsafe.Pointer(replica))
	cc := C.fairq_fleet_config{
		url: url, fleet: fleet, replica: replica,
		period_ms: C.uint64_t(c.PeriodMs), epoch_ms: C.uint64_t(c.EpochMs),
		stale_ms: C.uint64_t(c.StaleMs), smoothing: C.double(c.Smoothing),
		top_k: C.uint32_t(c.TopK),
	}
	var msg [512]C.char
	f := &Fleet{}
	e.mu.RLock()
	s := C.fairq_fleet_new(e.ptr, &cc, &f.ptr, &msg[0], C.size_t(len(msg)))
	e.mu.RUnlock()
	if s < 0 {
		return nil, &Error{Status: Status(s), Detail: C.GoString(&msg[0])}
	}
	return f, nil
}

func (f *Fleet) call(fn func(p *C.fairq_fleet) C.int32_t) (Status, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return check(fn(f.ptr))
}

// Close stops the sync thread if it runs and releases the fleet. Idempotent.
func (f *Fleet) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	C.fairq_fleet_free(f.ptr)
	f.ptr = nil
	return nil
}

// Sync syncs with Redis once on this goroutine (it may block up to the socket timeout, P/2).
// A failed sync gives ErrFleetSync (the deltas are kept for the next); ErrBusy while the
// library thread runs.
func (f *Fleet) Sync() error {
	_, err := f.call(func(p *C.fairq_fleet) C.int32_t { return C.fairq_fleet_sync(p) })
	return err
}

// SyncAt is Sync at monotonic time nowNs.
func (f *Fleet) SyncAt(nowNs uint64) error {
	_, err := f.call(func(p *C.fairq_fleet) C.int32_t { return C.fairq_fleet_sync_at(p, C.uint64_t(nowNs)) })
	return err
}

// Start starts the library's sync thread (one sync every period).
func (f *Fleet) Start() error {
	_, err := f.call(func(p *C.fairq_fleet) C.int32_t { return C.fairq_fleet_start(p) })
	return err
}

// Stop stops the sync thread; stopped is false when none was running.
func (f *Fleet) Stop() (stopped bool, err error) {
	s, err := f.call(func(p *C.fairq_fleet) C.int32_t { return C.fairq_fleet_stop(p) })
	return err == nil && s == StatusOK, err
}

// Status is where the sync loop stands; it never waits for a sync in progress.
func (f *Fleet) Status() (FleetStatus, error) {
	var c C.fairq_fleet_status
	if _, err := f.call(func(p *C.fairq_fleet) C.int32_t { return C.fairq_fleet_get_status(p, &c) }); err != nil {
		return FleetStatus{}, err
	}
	return FleetStatus{
		LastSyncNs: uint64(c.last_sync_ns), Pipelines: uint64(c.pipelines), Syncs: uint64(c.syncs),
		TenantsTracked: uint64(c.tenants_tracked), ConsecutiveFailures: uint32(c.consecutive_failures),
		HasSynced: bool(c.has_synced), Degraded: bool(c.degraded), Running: bool(c.running),
	}, nil
}
