package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// spec is a limit's terms as the spec column keeps them: decimals as exact
// strings, durations in microseconds.
type spec struct {
	Capacity      string             `json:"capacity"`
	LeakAmount    string             `json:"leak_amount"`
	LeakPerUS     int64              `json:"leak_per_us"`
	Period        *ledger.Period     `json:"period,omitempty"`
	WindowUS      *[2]int64          `json:"window_us,omitempty"` // length, precision
	History       bool               `json:"history"`
	RecordDenials bool               `json:"record_denials"`
	Mode          string             `json:"mode"`
	Grace         string             `json:"grace"`
	Thresholds    []ledger.Threshold `json:"thresholds,omitempty"`
	// A limit's overrides are rows of budgetd_overrides (overrides.go);
	// before schema version 4 they were a list "overrides" here, which
	// migrations/mysql/0004 moved there.
	// Rollover is the limit's rollover (nil: none).
	Rollover *ledger.Rollover `json:"rollover,omitempty"`
}

func encodeSpec(l ledger.Limit) (string, error) {
	sp := spec{
		Capacity: l.Capacity.String(), LeakAmount: l.LeakAmount.String(), LeakPerUS: l.LeakPer.Microseconds(),
		Period: l.Period, History: l.History, RecordDenials: l.RecordDenials, Mode: l.Mode, Grace: l.Grace.String(),
		Thresholds: l.Thresholds, Rollover: l.Rollover,
	}
	if l.Window != nil {
		sp.WindowUS = &[2]int64{l.Window.Length.Microseconds(), l.Window.Precision.Microseconds()}
	}
	b, err := json.Marshal(sp)
	return string(b), err
}

func decodeSpec(name, text string, createdUS, updatedUS int64) (ledger.Limit, error) {
	var sp spec
	if err := json.Unmarshal([]byte(text), &sp); err != nil {
		return ledger.Limit{}, fmt.Errorf("mysql: limit %q: spec: %w", name, err)
	}
	return limitOf(name, sp, createdUS, updatedUS)
}

// limitOf is the limit of a decoded spec.
func limitOf(name string, sp spec, createdUS, updatedUS int64) (ledger.Limit, error) {
	l := ledger.Limit{Name: name, LeakPer: time.Duration(sp.LeakPerUS) * time.Microsecond, Period: sp.Period,
		History: sp.History, RecordDenials: sp.RecordDenials, Mode: sp.Mode, Thresholds: sp.Thresholds, Rollover: sp.Rollover,
		CreatedAt: time.UnixMicro(createdUS).UTC(), UpdatedAt: time.UnixMicro(updatedUS).UTC()}
	var err error
	if l.Capacity, err = decimal.NewFromString(sp.Capacity); err != nil {
		return ledger.Limit{}, fmt.Errorf("mysql: limit %q: capacity: %w", name, err)
	}
	if l.LeakAmount, err = decimal.NewFromString(sp.LeakAmount); err != nil {
		return ledger.Limit{}, fmt.Errorf("mysql: limit %q: leak amount: %w", name, err)
	}
	if l.Grace, err = decimal.NewFromString(sp.Grace); err != nil {
		return ledger.Limit{}, fmt.Errorf("mysql: limit %q: grace: %w", name, err)
	}
	if sp.WindowUS != nil {
		l.Window = &bucket.Window{Length: time.Duration(sp.WindowUS[0]) * time.Microsecond, Precision: time.Duration(sp.WindowUS[1]) * time.Microsecond}
	}
	l.Prepare()
	return l, nil
}

// limitRow is a limit as a decision read it: its id and rev, which the
// decision's write checks, and oseq, the last change of its overrides.
type limitRow struct {
	id    uint64
	rev   uint64
	oseq  uint64
	limit ledger.Limit
	// set is its overrides at oseq (Store.overrides), nil until loaded
	// and when it has none. It is shared: never changed.
	set *ledger.Overrides
}

// PutLimit creates the limit or updates it in place. A change of its rule
// (leak rate, period or window) settles every bucket of the limit under the
// old rule at now (bucket.Switch), in the same transaction, as the memory
// store does.
func (s *Store) PutLimit(ctx context.Context, l ledger.Limit) (ledger.Limit, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out ledger.Limit
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		us := now.UnixMicro()
		old, err := s.readLimitTx(ctx, tx, l.Name, true)
		switch {
		case errors.Is(err, ledger.ErrLimitNotFound):
			text, err := encodeSpec(l)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO budgetd_limits (name, rev, spec, created_us, updated_us) VALUES (?, 1, ?, ?, ?)", []byte(l.Name), text, us, us); err != nil {
				return err
			}
			l.CreatedAt = now
		case err != nil:
			return err
		default:
			if !old.limit.SameRule(l) {
				// Every bucket is settled under its terms: all the overrides
				// (the limit's row is held, so they are those at oseq).
				if old.set, err = s.overrides(ctx, tx, old.id, old.oseq, false); err != nil {
					return err
				}
				if err := s.switchBuckets(ctx, tx, old, now); err != nil {
					return err
				}
			}
			text, err := encodeSpec(l)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE budgetd_limits SET rev = rev + 1, spec = ?, updated_us = ? WHERE id = ?", text, us, old.id); err != nil {
				return err
			}
			l.CreatedAt = old.limit.CreatedAt
		}
		l.UpdatedAt = now
		l.Prepare()
		out = l
		return nil
	})
	if err != nil {
		return ledger.Limit{}, err
	}
	return out, nil
}

// switchBuckets settles every bucket of old whose stored level is positive
// to now under old's rule (bucket.Switch), so that a new rule applies from
// now on only and every level is kept (memory.Store.switchLimit). The
// caller's transaction holds old's row for update, so no decision on the
// limit commits meanwhile.
func (s *Store) switchBuckets(ctx context.Context, tx *sql.Tx, old limitRow, now time.Time) error {
	rows, err := tx.QueryContext(ctx, "SELECT bkey, version, level, updated_us, extra, hseq, last_us FROM budgetd_buckets WHERE limit_id = ? AND level > 0 FOR UPDATE", old.id)
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
		bs = append(bs, b)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, b := range bs {
		v := &view{now: now, limits: []limitRow{old}, base: []ledger.Limit{old.limit}, buckets: []bucketRow{b}, dirty: []bool{false}, entries: make([][]entryRow, 1)}
		v.terms(0)
		ns, expired := bucket.Switch(v.limits[0].limit.Rule(), v.buckets[0].state, now)
		v.expire(0, expired)
		v.set(0, ns)
		if err := s.writeTx(ctx, tx, v); err != nil {
			return err
		}
	}
	return nil
}

// GetLimit returns a limit or ledger.ErrLimitNotFound.
func (s *Store) GetLimit(ctx context.Context, name string) (ledger.Limit, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.readLimitTx(ctx, s.db, name, false)
	if err != nil {
		return ledger.Limit{}, err
	}
	return r.limit, nil
}

// querier is a *sql.DB, *sql.Conn or *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// readLimitTx reads the named limit, locking its row for update when
// forUpdate.
func (s *Store) readLimitTx(ctx context.Context, q querier, name string, forUpdate bool) (limitRow, error) {
	query := "SELECT id, rev, oseq, spec, created_us, updated_us FROM budgetd_limits WHERE name = ?"
	if forUpdate {
		query += " FOR UPDATE"
	}
	var r limitRow
	var text string
	var created, updated int64
	err := q.QueryRowContext(ctx, query, []byte(name)).Scan(&r.id, &r.rev, &r.oseq, &text, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return limitRow{}, fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	if err != nil {
		return limitRow{}, classify(err)
	}
	r.limit, err = decodeSpec(name, text, created, updated)
	return r, err
}

// readLimitSet is readLimitTx (not for update) with the limit's overrides
// (Store.overrides), for the reads that apply them.
func (s *Store) readLimitSet(ctx context.Context, q querier, name string) (limitRow, error) {
	r, err := s.readLimitTx(ctx, q, name, false)
	if err != nil {
		return r, err
	}
	r.set, err = s.overrides(ctx, q, r.id, r.oseq, false)
	return r, err
}

// ListLimits returns up to n limits with names after after, by name.
func (s *Store) ListLimits(ctx context.Context, after string, n int) ([]ledger.Limit, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "SELECT name, spec, created_us, updated_us FROM budgetd_limits WHERE name > ? ORDER BY name LIMIT ?", []byte(after), n)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []ledger.Limit
	for rows.Next() {
		var name []byte
		var text string
		var created, updated int64
		if err := rows.Scan(&name, &text, &created, &updated); err != nil {
			return nil, classify(err)
		}
		l, err := decodeSpec(string(name), text, created, updated)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, classify(rows.Err())
}

// DeleteLimit removes a limit's row and the idempotency records of the calls
// that touched it, in one transaction. Its buckets, holds and history become
// invisible at once (they belong to the limit's id, which a re-created name
// does not reuse, and every read finds them through the limit's row; a
// decision in flight fails its check of the limit's rev) and are deleted in
// bounded batches by the pruner (pruneDeleted), which DeleteLimit wakes, as
// PostgreSQL's deleted_limits queue is.
func (s *Store) DeleteLimit(ctx context.Context, name string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var id uint64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		r, err := s.readLimitTx(ctx, tx, name, true)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM budgetd_idempotency WHERE limits LIKE ?", "%,"+strconv.FormatUint(r.id, 10)+",%"); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM budgetd_limits WHERE id = ?", r.id)
		id = r.id
		return err
	})
	if err != nil {
		return err
	}
	s.ovs.forget(id)
	select {
	case s.pruneKick <- struct{}{}:
	default:
	}
	return nil
}

// withTx runs fn in a transaction at the store's isolation level, again
// (bounded) after a deadlock or lock-wait timeout.
func (s *Store) withTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	level := sql.LevelRepeatableRead
	if s.isolation == ReadCommitted {
		level = sql.LevelReadCommitted
	}
	var err error
	for range s.attempts {
		var tx *sql.Tx
		tx, err = s.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			return classify(err)
		}
		if err = fn(tx); err == nil {
			err = tx.Commit()
		}
		if err == nil {
			return nil
		}
		_ = tx.Rollback()
		err = classify(err)
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return fmt.Errorf("%w: %d attempts: %w", ledger.ErrUnavailable, s.attempts, err)
}

// now reads the decision's clock: the pinned test clock, or the database's
// UTC_TIMESTAMP(6).
func (s *Store) now(ctx context.Context, q querier) (time.Time, error) {
	if t := s.clock(); !t.IsZero() {
		return t.UTC().Truncate(time.Microsecond), nil
	}
	var us int64
	if err := q.QueryRowContext(ctx, "SELECT "+clockSQL).Scan(&us); err != nil {
		return time.Time{}, classify(err)
	}
	return time.UnixMicro(us).UTC(), nil
}

// clockSQL is the database's clock in microseconds since the epoch, free of
// the session's time zone.
const clockSQL = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
