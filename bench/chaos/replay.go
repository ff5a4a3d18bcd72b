package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
)

// historyReplay has many clients charge one fast-leaking bucket with history
// for d, then audits its history as an outsider would: in id order the
// times never run back, and replaying the entries with the pure rule
// (internal/bucket) at their recorded times accepts every one, so the level
// never exceeds the capacity; there is one entry per accepted call.
func historyReplay(ctx context.Context, a *api, clients int, d time.Duration) (row result, err error) {
	row.name = "history replay"
	const limit, key = "chaos-replay", "r"
	if _, err := a.do(ctx, http.MethodDelete, "/v1/limits/"+limit, "", nil); err != nil {
		return row, err
	}
	if _, err := a.must(ctx, 200, http.MethodPut, "/v1/limits/"+limit,
		`{"capacity":"100","leak":{"amount":"1","per":"1ms"},"history":true}`); err != nil {
		return row, err
	}
	rule := bucket.Limit{Capacity: bucket.MustAmount("100"), LeakAmount: bucket.MustAmount("1"), LeakPer: time.Millisecond}
	var acc, other atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(stop) {
				ans, err := a.do(ctx, http.MethodPost, "/v1/limits/"+limit+"/buckets/"+key+"/fillup", `{"cost":"1"}`, nil)
				switch {
				case err == nil && ans.status == 200:
					acc.Add(1)
				case err == nil && ans.status == 429:
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	row.calls, row.errors = acc.Load()+other.Load(), other.Load()
	h, err := a.history(ctx, limit, key)
	if err != nil {
		return row, err
	}
	if int64(len(h)) != acc.Load() {
		row.fail("%d history entries for %d accepted calls", len(h), acc.Load())
	}
	type entry struct {
		id int64
		at time.Time
		e  historyEntry
	}
	es := make([]entry, len(h))
	for i, e := range h {
		id, err1 := strconv.ParseInt(e.ID, 10, 64)
		at, err2 := time.Parse(time.RFC3339Nano, e.Time)
		if err1 != nil || err2 != nil {
			row.fail("entry %q at %q: not a numeric id and a time", e.ID, e.Time)
			return row, nil
		}
		es[i] = entry{id, at, e}
	}
	slices.SortFunc(es, func(x, y entry) int { return int(x.id - y.id) })
	backwards := 0
	var st bucket.State
	for i, e := range es {
		if i > 0 && e.at.Before(es[i-1].at) {
			if backwards == 0 {
				row.fail("entry %d at %s follows entry %d at %s: time runs back in id order", e.id, e.e.Time, es[i-1].id, es[i-1].e.Time)
			}
			backwards++
		}
		cost, ok := bucket.ParseAmount(e.e.Amount.String())
		if !ok {
			row.fail("entry %d: amount %s", e.id, e.e.Amount)
			continue
		}
		var dec bucket.Decision
		dec, next := bucket.Fillup(rule, st, e.at, cost)
		if !dec.Accepted {
			row.overAdmitted++
			if row.overAdmitted == 1 {
				row.fail("replayed at its own time, entry %d takes the level to %s, above the capacity 100", e.id, bucket.LevelAt(rule, st, e.at).Add(cost))
			}
			continue
		}
		st = next
	}
	if backwards > 0 {
		row.fail("%d of %d entries carry an earlier time than the entry before them", backwards, len(es))
	}
	row.note = strconv.Itoa(clients) + " clients, " + strconv.Itoa(len(es)) + " entries replayed"
	return row, nil
}

// keyedFrom sends one cost-0 fillup of chaos-idem with a fresh
// Idempotency-Key from the local address ip and returns the status.
func keyedFrom(ctx context.Context, b *budgetd, ip net.IP) (int, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}).DialContext,
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/limits/chaos-idem/buckets/k/fillup", b.port), strings.NewReader(`{"cost":"0"}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "other-caller-"+newKey())
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
