// Package storetest opens every store for a test of a package above the
// stores (an adapter that takes a ledger.Store): memory always, and the real
// PostgreSQL, MySQL (MariaDB), Redis and Redis Cluster that scripts/test
// starts, named by the testenv variables (skipped when unset, failed when
// CI=true). It also cuts a store off (Proxy), to play an outage.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/testenv"
)

// Each runs fn as a subtest per store, each empty, with its own pinned
// clock. prefix names the test's schema or key prefix (its package).
func Each(t *testing.T, prefix string, fn func(t *testing.T, clock *ledgertest.Clock, store ledger.Store)) {
	t.Run("memory", func(t *testing.T) {
		clock := ledgertest.NewClock()
		fn(t, clock, memory.New(memory.WithClock(clock.Now)))
	})
	t.Run("postgres", func(t *testing.T) {
		clock := ledgertest.NewClock()
		fn(t, clock, Postgres(t, prefix, testenv.Server(t, testenv.Postgres), clock))
	})
	t.Run("mysql", func(t *testing.T) {
		clock := ledgertest.NewClock()
		st, err := mysql.Open(context.Background(), testenv.MySQLDatabase(t), mysql.WithClock(clock.Now), mysql.WithPruneInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, clock, st)
	})
	for _, name := range []string{"redis", "redis-cluster"} {
		t.Run(name, func(t *testing.T) {
			clock := ledgertest.NewClock()
			url := testenv.Server(t, testenv.Redis)
			if name == "redis-cluster" {
				url = "redis+cluster://" + testenv.Server(t, testenv.RedisCluster)
			}
			fn(t, clock, Redis(t, prefix, url, clock))
		})
	}
}

// Postgres opens a PostgreSQL store at url in a schema of its own, closed
// and dropped when t ends.
func Postgres(t *testing.T, prefix, url string, clock *ledgertest.Clock) *postgres.Store {
	schema := "budgetd_" + prefix + "_" + suffix()
	st, err := postgres.Open(context.Background(), url, postgres.WithSchema(schema), postgres.WithClock(clock.Now), postgres.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.Server(t, testenv.Postgres) // the schema is dropped directly, whatever url goes through
	t.Cleanup(func() {
		st.Close()
		DropSchema(t, admin, schema)
	})
	return st
}

// DropSchema drops a PostgreSQL schema and what it holds, reporting a
// failure as an error of t.
func DropSchema(t testing.TB, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema: %v", err)
	}
}

// Redis opens a Redis store at url under a key prefix of its own, closed
// when t ends.
func Redis(t *testing.T, prefix, url string, clock *ledgertest.Clock) *redis.Store {
	st, err := redis.Open(context.Background(), url, redis.WithPrefix(prefix+"-"+suffix()), redis.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func suffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Proxy forwards TCP connections from a loopback port to a server until
// Down, which closes the port and every connection: a store connected
// through it then meets connection refused. Up opens the same port again;
// with Hang it accepts connections and forwards nothing, a server that
// never answers.
type Proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	hang   bool
}

// NewProxy starts a proxy to target (host:port), stopped when t ends.
func NewProxy(t *testing.T, target string) *Proxy {
	p := &Proxy{target: target, addr: "127.0.0.1:0"}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Down)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Through returns rawURL with its host and port replaced by the proxy's.
func (p *Proxy) Through(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// Hang sets whether connections accepted from now on are held without
// being forwarded.
func (p *Proxy) Hang(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hang = on
}

// Up listens on the proxy's port (a free one the first time).
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln, p.addr = ln, ln.Addr().String()
	go p.accept(ln)
	return nil
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		hang := p.hang
		p.mu.Unlock()
		if !hang {
			go p.forward(c)
		}
	}
}

func (p *Proxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, s)
	p.mu.Unlock()
	go func() { io.Copy(s, c); s.Close() }()
	io.Copy(c, s)
	c.Close()
}

// Down closes the port and every connection made through it.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
