package http_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// TestIdempotencyFullIs503: when the memory store keeps as many
// Idempotency-Key records as it may, a new key gets 503
// idempotency_store_full and charges nothing; a call without a key and the
// replay of a stored key still answer.
func TestIdempotencyFullIs503(t *testing.T) {
	clock := ledgertest.NewClock()
	a := serve(t, clock, memory.New(memory.WithClock(clock.Now), memory.WithIdempotencyLimits(1, 0)))
	a.limit("l", "10", "1", "1h")
	path := "/v1/limits/l/buckets/k/fillup"
	a.expect("POST", path, `{"cost":"1"}`, 200, "Idempotency-Key", "first")
	r := a.expect("POST", path, `{"cost":"1"}`, 503, "Idempotency-Key", "second")
	if r.str("code") != "idempotency_store_full" {
		t.Fatalf("full: %s", r.raw)
	}
	decEq(t, "level after the refusal", a.expect("GET", "/v1/limits/l/buckets/k", "", 200).str("level"), "1")
	a.expect("POST", path, `{"cost":"1"}`, 200)
	if r := a.expect("POST", path, `{"cost":"1"}`, 200, "Idempotency-Key", "first"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay when full: %v %s", r.header, r.raw)
	}
}
