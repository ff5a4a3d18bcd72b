package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// windowAdmission is the over-admission run for rolling windows: many
// clients charge one bucket of a 2-second window (slots of 100ms) for d, so
// that slots age out and capacity comes back many times under contention,
// and a multi-bucket pair of windows (per user and per team) likewise. Then
// it audits the history as an outsider would, by the store's own times: in
// every span of the window's length the accepted charges sum to at most the
// capacity, and there is one entry per accepted call.
func windowAdmission(ctx context.Context, a *api, clients int, d time.Duration) (row result, err error) {
	row.name = "over-admission (window)"
	const length, capacity, team, user = 2 * time.Second, 50, 40, 5
	for name, c := range map[string]int{"chaos-win": capacity, "chaos-win-team": team, "chaos-win-user": user} {
		if _, err := a.do(ctx, http.MethodDelete, "/v1/limits/"+name, "", nil); err != nil {
			return row, err
		}
		if _, err := a.must(ctx, 200, http.MethodPut, "/v1/limits/"+name,
			fmt.Sprintf(`{"capacity":"%d","window":{"length":"2s","precision":"100ms"},"history":true}`, c)); err != nil {
			return row, err
		}
	}
	const users = 10
	var acc, multi, other atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			path, body := "/v1/limits/chaos-win/buckets/hot/fillup", `{"cost":"1"}`
			counter := &acc
			if i%2 == 1 {
				path = "/v1/fillup"
				body = fmt.Sprintf(`{"items":[{"limit":"chaos-win-user","key":"u%d","cost":"1"},{"limit":"chaos-win-team","key":"team","cost":"1"}]}`, i/2%users)
				counter = &multi
			}
			for ctx.Err() == nil && time.Now().Before(stop) {
				ans, err := a.do(ctx, http.MethodPost, path, body, nil)
				switch {
				case err == nil && ans.status == 200:
					counter.Add(1)
				case err == nil && ans.status == 429:
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	row.calls, row.errors = acc.Load()+multi.Load()+other.Load(), other.Load()
	audit := func(limit, key string, capacity int) (int, error) {
		h, err := a.history(ctx, limit, key)
		if err != nil {
			return 0, err
		}
		at := make([]time.Time, 0, len(h))
		for _, e := range h {
			t, err := time.Parse(time.RFC3339Nano, e.Time)
			if err != nil || e.Event != "fillup" || e.Amount.IntPart() != 1 {
				row.fail("%s/%s: entry %+v", limit, key, e)
				continue
			}
			at = append(at, t)
		}
		slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
		worst := 0
		for i := range at {
			j, _ := slices.BinarySearchFunc(at[i:], at[i].Add(length), func(x, t time.Time) int { return x.Compare(t) })
			worst = max(worst, j)
		}
		if worst > capacity {
			row.fail("%s/%s: %d accepted within %s, capacity %d", limit, key, worst, length, capacity)
			row.overAdmitted += int64(worst - capacity)
		}
		return len(at), nil
	}
	n, err := audit("chaos-win", "hot", capacity)
	if err != nil {
		return row, err
	}
	if int64(n) != acc.Load() {
		row.fail("hot key: %d history entries for %d accepted calls", n, acc.Load())
	}
	n, err = audit("chaos-win-team", "team", team)
	if err != nil {
		return row, err
	}
	if int64(n) != multi.Load() {
		row.fail("team: %d history entries for %d accepted multi-bucket calls", n, multi.Load())
	}
	perUser := 0
	for u := range users {
		m, err := audit("chaos-win-user", fmt.Sprintf("u%d", u), user)
		if err != nil {
			return row, err
		}
		perUser += m
	}
	if int64(perUser) != multi.Load() {
		row.fail("users: %d history entries for %d accepted multi-bucket calls", perUser, multi.Load())
	}
	row.note = fmt.Sprintf("%d clients for %s; hot key %d accepted (capacity %d per 2s), multi-bucket %d", clients, d, acc.Load(), capacity, multi.Load())
	return row, nil
}
