package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// keySum is what one bucket must hold after the run, as far as the answers
// the load received tell. A call whose answer was lost (a transport error or
// a 5xx) may or may not have been applied: its amounts go to the unsure
// fields, which widen the check instead of failing it.
type keySum struct {
	level        int64 // costs of accepted fillups plus committed amounts
	held         int64 // holds reserved and never committed
	events       int64 // history entries these produce
	unsureLevel  int64
	unsureHeld   int64
	unsureEvents int64
}

func (k *keySum) add(o *keySum) {
	k.level += o.level
	k.held += o.held
	k.events += o.events
	k.unsureLevel += o.unsureLevel
	k.unsureHeld += o.unsureHeld
	k.unsureEvents += o.unsureEvents
}

// stats is what a worker measured; the progress line reads it under mu.
type stats struct {
	hist     [numOps]histogram
	all      histogram
	accepted [numOps]uint64
	denied   [numOps]uint64
	errs     [numOps]uint64
	requests uint64 // HTTP requests, measured phase only
	errKinds map[string]uint64
}

func newStats() *stats {
	s := &stats{errKinds: map[string]uint64{}}
	for i := range s.hist {
		s.hist[i].reset()
	}
	s.all.reset()
	return s
}

func (s *stats) merge(o *stats) {
	for i := range s.hist {
		s.hist[i].merge(&o.hist[i])
		s.accepted[i] += o.accepted[i]
		s.denied[i] += o.denied[i]
		s.errs[i] += o.errs[i]
	}
	s.all.merge(&o.all)
	s.requests += o.requests
	for k, v := range o.errKinds {
		s.errKinds[k] += v
	}
}

func (s *stats) errors() uint64 {
	var n uint64
	for _, e := range s.errs {
		n += e
	}
	return n
}

// worker is one caller: one connection's worth of load.
type worker struct {
	l    *loader
	rng  *rand.Rand
	buf  bytes.Buffer
	sums map[string]*keySum
	raw  *rawConn // the worker's own connection (rawhttp.go), nil until its first call

	mu sync.Mutex
	st *stats
}

// loader drives one run.
type loader struct {
	cfg     config
	client  *http.Client
	limitP  string // base URL of the limit: …/v1/limits/{name}
	ops     []op   // one entry per unit of weight
	teams   int
	ttl     string
	bodies  struct{ fillup, reserve, commit []byte }
	workers []*worker
	unsent  atomic.Int64 // open model: operations due in the measured window but never sent
	// rawHost is --url's host:port when calls go on the workers' own
	// connections (rawhttp.go), "" when through client; rawBase is its
	// scheme and host.
	rawHost, rawBase string
	raws             rawConns
}

func newLoader(cfg config) *loader {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.concurrency,
		MaxIdleConnsPerHost: cfg.concurrency,
		MaxConnsPerHost:     cfg.concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     4 << 10,
		ReadBufferSize:      8 << 10,
	}
	l := &loader{
		cfg:    cfg,
		client: &http.Client{Transport: tr, Timeout: cfg.timeout},
		limitP: cfg.url + "/v1/limits/" + url.PathEscape(cfg.limit),
		teams:  max(1, cfg.keys/100),
	}
	if u, err := url.Parse(cfg.url); err == nil && u.Scheme == "http" && cfg.client == "raw" {
		l.rawBase, l.rawHost = "http://"+u.Host, u.Host
		if u.Port() == "" {
			l.rawHost = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	for o := range numOps {
		for range cfg.mix[o] {
			l.ops = append(l.ops, o)
		}
	}
	c := strconv.FormatInt(cfg.cost, 10)
	// A hold outlives the run, so verify sees every uncommitted one.
	ttl := min(24*time.Hour, (cfg.warmup+cfg.duration+10*time.Minute).Truncate(time.Second)+time.Second)
	l.ttl = ttl.String()
	l.bodies.fillup = []byte(`{"cost":"` + c + `"}`)
	l.bodies.reserve = []byte(`{"amount":"` + strconv.FormatInt(2*cfg.cost, 10) + `","ttl":"` + l.ttl + `"}`)
	l.bodies.commit = []byte(`{"amount":"` + c + `"}`)
	return l
}

func (l *loader) newWorker(seed uint64) *worker {
	w := &worker{l: l, rng: rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)), sums: map[string]*keySum{}, st: newStats()}
	l.workers = append(l.workers, w)
	return w
}

func keyName(i int) string  { return "k" + strconv.Itoa(i) }
func teamName(i int) string { return "team-" + strconv.Itoa(i) }

func (w *worker) sum(key string) *keySum {
	s := w.sums[key]
	if s == nil {
		s = &keySum{}
		w.sums[key] = s
	}
	return s
}

// outcome is what one operation came to.
type outcome struct {
	accepted bool
	err      string // "" unless the call failed
	requests int
}

// call sends one request and reads the whole answer into w.buf.
func (w *worker) call(ctx context.Context, method, u string, body []byte) (int, error) {
	if w.l.rawHost != "" {
		return w.callRaw(ctx, method, u, body)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := w.l.client.Do(req)
	if err != nil {
		return 0, err
	}
	w.buf.Reset()
	_, err = w.buf.ReadFrom(res.Body)
	res.Body.Close()
	return res.StatusCode, err
}

// errKind names a failure briefly enough to count failures by kind.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EMFILE):
		return "out of sockets"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60]
	}
	return "transport: " + s
}

// statusKind names an unexpected answer: its status and problem code.
func statusKind(status int, body []byte) string {
	k := "http " + strconv.Itoa(status)
	if c := jsonString(body, "code"); c != "" {
		k += " " + c
	}
	return k
}

// jsonString finds "field":"value" in a flat JSON answer without decoding
// it all: the load generator shares the CPU with the service it measures.
func jsonString(body []byte, field string) string {
	pat := `"` + field + `":"`
	i := bytes.Index(body, []byte(pat))
	if i < 0 {
		return ""
	}
	rest := body[i+len(pat):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || j > 200 {
		return ""
	}
	return string(rest[:j])
}

// do runs one operation of kind o on a key drawn at random and keeps the
// books for verify.
func (w *worker) do(ctx context.Context, o op) outcome {
	k := w.rng.IntN(w.l.cfg.keys)
	key := keyName(k)
	switch o {
	case opFillup:
		return w.fillup(ctx, key)
	case opCan:
		return w.canAccept(ctx, key)
	case opReserve:
		return w.reserveCommit(ctx, key)
	default: // opMulti: the caller's bucket and its team's, all or nothing
		return w.multiFillup(ctx, key, teamName(k%w.l.teams))
	}
}

// unsure books cost on key as maybe charged: the call's answer was lost or
// unexpected, so verify accepts the level with or without it.
func (w *worker) unsure(key string, cost int64) {
	s := w.sum(key)
	s.unsureLevel += cost
	s.unsureEvents++
}

// charged books cost on key as charged: the call was accepted.
func (w *worker) charged(key string, cost int64) {
	s := w.sum(key)
	s.level += cost
	s.events++
}

// fillup charges the load's cost to key.
func (w *worker) fillup(ctx context.Context, key string) outcome {
	c := w.l.cfg.cost
	st, err := w.call(ctx, http.MethodPost, w.l.limitP+"/buckets/"+key+"/fillup", w.l.bodies.fillup)
	switch {
	case err != nil:
		w.unsure(key, c)
		return outcome{err: errKind(err), requests: 1}
	case st == http.StatusOK:
		w.charged(key, c)
		return outcome{accepted: true, requests: 1}
	case st == http.StatusTooManyRequests:
		return outcome{requests: 1}
	}
	w.unsure(key, c)
	return outcome{err: statusKind(st, w.buf.Bytes()), requests: 1}
}

// canAccept asks whether key would take the load's cost; it changes nothing
// to keep books on.
func (w *worker) canAccept(ctx context.Context, key string) outcome {
	st, err := w.call(ctx, http.MethodGet, w.l.limitP+"/buckets/"+key+"?cost="+strconv.FormatInt(w.l.cfg.cost, 10), nil)
	switch {
	case err != nil:
		return outcome{err: errKind(err), requests: 1}
	case st != http.StatusOK:
		return outcome{err: statusKind(st, w.buf.Bytes()), requests: 1}
	}
	return outcome{accepted: bytes.Contains(w.buf.Bytes(), []byte(`"accepted":true`)), requests: 1}
}

// reserveCommit holds twice the load's cost on key and commits the cost.
func (w *worker) reserveCommit(ctx context.Context, key string) outcome {
	c := w.l.cfg.cost
	st, err := w.call(ctx, http.MethodPost, w.l.limitP+"/buckets/"+key+"/reservations", w.l.bodies.reserve)
	if err != nil || st != http.StatusCreated {
		if err == nil && st == http.StatusTooManyRequests {
			return outcome{requests: 1}
		}
		s := w.sum(key)
		s.unsureHeld += 2 * c
		s.unsureEvents++
		if err != nil {
			return outcome{err: errKind(err), requests: 1}
		}
		return outcome{err: statusKind(st, w.buf.Bytes()), requests: 1}
	}
	s := w.sum(key)
	s.events++ // reserved
	id := jsonString(w.buf.Bytes(), "id")
	if id == "" {
		s.held += 2 * c
		return outcome{err: "reserve answer without id", requests: 1}
	}
	st, err = w.call(ctx, http.MethodPost, w.l.cfg.url+"/v1/reservations/"+url.PathEscape(id)+"/commit", w.l.bodies.commit)
	if err == nil && st == http.StatusOK {
		w.charged(key, c) // committed
		return outcome{accepted: true, requests: 2}
	}
	// The commit may or may not have happened: either the hold is still
	// there or the level has the committed amount.
	s.unsureHeld += 2 * c
	w.unsure(key, c)
	if err != nil {
		return outcome{err: "commit: " + errKind(err), requests: 2}
	}
	return outcome{err: "commit: " + statusKind(st, w.buf.Bytes()), requests: 2}
}

// multiFillup charges the load's cost to key and to its team in one
// all-or-nothing call.
func (w *worker) multiFillup(ctx context.Context, key, team string) outcome {
	c := w.l.cfg.cost
	cs := strconv.FormatInt(c, 10)
	body := []byte(`{"items":[{"limit":"` + w.l.cfg.limit + `","key":"` + key + `","cost":"` + cs +
		`"},{"limit":"` + w.l.cfg.limit + `","key":"` + team + `","cost":"` + cs + `"}]}`)
	st, err := w.call(ctx, http.MethodPost, w.l.cfg.url+"/v1/fillup", body)
	switch {
	case err == nil && st == http.StatusOK:
		w.charged(key, c)
		w.charged(team, c)
		return outcome{accepted: true, requests: 1}
	case err == nil && st == http.StatusTooManyRequests:
		return outcome{requests: 1}
	}
	w.unsure(key, c)
	w.unsure(team, c)
	if err != nil {
		return outcome{err: errKind(err), requests: 1}
	}
	return outcome{err: statusKind(st, w.buf.Bytes()), requests: 1}
}

// record counts an operation that started (or was scheduled) in the
// measured window.
func (w *worker) record(o op, out outcome, lat time.Duration) {
	w.mu.Lock()
	st := w.st
	st.hist[o].record(lat)
	st.all.record(lat)
	st.requests += uint64(out.requests)
	switch {
	case out.err != "":
		st.errs[o]++
		st.errKinds[out.err]++
	case out.accepted:
		st.accepted[o]++
	default:
		st.denied[o]++
	}
	w.mu.Unlock()
}

func (w *worker) pick() op { return w.l.ops[w.rng.IntN(len(w.l.ops))] }

// window is the run's time line: warm-up from start, measurement from
// measure to end.
type window struct {
	start, measure, end time.Time
}

// runClosed runs cfg.concurrency callers, each sending its next request as
// soon as the previous one is answered.
func (l *loader) runClosed(ctx context.Context, win window) {
	var wg sync.WaitGroup
	for i := range l.cfg.concurrency {
		w := l.newWorker(uint64(i + 1))
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(win.end) {
					return
				}
				o := w.pick()
				out := w.do(ctx, o)
				if !t0.Before(win.measure) && ctx.Err() == nil {
					w.record(o, out, time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
}

// runOpen starts operations on a fixed schedule, cfg.rate per second, with at
// most cfg.concurrency in flight. Latency is measured from the time an
// operation was due, not from when a caller was free to send it, so a slow
// service is charged for the queue it causes (no coordinated omission). No
// operation starts after the end of the run: those that were due but never
// sent are counted in l.unsent, and the summary says so.
func (l *loader) runOpen(ctx context.Context, win window) {
	interval := float64(time.Second) / l.cfg.rate
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := range l.cfg.concurrency {
		w := l.newWorker(uint64(i + 1))
		wg.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for ctx.Err() == nil {
				slot := next.Add(1) - 1
				due := win.start.Add(time.Duration(float64(slot) * interval))
				if !due.Before(win.end) {
					return
				}
				if d := time.Until(due); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-ctx.Done():
						return
					}
				} else if !time.Now().Before(win.end) {
					// Due before the end but not sent by then: the
					// service did not keep up with the rate.
					if !due.Before(win.measure) {
						l.unsent.Add(1)
					}
					continue
				}
				o := w.pick()
				out := w.do(ctx, o)
				if !due.Before(win.measure) && ctx.Err() == nil {
					w.record(o, out, time.Since(due))
				}
			}
		})
	}
	wg.Wait()
}

// snapshot merges every worker's stats.
func (l *loader) snapshot() *stats {
	all := newStats()
	for _, w := range l.workers {
		w.mu.Lock()
		all.merge(w.st)
		w.mu.Unlock()
	}
	return all
}

// progress prints a line a second until done is closed.
func (l *loader) progress(win window, stderr io.Writer, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prevN uint64
	prevT := win.measure
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			if now.Before(win.measure) {
				fmt.Fprintf(stderr, "[%5.1fs] warm-up\n", now.Sub(win.start).Seconds())
				continue
			}
			s := l.snapshot()
			n := s.all.total
			rate := float64(n-prevN) / now.Sub(prevT).Seconds()
			prevN, prevT = n, now
			fmt.Fprintf(stderr, "[%5.1fs] %8.0f ops/s  p99 %-9s errors %d\n",
				now.Sub(win.measure).Seconds(), rate, fmtDur(s.all.quantile(0.99)), s.errors())
		}
	}
}

// sums merges every worker's books.
func (l *loader) sums() map[string]*keySum {
	out := map[string]*keySum{}
	for _, w := range l.workers {
		for k, s := range w.sums {
			if o := out[k]; o != nil {
				o.add(s)
			} else {
				c := *s
				out[k] = &c
			}
		}
	}
	return out
}

// setup deletes and re-creates the limit, so every bucket starts empty.
func (l *loader) setup(ctx context.Context) error {
	w := &worker{l: l}
	st, err := w.call(ctx, http.MethodDelete, l.limitP, nil)
	if err != nil {
		return fmt.Errorf("DELETE %s: %w", l.limitP, err)
	}
	if st != http.StatusNoContent && st != http.StatusNotFound && st != http.StatusOK {
		return fmt.Errorf("DELETE %s: %d %s", l.limitP, st, strings.TrimSpace(w.buf.String()))
	}
	body := fmt.Sprintf(`{"capacity":%q,"leak":{"amount":%q,"per":%q},"history":%t}`,
		l.cfg.capacity, l.cfg.leakAmount, l.cfg.leakPer.String(), l.cfg.history)
	switch {
	case l.cfg.period != "":
		body = fmt.Sprintf(`{"capacity":%q,"period":{"every":%q,"tz":%q},"history":%t}`,
			l.cfg.capacity, l.cfg.period, l.cfg.tz, l.cfg.history)
	case l.cfg.window != 0:
		body = fmt.Sprintf(`{"capacity":%q,"window":{"length":%q},"history":%t}`,
			l.cfg.capacity, l.cfg.window.String(), l.cfg.history)
	}
	if len(l.cfg.thresholds) > 0 {
		ths, err := json.Marshal(l.cfg.thresholds)
		if err != nil {
			return err
		}
		body = strings.TrimSuffix(body, "}") + `,"thresholds":` + string(ths) + "}"
	}
	st, err = w.call(ctx, http.MethodPut, l.limitP, []byte(body))
	if err != nil {
		return fmt.Errorf("PUT %s: %w", l.limitP, err)
	}
	if st != http.StatusOK && st != http.StatusCreated {
		return fmt.Errorf("PUT %s %s: %d %s", l.limitP, body, st, strings.TrimSpace(w.buf.String()))
	}
	return nil
}

// overridePattern is the pattern of the i-th override --overrides puts:
// the exact key of an odd i, a prefix ending in the key of an even one
// ("k0*", "k2*", …), so that keys resolve half through an exact override
// and half through a prefix, the hot key k0 through its prefix.
func overridePattern(i int) string {
	if i%2 == 1 {
		return keyName(i)
	}
	return keyName(i) + "*"
}

// errNotServed is a store that does not serve overrides (501).
var errNotServed = errors.New("the store does not serve overrides (501 not_served)")

// putOverrides puts cfg.overrides overrides of the limit's capacity on the
// limit (overridePattern), from cfg.concurrency connections, and returns
// how long it took.
func (l *loader) putOverrides(ctx context.Context, stderr io.Writer) (time.Duration, error) {
	start := time.Now()
	body := []byte(fmt.Sprintf(`{"capacity":%q}`, l.cfg.capacity))
	var next, done atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range min(l.cfg.concurrency, l.cfg.overrides) {
		w := &worker{l: l}
		wg.Go(func() {
			for ctx.Err() == nil && failed.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= l.cfg.overrides {
					return
				}
				p := overridePattern(i)
				st, err := w.call(ctx, http.MethodPut, l.limitP+"/overrides/"+url.PathEscape(p), body)
				switch {
				case err != nil:
				case st == http.StatusNotImplemented:
					err = errNotServed
				case st != http.StatusOK && st != http.StatusCreated:
					err = fmt.Errorf("%d %s", st, strings.TrimSpace(w.buf.String()))
				}
				if err != nil {
					failed.Store(fmt.Errorf("PUT override %s: %w", p, err))
					return
				}
				if n := done.Add(1); !l.cfg.quiet && n%10000 == 0 {
					fmt.Fprintf(stderr, "[%5.1fs] put %d of %d overrides\n", time.Since(start).Seconds(), n, l.cfg.overrides)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), ctx.Err()
}

// populate charges every key once, 64 keys per multi-bucket call.
func (l *loader) populate(ctx context.Context, stderr io.Writer) (time.Duration, error) {
	const batch = 64
	calls := (l.cfg.keys + batch - 1) / batch
	var next, done atomic.Int64
	var failed atomic.Value
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if !l.cfg.quiet {
					fmt.Fprintf(stderr, "[%5.1fs] populated %d of %d keys\n", time.Since(start).Seconds(), min(int(done.Load())*batch, l.cfg.keys), l.cfg.keys)
				}
			}
		}
	}()
	defer close(stop)
	cs := strconv.FormatInt(l.cfg.cost, 10)
	var wg sync.WaitGroup
	for i := range l.cfg.concurrency {
		w := l.newWorker(uint64(i + 1))
		wg.Go(func() {
			var b strings.Builder
			for ctx.Err() == nil && failed.Load() == nil {
				n := int(next.Add(1) - 1)
				if n >= calls {
					return
				}
				b.Reset()
				b.WriteString(`{"items":[`)
				lo, hi := n*batch, min((n+1)*batch, l.cfg.keys)
				for k := lo; k < hi; k++ {
					if k > lo {
						b.WriteByte(',')
					}
					b.WriteString(`{"limit":"` + l.cfg.limit + `","key":"` + keyName(k) + `","cost":"` + cs + `"}`)
				}
				b.WriteString(`]}`)
				st, err := w.call(ctx, http.MethodPost, l.cfg.url+"/v1/fillup", []byte(b.String()))
				if err != nil || st != http.StatusOK {
					if err == nil {
						err = fmt.Errorf("%s", statusKind(st, w.buf.Bytes()))
					}
					failed.Store(fmt.Errorf("populate: %w", err))
					return
				}
				for k := lo; k < hi; k++ {
					s := w.sum(keyName(k))
					s.level += l.cfg.cost
					s.events++
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), ctx.Err()
}
