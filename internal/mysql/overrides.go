package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.OverrideStore = (*Store)(nil)

// A limit's overrides live in its row (spec), so that every decision reads
// them with the limit and any change of them bumps its rev: a decision that
// read the terms before a change runs again after it.

// PutOverride creates or replaces an override, settling the buckets whose
// rule changes with it.
func (s *Store) PutOverride(ctx context.Context, limit string, o ledger.Override) (ledger.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out ledger.Override
	err := s.changeTerms(ctx, limit, o.Pattern, func(l limitRow, now time.Time) error {
		if err := ledger.ValidateOverride(l.limit, o, now); err != nil {
			return err
		}
		o.CreatedAt, o.UpdatedAt = now, now
		if old, ok := l.set.Get(o.Pattern); ok && old.ActiveAt(now) {
			o.CreatedAt = old.CreatedAt
		}
		l.set.Put(o)
		out = o
		return nil
	})
	return out, err
}

// DeleteOverride removes an unexpired override, settling the buckets whose
// rule changes.
func (s *Store) DeleteOverride(ctx context.Context, limit, pattern string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.changeTerms(ctx, limit, pattern, func(l limitRow, now time.Time) error {
		if o, ok := l.set.Get(pattern); !ok || !o.ActiveAt(now) {
			return fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
		}
		l.set.Delete(pattern)
		return nil
	})
}

// GetOverride returns an unexpired override.
func (s *Store) GetOverride(ctx context.Context, limit, pattern string) (ledger.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, now, err := s.limitNow(ctx, limit)
	if err != nil {
		return ledger.Override{}, err
	}
	o, ok := l.set.Get(pattern)
	if !ok || !o.ActiveAt(now) {
		return ledger.Override{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	return o, nil
}

// ListOverrides lists a limit's unexpired overrides by pattern.
func (s *Store) ListOverrides(ctx context.Context, limit, after string, n int) ([]ledger.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, now, err := s.limitNow(ctx, limit)
	if err != nil {
		return nil, err
	}
	return l.set.List(after, n, now), nil
}

// allOverrides returns every override of set, expired ones included: the
// capacity in force at a period's end, which a bucket's rollover is computed
// from at its first call of the next period, is that of the override that
// applied then (docs/terms.md "Rollover"), as on the memory and PostgreSQL
// stores, which keep expired overrides too. (Every override is active at the
// zero time: its expires_at was in the future when it was made.)
func allOverrides(set *ledger.Overrides) []ledger.Override {
	return set.List("", math.MaxInt, time.Time{})
}

// limitNow reads a limit and the store's clock.
func (s *Store) limitNow(ctx context.Context, name string) (limitRow, time.Time, error) {
	l, err := s.readLimitTx(ctx, s.db, name, false)
	if err != nil {
		return limitRow{}, time.Time{}, err
	}
	now, err := s.now(ctx, s.db)
	return l, now, err
}

// changeTerms runs change on the limit's overrides in one transaction that
// holds the limit's row, settles at now, under the terms in force before the
// change, every bucket the pattern covers whose rule changes with it and
// whose stored level is positive (memory.Store.changeTerms), and stores the
// overrides with a new rev.
func (s *Store) changeTerms(ctx context.Context, limit, pattern string, change func(l limitRow, now time.Time) error) error {
	return s.withTx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		l, err := s.readLimitTx(ctx, tx, limit, true)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT bkey, version, level, updated_us, extra, hseq, last_us FROM budgetd_buckets WHERE limit_id = ? AND level > 0 FOR UPDATE", l.id)
		if err != nil {
			return err
		}
		var bs []bucketRow
		for rows.Next() {
			var b bucketRow
			if err := b.scan(rows); err != nil {
				rows.Close()
				return err
			}
			if (ledger.Override{Pattern: pattern}).Matches(b.key) {
				bs = append(bs, b)
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		before := &ledger.Overrides{}
		for _, o := range allOverrides(l.set) {
			before.Put(o)
		}
		if err := change(l, now); err != nil {
			return err
		}
		for _, b := range bs {
			// The bucket's terms before the change, with its rollover and
			// grants (memory.Store.changeTerms): the carry is kept with it.
			v := &view{now: now, limits: []limitRow{{id: l.id, rev: l.rev, set: before}}, base: []ledger.Limit{l.limit}, buckets: []bucketRow{b}, dirty: []bool{false}, entries: make([][]entryRow, 1)}
			// terms settled it at the expiries before now under the
			// overrides before the change: it is written when that moved
			// it, even when its rule at now stays, since the overrides
			// after the change may no longer tell those expiries.
			v.terms(0)
			old, st := v.limits[0].limit, v.buckets[0].state
			if old.SameRule(l.set.Effective(l.limit, b.key, now)) {
				if st.Updated.Equal(b.state.Updated) {
					continue
				}
				v.set(0, st)
			} else {
				ns, expired := bucket.Switch(old.Rule(), st, now)
				v.expire(0, expired)
				v.set(0, ns)
			}
			q, args, err := s.writeSQL(v, false, false)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		text, err := encodeSpec(l.limit, allOverrides(l.set))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE budgetd_limits SET rev = rev + 1, spec = ? WHERE id = ?", text, l.id)
		return err
	})
}
