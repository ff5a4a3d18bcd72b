package mysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.LeaseStore = (*Store)(nil)

// Leases live in the table budgetd_leases (migrations/mysql/0003), one row a
// lease; expiry is on the database's clock (clockSQL, never the pinned test
// clock), so that budgetd instances with skewed clocks agree, as PostgreSQL's
// now() does. Each call is one short transaction at the store's isolation
// level that reads the row by a locking read (a current read at either
// level, with the clock) and changes it only when the holder compares: so
// the holder, which is unique to a process (webhook.New), is the fencing
// token, and a holder whose lease expired can no longer move the cursor,
// even before another has taken it. A deadlock or lock-wait timeout runs the
// call again (withTx), bounded, then ErrUnavailable.

// leaseRow is a lease as one call reads it, locked.
type leaseRow struct {
	holder  string
	expires int64 // microseconds since the epoch, database clock
	cursor  string
	now     int64 // the database's clock, read with the row
}

// held reports whether holder holds the lease at the row's clock.
func (r leaseRow) held(holder string) bool { return r.holder == holder && r.now < r.expires }

// lockLease reads the lease name by a locking read, creating its row (free)
// first when there is none. The insert takes the row's exclusive lock at
// once, whether it inserts or finds the row (ON DUPLICATE KEY UPDATE), so
// two calls racing for a new or a free lease queue on it rather than
// deadlock, as a shared lock taken first and then upgraded would.
func lockLease(ctx context.Context, tx *sql.Tx, name string) (leaseRow, error) {
	if _, err := tx.ExecContext(ctx, "INSERT INTO budgetd_leases (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name", name); err != nil {
		return leaseRow{}, err
	}
	var r leaseRow
	err := tx.QueryRowContext(ctx, "SELECT holder, expires_us, event_cursor, "+clockSQL+" FROM budgetd_leases WHERE name = ? FOR UPDATE", name).
		Scan(&r.holder, &r.expires, &r.cursor, &r.now)
	return r, err
}

// AcquireLease takes or renews the lease name for holder: when it is free,
// expired or holder's own, holder holds it until ttl after the database's
// clock. It answers whether holder holds it, with the cursor either way.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, string, error) {
	if holder == "" {
		return false, "", errors.New("mysql: acquire lease: empty holder")
	}
	var (
		held   bool
		cursor string
	)
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		r, err := lockLease(ctx, tx, name)
		if err != nil {
			return err
		}
		held, cursor = false, r.cursor
		if r.holder != holder && r.held(r.holder) {
			return nil // another's, not expired
		}
		held = true
		_, err = tx.ExecContext(ctx, "UPDATE budgetd_leases SET holder = ?, expires_us = ? WHERE name = ?",
			holder, r.now+max(ttl.Microseconds(), 1), name)
		return err
	})
	if err != nil {
		return false, "", err
	}
	return held, cursor, nil
}

// AdvanceLease stores cursor as the lease's cursor when holder holds it and
// it has not expired on the database's clock; it reports whether it did
// (also when the cursor was already that).
func (s *Store) AdvanceLease(ctx context.Context, name, holder, cursor string) (bool, error) {
	var done bool
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		done = false
		var r leaseRow
		err := tx.QueryRowContext(ctx, "SELECT holder, expires_us, "+clockSQL+" FROM budgetd_leases WHERE name = ? FOR UPDATE", name).
			Scan(&r.holder, &r.expires, &r.now)
		if errors.Is(err, sql.ErrNoRows) || err == nil && !r.held(holder) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE budgetd_leases SET event_cursor = ? WHERE name = ?", cursor, name); err != nil {
			return err
		}
		done = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return done, nil
}

// ReleaseLease ends holder's hold on the lease now, keeping its cursor;
// nothing when holder does not hold it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	return s.withTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE budgetd_leases SET holder = '', expires_us = 0 WHERE name = ? AND holder = ?", name, holder)
		return err
	})
}
