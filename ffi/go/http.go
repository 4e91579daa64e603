package fairq

/*
#include "fairq.h"
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPOptions says how an HTTPQueue names tenants and what it adds in front of the queue.
type HTTPOptions struct {
	// Tenant names the request's tenant by its raw identifier (hashed, never kept) in the
	// config's TenantDimension; "" means the request names none (429 no_tenant).
	Tenant func(*http.Request) string
	// Identity, used instead of Tenant when set: the identifiers the request carries; the
	// tenant is the config's TenantDimension, else user, team, API key.
	Identity func(*http.Request) Identity
	// Limiter, optional: called on arrival and again when a queued request is granted. Without
	// one every request is queued and at most MaxInFlight run at once; with one, the requests
	// it allows pass untouched and only those it refuses are queued (and requeued while a
	// re-check still refuses).
	Limiter func(r *http.Request, tenantKey uint64) Decision
	// MetricsPath, when not "", serves the engine's Prometheus text on GET.
	MetricsPath string
	// Timeout is every request's total timeout: a request waits at most the smaller of this
	// and the config's MaxWaitMs. 0: MaxWaitMs.
	Timeout time.Duration
}

// Decision is what a limiter says: the zero value allows; Refuse queues the request under
// Dimension (user, API key, team and model are queued; the others answered 429 at once), ready
// after RetryAfter.
type Decision struct {
	Refuse     bool
	Dimension  Dimension
	RetryAfter time.Duration
}

// Admission is what a request admitted through the queue finds in its context
// (AdmissionFrom).
type Admission struct {
	Position        uint32        // its 1-based place in its tenant's queue when (re)queued
	Waited          time.Duration // how long it waited
	EstimatedWait   time.Duration // the wait estimated when it was (re)queued
	RemainingBudget time.Duration // what is left of its budget for later stages
}

type admissionKey struct{}

// AdmissionFrom returns the admission of a request that went through the queue.
func AdmissionFrom(ctx context.Context) (Admission, bool) {
	a, ok := ctx.Value(admissionKey{}).(Admission)
	return a, ok
}

// HTTPQueue is a fair queue in front of HTTP handlers: Middleware wraps one. One dispatcher
// goroutine drives its engine: it takes grants whenever a request is queued, a permit comes
// back, or the engine's next wake-up passes, and hands each to its waiting request. Close
// stops it and frees the engine.
type HTTPQueue struct {
	engine    *Engine
	opts      HTTPOptions
	dimension TenantDimension
	budget    time.Duration
	timeoutNs uint64

	mu      sync.Mutex
	waiters map[uint64]chan httpEvent // waiting requests by id (the engine's user data)
	nextID  uint64                    // atomic
	wake    chan struct{}             // capacity 1: a wake-up sent while the dispatcher works is kept
	done    chan struct{}
	stopped chan struct{}
	close   sync.Once
}

type httpEvent struct {
	granted bool
	grant   Grant
	refusal queueRefusal
}

type queueRefusal struct {
	reason   Reason
	position uint32
	waitedNs uint64
}

// NewHTTPQueue builds an engine from c (Enabled, MaxInFlight permits) and starts its dispatcher.
func NewHTTPQueue(c Config, opts HTTPOptions) (*HTTPQueue, error) {
	if opts.Tenant == nil && opts.Identity == nil {
		return nil, errors.New("fairq: HTTPOptions needs Tenant or Identity")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("fairq: HTTPOptions.Timeout must not be negative, got %v", opts.Timeout)
	}
	if opts.MetricsPath != "" && opts.MetricsPath[0] != '/' {
		return nil, fmt.Errorf("fairq: HTTPOptions.MetricsPath must start with '/', got %q", opts.MetricsPath)
	}
	engine, err := New(c)
	if err != nil {
		return nil, err
	}
	budget := time.Duration(c.MaxWaitMs) * time.Millisecond
	if opts.Timeout > 0 && opts.Timeout < budget {
		budget = opts.Timeout
	}
	q := &HTTPQueue{
		engine:    engine,
		opts:      opts,
		dimension: c.TenantDimension,
		budget:    budget,
		timeoutNs: uint64(opts.Timeout),
		waiters:   make(map[uint64]chan httpEvent),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	go q.dispatch()
	return q, nil
}

// Engine is the queue's engine: weights, stats, on/off at run time.
func (q *HTTPQueue) Engine() *Engine { return q.engine }

// Waiting is the number of requests waiting for their grant now.
func (q *HTTPQueue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

// Close stops the dispatcher and frees the engine. Call it after the server has shut down;
// a request still waiting then is answered 503.
func (q *HTTPQueue) Close() error {
	q.close.Do(func() {
		close(q.done)
		<-q.stopped
		q.engine.Close()
	})
	return nil
}

func (q *HTTPQueue) kick() {
	select {
	case q.wake <- struct{}{}:
	default: // one is pending already
	}
}

func (q *HTTPQueue) dispatch() {
	defer close(q.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		q.drain()
		var fire <-chan time.Time
		if at, ok, err := q.engine.NextWakeupNs(); err == nil && ok {
			delay := time.Duration(0)
			if now := NowNs(); at > now {
				delay = time.Duration(at - now)
			}
			timer.Reset(delay)
			fire = timer.C
		}
		select {
		case <-q.wake:
		case <-fire:
		case <-q.done:
			return
		}
		if fire != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// drain takes every grant the engine has now and hands each to its request.
func (q *HTTPQueue) drain() {
	for {
		g, ok, err := q.engine.NextGrant()
		if err != nil || !ok {
			return
		}
		q.mu.Lock()
		ch, found := q.waiters[g.UserData]
		delete(q.waiters, g.UserData)
		q.mu.Unlock()
		switch {
		case g.Expired && found:
			ch <- httpEvent{refusal: queueRefusal{g.Reason, g.Position, g.WaitedNs}}
		case g.Expired:
		case found:
			ch <- httpEvent{granted: true, grant: g} // capacity 1, never blocks
		default:
			// The request went away: give the permit back.
			_ = q.engine.Cancel(g.Ticket)
		}
	}
}

func (q *HTTPQueue) register(id uint64) chan httpEvent {
	ch := make(chan httpEvent, 1)
	q.mu.Lock()
	q.waiters[id] = ch
	q.mu.Unlock()
	return ch
}

// unregister reports whether the request was still waiting (no event was taken for it).
func (q *HTTPQueue) unregister(id uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, found := q.waiters[id]
	delete(q.waiters, id)
	return found
}

// abandon ends a waiting request whose client went away.
func (q *HTTPQueue) abandon(id, ticket uint64, ch chan httpEvent) {
	if q.unregister(id) {
		_ = q.engine.Cancel(ticket)
	} else if ev := <-ch; ev.granted {
		// The dispatcher took it a moment ago: the event is in ch (or on its way).
		_ = q.engine.Cancel(ev.grant.Ticket)
	}
	q.kick()
}

// expire ends a queued ticket whose budget ran out (a private helper over fairq_expire).
func (q *HTTPQueue) expire(ticket uint64) (queueRefusal, error) {
	var out C.fairq_completion
	_, err := q.engine.call(func(p *C.fairq_engine) C.int32_t {
		return C.fairq_expire(p, C.uint64_t(ticket), &out)
	})
	return queueRefusal{Reason(out.reason), uint32(out.position), uint64(out.waited_ns)}, err
}

func (q *HTTPQueue) tenant(r *http.Request) (key uint64, dim TenantDimension) {
	if q.opts.Identity != nil {
		key, dim, ok, err := q.engine.ResolveTenant(q.opts.Identity(r))
		if err != nil || !ok {
			return 0, q.dimension
		}
		return key, dim
	}
	if raw := q.opts.Tenant(r); raw != "" {
		if key, err := TenantKey(raw); err == nil {
			return key, q.dimension
		}
	}
	return 0, q.dimension
}

func queueDimension(d TenantDimension) Dimension {
	switch d {
	case TenantDimAPIKey:
		return DimAPIKey
	case TenantDimTeam:
		return DimTeam
	default:
		return DimUser
	}
}

// Middleware wraps next: each request is queued under its tenant, waits for its grant (or is
// answered 429), and runs next holding its permit, which goes back when next returns. A client
// that goes away while its request waits cancels it; so that net/http notices, the body of a
// waiting request is read meanwhile (up to 1 MiB ahead), and next reads it through the
// middleware.
func (q *HTTPQueue) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q.opts.MetricsPath != "" && r.URL.Path == q.opts.MetricsPath && r.Method == http.MethodGet {
			q.serveMetrics(w)
			return
		}
		key, tenantDim := q.tenant(r)
		dimension, retryAfter := queueDimension(tenantDim), time.Duration(0)
		if q.opts.Limiter != nil {
			d := q.opts.Limiter(r, key)
			if !d.Refuse {
				next.ServeHTTP(w, r)
				return
			}
			dimension, retryAfter = d.Dimension, d.RetryAfter
		}
		id := atomic.AddUint64(&q.nextID, 1)
		ch := q.register(id)
		res, err := q.engine.Enqueue(Request{
			TenantKey: key, Dimension: dimension, UserData: id, Cost: 1,
			RetryAfterNs: nonNegative(retryAfter), TimeoutNs: q.timeoutNs,
		})
		if err != nil || !res.Queued {
			q.unregister(id)
			switch {
			case err != nil:
				http.Error(w, "fair queue: "+err.Error(), http.StatusInternalServerError)
			case res.Reason == ReasonDisabled && q.opts.Limiter == nil:
				next.ServeHTTP(w, r) // off: as if the middleware were not there
			default:
				writeRefusal(w, queueRefusal{res.Reason, res.Position, 0}, tenantDim, retryAfter)
			}
			return
		}
		q.kick()
		timer := time.NewTimer(q.budget)
		defer timer.Stop()
		budgetOut := timer.C
		body := readBody(r)
		defer body.stop()
		var bodyDone <-chan error
		if body != nil {
			bodyDone = body.done
		}
		for {
			select {
			case <-r.Context().Done():
				q.abandon(id, res.Ticket, ch)
				return
			case err := <-bodyDone:
				bodyDone = nil
				if err != nil { // the client went away in the middle of its body
					q.abandon(id, res.Ticket, ch)
					return
				}
			case <-q.done:
				http.Error(w, "fair queue: closed", http.StatusServiceUnavailable)
				return
			case <-budgetOut:
				budgetOut = nil
				if refusal, err := q.expire(res.Ticket); err == nil {
					q.unregister(id)
					writeRefusal(w, refusal, tenantDim, retryAfter)
					return
				}
				// Granted or ended meanwhile: that event is on its way.
			case ev := <-ch:
				if !ev.granted {
					writeRefusal(w, ev.refusal, tenantDim, retryAfter)
					return
				}
				if q.opts.Limiter != nil {
					if d := q.opts.Limiter(r, key); d.Refuse {
						// Still refused: back into its queue, within its budget.
						retryAfter = d.RetryAfter
						ch = q.register(id)
						c, err := q.engine.Complete(ev.grant.Ticket, false, nonNegative(d.RetryAfter))
						q.kick()
						if err == nil && c.Status == StatusRequeued {
							continue
						}
						q.unregister(id)
						if err != nil {
							http.Error(w, "fair queue: "+err.Error(), http.StatusInternalServerError)
						} else {
							writeRefusal(w, queueRefusal{c.Reason, c.Position, c.WaitedNs}, tenantDim, retryAfter)
						}
						return
					}
				}
				if body.stop() { // the client left in the middle of its body
					_ = q.engine.Cancel(ev.grant.Ticket)
					q.kick()
					return
				}
				q.serveGranted(w, r, next, ev.grant, body)
				return
			}
		}
	})
}

// bodyAhead is how much of a waiting request's body the middleware reads ahead of its handler.
const bodyAhead = 1 << 20

// bodyReader reads a waiting request's body. net/http watches a connection for a client that
// hangs up only once the request body has been read to its end, so a waiting request with a body
// would otherwise not notice its client leave; a read error means the client left in the middle
// of sending it. Up to bodyAhead bytes are read ahead; past that the read pauses (a client that
// leaves meanwhile is noticed by the handler's read, or when the budget ends). At the grant the
// read ahead stops after its current read: the handler gets what was read, then reads the body
// itself, so a large body streams to it as it would without the middleware.
type bodyReader struct {
	src     io.ReadCloser
	mu      sync.Mutex
	cond    *sync.Cond
	buf     bytes.Buffer
	err     error // the read ahead's end: io.EOF or the read's error
	stopped bool  // the read ahead starts no new read
	reading bool  // the read ahead is inside src.Read
	// done receives the read's outcome when it ends (nil at the body's end); nil without a body.
	done chan error
}

// readBody starts reading r's body ahead; nil when r has none.
func readBody(r *http.Request) *bodyReader {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b := &bodyReader{src: r.Body, done: make(chan error, 1)}
	b.cond = sync.NewCond(&b.mu)
	go func() {
		chunk := make([]byte, 32<<10)
		for {
			b.mu.Lock()
			for !b.stopped && b.buf.Len() >= bodyAhead {
				b.cond.Wait()
			}
			if b.stopped {
				b.mu.Unlock()
				return
			}
			b.reading = true
			b.mu.Unlock()
			n, err := b.src.Read(chunk)
			b.mu.Lock()
			b.reading = false
			b.buf.Write(chunk[:n])
			if err != nil {
				b.err = err
			}
			b.cond.Broadcast()
			b.mu.Unlock()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				b.done <- err
				return
			}
		}
	}()
	return b
}

// stop ends the read ahead after its current read, and says whether the read failed (the client
// left in the middle of its body).
func (b *bodyReader) stop() (failed bool) {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	b.cond.Broadcast()
	return b.err != nil && b.err != io.EOF
}

// Read hands the handler what was read ahead, then reads the body itself.
func (b *bodyReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	for b.buf.Len() == 0 && b.err == nil && b.reading {
		b.cond.Wait()
	}
	if b.buf.Len() > 0 {
		n, _ := b.buf.Read(p)
		b.mu.Unlock()
		return n, nil
	}
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return b.src.Read(p) // stopped and not reading: the read ahead is over
}

func (b *bodyReader) Close() error {
	return b.src.Close()
}

func nonNegative(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d)
}

// serveGranted runs next with the permit held; it goes back when next returns (the response has
// ended), or panics.
// serveGranted runs next holding g's permit. body (when the request has one) replaces the
// body in the request next sees; the server's own request keeps its body, which it inspects
// when the response starts.
func (q *HTTPQueue) serveGranted(w http.ResponseWriter, r *http.Request, next http.Handler, g Grant, body *bodyReader) {
	defer func() {
		_, _ = q.engine.Complete(g.Ticket, true, 0)
		q.kick()
	}()
	a := Admission{
		Position:        g.Position,
		Waited:          time.Duration(g.WaitedNs),
		EstimatedWait:   time.Duration(g.EstimatedWaitNs),
		RemainingBudget: time.Duration(g.RemainingBudgetNs),
	}
	h := w.Header()
	h.Set("X-Fair-Queue-Position", strconv.FormatUint(uint64(a.Position), 10))
	h.Set("X-Fair-Queue-Wait-Ms", strconv.FormatInt(a.Waited.Milliseconds(), 10))
	h.Set("X-Fair-Queue-Estimated-Wait-Ms", strconv.FormatInt(a.EstimatedWait.Milliseconds(), 10))
	r = r.WithContext(context.WithValue(r.Context(), admissionKey{}, a))
	if body != nil {
		r.Body = body // on the copy WithContext made
	}
	next.ServeHTTP(w, r)
}

// writeRefusal answers 429 with Retry-After (whole seconds, at least 1: the longer of the
// limiter's hint and the wait already spent; none for a request that names no tenant, which
// sent again is refused again), the position and wait headers and the JSON body.
func writeRefusal(w http.ResponseWriter, f queueRefusal, dim TenantDimension, limiterRetry time.Duration) {
	hint := time.Duration(f.waitedNs)
	if limiterRetry > hint {
		hint = limiterRetry
	}
	retry := int64((hint + time.Second - 1) / time.Second)
	if retry < 1 {
		retry = 1
	}
	waitMs := f.waitedNs / 1e6
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if f.reason != ReasonNoTenant {
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
	}
	h.Set("X-Fair-Queue-Position", strconv.FormatUint(uint64(f.position), 10))
	h.Set("X-Fair-Queue-Wait-Ms", strconv.FormatUint(waitMs, 10))
	w.WriteHeader(http.StatusTooManyRequests)
	reason := f.reason.String()
	fmt.Fprintf(w, `{"error": {"type": "rate_limited", "message": "fair queue refused the request: %s", `+
		`"details": {"fair_queue": {"tenant_dimension": "%s", "reason": "%s", "position": %d, "wait_ms": %d}}}}`+"\n",
		reason, tenantDimensionName(dim), reason, f.position, waitMs)
}

func tenantDimensionName(d TenantDimension) string {
	switch d {
	case TenantDimAPIKey:
		return "api_key"
	case TenantDimTeam:
		return "team"
	default:
		return "user"
	}
}

func (q *HTTPQueue) serveMetrics(w http.ResponseWriter) {
	text, err := q.engine.Metrics()
	if err != nil {
		http.Error(w, "fair queue: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(text))
}
