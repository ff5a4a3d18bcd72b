// Package testenv tells tests which real servers and programs this test run
// offers. scripts/test starts PostgreSQL, Redis, a Redis Cluster and MariaDB
// on loopback and names them in environment variables; CI installs Chromium.
// Without them a test is skipped when run locally (go test ./...) and fails
// under CI (CI=true), so that a missing install step can never pass as a
// skipped test.
package testenv

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// The environment variables scripts/test sets.
const (
	// Postgres is a postgres:// URL of an empty test database.
	Postgres = "BUDGETD_TEST_POSTGRES"
	// Redis is a redis:// URL of a standalone Redis.
	Redis = "BUDGETD_TEST_REDIS"
	// RedisCluster is a comma-separated list of Redis Cluster nodes
	// (host:port), not a URL.
	RedisCluster = "BUDGETD_TEST_REDIS_CLUSTER"
	// MySQL is a mysql:// URL of a MariaDB user that may create and drop
	// databases (each test makes its own).
	MySQL = "BUDGETD_TEST_MYSQL"
)

// CI reports whether the tests run under CI, where nothing may be skipped
// for a missing server or program.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing skips t, or fails it under CI, because what it needs (why) is not
// there.
func Missing(t testing.TB, why string) {
	t.Helper()
	if CI() {
		t.Fatalf("%s; under CI every test must run (scripts/test and scripts/install-deps provide it)", why)
	}
	t.Skipf("%s; run scripts/test", why)
}

// Server returns the value of env, one of the variables above, or skips t
// (fails it under CI) when it is unset.
func Server(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		Missing(t, env+" is not set")
	}
	return v
}

// Program returns the path of the first of names found on PATH, or skips t
// (fails it under CI) when none is.
func Program(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Missing(t, names[0]+" is not installed")
	return ""
}

// mysqlSeq numbers the databases MySQLDatabase makes in this process.
var mysqlSeq atomic.Int64

// MySQLDatabase makes an empty database of its own for t on the server of
// BUDGETD_TEST_MYSQL (skipping t, or failing it under CI, when unset),
// drops it when t ends, and returns its mysql:// URL.
func MySQLDatabase(t testing.TB) string {
	t.Helper()
	raw := Server(t, MySQL)
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		t.Fatalf("%s=%q: want mysql://USER:PASSWORD@HOST:PORT/DATABASE", MySQL, raw)
	}
	cfg := gomysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if sock := u.Query().Get("socket"); sock != "" {
		cfg.Net, cfg.Addr = "unix", sock
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	name := fmt.Sprintf("budgetd_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, mysqlSeq.Add(1))
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		db.Close()
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// MySQLDB opens url with the driver alone (no migration, no checks), for a
// test that reads or changes tables behind a store's back, and closes it
// when t ends. parse turns url into the driver's config: the store's own
// mysql.ParseURL, passed in because package mysql's tests use this package.
func MySQLDB(t testing.TB, url string, parse func(string) (*gomysql.Config, error)) *sql.DB {
	t.Helper()
	cfg, err := parse(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

// NoDatabase wraps parse so that the config it returns names no database:
// MySQLDB(t, url, NoDatabase(mysql.ParseURL)) opens the server itself, to
// make or look at databases.
func NoDatabase(parse func(string) (*gomysql.Config, error)) func(string) (*gomysql.Config, error) {
	return func(url string) (*gomysql.Config, error) {
		cfg, err := parse(url)
		if err != nil {
			return nil, err
		}
		cfg.DBName = ""
		return cfg, nil
	}
}
