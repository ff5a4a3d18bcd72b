package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

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
		{"cache", []string{"--store", good, "--mysql-cache", "-1"}, nil, "--mysql-cache must be a whole number of at least 0", true},
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
	return testenv.MySQLDB(t, raw, testenv.NoDatabase(mysql.ParseURL))
}

// TestMySQLRefusesServer: budgetd refuses a server older than it supports,
// and a session whose settings something between it and the server (a
// proxy, init_connect) changed — time zone, sql_mode, autocommit — before
// it migrates anything. A proxy here rewrites what passes, byte for byte
// within each MySQL packet: the server's VERSION(), or budgetd's SET.
func TestMySQLRefusesServer(t *testing.T) {
	good := testenv.MySQLDatabase(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	admin := mysqlAdmin(t, good)
	var version string
	if err := admin.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	num, _, _ := strings.Cut(version, "-")
	parts := strings.SplitN(num, ".", 3)
	if len(parts) < 3 {
		t.Fatalf("server version %q", version)
	}
	// The same length, one minor (or major) too old.
	older := "10." + fmt.Sprintf("%0*d", len(parts[1]), 5) + "."
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		older = fmt.Sprintf("%0*d", len(parts[0]), 5) + "." + fmt.Sprintf("%0*d", len(parts[1]), 7) + "."
	}
	for _, c := range []struct {
		name               string
		toServer, toClient [2]string
		want               string
	}{
		{"old server", [2]string{}, [2]string{parts[0] + "." + parts[1] + ".", older}, "too old"},
		{"time zone", [2]string{"time_zone = '+00:00'", "time_zone = '+01:00'"}, [2]string{}, "time_zone is \"+01:00\""},
		{"sql_mode", [2]string{"'STRICT_ALL_TABLES,", "'NO_DIR_IN_CREATE,,"}, [2]string{}, "clipped"},
		{"autocommit", [2]string{"autocommit = 1", "autocommit = 0"}, [2]string{}, "autocommit off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			proxy := rewriteProxy(t, u.Host, c.toServer, c.toClient)
			via := *u
			via.Host = proxy
			// Were it to start, it stops (and run returns nil) at the deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, []string{"--addr", "127.0.0.1:0", "--store", via.String()}, env(nil), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("start through the proxy: %v, want a refusal saying %q", err, c.want)
			}
		})
	}
	var tables int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?", strings.TrimPrefix(u.Path, "/")).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("%d tables after the refusals, want none: nothing may be half-migrated", tables)
	}
}

// rewriteProxy forwards connections on a loopback port to upstream,
// replacing toServer[0] by toServer[1] in the client's packets and
// toClient[0] by toClient[1] in the server's (same lengths), and returns
// its address. It stops when t ends.
func rewriteProxy(t *testing.T, upstream string, toServer, toClient [2]string) string {
	t.Helper()
	if len(toServer[0]) != len(toServer[1]) || len(toClient[0]) != len(toClient[1]) {
		t.Fatal("a rewrite must keep the length")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn, rw [2]string) {
		defer wg.Done()
		defer dst.Close()
		defer src.Close()
		head := make([]byte, 4)
		for {
			if _, err := io.ReadFull(src, head); err != nil {
				return
			}
			body := make([]byte, int(head[0])|int(head[1])<<8|int(head[2])<<16)
			if _, err := io.ReadFull(src, body); err != nil {
				return
			}
			if rw[0] != "" {
				body = bytes.ReplaceAll(body, []byte(rw[0]), []byte(rw[1]))
			}
			if _, err := dst.Write(append(head, body...)); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go pipe(s, c, toServer)
			go pipe(c, s, toClient)
		}
	}()
	return ln.Addr().String()
}
