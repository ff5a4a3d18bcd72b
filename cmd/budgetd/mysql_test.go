package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv"
)

// TestMySQLStartRefusals: budgetd refuses to start on a mysql:// store it
// cannot serve correctly — a malformed URL, a wrong password, a user
// without privileges on the database, a bad --mysql-isolation — with a
// message that says what to fix, and leaves the database as it was.
func TestMySQLStartRefusals(t *testing.T) {
	good := testenv.MySQLDatabase(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	admin := mysqlAdmin(t, good)

	// A user who may log in but has no privilege on the database.
	user := fmt.Sprintf("budgetd_np_%d", time.Now().UnixNano()%1e9)
	if _, err := admin.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	noPriv := *u
	noPriv.User = url.UserPassword(user, "pw")
	wrong := *u
	wrong.User = url.UserPassword(u.User.Username(), "not-the-password")
	noDB := *u
	noDB.Path = "/"

	for _, c := range []struct {
		name  string
		args  []string
		env   map[string]string
		want  string
		usage bool
	}{
		{"no database", []string{"--store", noDB.String()}, nil, "missing or malformed database name", false},
		{"unknown parameter", []string{"--store", good + "?ssl=1"}, nil, `unknown parameter "ssl"`, false},
		{"bad port", []string{"--store", "mysql://u:p@127.0.0.1:notaport/db"}, nil, "mysql URL", false},
		{"wrong password", []string{"--store", wrong.String()}, nil, "check the user and password", false},
		{"no privileges", nil, map[string]string{"BUDGETD_STORE": noPriv.String()}, "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX, ALTER, CREATE ROUTINE, ALTER ROUTINE, EXECUTE ON `" + dbName + "`.*", false},
		{"isolation", []string{"--store", good, "--mysql-isolation", "serializable"}, nil, "--mysql-isolation must be repeatable-read or read-committed", true},
		{"migrate without privileges", []string{"--store", noPriv.String(), "migrate"}, nil, "Access denied", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stderr syncBuffer
			err := run(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, c.args...), env(c.env), io.Discard, &stderr)
			if err == nil {
				t.Fatal("budgetd started")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("refusal %q, want it to say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), ":pw@") {
				t.Errorf("refusal %q shows the password", err)
			}
			if code := exitCode(err); (code == 2) != c.usage {
				t.Errorf("exit code %d, usage error %v", code, c.usage)
			}
		})
	}
	var tables int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?", dbName).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("%d tables in the database after the refusals, want none: nothing may be half-migrated", tables)
	}
	// The same database then serves.
	if err := run(context.Background(), []string{"--store", good, "migrate"}, env(nil), io.Discard, io.Discard); err != nil {
		t.Fatalf("migrate after the refusals: %v", err)
	}
}

// mysqlAdmin opens the test server as the test user, without a database.
func mysqlAdmin(t *testing.T, raw string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}
