package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	gomysql "github.com/go-sql-driver/mysql"

	budgetmysql "github.com/budgetd/budgetd/internal/mysql"
)

// mysqlsize prints the bytes the tables of the URL's database take:
// data_length + index_length from information_schema.TABLES, summed over the
// database's tables, each after ANALYZE TABLE (InnoDB's figures are its
// persistent statistics — the pages allocated to each index, clustered and
// secondary, times the page size — which ANALYZE recounts). MySQL's
// counterpart of pgsize: scripts/bench takes it before and after populating N
// buckets and reports the difference over N.
func mysqlsize(ctx context.Context, url string, out io.Writer) error {
	db, err := openMySQL(url)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.TABLES
		WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, t := range tables {
		// ANALYZE TABLE answers with a result set (and reports a failure
		// there, not as an error): read it to the end and check it.
		r, err := db.QueryContext(ctx, "ANALYZE TABLE `"+t+"`")
		if err != nil {
			return fmt.Errorf("analyze %s: %w", t, err)
		}
		for r.Next() {
			var table, op, msgType, msg string
			if err := r.Scan(&table, &op, &msgType, &msg); err != nil {
				r.Close()
				return err
			}
			if msgType == "error" {
				r.Close()
				return fmt.Errorf("analyze %s: %s", t, msg)
			}
		}
		if err := r.Close(); err != nil {
			return err
		}
	}
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.TABLES
		WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'`).Scan(&n); err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, n)
	return err
}

// openMySQL opens a pool on a mysql:// URL as budgetd parses it.
func openMySQL(url string) (*sql.DB, error) {
	cfg, err := budgetmysql.ParseURL(url)
	if err != nil {
		return nil, err
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// mysqlreset empties performance_schema's statement digests, so that
// mysqlstats shows one run's statements only.
func mysqlreset(ctx context.Context, url string) error {
	db, err := openMySQL(url)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "TRUNCATE TABLE performance_schema.events_statements_summary_by_digest")
	return err
}

// mysqlstats prints the statements that took the most time since the last
// mysqlreset, from performance_schema's digests (each statement of a
// multi-statement call is its own): MariaDB's own profile, the counterpart
// of pgstats. The server must run with performance_schema on.
func mysqlstats(ctx context.Context, url string, out io.Writer) error {
	db, err := openMySQL(url)
	if err != nil {
		return err
	}
	defer db.Close()
	var on bool
	if err := db.QueryRowContext(ctx, "SELECT @@performance_schema").Scan(&on); err != nil {
		return err
	}
	if !on {
		return errors.New("performance_schema is off: start the server with --performance-schema=ON")
	}
	// Timers are in picoseconds.
	rows, err := db.QueryContext(ctx, `SELECT COUNT_STAR, ROUND(SUM_TIMER_WAIT / 1e9, 1), ROUND(AVG_TIMER_WAIT / 1e6, 1),
		ROUND(SUM_ROWS_EXAMINED / GREATEST(COUNT_STAR, 1), 1), ROUND(SUM_ROWS_AFFECTED / GREATEST(COUNT_STAR, 1), 1),
		REGEXP_REPLACE(LEFT(COALESCE(DIGEST_TEXT, '?'), 110), '\\s+', ' ')
		FROM performance_schema.events_statements_summary_by_digest WHERE COUNT_STAR > 0
		ORDER BY SUM_TIMER_WAIT DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(out, "%9s %10s %9s %9s %9s  %s\n", "calls", "total ms", "mean µs", "rows exam", "rows aff", "statement")
	for rows.Next() {
		var calls int64
		var total, mean, examined, affected, q string
		if err := rows.Scan(&calls, &total, &mean, &examined, &affected, &q); err != nil {
			return err
		}
		fmt.Fprintf(out, "%9d %10s %9s %9s %9s  %s\n", calls, total, mean, examined, affected, q)
	}
	return rows.Err()
}
