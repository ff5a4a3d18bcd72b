package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	budgetmysql "github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv"
)

// mysqlsize counts what rows take: 20,000 rows of about 100 bytes make
// the figure grow by at least their payload, and by less than ten times it
// (InnoDB's pages are never that empty after sequential inserts), and the
// figure is taken fresh (after ANALYZE TABLE), not InnoDB's stale estimate.
func TestMySQLSizeCountsRows(t *testing.T) {
	raw := testenv.MySQLDatabase(t)
	ctx := context.Background()
	db := testenv.MySQLDB(t, raw, budgetmysql.ParseURL)
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INT PRIMARY KEY, pad CHAR(96) NOT NULL, KEY (pad)) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		t.Helper()
		var out bytes.Buffer
		if err := mysqlsize(ctx, raw, &out); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
		if err != nil {
			t.Fatalf("mysqlsize printed %q", out.String())
		}
		return n
	}
	before := size()
	const rows = 20000
	for i := 0; i < rows; i += 1000 {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (id, pad)
			WITH RECURSIVE s (n) AS (SELECT ? UNION ALL SELECT n + 1 FROM s WHERE n < ?)
			SELECT n, LPAD(n, 96, 'x') FROM s`, i, i+999); err != nil {
			t.Fatal(err)
		}
	}
	grew := size() - before
	// Each row: 4 + 96 bytes in the clustered index and 96 + 4 in the
	// secondary one.
	if least, most := int64(rows*200), int64(rows*200*10); grew < least || grew > most {
		t.Fatalf("grew by %d bytes for %d rows; want between %d and %d", grew, rows, least, most)
	}
}
