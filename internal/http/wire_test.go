package http_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	wire "github.com/budgetd/budgetd/api"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/shopspring/decimal"
)

// decodesAs strictly decodes body into a new T (every member known), then
// encodes that T again and demands the server's bytes back: every amount,
// duration, time, null and absent member as the server wrote it.
func decodesAs[T any](t *testing.T, what string, body []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, body)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := again, bytes.TrimSpace(body); !bytes.Equal(got, want) {
		t.Errorf("%s: the api type writes\n%s\nthe server wrote\n%s", what, got, want)
	}
	return v
}

// The server's answers, for every limit kind and on every store, strictly
// decode into the api types and encode back to the same bytes; the api
// request bodies are accepted as they are written.
func TestServerSpeaksTheAPITypes(t *testing.T) {
	eachStoreRaw(t, func(t *testing.T, clock *ledgertest.Clock, store ledger.Store) {
		speaksTheAPITypes(t, store)
	})
}

func speaksTheAPITypes(t *testing.T, store ledger.Store) {
	srv := httptest.NewServer(budgethttp.New(ledger.NewService(store)))
	defer srv.Close()
	call := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, srv.URL+path, r)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	sd := func(n int) *int { return &n }
	off := false
	kinds := map[string]wire.LimitPut{
		"leak":     {Capacity: dec("5000.00"), Leak: &wire.Leak{Amount: dec("5000"), Per: wire.Duration(720 * time.Hour)}},
		"leak-ns":  {Capacity: dec("10"), Leak: &wire.Leak{Amount: dec("1.5"), Per: wire.Duration(90*time.Minute + 1500*time.Microsecond)}, History: &off},
		"month":    {Capacity: dec("5000.00"), Period: &wire.PeriodPut{Every: wire.Month, TZ: "Europe/Berlin"}},
		"quarter":  {Capacity: dec("5000"), Period: &wire.PeriodPut{Every: wire.Quarter, TZ: "America/New_York", StartDay: sd(15)}},
		"week":     {Capacity: dec("7"), Period: &wire.PeriodPut{Every: wire.Week, StartDay: sd(7)}},
		"day":      {Capacity: dec("1"), Period: &wire.PeriodPut{Every: wire.Day, TZ: "Asia/Kolkata"}},
		"year":     {Capacity: dec("1000000000000"), Period: &wire.PeriodPut{Every: wire.Year}},
		"window":   {Capacity: dec("5"), Window: &wire.WindowPut{Length: wire.Duration(time.Minute)}},
		"window-p": {Capacity: dec("10000.00"), Window: &wire.WindowPut{Length: wire.Duration(720 * time.Hour), Precision: wire.Duration(24 * time.Hour)}},
	}
	for name, put := range kinds {
		status, b := call("PUT", "/v1/limits/"+name, put)
		if status != 200 && status != 201 {
			t.Fatalf("PUT %s: %d %s", name, status, b)
		}
		l := decodesAs[wire.Limit](t, "PUT "+name, b)
		if (put.Period != nil) != (l.Kind() == wire.KindPeriod) || (put.Window != nil) != (l.Kind() == wire.KindWindow) {
			t.Errorf("%s: kind %s", name, l.Kind())
		}
		if err := put.Validate(); err != nil {
			t.Errorf("%s: the body budgetd took does not validate: %v", name, err)
		}
		// A document read back may be PUT back as it is.
		if status, b := call("PUT", "/v1/limits/"+name, l); status != 200 {
			t.Errorf("PUT back %s: %d %s", name, status, b)
		}
		_, b = call("GET", "/v1/limits/"+name, nil)
		decodesAs[wire.Limit](t, "GET "+name, b)

		bucket := "/v1/limits/" + name + "/buckets/k"
		_, b = call("GET", bucket, nil)
		decodesAs[wire.BucketState](t, "state "+name, b)
		_, b = call("GET", bucket+"?cost=0.5", nil)
		decodesAs[wire.Decision](t, "CanAccept "+name, b)
		_, b = call("POST", bucket+"/fillup", wire.FillupRequest{Cost: dec("0.25"), Meta: wire.Meta{"order": "A-1"}})
		d := decodesAs[wire.Decision](t, "Fillup "+name, b)
		if (d.ResetsAt != nil) != (put.Period != nil) {
			t.Errorf("%s: resets_at %v", name, d.ResetsAt)
		}
		status, b = call("POST", bucket+"/fillup", wire.FillupRequest{Cost: dec("1000000000000")})
		if status != 429 {
			t.Fatalf("denied Fillup %s: %d %s", name, status, b)
		}
		decodesAs[wire.Decision](t, "denied Fillup "+name, b)
		_, b = call("POST", "/v1/fillup", wire.MultiFillupRequest{Items: []wire.MultiFillupItem{{Limit: name, Key: "k", Cost: dec("0.125"), Meta: wire.Meta{"m": "1"}}, {Limit: name, Key: "{k}j", Cost: dec("0.001")}}})
		decodesAs[wire.MultiFillupResult](t, "multi "+name, b)
		status, b = call("POST", bucket+"/reservations", wire.ReserveRequest{Amount: dec("0.1"), TTL: wire.Duration(time.Minute), Meta: wire.Meta{"job": "x"}})
		if status != 201 {
			t.Fatalf("Reserve %s: %d %s", name, status, b)
		}
		h := decodesAs[wire.Reserved](t, "Reserve "+name, b)
		_, b = call("GET", "/v1/reservations/"+h.ID, nil)
		decodesAs[wire.Reservation](t, "hold "+name, b)
		_, b = call("GET", bucket+"/reservations", nil)
		decodesAs[wire.ReservationList](t, "holds "+name, b)
		amt := dec("0.05")
		_, b = call("POST", "/v1/reservations/"+h.ID+"/commit", wire.CommitRequest{Amount: &amt, Meta: wire.Meta{"rows": "5"}})
		decodesAs[wire.Resolved](t, "Commit "+name, b)
		status, b = call("POST", "/v1/reservations/"+h.ID+"/release", wire.ReleaseRequest{})
		if status != 409 {
			t.Fatalf("Release of a committed hold %s: %d %s", name, status, b)
		}
		p := decodesAs[wire.Problem](t, "refusal "+name, b)
		if p.Code != wire.CodeReservationClosed || p.Reservation == nil {
			t.Errorf("refusal %s: %+v", name, p)
		}
		_, b = call("POST", bucket+"/reservations", wire.ReserveRequest{Amount: dec("0.1")})
		h = decodesAs[wire.Reserved](t, "Reserve "+name, b)
		_, b = call("POST", "/v1/reservations/"+h.ID+"/release", wire.ReleaseRequest{Meta: wire.Meta{"why": "x"}})
		decodesAs[wire.Resolved](t, "Release "+name, b)
		_, b = call("POST", bucket+"/drain", wire.DrainRequest{Amount: dec("0.01"), Meta: wire.Meta{"refund": "r"}})
		decodesAs[wire.Drained](t, "Drain "+name, b)
		_, b = call("GET", bucket+"/history", nil)
		decodesAs[wire.Page[wire.HistoryEntry]](t, "history "+name, b)
		_, b = call("GET", "/v1/limits/"+name+"/buckets?limit=1", nil)
		pg := decodesAs[wire.Page[wire.BucketListItem]](t, "buckets "+name, b)
		if pg.NextCursor == nil {
			t.Errorf("buckets %s: no next page", name)
		}
	}
	_, b := call("GET", "/v1/limits?limit=2", nil)
	decodesAs[wire.Page[wire.Limit]](t, "limits", b)
	status, b := call("PUT", "/v1/limits/bad", wire.LimitPut{Capacity: dec("1"), Period: &wire.PeriodPut{Every: wire.Month, TZ: "Mars/Olympus"}})
	if p := decodesAs[wire.Problem](t, "bad tz", b); status != 400 || p.Code != wire.CodeInvalidRequest || p.Field != "period.tz" {
		t.Errorf("bad tz: %d %+v", status, p)
	}
	_, b = call("GET", "/healthz", nil)
	if !strings.Contains(string(b), "ok") {
		t.Errorf("healthz: %s", b)
	}
	decodesAs[wire.Health](t, "healthz", b)
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }
