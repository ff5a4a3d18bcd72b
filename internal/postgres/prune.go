package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// maxPruneRounds bounds the batches of each kind one Prune call runs.
const maxPruneRounds = 100

// PruneStats says what one Prune call did.
type PruneStats struct {
	ExpiredHolds   int // buckets whose expired holds were recorded
	Rows           int // closed holds, old history and idempotency records deleted
	DeletedLimits  int // rows of deleted limits removed
	ExpiredGrants  int // grants deleted once expired
	EmptyBuckets   int // idle empty buckets deleted
	ScannedBatches int // batches of the bucket scan
}

// pruneBucketsRow is the answer of budgetd_prune_buckets, scanned by name.
type pruneBucketsRow struct {
	NextLimit *int64  `db:"next_limit"`
	NextKey   *string `db:"next_key"`
	Deleted   int     `db:"deleted"`
	// The buckets left to Go to judge (budgetd_prune_buckets): their
	// limits' names and keys.
	AskLimits []string `db:"ask_limits"`
	AskKeys   []string `db:"ask_keys"`
}

type pruneCursor struct {
	limit int64
	key   string
}

// Prune runs one pass of the pruner: it records expired holds, deletes closed
// holds older than ledger.ClosedHoldRetention, history older than ledger.HistoryRetention,
// idempotency records older than 25h, the rows of deleted limits, expired
// grants and idle empty buckets (a bucket with an active grant is kept). Every step is a short transaction of at most a batch of rows
// that takes bucket locks only with SKIP LOCKED, so it never makes a decision
// wait for long. The background pruner calls it every prune interval.
func (s *Store) Prune(ctx context.Context) (PruneStats, error) {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	var st PruneStats
	batch := s.cfg.pruneBatch
	// step runs one kind of batch until a batch finds less than until rows.
	step := func(n *int, until int, sql string, args ...any) error {
		for round := 0; round < maxPruneRounds; round++ {
			var got int
			if err := s.pruneTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				return tx.QueryRow(ctx, sql, args...).Scan(&got)
			}); err != nil {
				return err
			}
			*n += got
			if got < until {
				return nil
			}
		}
		return nil
	}
	if err := step(&st.ExpiredHolds, batch, "SELECT budgetd_prune_expired(coalesce($1, budgetd_clock()), $2)", s.nowArg(), batch); err != nil {
		return st, err
	}
	if err := step(&st.Rows, batch, "SELECT budgetd_prune_rows(coalesce($1, budgetd_clock()), $2)", s.nowArg(), batch); err != nil {
		return st, err
	}
	if err := step(&st.DeletedLimits, 1, "SELECT budgetd_prune_deleted($1)", batch); err != nil {
		return st, err
	}
	if err := step(&st.ExpiredGrants, batch, "SELECT budgetd_prune_grants(coalesce($1, budgetd_clock()), $2)", s.nowArg(), batch); err != nil {
		return st, err
	}
	// One sweep over the buckets at most, resuming where the last pass ended.
	for round := 0; round < maxPruneRounds; round++ {
		var r pruneBucketsRow
		err := s.pruneTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT * FROM budgetd_prune_buckets($1, $2, coalesce($3, budgetd_clock()), $4)",
				s.cursor.limit, s.cursor.key, s.nowArg(), batch)
			if err != nil {
				return err
			}
			r, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[pruneBucketsRow])
			return err
		})
		if err != nil {
			return st, err
		}
		n, err := s.pruneAsked(ctx, r.AskLimits, r.AskKeys)
		if err != nil {
			return st, err
		}
		st.EmptyBuckets += r.Deleted + n
		st.ScannedBatches++
		if r.NextLimit == nil || r.NextKey == nil {
			s.cursor = pruneCursor{}
			break
		}
		s.cursor = pruneCursor{limit: *r.NextLimit, key: *r.NextKey}
	}
	return st, nil
}

// pruneTx runs f in a READ COMMITTED transaction whatever the store's
// isolation level: the pruning steps are safe there (they lock what they
// change) and would only cause serialization failures for decisions at
// SERIALIZABLE.
func (s *Store) pruneTx(ctx context.Context, f func(context.Context, pgx.Tx) error) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	err := pgx.BeginTxFunc(cctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return f(cctx, tx) })
	if err != nil {
		return fmt.Errorf("postgres prune: %w", translate(ctx, err))
	}
	return nil
}

// pruneLoop runs Prune every prune interval, and soon after DeleteLimit,
// until Close.
func (s *Store) pruneLoop() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	t := time.NewTicker(s.cfg.pruneInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
		}
		// Errors (the database is down) are retried at the next tick.
		_, _ = s.Prune(ctx)
	}
}

// pruneAsked judges the buckets budgetd_prune_buckets left to Go, whose
// terms it resolves: each is settled first at the ends of temporary rule
// changes it crossed (settleBucket), kept while an override applies to it,
// and otherwise deleted by budgetd_prune_bucket when it is empty, unless
// the limit changed since the index read it. Returns how many it deleted.
func (s *Store) pruneAsked(ctx context.Context, limits, keys []string) (int, error) {
	deleted := 0
	for i, name := range limits {
		if err := s.settleBucket(ctx, name, keys[i]); err != nil {
			return deleted, err
		}
		lt, err := s.limitTerms(ctx, name)
		if err != nil {
			return deleted, err
		}
		if lt == nil || lt.set != nil && lt.set.Effective(lt.lim, keys[i], s.termsNow()).Override != "" {
			continue
		}
		var ok bool
		if err := s.pruneTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT budgetd_prune_bucket($1, $2, coalesce($3, budgetd_clock()), $4, $5)",
				lt.id, keys[i], s.nowArg(), lt.rev, lt.over).Scan(&ok)
		}); err != nil {
			return deleted, err
		}
		if ok {
			deleted++
		}
	}
	return deleted, nil
}
