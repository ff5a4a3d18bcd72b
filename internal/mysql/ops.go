package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Inspect returns a bucket's state without writing anything: one read.
func (s *Store) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var snap ledger.Snapshot
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		snap = v.snapshot(0)
		return nil
	})
	return snap, err
}

// Fillup charges every item or none, with the rule of package bucket, as
// the memory store does.
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	refs := make([]ledger.BucketRef, len(items))
	for i, it := range items {
		refs[i] = it.Bucket
	}
	var out ledger.FillupOutcome
	decision := fillupDecision(items, idem, &out)
	var err error
	if len(refs) == 1 {
		err = s.decideGrouped(ctx, refs[0], decision, idem) // groupcommit.go
	} else {
		err = s.decide(ctx, refs, decision, withIdem(idem))
	}
	if err := replayed(err, &out); err != nil {
		return ledger.FillupOutcome{}, err
	}
	return out, nil
}

// fillupDecision is the decision of a Fillup of items with idem: every item
// or none, with the rule of package bucket, as the memory store decides it.
// It sets *out on every run (a decision may run again on a fresh view).
func fillupDecision(items []ledger.Charge, idem ledger.Idempotency, out *ledger.FillupOutcome) func(v *view) error {
	return func(v *view) error {
		*out = ledger.FillupOutcome{Accepted: true, Items: make([]ledger.ItemOutcome, len(items))}
		next := make([]bucket.State, len(items))
		ds := make([]bucket.Decision, len(items))
		for i, it := range items {
			ds[i], next[i] = bucket.Fillup(v.limits[i].limit.Rule(), v.buckets[i].state, v.now, ledger.Amount(it.Cost))
			out.Accepted = out.Accepted && ds[i].Accepted
		}
		for i, it := range items {
			l := v.limits[i].limit
			switch {
			case out.Accepted && it.Cost.Sign() > 0:
				before := v.buckets[i].state
				v.expire(i, bucket.Expired(before, v.now))
				v.set(i, next[i])
				v.notice(i, before)
				out.Items[i].EntryID = v.record(i, ledger.EventFillup, it.Cost, it.Meta, ds[i].ShadowDenied && l.RecordDenials)
			case !ds[i].Accepted && l.RecordDenials:
				out.Items[i].EntryID = v.record(i, ledger.EventDenied, it.Cost, it.Meta, false)
			}
			out.Items[i].Snapshot = v.snapshot(i)
		}
		return v.recordIdem(idem, out)
	}
}

// Drain lowers a bucket's level, clamped at zero.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out ledger.DrainOutcome
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		out = ledger.DrainOutcome{}
		// A drain that can remove nothing is a no-op, like a drain of 0.
		if removed, ns := bucket.Drain(v.limits[0].limit.Rule(), v.buckets[0].state, v.now, ledger.Amount(amount)); removed.Sign() > 0 {
			before := v.buckets[0].state
			v.expire(0, bucket.Expired(before, v.now))
			out.Removed = removed.Decimal()
			v.set(0, ns)
			v.notice(0, before)
			out.EntryID = v.record(0, ledger.EventDrain, out.Removed, meta, false)
		}
		out.Snapshot = v.snapshot(0)
		return v.recordIdem(idem, &out)
	}, withIdem(idem))
	if err := replayed(err, &out); err != nil {
		return ledger.DrainOutcome{}, err
	}
	return out, nil
}

// History lists a bucket's entries newest first (by time, then id), after
// cursor ("MICROS.ID").
func (s *Store) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var afterUS int64
	var afterSeq uint64
	if cursor != "" {
		t, id, ok := strings.Cut(cursor, ".")
		var err1, err2 error
		afterUS, err1 = strconv.ParseInt(t, 10, 64)
		afterSeq, err2 = strconv.ParseUint(id, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, "", &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "cursor", Reason: "malformed cursor"}
		}
	}
	// Holds that have expired are recorded first (their entries, at their
	// expiry, belong in the page).
	var l limitRow
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		l = v.limits[0]
		if !l.limit.History {
			return nil
		}
		if ns, expired := bucket.Expire(v.buckets[0].state, v.now); len(expired) > 0 {
			v.expire(0, expired)
			v.set(0, ns)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if !l.limit.History {
		return nil, "", nil
	}
	q := "SELECT seq, at_us, event, amount, reservation_id, grant_id, meta, shadow_denied FROM budgetd_history WHERE limit_id = ? AND bkey = ?"
	args := []any{l.id, []byte(ref.Key)}
	if cursor != "" {
		q += " AND (at_us < ? OR at_us = ? AND seq < ?)"
		args = append(args, afterUS, afterUS, afterSeq)
	}
	q += " ORDER BY at_us DESC, seq DESC LIMIT ?"
	args = append(args, n+1)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", classify(err)
	}
	defer rows.Close()
	var out []ledger.Entry
	for rows.Next() {
		var seq uint64
		var at int64
		var ev, amount string
		var hold, grant, meta sql.NullString
		var e ledger.Entry
		if err := rows.Scan(&seq, &at, &ev, &amount, &hold, &grant, &meta, &e.ShadowDenied); err != nil {
			return nil, "", classify(err)
		}
		a, ok := bucket.ParseAmount(amount)
		if !ok {
			return nil, "", fmt.Errorf("mysql: history amount %q", amount)
		}
		e.ID, e.Time, e.Event, e.Amount, e.ReservationID = strconv.FormatUint(seq, 10), time.UnixMicro(at).UTC(), ledger.Event(ev), a.Decimal(), hold.String
		e.GrantID = grant.String
		if meta.Valid {
			if err := json.Unmarshal([]byte(meta.String), &e.Meta); err != nil {
				return nil, "", fmt.Errorf("mysql: history meta: %w", err)
			}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", classify(err)
	}
	if len(out) > n {
		out = out[:n]
		last := out[n-1]
		return out, fmt.Sprintf("%d.%s", last.Time.UnixMicro(), last.ID), nil
	}
	return out, "", nil
}

// ListBuckets lists up to n of the limit's bucket rows with keys after
// after, by the bytes of their keys, each a Snapshot at the database's
// clock. It writes nothing.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitSet(ctx, s.db, limit)
	if err != nil {
		return nil, err
	}
	return s.snapshots(ctx, l, time.Time{}, "SELECT "+clockSQL+", "+bucketCols+" FROM budgetd_buckets b WHERE b.limit_id = ? AND b.bkey > ? ORDER BY b.bkey LIMIT ?", l.id, []byte(after), n)
}

// ListMarked is ListBuckets of the buckets with a mark above of the list
// with signature sig (ledger.MarkedLister), read through budgetd_marked
// (migrations/mysql 0007), which holds a row for each of them: a page
// reads only those buckets, and keeps those whose th_marked is still sig;
// the caller checks bit and period.
func (s *Store) ListMarked(ctx context.Context, limit, after string, n int, sig uint32, _ uint8) ([]ledger.BucketSnapshot, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitSet(ctx, s.db, limit)
	if err != nil {
		return nil, err
	}
	return s.snapshots(ctx, l, time.Time{}, "SELECT "+clockSQL+", "+bucketCols+" FROM "+markedFrom+
		" WHERE m.limit_id = ? AND m.sig = ? AND m.bkey > ? ORDER BY m.bkey LIMIT ?", l.id, sig, []byte(after), n)
}

// markedFrom reads a limit's marked buckets (m.limit_id and m.sig set in
// the WHERE) through budgetd_marked (migrations/mysql 0007), which may hold
// more rows than are marked, never fewer: the join keeps the buckets whose
// th_marked, the truth, is still the signature.
const markedFrom = "budgetd_marked m STRAIGHT_JOIN budgetd_buckets b ON b.limit_id = m.limit_id AND b.bkey = m.bkey AND b.th_marked = m.sig"

// snapshots reads the bucket rows of query (the clock in microseconds,
// then bucketCols) as snapshots of the limit l at now, or, where now is
// zero, at the store's clock or the one the row was read with.
func (s *Store) snapshots(ctx context.Context, l limitRow, now time.Time, query string, args ...any) ([]ledger.BucketSnapshot, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []ledger.BucketSnapshot
	for rows.Next() {
		var us int64
		var b bucketRow
		if err := b.scan(scanFunc(func(dest ...any) error { return rows.Scan(append([]any{&us}, dest...)...) })); err != nil {
			return nil, classify(err)
		}
		at := now
		if at.IsZero() {
			at = time.UnixMicro(us).UTC()
			if t := s.clock(); !t.IsZero() {
				at = t.UTC().Truncate(time.Microsecond)
			}
		}
		lim := termsAt(l.limit, l.set, &b, at)
		out = append(out, ledger.BucketSnapshot{Key: b.key, Snapshot: ledger.Snapshot{Limit: lim, State: b.state, Now: at}, Marks: b.marks})
	}
	return out, classify(rows.Err())
}

// Events lists up to n events after cursor (a sequence number), in the
// order of their sequence, which is their commit order.
func (s *Store) Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var after uint64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseUint(cursor, 10, 64); err != nil {
			return nil, "", &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "after", Reason: "is not a cursor this store gave"}
		}
	}
	out, err := s.eventsAfter(ctx, after, n)
	if err != nil || len(out) == 0 {
		return out, cursor, err
	}
	return out, out[len(out)-1].ID, nil
}

// eventsAfter reads up to n events after seq by a locking read, in a READ
// COMMITTED transaction of its own. A write takes its events' ids under the
// lock of the one row of budgetd_event_seq and holds it to its commit, so
// writes commit in id order; but InnoDB may let the next writer take that lock
// (and commit) a moment before the first's commit is visible to a new
// snapshot, and a consistent read would then pass over the first's events for
// good (once in about thirty runs of ThresholdsConcurrent on a loaded
// machine). A locking read reads the latest committed version and waits for a
// row whose insert is still committing, so no event is passed over. At READ
// COMMITTED it takes no gap locks: it never blocks the writers' inserts.
func (s *Store) eventsAfter(ctx context.Context, after uint64, n int) ([]ledger.OutboxEvent, error) {
	var err error
	for range s.attempts {
		var tx *sql.Tx
		if tx, err = s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}); err != nil {
			return nil, classify(err)
		}
		var out []ledger.OutboxEvent
		out, err = s.events(ctx, tx, "SELECT seq, body FROM budgetd_events WHERE seq > ? ORDER BY seq LIMIT ? LOCK IN SHARE MODE", after, n)
		if err == nil {
			err = classify(tx.Commit())
		}
		if err == nil {
			return out, nil
		}
		_ = tx.Rollback()
		if !errors.Is(err, errConflict) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: %d attempts: %w", ledger.ErrUnavailable, s.attempts, err)
}

// BucketEvents returns up to n of the bucket's events, newest first.
func (s *Store) BucketEvents(ctx context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitTx(ctx, s.db, ref.Limit, false)
	if errors.Is(err, ledger.ErrLimitNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.events(ctx, s.db, "SELECT seq, body FROM budgetd_events WHERE limit_id = ? AND bkey = ? ORDER BY seq DESC LIMIT ?", l.id, []byte(ref.Key), n)
}

// events reads the events a query selects (seq, body).
func (s *Store) events(ctx context.Context, q querier, query string, args ...any) ([]ledger.OutboxEvent, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []ledger.OutboxEvent
	for rows.Next() {
		var seq uint64
		var body string
		if err := rows.Scan(&seq, &body); err != nil {
			return nil, classify(err)
		}
		var e ledger.OutboxEvent
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			return nil, fmt.Errorf("mysql: event %d: %w", seq, err)
		}
		e.ID = strconv.FormatUint(seq, 10)
		out = append(out, e)
	}
	return out, classify(rows.Err())
}

var _ ledger.Store = (*Store)(nil)
