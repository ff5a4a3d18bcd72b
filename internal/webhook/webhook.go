// Package webhook pushes the events of a store's outbox (thresholds crossed
// and recovered) to one URL, as Standard Webhooks: each event is POSTed as
// the JSON that GET /v1/events lists, signed with HMAC-SHA256
// (api.WebhookSignature) in the headers webhook-id, webhook-timestamp and
// webhook-signature.
//
// The schedule. Several budgetd instances may share a store; the one that
// holds the store's lease "webhook" (ledger.LeaseStore) delivers, the others
// wait to take it over. The holder reads the outbox from the lease's durable
// cursor, in pages, and hands each event to its bucket's queue: a bucket's
// next event is sent only when its previous one was delivered (a 2xx) or
// given up, so each bucket's events arrive in order. Buckets are sent
// concurrently, at most Concurrency requests at once, so a slow or failing
// bucket does not hold up the others. A failure (another status, a redirect,
// which is not followed, a timeout, a connection error) is retried with
// exponential backoff and jitter until RetryFor after the event's time, then
// given up and counted. A failed attempt is also logged, as one WARN line at
// most every FailureLog (see WithFailureLog). At most MaxHeld events are read and not yet done;
// the reader waits while that many are (so a bucket stuck with that many
// events queued stops the reading of new ones until it moves: see
// docs/alerts.md).
//
// The cursor. The holder stores, through the lease, the cursor before the
// oldest page that still has an event not delivered or given up; only the
// holder can move it (the store compares the holder in the same step), and
// it is stored as soon as it moves. A new holder starts from it, so after a
// takeover it sends again at most the events the old holder had read since
// that cursor (at most MaxHeld): at least once.
//
// The lease. The holder renews it every TTL/3; when a renewal fails or says
// the lease is gone, or none succeeded for 3/4 of the TTL, it stops at once
// (its requests are cancelled) and goes back to waiting. On a clean stop it
// stores its cursor and releases the lease, so another instance takes over
// without waiting out the TTL.
//
// The nudge. The holder reads an empty outbox again every Poll, and at once
// when Nudge is called: budgetd passes Nudge to ledger.WithWriteHook, so a
// write of this instance on a limit with thresholds is sent without waiting
// for the poll (writes of other instances are found by the poll).
//
// Nothing here is on the decision path: the deliverer only reads the outbox
// and the lease, in its own goroutines (Nudge is a non-blocking send).
package webhook

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options.
const (
	DefaultLeaseName      = "webhook"
	DefaultLeaseTTL       = 30 * time.Second
	DefaultConcurrency    = 16
	DefaultMaxHeld        = 10000
	DefaultPageSize       = 100
	DefaultPoll           = 500 * time.Millisecond
	DefaultRequestTimeout = 10 * time.Second
	DefaultBackoff        = time.Second
	DefaultMaxBackoff     = 10 * time.Minute
	DefaultRetryFor       = 24 * time.Hour
	DefaultFailureLog     = 10 * time.Second
	// MaxResponseBytes is how much of a response body is read (and
	// discarded) so that the connection may be reused.
	MaxResponseBytes = 64 << 10
)

// Outbox is where the events come from: ledger.Store's Events.
type Outbox interface {
	Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error)
}

// Leases is the part of ledger.LeaseStore the deliverer uses.
type Leases interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, string, error)
	AdvanceLease(ctx context.Context, name, holder, cursor string) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Option configures a Deliverer.
type Option func(*Deliverer)

// WithLease sets the lease's name and TTL (DefaultLeaseName, DefaultLeaseTTL).
func WithLease(name string, ttl time.Duration) Option {
	return func(d *Deliverer) { d.leaseName, d.ttl = name, ttl }
}

// WithHolder sets the name this deliverer holds the lease under (default:
// host name, process id and a random suffix).
func WithHolder(h string) Option { return func(d *Deliverer) { d.holder = h } }

// WithConcurrency sets how many requests may be in flight at once
// (DefaultConcurrency).
func WithConcurrency(n int) Option { return func(d *Deliverer) { d.concurrency = n } }

// WithMaxHeld sets how many events may be read and not yet delivered or
// given up (DefaultMaxHeld): the bound on the deliverer's memory.
func WithMaxHeld(n int) Option { return func(d *Deliverer) { d.maxHeld = n } }

// WithPageSize sets how many events are read from the outbox at a time
// (DefaultPageSize).
func WithPageSize(n int) Option { return func(d *Deliverer) { d.pageSize = n } }

// WithPoll sets how often an empty outbox is read again (DefaultPoll).
func WithPoll(d time.Duration) Option { return func(x *Deliverer) { x.poll = d } }

// WithRequestTimeout bounds one request, its response included
// (DefaultRequestTimeout).
func WithRequestTimeout(d time.Duration) Option { return func(x *Deliverer) { x.reqTimeout = d } }

// WithBackoff sets the first wait after a failure and the longest
// (DefaultBackoff, DefaultMaxBackoff); the wait doubles at each failure, and
// each is taken at random between half and all of it.
func WithBackoff(first, most time.Duration) Option {
	return func(d *Deliverer) { d.backoff, d.maxBackoff = first, most }
}

// WithRetryFor sets how long after its time an event is retried before it
// is given up (DefaultRetryFor). Every event is tried at least once.
func WithRetryFor(dur time.Duration) Option { return func(d *Deliverer) { d.retryFor = dur } }

// WithFailureLog sets how often at most a failed attempt is logged
// (DefaultFailureLog), for the deliverer's one URL: a failure logs one WARN
// line when none was logged in the last every, else it is only counted, and
// the next line says how many were not logged (suppressed). 0 logs every
// failure.
func WithFailureLog(every time.Duration) Option {
	return func(d *Deliverer) { d.failLog.every = every }
}

// WithLogger sets the logger (slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(d *Deliverer) { d.log = l } }

// Deliverer sends the events of an outbox to a URL. Create it with New and
// call Run.
type Deliverer struct {
	url    string
	key    []byte
	out    Outbox
	leases Leases
	client *http.Client

	leaseName   string
	ttl         time.Duration
	holder      string
	concurrency int
	maxHeld     int
	pageSize    int
	poll        time.Duration
	reqTimeout  time.Duration
	backoff     time.Duration
	maxBackoff  time.Duration
	retryFor    time.Duration
	log         *slog.Logger
	noRelease   bool // tests: stop as if the process died
	nudge       chan struct{}
	failLog     failureLog

	m *metrics
}

// New returns a deliverer of out's events to url, signed with key (see
// api.WebhookSecretKey), that holds the lease in leases while it delivers.
func New(url string, key []byte, out Outbox, leases Leases, opts ...Option) *Deliverer {
	d := &Deliverer{
		url: url, key: key, out: out, leases: leases,
		leaseName: DefaultLeaseName, ttl: DefaultLeaseTTL, concurrency: DefaultConcurrency,
		maxHeld: DefaultMaxHeld, pageSize: DefaultPageSize, poll: DefaultPoll,
		reqTimeout: DefaultRequestTimeout, backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff,
		retryFor: DefaultRetryFor, log: slog.Default(), m: newMetrics(), nudge: make(chan struct{}, 1),
		failLog: failureLog{every: DefaultFailureLog, now: time.Now},
	}
	for _, o := range opts {
		o(d)
	}
	if d.holder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = crand.Read(b[:])
		d.holder = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	d.concurrency = max(d.concurrency, 1)
	d.maxHeld = max(d.maxHeld, 1)
	d.pageSize = max(min(d.pageSize, d.maxHeld), 1)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = d.concurrency
	d.client = &http.Client{
		Transport: tr,
		Timeout:   d.reqTimeout,
		// A redirect is not followed: it is a failure, retried.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return d
}

// Nudge tells the deliverer that this instance wrote on a limit with
// thresholds, so the outbox may hold new events: if it holds the lease and
// waits on an empty outbox, it reads it at once instead of at its next poll
// (the poll still finds the events other instances write). Nudge never
// blocks: nudges that come while one is pending are one nudge. Pass it to
// ledger.WithWriteHook.
func (d *Deliverer) Nudge() { signal(d.nudge) }

// Holder is the name this deliverer holds the lease under.
func (d *Deliverer) Holder() string { return d.holder }

// Collectors are the deliverer's metrics.
func (d *Deliverer) Collectors() []prometheus.Collector { return d.m.collectors() }

// Run delivers while it holds the lease, and waits to take it over while
// another holder has it, until ctx ends; then it stores its cursor and
// releases the lease. It returns nil.
func (d *Deliverer) Run(ctx context.Context) error {
	for {
		asked := time.Now()
		held, cursor, err := d.leases.AcquireLease(ctx, d.leaseName, d.holder, d.ttl)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			d.log.Warn("webhook: could not take the lease", "err", err)
		case held:
			d.log.Info("webhook: delivering (this instance holds the lease)", "holder", d.holder, "cursor", cursor)
			d.deliver(ctx, cursor, asked.Add(d.ttl*3/4))
			if ctx.Err() != nil {
				return nil
			}
			d.log.Warn("webhook: lost the lease: stopped delivering", "holder", d.holder)
		}
		if !sleep(ctx, d.ttl/3) {
			return nil
		}
	}
}

// sleep waits for dur or ctx, and reports whether ctx is still going.
func sleep(ctx context.Context, dur time.Duration) bool {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// idle waits on an empty outbox: for the poll interval, a nudge or ctx.
func (d *Deliverer) idle(ctx context.Context) {
	t := time.NewTimer(d.poll)
	defer t.Stop()
	select {
	case <-t.C:
	case <-d.nudge:
	case <-ctx.Done():
	}
}

// page is one read of the outbox: the cursor it was read from and how many
// of its events are not done yet.
type page struct {
	start   string
	pending int
}

type item struct {
	e ledger.OutboxEvent
	p *page
}

// session is one spell of holding the lease.
type session struct {
	d   *Deliverer
	ctx context.Context
	sem chan struct{} // one token per request in flight

	mu      sync.Mutex
	pages   []*page // oldest first, each with events pending
	held    int
	queues  map[ledger.BucketRef][]item // a bucket's events not yet sent, oldest first; present while its sender runs
	read    string                      // the cursor after the last page read
	durable string                      // the cursor to store

	freed chan struct{} // an event is done
	dirty chan struct{} // durable changed
	wg    sync.WaitGroup
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// deliver runs one session from cursor until the lease is lost or ctx ends;
// valid is when this holder stops unless it renewed the lease.
func (d *Deliverer) deliver(ctx context.Context, cursor string, valid time.Time) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &session{
		d: d, ctx: sctx, sem: make(chan struct{}, d.concurrency),
		queues: map[ledger.BucketRef][]item{}, read: cursor, durable: cursor,
		freed: make(chan struct{}, 1), dirty: make(chan struct{}, 1),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.readLoop()
	}()
	stored := s.keepLease(cancel, cursor, valid)
	s.wg.Wait()
	if ctx.Err() == nil || d.noRelease {
		return // the lease is lost (or the test plays dead): nothing more to store
	}
	// A clean stop: store the cursor and hand the lease over at once.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), d.ttl/3+time.Second)
	defer fcancel()
	s.mu.Lock()
	cur := s.durable
	s.mu.Unlock()
	if cur != stored {
		if _, err := d.leases.AdvanceLease(fctx, d.leaseName, d.holder, cur); err != nil {
			d.log.Warn("webhook: cursor not stored on stop", "err", err)
		}
	}
	if err := d.leases.ReleaseLease(fctx, d.leaseName, d.holder); err != nil {
		d.log.Warn("webhook: lease not released on stop (another instance takes over after its TTL)", "err", err)
	}
}

// keepLease renews the lease every TTL/3 and stores the cursor when it
// moves (stored is the one in the store), until ctx ends or the lease is
// lost; then it cancels the session. It returns the cursor last stored.
//
// The holder stops by itself at valid: 3/4 of the TTL after it last asked
// for the lease successfully, before the store can let it go (the store
// counts the TTL from when the request reached it), whatever its calls to
// the store do meanwhile; every call is bounded by valid too.
func (s *session) keepLease(cancel context.CancelFunc, stored string, valid time.Time) string {
	d := s.d
	defer cancel()
	tick := time.NewTicker(d.ttl / 3)
	defer tick.Stop()
	expire := time.NewTimer(time.Until(valid))
	defer expire.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return stored
		case <-expire.C:
			d.log.Warn("webhook: lease not renewed in time: stopping delivery")
			return stored
		case <-tick.C:
			asked := time.Now()
			cctx, ccancel := context.WithDeadline(s.ctx, valid)
			held, _, err := d.leases.AcquireLease(cctx, d.leaseName, d.holder, d.ttl)
			ccancel()
			if err != nil || !held {
				if err != nil && s.ctx.Err() == nil {
					d.log.Warn("webhook: lease not renewed: stopping delivery", "err", err)
				}
				return stored
			}
			valid = asked.Add(d.ttl * 3 / 4)
			expire.Reset(time.Until(valid))
		case <-s.dirty:
		}
		s.mu.Lock()
		cur := s.durable
		s.mu.Unlock()
		if cur == stored {
			continue
		}
		cctx, ccancel := context.WithDeadline(s.ctx, valid)
		ok, err := d.leases.AdvanceLease(cctx, d.leaseName, d.holder, cur)
		ccancel()
		switch {
		case err != nil:
			if s.ctx.Err() == nil {
				d.log.Warn("webhook: cursor not stored (tried again when it moves or at the next renewal)", "err", err)
			}
		case !ok:
			return stored // the lease is someone else's
		default:
			stored = cur
		}
	}
}

// readLoop reads the outbox into the buckets' queues while fewer than
// MaxHeld events are held.
func (s *session) readLoop() {
	d := s.d
	for s.ctx.Err() == nil {
		s.mu.Lock()
		room := d.maxHeld - s.held
		from := s.read
		s.mu.Unlock()
		if room <= 0 {
			select {
			case <-s.freed:
			case <-s.ctx.Done():
			}
			continue
		}
		es, next, err := d.out.Events(s.ctx, from, min(room, d.pageSize))
		if err != nil {
			if s.ctx.Err() == nil {
				d.log.Warn("webhook: could not read the outbox", "err", err)
			}
			sleep(s.ctx, d.poll)
			continue
		}
		if len(es) == 0 {
			s.mu.Lock()
			if len(s.pages) == 0 && next != s.read {
				s.read, s.durable = next, next
				signal(s.dirty)
			}
			s.read = next
			s.mu.Unlock()
			d.idle(s.ctx)
			continue
		}
		p := &page{start: from, pending: len(es)}
		s.mu.Lock()
		s.pages = append(s.pages, p)
		s.held += len(es)
		s.read = next
		for _, e := range es {
			d.m.events.WithLabelValues(e.Type).Inc()
			q, running := s.queues[e.Bucket]
			s.queues[e.Bucket] = append(q, item{e: e, p: p})
			if !running {
				s.wg.Add(1)
				go s.sendBucket(e.Bucket)
			}
		}
		s.mu.Unlock()
	}
}

// sendBucket sends a bucket's events one after the other until its queue
// is empty.
func (s *session) sendBucket(b ledger.BucketRef) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		q := s.queues[b]
		if len(q) == 0 || s.ctx.Err() != nil {
			delete(s.queues, b)
			s.mu.Unlock()
			return
		}
		it := q[0]
		s.mu.Unlock()
		if !s.d.send(s.ctx, s.sem, it.e) {
			return // the session ended
		}
		s.mu.Lock()
		s.queues[b] = s.queues[b][1:]
		s.done(it)
		s.mu.Unlock()
	}
}

// done marks an event delivered or given up and moves the cursor to store
// past the pages that are all done. The caller holds s.mu.
func (s *session) done(it item) {
	it.p.pending--
	s.held--
	for len(s.pages) > 0 && s.pages[0].pending == 0 {
		s.pages = s.pages[1:]
	}
	target := s.read
	if len(s.pages) > 0 {
		target = s.pages[0].start
	}
	if target != s.durable {
		s.durable = target
		signal(s.dirty)
	}
	signal(s.freed)
}

// send delivers one event, retrying until it is delivered or given up; it
// returns false when ctx ended first.
func (d *Deliverer) send(ctx context.Context, sem chan struct{}, e ledger.OutboxEvent) bool {
	body, err := json.Marshal(api.NewWebhookEvent(e.ID, e.Type, e.Time, e.Bucket.Limit, e.Bucket.Key, e.Threshold, e.Used, e.Capacity, e.PeriodStart))
	if err != nil {
		d.log.Error("webhook: event not encoded: given up", "id", e.ID, "err", err)
		d.m.deliveries.WithLabelValues("gave_up").Inc()
		return true
	}
	for attempt := 1; ; attempt++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		err := d.post(ctx, e.ID, body)
		<-sem
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			d.m.deliveries.WithLabelValues("delivered").Inc()
			d.m.lag.Observe(time.Since(e.Time).Seconds())
			return true
		}
		d.m.deliveries.WithLabelValues("failed").Inc()
		giveUp := time.Since(e.Time) >= d.retryFor
		var retryIn time.Duration
		if !giveUp {
			retryIn = d.wait(attempt)
		}
		d.logFailure(e, attempt, err, retryIn)
		if giveUp {
			d.m.deliveries.WithLabelValues("gave_up").Inc()
			d.log.Warn("webhook: event given up", "id", e.ID, "type", e.Type, "limit", e.Bucket.Limit, "attempts", attempt, "err", err)
			return true
		}
		if !sleep(ctx, retryIn) {
			return false
		}
	}
}

// failureLog bounds the lines of failed attempts: a deliverer sends to one
// URL, so a receiver that is down would otherwise log every attempt of every
// bucket (MaxHeld events retried concurrently).
type failureLog struct {
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       time.Time // when the last line was written; zero before the first
	suppressed int       // failures since then that were not logged
}

// allow reports whether a failure at this moment is logged, and if so how
// many failures were not logged since the last line.
func (f *failureLog) allow() (ok bool, suppressed int) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.IsZero() && now.Sub(f.last) < f.every {
		f.suppressed++
		return false, 0
	}
	f.last, suppressed, f.suppressed = now, f.suppressed, 0
	return true, suppressed
}

// logFailure writes the WARN line of a failed attempt, unless one was
// written less than failLog.every ago. The URL is written as RedactURL has
// it, and err was redacted by post: no secret of the URL reaches the log.
// retryIn is the wait before the next attempt, 0 when the event is given up.
func (d *Deliverer) logFailure(e ledger.OutboxEvent, attempt int, err error, retryIn time.Duration) {
	ok, suppressed := d.failLog.allow()
	if !ok {
		return
	}
	next := "retry_in"
	var nextValue any = retryIn.String()
	if retryIn == 0 {
		next, nextValue = "giving_up", true
	}
	d.log.Warn("webhook: delivery failed", "url", RedactURL(d.url), "id", e.ID, "type", e.Type, "limit", e.Bucket.Limit,
		"attempt", attempt, "err", err, next, nextValue, "suppressed", suppressed, "log_every", d.failLog.every.String())
}

// wait is the backoff after the attempt-th failure: the first backoff
// doubled attempt-1 times, at most the longest, taken at random between
// half and all of it.
func (d *Deliverer) wait(attempt int) time.Duration {
	b := d.backoff
	for i := 1; i < attempt && b < d.maxBackoff; i++ {
		b *= 2
	}
	b = min(b, d.maxBackoff)
	if b <= 1 {
		return b
	}
	return b/2 + rand.N(b/2+1)
}

// errStatus is a response that is not a 2xx.
type errStatus int

func (e errStatus) Error() string { return "answered " + strconv.Itoa(int(e)) }

// post makes one request; nil is a 2xx.
func (d *Deliverer) post(ctx context.Context, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(body))
	if err != nil {
		return redactError(err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "budgetd-webhook")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", api.WebhookSignature(d.key, id, ts, body))
	res, err := d.client.Do(req)
	if err != nil {
		return redactError(err) // it is logged: the URL's query may hold a token
	}
	// A 2xx is delivery, whatever its body: read a bounded part of it so
	// that the connection may be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, MaxResponseBytes))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return errStatus(res.StatusCode)
	}
	return nil
}
