package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs raised by the server functions. They are defined here only: the
// functions read them from generated functions budgetd_code_NAME()
// (policy.go).
const (
	codeIdempotencyRace     = "BD001" // an idempotent duplicate committed first: retry to replay
	codeLimitNotFound       = "BD002"
	codeTooManyHolds        = "BD003"
	codeLevelOverflow       = "BD004"
	codeReservationNotFound = "BD005"
	codeKeyReused           = "BD006"
	codePeriodTable         = "BD007" // the clock is outside a periodic limit's table of period starts: refresh it and retry
	codeGrantNotFound       = "BD008"
	codeStaleTerms          = "BD009" // the terms passed were resolved from another version of the limit or for another instant: read it again and retry
	codeSettle              = "BD010" // the bucket crossed the end of a temporary rule change: settle it and retry
	codeClockStep           = "BD100" // a notice: a bucket's stored time was ahead of now (see policy.go, ClockStep)

	codeSerialization = "40001"
	codeDeadlock      = "40P01"
)

// errBadAnswer: the database answered, but not in the shape budgetd expects
// (a row or a document missing, a number that does not parse). It is a bug,
// not an outage: not ledger.ErrUnavailable, so a 500 rather than a 503.
var errBadAnswer = errors.New("the database's answer does not have the expected shape")

// sqlCodes names the codes for the generated SQL.
var sqlCodes = []struct{ name, code string }{
	{"idempotency_race", codeIdempotencyRace},
	{"limit_not_found", codeLimitNotFound},
	{"too_many_holds", codeTooManyHolds},
	{"level_overflow", codeLevelOverflow},
	{"reservation_not_found", codeReservationNotFound},
	{"key_reused", codeKeyReused},
	{"period_table", codePeriodTable},
	{"grant_not_found", codeGrantNotFound},
	{"stale_terms", codeStaleTerms},
	{"settle", codeSettle},
	{"clock_step", codeClockStep},
}

// do runs f, which makes one statement, until it succeeds or fails with an
// error that a retry cannot fix. Serialization failures, deadlocks and
// idempotent duplicates that committed first are retried with jittered
// exponential backoff, at most maxAttempts times in all; the whole call,
// retries included, is bounded by the store's timeout. Errors come back
// translated to ledger sentinels.
func (s *Store) do(ctx context.Context, op string, f func(context.Context) error) error {
	return s.doUntil(ctx, time.Now().Add(s.cfg.timeout), op, f)
}

// doUntil is do with the call's deadline given: retries stop at it too.
func (s *Store) doUntil(ctx context.Context, deadline time.Time, op string, f func(context.Context) error) error {
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := f(cctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		code := sqlState(err)
		if id, now, ok := periodTableMiss(err); ok && attempt < s.cfg.maxAttempts {
			// A periodic limit's table of period starts does not reach the
			// database's now: compute one around it and try again.
			if err := s.refreshPeriodTable(cctx, id, now); err != nil {
				return s.fail(ctx, op, err)
			}
			s.stats.periodTables.Add(1)
			continue
		}
		if retry, err := s.termsRetry(cctx, err); retry && attempt < s.cfg.maxAttempts {
			continue
		} else if err != nil {
			return s.fail(ctx, op, err)
		}
		switch code {
		case codeSerialization:
			s.stats.serialization.Add(1)
		case codeDeadlock:
			s.stats.deadlock.Add(1)
		case codeIdempotencyRace:
			s.stats.idempotency.Add(1)
		default:
			return s.fail(ctx, op, err)
		}
		if attempt >= s.cfg.maxAttempts {
			s.stats.gaveUp.Add(1)
			if code == codeIdempotencyRace {
				return fmt.Errorf("postgres %s: %w", op, ledger.ErrIdempotencyInFlight)
			}
			return s.fail(ctx, op, fmt.Errorf("gave up after %d attempts: %w", attempt, err))
		}
		t := time.NewTimer(backoff(attempt))
		select {
		case <-t.C:
		case <-cctx.Done():
			t.Stop()
			return s.fail(ctx, op, fmt.Errorf("after %d attempts: %w", attempt, cctx.Err()))
		}
	}
}

// backoff is the wait before attempt+1: exponential from 1ms, capped at
// 64ms, with full jitter.
func backoff(attempt int) time.Duration {
	d := time.Millisecond << min(attempt-1, 6)
	return d/2 + rand.N(d/2+1)
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// fail translates err and counts unavailability.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	err = fmt.Errorf("postgres %s: %w", op, translate(ctx, err))
	if errors.Is(err, ledger.ErrUnavailable) {
		s.stats.unavailable.Add(1)
	}
	return err
}

// translate maps a driver error to the ledger's errors: the functions'
// SQLSTATEs to sentinels, the caller's context ending to its error, and
// everything that says the database is unreachable, overloaded or timed out
// to ledger.ErrUnavailable (the outcome of a write may then be unknown).
// Anything else — a scan into the wrong type, a document that does not
// parse, an SQLSTATE that means a bug — is returned as it is: it is not an
// outage, and the HTTP layer answers it with a generic 500 and logs it.
func translate(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := pgErr.Message
		switch pgErr.Code {
		case codeLimitNotFound:
			return fmt.Errorf("%s: %w", msg, ledger.ErrLimitNotFound)
		case codeReservationNotFound:
			return fmt.Errorf("%s: %w", msg, ledger.ErrReservationNotFound)
		case codeGrantNotFound:
			return fmt.Errorf("%s: %w", msg, ledger.ErrGrantNotFound)
		case codeTooManyHolds:
			return fmt.Errorf("%s: %w", msg, ledger.ErrTooManyHolds)
		case codeLevelOverflow:
			return fmt.Errorf("%s: %w", msg, ledger.ErrLevelOverflow)
		case codeKeyReused:
			return fmt.Errorf("%s: %w", msg, ledger.ErrIdempotencyKeyReused)
		case codeIdempotencyRace:
			return fmt.Errorf("%s: %w", msg, ledger.ErrIdempotencyInFlight)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%v: %w", err, ctx.Err())
		}
		if pgErr.Code == codeSerialization || pgErr.Code == codeDeadlock {
			return fmt.Errorf("%v: %w", err, ledger.ErrUnavailable)
		}
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"53", // insufficient resources (too many connections, out of memory, disk full)
			"57", // operator intervention: query_canceled (statement_timeout), admin shutdown, cannot connect now
			"58", // system error
			"25": // invalid transaction state, e.g. read-only transaction on a standby after failover
			return fmt.Errorf("%v: %w", err, ledger.ErrUnavailable)
		}
		if pgErr.Code == "55P03" { // lock_not_available
			return fmt.Errorf("%v: %w", err, ledger.ErrUnavailable)
		}
		return err
	}
	if ctx.Err() != nil {
		// The caller gave up; its context error says so.
		return fmt.Errorf("%v: %w", err, ctx.Err())
	}
	if !didNotAnswer(err) {
		return err
	}
	// Connection refused or lost, the store's own deadline, a closed pool:
	// the database did not answer. When the statement may have reached the
	// server, its outcome is unknown.
	if !pgconn.SafeToRetry(err) {
		return fmt.Errorf("%v (the outcome is unknown; retry with the same Idempotency-Key): %w", err, ledger.ErrUnavailable)
	}
	return fmt.Errorf("%v: %w", err, ledger.ErrUnavailable)
}

// didNotAnswer reports whether err (not a PgError) says the database did not
// answer: the connection could not be made, was refused, reset or closed
// mid-call, the store's own deadline passed, or the pool is closed.
func didNotAnswer(err error) bool {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case pgconn.SafeToRetry(err), // failed before anything was sent: a connection that could not be had
		pgconn.Timeout(err),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), // the store's deadline, the pool's context
		errors.As(err, &connectErr),
		errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgxpool's Acquire on a closed pool (puddle.ErrClosedPool, a package
	// budgetd does not import).
	return err.Error() == "closed pool" || strings.HasSuffix(err.Error(), ": closed pool")
}
