package postgres

import (
	"context"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.LeaseStore = (*Store)(nil)

// Leases live in the table leases (migration 0012); expiry is on the
// database clock, now(), so that budgetd instances with skewed clocks agree.
// Each call is one statement that compares the holder and changes the row.

// acquireLeaseSQL takes the lease when it is free, expired or the holder's
// own, and answers whether the holder holds it with the cursor either way.
const acquireLeaseSQL = `WITH up AS (
	INSERT INTO leases AS l (name, holder, expires_at) VALUES ($1, $2, now() + $3 * interval '1 microsecond')
	ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
	 WHERE l.holder = excluded.holder OR l.expires_at <= now()
	RETURNING event_cursor)
SELECT true, event_cursor FROM up
UNION ALL
SELECT false, event_cursor FROM leases WHERE name = $1 AND NOT EXISTS (SELECT FROM up)`

// AcquireLease takes or renews the lease name for holder.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, string, error) {
	var (
		held   bool
		cursor string
	)
	err := s.do(ctx, "acquire lease", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, acquireLeaseSQL, name, holder, ttl.Microseconds()).Scan(&held, &cursor)
	})
	return held, cursor, err
}

// AdvanceLease stores the lease's cursor when holder holds it.
func (s *Store) AdvanceLease(ctx context.Context, name, holder, cursor string) (bool, error) {
	var done bool
	err := s.do(ctx, "advance lease", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `UPDATE leases SET event_cursor = $3 WHERE name = $1 AND holder = $2 AND expires_at > now()`, name, holder, cursor)
		done = tag.RowsAffected() == 1
		return err
	})
	return done, err
}

// ReleaseLease ends holder's hold on the lease.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	return s.do(ctx, "release lease", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `UPDATE leases SET holder = '', expires_at = '-infinity' WHERE name = $1 AND holder = $2`, name, holder)
		return err
	})
}
