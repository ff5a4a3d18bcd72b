package http_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// TestIdempotencyBoundPerKey: with authentication on, an API key that has
// filled its share of the memory store's Idempotency-Key records gets 503
// idempotency_store_full for a new key (charging nothing), while another
// key's new Idempotency-Key goes through and the first key's stored keys
// still replay.
func TestIdempotencyBoundPerKey(t *testing.T) {
	clock := ledgertest.NewClock()
	store := memory.New(memory.WithClock(clock.Now), memory.WithIdempotencyCallerLimits(3, 0))
	a, _, _ := authAPI(t, clock, store)
	admin, charge := bearer(adminToken), bearer(chargeToken)
	a.expect("PUT", "/v1/limits/team-a", `{"capacity":"100","leak":{"amount":"1","per":"1h"}}`, 200, admin...)
	path := "/v1/limits/team-a/buckets/k/fillup"
	for _, k := range []string{"a1", "a2", "a3"} {
		a.expect("POST", path, `{"cost":"1"}`, 200, with(charge, "Idempotency-Key", k)...)
	}
	r := a.expect("POST", path, `{"cost":"1"}`, 503, with(charge, "Idempotency-Key", "a4")...)
	if r.str("code") != "idempotency_store_full" {
		t.Fatalf("caller past its share: %s", r.raw)
	}
	decEq(t, "level after the refusal", a.expect("GET", "/v1/limits/team-a/buckets/k", "", 200, admin...).str("level"), "3")
	// Another key is not refused for the first one's records.
	a.expect("POST", path, `{"cost":"1"}`, 200, with(admin, "Idempotency-Key", "b1")...)
	if r := a.expect("POST", path, `{"cost":"1"}`, 200, with(charge, "Idempotency-Key", "a1")...); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of a stored key: %v %s", r.header, r.raw)
	}
	// Calls without a key are not bounded.
	a.expect("POST", path, `{"cost":"1"}`, 200, charge...)
}

// TestIdempotencyBoundPerAddress: with authentication off the share is per
// client address (the TCP peer; X-Forwarded-For, which the caller writes,
// does not move a caller to another share).
func TestIdempotencyBoundPerAddress(t *testing.T) {
	clock := ledgertest.NewClock()
	store := memory.New(memory.WithClock(clock.Now), memory.WithIdempotencyCallerLimits(2, 0))
	h := budgethttp.New(ledger.NewService(store))
	send := func(addr, idemKey string, headers ...string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/v1/limits/l/buckets/k/fillup", strings.NewReader(`{"cost":"1"}`))
		req.RemoteAddr = addr
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", idemKey)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body struct{ Code string }
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec.Code, body.Code
	}
	req := httptest.NewRequest(http.MethodPut, "/v1/limits/l", strings.NewReader(`{"capacity":"100","leak":{"amount":"1","per":"1h"}}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("put limit: %d %s", rec.Code, rec.Body)
	}
	for _, k := range []string{"a1", "a2"} {
		if code, _ := send("192.0.2.1:4000", k); code != 200 {
			t.Fatalf("caller A, key %s: %d", k, code)
		}
	}
	if code, c := send("192.0.2.1:4001", "a3"); code != 503 || c != "idempotency_store_full" {
		t.Fatalf("caller A past its share (another port): %d %s", code, c)
	}
	if code, c := send("192.0.2.1:4002", "a4", "X-Forwarded-For", "198.51.100.7"); code != 503 || c != "idempotency_store_full" {
		t.Fatalf("caller A past its share, with X-Forwarded-For: %d %s", code, c)
	}
	if code, _ := send("198.51.100.7:5000", "b1"); code != 200 {
		t.Fatalf("caller B with a fresh key: %d", code)
	}
}
