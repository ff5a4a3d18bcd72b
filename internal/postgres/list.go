package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// The listing statements read the tables directly and write nothing. Each
// is one statement, so it sees the limit, its buckets and their holds in one
// snapshot; a limit that does not exist yields no row at all. Keys are
// COLLATE "C", so the primary key (limit_id, key) gives byte order and a page
// costs one index range scan of n rows.

// listBucketsSQL reads a page of buckets as stored, with what their terms
// are computed from that only the bucket's rows hold (its holds, its active
// grants' sum, its rollover carry), and the limit's id and versions: the
// terms themselves are resolved in Go (ledger.TermsAt), from the limit as
// the index holds it when that is the version read here.
var listBucketsSQL = fmt.Sprintf(listSQL, "")

// listMarkedSQL is listBucketsSQL of the buckets whose marks are of the
// list with signature $5 and have a bit of $6: the partial index
// buckets_marked (migration 0023) holds exactly the marked buckets of each
// limit by signature and key, so a page reads only marked rows.
var listMarkedSQL = fmt.Sprintf(listSQL, "\n           AND b.th_above <> 0 AND b.th_sig = $5::integer AND (b.th_above & $6::smallint) <> 0")

const listSQL = `
WITH l AS (SELECT * FROM limits WHERE name = $1),
     t AS (SELECT coalesce($4::timestamptz, date_trunc('microseconds', clock_timestamp())) AS now)
SELECT l.id, budgetd_us(l.updated_at), coalesce(l.override_ver, 0), budgetd_us(t.now),
       b.key, b.level::text, budgetd_us(b.updated_at), hs.amounts, hs.expires, b.slot_idx, b.slot_sum::text[],
       b.carry_unused::text, b.carry_period, gs.amount, b.th_sig, b.th_above, b.th_period
  FROM l CROSS JOIN t
  LEFT JOIN LATERAL (
        SELECT b.key, b.level, b.updated_at, b.slot_idx, b.slot_sum, b.carry_unused, b.carry_period,
               b.th_sig, b.th_above, b.th_period
          FROM buckets b
         WHERE b.limit_id = l.id AND b.key > $2::text COLLATE "C" AND b.updated_at IS NOT NULL%s
         ORDER BY b.key
         LIMIT $3) b ON true
  LEFT JOIN LATERAL (
        SELECT array_agg(h.amount::text ORDER BY h.expires_at, h.id) AS amounts,
               array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id) AS expires
          FROM holds h
         WHERE h.limit_id = l.id AND h.key = b.key AND h.state = 'active') hs ON true
  LEFT JOIN LATERAL (
        SELECT budgetd_grant_sum(l.id, b.key, t.now)::text AS amount
         WHERE b.key IS NOT NULL AND l.grant_rows > 0) gs ON true
 ORDER BY b.key`

// errListStale reports a listing that read another version of the limit
// than the terms index holds: the index reads it again and the listing
// runs again.
var errListStale = errors.New("the limit changed during the listing")

// ListBuckets lists up to n of the limit's buckets with keys after after, in
// byte order, each with its active holds and under its terms, at the
// database clock. A bucket that crossed the end of a temporary rule change
// since its last write is listed settled there, as a decision would see it.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	return s.list(ctx, limit, listBucketsSQL, limit, after, n, s.nowArg())
}

// ListMarked is ListBuckets of the buckets whose marks are of the list
// with signature sig and have bit set (ledger.MarkedLister), through the
// index buckets_marked: a page reads only marked buckets.
func (s *Store) ListMarked(ctx context.Context, limit, after string, n int, sig uint32, bit uint8) ([]ledger.BucketSnapshot, error) {
	return s.list(ctx, limit, listMarkedSQL, limit, after, n, s.nowArg(), int32(sig), int16(bit))
}

// list runs a listing statement with args ($1 the limit's name) again
// while the terms index holds another version of the limit.
func (s *Store) list(ctx context.Context, limit, sql string, args ...any) ([]ledger.BucketSnapshot, error) {
	var out []ledger.BucketSnapshot
	var err error
	for range 3 {
		if out, err = s.listBuckets(ctx, limit, sql, args); !errors.Is(err, errListStale) {
			return out, err
		}
		s.terms.forget(limit)
	}
	return nil, fmt.Errorf("postgres list buckets of %q: %w", limit, err)
}

func (s *Store) listBuckets(ctx context.Context, limit, sql string, args []any) ([]ledger.BucketSnapshot, error) {
	lt, err := s.limitTerms(ctx, limit)
	if err != nil {
		return nil, err
	}
	var out []ledger.BucketSnapshot
	found := false
	err = s.do(ctx, "list buckets", func(ctx context.Context) error {
		out, found = out[:0], false
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r listRow
			if err := rows.Scan(&r.id, &r.rev, &r.over, &r.nowUS, &r.key, &r.level, &r.updated, &r.amounts, &r.expires, &r.slotIdx,
				&r.slotSums, &r.carryUnused, &r.carryPeriod, &r.grantSum, &r.thSig, &r.thAbove, &r.thPeriod); err != nil {
				return err
			}
			found = true
			if lt == nil || r.id != lt.id || r.rev != lt.rev || r.over != lt.over {
				return errListStale
			}
			if r.key == nil {
				continue // the limit has no bucket after after
			}
			snap, err := r.snapshot(lt)
			if err != nil {
				return err
			}
			out = append(out, snap)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if !found {
		if lt != nil {
			s.terms.forget(limit)
		}
		return nil, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
	}
	return out, nil
}

// listRow is a row of a listing's statement: the limit's id, rev and
// override version, the clock, and the bucket's columns (key nil when the
// limit has no bucket after the cursor).
type listRow struct {
	id, rev, over, nowUS int64
	key, level           *string
	updated              *int64
	amounts              []string
	expires              []int64
	slotIdx              []int64
	slotSums             []string
	carryUnused          *string
	carryPeriod          *int64
	grantSum             *string // the bucket's active grants, NULL when the limit has none
	thSig                *int32
	thAbove              *int16
	thPeriod             *int64
}

// snapshot is the bucket of r under its terms at the clock read, as lt's
// limit and overrides give them.
func (r *listRow) snapshot(lt *limitTerms) (ledger.BucketSnapshot, error) {
	now := fromUS(r.nowUS)
	var p numParser
	in := ledger.TermsInput{Limit: lt.lim, Key: *r.key, Overrides: lt.resolver(), Now: now,
		State: bucket.State{Level: ledger.Amount(p.num(*r.level))}}
	if r.updated != nil {
		in.State.Updated = fromUS(*r.updated)
	}
	for i := range r.amounts {
		in.State.Holds = append(in.State.Holds, bucket.Hold{Amount: ledger.Amount(p.num(r.amounts[i])), ExpiresAt: fromUS(r.expires[i])})
	}
	if r.carryUnused != nil && r.carryPeriod != nil {
		in.Carry = ledger.Carry{Unused: ledger.Amount(p.num(*r.carryUnused)), Period: *r.carryPeriod}
	}
	if r.grantSum != nil {
		// The sum of the grants active now, as one grant.
		in.Grants = []ledger.Grant{{Amount: p.num(*r.grantSum), ExpiresAt: now.Add(time.Microsecond)}}
	}
	if p.err != nil {
		return ledger.BucketSnapshot{}, p.err
	}
	var err error
	if in.State.Slots, err = slotsOf(r.slotIdx, r.slotSums); err != nil {
		return ledger.BucketSnapshot{}, err
	}
	t := ledger.TermsAt(&in)
	var marks ledger.Marks
	if r.thSig != nil {
		marks = ledger.Marks{Sig: uint32(*r.thSig), Above: uint8(*r.thAbove), Period: *r.thPeriod}
	}
	return ledger.BucketSnapshot{Key: *r.key, Snapshot: ledger.Snapshot{Limit: t.Limit, State: t.State, Now: now}, Marks: marks}, nil
}

const listHoldsSQL = `
WITH l AS (SELECT id, name FROM limits WHERE name = $1),
     t AS (SELECT coalesce($3::timestamptz, date_trunc('microseconds', clock_timestamp())) AS now)
SELECT l.name, h.id, h.amount::text, h.created_at, h.expires_at
  FROM l CROSS JOIN t
  LEFT JOIN LATERAL (
        SELECT h.id, h.amount, h.created_at, h.expires_at
          FROM holds h
         WHERE h.limit_id = l.id AND h.key = $2::text COLLATE "C" AND h.state = 'active' AND h.expires_at > t.now
         ORDER BY h.created_at, h.id
         LIMIT $4) h ON true
 ORDER BY h.created_at, h.id`

// ListHolds returns the bucket's holds that are active at the database
// clock, oldest first. The holds_bucket index (limit_id, key, state) finds
// them.
func (s *Store) ListHolds(ctx context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	var out []ledger.Reservation
	found := false
	err := s.do(ctx, "list holds", func(ctx context.Context) error {
		out, found = []ledger.Reservation{}, false
		rows, err := s.pool.Query(ctx, listHoldsSQL, ref.Limit, ref.Key, s.nowArg(), ledger.MaxHolds)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name             string
				id, amount       *string
				created, expires *time.Time
			)
			if err := rows.Scan(&name, &id, &amount, &created, &expires); err != nil {
				return err
			}
			found = true
			if id == nil {
				continue
			}
			var p numParser
			out = append(out, ledger.Reservation{
				ID: *id, Bucket: ref, Amount: p.num(*amount), State: ledger.Active,
				CreatedAt: created.UTC(), ExpiresAt: expires.UTC(),
			})
			if p.err != nil {
				return p.err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("limit %q: %w", ref.Limit, ledger.ErrLimitNotFound)
	}
	return out, nil
}

// numParser parses numeric text and keeps the first error.
type numParser struct{ err error }

func (p *numParser) num(s string) decimal.Decimal {
	d, err := decimal.NewFromString(s)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("postgres: numeric %q: %w", s, err)
	}
	return d
}
