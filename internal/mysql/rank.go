package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.RankedLister = (*Store)(nil)

// A page of who is near the cap ranked by used or share (docs/api.md, "Who
// is near the cap") is ranked here as on PostgreSQL: one statement computes
// for every bucket of the limit an upper bound of its rank at the ranking's
// instant and returns a batch of buckets by that bound, highest first;
// budgetd reads their snapshots (ReadBuckets) and ranks them exactly, in
// package ledger. The statement translates only the rule's level, not the
// terms (docs/mysql.md, "Who is near the cap"):
//
//   - used = the level at the instant under the limit's rule (a leak's
//     microseconds rounded down as bucket.LevelAt rounds them, or the
//     period start computed in Go) + the holds of the row's JSON that have
//     not expired by then. A bucket whose key an override that sets a rule
//     term covers (expired or not), and every bucket of a window limit, is
//     bound by its stored level (plus its window slots), which no leak,
//     period start or settling raises.
//   - share = used ÷ the capacity of the override that resolves for the
//     key at the read's now (the exact pattern, else the longest prefix,
//     as CASE over the patterns), else the limit's, rounded up to
//     shareScale digits. Grants and the rollover received only add to a
//     capacity, so leaving them out keeps the bound a bound.
//
// The limit, its overrides and the buckets are read in one read-only
// REPEATABLE READ transaction, one snapshot. By used, q.Skip leaves out the
// buckets whose used is exact (under the limit's rule, which is not a
// window) and ranks at or before it, so a page from the middle does not
// read and rank the candidates of the pages before it again. By share
// nothing is skipped: the capacity leaves out grants and the rollover, so
// no share is known exactly.

// shareScale is the fractional digits of a share's bound, rounded up.
const shareScale = 20

// rankTimeout is the least time RankBuckets is given (the store's timeout
// when longer): its statement reads every bucket of the limit.
const rankTimeout = time.Minute

// readChunk bounds the keys of one statement of ReadBuckets (a statement
// takes at most 65,535 placeholders).
const readChunk = 1000

// RankBuckets ranks the limit's buckets by a bound of their rank
// (ledger.RankedLister), in one statement over every bucket of the limit.
func (s *Store) RankBuckets(ctx context.Context, limit string, q ledger.RankQuery) (ledger.Ranking, error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.timeout, rankTimeout))
	defer cancel()
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return ledger.Ranking{}, classify(err)
	}
	defer func() { _ = tx.Rollback() }() // read-only: nothing to keep
	l, err := s.readLimitTx(ctx, tx, limit, false)
	if err != nil {
		return ledger.Ranking{}, err
	}
	ovs, err := limitOverrides(ctx, tx, l.id)
	if err != nil {
		return ledger.Ranking{}, err
	}
	r := ledger.Ranking{At: q.At, Now: q.Now}
	if r.Now.IsZero() {
		if r.Now, err = s.now(ctx, tx); err != nil {
			return ledger.Ranking{}, err
		}
	}
	if r.At.IsZero() {
		r.At = r.Now
	}
	query, args := rankStatement(l, ovs, q, r.At, r.Now)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return ledger.Ranking{}, classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key []byte
		var bound string
		if err := rows.Scan(&key, &bound); err != nil {
			return ledger.Ranking{}, classify(err)
		}
		b, err := decimal.NewFromString(bound)
		if err != nil {
			return ledger.Ranking{}, fmt.Errorf("mysql: rank bound %q: %w", bound, err)
		}
		r.Buckets = append(r.Buckets, ledger.RankBound{Bound: b, Key: string(key)})
	}
	if err := rows.Err(); err != nil {
		return ledger.Ranking{}, classify(err)
	}
	return r, nil
}

// ReadBuckets reads the snapshots of the limit's buckets of keys at now
// (ledger.RankedLister), as ListBuckets reads a page, readChunk keys a
// statement.
func (s *Store) ReadBuckets(ctx context.Context, limit string, keys []string, now time.Time) ([]ledger.BucketSnapshot, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	l, err := s.readLimitSet(ctx, s.db, limit)
	if err != nil {
		return nil, err
	}
	var out []ledger.BucketSnapshot
	for chunk := range slices.Chunk(keys, readChunk) {
		args := []any{l.id}
		for _, k := range chunk {
			args = append(args, []byte(k))
		}
		in := strings.Repeat(",?", len(chunk))[1:]
		snaps, err := s.snapshots(ctx, l, now, "SELECT 0, "+bucketCols+" FROM budgetd_buckets b WHERE b.limit_id = ? AND b.bkey IN ("+in+")", args...)
		if err != nil {
			return nil, err
		}
		out = append(out, snaps...)
	}
	return out, nil
}

// limitOverrides reads every override of limit id, expired ones included.
func limitOverrides(ctx context.Context, q querier, id uint64) ([]ledger.Override, error) {
	rows, err := q.QueryContext(ctx, "SELECT body FROM budgetd_overrides WHERE limit_id = ? AND body IS NOT NULL", id)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []ledger.Override
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, classify(err)
		}
		var o ledger.Override
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			return nil, fmt.Errorf("mysql: override of limit %d: %w", id, err)
		}
		out = append(out, o)
	}
	return out, classify(rows.Err())
}

// covers is a condition true for a bucket whose key one of ovs covers:
// its exact patterns in one IN, its prefixes one IN per length, each a hex
// literal (compared by its bytes, as keys are). "FALSE" for none.
func covers(ovs []ledger.Override) string {
	var exact []string
	prefixes := map[int][]string{}
	for _, o := range ovs {
		p, prefix := o.Prefix()
		if prefix {
			prefixes[len(p)] = append(prefixes[len(p)], p)
		} else {
			exact = append(exact, p)
		}
	}
	var conds []string
	in := func(expr string, ps []string) {
		lits := make([]string, len(ps))
		for i, p := range ps {
			lits[i] = hexSQL(p)
		}
		conds = append(conds, expr+" IN ("+strings.Join(lits, ", ")+")")
	}
	if len(exact) > 0 {
		in("b.bkey", exact)
	}
	for _, n := range slices.Sorted(maps.Keys(prefixes)) {
		in("LEFT(b.bkey, "+strconv.Itoa(n)+")", prefixes[n])
	}
	if len(conds) == 0 {
		return "FALSE"
	}
	return "(" + strings.Join(conds, " OR ") + ")"
}

// hexSQL is s as a hex literal, compared by its bytes.
func hexSQL(s string) string { return "X'" + hex.EncodeToString([]byte(s)) + "'" }

// capacitySQL is the capacity before grants and rollover of a bucket at
// now: that of the override that resolves for its key (the exact pattern,
// else the longest prefix, of those active at now), else base's; a CASE
// with a branch per specificity and capacity.
func capacitySQL(ovs []ledger.Override, base decimal.Decimal, now time.Time) string {
	type branch struct {
		n        int // the prefix's length, -1 for exact patterns
		capacity string
	}
	groups := map[branch][]ledger.Override{}
	for _, o := range ovs {
		if !o.ActiveAt(now) {
			continue
		}
		p, prefix := o.Prefix()
		br := branch{n: -1, capacity: decimalSQL(base)}
		if prefix {
			br.n = len(p)
		}
		if o.Capacity.Valid {
			br.capacity = decimalSQL(o.Capacity.Decimal)
		}
		groups[br] = append(groups[br], o)
	}
	if len(groups) == 0 {
		return decimalSQL(base)
	}
	order := slices.SortedFunc(maps.Keys(groups), func(x, y branch) int {
		if x.n != y.n && (x.n < 0 || y.n < 0) {
			return x.n - y.n // exact patterns first
		}
		if x.n != y.n {
			return y.n - x.n // then the longest prefixes
		}
		return strings.Compare(x.capacity, y.capacity)
	})
	var b strings.Builder
	b.WriteString("CASE")
	for _, br := range order {
		b.WriteString(" WHEN " + covers(groups[br]) + " THEN " + br.capacity)
	}
	b.WriteString(" ELSE " + decimalSQL(base) + " END")
	return b.String()
}

// decimalSQL is d as an exact DECIMAL literal (a trailing ".0" keeps a whole
// number out of BIGINT arithmetic).
func decimalSQL(d decimal.Decimal) string {
	s := d.String()
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// usSQL is the microseconds of t as a literal.
func usSQL(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// rankStatement is the statement of a batch of q on the limit l with the
// overrides ovs, at the ranking's instant at, read at now, and its
// arguments.
func rankStatement(l limitRow, ovs []ledger.Override, q ledger.RankQuery, at, now time.Time) (string, []any) {
	rule := l.limit.Rule()
	atUS := usSQL(at)
	// stored bounds the level under any rule: no leak, period start or
	// settling raises it, and a window counts at most its slots.
	stored := "GREATEST(b.level, 0)"
	if rule.Window != nil {
		stored += " + " + jsonSum("$.slots[*]", "s", "", "")
	}
	level := stored
	switch {
	case rule.Window != nil:
	case rule.Period != nil:
		start, _ := rule.Period.Bounds(at)
		level = "IF(b.level <= 0 OR b.updated_us = 0 OR b.updated_us < " + usSQL(start) + ", 0, b.level)"
	case rule.LeakPer > 0 && rule.LeakAmount.Sign() > 0:
		// bucket.LevelAt: the level less floor(leak units × µs ÷ per) units,
		// never below zero; (x - MOD(x, per)) / per is that floor exactly.
		x := "(" + rule.LeakAmount.Units() + ".0 * (" + atUS + " - b.updated_us))"
		per := strconv.FormatInt(rule.LeakPer.Microseconds(), 10)
		level = "IF(b.level <= 0, 0, IF(b.updated_us = 0 OR b.updated_us >= " + atUS + ", b.level, GREATEST(0, b.level - (" +
			x + " - MOD(" + x + ", " + per + ")) / " + per + " * 0.000000000001)))"
	}
	var ruled []ledger.Override
	for _, o := range ovs {
		if o.LeakPer != 0 || o.TZ != "" || o.StartDay != 0 || o.WindowLength != 0 {
			ruled = append(ruled, o)
		}
	}
	if len(ruled) > 0 && level != stored {
		level = "IF(" + covers(ruled) + ", " + stored + ", " + level + ")"
	}
	capacity, bound := "NULL", "u.used"
	if q.Order == ledger.OrderShare {
		capacity = capacitySQL(ovs, l.limit.Capacity, now)
		// ceil(used × 10^shareScale ÷ capacity) ÷ 10^shareScale, exactly.
		x := "(u.used * 1" + strings.Repeat("0", shareScale) + ")"
		bound = "((" + x + " - MOD(" + x + ", u.c)) / u.c + IF(MOD(" + x + ", u.c) > 0, 1, 0)) * 0." + strings.Repeat("0", shareScale-1) + "1"
	}
	from, where := "budgetd_buckets b", "b.limit_id = "+strconv.FormatUint(l.id, 10)
	if q.Marked {
		from = markedFrom
		where = "m.limit_id = " + strconv.FormatUint(l.id, 10) + " AND m.sig = " + strconv.FormatUint(uint64(q.Sig), 10)
	}
	var args []any
	exact, skip := "", ""
	if q.Skip != nil && q.Order == ledger.OrderUsed && rule.Window == nil {
		// The used of a bucket under the limit's rule is exact (its
		// bound): one that ranks at or before the skip is of an earlier
		// page.
		exact = ", TRUE AS x"
		if len(ruled) > 0 {
			exact = ", NOT " + covers(ruled) + " AS x"
		}
		skip = "\n         WHERE NOT (u.x AND (u.used > CAST(? AS DECIMAL(65,30)) OR u.used = CAST(? AS DECIMAL(65,30)) AND u.k <= ?))"
		args = append(args, q.Skip.Used.String(), q.Skip.Used.String(), []byte(q.Skip.Key))
	}
	after := ""
	if q.After != nil {
		args = append(args, q.After.Bound.String(), q.After.Bound.String(), []byte(q.After.Key))
		after = "\n WHERE r.bound < CAST(? AS DECIMAL(65,30)) OR r.bound = CAST(? AS DECIMAL(65,30)) AND r.k > ?"
	}
	return strings.NewReplacer("{used}", "CAST("+level+" AS DECIMAL(40,12)) + "+jsonSum("$.holds[*]", "a", "x", atUS),
		"{capacity}", capacity, "{exact}", exact, "{bound}", bound, "{from}", from, "{where}", where, "{skip}", skip, "{after}", after,
		"{n}", strconv.Itoa(q.N)).Replace(rankSQL), args
}

// rankSQL is the statement of RankBuckets: each bucket's used (and
// capacity, and with a skip whether used is exact), those not skipped,
// their bounds, then the best {n} by bound, then by key.
const rankSQL = `
SELECT r.k, CAST(r.bound AS CHAR)
  FROM (SELECT u.k, {bound} AS bound
          FROM (SELECT b.bkey AS k, {used} AS used, {capacity} AS c{exact}
                  FROM {from}
                 WHERE {where}) u{skip}) r{after}
 ORDER BY r.bound DESC, r.k
 LIMIT {n}`

// jsonSum is the sum of the member field of the objects at path in the
// bucket's JSON (extra; 0 when there are none), of those whose member
// expiry is above than (all of them when expiry is empty).
func jsonSum(path, field, expiry, than string) string {
	cols := field + " DECIMAL(40,12) PATH '$." + field + "'"
	cond := ""
	if expiry != "" {
		cols += ", " + expiry + " BIGINT PATH '$." + expiry + "'"
		cond = " WHERE j." + expiry + " > " + than
	}
	return "IF(b.extra IS NULL, 0, (SELECT COALESCE(SUM(GREATEST(j." + field + ", 0)), 0) FROM JSON_TABLE(b.extra, '" + path +
		"' COLUMNS (" + cols + ")) j" + cond + "))"
}
