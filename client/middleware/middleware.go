// Package middleware puts budgetd in front of HTTP handlers, for net/http
// and for echo: each request is mapped to (limit, key, cost) items and
// charged before the handler runs (several items are one all-or-nothing
// multi-bucket Fillup). A denial answers 429 with Retry-After and the IETF
// RateLimit fields budgetd sent; when budgetd cannot decide (down, slow,
// misconfigured) the request is refused with 503 (fail closed, the default)
// or let through (FailOpen), and counted either way. budgetd's problem
// details never reach the end user: they go to the OnError hook.
//
// The response-cost variant (Limiter.Reserve) is for costs known only after
// the handler ran: it reserves an estimate before, commits the cost the
// handler reports after, and releases the hold when the handler fails or
// panics.
package middleware

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/shopspring/decimal"
)

// ItemsFunc maps a request to the items it costs. No items means the
// request costs nothing and passes without asking budgetd. An error wrapped
// with BadRequest (the end user's mistake: a missing header, a malformed
// parameter) answers 400 and counts as BadRequest; any other error means
// the costs could not be worked out (a lookup that failed), and the fail
// mode applies as when budgetd cannot decide: 503 and FailedClosed, or with
// FailOpen the request passes uncharged. Either way the error itself is
// given to OnError only.
type ItemsFunc func(r *http.Request) ([]client.Item, error)

// BadRequest marks an error of an ItemsFunc as the end user's mistake: the
// request is answered 400 (a bare problem document; err goes to OnError)
// and is not counted as a failure to decide.
//
//	if tenant == "" {
//		return nil, middleware.BadRequest(errors.New("no X-Tenant header"))
//	}
func BadRequest(err error) error { return &badRequest{err} }

// badRequest is an error wrapped with BadRequest.
type badRequest struct{ err error }

func (e *badRequest) Error() string { return "bad request: " + e.err.Error() }

func (e *badRequest) Unwrap() error { return e.err }

// IsBadRequest reports whether err was wrapped with BadRequest.
func IsBadRequest(err error) bool {
	var b *badRequest
	return errors.As(err, &b)
}

// Limiter is a configured middleware. Its methods return the middleware for
// net/http (Handler, ReserveHandler); package echomw adapts it to echo, and
// Admit and Hold to any other router, so that a program on net/http alone
// does not compile echo in.
type Limiter struct {
	c        *client.Client
	items    ItemsFunc
	timeout  time.Duration
	failOpen bool
	onError  func(*http.Request, error)
	ttl      time.Duration
	counts   counters
}

type counters struct {
	allowed, denied, failedOpen, failedClosed, badRequest, commitFailed atomic.Int64
}

// Counts is what a Limiter has decided so far.
type Counts struct {
	Allowed      int64 // charged (or reserved) and passed to the handler
	Denied       int64 // answered 429
	FailedOpen   int64 // budgetd could not decide; passed uncharged (FailOpen)
	FailedClosed int64 // budgetd could not decide; answered 503
	BadRequest   int64 // the ItemsFunc refused the request (BadRequest); answered 400
	CommitFailed int64 // Reserve variant: a commit or release that failed after the handler ran
}

// Option configures a Limiter.
type Option func(*Limiter)

// Timeout bounds each decision, retries included (default 2s). When it
// passes, the fail mode decides.
func Timeout(d time.Duration) Option { return func(l *Limiter) { l.timeout = d } }

// FailOpen lets requests through uncharged when budgetd cannot decide,
// instead of answering 503.
func FailOpen() Option { return func(l *Limiter) { l.failOpen = true } }

// OnError is called with every error the end user does not see: budgetd
// unreachable or slow, its problems, the ItemsFunc's errors, and failed
// commits of the Reserve variant.
func OnError(f func(*http.Request, error)) Option { return func(l *Limiter) { l.onError = f } }

// HoldTTL is how long the Reserve variant's holds live (default: budgetd's,
// 5m): longer than the slowest handler.
func HoldTTL(d time.Duration) Option { return func(l *Limiter) { l.ttl = d } }

// New returns a Limiter that charges each request the items that items
// gives.
func New(c *client.Client, items ItemsFunc, opts ...Option) *Limiter {
	l := &Limiter{c: c, items: items, timeout: 2 * time.Second, onError: func(*http.Request, error) {}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Counts returns the counters so far, for metrics.
func (l *Limiter) Counts() Counts {
	return Counts{
		Allowed:      l.counts.allowed.Load(),
		Denied:       l.counts.denied.Load(),
		FailedOpen:   l.counts.failedOpen.Load(),
		FailedClosed: l.counts.failedClosed.Load(),
		BadRequest:   l.counts.badRequest.Load(),
		CommitFailed: l.counts.commitFailed.Load(),
	}
}

// verdict is what the middleware does with a request.
type verdict int

const (
	pass verdict = iota
	refused
)

// denial is what a 429 carries.
type denial struct {
	retryAfter time.Duration
	neverFits  bool
	policy     string
	state      string
}

// charge asks budgetd about r and, unless the request passes, writes the
// answer to w.
func (l *Limiter) charge(w http.ResponseWriter, r *http.Request) verdict {
	items, err := l.items(r)
	if err != nil {
		return l.itemsFailed(w, r, err)
	}
	if len(items) == 0 {
		return pass
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.timeout)
	defer cancel()
	var dn *denial
	if len(items) == 1 {
		d, err := l.c.Fillup(ctx, items[0].Limit, items[0].Key, items[0].Cost)
		if err != nil {
			return l.failed(w, r, err)
		}
		if !d.Accepted {
			dn = &denial{d.RetryAfterDuration(), d.NeverFits, d.RateLimitPolicy, d.RateLimit}
		}
		setRateLimit(w, d.RateLimitPolicy, d.RateLimit)
	} else {
		m, err := l.c.FillupMany(ctx, items)
		if err != nil {
			return l.failed(w, r, err)
		}
		if !m.Accepted {
			dn = &denial{m.RetryAfter, m.RetryAfter == 0, m.RateLimitPolicy, m.RateLimit}
		}
		setRateLimit(w, m.RateLimitPolicy, m.RateLimit)
	}
	if dn != nil {
		l.deny(w, *dn)
		return refused
	}
	l.counts.allowed.Add(1)
	return pass
}

// itemsFailed answers a request whose ItemsFunc failed: 400 for the end
// user's mistake (BadRequest), else the fail mode.
func (l *Limiter) itemsFailed(w http.ResponseWriter, r *http.Request, err error) verdict {
	if !IsBadRequest(err) {
		return l.failed(w, r, err)
	}
	l.counts.badRequest.Add(1)
	l.onError(r, err)
	writeStatus(w, http.StatusBadRequest)
	return refused
}

// failed applies the fail mode to a call budgetd did not decide.
func (l *Limiter) failed(w http.ResponseWriter, r *http.Request, err error) verdict {
	l.onError(r, err)
	if l.failOpen {
		l.counts.failedOpen.Add(1)
		return pass
	}
	l.counts.failedClosed.Add(1)
	writeStatus(w, http.StatusServiceUnavailable)
	return refused
}

func (l *Limiter) deny(w http.ResponseWriter, d denial) {
	l.counts.denied.Add(1)
	if !d.neverFits && d.retryAfter > 0 {
		secs := (d.retryAfter + time.Second - 1) / time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	}
	setRateLimit(w, d.policy, d.state)
	writeStatus(w, http.StatusTooManyRequests)
}

func setRateLimit(w http.ResponseWriter, policy, state string) {
	if policy != "" && state != "" {
		w.Header().Set("RateLimit-Policy", policy)
		w.Header().Set("RateLimit", state)
	}
}

// writeStatus answers with a bare problem document that says nothing of
// budgetd.
func writeStatus(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"` + http.StatusText(status) + `","status":` + strconv.Itoa(status) + "}\n"))
}

// Handler is the middleware for net/http.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.charge(w, r) == pass {
			next.ServeHTTP(w, r)
		}
	})
}

// Admit is Handler's step for another router: it charges the request's
// items and reports whether the handler may run; when it returns false it
// has answered the request itself (denied, or refused on a failure).
func (l *Limiter) Admit(w http.ResponseWriter, r *http.Request) bool {
	return l.charge(w, r) == pass
}

// Hold is ReserveHandler's step for another router: it reserves the
// request's items as estimates and returns the request to pass to the
// handler (it carries what ReportCost needs) and done, to call once the
// handler has ended with whether it succeeded (done(true) commits the
// reported cost or the estimate, done(false) releases the holds). When ok is
// false Hold has answered the request itself, and done is nil.
func (l *Limiter) Hold(w http.ResponseWriter, r *http.Request) (req *http.Request, done func(succeeded bool), ok bool) {
	h, req, v := l.reserve(w, r)
	if v != pass {
		return r, nil, false
	}
	return req, func(succeeded bool) { l.finish(req, h, succeeded) }, true
}

// costKey carries the cost a handler reports in the Reserve variant.
type costKey struct{}

type reported struct {
	set  atomic.Bool
	cost atomic.Pointer[decimal.Decimal]
}

// ReportCost tells the Reserve variant what the request actually cost; it is
// committed instead of the estimate once the handler returns. It returns
// false when ctx is not a request under ReserveHandler, Hold or
// echomw.Reserve.
func ReportCost(ctx context.Context, cost decimal.Decimal) bool {
	rp, ok := ctx.Value(costKey{}).(*reported)
	if !ok {
		return false
	}
	rp.cost.Store(&cost)
	rp.set.Store(true)
	return true
}

// holds are the reservations made for one request.
type holds struct {
	ids []string
	rp  *reported
}

// reserve holds each item's cost (the estimate) before the handler runs.
// When one is denied, the holds already made are released.
func (l *Limiter) reserve(w http.ResponseWriter, r *http.Request) (*holds, *http.Request, verdict) {
	items, err := l.items(r)
	if err != nil {
		return nil, r, l.itemsFailed(w, r, err)
	}
	h := &holds{rp: &reported{}}
	r = r.WithContext(context.WithValue(r.Context(), costKey{}, h.rp))
	if len(items) == 0 {
		return h, r, pass
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.timeout)
	defer cancel()
	var policies, states []string
	for _, it := range items {
		hold, d, err := l.c.Reserve(ctx, it.Limit, it.Key, it.Cost, l.ttl)
		if err != nil {
			l.resolve(r, h, nil, false)
			return nil, r, l.failed(w, r, err)
		}
		policies, states = append(policies, d.RateLimitPolicy), append(states, d.RateLimit)
		if !d.Accepted {
			l.resolve(r, h, nil, false)
			l.deny(w, denial{d.RetryAfterDuration(), d.NeverFits, join(policies), join(states)})
			return nil, r, refused
		}
		h.ids = append(h.ids, hold.ID)
	}
	setRateLimit(w, join(policies), join(states))
	l.counts.allowed.Add(1)
	return h, r, pass
}

func join(ss []string) string {
	out := ""
	for _, s := range ss {
		if s == "" {
			continue
		}
		if out != "" {
			out += ", "
		}
		out += s
	}
	return out
}

// resolve commits every hold of a request that succeeded (the reported
// cost, else the estimate, with overrun: the work is done) and releases them
// otherwise. It runs after the handler, on a context of its own so that a
// client that went away does not leave holds behind.
func (l *Limiter) resolve(r *http.Request, h *holds, cost *decimal.Decimal, ok bool) {
	if h == nil || len(h.ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), l.timeout)
	defer cancel()
	for _, id := range h.ids {
		var err error
		if ok {
			_, err = l.c.Commit(ctx, id, cost, true)
		} else {
			_, err = l.c.Release(ctx, id)
		}
		if err != nil {
			l.counts.commitFailed.Add(1)
			l.onError(r, err)
		}
	}
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ReserveHandler is the response-cost variant for net/http: the items'
// costs are reserved as estimates before next runs; afterwards the cost
// reported with ReportCost (or, without a report, the estimate) is
// committed, unless next answered 5xx or panicked, which releases the holds.
func (l *Limiter) ReserveHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, r, v := l.reserve(w, r)
		if v != pass {
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		ok := false
		defer func() {
			l.finish(r, h, ok && rec.status < 500)
		}()
		next.ServeHTTP(rec, r)
		ok = true
	})
}

func (l *Limiter) finish(r *http.Request, h *holds, ok bool) {
	var cost *decimal.Decimal
	if h.rp.set.Load() {
		cost = h.rp.cost.Load()
	}
	l.resolve(r, h, cost, ok)
}
