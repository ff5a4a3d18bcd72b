package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.Counter = (*Store)(nil)

// countSQL counts a limit's buckets and active holds in one statement, so
// in one snapshot, at the instant $1 (NULL: the database clock); a limit
// that does not exist yields no row. The buckets are every row of the
// limit, as a listing lists them: a range of the (limit_id, bkey) primary
// key. The holds are read through budgetd_holds_bucket (limit_id, bkey):
// every hold row of the limit (resolved ones until they are pruned), each
// looked up for its state and expiry.
const countSQL = `SELECT t.now_us,
       (SELECT COUNT(*) FROM budgetd_buckets b WHERE b.limit_id = l.id),
       (SELECT COUNT(*) FROM budgetd_holds h WHERE h.limit_id = l.id AND h.state = 'active' AND h.expires_us > t.now_us)
  FROM budgetd_limits l CROSS JOIN (SELECT CAST(COALESCE(?, ` + clockSQL + `) AS SIGNED) AS now_us) t
 WHERE l.name = ?`

// CountBuckets counts the limit's buckets and their active holds at the
// database clock (ledger.Counter): COUNT(*) over the limit's rows,
// O(its buckets + its hold rows) and no memory in budgetd.
func (s *Store) CountBuckets(ctx context.Context, limit string) (ledger.LimitCounts, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var at any // NULL: the database clock
	if t := s.clock(); !t.IsZero() {
		at = t.UTC().Truncate(time.Microsecond).UnixMicro()
	}
	var (
		out ledger.LimitCounts
		us  int64
	)
	err := s.db.QueryRowContext(ctx, countSQL, at, []byte(limit)).Scan(&us, &out.Buckets, &out.ActiveHolds)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.LimitCounts{}, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
	}
	if err != nil {
		return ledger.LimitCounts{}, classify(err)
	}
	out.At = time.UnixMicro(us).UTC()
	return out, nil
}
