package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// TestLimitCounts: GET /v1/limits/{name}/counts answers the exact counts
// at the store's clock (an expired, a committed and a released hold not
// counted, another limit's buckets not counted), with the read scope and
// for a key allowed the limit; an unknown limit is a 404 problem, a bad
// name a 400, a store that did not answer a 503.
func TestLimitCounts(t *testing.T) {
	clock := ledgertest.NewClock()
	const admin, reader, other = "bdg_counts-admin", "bdg_counts-reader", "bdg_counts-other"
	keys := budgethttp.WithAuth(keysOf(t, auth.Line("ops", admin, auth.Admin, nil), auth.Line("dash", reader, auth.Read, nil),
		auth.Line("team", other, auth.Read, []string{"other"})))
	h := budgethttp.New(ledger.NewService(memory.New(memory.WithClock(clock.Now))), keys)
	do := func(token, method, path, body string) (int, string) {
		t.Helper()
		rec := serveReq(h, method, path, body, "Authorization", "Bearer "+token, "Content-Type", "application/json")
		return rec.Code, rec.Body.String()
	}
	must := func(method, path, body string) string {
		t.Helper()
		code, b := do(admin, method, path, body)
		if code != 200 && code != 201 {
			t.Fatalf("%s %s: %d %s", method, path, code, b)
		}
		return b
	}
	holdID := func(body string) string {
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.ID == "" {
			t.Fatalf("reserve: %v %s", err, body)
		}
		return r.ID
	}
	for _, l := range []string{"spend", "other"} {
		must("PUT", "/v1/limits/"+l, `{"capacity":"100","leak":{"amount":"1","per":"1h"}}`)
	}
	for _, k := range []string{"a", "b", "c"} {
		must("POST", "/v1/limits/spend/buckets/"+k+"/fillup", `{"cost":"1"}`)
		must("POST", "/v1/limits/other/buckets/"+k+"/fillup", `{"cost":"1"}`)
	}
	must("POST", "/v1/limits/spend/buckets/a/reservations", `{"amount":"1","ttl":"1m"}`)
	must("POST", "/v1/limits/spend/buckets/d/reservations", `{"amount":"1","ttl":"5s"}`)
	must("POST", "/v1/reservations/"+holdID(must("POST", "/v1/limits/spend/buckets/b/reservations", `{"amount":"1","ttl":"1m"}`))+"/commit", `{}`)
	must("POST", "/v1/reservations/"+holdID(must("POST", "/v1/limits/spend/buckets/c/reservations", `{"amount":"1","ttl":"1m"}`))+"/release", `{}`)
	clock.Advance(5 * time.Second) // d's hold expires now

	code, body := do(reader, "GET", "/v1/limits/spend/counts", "")
	at := clock.Now().Format("2006-01-02T15:04:05.000000Z")
	if want := fmt.Sprintf(`{"buckets":4,"active_holds":1,"at":%q}`, at); code != 200 || body != want+"\n" && body != want {
		t.Errorf("GET counts = %d %s, want 200 %s", code, body, want)
	}
	for _, tc := range []struct {
		token, path string
		status      int
		code        string
	}{
		{reader, "/v1/limits/nope/counts", 404, "limit_not_found"},
		{reader, "/v1/limits/Bad%20Name/counts", 400, "invalid_name"},
		{"", "/v1/limits/spend/counts", 401, ""},
		{other, "/v1/limits/spend/counts", 403, ""},
	} {
		rec := serveReq(h, "GET", tc.path, "", "Authorization", "Bearer "+tc.token)
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != tc.status || p.Status != tc.status ||
			tc.code != "" && p.Code != tc.code || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s = %d %s (%s), want %d %s problem+json", tc.path, rec.Code, rec.Body, rec.Header().Get("Content-Type"), tc.status, tc.code)
		}
	}
	if code, body := do(other, "GET", "/v1/limits/other/counts", ""); code != 200 {
		t.Errorf("GET counts of an allowed limit = %d %s", code, body)
	}

	failing := budgethttp.New(ledger.NewService(countFailing{memory.New(), fmt.Errorf("redis count buckets: %w", ledger.ErrUnavailable)}))
	serveReq(failing, "PUT", "/v1/limits/spend", `{"capacity":"100","leak":{"amount":"1","per":"1h"}}`, "Content-Type", "application/json")
	if rec := serveReq(failing, "GET", "/v1/limits/spend/counts", ""); rec.Code != 503 {
		t.Errorf("GET counts on a store that did not answer = %d %s, want 503", rec.Code, rec.Body)
	}
}

// countFailing is a memory store whose CountBuckets fails with err.
type countFailing struct {
	*memory.Store
	err error
}

func (f countFailing) CountBuckets(context.Context, string) (ledger.LimitCounts, error) {
	return ledger.LimitCounts{}, f.err
}
