package fairq

// The status dump: the busiest tenants now and the engine's totals, for an operator during an
// incident (fairq_queue_status, fairq_queue_status_text).

// #include "fairq.h"
import "C"

import (
	"bytes"
	"unsafe"
)

// StatusOrder is how a status dump picks and sorts its tenants (FAIRQ_STATUS_BY_*).
type StatusOrder uint32

// Status dump orders, as in fairq.h.
const (
	// StatusByDepth lists the tenants with the most requests queued first.
	StatusByDepth StatusOrder = C.FAIRQ_STATUS_BY_DEPTH
	// StatusByOldestWait lists the tenants whose queue head has waited longest first.
	StatusByOldestWait StatusOrder = C.FAIRQ_STATUS_BY_OLDEST_WAIT
)

// String is the order's name in the JSON dump: "depth" or "oldest_wait".
func (o StatusOrder) String() string {
	switch o {
	case StatusByDepth:
		return "depth"
	case StatusByOldestWait:
		return "oldest_wait"
	}
	return "unknown"
}

// StatusFormat is how StatusText renders a dump (FAIRQ_STATUS_JSON, FAIRQ_STATUS_TEXT).
type StatusFormat uint32

// Status dump formats, as in fairq.h.
const (
	// StatusFormatJSON is one JSON object (tenant keys as 16 hex digits).
	StatusFormatJSON StatusFormat = C.FAIRQ_STATUS_JSON
	// StatusFormatText is a text table, a line per tenant.
	StatusFormatText StatusFormat = C.FAIRQ_STATUS_TEXT
)

// QueueStatus is a status dump: the engine's totals now and Tenants, the busiest tenants,
// largest first by Order.
type QueueStatus struct {
	Enabled  bool
	InFlight uint64
	// Seats is true when MaxInFlight counts cost units; SeatsInFlight is then the units the
	// grants out hold (0 with seats off).
	Seats         bool
	SeatsInFlight uint64
	MaxInFlight   uint32
	Queued        uint64
	QueueCapacity uint32
	// BusyTenants counts every tenant with requests queued or in flight: the rows that could
	// have been listed.
	BusyTenants   uint64
	WeightClasses uint32
	// Pools is the number of bulkhead pools (PoolStats and PoolShedding read each).
	Pools   uint32
	Order   StatusOrder
	Tenants []TenantStatus
}

// TenantStatus is one tenant in a status dump, a consistent view of it (the rows together are
// not one instant's picture).
type TenantStatus struct {
	TenantKey uint64
	// Name is the identifier the engine was given with the tenant's weight (SetWeight) or tier
	// (SetTier), "" when it was only given the key.
	Name string
	// Tier is the configured tier whose weight it has, "" when none.
	Tier            string
	Weight          uint32
	EffectiveWeight uint32
	Queued          uint64
	InFlight        uint64
	Granted         uint64
	// OldestWaitNs is how long its queue head has waited (0 with none queued).
	OldestWaitNs uint64
	// Light: at most one request waiting and no more than its share lately (the light-tenant
	// lane serves it first).
	Light bool
	// Parked: its head waits out a Retry-After, for ParkedForNs more.
	Parked      bool
	ParkedForNs uint64
}

// State is "parked", "idle" (nothing queued), "light" or "backlogged", as in the JSON dump.
func (t TenantStatus) State() string {
	switch {
	case t.Parked:
		return "parked"
	case t.Queued == 0:
		return "idle"
	case t.Light:
		return "light"
	}
	return "backlogged"
}

// Status is the status dump with at most k tenants (those with requests queued or in flight),
// largest first by order. It scans the tenant table (O(max_tenants)): for an operator, not for
// every request. An unknown order gives ErrInvalidArgument.
func (e *Engine) Status(k int, order StatusOrder) (QueueStatus, error) {
	return e.StatusAt(k, order, NowNs())
}

// StatusAt is Status with waits measured at monotonic time nowNs.
func (e *Engine) StatusAt(k int, order StatusOrder, nowNs uint64) (QueueStatus, error) {
	if k < 0 {
		k = 0
	}
	var totals C.fairq_status_totals
	// A Go array of a C struct without pointers: cgo lets C write into it during the call.
	rows := make([]C.fairq_tenant_status, k)
	var first *C.fairq_tenant_status
	if k > 0 {
		first = &rows[0]
	}
	var n C.size_t
	if _, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_queue_status_at(p, C.uint32_t(order), C.uint64_t(nowNs), &totals, first,
			C.size_t(k), &n)
	}); err != nil {
		return QueueStatus{}, err
	}
	s := QueueStatus{
		Enabled:       totals.enabled != 0,
		InFlight:      uint64(totals.in_flight),
		Seats:         totals.seats != 0,
		SeatsInFlight: uint64(totals.seats_in_flight),
		MaxInFlight:   uint32(totals.max_in_flight),
		Queued:        uint64(totals.queued),
		QueueCapacity: uint32(totals.queue_capacity),
		BusyTenants:   uint64(totals.busy_tenants),
		WeightClasses: uint32(totals.weight_classes),
		Pools:         uint32(totals.pools),
		Order:         order,
		Tenants:       make([]TenantStatus, int(n)),
	}
	for i := range s.Tenants {
		r := &rows[i]
		s.Tenants[i] = TenantStatus{
			TenantKey:       uint64(r.tenant_key),
			Name:            C.GoString(&r.name[0]),
			Tier:            C.GoString(&r.tier[0]),
			Weight:          uint32(r.weight),
			EffectiveWeight: uint32(r.effective_weight),
			Queued:          uint64(r.queued),
			InFlight:        uint64(r.in_flight),
			Granted:         uint64(r.granted),
			OldestWaitNs:    uint64(r.oldest_wait_ns),
			Light:           r.light != 0,
			Parked:          r.parked != 0,
			ParkedForNs:     uint64(r.parked_for_ns),
		}
	}
	return s, nil
}

// StatusText is the status dump rendered by the library, as JSON or a text table; k and order
// as in Status. An unknown order or format gives ErrInvalidArgument.
func (e *Engine) StatusText(k int, order StatusOrder, format StatusFormat) (string, error) {
	return e.StatusTextAt(k, order, format, NowNs())
}

// StatusTextAt is StatusText with waits measured at monotonic time nowNs.
func (e *Engine) StatusTextAt(k int, order StatusOrder, format StatusFormat, nowNs uint64) (string, error) {
	if k < 0 {
		k = 0
	}
	var needed C.size_t
	render := func(buf []byte) (Status, error) {
		var p *C.char
		if len(buf) > 0 {
			p = (*C.char)(unsafe.Pointer(&buf[0]))
		}
		return e.call(func(ptr *C.fairq_engine) C.int32_t {
			return C.fairq_queue_status_text_at(ptr, C.uint32_t(order), C.size_t(k),
				C.uint32_t(format), C.uint64_t(nowNs), p, C.size_t(len(buf)), &needed)
		})
	}
	// Sized by a first call; once more if the dump grew in between.
	s, err := render(nil)
	if s != StatusErrBufferTooSmall {
		if err != nil {
			return "", err // an unknown order or format, a closed engine
		}
	}
	for try := 0; try < 2; try++ {
		buf := make([]byte, int(needed))
		if s, err = render(buf); s != StatusErrBufferTooSmall {
			if err != nil {
				return "", err
			}
			if end := bytes.IndexByte(buf, 0); end >= 0 {
				buf = buf[:end] // the text form has no NUL, JSON escapes it
			}
			return string(buf), nil
		}
	}
	return "", err
}
