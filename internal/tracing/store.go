package tracing

import (
	"context"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
	"go.opentelemetry.io/otel/trace"
)

// Store is a ledger.Store that makes a span, "store.OP", of every call
// made within a traced request or decision, and none of the calls of
// budgetd's own loops (the webhook sender, expiry), which would each be a
// trace of their own. The optional interfaces of the listings
// (ledger.Counter, RankedLister, MarkedLister, BucketScanner; optional.go)
// are traced when the wrapped store serves them (ledger.Forwarder). Methods
// added to ledger.Store later, and the other optional interfaces
// (overrides, grants, rollover, leases), pass through untraced until listed
// here.
type Store struct {
	ledger.Store
	t *Tracing
}

var _ ledger.Store = (*Store)(nil)

// Store returns st traced.
func (t *Tracing) Store(st ledger.Store) *Store { return &Store{Store: st, t: t} }

// Unwrap returns the store being traced, for code that looks for an
// optional interface of a concrete store.
func (s *Store) Unwrap() ledger.Store { return s.Store }

// start begins the span of op on ref, or returns a nil span when ctx is
// in no trace.
func (s *Store) start(ctx context.Context, op string, ref ledger.BucketRef) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	ctx, span := s.t.tracer.Start(ctx, "store."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrOperation.String(op)))
	s.t.bucket(span, ref)
	return ctx, span
}

// finish ends span, if any, with result or err's code.
func finish(span trace.Span, result string, err error) {
	if span != nil {
		end(span, result, err)
	}
}

// limitOnly is a ref that names a limit and no bucket.
func limitOnly(name string) ledger.BucketRef { return ledger.BucketRef{Limit: name} }

// PutLimit traces the wrapped store's PutLimit.
func (s *Store) PutLimit(ctx context.Context, l ledger.Limit) (ledger.Limit, error) {
	ctx, span := s.start(ctx, "put_limit", limitOnly(l.Name))
	out, err := s.Store.PutLimit(ctx, l)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// GetLimit traces the wrapped store's GetLimit.
func (s *Store) GetLimit(ctx context.Context, name string) (ledger.Limit, error) {
	ctx, span := s.start(ctx, "get_limit", limitOnly(name))
	out, err := s.Store.GetLimit(ctx, name)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// ListLimits traces the wrapped store's ListLimits.
func (s *Store) ListLimits(ctx context.Context, after string, n int) ([]ledger.Limit, error) {
	ctx, span := s.start(ctx, "list_limits", ledger.BucketRef{})
	out, err := s.Store.ListLimits(ctx, after, n)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// DeleteLimit traces the wrapped store's DeleteLimit.
func (s *Store) DeleteLimit(ctx context.Context, name string) error {
	ctx, span := s.start(ctx, "delete_limit", limitOnly(name))
	err := s.Store.DeleteLimit(ctx, name)
	finish(span, ledger.ResultDone, err)
	return err
}

// Inspect traces the wrapped store's Inspect.
func (s *Store) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	ctx, span := s.start(ctx, "inspect", ref)
	out, err := s.Store.Inspect(ctx, ref)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// Fillup traces the wrapped store's Fillup: accepted or denied.
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	var ref ledger.BucketRef
	if len(items) > 0 {
		ref = items[0].Bucket
	}
	ctx, span := s.start(ctx, "fillup", ref)
	if span != nil && len(items) > 1 {
		span.SetAttributes(AttrItems.Int(len(items)))
	}
	out, err := s.Store.Fillup(ctx, items, idem)
	finish(span, decided(out.Accepted), err)
	return out, err
}

// Drain traces the wrapped store's Drain.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	ctx, span := s.start(ctx, "drain", ref)
	out, err := s.Store.Drain(ctx, ref, amount, idem, meta)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// Reserve traces the wrapped store's Reserve: accepted or denied.
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	ctx, span := s.start(ctx, "reserve", ref)
	out, err := s.Store.Reserve(ctx, ref, amount, ttl, idem, meta)
	finish(span, decided(out.Accepted), err)
	return out, err
}

// Commit traces the wrapped store's Commit: done or the refusal's code.
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	ctx, span := s.start(ctx, "commit", ledger.BucketRef{})
	out, err := s.Store.Commit(ctx, id, amount, overrun, idem, meta)
	s.resolved(span, out, err)
	return out, err
}

// Release traces the wrapped store's Release: done or the refusal's code.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	ctx, span := s.start(ctx, "release", ledger.BucketRef{})
	out, err := s.Store.Release(ctx, id, idem, meta)
	s.resolved(span, out, err)
	return out, err
}

// resolved ends the span of a Commit or Release with the hold's bucket.
func (s *Store) resolved(span trace.Span, out ledger.ResolveOutcome, err error) {
	if span == nil {
		return
	}
	s.t.bucket(span, out.Reservation.Bucket)
	result := ledger.ResultDone
	if out.Refusal != "" {
		result = out.Refusal
	}
	end(span, result, err)
}

// Reservation traces the wrapped store's Reservation.
func (s *Store) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	ctx, span := s.start(ctx, "reservation", ledger.BucketRef{})
	r, now, err := s.Store.Reservation(ctx, id)
	if span != nil {
		s.t.bucket(span, r.Bucket)
	}
	finish(span, ledger.ResultDone, err)
	return r, now, err
}

// History traces the wrapped store's History.
func (s *Store) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	ctx, span := s.start(ctx, "history", ref)
	entries, next, err := s.Store.History(ctx, ref, cursor, n)
	finish(span, ledger.ResultDone, err)
	return entries, next, err
}

// ListBuckets traces the wrapped store's ListBuckets.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	ctx, span := s.start(ctx, "list_buckets", limitOnly(limit))
	out, err := s.Store.ListBuckets(ctx, limit, after, n)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// ListHolds traces the wrapped store's ListHolds.
func (s *Store) ListHolds(ctx context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	ctx, span := s.start(ctx, "list_holds", ref)
	out, err := s.Store.ListHolds(ctx, ref)
	finish(span, ledger.ResultDone, err)
	return out, err
}

// Ping traces the wrapped store's Ping (behind /readyz).
func (s *Store) Ping(ctx context.Context) error {
	ctx, span := s.start(ctx, "ping", ledger.BucketRef{})
	err := s.Store.Ping(ctx)
	finish(span, ledger.ResultDone, err)
	return err
}

// decided is the result of a Fillup or Reserve the store answered.
func decided(accepted bool) string {
	if accepted {
		return ledger.ResultAccepted
	}
	return ledger.ResultDenied
}
