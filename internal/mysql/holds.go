package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// newHoldID returns a fresh hold id: "m" and 32 random hex digits.
func newHoldID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "m" + hex.EncodeToString(b[:])
}

// Reserve adds a hold when it fits (bucket.Reserve), as the memory store
// does.
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	id := newHoldID() // one id for every attempt: it is written once
	var out ledger.ReserveOutcome
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		out = ledger.ReserveOutcome{}
		l, st := v.limits[0].limit, v.buckets[0].state
		if len(bucket.ActiveHolds(st, v.now)) >= ledger.MaxHolds {
			return ledger.ErrTooManyHolds
		}
		d, ns := bucket.Reserve(l.Rule(), st, v.now, ledger.Amount(amount), v.now.Add(ttl))
		if !d.Accepted {
			if l.RecordDenials {
				out.EntryID = v.record(0, ledger.EventDenied, amount, meta, false)
			}
			out.Snapshot = v.snapshot(0)
			return v.recordIdem(idem, &out)
		}
		res := ledger.Reservation{ID: id, Bucket: ref, Amount: amount, State: ledger.Active, CreatedAt: v.now, ExpiresAt: v.now.Add(ttl)}
		ns.Holds[len(ns.Holds)-1].ID = id
		v.expire(0, bucket.Expired(st, v.now))
		v.set(0, ns)
		v.notice(0, st)
		v.holds = append(v.holds, holdOp{lim: v.limits[0].id, res: res})
		out.EntryID = v.recordAt(0, v.now, ledger.EventReserved, amount, id, meta, d.ShadowDenied && l.RecordDenials)
		out.Accepted, out.Reservation, out.Snapshot = true, res, v.snapshot(0)
		return v.recordIdem(idem, &out)
	}, withIdem(idem))
	if err := replayed(err, &out); err != nil {
		return ledger.ReserveOutcome{}, err
	}
	return out, nil
}

// holdCols are the columns holdRow.scan reads, of budgetd_holds h joined
// with budgetd_limits l.
const holdCols = "h.id, l.name, h.bkey, h.amount, h.state, h.committed_amount, h.created_us, h.expires_us, h.resolved_us"

// scanHold reads holdCols.
func scanHold(r scanner) (ledger.Reservation, error) {
	var res ledger.Reservation
	var id, name, key []byte
	var amount, state string
	var committed sql.NullString
	var created, expires, resolved int64
	if err := r.Scan(&id, &name, &key, &amount, &state, &committed, &created, &expires, &resolved); err != nil {
		return res, err
	}
	a, ok := bucket.ParseAmount(amount)
	if !ok {
		return res, fmt.Errorf("mysql: hold %s: amount %q", id, amount)
	}
	res = ledger.Reservation{ID: string(id), Bucket: ledger.BucketRef{Limit: string(name), Key: string(key)}, Amount: a.Decimal(),
		State: ledger.ReservationState(state), CreatedAt: time.UnixMicro(created).UTC(), ExpiresAt: time.UnixMicro(expires).UTC()}
	if resolved != 0 {
		res.ResolvedAt = time.UnixMicro(resolved).UTC()
	}
	if committed.Valid {
		c, ok := bucket.ParseAmount(committed.String)
		if !ok {
			return res, fmt.Errorf("mysql: hold %s: committed amount %q", id, committed.String)
		}
		res.CommittedAmount = decimal.NewNullDecimal(c.Decimal())
	}
	return res, nil
}

// Reservation returns a hold as stored and the store's clock: one read.
func (s *Store) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var us int64
	row := s.db.QueryRowContext(ctx, "SELECT "+clockSQL+", "+holdCols+" FROM budgetd_holds h JOIN budgetd_limits l ON l.id = h.limit_id WHERE h.id = ?", id)
	var res ledger.Reservation
	var err error
	res, err = scanHold(scanFunc(func(dest ...any) error { return row.Scan(append([]any{&us}, dest...)...) }))
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Reservation{}, time.Time{}, ledger.ErrReservationNotFound
	}
	if err != nil {
		return ledger.Reservation{}, time.Time{}, classify(err)
	}
	now := time.UnixMicro(us).UTC()
	if t := s.clock(); !t.IsZero() {
		now = t.UTC().Truncate(time.Microsecond)
	}
	return res, now, nil
}

// scanFunc is a scanner made of a function.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// Commit ends a hold and charges amount (the held amount when null).
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.resolve(ctx, id, idem, func(v *view, h *ledger.Reservation) (string, error) {
		l := v.limits[0].limit
		charge := h.Amount
		if amount.Valid {
			charge = amount.Decimal
		}
		switch h.State {
		case ledger.Committed:
			if h.CommittedAmount.Decimal.Equal(charge) {
				return "", nil
			}
			return ledger.RefusalClosed, nil
		case ledger.Released:
			return ledger.RefusalClosed, nil
		}
		if charge.GreaterThan(h.Amount) && !overrun {
			return ledger.RefusalExceedsHold, nil
		}
		// Refuse an overflow before anything moves: an error changes nothing.
		if bucket.LevelAt(l.Rule(), v.buckets[0].state, v.now).Add(ledger.Amount(charge)).GreaterThan(ledger.Amount(ledger.MaxLevel)) {
			return "", ledger.ErrLevelOverflow
		}
		v.resolveHold(h, charge)
		h.State, h.CommittedAmount, h.ResolvedAt = ledger.Committed, decimal.NewNullDecimal(charge), v.now
		v.holds = append(v.holds, holdOp{from: ledger.Active, lim: v.limits[0].id, res: *h})
		v.recordAt(0, v.now, ledger.EventCommitted, charge, h.ID, meta, false)
		return "", nil
	})
}

// Release ends a hold without charging.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.resolve(ctx, id, idem, func(v *view, h *ledger.Reservation) (string, error) {
		switch h.State {
		case ledger.Released:
			return "", nil
		case ledger.Committed:
			return ledger.RefusalClosed, nil
		}
		v.resolveHold(h, decimal.Zero)
		h.State, h.ResolvedAt = ledger.Released, v.now
		v.holds = append(v.holds, holdOp{from: ledger.Active, lim: v.limits[0].id, res: *h})
		v.recordAt(0, v.now, ledger.EventReleased, h.Amount, h.ID, meta, false)
		return "", nil
	})
}

// resolveHold ends the active, unexpired hold h of bucket 0 with
// bucket.Resolve, adding charge to the level.
func (v *view) resolveHold(h *ledger.Reservation, charge decimal.Decimal) {
	st := v.buckets[0].state
	i := slices.IndexFunc(st.Holds, func(x bucket.Hold) bool { return x.ID == h.ID })
	v.expire(0, bucket.Expired(st, v.now))
	v.set(0, bucket.Resolve(v.limits[0].limit.Rule(), st, v.now, i, ledger.Amount(charge)))
	v.notice(0, st)
}

// resolve runs the common part of Commit and Release: find the hold's
// bucket, read the hold with it, refuse an expired hold (recording its
// expiry), then let apply decide.
func (s *Store) resolve(ctx context.Context, id string, idem ledger.Idempotency, apply func(v *view, h *ledger.Reservation) (string, error)) (ledger.ResolveOutcome, error) {
	// A hold never moves to another bucket: its bucket is read once.
	h0, _, err := s.Reservation(ctx, id)
	if err != nil {
		return ledger.ResolveOutcome{}, err
	}
	var out ledger.ResolveOutcome
	err = s.decide(ctx, []ledger.BucketRef{h0.Bucket}, func(v *view) error {
		h := v.hold
		if h == nil {
			return ledger.ErrReservationNotFound
		}
		res := *h
		var refusal string
		if res.State == ledger.Expired || (res.State == ledger.Active && !v.now.Before(res.ExpiresAt)) {
			if ns, expired := bucket.Expire(v.buckets[0].state, v.now); len(expired) > 0 {
				v.expire(0, expired)
				v.set(0, ns)
				if i := slices.IndexFunc(expired, func(x bucket.Hold) bool { return x.ID == res.ID }); i >= 0 {
					res.State, res.ResolvedAt = ledger.Expired, res.ExpiresAt
				}
			}
			refusal = ledger.RefusalExpired
		} else {
			var err error
			if refusal, err = apply(v, &res); err != nil {
				return err
			}
		}
		out = ledger.ResolveOutcome{Reservation: res, Snapshot: v.snapshot(0), Refusal: refusal}
		return v.recordIdem(idem, &out)
	}, withHold(id), withIdem(idem))
	if errors.Is(err, ledger.ErrLimitNotFound) {
		return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
	}
	if err := replayed(err, &out); err != nil {
		return ledger.ResolveOutcome{}, err
	}
	return out, nil
}

// ListHolds returns the bucket's active holds, oldest first. It writes
// nothing.
func (s *Store) ListHolds(ctx context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitTx(ctx, s.db, ref.Limit, false)
	if err != nil {
		return nil, err
	}
	now, err := s.now(ctx, s.db)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+holdCols+" FROM budgetd_holds h JOIN budgetd_limits l ON l.id = h.limit_id WHERE h.limit_id = ? AND h.bkey = ? AND h.state = 'active' AND h.expires_us > ? ORDER BY h.created_us, h.id LIMIT ?",
		l.id, []byte(ref.Key), now.UnixMicro(), ledger.MaxHolds)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []ledger.Reservation
	for rows.Next() {
		r, err := scanHold(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, r)
	}
	return out, classify(rows.Err())
}
