package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

var _ ledger.RankedLister = (*Store)(nil)

// A page of who is near the cap ranked by used or share (docs/api.md, "Who
// is near the cap") is ranked here: one statement computes for every
// bucket of the limit an upper bound of its rank at the ranking's instant
// and returns a batch of buckets by that bound, highest first; budgetd
// reads their snapshots (ReadBuckets) and ranks them exactly, in package
// ledger, as it ranks every store's buckets. The bound is exact wherever
// the bucket's rule is the limit's own:
//
//   - used = the level at the instant under the limit's rule
//     (budgetd_level_at, the SQL of bucket.LevelAt, with the leak, the
//     period start or the window computed in Go from the limit the terms
//     index holds, whose version the statement checks) + the active holds
//     that have not expired by then. A bucket under a pattern of an
//     override that sets a rule term (a leak, a zone or start day, a window
//     length), expired or not, may have been settled at an override's end
//     or decides under another rule (ledger.TermsAt): its bound is its
//     stored level, which no leak, period start or settling raises, plus
//     its holds.
//   - share = used ÷ the capacity resolved at the read's now: the exact
//     override's, else the longest prefix's, else the limit's (the patterns
//     looked up by the lengths in limits.override_lens), plus the active
//     grants. The rollover a bucket receives only adds to it, so with
//     rollover the capacity is a lower bound. The quotient is rounded up
//     to shareScale digits.
//
// A bucket whose bound is exact and ranks at or before the page's cursor is
// left out: a page from the middle reads only its own candidates.

// shareScale is the fractional digits of a share's bound, rounded up.
const shareScale = 20

// rankTimeout is the least time the statement of RankBuckets is given
// (the store's timeout when longer): it reads every bucket of the limit.
const rankTimeout = time.Minute

// RankBuckets ranks the limit's buckets by a bound of their rank
// (ledger.RankedLister), in one statement over every bucket of the limit.
func (s *Store) RankBuckets(ctx context.Context, limit string, q ledger.RankQuery) (ledger.Ranking, error) {
	var r ledger.Ranking
	var err error
	for range 3 {
		if r, err = s.rank(ctx, limit, q); !errors.Is(err, errListStale) {
			return r, err
		}
		s.terms.forget(limit)
	}
	return r, fmt.Errorf("postgres rank buckets of %q: %w", limit, err)
}

// ReadBuckets reads the snapshots of the limit's buckets of keys at now
// (ledger.RankedLister), as ListBuckets reads a page.
func (s *Store) ReadBuckets(ctx context.Context, limit string, keys []string, now time.Time) ([]ledger.BucketSnapshot, error) {
	return s.list(ctx, limit, readBucketsSQL, limit, "", len(keys), now, keys)
}

// readBucketsSQL is listBucketsSQL of the buckets of the keys $5.
var readBucketsSQL = fmt.Sprintf(listSQL, "\n           AND b.key = ANY($5::text[])")

func (s *Store) rank(ctx context.Context, limit string, q ledger.RankQuery) (ledger.Ranking, error) {
	lt, err := s.limitTerms(ctx, limit)
	if err != nil {
		return ledger.Ranking{}, err
	}
	if lt == nil {
		// Not there when the index read it: it may be by now.
		s.terms.forget(limit)
		if lt, err = s.limitTerms(ctx, limit); err != nil {
			return ledger.Ranking{}, err
		}
		if lt == nil {
			return ledger.Ranking{}, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
		}
	}
	r := ledger.Ranking{At: q.At, Now: q.Now}
	if r.Now.IsZero() {
		if r.Now, err = s.dbNow(ctx); err != nil {
			return ledger.Ranking{}, err
		}
	}
	if r.At.IsZero() {
		r.At = r.Now
	}
	sql, args := rankStatement(lt, limit, q, r.At, r.Now)
	found := false
	// One read-only statement over every bucket of the limit, for people
	// and tools: at READ COMMITTED (a statement is one snapshot, and no
	// predicate lock on a million rows stands in a writer's way) and with
	// a deadline of its own, longer than a decision's.
	timeout := max(s.cfg.timeout, rankTimeout)
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly}
	err = s.doUntil(ctx, time.Now().Add(timeout), "rank buckets", func(ctx context.Context) error {
		r.Buckets, found = r.Buckets[:0], false
		return pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(timeout.Milliseconds(), 10)); err != nil {
				return err
			}
			var id, rev, over int64
			var key, bound *string
			rows, _ := tx.Query(ctx, sql, args...) // its error comes with the rows
			_, err := pgx.ForEachRow(rows, []any{&id, &rev, &over, &key, &bound}, func() error {
				found = true
				if id != lt.id || rev != lt.rev || over != lt.over {
					return errListStale
				}
				if key == nil {
					return nil // no bucket after q.After
				}
				b, err := decimal.NewFromString(*bound)
				if err != nil {
					return fmt.Errorf("postgres: numeric %q: %w", *bound, err)
				}
				r.Buckets = append(r.Buckets, ledger.RankBound{Bound: b, Key: *key})
				return nil
			})
			return err
		})
	})
	if err != nil {
		return ledger.Ranking{}, err
	}
	if !found {
		s.terms.forget(limit)
		return ledger.Ranking{}, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
	}
	return r, nil
}

// dbNow is the instant a listing reads at: the store's clock when one is
// set, else the database's.
func (s *Store) dbNow(ctx context.Context) (time.Time, error) {
	var us int64
	err := s.do(ctx, "rank buckets", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT budgetd_us(coalesce($1::timestamptz, date_trunc('microseconds', clock_timestamp())))`,
			s.nowArg()).Scan(&us)
	})
	return fromUS(us), err
}

// sqlArgs numbers a statement's arguments as they are added.
type sqlArgs []any

// add appends v and returns its placeholder, cast to typ.
func (a *sqlArgs) add(v any, typ string) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a)) + "::" + typ
}

// rankStatement is the statement of a batch of q on the limit lt, at the
// ranking's instant at, read at now, and its arguments.
func rankStatement(lt *limitTerms, limit string, q ledger.RankQuery, at, now time.Time) (string, []any) {
	var a sqlArgs
	name, nowP, atP, nP := a.add(limit, "text"), a.add(now, "timestamptz"), a.add(at, "timestamptz"), a.add(q.N, "integer")
	share := q.Order == ledger.OrderShare
	rule := lt.lim.Rule()
	var leak, per, start, wlen, wprec any
	switch {
	case rule.Window != nil:
		wlen, wprec = rule.Window.Length.Microseconds(), rule.Window.Precision.Microseconds()
	case rule.Period != nil:
		from, _ := rule.Period.Bounds(at)
		start = from.UnixMicro()
	default:
		leak, per = rule.LeakAmount.String(), rule.LeakPer.Microseconds()
	}
	level := fmt.Sprintf("budgetd_level_at(b.level, b.updated_at, %s, %s, %s, %s, %s, %s, b.slot_idx, b.slot_sum)",
		a.add(leak, "numeric"), a.add(per, "bigint"), atP, a.add(start, "bigint"), a.add(wlen, "bigint"), a.add(wprec, "bigint"))
	rules := lt.set.ChangesRules()
	var capP string
	if share {
		capP = a.add(lt.lim.Capacity.String(), "numeric")
	}
	var joins strings.Builder
	exact := "true"
	if rules {
		level = "CASE WHEN o.ruled THEN greatest(b.level, 0) ELSE " + level + " END"
		exact = "NOT coalesce(o.ruled, false)"
	}
	capacity := "NULL::numeric"
	if share {
		capacity = capP
	}
	if lt.set != nil && (share || rules) {
		joins.WriteString(strings.ReplaceAll(overridesJoin, "{now}", nowP))
		if share {
			capacity = "coalesce(o.capacity, " + capP + ")"
		}
	}
	if share {
		joins.WriteString(strings.ReplaceAll(grantsJoin, "{now}", nowP))
		capacity += " + coalesce(g.amount, 0)"
		if r := lt.lim.Rollover; r != nil && lt.lim.Period != nil && r.Max.Sign() > 0 {
			exact = "false" // the rollover received is not in the bound
		}
	}
	marks := ""
	if q.Marked {
		marks = fmt.Sprintf("\n                           AND b.th_above <> 0 AND b.th_sig = %s AND (b.th_above & %s) <> 0",
			a.add(int32(q.Sig), "integer"), a.add(int16(q.Bit), "smallint"))
	}
	bound := "u.used"
	if share {
		bound = fmt.Sprintf("(div(u.used * 1e%d, u.capacity) + CASE WHEN mod(u.used * 1e%[1]d, u.capacity) > 0 THEN 1 ELSE 0 END) * 1e-%[1]d", shareScale)
	}
	var where []string
	if q.Skip != nil && exact != "false" {
		used, key := a.add(q.Skip.Used.String(), "numeric"), a.add(q.Skip.Key, `text COLLATE "C"`)
		if share {
			c := a.add(q.Skip.Capacity.String(), "numeric")
			where = append(where, fmt.Sprintf("NOT (u.exact AND (u.used * %s > %s * u.capacity OR u.used * %[1]s = %[2]s * u.capacity AND u.key <= %s))", c, used, key))
		} else {
			where = append(where, fmt.Sprintf("NOT (u.exact AND (u.used > %s OR u.used = %[1]s AND u.key <= %s))", used, key))
		}
	}
	if q.After != nil {
		b, k := a.add(q.After.Bound.String(), "numeric"), a.add(q.After.Key, `text COLLATE "C"`)
		where = append(where, fmt.Sprintf("(u.bound < %s OR u.bound = %[1]s AND u.key > %s)", b, k))
	}
	cond := "true"
	if len(where) > 0 {
		cond = strings.Join(where, "\n           AND ")
	}
	return strings.NewReplacer("{name}", name, "{now}", nowP, "{at}", atP, "{n}", nP, "{level}", level, "{capacity}", capacity,
		"{exact}", exact, "{joins}", joins.String(), "{marks}", marks, "{bound}", bound, "{where}", cond).Replace(rankSQL), a
}

// overridesJoin finds the overrides whose patterns cover a bucket's key
// (one probe of the primary key per length in limits.override_lens, -1
// for the exact pattern): whether one of them sets a rule term, and the
// capacity of the one in force at {now} (the exact pattern, else the
// longest prefix; NULL for the limit's).
const overridesJoin = `
                          LEFT JOIN LATERAL (
                                SELECT bool_or(o.leak_per_us IS NOT NULL OR o.period_tz IS NOT NULL
                                               OR o.period_start_day IS NOT NULL OR o.window_length_us IS NOT NULL) AS ruled,
                                       (array_agg(o.capacity ORDER BY u.n < 0 DESC, u.n DESC)
                                          FILTER (WHERE o.expires_at IS NULL OR o.expires_at > {now}))[1] AS capacity
                                  FROM unnest(l.override_lens) AS u(n)
                                  JOIN overrides o ON o.limit_id = l.id
                                                  AND o.pattern = CASE WHEN u.n < 0 THEN b.key ELSE left(b.key, u.n) || '*' END
                                 WHERE u.n < 0 OR char_length(b.key) >= u.n) o ON true`

// grantsJoin is each bucket's sum of the grants active at {now}.
const grantsJoin = `
                          LEFT JOIN (SELECT g.key, sum(g.amount) AS amount FROM grants g
                                      WHERE g.limit_id = l.id AND g.expires_at > {now}
                                      GROUP BY g.key) g ON g.key = b.key`

// rankSQL is the statement of RankBuckets: the limit's row and versions,
// then up to $4 buckets by bound (a row of NULLs for none). OFFSET 0 keeps
// each computed column computed once.
const rankSQL = `
WITH l AS (SELECT l.id, budgetd_us(l.updated_at) AS rev, coalesce(l.override_ver, 0) AS over, l.override_lens,
                  {now} AS now
             FROM limits l WHERE l.name = {name})
SELECT l.id, l.rev, l.over, c.key, c.bound::text
  FROM l
  LEFT JOIN LATERAL (
        SELECT u.key, u.bound
          FROM (SELECT u.*, {bound} AS bound
                  FROM (SELECT b.key, {level} + coalesce(h.amount, 0) AS used, {capacity} AS capacity, {exact} AS exact
                          FROM buckets b
                          LEFT JOIN (SELECT h.key, sum(h.amount) AS amount FROM holds h
                                      WHERE h.limit_id = l.id AND h.state = 'active' AND h.expires_at > {at}
                                      GROUP BY h.key) h ON h.key = b.key{joins}
                         WHERE b.limit_id = l.id AND b.updated_at IS NOT NULL{marks}
                        OFFSET 0) u
                OFFSET 0) u
         WHERE {where}
         ORDER BY u.bound DESC, u.key
         LIMIT {n}) c ON true
 ORDER BY c.bound DESC, c.key`
