package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.OverrideStore = (*Store)(nil)

// A limit's overrides are rows of budgetd_overrides, one per pattern
// (migrations/mysql/0004). Every change of one bumps the limit's rev, so
// that a decision that read the terms before the change fails its
// compare-and-set and runs again, and its oseq, the number the changed row
// carries in seq (a delete leaves a tombstone, body NULL). Each Store keeps
// every limit's overrides it has read, parsed, with the oseq they reflect
// (overrideCache): a decision reads the limit's oseq with its row and, when
// the Store's copy is older, reads only the rows changed since. A limit that
// never had an override (oseq 0) costs nothing more.

// overrideCache is a Store's copy of its limits' overrides, by limit id.
// A copy is never changed: a refresh makes a new one.
type overrideCache struct {
	mu sync.Mutex
	m  map[uint64]overrideCopy
	// busy has a channel for each limit whose copy one decision is
	// bringing forward; it is closed when that is done. The others wait
	// for it rather than read the same rows (all of them, the first time)
	// at once.
	busy map[uint64]chan struct{}
}

// claim returns id's copy when it is at oseq or newer; else, when another
// caller is bringing it forward, a channel to wait on; else it makes the
// caller the one to do it (done: call it with the new copy, or none).
func (c *overrideCache) claim(id, oseq uint64) (cp overrideCopy, wait chan struct{}, done func(*overrideCopy)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp = c.m[id]
	if cp.seq >= oseq {
		return cp, nil, nil
	}
	if ch, ok := c.busy[id]; ok {
		return cp, ch, nil
	}
	if c.busy == nil {
		c.busy = map[uint64]chan struct{}{}
	}
	ch := make(chan struct{})
	c.busy[id] = ch
	return cp, nil, func(next *overrideCopy) {
		if next != nil {
			c.keep(id, *next)
		}
		c.mu.Lock()
		delete(c.busy, id)
		c.mu.Unlock()
		close(ch)
	}
}

// overrideCopy is a limit's overrides as they were at its oseq seq.
type overrideCopy struct {
	seq uint64
	set *ledger.Overrides
}

// keep stores cp as id's copy unless a newer one is there.
func (c *overrideCache) keep(id uint64, cp overrideCopy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[uint64]overrideCopy{}
	}
	if c.m[id].seq < cp.seq {
		c.m[id] = cp
	}
}

// forget drops a deleted limit's copy.
func (c *overrideCache) forget(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// overrides returns the overrides of limit id whose row read oseq: nil for
// none. The Store's copy serves when it is at oseq; an older one is brought
// forward by reading the rows whose seq is above its own (all of them the
// first time; changedOverrides), by one caller at a time for each limit.
// Those may be newer than oseq (a change committed after the limit's row was
// read): then exact asks for
// errConflict (a decision runs again, as when its compare-and-set of the rev
// fails), and otherwise the newer overrides are returned.
func (s *Store) overrides(ctx context.Context, q querier, id, oseq uint64, exact bool) (*ledger.Overrides, error) {
	if oseq == 0 {
		return nil, nil
	}
	var cp overrideCopy
	for {
		c, wait, done := s.ovs.claim(id, oseq)
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, classify(ctx.Err())
			}
		}
		if done != nil {
			next, err := changedOverrides(ctx, q, id, c)
			if err != nil {
				done(nil)
				return nil, err
			}
			done(&next)
			c = next
		}
		cp = c
		break
	}
	if exact && cp.seq != oseq {
		return nil, errConflict
	}
	return cp.set, nil
}

// changedOverrides returns cp brought forward by the rows of limit id whose
// seq is above cp's: a copy of its set with them applied, at the highest seq
// read. One statement through q (the decision's connection, in autocommit or
// in its locked attempt's transaction), a locking read, as eventsAfter reads
// events, for the same reason: changes take their seq under the limit's row
// lock and commit in that order, but InnoDB may let the next change take the
// lock (and commit) a moment before the first's commit is visible to a new
// snapshot; a consistent read could then return a later change without an
// earlier one, and the copy, labelled with the later seq, would miss the
// earlier one for good. A locking read reads the latest committed version of
// every row and waits for one still committing; its locks end with the
// statement, or with the transaction it is in (a change of the limit's
// overrides that meets them waits that long, or, on a deadlock, runs again).
func changedOverrides(ctx context.Context, q querier, id uint64, cp overrideCopy) (overrideCopy, error) {
	rows, err := q.QueryContext(ctx, "SELECT pattern, seq, body FROM budgetd_overrides WHERE limit_id = ? AND seq > ? LOCK IN SHARE MODE", id, cp.seq)
	if err != nil {
		return cp, classify(err)
	}
	set, seq := cp.set.Clone(), cp.seq
	if set == nil {
		set = &ledger.Overrides{}
	}
	for rows.Next() {
		var n uint64
		var body sql.NullString
		var pattern []byte
		if err := rows.Scan(&pattern, &n, &body); err != nil {
			rows.Close()
			return cp, classify(err)
		}
		seq = max(seq, n)
		if !body.Valid {
			set.Delete(string(pattern))
			continue
		}
		var o ledger.Override
		if err := json.Unmarshal([]byte(body.String), &o); err != nil {
			rows.Close()
			return cp, fmt.Errorf("mysql: override of limit %d: %w", id, err)
		}
		set.Put(o)
	}
	if err := rows.Close(); err != nil {
		return cp, classify(err)
	}
	return overrideCopy{seq: seq, set: set}, nil
}

// PutOverride creates or replaces an override, settling the buckets whose
// rule changes with it.
func (s *Store) PutOverride(ctx context.Context, limit string, o ledger.Override) (ledger.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out ledger.Override
	err := s.changeTerms(ctx, limit, o.Pattern, func(l limitRow, old *ledger.Override, now time.Time) (*ledger.Override, error) {
		if err := ledger.ValidateOverride(l.limit, o, now); err != nil {
			return nil, err
		}
		o.CreatedAt, o.UpdatedAt = now, now
		if old != nil && old.ActiveAt(now) {
			o.CreatedAt = old.CreatedAt
		}
		out = o
		return &o, nil
	})
	return out, err
}

// DeleteOverride removes an unexpired override, settling the buckets whose
// rule changes.
func (s *Store) DeleteOverride(ctx context.Context, limit, pattern string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.changeTerms(ctx, limit, pattern, func(l limitRow, old *ledger.Override, now time.Time) (*ledger.Override, error) {
		if old == nil || !old.ActiveAt(now) {
			return nil, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
		}
		return nil, nil
	})
}

// GetOverride returns an unexpired override: one row.
func (s *Store) GetOverride(ctx context.Context, limit, pattern string) (ledger.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitTx(ctx, s.db, limit, false)
	if err != nil {
		return ledger.Override{}, err
	}
	now, err := s.now(ctx, s.db)
	if err != nil {
		return ledger.Override{}, err
	}
	o, err := overrideRow(ctx, s.db, l.id, pattern, false)
	if err != nil {
		return ledger.Override{}, err
	}
	if o == nil || !o.ActiveAt(now) {
		return ledger.Override{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	return *o, nil
}

// ListOverrides lists a limit's unexpired overrides by pattern.
func (s *Store) ListOverrides(ctx context.Context, limit, after string, n int) ([]ledger.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitSet(ctx, s.db, limit)
	if err != nil {
		return nil, err
	}
	now, err := s.now(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return l.set.List(after, n, now), nil
}

// overrideRow reads the override of pattern, expired or not, nil when there
// is none (or a tombstone), locking the row (or its gap) when forUpdate.
func overrideRow(ctx context.Context, q querier, id uint64, pattern string, forUpdate bool) (*ledger.Override, error) {
	query := "SELECT body FROM budgetd_overrides WHERE limit_id = ? AND pattern = ?"
	if forUpdate {
		query += " FOR UPDATE"
	}
	var body sql.NullString
	err := q.QueryRowContext(ctx, query, id, []byte(pattern)).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !body.Valid {
		return nil, nil
	}
	if err != nil {
		return nil, classify(err)
	}
	var o ledger.Override
	if err := json.Unmarshal([]byte(body.String), &o); err != nil {
		return nil, fmt.Errorf("mysql: override %q of limit %d: %w", pattern, id, err)
	}
	return &o, nil
}

// candidatePatterns are the patterns that may cover key: the key itself and
// each of its prefixes followed by "*" (the empty one included).
func candidatePatterns(key string) []string {
	out := make([]string, 0, len(key)+2)
	out = append(out, key)
	for n := 0; n <= len(key); n++ {
		out = append(out, key[:n]+"*")
	}
	return out
}

// candidateBatch bounds the patterns of one IN list.
const candidateBatch = 500

// coveringOverrides reads, in the caller's transaction, every override
// (expired ones included) whose pattern covers one of keys, and pattern's:
// all that the terms of those keys' buckets read (termsAt resolves a
// bucket's key only), whatever the number of the limit's other overrides.
func coveringOverrides(ctx context.Context, tx *sql.Tx, id uint64, pattern string, keys []string) (*ledger.Overrides, error) {
	seen := map[string]bool{pattern: true}
	patterns := []string{pattern}
	for _, k := range keys {
		for _, p := range candidatePatterns(k) {
			if !seen[p] {
				seen[p] = true
				patterns = append(patterns, p)
			}
		}
	}
	set := &ledger.Overrides{}
	for len(patterns) > 0 {
		batch := patterns[:min(len(patterns), candidateBatch)]
		patterns = patterns[len(batch):]
		args := []any{id}
		for _, p := range batch {
			args = append(args, []byte(p))
		}
		rows, err := tx.QueryContext(ctx, "SELECT pattern, body FROM budgetd_overrides WHERE limit_id = ? AND body IS NOT NULL AND pattern IN (?"+strings.Repeat(", ?", len(batch)-1)+") LOCK IN SHARE MODE", args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var p []byte
			var body string
			if err := rows.Scan(&p, &body); err != nil {
				rows.Close()
				return nil, err
			}
			var o ledger.Override
			if err := json.Unmarshal([]byte(body), &o); err != nil {
				rows.Close()
				return nil, fmt.Errorf("mysql: override %q of limit %d: %w", p, id, err)
			}
			set.Put(o)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
	}
	return set, nil
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

// changeTerms runs change on the limit's override of pattern (nil: none,
// or a tombstone) in one transaction that holds the limit's row, settles at
// now, under the terms in force before the change, every bucket the pattern
// covers whose rule changes with it and whose stored level is positive
// (memory.Store.changeTerms), and writes the override's row (a tombstone
// when change returns nil) with the limit's next oseq and a new rev. It reads
// the overrides that cover those buckets only (coveringOverrides), so it
// costs the same whatever the number of the limit's other overrides.
func (s *Store) changeTerms(ctx context.Context, limit, pattern string, change func(l limitRow, old *ledger.Override, now time.Time) (*ledger.Override, error)) error {
	return s.withTx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		l, err := s.readLimitTx(ctx, tx, limit, true)
		if err != nil {
			return err
		}
		old, err := overrideRow(ctx, tx, l.id, pattern, true)
		if err != nil {
			return err
		}
		o, err := change(l, old, now)
		if err != nil {
			return err
		}
		bs, keys, err := coveredBuckets(ctx, tx, l.id, pattern)
		if err != nil {
			return err
		}
		if len(bs) > 0 {
			before, err := coveringOverrides(ctx, tx, l.id, pattern, keys)
			if err != nil {
				return err
			}
			after := before.Clone()
			if o != nil {
				after.Put(*o)
			} else {
				after.Delete(pattern)
			}
			if err := s.settleCovered(ctx, tx, l, before, after, bs, now); err != nil {
				return err
			}
		}
		var body sql.NullString
		if o != nil {
			b, err := json.Marshal(o)
			if err != nil {
				return err
			}
			body = sql.NullString{String: string(b), Valid: true}
		}
		// One round trip: the limit's row is held by this transaction, so
		// every change of its lock queue waits for as few as possible.
		_, err = tx.ExecContext(ctx, "UPDATE budgetd_limits SET rev = rev + 1, oseq = oseq + 1 WHERE id = ?;\n"+
			"INSERT INTO budgetd_overrides (limit_id, pattern, seq, body) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE seq = VALUES(seq), body = VALUES(body)",
			l.id, l.id, []byte(pattern), l.oseq+1, body)
		return err
	})
}

// coveredBuckets returns the rows of limit id's buckets that pattern covers
// and whose stored level is positive, locked for the transaction, and their
// keys.
func coveredBuckets(ctx context.Context, tx *sql.Tx, id uint64, pattern string) ([]bucketRow, []string, error) {
	rows, err := tx.QueryContext(ctx, "SELECT bkey, version, level, updated_us, extra, hseq, last_us FROM budgetd_buckets WHERE limit_id = ? AND level > 0 FOR UPDATE", id)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var bs []bucketRow
	var keys []string
	for rows.Next() {
		var b bucketRow
		if err := b.scan(rows); err != nil {
			return nil, nil, err
		}
		if (ledger.Override{Pattern: pattern}).Matches(b.key) {
			bs = append(bs, b)
			keys = append(keys, b.key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return bs, keys, rows.Close()
}

// settleCovered settles at now, in tx, each of bs (buckets of l) under the
// overrides before a change, and writes those whose rule the change moves
// (switched to the new rule, memory.Store.changeTerms) or whose settling
// at the expiries before now moved them.
func (s *Store) settleCovered(ctx context.Context, tx *sql.Tx, l limitRow, before, after *ledger.Overrides, bs []bucketRow, now time.Time) error {
	for _, b := range bs {
		// The bucket's terms before the change, with its rollover and
		// grants (memory.Store.changeTerms): the carry is kept with it.
		v := &view{now: now, limits: []limitRow{{id: l.id, rev: l.rev, set: before}}, base: []ledger.Limit{l.limit}, buckets: []bucketRow{b}, dirty: []bool{false}, entries: make([][]entryRow, 1)}
		// terms settled it at the expiries before now under the
		// overrides before the change: it is written when that moved
		// it, even when its rule at now stays, since the overrides
		// after the change may no longer tell those expiries.
		v.terms(0)
		prev, st := v.limits[0].limit, v.buckets[0].state
		if prev.SameRule(after.Effective(l.limit, b.key, now)) {
			if st.Updated.Equal(b.state.Updated) {
				continue
			}
			v.set(0, st)
		} else {
			ns, expired := bucket.Switch(prev.Rule(), st, now)
			v.expire(0, expired)
			v.set(0, ns)
		}
		if err := s.writeTx(ctx, tx, v); err != nil {
			return err
		}
	}
	return nil
}
