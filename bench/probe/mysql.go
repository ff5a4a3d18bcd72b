package main

import (
	"context"
	"database/sql"
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
	cfg, err := budgetmysql.ParseURL(url)
	if err != nil {
		return err
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
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
