// Package storemetrics measures any ledger.Store: how long each operation
// takes and how it ended, in one place for every store (memory, PostgreSQL,
// Redis), as budgetd_store_duration_seconds{op, outcome}.
package storemetrics

import (
	"context"
	"errors"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/series"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

// Store is a ledger.Store that times every call of the store it wraps,
// and the calls of the optional interfaces of the listings (ledger.Counter,
// RankedLister, MarkedLister, BucketScanner; optional.go), which it serves
// when the wrapped store does (ledger.Forwarder). Methods added to
// ledger.Store later, and the other optional interfaces (overrides, grants,
// rollover, leases), pass through untimed until listed here.
type Store struct {
	ledger.Store
	seconds *prometheus.HistogramVec
	series  series.Cache[[2]string, prometheus.Observer] // seconds' series by op and outcome
}

var _ ledger.Store = (*Store)(nil)

// Wrap returns st measured; register Collector on a registry to export the
// figures.
func Wrap(st ledger.Store) *Store {
	return &Store{Store: st, seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "budgetd_store_duration_seconds",
		Help:    "Time the store took per operation, by operation and outcome (ok, not_found, idempotency_conflict, in_flight, too_many_holds, invalid, unavailable, canceled, error).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"op", "outcome"})}
}

// Unwrap returns the store being measured, for code that looks for an
// optional interface of a concrete store.
func (s *Store) Unwrap() ledger.Store { return s.Store }

// Collector exports the store's figures.
func (s *Store) Collector() prometheus.Collector { return s.seconds }

// Outcome names how a store call ended, from a small fixed set.
func Outcome(err error) string {
	var inv *ledger.InvalidError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ledger.ErrLimitNotFound), errors.Is(err, ledger.ErrReservationNotFound):
		return "not_found"
	case errors.Is(err, ledger.ErrIdempotencyKeyReused):
		return "idempotency_conflict"
	case errors.Is(err, ledger.ErrIdempotencyInFlight):
		return "in_flight"
	case errors.Is(err, ledger.ErrTooManyHolds):
		return "too_many_holds"
	case errors.As(err, &inv), errors.Is(err, ledger.ErrCrossSlot), errors.Is(err, ledger.ErrLevelOverflow):
		return "invalid"
	case errors.Is(err, ledger.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return "unavailable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}

func (s *Store) observe(op string, start time.Time, err error) {
	outcome := Outcome(err)
	s.series.Get([2]string{op, outcome}, func() prometheus.Observer {
		return s.seconds.WithLabelValues(op, outcome)
	}).Observe(time.Since(start).Seconds())
}

// PutLimit times the wrapped store's PutLimit.
func (s *Store) PutLimit(ctx context.Context, l ledger.Limit) (ledger.Limit, error) {
	start := time.Now()
	out, err := s.Store.PutLimit(ctx, l)
	s.observe("put_limit", start, err)
	return out, err
}

// GetLimit times the wrapped store's GetLimit.
func (s *Store) GetLimit(ctx context.Context, name string) (ledger.Limit, error) {
	start := time.Now()
	out, err := s.Store.GetLimit(ctx, name)
	s.observe("get_limit", start, err)
	return out, err
}

// ListLimits times the wrapped store's ListLimits.
func (s *Store) ListLimits(ctx context.Context, after string, n int) ([]ledger.Limit, error) {
	start := time.Now()
	out, err := s.Store.ListLimits(ctx, after, n)
	s.observe("list_limits", start, err)
	return out, err
}

// Inspect times the wrapped store's Inspect.
func (s *Store) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	start := time.Now()
	out, err := s.Store.Inspect(ctx, ref)
	s.observe("inspect", start, err)
	return out, err
}

// Fillup times the wrapped store's Fillup.
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	start := time.Now()
	out, err := s.Store.Fillup(ctx, items, idem)
	s.observe("fillup", start, err)
	return out, err
}

// Drain times the wrapped store's Drain.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	start := time.Now()
	out, err := s.Store.Drain(ctx, ref, amount, idem, meta)
	s.observe("drain", start, err)
	return out, err
}

// Reserve times the wrapped store's Reserve.
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	start := time.Now()
	out, err := s.Store.Reserve(ctx, ref, amount, ttl, idem, meta)
	s.observe("reserve", start, err)
	return out, err
}

// Commit times the wrapped store's Commit.
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	start := time.Now()
	out, err := s.Store.Commit(ctx, id, amount, overrun, idem, meta)
	s.observe("commit", start, err)
	return out, err
}

// Release times the wrapped store's Release.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	start := time.Now()
	out, err := s.Store.Release(ctx, id, idem, meta)
	s.observe("release", start, err)
	return out, err
}

// DeleteLimit times the wrapped store's DeleteLimit.
func (s *Store) DeleteLimit(ctx context.Context, name string) error {
	start := time.Now()
	err := s.Store.DeleteLimit(ctx, name)
	s.observe("delete_limit", start, err)
	return err
}

// Reservation times the wrapped store's Reservation.
func (s *Store) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	start := time.Now()
	r, now, err := s.Store.Reservation(ctx, id)
	s.observe("reservation", start, err)
	return r, now, err
}

// Events times the wrapped store's Events.
func (s *Store) Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	start := time.Now()
	events, next, err := s.Store.Events(ctx, cursor, n)
	s.observe("events", start, err)
	return events, next, err
}

// BucketEvents times the wrapped store's BucketEvents.
func (s *Store) BucketEvents(ctx context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error) {
	start := time.Now()
	events, err := s.Store.BucketEvents(ctx, ref, n)
	s.observe("bucket_events", start, err)
	return events, err
}

// History times the wrapped store's History.
func (s *Store) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	start := time.Now()
	entries, next, err := s.Store.History(ctx, ref, cursor, n)
	s.observe("history", start, err)
	return entries, next, err
}

// ListBuckets times the wrapped store's ListBuckets.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	start := time.Now()
	out, err := s.Store.ListBuckets(ctx, limit, after, n)
	s.observe("list_buckets", start, err)
	return out, err
}

// ListHolds times the wrapped store's ListHolds.
func (s *Store) ListHolds(ctx context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	start := time.Now()
	out, err := s.Store.ListHolds(ctx, ref)
	s.observe("list_holds", start, err)
	return out, err
}

// Ping times the wrapped store's Ping.
func (s *Store) Ping(ctx context.Context) error {
	start := time.Now()
	err := s.Store.Ping(ctx)
	s.observe("ping", start, err)
	return err
}
