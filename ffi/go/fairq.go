// Package fairq is a cgo binding for fairq, the lock-free multi-tenant weighted fair admission
// queue. By default it builds against an installed fairq through pkg-config (`#cgo pkg-config:
// fairq`: install with ffi/c/install.sh PREFIX and set PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when
// PREFIX is not a system one). In the repository, `-tags fairq_debug` or `-tags fairq_release`
// links target/debug or target/release/libfairq.a and ../../include/fairq.h instead.
//
// The module path is fairq.local/fairq, which no proxy serves: a program in another module
// requires it and replaces it with this directory,
//
//	require fairq.local/fairq v0.0.0
//	replace fairq.local/fairq => /path/to/fairq/ffi/go
//
//	q, err := fairq.New(fairq.DefaultConfig().WithEnabled(true))
//	if err != nil { ... }
//	defer q.Close()
//	acme, _ := fairq.TenantKey("acme")
//	q.SetWeightKey(acme, 3)
//	r, _ := q.Enqueue(fairq.Request{TenantKey: acme, UserData: 42})
//	if !r.Queued { /* answer 429 with r.Reason and r.Position */ }
//	if g, ok, _ := q.NextGrant(); ok && !g.Expired {
//		q.Complete(g.Ticket, true, 0) // the limiter re-check passed
//	}
//
// NewWithControls takes what Config has no field for: tiers, the starvation guard, the wait
// boost, the feedback controller (run by Tick), bulkhead pools (Request.Downstream) and the
// indicators' top K. With -tags fairq_fleet, NewFleet joins an engine to a fleet through Redis
// (link_fleet.go: the repository's release build with feature fleet).
//
// Errors are *Error values carrying the C status and its name; compare with errors.Is against
// ErrStaleTicket and the other Err* values. An Engine is safe for concurrent use by any number
// of goroutines; Close waits for calls in progress and makes later calls fail with ErrNull.
package fairq

/*
#include <stdlib.h>
#include "fairq.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// Status is a fairq status code (FAIRQ_OK, FAIRQ_ERR_*, ...). The numbers never change meaning.
type Status int32

// Status codes, as in fairq.h.
const (
	StatusOK                      Status = C.FAIRQ_OK
	StatusQueued                  Status = C.FAIRQ_QUEUED
	StatusRefused                 Status = C.FAIRQ_REFUSED
	StatusEmpty                   Status = C.FAIRQ_EMPTY
	StatusAtCapacity              Status = C.FAIRQ_AT_CAPACITY
	StatusExpired                 Status = C.FAIRQ_EXPIRED
	StatusRequeued                Status = C.FAIRQ_REQUEUED
	StatusNotFound                Status = C.FAIRQ_NOT_FOUND
	StatusNotRunning              Status = C.FAIRQ_NOT_RUNNING
	StatusErrNull                 Status = C.FAIRQ_ERR_NULL
	StatusErrInvalidConfig        Status = C.FAIRQ_ERR_INVALID_CONFIG
	StatusErrStaleTicket          Status = C.FAIRQ_ERR_STALE_TICKET
	StatusErrTicketState          Status = C.FAIRQ_ERR_TICKET_STATE
	StatusErrInvalidArgument      Status = C.FAIRQ_ERR_INVALID_ARGUMENT
	StatusErrBufferTooSmall       Status = C.FAIRQ_ERR_BUFFER_TOO_SMALL
	StatusErrTooManyWeightClasses Status = C.FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES
	StatusErrPanic                Status = C.FAIRQ_ERR_PANIC
	StatusErrInvalidHandle        Status = C.FAIRQ_ERR_INVALID_HANDLE
	StatusErrBusy                 Status = C.FAIRQ_ERR_BUSY
	StatusErrFleetSync            Status = C.FAIRQ_ERR_FLEET_SYNC
	StatusErrThread               Status = C.FAIRQ_ERR_THREAD
)

// String is the status's C name, e.g. "FAIRQ_ERR_STALE_TICKET".
func (s Status) String() string { return C.GoString(C.fairq_status_str(C.int32_t(s))) }

// Reason is why a request was refused (FAIRQ_REASON_*).
type Reason uint32

// Refusal reasons, as in fairq.h.
const (
	ReasonNone              Reason = C.FAIRQ_REASON_NONE
	ReasonQueueFull         Reason = C.FAIRQ_REASON_QUEUE_FULL
	ReasonTenantQueueFull   Reason = C.FAIRQ_REASON_TENANT_QUEUE_FULL
	ReasonTenantTableFull   Reason = C.FAIRQ_REASON_TENANT_TABLE_FULL
	ReasonWaitExceedsBudget Reason = C.FAIRQ_REASON_WAIT_EXCEEDS_BUDGET
	ReasonDeadlineExceeded  Reason = C.FAIRQ_REASON_DEADLINE_EXCEEDED
	ReasonNotQueueable      Reason = C.FAIRQ_REASON_NOT_QUEUEABLE
	ReasonNoTenant          Reason = C.FAIRQ_REASON_NO_TENANT
	ReasonDisabled          Reason = C.FAIRQ_REASON_DISABLED
	ReasonCancelled         Reason = C.FAIRQ_REASON_CANCELLED
	// ReasonDownstreamShedding: the request's bulkhead pool sheds load and cannot serve it in
	// its budget.
	ReasonDownstreamShedding Reason = C.FAIRQ_REASON_DOWNSTREAM_SHEDDING
	// ReasonSlots is the length of Stats.Refused, indexed by reason.
	ReasonSlots = C.FAIRQ_REASON_SLOTS
)

// String is the snake_case metrics name, e.g. "queue_full".
func (r Reason) String() string { return C.GoString(C.fairq_reason_str(C.uint32_t(r))) }

// Dimension is the limiter dimension that refused a request (FAIRQ_DIM_*).
type Dimension uint32

// Dimensions, as in fairq.h. Only User, APIKey, Team and Model are queued.
const (
	DimUser    Dimension = C.FAIRQ_DIM_USER
	DimAPIKey  Dimension = C.FAIRQ_DIM_API_KEY
	DimTeam    Dimension = C.FAIRQ_DIM_TEAM
	DimModel   Dimension = C.FAIRQ_DIM_MODEL
	DimGlobal  Dimension = C.FAIRQ_DIM_GLOBAL
	DimClient  Dimension = C.FAIRQ_DIM_CLIENT
	DimBackend Dimension = C.FAIRQ_DIM_BACKEND
	DimStore   Dimension = C.FAIRQ_DIM_STORE
)

// String is the snake_case name, e.g. "api_key".
func (d Dimension) String() string { return C.GoString(C.fairq_dimension_str(C.uint32_t(d))) }

// TenantDimension is the identifier that names tenants (FAIRQ_TENANT_DIM_*).
type TenantDimension uint32

// Tenant dimensions, as in fairq.h.
const (
	TenantDimUser   TenantDimension = C.FAIRQ_TENANT_DIM_USER
	TenantDimAPIKey TenantDimension = C.FAIRQ_TENANT_DIM_API_KEY
	TenantDimTeam   TenantDimension = C.FAIRQ_TENANT_DIM_TEAM
)

// Error is a failed call: the C status (negative) and, for configs, the message naming the
// field.
type Error struct {
	Status Status
	Detail string
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Status.String() + ": " + e.Detail
	}
	return e.Status.String()
}

// Is matches any *Error with the same status, so errors.Is(err, fairq.ErrStaleTicket) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

// Sentinel errors for errors.Is.
var (
	ErrNull                 = &Error{Status: StatusErrNull}
	ErrInvalidConfig        = &Error{Status: StatusErrInvalidConfig}
	ErrStaleTicket          = &Error{Status: StatusErrStaleTicket}
	ErrTicketState          = &Error{Status: StatusErrTicketState}
	ErrInvalidArgument      = &Error{Status: StatusErrInvalidArgument}
	ErrBufferTooSmall       = &Error{Status: StatusErrBufferTooSmall}
	ErrTooManyWeightClasses = &Error{Status: StatusErrTooManyWeightClasses}
	ErrPanic                = &Error{Status: StatusErrPanic}
	ErrInvalidHandle        = &Error{Status: StatusErrInvalidHandle}
	ErrBusy                 = &Error{Status: StatusErrBusy}
	ErrFleetSync            = &Error{Status: StatusErrFleetSync}
	ErrThread               = &Error{Status: StatusErrThread}
)

func check(s C.int32_t) (Status, error) {
	if s < 0 {
		return Status(s), &Error{Status: Status(s)}
	}
	return Status(s), nil
}

// Version is the library version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.fairq_version()) }

// HeaderVersion is the version of the header this package was compiled against.
func HeaderVersion() (major, minor, patch int) {
	return C.FAIRQ_VERSION_MAJOR, C.FAIRQ_VERSION_MINOR, C.FAIRQ_VERSION_PATCH
}

// NowNs is the monotonic clock the calls without "At" read.
func NowNs() uint64 { return uint64(C.fairq_now_ns()) }

// TenantKey hashes a raw identifier to the tenant key, the same in every binding.
func TenantKey(raw string) (uint64, error) {
	var key C.uint64_t
	b := []byte(raw)
	var p *C.char
	if len(b) > 0 {
		p = (*C.char)(unsafe.Pointer(&b[0]))
	}
	if _, err := check(C.fairq_tenant_key(p, C.size_t(len(b)), &key)); err != nil {
		return 0, err
	}
	return uint64(key), nil
}

// Config mirrors fairq_config. Start from DefaultConfig.
type Config struct {
	Enabled             bool
	TenantDimension     TenantDimension
	MaxTenants          uint32
	TenantQueueCapacity uint32
	QueueCapacity       uint32
	MaxInFlight         uint32
	DefaultWeight       uint32
	MaxWeightClasses    uint32
	MaxWaitMs           uint64
	TenantIdleMs        uint64
}

// DefaultConfig is fairq_config_default: disabled, 1024 tenants, 64 per tenant, 8 in flight.
func DefaultConfig() Config {
	var c C.fairq_config
	C.fairq_config_default(&c)
	return Config{
		Enabled:             bool(c.enabled),
		TenantDimension:     TenantDimension(c.tenant_dimension),
		MaxTenants:          uint32(c.max_tenants),
		TenantQueueCapacity: uint32(c.tenant_queue_capacity),
		QueueCapacity:       uint32(c.queue_capacity),
		MaxInFlight:         uint32(c.max_in_flight),
		DefaultWeight:       uint32(c.default_weight),
		MaxWeightClasses:    uint32(c.max_weight_classes),
		MaxWaitMs:           uint64(c.max_wait_ms),
		TenantIdleMs:        uint64(c.tenant_idle_ms),
	}
}

// WithEnabled returns a copy with Enabled set.
func (c Config) WithEnabled(on bool) Config { c.Enabled = on; return c }

func (c Config) toC() C.fairq_config {
	return C.fairq_config{
		enabled:               C.bool(c.Enabled),
		tenant_dimension:      C.uint32_t(c.TenantDimension),
		max_tenants:           C.uint32_t(c.MaxTenants),
		tenant_queue_capacity: C.uint32_t(c.TenantQueueCapacity),
		queue_capacity:        C.uint32_t(c.QueueCapacity),
		max_in_flight:         C.uint32_t(c.MaxInFlight),
		default_weight:        C.uint32_t(c.DefaultWeight),
		max_weight_classes:    C.uint32_t(c.MaxWeightClasses),
		max_wait_ms:           C.uint64_t(c.MaxWaitMs),
		tenant_idle_ms:        C.uint64_t(c.TenantIdleMs),
	}
}

// Check validates a config; the error names the field at fault.
func (c Config) Check() error {
	cc := c.toC()
	var msg [256]C.char
	if s := C.fairq_config_check(&cc, &msg[0], C.size_t(len(msg))); s < 0 {
		return &Error{Status: Status(s), Detail: C.GoString(&msg[0])}
	}
	return nil
}

// Engine is a fair admission queue. Safe for concurrent use; Close it when done.
type Engine struct {
	mu  sync.RWMutex // read-held by every call, write-held by Close
	ptr *C.fairq_engine
}

// New builds an engine; NewWithControls also takes tiers, policies and pools.
func New(c Config) (*Engine, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	cc := c.toC()
	e := &Engine{}
	if _, err := check(C.fairq_engine_new(&cc, &e.ptr)); err != nil {
		return nil, err
	}
	return e, nil
}

// Close releases the engine after the calls in progress return. Idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	C.fairq_engine_free(e.ptr)
	e.ptr = nil
	return nil
}

// call runs f with the engine pointer (nil after Close: the C side answers FAIRQ_ERR_NULL).
func (e *Engine) call(f func(p *C.fairq_engine) C.int32_t) (Status, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return check(f(e.ptr))
}

// SetEnabled turns queueing on or off at run time.
func (e *Engine) SetEnabled(on bool) error {
	_, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_set_enabled(p, C.bool(on)) })
	return err
}

// Enabled reports whether new requests are queued.
func (e *Engine) Enabled() (bool, error) {
	var on C.bool
	_, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_is_enabled(p, &on) })
	return bool(on), err
}

// SetWeight sets the weight (1..=10000) of the tenant with raw identifier raw.
func (e *Engine) SetWeight(raw string, weight uint32) error {
	if _, err := TenantKey(raw); err != nil {
		return err
	}
	// By identifier, not by key: the engine keeps raw as the tenant's name in the status dump.
	r, rn := cBytes(raw)
	defer C.free(unsafe.Pointer(r))
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_set_weight(p, r, rn, C.uint32_t(weight))
	})
	return err
}

// SetWeightKey sets a tenant's weight by key.
func (e *Engine) SetWeightKey(key uint64, weight uint32) error {
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_set_weight_key(p, C.uint64_t(key), C.uint32_t(weight))
	})
	return err
}

// ReplaceWeights replaces the whole weight table (tenant key → weight) and the default weight.
// All or nothing.
func (e *Engine) ReplaceWeights(weights map[uint64]uint32, defaultWeight uint32) error {
	entries := make([]C.fairq_weight_entry, 0, len(weights))
	for k, w := range weights {
		entries = append(entries, C.fairq_weight_entry{tenant_key: C.uint64_t(k), weight: C.uint32_t(w)})
	}
	var first *C.fairq_weight_entry
	if len(entries) > 0 {
		first = &entries[0]
	}
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_replace_weights(p, first, C.size_t(len(entries)), C.uint32_t(defaultWeight))
	})
	return err
}

// WeightOf is the weight a tenant gets now.
func (e *Engine) WeightOf(key uint64) (uint32, error) {
	var w C.uint32_t
	_, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_weight_of(p, C.uint64_t(key), &w) })
	return uint32(w), err
}

// TenantGranted is the grants and cost units granted to a tenant since it took its slot; ok is
// false when it holds no slot.
func (e *Engine) TenantGranted(key uint64) (grants, cost uint64, ok bool, err error) {
	var g, c C.uint64_t
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_tenant_granted(p, C.uint64_t(key), &g, &c)
	})
	return uint64(g), uint64(c), err == nil && s == StatusOK, err
}

// Identity is what a request carries; empty strings are absent.
type Identity struct {
	User, Team, APIKey string
	TeamIsPlaceholder  bool
}

// ResolveTenant picks the tenant key: the configured dimension first, then user, team, API key.
// ok is false when the request has no identifier.
func (e *Engine) ResolveTenant(id Identity) (key uint64, dim TenantDimension, ok bool, err error) {
	cs := func(s string) (*C.char, C.size_t) {
		if s == "" {
			return nil, 0
		}
		return C.CString(s), C.size_t(len(s))
	}
	var ci C.fairq_identity
	ci.user, ci.user_len = cs(id.User)
	ci.team, ci.team_len = cs(id.Team)
	ci.api_key, ci.api_key_len = cs(id.APIKey)
	ci.team_is_placeholder = C.bool(id.TeamIsPlaceholder)
	defer func() {
		C.free(unsafe.Pointer(ci.user))
		C.free(unsafe.Pointer(ci.team))
		C.free(unsafe.Pointer(ci.api_key))
	}()
	var k C.uint64_t
	var d C.uint32_t
	s, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_resolve_tenant(p, &ci, &k, &d) })
	if err != nil || s == StatusNotFound {
		return 0, 0, false, err
	}
	return uint64(k), TenantDimension(d), true, nil
}

// Request is a request a limiter refused. Cost 0 means 1; TenantKey 0 means no identifier.
// Downstream names its bulkhead pool (Controls.Pools; ignored when there are none).
type Request struct {
	TenantKey    uint64
	UserData     uint64
	RetryAfterNs uint64
	TimeoutNs    uint64
	Dimension    Dimension
	Cost         uint32
	Downstream   uint32
}

// EnqueueResult is what Enqueue did. Queued false: refused with Reason at Position.
type EnqueueResult struct {
	Queued          bool
	Ticket          uint64
	Position        uint32
	EstimatedWaitNs uint64
	Reason          Reason
}

// Enqueue holds a refused request in its tenant's queue, or refuses it at once.
func (e *Engine) Enqueue(r Request) (EnqueueResult, error) { return e.enqueue(r, nil) }

// EnqueueAt is Enqueue at monotonic time nowNs.
func (e *Engine) EnqueueAt(r Request, nowNs uint64) (EnqueueResult, error) {
	return e.enqueue(r, &nowNs)
}

func (e *Engine) enqueue(r Request, now *uint64) (EnqueueResult, error) {
	cr := C.fairq_request{
		tenant_key:     C.uint64_t(r.TenantKey),
		user_data:      C.uint64_t(r.UserData),
		retry_after_ns: C.uint64_t(r.RetryAfterNs),
		timeout_ns:     C.uint64_t(r.TimeoutNs),
		dimension:      C.uint32_t(r.Dimension),
		cost:           C.uint32_t(r.Cost),
	}
	var out C.fairq_enqueue_result
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		d := C.uint32_t(r.Downstream) // fairq_enqueue is downstream 0
		if now == nil {
			return C.fairq_enqueue_downstream(p, &cr, d, &out)
		}
		return C.fairq_enqueue_downstream_at(p, &cr, d, C.uint64_t(*now), &out)
	})
	if err != nil {
		return EnqueueResult{}, err
	}
	return EnqueueResult{
		Queued:          s == StatusQueued,
		Ticket:          uint64(out.ticket),
		Position:        uint32(out.position),
		EstimatedWaitNs: uint64(out.estimated_wait_ns),
		Reason:          Reason(out.reason),
	}, nil
}

// Grant is a released request, or (Expired) a queued one whose budget ran out: answer it with
// Reason (deadline_exceeded).
type Grant struct {
	Ticket            uint64
	TenantKey         uint64
	UserData          uint64
	WaitedNs          uint64
	EstimatedWaitNs   uint64
	RemainingBudgetNs uint64
	Cost              uint32
	Position          uint32
	Expired           bool
	Reason            Reason
}

// NextGrant releases the next request by weighted fair order. ok is false when nothing is
// ready or max_in_flight grants are out.
func (e *Engine) NextGrant() (g Grant, ok bool, err error) { return e.nextGrant(nil) }

// NextGrantAt is NextGrant at monotonic time nowNs.
func (e *Engine) NextGrantAt(nowNs uint64) (Grant, bool, error) { return e.nextGrant(&nowNs) }

func (e *Engine) nextGrant(now *uint64) (Grant, bool, error) {
	var out C.fairq_grant
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		if now == nil {
			return C.fairq_next_grant(p, &out)
		}
		return C.fairq_next_grant_at(p, C.uint64_t(*now), &out)
	})
	if err != nil || s == StatusEmpty || s == StatusAtCapacity {
		return Grant{}, false, err
	}
	return Grant{
		Ticket:            uint64(out.ticket),
		TenantKey:         uint64(out.tenant_key),
		UserData:          uint64(out.user_data),
		WaitedNs:          uint64(out.waited_ns),
		EstimatedWaitNs:   uint64(out.estimated_wait_ns),
		RemainingBudgetNs: uint64(out.remaining_budget_ns),
		Cost:              uint32(out.cost),
		Position:          uint32(out.position),
		Expired:           s == StatusExpired,
		Reason:            Reason(out.reason),
	}, true, nil
}

// Completion is what Complete did: Status is StatusOK (admitted), StatusRequeued or
// StatusRefused (ended with Reason).
type Completion struct {
	Status          Status
	Position        uint32
	EstimatedWaitNs uint64
	WaitedNs        uint64
	Reason          Reason
}

// Complete ends a grant: admitted, or still refused (requeued after retryAfterNs if its budget
// allows).
func (e *Engine) Complete(ticket uint64, admitted bool, retryAfterNs uint64) (Completion, error) {
	return e.complete(ticket, admitted, retryAfterNs, nil, nil)
}

// CompleteAt is Complete at monotonic time nowNs.
func (e *Engine) CompleteAt(ticket uint64, admitted bool, retryAfterNs, nowNs uint64) (Completion, error) {
	return e.complete(ticket, admitted, retryAfterNs, nil, &nowNs)
}

// CompleteWithCost is Complete that also corrects the tenant's charge to the actual cost.
func (e *Engine) CompleteWithCost(ticket uint64, admitted bool, retryAfterNs uint64, actualCost uint32) (Completion, error) {
	return e.complete(ticket, admitted, retryAfterNs, &actualCost, nil)
}

func (e *Engine) complete(ticket uint64, admitted bool, retry uint64, cost *uint32, now *uint64) (Completion, error) {
	outcome := C.uint32_t(C.FAIRQ_OUTCOME_STILL_REFUSED)
	if admitted {
		outcome = C.FAIRQ_OUTCOME_ADMITTED
	}
	var out C.fairq_completion
	s, err := e.call(func(p *C.fairq_engine) C.int32_t {
		t, r := C.uint64_t(ticket), C.uint64_t(retry)
		switch {
		case cost == nil && now == nil:
			return C.fairq_complete(p, t, outcome, r, &out)
		case cost == nil:
			return C.fairq_complete_at(p, t, outcome, r, C.uint64_t(*now), &out)
		case now == nil:
			return C.fairq_complete_with_cost(p, t, outcome, r, C.uint32_t(*cost), &out)
		default:
			return C.fairq_complete_with_cost_at(p, t, outcome, r, C.uint32_t(*cost), C.uint64_t(*now), &out)
		}
	})
	if err != nil {
		return Completion{}, err
	}
	return Completion{
		Status:          s,
		Position:        uint32(out.position),
		EstimatedWaitNs: uint64(out.estimated_wait_ns),
		WaitedNs:        uint64(out.waited_ns),
		Reason:          Reason(out.reason),
	}, nil
}

// Cancel ends a queued or granted ticket.
func (e *Engine) Cancel(ticket uint64) error {
	_, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_cancel(p, C.uint64_t(ticket)) })
	return err
}

// CancelAt is Cancel at monotonic time nowNs.
func (e *Engine) CancelAt(ticket, nowNs uint64) error {
	_, err := e.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_cancel_at(p, C.uint64_t(ticket), C.uint64_t(nowNs))
	})
	return err
}

// NextWakeupNs is when a parked tenant may become ready; ok is false when none is parked.
func (e *Engine) NextWakeupNs() (at uint64, ok bool, err error) {
	var out C.uint64_t
	s, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_next_wakeup_ns(p, &out) })
	return uint64(out), err == nil && s == StatusOK, err
}

// Stats mirrors fairq_stats. Refused is indexed by Reason.
type Stats struct {
	Queued, InFlight, Tenants              uint64
	Enqueued, Granted, Completed, Requeued uint64
	Cancelled, Expired, RefusedAfterWait   uint64
	Refused                                [ReasonSlots]uint64
}

// Stats is a snapshot of the gauges and counters.
func (e *Engine) Stats() (Stats, error) {
	var c C.fairq_stats
	if _, err := e.call(func(p *C.fairq_engine) C.int32_t { return C.fairq_get_stats(p, &c) }); err != nil {
		return Stats{}, err
	}
	s := Stats{
		Queued: uint64(c.queued), InFlight: uint64(c.in_flight), Tenants: uint64(c.tenants),
		Enqueued: uint64(c.enqueued), Granted: uint64(c.granted), Completed: uint64(c.completed),
		Requeued: uint64(c.requeued), Cancelled: uint64(c.cancelled), Expired: uint64(c.expired),
		RefusedAfterWait: uint64(c.refused_after_wait),
	}
	for i := range s.Refused {
		s.Refused[i] = uint64(c.refused[i])
	}
	return s, nil
}

// Metrics is the Prometheus text exposition.
func (e *Engine) Metrics() (string, error) {
	size := C.size_t(4096)
	for {
		buf := make([]byte, size)
		var needed C.size_t
		s, err := e.call(func(p *C.fairq_engine) C.int32_t {
			return C.fairq_metrics_prometheus(p, (*C.char)(unsafe.Pointer(&buf[0])), size, &needed)
		})
		if s == StatusErrBufferTooSmall {
			size = needed + 1024 // metrics can grow between calls
			continue
		}
		if err != nil {
			return "", err
		}
		return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
	}
}
