package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Defaults of the background pruner (WithPruneInterval, WithPruneBatch).
const (
	DefaultPruneInterval = time.Minute
	DefaultPruneBatch    = 1000
)

// The pruner's scans, each served by an index of migrations/mysql
// (0002_prune_indexes.sql; TestPruneUsesIndexes checks them with EXPLAIN).
const (
	// pruneExpiredHolds lists the buckets of active holds expired at now
	// (budgetd_holds_expiry, on state and expires_us). The closed states are
	// named rather than "<> 'active'" so that pruneClosedHolds reads three
	// ranges of the same index (a closed hold was resolved at or before its
	// expiry), not every closed hold.
	pruneExpiredHolds = `SELECT DISTINCT l.name, h.bkey FROM budgetd_holds h JOIN budgetd_limits l ON l.id = h.limit_id
		WHERE h.state = 'active' AND h.expires_us <= ? LIMIT ?`
	pruneClosedHolds = "DELETE FROM budgetd_holds WHERE state IN ('committed', 'released', 'expired') AND expires_us < ? AND resolved_us < ? LIMIT ?"
	pruneHistory     = "DELETE FROM budgetd_history WHERE at_us < ? LIMIT ?"
	pruneIdempotency = "DELETE FROM budgetd_idempotency WHERE created_us < ? LIMIT ?"
	pruneEvents      = "DELETE FROM budgetd_events WHERE at_us < ? ORDER BY seq LIMIT ?"
)

// maxPruneRounds bounds the batches of each kind one Prune call runs.
const maxPruneRounds = 100

// WithPruneInterval sets how often the background pruner runs (default 1m);
// 0 disables it (Prune can still be called).
func WithPruneInterval(d time.Duration) Option { return func(s *Store) { s.pruneInterval = d } }

// WithPruneBatch sets how many rows one pruning statement touches at most
// (default 1000): each batch is its own short transaction.
func WithPruneBatch(n int) Option { return func(s *Store) { s.pruneBatch = max(1, n) } }

// PruneStats says what one Prune call did.
type PruneStats struct {
	ExpiredHolds   int // buckets whose expired holds were recorded
	DeletedLimits  int // deleted limits whose rows are all gone
	Rows           int // rows of deleted limits, closed holds, old history, idempotency records and events deleted
	EmptyBuckets   int // idle empty buckets deleted
	ScannedBatches int // batches of the bucket scan
}

// pruneCursor is where the scan of the buckets resumes.
type pruneCursor struct {
	limit uint64
	key   []byte
}

// Prune runs one pass of the pruner (the rules of the PostgreSQL store,
// docs/postgres.md): it records expired holds (as the bucket's next write
// would, with the engine's own transition), deletes holds resolved or
// expired more than ledger.ClosedHoldRetention ago, history older than
// ledger.HistoryRetention, idempotency records older than ledger.IdempotencyRetention and
// events older than ledger.EventRetention, and idle empty buckets. Every step is a
// short transaction of at most a batch of rows; an empty bucket is deleted
// by its primary key with a compare-and-set of the version the scan read,
// so a decision in flight on it fails its own compare-and-set and runs
// again on the missing row, and no decision waits for the pruner for long.
// The background pruner calls it every prune interval.
func (s *Store) Prune(ctx context.Context) (PruneStats, error) {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	var st PruneStats
	now, err := s.now(ctx, s.db)
	if err != nil {
		return st, fmt.Errorf("mysql prune: %w", err)
	}
	if err := s.pruneDeleted(ctx, &st); err != nil {
		return st, fmt.Errorf("mysql prune: %w", err)
	}
	for round := 0; round < maxPruneRounds; round++ {
		n, err := s.pruneExpired(ctx, now)
		st.ExpiredHolds += n
		if err != nil {
			return st, fmt.Errorf("mysql prune: %w", err)
		}
		if n < s.pruneBatch {
			break
		}
	}
	us := func(d time.Duration) int64 { return now.Add(-d).UnixMicro() }
	hold := us(ledger.ClosedHoldRetention)
	for _, d := range []struct {
		query string
		args  []any
	}{
		{pruneClosedHolds, []any{hold, hold}},
		{pruneHistory, []any{us(ledger.HistoryRetention)}},
		{pruneIdempotency, []any{us(ledger.IdempotencyRetention)}},
		{pruneEvents, []any{us(ledger.EventRetention)}},
	} {
		for round := 0; round < maxPruneRounds; round++ {
			n, err := s.pruneExec(ctx, d.query, append(d.args, s.pruneBatch)...)
			st.Rows += n
			if err != nil {
				return st, fmt.Errorf("mysql prune: %w", err)
			}
			if n < s.pruneBatch {
				break
			}
		}
	}
	// One sweep over the buckets at most, resuming where the last pass ended.
	for round := 0; round < maxPruneRounds; round++ {
		n, done, err := s.pruneBuckets(ctx, now)
		st.EmptyBuckets += n
		st.ScannedBatches++
		if err != nil {
			return st, fmt.Errorf("mysql prune: %w", err)
		}
		if done {
			break
		}
	}
	return st, nil
}

// pruneDeleted deletes the rows of limits that DeleteLimit removed — the
// buckets, holds and history whose limit_id names no limit — a batch of each
// at a time, up to maxPruneRounds batches of each table for each limit in one
// pass; a limit whose rows are not all gone is taken up again by the next
// pass. The deleted limits are found through the indexes that begin with
// limit_id (distinct values only), at most a batch of them per pass. No
// decision writes under a deleted limit's id (its write checks the limit's
// row), so no row is deleted that a decision still needs.
func (s *Store) pruneDeleted(ctx context.Context, st *PruneStats) error {
	rows, err := s.db.QueryContext(ctx, `SELECT t.limit_id FROM (
		SELECT DISTINCT limit_id FROM budgetd_buckets UNION SELECT DISTINCT limit_id FROM budgetd_holds
		UNION SELECT DISTINCT limit_id FROM budgetd_history
		UNION SELECT DISTINCT limit_id FROM budgetd_overrides UNION SELECT DISTINCT limit_id FROM budgetd_marked) t
		WHERE NOT EXISTS (SELECT 1 FROM budgetd_limits l WHERE l.id = t.limit_id) ORDER BY t.limit_id LIMIT ?`, s.pruneBatch)
	if err != nil {
		return classify(err)
	}
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return classify(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return classify(err)
	}
	for _, id := range ids {
		left := false
		for _, table := range []string{"budgetd_history", "budgetd_holds", "budgetd_buckets", "budgetd_marked", "budgetd_overrides"} {
			for round := 0; ; round++ {
				if round == maxPruneRounds {
					left = true
					break
				}
				n, err := s.pruneExec(ctx, "DELETE FROM "+table+" WHERE limit_id = ? LIMIT ?", id, s.pruneBatch)
				st.Rows += n
				if err != nil {
					return err
				}
				if n < s.pruneBatch {
					break
				}
			}
		}
		if !left {
			st.DeletedLimits++
		}
	}
	return nil
}

// pruneExec runs one bounded DELETE in its own READ COMMITTED transaction
// (so that rows it scans but does not delete are not kept locked) and
// returns the rows it deleted.
func (s *Store) pruneExec(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := s.pruneTx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	return int(n), err
}

// pruneTx runs fn in a READ COMMITTED transaction whatever the store's
// isolation level.
func (s *Store) pruneTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return classify(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return classify(err)
	}
	return classify(tx.Commit())
}

// pruneExpired records the expired holds of up to a batch of buckets, each
// with the decision that any write of the bucket runs first (bucket.Expire
// and their expired entries), and returns how many buckets it wrote.
func (s *Store) pruneExpired(ctx context.Context, now time.Time) (int, error) {
	rows, err := s.db.QueryContext(ctx, pruneExpiredHolds, now.UnixMicro(), s.pruneBatch)
	if err != nil {
		return 0, classify(err)
	}
	var refs []ledger.BucketRef
	for rows.Next() {
		var name, key []byte
		if err := rows.Scan(&name, &key); err != nil {
			rows.Close()
			return 0, classify(err)
		}
		refs = append(refs, ledger.BucketRef{Limit: string(name), Key: string(key)})
	}
	if err := rows.Close(); err != nil {
		return 0, classify(err)
	}
	n := 0
	for _, ref := range refs {
		err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
			if ns, expired := bucket.Expire(v.buckets[0].state, v.now); len(expired) > 0 {
				v.expire(0, expired)
				v.set(0, ns)
			}
			return nil
		})
		switch {
		case errors.Is(err, ledger.ErrLimitNotFound):
			// Deleted meanwhile, with its holds.
		case err != nil:
			return n, err
		}
		n++
	}
	return n, nil
}

// pruneBucket deletes the bucket (limit, key) at version, and with it its
// row of budgetd_marked when its mark m is on, in one transaction: the
// bucket's row first, as a write locks them, so a write that makes the
// bucket again waits for the delete and then writes its mark anew. It
// returns the buckets deleted, 0 when the row is no longer at version.
func (s *Store) pruneBucket(ctx context.Context, limit uint64, key []byte, version uint64, m mark) (int, error) {
	var n int64
	err := s.pruneTx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, "DELETE FROM budgetd_buckets WHERE limit_id = ? AND bkey = ? AND version = ?", limit, key, version)
		if err != nil {
			return err
		}
		if n, err = r.RowsAffected(); err != nil || n == 0 || !m.on {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM budgetd_marked WHERE limit_id = ? AND sig = ? AND bkey = ?", limit, m.sig, key)
		return err
	})
	return int(n), err
}

// pruneBuckets scans up to a batch of buckets after s.cursor and deletes
// those that are idle and empty at now (prunable); done is true once the
// scan reached the end (the cursor starts again).
func (s *Store) pruneBuckets(ctx context.Context, now time.Time) (deleted int, done bool, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT b.limit_id, l.name, l.oseq, l.spec, l.created_us, l.updated_us, `+bucketCols+`,
		EXISTS (SELECT 1 FROM budgetd_history e WHERE e.limit_id = b.limit_id AND e.bkey = b.bkey)
		FROM budgetd_buckets b LEFT JOIN budgetd_limits l ON l.id = b.limit_id
		WHERE b.limit_id > ? OR b.limit_id = ? AND b.bkey > ?
		ORDER BY b.limit_id, b.bkey LIMIT ?`, s.cursor.limit, s.cursor.limit, s.cursor.key, s.pruneBatch)
	if err != nil {
		return 0, false, classify(err)
	}
	type victim struct {
		limit   uint64
		key     []byte
		version uint64
		mark    mark // its row of budgetd_marked, when on
	}
	var victims []victim
	var limits specMemo
	scanned := 0
	for rows.Next() {
		var id uint64
		var name, spec sql.NullString
		var created, updated, oseq sql.NullInt64
		var b bucketRow
		var history bool
		var key []byte
		var level string
		var bupdated int64
		var extra sql.NullString
		if err := rows.Scan(&id, &name, &oseq, &spec, &created, &updated, &key, &b.version, &level, &bupdated, &extra, &b.hseq, &b.last, &history); err != nil {
			rows.Close()
			return 0, false, classify(err)
		}
		scanned++
		s.cursor = pruneCursor{limit: id, key: key}
		b.key, b.exists = string(key), true
		if !name.Valid {
			// The limit is gone (pruneDeleted deletes its rows; a scan may
			// meet one of them first).
			victims = append(victims, victim{id, key, b.version, mark{}})
			continue
		}
		if err := b.decode(level, bupdated, extra); err != nil {
			rows.Close()
			return 0, false, err
		}
		l, err := limits.of(id, name.String, spec.String, created.Int64, updated.Int64)
		if err != nil {
			rows.Close()
			return 0, false, err
		}
		set, err := s.overrides(ctx, s.db, id, uint64(oseq.Int64), false)
		if err != nil {
			rows.Close()
			return 0, false, err
		}
		if !history && prunable(l, set, &b, now) {
			victims = append(victims, victim{id, key, b.version, b.stored})
		}
	}
	if err := rows.Close(); err != nil {
		return 0, false, classify(err)
	}
	for _, x := range victims {
		n, err := s.pruneBucket(ctx, x.limit, x.key, x.version, x.mark)
		if err != nil {
			return deleted, false, err
		}
		deleted += n
	}
	if scanned < s.pruneBatch {
		s.cursor = pruneCursor{}
		return deleted, true, nil
	}
	return deleted, false, nil
}

// specMemo decodes a limit's spec once for all the rows of a scan batch
// that belong to it (a batch is mostly one limit's buckets). The batch is
// one statement's rows, so every row of a limit joins the same limit row.
type specMemo struct {
	id    uint64
	limit ledger.Limit
	ok    bool
}

// of is decodeSpec's limit, decoded again only when the row is of another
// limit than the row before.
func (m *specMemo) of(id uint64, name, text string, createdUS, updatedUS int64) (ledger.Limit, error) {
	if m.ok && m.id == id {
		return m.limit, nil
	}
	l, err := decodeSpec(name, text, createdUS, updatedUS)
	if err != nil {
		return l, err
	}
	*m = specMemo{id: id, limit: l, ok: true}
	return l, nil
}

// prunable says whether bucket b of limit l (with its overrides set) may be
// deleted at now, by the rules of the PostgreSQL store (budgetd_prune_buckets)
// and the memory store: it was written, is empty at now (settled at the
// end of any temporary rule change since its write), has no hold (an
// expired one is recorded first), no active grant, no reached threshold
// mark its next write must see, and no override applies to its key (its own
// terms decide when it is empty), and it may not pass rollover on
// (ledger.Limit.PassesOn: pruned, it would start again as a new bucket and
// lose what its untouched periods carry). The caller checks it has no
// history left.
func prunable(l ledger.Limit, set *ledger.Overrides, b *bucketRow, now time.Time) bool {
	if b.state.Updated.IsZero() || len(b.state.Holds) > 0 || l.PassesOn(b.state.Updated) {
		return false
	}
	in := ledger.TermsInput{Limit: l, Key: b.key, State: b.state, Grants: b.grants, Now: now}
	if set.Len() > 0 {
		in.Overrides = set
	}
	// Its level at now under the limit's rule counts from the end of the
	// last override that applied to it (ledger.Terms.State).
	t := ledger.TermsAt(&in)
	if t.Overridden() || t.Limit.Grants.Sign() > 0 {
		return false
	}
	st := t.State
	if m := b.marks; m.Above != 0 {
		if l.Period == nil {
			return false
		}
		if start, _ := l.Rule().Period.Bounds(now); m.Period == start.UnixMicro() {
			return false
		}
	}
	d := bucket.CanAccept(l.Rule(), st, now, bucket.Amount{})
	return d.Level.Sign() == 0 && d.Held.Sign() == 0
}

// pruneLoop runs Prune every prune interval until Close.
func (s *Store) pruneLoop() {
	defer close(s.pruneDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.pruneStop
		cancel()
	}()
	t := time.NewTicker(s.pruneInterval)
	defer t.Stop()
	for {
		select {
		case <-s.pruneStop:
			return
		case <-t.C:
		case <-s.pruneKick:
		}
		// Errors (the database is down) are retried at the next tick.
		_, _ = s.Prune(ctx)
	}
}
