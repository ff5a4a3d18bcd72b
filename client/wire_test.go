package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// A monthly cap in Berlin and a leaky limit round-trip through a real
// budgetd on every store: created, read, listed together, resized, and their
// buckets carry the period's bounds (the periodic one) or none (the leaky
// one).
func TestEveryLimitKindRoundTrips(t *testing.T) {
	eachStore(t, everyLimitKindRoundTrips)
}

func everyLimitKindRoundTrips(t *testing.T, c *client.Client) {
	ctx := context.Background()
	monthly, err := c.PutLimit(ctx, "team-spend", client.LimitSpec{Capacity: dec("5000.00"), Period: &client.Period{Every: api.Month, TZ: "Europe/Berlin"}})
	if err != nil || monthly.Kind() != api.KindPeriod || monthly.Leak != nil || monthly.Period.Every != api.Month || monthly.Period.TZ != "Europe/Berlin" || monthly.Period.StartDay == nil || *monthly.Period.StartDay != 1 || !monthly.Capacity.Equal(dec("5000")) {
		t.Fatalf("PutLimit monthly: %+v %v", monthly, err)
	}
	weekly, err := c.PutLimit(ctx, "weekly", client.LimitSpec{Capacity: dec("7"), Period: &client.Period{Every: api.Week, StartDay: 3}})
	if err != nil || weekly.Period.TZ != "UTC" || weekly.Period.StartDay == nil || *weekly.Period.StartDay != 3 {
		t.Fatalf("PutLimit weekly: %+v %v", weekly, err)
	}
	leaky, err := c.PutLimit(ctx, "rows", client.LimitSpec{Capacity: dec("10"), Leak: &client.Leak{Amount: dec("1.5"), Per: 90 * time.Minute}})
	if err != nil || leaky.Kind() != api.KindLeak || leaky.Period != nil || leaky.Leak.Per != api.Duration(90*time.Minute) || !leaky.Leak.Amount.Equal(dec("1.5")) {
		t.Fatalf("PutLimit leaky: %+v %v", leaky, err)
	}
	got, err := c.GetLimit(ctx, "team-spend")
	if err != nil || got.Period == nil || got.Period.TZ != "Europe/Berlin" {
		t.Fatalf("GetLimit: %+v %v", got, err)
	}
	ls, next, err := c.ListLimits(ctx, "", 0)
	if err != nil || next != "" || len(ls) != 3 || ls[0].Name != "rows" || ls[0].Leak == nil || ls[1].Period == nil || ls[2].Period.Every != api.Week {
		t.Fatalf("ListLimits: %+v %q %v", ls, next, err)
	}
	// Resize the cap and turn its history off: still monthly.
	off := false
	if got, err = c.PutLimit(ctx, "team-spend", client.LimitSpec{Capacity: dec("6000"), Period: &client.Period{Every: api.Month, TZ: "Europe/Berlin"}, History: &off}); err != nil || !got.Capacity.Equal(dec("6000")) || got.History || got.Period == nil {
		t.Fatalf("resize: %+v %v", got, err)
	}

	d, err := c.Fillup(ctx, "team-spend", "team-a", dec("12.37"))
	if err != nil || !d.Accepted || d.PeriodStart == nil || d.ResetsAt == nil || !d.ResetsAt.After(d.PeriodStart.Time) {
		t.Fatalf("Fillup monthly: %+v %v", d, err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if s := d.PeriodStart.In(berlin); s.Day() != 1 || s.Hour() != 0 || s.Minute() != 0 {
		t.Errorf("period starts %v, not at midnight of the 1st in Berlin", s)
	}
	b, err := c.Bucket(ctx, "team-spend", "team-a")
	if err != nil || b.ResetsAt == nil || !b.ResetsAt.Equal(d.ResetsAt.Time) || !b.Level.Equal(dec("12.37")) {
		t.Fatalf("Bucket monthly: %+v %v", b, err)
	}
	if d, err = c.CanAccept(ctx, "team-spend", "team-a", dec("6000")); err != nil || d.Accepted || d.ResetsAt == nil || d.RetryAfterDuration() <= 0 {
		t.Fatalf("CanAccept monthly: %+v %v", d, err)
	}
	bs, _, err := c.ListBuckets(ctx, "team-spend", "", 0)
	if err != nil || len(bs) != 1 || bs[0].Key != "team-a" || bs[0].ResetsAt == nil {
		t.Fatalf("ListBuckets monthly: %+v %v", bs, err)
	}
	if d, err = c.Fillup(ctx, "rows", "r", dec("1")); err != nil || !d.Accepted || d.PeriodStart != nil || d.ResetsAt != nil {
		t.Fatalf("Fillup leaky: %+v %v", d, err)
	}
	if b, err = c.Bucket(ctx, "rows", "r"); err != nil || b.ResetsAt != nil || b.UpdatedAt == nil {
		t.Fatalf("Bucket leaky: %+v %v", b, err)
	}
}

// Every call that takes meta sends it: Fillup, each multi-bucket item,
// Reserve, Commit, Release and Drain.
func TestMetaOnEveryCall(t *testing.T) {
	ctx := context.Background()
	real, _ := startBudgetd()
	defer real.Close()
	target, _ := url.Parse(real.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	sent := map[string]api.Meta{} // last path element → meta sent
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			var body struct {
				Meta  api.Meta `json:"meta"`
				Items []struct {
					Meta api.Meta `json:"meta"`
				} `json:"items"`
			}
			if err := json.Unmarshal(b, &body); err != nil {
				t.Errorf("%s: %v", r.URL.Path, err)
			}
			mu.Lock()
			for i, it := range body.Items {
				sent["item"+string(rune('0'+i))] = it.Meta
			}
			if body.Meta != nil {
				sent[r.URL.Path[bytes.LastIndexByte([]byte(r.URL.Path), '/')+1:]] = body.Meta
			}
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	c, err := client.New(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutLimit(ctx, "spend", client.LimitSpec{Capacity: dec("100"), Period: &client.Period{Every: api.Day}}); err != nil {
		t.Fatal(err)
	}
	m := func(v string) client.CallOption { return client.Meta(map[string]string{"why": v}) }
	if _, err := c.Fillup(ctx, "spend", "k", dec("1"), m("fillup")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FillupMany(ctx, []client.Item{{Limit: "spend", Key: "a", Cost: dec("1"), Meta: map[string]string{"why": "own"}}, {Limit: "spend", Key: "b", Cost: dec("1")}}, m("call")); err != nil {
		t.Fatal(err)
	}
	h1, _, err := c.Reserve(ctx, "spend", "k", dec("2"), time.Minute, m("reservations"))
	if err != nil || h1 == nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := c.Commit(ctx, h1.ID, nil, false, m("commit")); err != nil {
		t.Fatal(err)
	}
	h2, _, err := c.Reserve(ctx, "spend", "k", dec("2"), 0)
	if err != nil || h2 == nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := c.Release(ctx, h2.ID, m("release")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Drain(ctx, "spend", "k", dec("1"), m("drain")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"fillup": "fillup", "item0": "own", "item1": "call", "reservations": "reservations", "commit": "commit", "release": "release", "drain": "drain"}
	mu.Lock()
	defer mu.Unlock()
	for k, v := range want {
		if sent[k]["why"] != v {
			t.Errorf("%s sent meta %v, want why=%s", k, sent[k], v)
		}
	}
	es, _, err := c.History(ctx, "spend", "k", "", 10)
	if err != nil || len(es) == 0 || es[len(es)-1].Event != api.EventFillup || es[len(es)-1].Meta["why"] != "fillup" {
		t.Fatalf("History: %+v %v", es, err)
	}
}

// Input budgetd would refuse is refused before anything is sent, naming its
// field, whatever the limit kind.
func TestSpecsRefusedBeforeSending(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	ctx := context.Background()
	eight := 8
	for _, tc := range []struct {
		name  string
		spec  client.LimitSpec
		code  api.Code
		field string
	}{
		{"neither", client.LimitSpec{Capacity: dec("1")}, api.CodeInvalidRequest, "leak"},
		{"both", client.LimitSpec{Capacity: dec("1"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}, Period: &client.Period{Every: api.Day}}, api.CodeInvalidRequest, "leak"},
		{"zero per", client.LimitSpec{Capacity: dec("1"), Leak: &client.Leak{Amount: dec("1")}}, api.CodeInvalidDuration, "leak.per"},
		{"nanosecond per", client.LimitSpec{Capacity: dec("1"), Leak: &client.Leak{Amount: dec("1"), Per: time.Millisecond + 1}}, api.CodeInvalidDuration, "leak.per"},
		{"zero leak", client.LimitSpec{Capacity: dec("1"), Leak: &client.Leak{Per: time.Hour}}, api.CodeInvalidAmount, "leak.amount"},
		{"zero capacity", client.LimitSpec{Capacity: dec("0"), Period: &client.Period{Every: api.Day}}, api.CodeInvalidAmount, "capacity"},
		{"fortnight", client.LimitSpec{Capacity: dec("1"), Period: &client.Period{Every: "fortnight"}}, api.CodeInvalidRequest, "period.every"},
		{"week day 8", client.LimitSpec{Capacity: dec("1"), Period: &client.Period{Every: api.Week, StartDay: eight}}, api.CodeInvalidRequest, "period.start_day"},
		{"month day 29", client.LimitSpec{Capacity: dec("1"), Period: &client.Period{Every: api.Month, StartDay: 29}}, api.CodeInvalidRequest, "period.start_day"},
		{"year start day", client.LimitSpec{Capacity: dec("1"), Period: &client.Period{Every: api.Year, StartDay: 2}}, api.CodeInvalidRequest, "period.start_day"},
	} {
		_, err := c.PutLimit(ctx, "l", tc.spec)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 0 || e.Code != tc.code || e.Field != tc.field {
			t.Errorf("%s: %#v", tc.name, err)
		}
	}
	if _, err := c.PutLimit(ctx, "Bad Name", client.LimitSpec{Capacity: dec("1"), Period: &client.Period{Every: api.Day}}); !client.IsCode(err, api.CodeInvalidName) {
		t.Errorf("bad name: %v", err)
	}
	big := map[string]string{}
	for i := range 17 {
		big[string(rune('a'+i))] = "x"
	}
	for name, call := range map[string]func() error{
		"fillup":  func() error { _, err := c.Fillup(ctx, "l", "k", dec("1"), client.Meta(big)); return err },
		"drain":   func() error { _, err := c.Drain(ctx, "l", "k", dec("1"), client.Meta(big)); return err },
		"reserve": func() error { _, _, err := c.Reserve(ctx, "l", "k", dec("1"), 0, client.Meta(big)); return err },
		"commit":  func() error { _, err := c.Commit(ctx, "h", nil, false, client.Meta(big)); return err },
		"release": func() error { _, err := c.Release(ctx, "h", client.Meta(big)); return err },
	} {
		var e *client.Error
		if err := call(); !errors.As(err, &e) || e.Field != "meta" || e.Status != 0 {
			t.Errorf("%s with 17 meta entries: %v", name, err)
		}
	}
	if _, err := c.Fillup(ctx, "l", "k", dec("1"), client.Meta(map[string]string{"note": "a\x00b"})); !client.IsCode(err, api.CodeInvalidRequest) {
		t.Errorf("meta with NUL: %v", err)
	}
	// Tabs and line breaks are allowed: this one is sent.
	c.Fillup(ctx, "l", "k", dec("1"), client.Meta(map[string]string{"note": "line\nline\ttab"}))
	if calls.Load() != 1 {
		t.Errorf("meta with a line break was not sent")
	}
	calls.Store(0)
	_, err := c.FillupMany(ctx, []client.Item{{Limit: "l", Key: "k", Cost: dec("1")}, {Limit: "l", Key: "", Cost: dec("1")}})
	var e *client.Error
	if !errors.As(err, &e) || e.Field != "items[1].key" || e.Code != api.CodeInvalidKey {
		t.Errorf("FillupMany empty key: %v", err)
	}
	if _, err := c.Fillup(ctx, "l", "", dec("1")); !client.IsCode(err, api.CodeInvalidKey) {
		t.Errorf("Fillup of an empty key: %v", err)
	}
	if _, err := c.Bucket(ctx, "Not A Name", "k"); !client.IsCode(err, api.CodeInvalidName) {
		t.Errorf("Bucket of a bad name: %v", err)
	}
	if _, _, err := c.Reserve(ctx, "l", "k\x00", dec("1"), 0); !client.IsCode(err, api.CodeInvalidKey) {
		t.Errorf("Reserve of a key with NUL: %v", err)
	}
	if _, err := c.FillupMany(ctx, nil); !client.IsCode(err, api.CodeInvalidRequest) {
		t.Errorf("FillupMany of nothing: %v", err)
	}
	if calls.Load() != 0 {
		t.Fatalf("%d requests sent", calls.Load())
	}
}

// An answer that is not the document budgetd sends is ErrBadAnswer, not an
// outage of the network kind.
func TestAnswerNotUnderstood(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"x","capacity":"lots","leak":null}`))
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	_, err := c.GetLimit(context.Background(), "x")
	if !errors.Is(err, client.ErrBadAnswer) {
		t.Fatalf("GetLimit of a bad document: %v", err)
	}
}

// A refusal about a hold carries the hold.
func TestRefusalCarriesTheHold(t *testing.T) {
	ctx := context.Background()
	c, _ := newBudgetd(t)
	if _, err := c.PutLimit(ctx, "spend", client.LimitSpec{Capacity: dec("10"), Period: &client.Period{Every: api.Month}}); err != nil {
		t.Fatal(err)
	}
	h, _, err := c.Reserve(ctx, "spend", "k", dec("2"), 0)
	if err != nil || h == nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := c.Release(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Commit(ctx, h.ID, nil, false)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != api.CodeReservationClosed || e.Status != 409 || e.Reservation == nil || e.Reservation.State != api.Released {
		t.Fatalf("commit after release: %#v", err)
	}
}
