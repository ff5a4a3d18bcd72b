package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestTranslateClassifies: only a database that did not answer (refused,
// lost or closed connections, the store's own deadline, a closed pool, an
// overloaded or failing-over server) is ledger.ErrUnavailable, a 503 that
// says the outcome of a write is unknown. A programming error — a scan into
// the wrong type, a document that does not parse, an SQLSTATE that means a
// bug — is returned as it is, which the HTTP layer answers with a generic
// 500 and logs. The errors are real ones of pgx against the test server
// where one can be had.
func TestTranslateClassifies(t *testing.T) {
	url := testenv.Server(t, testenv.Postgres)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	real := func(what string, f func() error) error {
		t.Helper()
		err := f()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		return err
	}
	var s string
	var n int
	scanNull := real("scan NULL into a string", func() error { return pool.QueryRow(ctx, "SELECT NULL::text").Scan(&s) })
	scanType := real("scan text into an int", func() error { return pool.QueryRow(ctx, "SELECT 'x'::text").Scan(&n) })
	scanCount := real("scan two columns into one", func() error { return pool.QueryRow(ctx, "SELECT 1, 2").Scan(&n) })
	divZero := real("division by zero", func() error { return pool.QueryRow(ctx, "SELECT 1/0").Scan(&n) })
	syntax := real("a syntax error", func() error { return pool.QueryRow(ctx, "SELEC 1").Scan(&n) })
	noRows := real("no rows", func() error { return pool.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&n) })
	storeDeadline := real("the store's own deadline", func() error {
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := pool.Exec(cctx, "SELECT pg_sleep(5)")
		return err
	})
	refused := real("a closed port", func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := pgx.Connect(cctx, "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=2")
		if err == nil {
			c.Close(ctx)
		}
		return err
	})
	lost := real("a connection closed under a query", func() error {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		c.PgConn().Conn().Close() // the socket goes away as if the server died
		_, err = c.Exec(ctx, "SELECT 1")
		return err
	})
	closedPool := real("a closed pool", func() error {
		p, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		return p.QueryRow(ctx, "SELECT 1").Scan(&n)
	})
	var syn *json.SyntaxError
	badDoc := json.Unmarshal([]byte("{"), &struct{}{})
	if !errors.As(badDoc, &syn) {
		t.Fatalf("json: %v", badDoc)
	}

	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"scan NULL into a string", scanNull, false},
		{"scan text into an int", scanType, false},
		{"scan two columns into one", scanCount, false},
		{"division by zero (22012)", divZero, false},
		{"syntax error (42601)", syntax, false},
		{"a document that does not parse", badDoc, false},
		{"an answer of the wrong shape", fmt.Errorf("postgres fillup: incomplete answer row: %w", errBadAnswer), false},
		{"a bare error", errors.New("boom"), false},

		{"the store's own deadline", storeDeadline, true},
		{"connection refused", refused, true},
		{"connection lost", lost, true},
		{"closed pool", closedPool, true},
		{"io.EOF", fmt.Errorf("read: %w", io.EOF), true},
		{"io.ErrUnexpectedEOF", io.ErrUnexpectedEOF, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"context deadline", fmt.Errorf("after 3 attempts: %w", context.DeadlineExceeded), true},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"too many connections (53300)", &pgconn.PgError{Code: "53300"}, true},
		{"admin shutdown (57P01)", &pgconn.PgError{Code: "57P01"}, true},
		{"read-only standby (25006)", &pgconn.PgError{Code: "25006"}, true},
	} {
		got := translate(ctx, tc.err)
		if errors.Is(got, ledger.ErrUnavailable) != tc.unavailable {
			t.Errorf("%s: translate(%v) = %v, unavailable %v, want %v", tc.name, tc.err, got, !tc.unavailable, tc.unavailable)
		}
	}
	if got := translate(ctx, noRows); !errors.Is(got, pgx.ErrNoRows) || errors.Is(got, ledger.ErrUnavailable) {
		t.Errorf("no rows: %v", got)
	}

	// The caller giving up is its own context error, whatever the driver said.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got := translate(cctx, scanNull); !errors.Is(got, context.Canceled) {
		t.Errorf("with the caller's context canceled: %v", got)
	}
}
