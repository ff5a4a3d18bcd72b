package storemetrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"github.com/prometheus/client_golang/prometheus"
)

func TestWrapTimesEveryCall(t *testing.T) {
	st := storemetrics.Wrap(memory.New())
	ctx := context.Background()
	if _, err := st.GetLimit(ctx, "nope"); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("GetLimit: %v", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.History(ctx, ledger.BucketRef{Limit: "nope", Key: "k"}, "", 10); err == nil {
		t.Fatal("history of a missing limit")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collector())
	want := `
budgetd_store_duration_seconds_count{op="get_limit",outcome="not_found"} 1
budgetd_store_duration_seconds_count{op="history",outcome="not_found"} 1
budgetd_store_duration_seconds_count{op="ping",outcome="ok"} 1
`
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range got {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			lines = append(lines, fmt.Sprintf(`budgetd_store_duration_seconds_count{op="%s",outcome="%s"} %d`, l["op"], l["outcome"], m.GetHistogram().GetSampleCount()))
		}
	}
	if strings.Join(lines, "\n") != strings.TrimSpace(want) {
		t.Fatalf("series:\n%s\nwant%s", strings.Join(lines, "\n"), want)
	}
}

func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil: "ok",
		fmt.Errorf("x: %w", ledger.ErrUnavailable): "unavailable",
		context.DeadlineExceeded:                   "unavailable",
		context.Canceled:                           "canceled",
		ledger.ErrIdempotencyInFlight:              "in_flight",
		ledger.ErrIdempotencyKeyReused:             "idempotency_conflict",
		&ledger.InvalidError{Code: "invalid_key"}:  "invalid",
		errors.New("boom"):                         "error",
	} {
		if got := storemetrics.Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %s, want %s", err, got, want)
		}
	}
}
