package postgres

import (
	"context"
	"fmt"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/jackc/pgx/v5"
)

// changeTerms runs put, a change of the limit's terms (a PUT of the limit,
// or a PUT or DELETE of one of its overrides), in one transaction with the
// limit's row locked, after settling each bucket the change may touch, as
// every store does (memory.Store.changeTerms): the buckets with a positive
// level that pattern covers (every bucket for ""), each settled at the ends
// of temporary rule changes it crossed under the overrides as they were
// (ledger.TermsAt), and, when its rule changes with the change, at now under
// the rule it had (bucket.Switch). after makes the change on the limit as
// stored and on a fresh copy of its overrides, and returns the limit after
// it. A limit that does not exist is left to put, which answers for it, and
// so is a PUT of a limit without overrides (budgetd_put_limit settles its
// buckets under its own rule).
func (s *Store) changeTerms(ctx context.Context, op, limit, pattern string, after func(ledger.Limit, *ovset.Set) ledger.Limit,
	put func(context.Context, pgx.Tx) error) error {
	return s.do(ctx, op, func(ctx context.Context) error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if err := s.settleForChange(ctx, tx, limit, pattern, after); err != nil {
				return err
			}
			return put(ctx, tx)
		})
	})
}

// settleForChange is the settling of changeTerms, in tx.
func (s *Store) settleForChange(ctx context.Context, tx pgx.Tx, limit, pattern string, after func(ledger.Limit, *ovset.Set) ledger.Limit) error {
	l, overridden, err := readLimitRow(ctx, tx, limit, "FOR UPDATE")
	if l == nil || err != nil || pattern == "" && !overridden {
		// No limit, or a PUT of a limit without overrides: the buckets'
		// terms are the limit's own, and budgetd_put_limit settles them.
		return err
	}
	rows, err := tx.Query(ctx, `SELECT key, level::text, budgetd_us(updated_at), slot_idx, slot_sum::text[],
		       budgetd_us(coalesce($3::timestamptz, budgetd_clock()))
		  FROM buckets
		 WHERE limit_id = $1 AND level > 0 AND updated_at IS NOT NULL
		   AND ($2 = '' OR CASE WHEN right($2, 1) = '*' THEN starts_with(key, left($2, -1)) ELSE key = $2 END)
		 ORDER BY key FOR UPDATE`, l.id, pattern, s.nowArg())
	if err != nil {
		return err
	}
	type stored struct {
		key string
		st  bucket.State
	}
	var bs []stored
	var nowUS int64
	for rows.Next() {
		var b stored
		var level string
		var updated int64
		var idx []int64
		var sums []string
		if err := rows.Scan(&b.key, &level, &updated, &idx, &sums, &nowUS); err != nil {
			rows.Close()
			return err
		}
		lv, ok := bucket.ParseAmount(level)
		slots, err := slotsOf(idx, sums)
		if !ok || err != nil {
			rows.Close()
			return fmt.Errorf("decoding the bucket %q %v: %w", level, sums, errBadAnswer)
		}
		b.st = bucket.State{Level: lv, Updated: fromUS(updated), Slots: slots}
		bs = append(bs, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(bs) == 0 {
		return err
	}
	before, changed := &ovset.Set{}, &ovset.Set{}
	if overridden {
		if before, err = readOverrides(ctx, tx, l.id); err != nil {
			return err
		}
		if changed, err = readOverrides(ctx, tx, l.id); err != nil {
			return err
		}
	}
	base, now := l.lim, fromUS(nowUS)
	next := after(base, changed)
	var batch pgx.Batch
	for _, b := range bs {
		in := ledger.TermsInput{Limit: base, Key: b.key, State: b.st, Now: now}
		if before.Len() > 0 {
			in.Overrides = before
		}
		t := ledger.TermsAt(&in)
		ns := t.State
		if !t.Limit.SameRule(changed.Effective(next, b.key, now)) {
			ns, _ = bucket.Switch(t.Limit.Rule(), t.State, now)
		} else if !t.Settled {
			continue
		}
		var idx []int64
		var sums []string
		for _, sl := range ns.Slots {
			idx, sums = append(idx, sl.Index), append(sums, sl.Sum.String())
		}
		batch.Queue(`UPDATE buckets SET level = $3::numeric, updated_at = budgetd_from_us($4), slot_idx = $5, slot_sum = $6::numeric[]
			 WHERE limit_id = $1 AND key = $2`, l.id, b.key, ns.Level.String(), ns.Updated.UnixMicro(), idx, sums)
	}
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, &batch).Close()
}
