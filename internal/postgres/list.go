package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// The listing statements read the tables directly and write nothing. A
// bucket that crossed the expiry of an override that changed its rule is
// listed settled there (budgetd_expiry_switch), as a decision would see it. Each is
// one statement, so it sees the limit, its buckets and their holds in one
// snapshot; a limit that does not exist yields no row at all. Keys are
// COLLATE "C", so the primary key (limit_id, key) gives byte order and a page
// costs one index range scan of n rows.

const listBucketsSQL = `
WITH l AS (SELECT * FROM limits WHERE name = $1),
     t AS (SELECT coalesce($4::timestamptz, date_trunc('microseconds', clock_timestamp())) AS now)
SELECT l.name, l.capacity::text, l.leak_amount::text, l.leak_per_us, l.period_every, l.period_tz, l.period_start_day,
       l.window_length_us, l.window_precision_us, l.history, l.record_denials, l.mode, l.grace::text, l.thresholds, l.created_at, l.updated_at, t.now,
       b.key, coalesce(sx.level, b.level)::text, coalesce(sx.updated_at, b.updated_at), hs.amounts, hs.expires,
       CASE WHEN sx.switched THEN NULL ELSE b.slot_idx END, CASE WHEN sx.switched THEN NULL ELSE b.slot_sum::text[] END,
       o.pattern, o.capacity::text, o.leak_amount::text, o.leak_per_us, o.period_tz, o.period_start_day, o.window_length_us,
       gs.amount, l.rollover_max::text, ro.received
  FROM l CROSS JOIN t
  LEFT JOIN LATERAL (
        SELECT b.key, b.level, b.updated_at, b.slot_idx, b.slot_sum
          FROM buckets b
         WHERE b.limit_id = l.id AND b.key > $2::text COLLATE "C" AND b.updated_at IS NOT NULL
         ORDER BY b.key
         LIMIT $3) b ON true
  LEFT JOIN LATERAL (
        SELECT s.level, s.updated_at, s.switched
          FROM limits li CROSS JOIN LATERAL budgetd_expiry_switch(li, b.key, b.level, b.updated_at, b.slot_idx, b.slot_sum, t.now) s
         WHERE li.id = l.id AND b.key IS NOT NULL AND l.override_rules AND l.override_expiry > b.updated_at AND s.switched) sx ON true
  LEFT JOIN LATERAL (
        SELECT array_agg(h.amount::text ORDER BY h.expires_at, h.id) AS amounts,
               array_agg(h.expires_at ORDER BY h.expires_at, h.id) AS expires
          FROM holds h
         WHERE h.limit_id = l.id AND h.key = b.key AND h.state = 'active') hs ON true
  LEFT JOIN LATERAL (
        SELECT (budgetd_override_of(l.id, l.override_lens, b.key, t.now)).*
         WHERE b.key IS NOT NULL AND cardinality(l.override_lens) > 0) o ON true
  LEFT JOIN LATERAL (
        SELECT budgetd_grant_sum(l.id, b.key, t.now)::text AS amount
         WHERE b.key IS NOT NULL AND l.grant_rows > 0) gs ON true
  LEFT JOIN LATERAL (
        SELECT (budgetd_terms(li, b.key, t.now)).rollover::text AS received
          FROM limits li
         WHERE li.id = l.id AND b.key IS NOT NULL AND l.rollover_max IS NOT NULL) ro ON true
 ORDER BY b.key`

// ListBuckets lists up to n of the limit's buckets with keys after after, in
// byte order, each with its active holds, at the database clock.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	var out []ledger.BucketSnapshot
	found := false
	err := s.do(ctx, "list buckets", func(ctx context.Context) error {
		out, found = out[:0], false
		rows, err := s.pool.Query(ctx, listBucketsSQL, limit, after, n, s.nowArg())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				l             ledger.Limit
				capacity      string
				grace         string
				ths           []string
				amount, every *string // leak_amount: NULL unless leaky; period_every: NULL unless periodic
				perUS         *int64
				tz            *string
				startDay      *int32
				wlen, wprec   *int64 // NULL unless a window
				slotIdx       []int64
				slotSums      []string
				now           time.Time
				key, level    *string
				updated       *time.Time
				amounts       []string
				expires       []time.Time
				ovr           overrideCols
				grantSum      *string // the bucket's active grants, NULL when the limit has none
				rolloverMax   *string // the limit's rollover max, NULL for none
				received      *string // the rollover the bucket receives (budgetd_terms), NULL for none
			)
			if err := rows.Scan(&l.Name, &capacity, &amount, &perUS, &every, &tz, &startDay, &wlen, &wprec, &l.History, &l.RecordDenials, &l.Mode, &grace, &ths, &l.CreatedAt, &l.UpdatedAt, &now,
				&key, &level, &updated, &amounts, &expires, &slotIdx, &slotSums,
				&ovr.pattern, &ovr.capacity, &ovr.leakAmount, &ovr.leakPerUS, &ovr.tz, &ovr.startDay, &ovr.windowUS, &grantSum, &rolloverMax, &received); err != nil {
				return err
			}
			found = true
			if key == nil {
				continue // the limit has no bucket after after
			}
			var p numParser
			l.Capacity = p.num(capacity)
			l.Mode, l.Grace = storedMode(l.Mode, p.num(grace))
			l.Thresholds = storedThresholds(ths)
			switch {
			case every != nil && tz != nil: // a periodic limit (the table's check: leak fields NULL)
				l.Period = &ledger.Period{Every: *every, TZ: *tz}
				if startDay != nil {
					l.Period.StartDay = int(*startDay)
				}
			case amount != nil && perUS != nil:
				l.LeakAmount, l.LeakPer = p.num(*amount), time.Duration(*perUS)*time.Microsecond
			case wlen != nil && wprec != nil:
				l.Window = (&windowDoc{LengthUS: *wlen, PrecisionUS: *wprec}).window()
			default:
				return fmt.Errorf("postgres: limit %q has none of a leak, a period and a window", l.Name)
			}
			l.CreatedAt, l.UpdatedAt = l.CreatedAt.UTC(), l.UpdatedAt.UTC()
			if ovr.pattern != nil {
				// Applied in Go, as the rule is: the listing computes the
				// calendar itself and needs no table of period starts.
				l = ovr.override(&p).Apply(l)
			}
			if rolloverMax != nil {
				l.Rollover = &ledger.Rollover{Max: p.num(*rolloverMax)}
			}
			if received != nil {
				// What the server computed by ledger.CarryAt's rule, max applied.
				l.Received = p.num(*received)
				l.Capacity = l.Capacity.Add(l.Received)
			}
			if grantSum != nil {
				l = l.WithGrants(p.num(*grantSum))
			}
			st := bucket.State{Level: ledger.Amount(p.num(*level))}
			if updated != nil {
				st.Updated = updated.UTC()
			}
			for i := range amounts {
				st.Holds = append(st.Holds, bucket.Hold{Amount: ledger.Amount(p.num(amounts[i])), ExpiresAt: expires[i].UTC()})
			}
			if p.err != nil {
				return p.err
			}
			if st.Slots, err = slotsOf(slotIdx, slotSums); err != nil {
				return err
			}
			out = append(out, ledger.BucketSnapshot{Key: *key, Snapshot: ledger.Snapshot{Limit: l, State: st, Now: now.UTC()}})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
	}
	return out, nil
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
