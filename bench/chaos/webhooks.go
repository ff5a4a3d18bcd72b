package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	wire "github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
	"github.com/shopspring/decimal"
)

// webhookStores are the stores whose budgetd runs with --webhook-url and
// the webhook fault scenario: the durable stores.
var webhookStores = map[string]bool{"postgres": true, "redis": true, "mysql": true}

// hookRate is the most calls a second one client of the webhook scenario
// makes.
const hookRate = 15

// hookSecret signs the webhooks of the chaos runs.
const hookSecret = "whsec_Y2hhb3Mtd2ViaG9vay1rZXktb2YtMzItYnl0ZXMhIQ=="

// hookReceiver is a webhook endpoint in this process that fails at random
// (30% 500s, 5% dropped connections; and 5% slow answers of up to 1.5 s),
// verifies every request's signature with client.NewWebhookVerifier and
// records the events it answered 2xx, in arrival order. It fails one event
// at most maxHookFailures times: the deliverer's backoff doubles from 1 s at
// each failure, so an unbounded streak would make the wait for delivery a
// matter of luck rather than of budgetd.
type hookReceiver struct {
	srv *http.Server
	ln  net.Listener
	v   *client.WebhookVerifier

	mu        sync.Mutex
	rng       *rand.Rand
	got       []client.Event
	requests  int64
	injected  int64
	badSigned int64
	firstBad  string
	failed    map[string]int // failures answered, by event id
}

const maxHookFailures = 3

func newHookReceiver() (*hookReceiver, error) {
	v, err := client.NewWebhookVerifier(hookSecret, 0)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{ln: ln, v: v, rng: rand.New(rand.NewPCG(25, 25)), failed: map[string]int{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *hookReceiver) url() string { return "http://" + r.ln.Addr().String() + "/hook" }

func (r *hookReceiver) close() { _ = r.srv.Close() }

// args are budgetd's webhook flags, the secret written under dir.
func (r *hookReceiver) args(dir string) ([]string, error) {
	f := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(f, []byte(hookSecret+"\n"), 0o600); err != nil {
		return nil, err
	}
	return []string{"--webhook-url", r.url(), "--webhook-secret-file", f}, nil
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	e, err := r.v.Verify(req.Header, body)
	r.mu.Lock()
	r.requests++
	x := r.rng.IntN(100)
	slow := time.Duration(50+r.rng.IntN(1450)) * time.Millisecond
	if x < 35 && r.failed[e.ID] >= maxHookFailures {
		x = 100
	}
	r.mu.Unlock()
	if err != nil {
		r.mu.Lock()
		r.badSigned++
		if r.firstBad == "" {
			r.firstBad = err.Error()
		}
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case x < 30:
		r.inject(e.ID)
		http.Error(w, "chaos", http.StatusInternalServerError)
		return
	case x < 35:
		if hj, ok := w.(http.Hijacker); ok {
			r.inject(e.ID)
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
			return
		}
	case x < 40:
		// A slow receiver: it answers 2xx, late (the deliverer's timeout is 10 s).
		select {
		case <-time.After(slow):
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *hookReceiver) inject(id string) {
	r.mu.Lock()
	r.injected++
	r.failed[id]++
	r.mu.Unlock()
}

func (r *hookReceiver) received() []client.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Event(nil), r.got...)
}

// hookBooks are the accepted charges of each bucket, in order: each key is
// charged by one client only, one call at a time.
type hookBooks struct {
	mu       sync.Mutex
	accepted map[string][]decimal.Decimal
	denied   int64
	calls    int64
	retried  int64
	unsolved int64
}

const hookLimit = "chaos-hook"

// webhookFaults charges many buckets of a limit with thresholds at 50% and
// 80% from many clients while budgetd and then the store are killed with
// SIGKILL and restarted, every call resolved with its Idempotency-Key. Then
// GET /v1/events must list, for each bucket, exactly one crossing of each
// threshold its accepted charges reached, made by the charge that reached
// it (its used is that charge's running sum) — so none for a denied charge
// — and nothing else; and the receiver must get every listed event, with a
// valid signature, each bucket's in order, within a bounded wait.
func webhookFaults(ctx context.Context, a *api, rcv *hookReceiver, clients int, d, wait time.Duration, faults []func(context.Context) error) (row result, err error) {
	row.name = "webhooks: kill -9 budgetd+store"
	if _, err := a.do(ctx, http.MethodDelete, "/v1/limits/"+hookLimit, "", nil); err != nil {
		return row, err
	}
	if _, err := a.must(ctx, 200, http.MethodPut, "/v1/limits/"+hookLimit,
		`{"capacity":"1000","leak":{"amount":"1","per":"87600h"},"thresholds":["50%","80%"]}`); err != nil {
		return row, err
	}
	// Events listed before this run are not this run's.
	_, cursor, err := listEvents(ctx, a, "")
	if err != nil {
		return row, err
	}
	bk := &hookBooks{accepted: map[string][]decimal.Decimal{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 25))
			// Each client charges at most hookRate calls a second, so the
			// events to deliver (and the wait for them) do not grow with
			// the store's speed: a fast store would otherwise make ten
			// times the crossings of a slow one in the same run.
			pace := time.NewTicker(time.Second / hookRate)
			defer pace.Stop()
			for n := 0; ; n++ {
				key := fmt.Sprintf("c%02d-%d", c, n)
				for {
					select {
					case <-stop:
						return
					case <-pace.C:
					}
					// 20.001 … 150.001: a running sum is never a whole
					// number (below 1000 charges), so never exactly at a
					// threshold, and the leak (a millionth a run) never
					// moves it across one.
					cost := decimal.New(int64(20000+rng.IntN(130001)/1000*1000+1), -3)
					ok, definite := resolveHook(ctx, a, bk, key, cost)
					if !definite || !ok {
						break // a full bucket (or an unsolved call): the next key
					}
				}
			}
		})
	}
	start := time.Now()
	every := d / time.Duration(len(faults)+1)
	for i, f := range faults {
		select {
		case <-ctx.Done():
			close(stop)
			wg.Wait()
			return row, ctx.Err()
		case <-time.After(time.Until(start.Add(every * time.Duration(i+1)))):
		}
		if err := f(ctx); err != nil {
			close(stop)
			wg.Wait()
			return row, fmt.Errorf("fault %d: %w", i+1, err)
		}
		row.faults++
	}
	time.Sleep(time.Until(start.Add(d)))
	close(stop)
	wg.Wait()
	row.calls, row.retried, row.unsolved = bk.calls, bk.retried, bk.unsolved
	if bk.unsolved > 0 {
		row.fail("%d calls had no definite answer after their retries", bk.unsolved)
	}

	events, _, err := listEvents(ctx, a, cursor)
	if err != nil {
		return row, err
	}
	listed := map[string][]client.Event{} // by key, in listing order
	for _, e := range events {
		if e.Limit == hookLimit {
			listed[e.Key] = append(listed[e.Key], e)
		}
	}
	crossings := 0
	for key, costs := range bk.accepted {
		want := expectedCrossings(costs)
		crossings += len(want)
		got := listed[key]
		delete(listed, key)
		if len(got) != len(want) {
			row.fail("%s: %d events listed, %d crossings accepted (%v)", key, len(got), len(want), describe(got))
			if len(got) < len(want) {
				row.lost += int64(len(want) - len(got))
			} else {
				row.phantom += int64(len(got) - len(want))
			}
			continue
		}
		for i, w := range want {
			e := got[i]
			// used is level + held after the write: the running sum less
			// at most a millionth of leak.
			if e.Type != wire.EventThresholdCrossed || e.Threshold != w.threshold || e.Used.GreaterThan(w.used) || e.Used.LessThan(w.used.Sub(decimal.New(1, -4))) {
				row.phantom++
				row.fail("%s: event %s is %s %s at used %s; the accepted charges cross %s at %s", key, e.ID, e.Type, e.Threshold, e.Used, w.threshold, w.used)
			}
		}
	}
	for key, got := range listed {
		row.phantom += int64(len(got))
		row.fail("%s: %d events listed for a bucket that accepted nothing (%v)", key, len(got), describe(got))
	}

	// Delivery: every listed event arrives, signed, each bucket's in order.
	waitStart := time.Now()
	ids := map[string]bool{}
	for _, e := range events {
		if e.Limit == hookLimit {
			ids[e.ID] = true
		}
	}
	missing := func() int {
		seen := map[string]bool{}
		for _, e := range rcv.received() {
			if ids[e.ID] {
				seen[e.ID] = true
			}
		}
		return len(ids) - len(seen)
	}
	if err := waitUntil(ctx, wait, "every event to be delivered", func() bool { return missing() == 0 }); err != nil {
		row.lost += int64(missing())
		row.fail("%d of %d events not delivered within %s of the run's end", missing(), len(ids), wait)
	}
	drained := time.Since(waitStart)
	got := rcv.received()
	first := map[string][]string{} // each bucket's ids in the order first delivered
	seen := map[string]bool{}
	dups := 0
	for _, e := range got {
		if !ids[e.ID] {
			continue
		}
		if seen[e.ID] {
			dups++
			continue
		}
		seen[e.ID] = true
		first[e.Key] = append(first[e.Key], e.ID)
	}
	for _, e := range events {
		if e.Limit != hookLimit || !seen[e.ID] {
			continue
		}
		if q := first[e.Key]; len(q) == 0 || q[0] != e.ID {
			row.fail("%s: event %s delivered out of its bucket's order (first deliveries %v)", e.Key, e.ID, first[e.Key])
			first[e.Key] = nil
			continue
		}
		first[e.Key] = first[e.Key][1:]
	}
	rcv.mu.Lock()
	bad, why, requests, injected := rcv.badSigned, rcv.firstBad, rcv.requests, rcv.injected
	rcv.mu.Unlock()
	if bad > 0 {
		row.fail("%d webhook requests failed verification: %s", bad, why)
	}
	row.note = fmt.Sprintf("%d clients, %d buckets, %d calls (%d denied), %d crossings; %d requests, %d failed on purpose, %d redelivered; all delivered %s after the run",
		clients, len(bk.accepted), bk.calls, bk.denied, crossings, requests, injected, dups, drained.Round(100*time.Millisecond))
	return row, nil
}

type crossing struct {
	threshold string
	used      decimal.Decimal
}

// expectedCrossings are the crossings of 50% and 80% of 1000 made by a
// bucket's accepted charges, in order: each by the first charge whose
// running sum reaches it.
func expectedCrossings(costs []decimal.Decimal) []crossing {
	var out []crossing
	ths := []struct {
		name string
		at   decimal.Decimal
	}{{"50%", decimal.NewFromInt(500)}, {"80%", decimal.NewFromInt(800)}}
	sum := decimal.Zero
	next := 0
	for _, c := range costs {
		sum = sum.Add(c)
		for next < len(ths) && sum.GreaterThanOrEqual(ths[next].at) {
			out = append(out, crossing{ths[next].name, sum})
			next++
		}
	}
	return out
}

func describe(es []client.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%s %s %s@%s", e.ID, e.Type, e.Threshold, e.Used)
	}
	return out
}

// resolveHook charges key with an Idempotency-Key, retrying until budgetd
// gives a definite answer (for at most a minute), and books it: it reports
// whether the charge was accepted and whether the answer was definite.
func resolveHook(ctx context.Context, a *api, bk *hookBooks, key string, cost decimal.Decimal) (ok, definite bool) {
	idem := map[string]string{"Idempotency-Key": newKey()}
	body := fmt.Sprintf(`{"cost":%q}`, cost.String())
	path := "/v1/limits/" + hookLimit + "/buckets/" + url.PathEscape(key) + "/fillup"
	deadline := time.Now().Add(time.Minute)
	wait := 20 * time.Millisecond
	for try := 0; ; try++ {
		ans, err := a.do(ctx, http.MethodPost, path, body, idem)
		if err == nil && (ans.status == 200 || ans.status == 429) {
			bk.mu.Lock()
			defer bk.mu.Unlock()
			bk.calls++
			if try > 0 {
				bk.retried++
			}
			if ans.status == 200 && accepted(ans.body) {
				bk.accepted[key] = append(bk.accepted[key], cost)
				return true, true
			}
			bk.denied++
			return false, true
		}
		if (err == nil && ans.status != 503 && ans.status != 409) || time.Now().After(deadline) || ctx.Err() != nil {
			bk.mu.Lock()
			bk.unsolved++
			bk.mu.Unlock()
			return false, false
		}
		time.Sleep(wait)
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// listEvents reads GET /v1/events from cursor to its end.
func listEvents(ctx context.Context, a *api, cursor string) ([]client.Event, string, error) {
	var out []client.Event
	for {
		p := "/v1/events?limit=1000"
		if cursor != "" {
			p += "&after=" + url.QueryEscape(cursor)
		}
		b, err := a.must(ctx, 200, http.MethodGet, p, "")
		if err != nil {
			return nil, "", err
		}
		var page wire.EventPage
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, "", err
		}
		for _, e := range page.Items {
			out = append(out, client.EventOf(e))
		}
		if len(page.Items) == 0 {
			return out, page.NextCursor, nil
		}
		cursor = page.NextCursor
	}
}
