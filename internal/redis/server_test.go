package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/testenv"
)

// server is a redis-server this test started on a free loopback port.
type server struct {
	t    *testing.T
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startServer starts redis-server with extra arguments; the test stops it.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	testenv.Program(t, "redis-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := &server{t: t, port: port, dir: t.TempDir(), args: args}
	srv.start()
	t.Cleanup(srv.stop)
	return srv
}

func (s *server) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", fmt.Sprint(s.port), "--dir", s.dir, "--save", "", "--appendonly", "no"}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %d did not start", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server this test started (and only it) and waits for it.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

func TestOutageFailsFastAndRecovers(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	st, err := Open(ctx, srv.url(), WithPrefix(testPrefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := ledger.NewService(st)
	spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second, History: true}
	if _, err := svc.PutLimit(ctx, "l", spec); err != nil {
		t.Fatal(err)
	}
	item := []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: "k"}, Cost: decimal.NewFromInt(1)}}
	if _, err := svc.Fillup(ctx, item, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}

	srv.stop()
	start := time.Now()
	if _, err := svc.Fillup(ctx, item, ledger.Idempotency{}); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("fillup with Redis down: %v, want ErrUnavailable", err)
	}
	if _, err := svc.CanAccept(ctx, item[0].Bucket, decimal.NewFromInt(1)); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("can accept with Redis down: %v, want ErrUnavailable", err)
	}
	if err := st.Ping(ctx); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("ping with Redis down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("failing took %v; want fast", d)
	}

	srv.start() // an empty server on the same port: the client reconnects by itself
	deadline := time.Now().Add(10 * time.Second)
	for st.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("store did not recover")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := svc.PutLimit(ctx, "l", spec); err != nil {
		t.Fatal(err)
	}
	res, err := svc.Fillup(ctx, item, ledger.Idempotency{})
	if err != nil || !res.Accepted {
		t.Fatalf("fillup after recovery: %+v %v", res, err)
	}
}

func TestOpenClosedPortFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = Open(context.Background(), "redis://"+addr+"/0")
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Open on a closed port: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Open took %v", d)
	}
}

func TestEvictionPolicyCheck(t *testing.T) {
	srv := startServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()
	if st, err := Open(ctx, srv.url()); err == nil || !strings.Contains(err.Error(), "allkeys-lru") {
		if st != nil {
			st.Close()
		}
		t.Fatalf("Open with allkeys-lru in refuse mode: %v, want an error", err)
	}
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	st, err := Open(ctx, srv.url(), WithEvictionCheck("warn"), WithLogger(log))
	if err != nil {
		t.Fatalf("Open in warn mode: %v", err)
	}
	st.Close()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "allkeys-lru") {
		t.Fatalf("no warning logged: %q", buf.String())
	}
	if _, err := Open(ctx, srv.url(), WithEvictionCheck("maybe")); err == nil {
		t.Fatal("Open accepted an unknown eviction mode")
	}
}

// TestTornAOFWarning: Open warns about a master that keeps an AOF and loads
// it with aof-load-truncated yes, and not about one with it set to no.
func TestTornAOFWarning(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		truncated string
		warned    bool
	}{{"yes", true}, {"no", false}} {
		srv := startServer(t, "--appendonly", "yes", "--aof-load-truncated", tc.truncated)
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
		st, err := Open(ctx, srv.url(), WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		mu.Lock()
		warned := strings.Contains(buf.String(), "aof-load-truncated")
		mu.Unlock()
		if warned != tc.warned {
			t.Errorf("aof-load-truncated %s: warned %v, want %v (log %q)", tc.truncated, warned, tc.warned, buf.String())
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestDeadlineCoversQueue: with Redis hung (SIGSTOP), 200 concurrent calls
// each fail with ErrUnavailable within one call deadline (callTimeout, 2s,
// plus scheduling slack), also those that queued in the batcher behind
// pipelines that were waiting for Redis themselves.
func TestDeadlineCoversQueue(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	st, err := Open(ctx, srv.url(), WithPrefix(testPrefix()), WithLimitCacheTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := ledger.NewService(st)
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	item := []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: "k"}, Cost: decimal.NewFromInt(1)}}
	if _, err := svc.Fillup(ctx, item, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer srv.cmd.Process.Signal(syscall.SIGCONT)
	const n = 200
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			start := time.Now()
			_, err := svc.Fillup(ctx, item, ledger.Idempotency{})
			results <- result{time.Since(start), err}
		}()
	}
	var longest time.Duration
	for range n {
		r := <-results
		if !errors.Is(r.err, ledger.ErrUnavailable) {
			t.Errorf("fillup with Redis hung: %v, want ErrUnavailable", r.err)
		}
		longest = max(longest, r.took)
	}
	t.Logf("longest of %d calls: %v", n, longest)
	if longest > callTimeout+time.Second {
		t.Errorf("a call took %v with Redis hung; the documented bound is %v", longest, callTimeout)
	}
}
