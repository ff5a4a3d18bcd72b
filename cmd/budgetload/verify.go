package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// verifyReport is what the read-back found.
type verifyReport struct {
	OK          bool     `json:"ok"`
	Skipped     string   `json:"skipped,omitempty"`
	Keys        int      `json:"keys"`         // keys the run touched
	Checked     int      `json:"checked"`      // keys read back
	HistoryKeys int      `json:"history_keys"` // keys whose history was counted
	MaxLeak     string   `json:"max_leak"`     // the most any bucket can have leaked during the run
	Unsure      int      `json:"unsure_keys"`  // keys with calls whose answer was lost
	Mismatches  []string `json:"mismatches,omitempty"`
}

// bucketDoc is GET …/buckets/{key} without a cost.
type bucketDoc struct {
	Level       string     `json:"level"`
	Held        string     `json:"held"`
	PeriodStart *time.Time `json:"period_start"`
}

type historyPage struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

// verify reads the buckets the run touched back and checks each against the
// accepted costs: sum − maxLeak ≤ level ≤ sum (widened by calls whose answer
// was lost), held = the holds never committed, and, with history on, that
// the number of history entries is the number of accepted charges and hold
// events. maxLeak is the leak of the limit over the whole run, rounded up: the
// default limit leaks 1 per 87600h, so it is about 10^-7 per minute. A
// periodic limit (--period) does not leak, but a bucket whose period began
// during the run was reset to zero, so its level is only bounded above; a
// window (--window) does not leak either, and when the run outlasts it its
// charges age out, so its level is then only bounded above too.
func (l *loader) verify(ctx context.Context, since time.Time) verifyReport {
	sums := l.sums()
	rep := verifyReport{Keys: len(sums)}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > l.cfg.verifyKeys {
		rng := rand.New(rand.NewPCG(1, 2))
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		keys = keys[:l.cfg.verifyKeys]
		slices.Sort(keys)
	}
	rep.Checked = len(keys)

	leakAmount := l.cfg.leakAmount
	if l.cfg.period != "" || l.cfg.window != 0 {
		leakAmount = "0"
	}
	leak, ok := new(big.Rat).SetString(leakAmount)
	if !ok {
		rep.Mismatches = append(rep.Mismatches, fmt.Sprintf("--leak-amount %q is not a decimal", l.cfg.leakAmount))
		return rep
	}
	// maxLeak is the most a bucket may have leaked between the limit's
	// creation and now, with a second to spare for clocks: amount × elapsed
	// / per. It is taken after each read, since reading 10^5 keys takes a
	// while.
	maxLeak := func() *big.Rat {
		elapsed := time.Since(since) + time.Second
		return new(big.Rat).Mul(leak, big.NewRat(elapsed.Microseconds(), l.cfg.leakPer.Microseconds()))
	}

	histKeys := map[string]bool{}
	if l.cfg.history {
		for _, k := range keys[:min(len(keys), l.cfg.historyKeys)] {
			histKeys[k] = true
		}
		rep.HistoryKeys = len(histKeys)
	}

	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		rep.Mismatches = append(rep.Mismatches, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(l.cfg.concurrency, 32) {
		w := &worker{l: l}
		wg.Go(func() {
			for k := range work {
				s := sums[k]
				if s.unsureLevel != 0 || s.unsureHeld != 0 || s.unsureEvents != 0 {
					mu.Lock()
					rep.Unsure++
					mu.Unlock()
				}
				if err := w.checkBucket(ctx, k, s, since, maxLeak); err != "" {
					fail("%s", err)
				}
				if histKeys[k] {
					if err := w.checkHistory(ctx, k, s); err != "" {
						fail("%s", err)
					}
				}
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	rep.MaxLeak = maxLeak().FloatString(12)
	slices.Sort(rep.Mismatches)
	rep.OK = len(rep.Mismatches) == 0
	return rep
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

// checkBucket compares one bucket with its books; "" when it agrees.
func (w *worker) checkBucket(ctx context.Context, key string, s *keySum, since time.Time, leakBound func() *big.Rat) string {
	u := w.l.limitP + "/buckets/" + url.PathEscape(key)
	st, err := w.call(ctx, http.MethodGet, u, nil)
	if err != nil || st != http.StatusOK {
		return fmt.Sprintf("%s: GET bucket: %v %d %s", key, err, st, w.buf.String())
	}
	var doc bucketDoc
	if err := json.Unmarshal(w.buf.Bytes(), &doc); err != nil {
		return fmt.Sprintf("%s: bucket answer %q: %v", key, w.buf.String(), err)
	}
	level, ok1 := new(big.Rat).SetString(doc.Level)
	held, ok2 := new(big.Rat).SetString(doc.Held)
	if !ok1 || !ok2 {
		return fmt.Sprintf("%s: bucket answer %q has no decimal level and held", key, w.buf.String())
	}
	maxLeak := leakBound()
	lo := new(big.Rat).Sub(rat(s.level), maxLeak)
	if doc.PeriodStart != nil && doc.PeriodStart.After(since.Add(-time.Second)) {
		lo.SetInt64(0) // reset during the run
	}
	if w.l.cfg.window != 0 && time.Since(since) >= w.l.cfg.window {
		lo.SetInt64(0) // charges may have aged out of the window
	}
	hi := rat(s.level + s.unsureLevel)
	if level.Cmp(lo) < 0 || level.Cmp(hi) > 0 {
		return fmt.Sprintf("%s: level %s, accepted %d (−%s leak, +%d unsure)", key, doc.Level, s.level, maxLeak.FloatString(12), s.unsureLevel)
	}
	if held.Cmp(rat(s.held)) < 0 || held.Cmp(rat(s.held+s.unsureHeld)) > 0 {
		return fmt.Sprintf("%s: held %s, uncommitted holds %d (+%d unsure)", key, doc.Held, s.held, s.unsureHeld)
	}
	return ""
}

// checkHistory counts one bucket's history entries; "" when they agree.
func (w *worker) checkHistory(ctx context.Context, key string, s *keySum) string {
	n := int64(0)
	cursor := ""
	for {
		u := w.l.limitP + "/buckets/" + url.PathEscape(key) + "/history?limit=1000"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		st, err := w.call(ctx, http.MethodGet, u, nil)
		if err != nil || st != http.StatusOK {
			return fmt.Sprintf("%s: GET history: %v %d %s", key, err, st, w.buf.String())
		}
		var p historyPage
		if err := json.Unmarshal(w.buf.Bytes(), &p); err != nil {
			return fmt.Sprintf("%s: history answer: %v", key, err)
		}
		n += int64(len(p.Items))
		if p.NextCursor == nil || *p.NextCursor == "" {
			break
		}
		cursor = *p.NextCursor
	}
	// Stores keep the newest --history-cap entries per bucket (at least).
	if n < min(s.events, w.l.cfg.historyCap) || n > s.events+s.unsureEvents {
		return fmt.Sprintf("%s: %d history entries, want %d (+%d unsure, at least %d kept)", key, n, s.events, s.unsureEvents, w.l.cfg.historyCap)
	}
	return ""
}

// printVerify writes the verdict: "verify: ok" or every mismatch.
func printVerify(w io.Writer, r verifyReport) {
	switch {
	case r.Skipped != "":
		fmt.Fprintf(w, "verify: skipped (%s)\n", r.Skipped)
	case r.OK:
		fmt.Fprintf(w, "verify: ok (%d of %d keys read back, %d histories counted, level within [accepted − %s, accepted], %d keys with lost answers)\n",
			r.Checked, r.Keys, r.HistoryKeys, r.MaxLeak, r.Unsure)
	default:
		fmt.Fprintf(w, "verify: FAILED, %d mismatches in %d keys read back:\n", len(r.Mismatches), r.Checked)
		for i, m := range r.Mismatches {
			if i == 50 {
				fmt.Fprintf(w, "  … %d more\n", len(r.Mismatches)-50)
				break
			}
			fmt.Fprintln(w, "  "+m)
		}
	}
}
