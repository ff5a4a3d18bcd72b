package memory_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

// monotonic is a pinned monotonic clock: the time elapsed since its origin.
type monotonic struct {
	mu sync.Mutex
	d  time.Duration
}

func (m *monotonic) elapsed() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.d
}

func (m *monotonic) advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.d += d
}

// TestClockSteps pins a wall clock and a monotonic clock and steps the wall
// clock 30 days forward and back, as an operator or a VM restore would: the
// bucket admits no second capacity after the forward step, is not locked
// out after the correction, leaks exactly the time that really passed, and
// both steps are logged and counted.
func TestClockSteps(t *testing.T) {
	ctx := context.Background()
	wall, mono := ledgertest.NewClock(), &monotonic{}
	var logs bytes.Buffer
	s := memory.New(memory.WithClocks(wall.Now, mono.elapsed), memory.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	svc := ledger.NewService(s)
	// 5,000 per 30 days: a 30-day step would refill it completely.
	if _, err := svc.PutLimit(ctx, "spend", ledger.LimitSpec{Capacity: decimal.NewFromInt(5000), LeakAmount: decimal.NewFromInt(5000), LeakPer: 720 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "spend", Key: "team"}
	fill := func(cost int64) bool {
		t.Helper()
		res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(cost)}}, ledger.Idempotency{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Accepted
	}
	start := wall.Now()
	admitted := int64(0)
	if fill(5000) {
		admitted += 5000
	}

	wall.Advance(30 * 24 * time.Hour) // the wall clock jumps a month ahead
	mono.advance(time.Second)
	for _, cost := range []int64{5000, 100, 1} {
		if fill(cost) {
			admitted += cost
		}
	}
	if admitted != 5000 {
		t.Fatalf("admitted %d after a 30-day step forward, capacity 5000", admitted)
	}
	wall.Advance(-30 * 24 * time.Hour) // and is corrected
	mono.advance(time.Second)
	if fill(1) {
		t.Fatal("admitted more after the correction")
	}
	if steps := counter(t, reg, "budgetd_memory_clock_steps_total"); steps != 2 {
		t.Fatalf("clock steps counted %v, want 2", steps)
	}
	if n := strings.Count(logs.String(), "the wall clock stepped"); n != 2 {
		t.Fatalf("%d step warnings logged, want 2:\n%s", n, logs.String())
	}

	// One hour after the start, the bucket has leaked one hour (6.94…), not
	// zero (locked until the future) and not a month.
	wall.Advance(time.Hour - 2*time.Second)
	mono.advance(time.Hour - 2*time.Second)
	st, err := svc.Bucket(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if want := bucket.MustAmount("4993.055555555556"); !st.Level.Equal(want) {
		t.Fatalf("level an hour after the start = %s, want %s", st.Level, want)
	}
	if !fill(6) || fill(1) {
		t.Fatal("after the steps the bucket admits other than the hour's leak")
	}
	if st, _ := svc.Bucket(ctx, ref); !st.UpdatedAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("updated_at %v, want the start plus the elapsed hour %v", st.UpdatedAt, start.Add(time.Hour))
	}
}

// TestClockNoStepWithoutOne: wall and monotonic clocks that agree are not a
// step, nor is drift within StepTolerance.
func TestClockNoStepWithoutOne(t *testing.T) {
	wall, mono := ledgertest.NewClock(), &monotonic{}
	s := memory.New(memory.WithClocks(wall.Now, mono.elapsed), memory.WithLogger(slog.New(slog.DiscardHandler)))
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	for range 10 {
		wall.Advance(time.Hour + memory.StepTolerance/20)
		mono.advance(time.Hour)
		if _, err := s.Inspect(context.Background(), ledger.BucketRef{Limit: "x", Key: "k"}); err == nil {
			t.Fatal("inspect of an unknown limit")
		}
		s.Ping(context.Background())
	}
	if _, err := s.PutLimit(context.Background(), ledger.Limit{Name: "x", Capacity: decimal.NewFromInt(1), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	if steps := counter(t, reg, "budgetd_memory_clock_steps_total"); steps != 0 {
		t.Fatalf("clock steps counted %v, want 0", steps)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
