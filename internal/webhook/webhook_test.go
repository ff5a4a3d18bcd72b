package webhook_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

const secret = "whsec_" + "c2VjcmV0LWtleS1vZi10aGUtdGVzdHMtMzItYnl0ZXM=" // base64 of a 32-byte key

func key(t testing.TB) []byte {
	k, err := api.WebhookSecretKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// receiver is a webhook endpoint that verifies every request with the
// client's verifier and records the events it answered 2xx, in arrival
// order. fail decides, before the event is recorded, to answer otherwise.
type receiver struct {
	t      testing.TB
	srv    *httptest.Server
	v      *client.WebhookVerifier
	fail   func(w http.ResponseWriter, r *http.Request, e client.Event) bool
	mu     sync.Mutex
	got    []client.Event
	notify chan struct{}
}

func newReceiver(t testing.TB, fail func(http.ResponseWriter, *http.Request, client.Event) bool) *receiver {
	v, err := client.NewWebhookVerifier(secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, v: v, fail: fail, notify: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("request %s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
	}
	e, err := r.v.Verify(req.Header, body)
	if err != nil {
		r.t.Errorf("a request the verifier refuses: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.fail != nil && r.fail(w, req, e) {
		return
	}
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) events() []client.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Event(nil), r.got...)
}

// waitFor waits until cond holds of what was received, or fails t.
func (r *receiver) waitFor(t testing.TB, what string, d time.Duration, cond func([]client.Event) bool) []client.Event {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if got := r.events(); cond(got) {
			return got
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("waited %v for %s; received %d events", d, what, len(r.events()))
		}
	}
}

// emitter makes events on a memory store: each bucket of the limit gets
// 8 crossings (charges of 1 past thresholds 0.5 .. 7.5, so that the slow
// leak does not matter) and then 8 recoveries (one drain of 8).
type emitter struct {
	svc   *ledger.Service
	limit string
}

func newEmitter(t testing.TB, st ledger.Store) emitter {
	ths := make([]ledger.Threshold, 8)
	for i := range ths {
		th, err := ledger.ParseThreshold("thresholds", fmt.Sprintf("%d.5", i))
		if err != nil {
			t.Fatal(err)
		}
		ths[i] = th
	}
	e := emitter{svc: ledger.NewService(st), limit: fmt.Sprintf("hook-%d", time.Now().UnixNano())}
	spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: 24 * time.Hour, Thresholds: ths}
	if _, err := e.svc.PutLimit(context.Background(), e.limit, spec); err != nil {
		t.Fatal(err)
	}
	return e
}

// bucket emits the 16 events of one bucket.
func (e emitter) bucket(t testing.TB, key string) {
	ctx := context.Background()
	ref := ledger.BucketRef{Limit: e.limit, Key: key}
	for range 8 {
		if _, err := e.svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.Drain(ctx, ref, decimal.NewFromInt(8), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
}

// want is what the outbox holds of the limit, by bucket key, in order.
func (e emitter) want(t testing.TB) map[string][]string {
	out := map[string][]string{}
	cursor := ""
	for {
		es, next, err := e.svc.Events(context.Background(), cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range es {
			if ev.Bucket.Limit == e.limit {
				out[ev.Bucket.Key] = append(out[ev.Bucket.Key], ev.ID)
			}
		}
		if len(es) == 0 {
			return out
		}
		cursor = next
	}
}

// byBucket lists the ids received of each bucket of limit, in order, an id
// received again right after itself once (at least once: a 2xx that the
// deliverer did not see in time is sent again).
func byBucket(es []client.Event, limit string) map[string][]string {
	out := map[string][]string{}
	for _, e := range es {
		if ids := out[e.Key]; e.Limit == limit && (len(ids) == 0 || ids[len(ids)-1] != e.ID) {
			out[e.Key] = append(out[e.Key], e.ID)
		}
	}
	return out
}

func count(m map[string][]string) int {
	n := 0
	for _, ids := range m {
		n += len(ids)
	}
	return n
}

// run starts d until the test ends (or stop is called) and returns stop,
// which waits for Run to return.
func run(t testing.TB, d *webhook.Deliverer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return 30s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// fast are the options that make a test quick: short backoffs and polls.
func fast(opts ...webhook.Option) []webhook.Option {
	return append([]webhook.Option{
		webhook.WithBackoff(2*time.Millisecond, 40*time.Millisecond), webhook.WithPoll(10 * time.Millisecond),
		webhook.WithRequestTimeout(300 * time.Millisecond), webhook.WithLease(webhook.DefaultLeaseName, 10*time.Second),
		webhook.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, opts...)
}

// TestDeliversEveryEventInOrderThroughFailures: a receiver that answers
// half the requests with a 500 and some with a redirect, a hang past the
// request timeout or a garbage reply still gets every event of 20 buckets,
// each bucket's in the order of its writes, each once (only a 2xx records
// one), and the metrics count the outcomes.
func TestDeliversEveryEventInOrderThroughFailures(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	r := newReceiver(t, func(w http.ResponseWriter, req *http.Request, _ client.Event) bool {
		mu.Lock()
		x := rng.IntN(100)
		mu.Unlock()
		switch {
		case x < 50:
			http.Error(w, "no", http.StatusInternalServerError)
		case x < 58:
			http.Redirect(w, req, "/elsewhere", http.StatusFound) // not followed: a failure
		case x < 62:
			<-req.Context().Done() // a hang: the deliverer's timeout ends it
		case x < 66:
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return true
			}
			c, buf, _ := hj.Hijack()
			buf.WriteString("garbage\r\n\r\n")
			buf.Flush()
			c.Close()
		default:
			return false
		}
		return true
	})
	d := webhook.New(r.srv.URL, key(t), st, st, fast(webhook.WithConcurrency(8))...)
	run(t, d)
	for i := range 20 {
		em.bucket(t, fmt.Sprintf("b%02d", i))
	}
	want := em.want(t)
	if count(want) != 20*16 {
		t.Fatalf("the outbox holds %d events, want %d", count(want), 20*16)
	}
	got := r.waitFor(t, "every event", 60*time.Second, func(es []client.Event) bool { return count(byBucket(es, em.limit)) >= count(want) })
	gotBy := byBucket(got, em.limit)
	for k, ids := range want {
		if fmt.Sprint(gotBy[k]) != fmt.Sprint(ids) {
			t.Errorf("bucket %s received %v, want %v", k, gotBy[k], ids)
		}
	}
	// The deliverer counts a 2xx once it has read it, after the receiver
	// recorded the event.
	for deadline := time.Now().Add(10 * time.Second); metricValue(t, d, "budgetd_webhook_deliveries_total", "delivered") < float64(count(want)); {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %v, want %d", metricValue(t, d, "budgetd_webhook_deliveries_total", "delivered"), count(want))
		}
		time.Sleep(10 * time.Millisecond) // polling a counter, with a deadline
	}
	if failed := metricValue(t, d, "budgetd_webhook_deliveries_total", "failed"); failed == 0 {
		t.Errorf("no failed deliveries counted")
	}
	if n := metricValue(t, d, "budgetd_events_total", api.EventThresholdCrossed); n != 20*8 {
		t.Errorf("budgetd_events_total{type=crossed} = %v, want %d", n, 20*8)
	}
}

// TestStuckBucketDoesNotBlockOthers: the receiver hangs on every event of
// bucket a; bucket b's events are all delivered meanwhile, in order, and a's
// follow once the receiver answers again.
func TestStuckBucketDoesNotBlockOthers(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	release := make(chan struct{})
	var once sync.Once
	unstick := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstick)
	r := newReceiver(t, func(w http.ResponseWriter, req *http.Request, e client.Event) bool {
		if e.Key != "a" {
			return false
		}
		select {
		case <-release:
			return false
		case <-req.Context().Done():
			return true
		}
	})
	d := webhook.New(r.srv.URL, key(t), st, st, fast(webhook.WithConcurrency(2), webhook.WithRequestTimeout(time.Minute))...)
	run(t, d)
	em.bucket(t, "a")
	em.bucket(t, "b")
	want := em.want(t)
	got := r.waitFor(t, "bucket b", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["b"]) >= 16 })
	if by := byBucket(got, em.limit); len(by["a"]) != 0 || fmt.Sprint(by["b"]) != fmt.Sprint(want["b"]) {
		t.Fatalf("while a is stuck: a %v, b %v (want %v)", by["a"], by["b"], want["b"])
	}
	unstick()
	got = r.waitFor(t, "bucket a", 30*time.Second, func(es []client.Event) bool { return len(byBucket(es, em.limit)["a"]) >= 16 })
	if by := byBucket(got, em.limit); fmt.Sprint(by["a"]) != fmt.Sprint(want["a"]) {
		t.Fatalf("bucket a received %v, want %v", by["a"], want["a"])
	}
}

// TestGivesUp: an event that fails past the retry period is given up and
// counted, and the bucket's next event is sent.
func TestGivesUp(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	first := ""
	var mu sync.Mutex
	r := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, e client.Event) bool {
		mu.Lock()
		defer mu.Unlock()
		if first == "" {
			first = e.ID
		}
		if e.ID == first {
			http.Error(w, "never", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	d := webhook.New(r.srv.URL, key(t), st, st, fast(webhook.WithRetryFor(200*time.Millisecond))...)
	run(t, d)
	em.bucket(t, "a")
	want := em.want(t)["a"]
	got := r.waitFor(t, "the events after the one given up", 30*time.Second, func(es []client.Event) bool { return len(es) >= 15 })
	if fmt.Sprint(byBucket(got, em.limit)["a"]) != fmt.Sprint(want[1:]) {
		t.Fatalf("received %v, want %v", byBucket(got, em.limit)["a"], want[1:])
	}
	if n := metricValue(t, d, "budgetd_webhook_deliveries_total", "gave_up"); n != 1 {
		t.Fatalf("gave_up = %v, want 1", n)
	}
}

// TestSignature: the headers are the Standard Webhooks ones, the signature
// is v1 + base64 HMAC-SHA256 of id.timestamp.body, and the body is the
// event as GET /v1/events lists it.
func TestSignature(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	type req struct {
		h    http.Header
		body []byte
	}
	reqs := make(chan req, 32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- req{r.Header.Clone(), b}
	}))
	t.Cleanup(srv.Close)
	run(t, webhook.New(srv.URL, key(t), st, st, fast()...))
	em.bucket(t, "a")
	es, _, err := st.Events(context.Background(), "", 1)
	if err != nil || len(es) != 1 {
		t.Fatal(es, err)
	}
	var got req
	select {
	case got = <-reqs:
	case <-time.After(30 * time.Second):
		t.Fatal("no request")
	}
	wantBody := fmt.Sprintf(`{"id":%q,"type":"threshold.crossed","time":%q,"limit":%q,"key":"a","threshold":"0.5","used":"1","capacity":"1000","period_start":null}`,
		es[0].ID, es[0].Time.UTC().Format(api.TimeFormat), em.limit)
	if string(got.body) != wantBody {
		t.Fatalf("body %s\nwant %s", got.body, wantBody)
	}
	ts := got.h.Get("webhook-timestamp")
	sig, err := client.SignWebhook(secret, es[0].ID, parseUnix(t, ts), got.body)
	if err != nil {
		t.Fatal(err)
	}
	if got.h.Get("webhook-id") != es[0].ID || got.h.Get("webhook-signature") != sig {
		t.Fatalf("headers %v, want id %s signature %s", got.h, es[0].ID, sig)
	}
	raw, _ := base64.StdEncoding.DecodeString(sig[3:])
	if len(raw) != 32 {
		t.Fatalf("signature of %d bytes", len(raw))
	}
}

func parseUnix(t testing.TB, s string) time.Time {
	var sec int64
	if _, err := fmt.Sscan(s, &sec); err != nil {
		t.Fatalf("webhook-timestamp %q: %v", s, err)
	}
	if d := time.Since(time.Unix(sec, 0)); d < -time.Minute || d > time.Minute {
		t.Fatalf("webhook-timestamp %s is %v off", s, d)
	}
	return time.Unix(sec, 0)
}

// metricValue is the value of the counter name with the one label value.
func metricValue(t testing.TB, d *webhook.Deliverer, name, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// countingOutbox counts the events the deliverer has read.
type countingOutbox struct {
	webhook.Outbox
	mu   sync.Mutex
	read int
}

func (c *countingOutbox) Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	es, next, err := c.Outbox.Events(ctx, cursor, n)
	c.mu.Lock()
	c.read += len(es)
	c.mu.Unlock()
	return es, next, err
}

func (c *countingOutbox) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read
}

// TestHeldEventsBounded: with MaxHeld 4 and a receiver that fails every
// request, the deliverer holds 4 events and reads no more, however long
// they fail; once the receiver answers, everything is delivered in order.
func TestHeldEventsBounded(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	var healthy atomic.Bool
	attempts := make(chan string, 1000)
	r := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, e client.Event) bool {
		if healthy.Load() {
			return false
		}
		attempts <- e.ID
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	})
	out := &countingOutbox{Outbox: st}
	run(t, webhook.New(r.srv.URL, key(t), out, st, fast(webhook.WithMaxHeld(4), webhook.WithBackoff(50*time.Millisecond, 50*time.Millisecond))...))
	em.bucket(t, "a")
	em.bucket(t, "b")
	want := em.want(t)
	// Ten failed attempts (at least 25 ms apart for one event) give the
	// reader, which polls every 10 ms, time to read more if it would.
	for range 10 {
		select {
		case <-attempts:
		case <-time.After(30 * time.Second):
			t.Fatal("no attempts")
		}
	}
	if n := out.count(); n != 4 {
		t.Fatalf("the deliverer read %d events with MaxHeld 4 while none could be delivered", n)
	}
	healthy.Store(true)
	got := r.waitFor(t, "every event", 30*time.Second, func(es []client.Event) bool { return count(byBucket(es, em.limit)) >= 32 })
	for k, ids := range want {
		if fmt.Sprint(byBucket(got, em.limit)[k]) != fmt.Sprint(ids) {
			t.Errorf("bucket %s received %v, want %v", k, byBucket(got, em.limit)[k], ids)
		}
	}
}
