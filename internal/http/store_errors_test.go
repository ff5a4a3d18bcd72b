package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// failingStore is a memory store whose ListBuckets and Drain fail with err.
type failingStore struct {
	*memory.Store
	err error
}

func (f failingStore) ListBuckets(context.Context, string, string, int) ([]ledger.BucketSnapshot, error) {
	return nil, f.err
}

func (f failingStore) Drain(context.Context, ledger.BucketRef, decimal.Decimal, ledger.Idempotency, ledger.Meta) (ledger.DrainOutcome, error) {
	return ledger.DrainOutcome{}, f.err
}

// TestStoreErrorClasses: a store error that is unavailability is a 503
// store_unavailable (the outcome of a write unknown); any other store error
// — a programming error such as a scan into the wrong type — is a generic
// 500 whose cause is logged, not shown, and never "the store did not
// answer".
func TestStoreErrorClasses(t *testing.T) {
	scan := errors.New(`postgres list buckets: can't scan into dest[2] (col: leak_amount): cannot scan NULL into *string`)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		level  string
	}{
		{"programming error", scan, 500, "internal", "ERROR"},
		{"unavailable", fmt.Errorf("postgres list buckets: dial tcp: connection refused: %w", ledger.ErrUnavailable), 503, "store_unavailable", "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			st := memory.New()
			h := budgethttp.New(ledger.NewService(failingStore{st, tc.err}), budgethttp.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
			if rec := serveReq(h, "PUT", "/v1/limits/spend", `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"}}`, "Content-Type", "application/json"); rec.Code != 200 {
				t.Fatalf("put: %d %s", rec.Code, rec.Body)
			}
			for _, req := range [][2]string{{"GET", "/v1/limits/spend/buckets"}, {"POST", "/v1/limits/spend/buckets/k/drain"}} {
				body := ""
				if req[0] == "POST" {
					body = `{"amount":"1"}`
				}
				rec := serveReq(h, req[0], req[1], body, "Content-Type", "application/json")
				var p struct {
					Status int    `json:"status"`
					Code   string `json:"code"`
					Detail string `json:"detail"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
					t.Fatalf("%s %s: %v: %s", req[0], req[1], err, rec.Body)
				}
				if rec.Code != tc.status || p.Status != tc.status || p.Code != tc.code {
					t.Errorf("%s %s = %d %s, want %d %s", req[0], req[1], rec.Code, p.Code, tc.status, tc.code)
				}
				if strings.Contains(p.Detail, "scan") || strings.Contains(p.Detail, "dial") {
					t.Errorf("%s %s: the cause reached the caller: %q", req[0], req[1], p.Detail)
				}
				if tc.status == 500 && strings.Contains(p.Detail, "did not answer") {
					t.Errorf("%s %s: a programming error reads as an outage: %q", req[0], req[1], p.Detail)
				}
			}
			cause := "cannot scan NULL"
			if tc.status == 503 {
				cause = "connection refused"
			}
			log := logs.String()
			if strings.Count(log, cause) != 2 || !strings.Contains(log, `"level":"`+tc.level+`"`) {
				t.Errorf("the cause is not logged at %s for each request:\n%s", tc.level, log)
			}
		})
	}
}
