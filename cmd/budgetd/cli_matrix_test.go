package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/budgetd/budgetd/internal/testenv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// cliKind is a limit kind of TestCLIMatrix, one row of cliKinds (client.
// TestMatrix's kinds, lives in package client_test so it is mirrored here,
// plus a quarter from day 15 and a year): the flags of `limits put` and the
// limit document budgetd must answer. drift is how far a level may have
// leaked below its exact value while the row runs (zero for a calendar
// budget, whose level never moves by itself).
type cliKind struct {
	name   string
	flags  []string
	leak   *api.Leak
	window *api.Window
	every  api.Every
	tz     string
	start  *int
	drift  string
	// period is the current period at now of a calendar budget.
	period func(now time.Time) (start, end time.Time)
}

var cliKinds = []cliKind{
	{name: "leak", flags: []string{"--leak", "1/87600h"}, leak: &api.Leak{Amount: decimal.NewFromInt(1), Per: api.Duration(87600 * time.Hour)}, drift: "0.00001"},
	{name: "month", flags: []string{"--period", "month", "--tz", "Europe/Berlin"}, every: api.Month, tz: "Europe/Berlin", start: ptr(1), drift: "0", period: func(now time.Time) (time.Time, time.Time) {
		n := now.In(zone("Europe/Berlin"))
		s := time.Date(n.Year(), n.Month(), 1, 0, 0, 0, 0, n.Location())
		return s, s.AddDate(0, 1, 0)
	}},
	{name: "week", flags: []string{"--period", "week", "--tz", "America/New_York", "--start-day", "7"}, every: api.Week, tz: "America/New_York", start: ptr(7), drift: "0", period: func(now time.Time) (time.Time, time.Time) {
		n := now.In(zone("America/New_York"))
		s := time.Date(n.Year(), n.Month(), n.Day()-int(n.Weekday()), 0, 0, 0, 0, n.Location()) // Sunday, ISO day 7
		return s, s.AddDate(0, 0, 7)
	}},
	{name: "quarter", flags: []string{"--period", "quarter", "--tz", "Australia/Sydney", "--start-day", "15"}, every: api.Quarter, tz: "Australia/Sydney", start: ptr(15), drift: "0", period: func(now time.Time) (time.Time, time.Time) {
		n := now.In(zone("Australia/Sydney"))
		s := time.Date(n.Year(), (n.Month()-1)/3*3+1, 15, 0, 0, 0, 0, n.Location())
		if n.Before(s) {
			s = s.AddDate(0, -3, 0)
		}
		return s, s.AddDate(0, 3, 0)
	}},
	{name: "year", flags: []string{"--period", "year", "--tz", "Asia/Tokyo"}, every: api.Year, tz: "Asia/Tokyo", drift: "0", period: func(now time.Time) (time.Time, time.Time) {
		s := time.Date(now.In(zone("Asia/Tokyo")).Year(), 1, 1, 0, 0, 0, 0, zone("Asia/Tokyo"))
		return s, s.AddDate(1, 0, 0)
	}},
	{name: "window", flags: []string{"--window", "720h"}, window: &api.Window{Length: api.Duration(720 * time.Hour), Precision: api.Duration(time.Hour)}, drift: "0"},
	{name: "day", flags: []string{"--period", "day"}, every: api.Day, tz: "UTC", drift: "0", period: func(now time.Time) (time.Time, time.Time) {
		s := now.UTC().Truncate(24 * time.Hour)
		return s, s.AddDate(0, 0, 1)
	}},
}

func zone(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}

func ptr[T any](v T) *T { return &v }

// cliOut runs one operator command in-process and returns its stdout and
// exit status, and the message of a non-zero exit separately (so --json
// output stays parseable on exit 3).
func cliOut(server string, args ...string) (stdout string, code int, msg string) {
	var out bytes.Buffer
	err := run(context.Background(), args, env(map[string]string{"BUDGETD_SERVER": server}), &out, &out)
	if err != nil {
		return out.String(), exitCode(err), err.Error()
	}
	return out.String(), 0, ""
}

// Every operator command × every limit kind × every store, through the CLI
// against a real budgetd, with the exact values of its --json documents:
// limits put/get/list, check (CanAccept and state), fillup accepted and
// denied (exit 3), reserve -q with commit and with release, drain, holds,
// history with the amount, hold and meta of each event, and limits delete
// (then get → exit 1, limit_not_found); on a second bucket an
// Idempotency-Key replay, denied holds, commit of the held amount, a closed
// hold and history in pages. Periodic kinds answer their exact period_start
// and resets_at, leaky ones null. The CLI has no bucket list command.
func TestCLIMatrix(t *testing.T) {
	stores := map[string]string{"memory": "memory", "postgres": storeURL(t, "BUDGETD_TEST_POSTGRES"), "mysql": testenv.MySQLDatabase(t)}
	for k, v := range redisURLs(t) {
		stores[k] = v
	}
	for store, url := range stores {
		t.Run(store, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--store", url}, env(nil), &stdout, &stderr)
			}()
			server := waitURL(t, &stdout, done)
			t.Cleanup(func() {
				cancel()
				<-done
			})
			suffix := fmt.Sprint(time.Now().UnixNano())
			for _, k := range cliKinds {
				t.Run(k.name, func(t *testing.T) {
					cliMatrixKind(t, server, "cm-"+k.name+"-"+suffix, k)
				})
			}
		})
	}
}

func cliMatrixKind(t *testing.T, server, name string, k cliKind) {
	leak, every, tz, start, drift := k.leak, k.every, k.tz, k.start, decimal.RequireFromString(k.drift)
	periodic := every != ""
	var periodStart, resetsAt time.Time
	if periodic {
		periodStart, resetsAt = k.period(time.Now())
	}
	const key = "{t}team-a"
	// cli runs a command with --json, wants its exit status and decodes
	// its output into v.
	cli := func(wantCode int, v any, args ...string) {
		t.Helper()
		args = append(args, "--json")
		out, code, msg := cliOut(server, args...)
		if code != wantCode {
			t.Fatalf("budgetd %s: exit %d, want %d: %s\n%s", strings.Join(args, " "), code, wantCode, msg, out)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("budgetd %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	// near says whether got is want, or at most drift below it (a leaky
	// bucket's level leaks while the row runs; remaining grows by as much).
	near := func(got, want decimal.Decimal, up bool) bool {
		d := want.Sub(got)
		if up {
			d = d.Neg()
		}
		return d.GreaterThanOrEqual(decimal.Zero) && d.LessThanOrEqual(drift)
	}
	checkDoc := func(what string, gotLevel, gotHeld, gotRemaining, gotCapacity decimal.Decimal, ps, ra *api.Time, level, held string) {
		t.Helper()
		wl, wh := mustDec(t, level), mustDec(t, held)
		wr := decimal.NewFromInt(100).Sub(wl).Sub(wh)
		if !near(gotLevel, wl, false) || !gotHeld.Equal(wh) || !near(gotRemaining, wr, true) || !gotCapacity.Equal(decimal.NewFromInt(100)) {
			t.Errorf("%s: level %s held %s remaining %s capacity %s; want level %s held %s remaining %s capacity 100 (drift %s)", what, gotLevel, gotHeld, gotRemaining, gotCapacity, wl, wh, wr, drift)
		}
		if (ps != nil) != periodic || (ra != nil) != periodic || (periodic && (!ps.Equal(periodStart) || !ra.Equal(resetsAt))) {
			t.Errorf("%s: period_start %v, resets_at %v; want %v", what, ps, ra, map[bool]string{true: fmtTime(periodStart) + " – " + fmtTime(resetsAt), false: "both null"}[periodic])
		}
	}
	decision := func(what string, d api.Decision, accepted bool, level, held string) {
		t.Helper()
		if d.Accepted != accepted || d.NeverFits || (d.RetryAfter != nil) == accepted {
			t.Errorf("%s: accepted %v never_fits %v retry_after %v; want accepted %v", what, d.Accepted, d.NeverFits, d.RetryAfter, accepted)
		}
		checkDoc(what, d.Level, d.Held, d.Remaining, d.Capacity, d.PeriodStart, d.ResetsAt, level, held)
	}
	bucket := func(what string, b api.BucketState, level, held string) {
		t.Helper()
		checkDoc(what, b.Level, b.Held, b.Remaining, b.Capacity, b.PeriodStart, b.ResetsAt, level, held)
	}
	limit := func(what string, l api.Limit) {
		t.Helper()
		ok := l.Name == name && l.Capacity.Equal(decimal.NewFromInt(100)) && l.History
		switch {
		case k.window != nil:
			ok = ok && l.Period == nil && l.Leak == nil && l.Window != nil && *l.Window == *k.window
		case leak != nil:
			ok = ok && l.Period == nil && l.Window == nil && l.Leak != nil && l.Leak.Amount.Equal(leak.Amount) && l.Leak.Per == leak.Per
		default:
			ok = ok && l.Leak == nil && l.Period != nil && l.Period.Every == every && l.Period.TZ == tz && (l.Period.StartDay == nil) == (start == nil) &&
				(start == nil || *l.Period.StartDay == *start)
		}
		if !ok {
			b, _ := json.Marshal(l)
			t.Errorf("%s: %s", what, b)
		}
	}

	var l api.Limit
	cli(0, &l, append([]string{"limits", "put", name, "--capacity", "100"}, k.flags...)...)
	limit("limits put", l)
	l = api.Limit{}
	cli(0, &l, "limits", "get", name)
	limit("limits get", l)
	// The table says when the period resets, "-" for a leaky limit.
	resets := "-"
	if periodic {
		resets = fmtTime(resetsAt)
	}
	for _, args := range [][]string{{"limits", "get", name}, {"check", name, key}} {
		out, code, msg := cliOut(server, args...)
		if code != 0 || !strings.Contains(out, resets) || (periodic && strings.Contains(out, " - ")) {
			t.Errorf("budgetd %s: exit %d %s; want RESETS AT %s:\n%s", strings.Join(args, " "), code, msg, resets, out)
		}
	}
	var ls api.Page[api.Limit]
	cli(0, &ls, "limits", "list")
	found := 0
	for _, x := range ls.Items {
		if x.Name == name {
			found++
			limit("limits list", x)
		}
	}
	if found != 1 || ls.NextCursor != nil {
		t.Errorf("limits list: %d items named %s, next %v", found, name, ls.NextCursor)
	}

	var b api.BucketState
	cli(0, &b, "check", name, key)
	bucket("check (state)", b, "0", "0")
	if b.UpdatedAt != nil {
		t.Errorf("check (state) of a bucket never written: updated_at %v", b.UpdatedAt)
	}
	var d api.Decision
	cli(0, &d, "check", name, key, "1")
	decision("check 1", d, true, "0", "0")

	d = api.Decision{}
	cli(0, &d, "fillup", name, key, "10", "--meta", "op=fillup", "--meta", "order=A-1")
	decision("fillup 10", d, true, "10", "0")
	fillupEntry := d.EntryID
	d = api.Decision{}
	cli(exitDenied, &d, "fillup", name, key, "95", "--meta", "op=denied")
	decision("fillup 95 (denied)", d, false, "10", "0")
	d = api.Decision{}
	cli(exitDenied, &d, "check", name, key, "91")
	decision("check 91 (denied)", d, false, "10", "0")

	out, code, msg := cliOut(server, "reserve", name, key, "5", "--ttl", "1m", "-q", "--meta", "op=reserve")
	hold := strings.TrimSpace(out)
	if code != 0 || hold == "" || strings.ContainsAny(hold, " \n\t") {
		t.Fatalf("reserve -q: exit %d %s, output %q; want only the hold id", code, msg, out)
	}
	var hs api.ReservationList
	cli(0, &hs, "holds", name, key)
	if len(hs.Items) != 1 || hs.Items[0].ID != hold || hs.Items[0].State != api.Active || !hs.Items[0].Amount.Equal(decimal.NewFromInt(5)) ||
		hs.Items[0].Limit != name || hs.Items[0].Key != key || hs.Items[0].CommittedAmount != nil || hs.Items[0].ResolvedAt != nil {
		t.Errorf("holds: %+v; want the one active hold %s of 5", hs.Items, hold)
	}
	b = api.BucketState{}
	cli(0, &b, "check", name, key)
	bucket("check (state) with a hold", b, "10", "5")
	if b.UpdatedAt == nil {
		t.Errorf("check (state) of a written bucket: no updated_at")
	}

	var r api.Resolved
	cli(0, &r, "commit", hold, "4", "--meta", "op=commit")
	if r.ID != hold || r.State != api.Committed || r.CommittedAmount == nil || !r.CommittedAmount.Equal(decimal.NewFromInt(4)) || r.ResolvedAt == nil {
		t.Errorf("commit: %+v", r.Reservation)
	}
	bucket("commit", r.Bucket, "14", "0")

	out, code, msg = cliOut(server, "reserve", name, key, "3", "-q")
	hold2 := strings.TrimSpace(out)
	if code != 0 || hold2 == "" || hold2 == hold {
		t.Fatalf("reserve -q: exit %d %s, output %q", code, msg, out)
	}
	r = api.Resolved{}
	cli(0, &r, "release", hold2, "--meta", "op=release")
	if r.ID != hold2 || r.State != api.Released || r.CommittedAmount != nil || r.ResolvedAt == nil {
		t.Errorf("release: %+v", r.Reservation)
	}
	bucket("release", r.Bucket, "14", "0")

	var dr api.Drained
	cli(0, &dr, "drain", name, key, "2", "--meta", "op=drain")
	drainEntry := dr.EntryID
	if !dr.Removed.Equal(decimal.NewFromInt(2)) || !dr.Accepted {
		t.Errorf("drain: removed %s accepted %v; want 2, true", dr.Removed, dr.Accepted)
	}
	decision("drain", dr.Decision, true, "12", "0")
	hs = api.ReservationList{}
	cli(0, &hs, "holds", name, key)
	if len(hs.Items) != 0 {
		t.Errorf("holds after commit and release: %+v", hs.Items)
	}

	var es api.Page[api.HistoryEntry]
	cli(0, &es, "history", name, key)
	type ev struct {
		event  api.Event
		amount string
		hold   string
		meta   string
	}
	want := []ev{ // newest first; a denial writes nothing (no record_denials)
		{api.EventDrain, "2", "", "op=drain"},
		{api.EventReleased, "3", hold2, "op=release"},
		{api.EventReserved, "3", hold2, "-"},
		{api.EventCommitted, "4", hold, "op=commit"},
		{api.EventReserved, "5", hold, "op=reserve"},
		{api.EventFillup, "10", "", "op=fillup,order=A-1"},
	}
	var got []ev
	for _, e := range es.Items {
		got = append(got, ev{e.Event, e.Amount.String(), e.ReservationID, metaText(e.Meta)})
		if e.ID == "" || e.Time.IsZero() {
			t.Errorf("history entry without id or time: %+v", e)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || es.NextCursor != nil {
		t.Errorf("history:\n got %v\nwant %v (next %v)", got, want, es.NextCursor)
	}
	// fillup and drain --json name the entries they wrote.
	if len(es.Items) == len(want) && (fillupEntry == nil || *fillupEntry != es.Items[len(want)-1].ID || drainEntry == nil || *drainEntry != es.Items[0].ID) {
		t.Errorf("entry_id: fillup %v, drain %v; history ids %s (fillup), %s (drain)", fillupEntry, drainEntry, es.Items[len(want)-1].ID, es.Items[0].ID)
	}

	// A second bucket: an Idempotency-Key replay, denied and never-fitting
	// holds, commit of the held amount, a closed hold, paging history.
	const keyB = "{t}team-b"
	for i := 0; i < 2; i++ {
		d = api.Decision{}
		cli(0, &d, "fillup", name, keyB, "7", "--idempotency-key", "idem-"+name, "--meta", "op=idem")
		decision(fmt.Sprintf("fillup with an Idempotency-Key, call %d", i+1), d, true, "7", "0")
	}
	d = api.Decision{}
	cli(exitDenied, &d, "check", name, keyB, "101")
	if d.Accepted || !d.NeverFits || d.RetryAfter != nil {
		t.Errorf("check 101: accepted %v never_fits %v retry_after %v; want a denial that never fits", d.Accepted, d.NeverFits, d.RetryAfter)
	}
	for _, amount := range []string{"101", "94"} {
		out, code, msg := cliOut(server, "reserve", name, keyB, amount, "-q")
		if code != exitDenied || out != "" {
			t.Errorf("reserve %s -q: exit %d %s, output %q; want exit 3 and no hold id", amount, code, msg, out)
		}
	}
	out, code, msg = cliOut(server, "reserve", name, keyB, "6", "-q", "--meta", "op=reserve-b")
	hold3 := strings.TrimSpace(out)
	if code != 0 || hold3 == "" {
		t.Fatalf("reserve -q: exit %d %s, output %q", code, msg, out)
	}
	r = api.Resolved{}
	cli(0, &r, "commit", hold3)
	if r.State != api.Committed || r.CommittedAmount == nil || !r.CommittedAmount.Equal(decimal.NewFromInt(6)) {
		t.Errorf("commit without AMOUNT: %+v; want the held 6 charged", r.Reservation)
	}
	bucket("commit without AMOUNT", r.Bucket, "13", "0")
	for _, args := range [][]string{{"commit", hold3, "1"}, {"release", hold3}} {
		out, code, msg := cliOut(server, args...)
		if code != exitProblem || !strings.Contains(msg, string(api.CodeReservationClosed)) {
			t.Errorf("budgetd %s of a committed hold: exit %d %q\n%s; want 1 and reservation_closed", strings.Join(args, " "), code, msg, out)
		}
	}
	var all, page api.Page[api.HistoryEntry]
	cli(0, &all, "history", name, keyB)
	cli(0, &page, "history", name, keyB, "--limit", "1")
	if len(page.Items) != 1 || page.NextCursor == nil || len(all.Items) != 3 || page.Items[0].ID != all.Items[0].ID {
		t.Fatalf("history --limit 1: %+v next %v; all %+v", page.Items, page.NextCursor, all.Items)
	}
	rest := api.Page[api.HistoryEntry]{}
	cli(0, &rest, "history", name, keyB, "--limit", "10", "--cursor", *page.NextCursor)
	got = nil
	for _, e := range append(page.Items, rest.Items...) {
		got = append(got, ev{e.Event, e.Amount.String(), e.ReservationID, metaText(e.Meta)})
	}
	want = []ev{ // one fillup for the two calls with one Idempotency-Key
		{api.EventCommitted, "6", hold3, "-"},
		{api.EventReserved, "6", hold3, "op=reserve-b"},
		{api.EventFillup, "7", "", "op=idem"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || rest.NextCursor != nil {
		t.Errorf("history of %s in pages:\n got %v\nwant %v (next %v)", keyB, got, want, rest.NextCursor)
	}

	var del map[string]string
	cli(0, &del, "limits", "delete", name)
	if del["deleted"] != name {
		t.Errorf("limits delete: %v", del)
	}
	out, code, msg = cliOut(server, "limits", "get", name)
	if code != exitProblem || !strings.Contains(msg, string(api.CodeLimitNotFound)) {
		t.Errorf("limits get after delete: exit %d %q\n%s; want 1 and limit_not_found", code, msg, out)
	}
	out, code, msg = cliOut(server, "fillup", name, key, "1")
	if code != exitProblem || !strings.Contains(msg, string(api.CodeLimitNotFound)) {
		t.Errorf("fillup after delete: exit %d %q\n%s; want 1 and limit_not_found", code, msg, out)
	}
}

func mustDec(t *testing.T, s string) decimal.Decimal {
	t.Helper()
	d, err := decimal.NewFromString(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
