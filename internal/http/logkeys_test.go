package http_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// keyQuoting is a store whose failures quote the bucket key, as a store's
// error may: reading a bucket is unavailable (503), charging one fails
// otherwise (500).
type keyQuoting struct{ ledger.Store }

func (keyQuoting) Inspect(_ context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	return ledger.Snapshot{}, fmt.Errorf("read bucket %s/%s: %w", ref.Limit, ref.Key, ledger.ErrUnavailable)
}

func (keyQuoting) Fillup(_ context.Context, items []ledger.Charge, _ ledger.Idempotency) (ledger.FillupOutcome, error) {
	return ledger.FillupOutcome{}, errors.New("cannot scan bucket " + items[0].Bucket.Key)
}

// TestLogsCarryNoKeys: by default a store failure (503) and an unexpected
// error (500) are logged with the route template, and neither they nor the
// access log carry the bucket key — often a user id or an address. With
// WithLogKeys(true) the operator gets the path back.
func TestLogsCarryNoKeys(t *testing.T) {
	const key = "user-4711@example.com"
	for _, logKeys := range []bool{false, true} {
		t.Run(fmt.Sprint("log-keys=", logKeys), func(t *testing.T) {
			clock := ledgertest.NewClock()
			logs := &logBuffer{}
			log := slog.New(slog.NewJSONHandler(logs, nil))
			store := keyQuoting{memory.New(memory.WithClock(clock.Now))}
			h := budgethttp.New(ledger.NewService(store), budgethttp.WithLogger(log), budgethttp.WithAccessLog(logs.accessLog(t)), budgethttp.WithLogKeys(logKeys))
			rec := serveReq(h, "PUT", "/v1/limits/tl", `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`)
			if rec.Code != 200 {
				t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
			}
			if rec := serveReq(h, "GET", "/v1/limits/tl/buckets/"+key, ""); rec.Code != 503 {
				t.Fatalf("GET bucket: %d %s", rec.Code, rec.Body)
			}
			if rec := serveReq(h, "POST", "/v1/limits/tl/buckets/"+key+"/fillup", `{"cost":"1"}`); rec.Code != 500 {
				t.Fatalf("fillup: %d %s", rec.Code, rec.Body)
			}
			out := logs.String()
			for _, want := range []string{
				`"level":"WARN","msg":"store unavailable","method":"GET","route":"/v1/limits/:name/buckets/:key","request_id":"`,
				`"level":"ERROR","msg":"request failed","method":"POST","route":"/v1/limits/:name/buckets/:key/fillup","request_id":"`,
				`"msg":"request","method":"POST","route":"/v1/limits/:name/buckets/:key/fillup","status":500`,
			} {
				if !strings.Contains(out, want) {
					t.Errorf("no %s in the logs:\n%s", want, out)
				}
			}
			if got := strings.Contains(out, key); got != logKeys {
				t.Errorf("key in the logs: %v, want %v:\n%s", got, logKeys, out)
			}
			if logKeys && !strings.Contains(out, `"path":"/v1/limits/tl/buckets/`+key+`/fillup"`) {
				t.Errorf("with log keys on, no path in the logs:\n%s", out)
			}
			if !logKeys && !strings.Contains(out, `"err":"cannot scan bucket <key>"`) {
				t.Errorf("the cause is not logged without the key:\n%s", out)
			}
		})
	}
}
