package storemetrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

// TestListingsTimed: "who is near the cap" reaches the store through its
// optional interfaces (a count, a scan ranking by use, the index of marks)
// and the wrapper times each, as it times the calls of ledger.Store.
func TestListingsTimed(t *testing.T) {
	st := storemetrics.Wrap(memory.New())
	svc := ledger.NewService(st)
	ctx := context.Background()
	half, err := ledger.ParseThreshold("thresholds", "50%")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutLimit(ctx, "team", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1),
		LeakPer: time.Hour, Thresholds: []ledger.Threshold{half}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "team", Key: k}, Cost: decimal.NewFromInt(6)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := svc.Counts(ctx, "team"); err != nil || c.Buckets != 2 {
		t.Fatalf("Counts = %+v, %v; want 2 buckets", c, err)
	}
	for _, q := range []ledger.BucketQuery{{Order: ledger.OrderUsed}, {Above: "50%"}} {
		if got, _, err := svc.QueryBuckets(ctx, "team", q, "", 10); err != nil || len(got) != 2 {
			t.Fatalf("QueryBuckets(%+v) = %d buckets, %v; want 2", q, len(got), err)
		}
	}
	for _, op := range []string{"count_buckets", "scan_buckets", "list_marked"} {
		if n := samples(t, st, op); n != 1 {
			t.Errorf("%s timed %d times, want 1", op, n)
		}
	}
}

// TestOptionalFollowsTheWrappedStore: the wrapper serves an optional
// interface only when the store it wraps does, so that a store without a
// count answers ErrNotServed and one without a ranking is ranked by
// budgetd, as they are unwrapped.
func TestOptionalFollowsTheWrappedStore(t *testing.T) {
	st := storemetrics.Wrap(&recorder{calls: map[string][]any{}})
	if _, ok := ledger.CounterOf(st); ok {
		t.Error("the wrapper of a store without a count is a Counter")
	}
	if _, ok := ledger.As[ledger.RankedLister](st); ok {
		t.Error("the wrapper of a store without a ranking is a RankedLister")
	}
	if _, err := ledger.NewService(st).Counts(context.Background(), "team"); !errors.Is(err, ledger.ErrNotServed) {
		t.Errorf("Counts on a store without a count: %v, want ErrNotServed", err)
	}
	ranked := storemetrics.Wrap(&rankRecorder{recorder{calls: map[string][]any{}}})
	rl, ok := ledger.As[ledger.RankedLister](ranked)
	if !ok || rl != ledger.RankedLister(ranked) {
		t.Fatalf("As[RankedLister] of a wrapped ranking store = %T, %v; want the wrapper", rl, ok)
	}
	if _, err := rl.RankBuckets(context.Background(), "team", ledger.RankQuery{Order: ledger.OrderShare, N: 3}); err != nil {
		t.Fatal(err)
	}
	if n := samples(t, ranked, "rank_buckets"); n != 1 {
		t.Errorf("rank_buckets timed %d times, want 1", n)
	}
}

// rankRecorder is a recorder that ranks.
type rankRecorder struct{ recorder }

func (r *rankRecorder) RankBuckets(ctx context.Context, limit string, q ledger.RankQuery) (ledger.Ranking, error) {
	r.rec("RankBuckets", ctx, limit, q)
	return ledger.Ranking{}, nil
}

func (r *rankRecorder) ReadBuckets(ctx context.Context, limit string, keys []string, now time.Time) ([]ledger.BucketSnapshot, error) {
	r.rec("ReadBuckets", ctx, limit, keys, now)
	return nil, nil
}

// samples is how many calls of op st timed, whatever their outcome.
func samples(t *testing.T, st *storemetrics.Store, op string) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					n += int(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return n
}
