package postgres

import (
	"context"
	"fmt"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.Counter = (*Store)(nil)

// countSQL counts a limit's buckets and active holds in one statement, so
// in one snapshot; a limit that does not exist yields no row. The buckets
// are those listBucketsSQL lists: every row of the limit but a placeholder
// (updated_at NULL, a bucket never written whose lock a write took), an
// index-only scan of the (limit_id, key) primary key where the visibility
// map allows. The holds are read through holds_bucket (limit_id, key,
// state): every hold row of the limit the index keeps (resolved ones until
// they are pruned), those active read from the table for their expiry.
const countSQL = `
WITH l AS (SELECT id FROM limits WHERE name = $1),
     t AS (SELECT coalesce($2::timestamptz, date_trunc('microseconds', clock_timestamp())) AS now)
SELECT budgetd_us(t.now),
       (SELECT count(*) FROM buckets b WHERE b.limit_id = l.id AND b.updated_at IS NOT NULL),
       (SELECT count(*) FROM holds h WHERE h.limit_id = l.id AND h.state = 'active' AND h.expires_at > t.now)
  FROM l CROSS JOIN t`

// CountBuckets counts the limit's buckets and their active holds at the
// database clock (ledger.Counter): count(*) over the limit's rows, O(its
// buckets + its hold rows) and no memory in budgetd.
func (s *Store) CountBuckets(ctx context.Context, limit string) (ledger.LimitCounts, error) {
	var (
		out   ledger.LimitCounts
		nowUS int64
		found bool
	)
	err := s.do(ctx, "count buckets", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, countSQL, limit, s.nowArg())
		if err != nil {
			return err
		}
		defer rows.Close()
		found = false
		for rows.Next() {
			if err := rows.Scan(&nowUS, &out.Buckets, &out.ActiveHolds); err != nil {
				return err
			}
			found = true
		}
		return rows.Err()
	})
	if err != nil {
		return ledger.LimitCounts{}, err
	}
	if !found {
		return ledger.LimitCounts{}, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
	}
	out.At = fromUS(nowUS)
	return out, nil
}
