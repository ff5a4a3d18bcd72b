package storemetrics_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"github.com/shopspring/decimal"
)

// recorder is a ledger.Store that records the arguments of every call.
type recorder struct{ calls map[string][]any }

func (r *recorder) rec(name string, args ...any) { r.calls[name] = args }

func (r *recorder) PutLimit(ctx context.Context, l ledger.Limit) (ledger.Limit, error) {
	r.rec("PutLimit", ctx, l)
	return ledger.Limit{}, nil
}
func (r *recorder) GetLimit(ctx context.Context, name string) (ledger.Limit, error) {
	r.rec("GetLimit", ctx, name)
	return ledger.Limit{}, nil
}
func (r *recorder) ListLimits(ctx context.Context, after string, n int) ([]ledger.Limit, error) {
	r.rec("ListLimits", ctx, after, n)
	return nil, nil
}
func (r *recorder) DeleteLimit(ctx context.Context, name string) error {
	r.rec("DeleteLimit", ctx, name)
	return nil
}
func (r *recorder) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	r.rec("Inspect", ctx, ref)
	return ledger.Snapshot{}, nil
}
func (r *recorder) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	r.rec("Fillup", ctx, items, idem)
	return ledger.FillupOutcome{}, nil
}
func (r *recorder) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	r.rec("Drain", ctx, ref, amount, idem, meta)
	return ledger.DrainOutcome{}, nil
}
func (r *recorder) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	r.rec("Reserve", ctx, ref, amount, ttl, idem, meta)
	return ledger.ReserveOutcome{}, nil
}
func (r *recorder) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	r.rec("Commit", ctx, id, amount, overrun, idem, meta)
	return ledger.ResolveOutcome{}, nil
}
func (r *recorder) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	r.rec("Release", ctx, id, idem, meta)
	return ledger.ResolveOutcome{}, nil
}
func (r *recorder) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	r.rec("Reservation", ctx, id)
	return ledger.Reservation{}, time.Time{}, nil
}
func (r *recorder) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	r.rec("History", ctx, ref, cursor, n)
	return nil, "", nil
}
func (r *recorder) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	r.rec("ListBuckets", ctx, limit, after, n)
	return nil, nil
}
func (r *recorder) ListHolds(ctx context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	r.rec("ListHolds", ctx, ref)
	return nil, nil
}
func (r *recorder) Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	r.rec("Events", ctx, cursor, n)
	return nil, cursor, nil
}
func (r *recorder) BucketEvents(ctx context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error) {
	r.rec("BucketEvents", ctx, ref, n)
	return nil, nil
}
func (r *recorder) Ping(ctx context.Context) error { r.rec("Ping", ctx); return nil }
func (r *recorder) Close() error                   { r.rec("Close"); return nil }

type ctxKey struct{}

// TestWrapPassesEveryArgument: every method of ledger.Store, called on the
// wrapper, reaches the wrapped store with each of its arguments as given
// (the wrapper once dropped the meta of Drain, Reserve, Commit and Release,
// so that budgetd stored none while the tests of the stores passed).
func TestWrapPassesEveryArgument(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "this call")
	sample := map[reflect.Type]any{
		reflect.TypeFor[context.Context]():     ctx,
		reflect.TypeFor[string]():              "s-1",
		reflect.TypeFor[int]():                 7,
		reflect.TypeFor[bool]():                true,
		reflect.TypeFor[time.Duration]():       90 * time.Second,
		reflect.TypeFor[decimal.Decimal]():     decimal.RequireFromString("1.25"),
		reflect.TypeFor[decimal.NullDecimal](): decimal.NewNullDecimal(decimal.RequireFromString("2.5")),
		reflect.TypeFor[ledger.BucketRef]():    ledger.BucketRef{Limit: "l", Key: "k"},
		reflect.TypeFor[ledger.Idempotency]():  ledger.Idempotency{Scope: "sc", Key: "key", Hash: "h"},
		reflect.TypeFor[ledger.Meta]():         ledger.Meta{"order": "A-1"},
		reflect.TypeFor[ledger.Limit]():        ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(5), Period: &ledger.Period{Every: "day", TZ: "UTC"}},
		reflect.TypeFor[[]ledger.Charge]():     []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "l", Key: "k"}, Cost: decimal.NewFromInt(1), Meta: ledger.Meta{"a": "b"}}},
	}
	rec := &recorder{calls: map[string][]any{}}
	wrapped := reflect.ValueOf(storemetrics.Wrap(rec))
	iface := reflect.TypeFor[ledger.Store]()
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		var args []reflect.Value
		var want []any
		for j := range m.Type.NumIn() {
			v, ok := sample[m.Type.In(j)]
			if !ok {
				t.Fatalf("%s: no sample of %s (add one)", m.Name, m.Type.In(j))
			}
			args = append(args, reflect.ValueOf(v))
			want = append(want, v)
		}
		wrapped.MethodByName(m.Name).Call(args)
		got, called := rec.calls[m.Name]
		if !called {
			t.Errorf("%s did not reach the wrapped store", m.Name)
			continue
		}
		for j := range want {
			if j >= len(got) || !reflect.DeepEqual(got[j], want[j]) {
				t.Errorf("%s: argument %d (%s) reached the store as %v, want %v", m.Name, j, m.Type.In(j), at(got, j), want[j])
			}
		}
	}
}

func at(s []any, i int) any {
	if i < len(s) {
		return s[i]
	}
	return "nothing"
}

// TestConformanceWrapped runs the conformance suite on a measured memory
// store: the store budgetd serves is always wrapped.
func TestConformanceWrapped(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return storemetrics.Wrap(memory.New(memory.WithClock(clock.Now)))
	})
}
