package postgres

import (
	"context"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
)

// FillupBatch decides costs on ref as one coalesced batch, as the queue of a
// hot bucket would send them, and returns each call's answer or error.
func (s *Store) FillupBatch(ctx context.Context, ref ledger.BucketRef, costs []decimal.Decimal) ([]ledger.FillupOutcome, []error) {
	return s.FillupBatchIdem(ctx, ref, costs, make([]ledger.Idempotency, len(costs)))
}

// FillupBatchIdem is FillupBatch with an Idempotency-Key (or none) per call.
func (s *Store) FillupBatchIdem(ctx context.Context, ref ledger.BucketRef, costs []decimal.Decimal, idems []ledger.Idempotency) ([]ledger.FillupOutcome, []error) {
	batch := make([]*fillCall, len(costs))
	for i, c := range costs {
		batch[i] = newFillCall(ctx, ref, c, idems[i])
	}
	s.runBatch(batch)
	outs := make([]ledger.FillupOutcome, len(batch))
	errs := make([]error, len(batch))
	for i, c := range batch {
		outs[i], errs[i] = c.out, c.err
	}
	return outs, errs
}

// FillupBatchRaw is FillupBatch with costs as sent to the database, so that a
// test can make the batch's statement fail.
func (s *Store) FillupBatchRaw(ctx context.Context, ref ledger.BucketRef, costs []string) []error {
	batch := make([]*fillCall, len(costs))
	for i, c := range costs {
		batch[i] = &fillCall{ctx: ctx, ref: ref, cost: c}
	}
	s.runBatch(batch)
	errs := make([]error, len(batch))
	for i, c := range batch {
		errs[i] = c.err
	}
	return errs
}

// FillupAllOrNone is one single-bucket Fillup through the all-or-none path
// of budgetd_fillup that multi-bucket calls take, not through
// budgetd_fillup_batch.
func (s *Store) FillupAllOrNone(ctx context.Context, it ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	return s.fillupAll(ctx, []ledger.Charge{it}, idem)
}

// FillupCalls decides single-bucket Fillups of any buckets as one coalesced
// batch, as the queue sends them when every connection is busy.
func (s *Store) FillupCalls(ctx context.Context, refs []ledger.BucketRef, costs []decimal.Decimal, idems []ledger.Idempotency) ([]ledger.FillupOutcome, []error) {
	batch := make([]*fillCall, len(costs))
	for i, c := range costs {
		batch[i] = newFillCall(ctx, refs[i], c, idems[i])
	}
	s.runBatch(batch)
	outs := make([]ledger.FillupOutcome, len(batch))
	errs := make([]error, len(batch))
	for i, c := range batch {
		outs[i], errs[i] = c.out, c.err
	}
	return outs, errs
}

// Pool is the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// CoalescerLoad returns how many coalesced batches are at the database and
// how many calls are queued for the next ones.
func (s *Store) CoalescerLoad() (inFlight, queued int) { return s.co.Load() }

// The set-based batch's statements (setbatch.go), for their plans.
const (
	SetPlanSQL   = setPlanSQL
	SetLockSQL   = setLockSQL
	SetUpdateSQL = setUpdateSQL
	SetReadSQL   = setReadSQL
	SetInsertSQL = setInsertSQL
)
