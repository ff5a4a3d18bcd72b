package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv/mariadb"
)

// privateMariaDB starts a mariadbd of the test's own in a temporary
// directory (as bench/chaos does, with package mariadb), so that it can be
// stopped with SIGSTOP without touching the shared test server, and returns
// its process and the store URL. t.Cleanup resumes and stops it by its pid.
func privateMariaDB(t *testing.T) (*os.Process, string) {
	t.Helper()
	tmp, err := os.MkdirTemp("", "budgetd-hung-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	srv, err := mariadb.New(tmp, "--innodb-buffer-pool-size=32M")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return srv.Process(), srv.URL()
}

// TestHungServer: with the server stopped (SIGSTOP), every call — the ones
// in flight when it stopped and the ones made after — ends within the
// store's timeout with ledger.ErrUnavailable (503). Once the server resumes
// the store serves again, and replaying every cut write with its
// Idempotency-Key charges each exactly once: a write cut at the deadline was
// wholly committed or wholly absent, and no connection was reused half-way.
func TestHungServer(t *testing.T) {
	proc, url := privateMariaDB(t)
	const bound = time.Second
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	s := open(t, url, mysql.WithTimeout(bound), mysql.WithPruneInterval(0), mysql.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(1_000_000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	ref2 := ledger.BucketRef{Limit: "l", Key: "k2"}
	charge := func(key string) error {
		_, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(1)}, {Bucket: ref2, Cost: decimal.NewFromInt(1)}},
			ledger.Idempotency{Scope: "t", Key: key, Hash: "h", Caller: "c"})
		return err
	}

	// Writers run before, across and after the stop; each remembers its keys.
	var (
		mu     sync.Mutex
		keys   []string
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		failed = make(chan string, 1000)
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
				start := time.Now()
				err := charge(key)
				if took := time.Since(start); took > bound+time.Second {
					failed <- fmt.Sprintf("%s took %s (bound %s): %v", key, took, bound, err)
				}
				if err != nil && !errors.Is(err, ledger.ErrUnavailable) {
					failed <- fmt.Sprintf("%s: %v, want ErrUnavailable", key, err)
				}
			}
		}()
	}
	// Let the writers reach the server, then stop it mid-flight.
	for warm := time.Now().Add(30 * time.Second); level(t, s, ref).LessThan(decimal.NewFromInt(20)); {
		if time.Now().After(warm) {
			t.Fatal("the writers charged less than 20 in 30s")
		}
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// kill returns before every thread has stopped: wait for the state T.
	for until := time.Now().Add(10 * time.Second); !stopped(proc.Pid); {
		if time.Now().After(until) {
			t.Fatal("mariadbd did not stop within 10s of SIGSTOP")
		}
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = proc.Signal(syscall.SIGCONT)
		}
	}()
	// Calls made while it is stopped: each ends within the bound, 503.
	calls := map[string]func() error{
		"Fillup":  func() error { return charge("during") },
		"Inspect": func() error { _, err := s.Inspect(ctx, ref); return err },
		"PutLimit": func() error {
			_, err := svc.PutLimit(ctx, "m", ledger.LimitSpec{Capacity: decimal.NewFromInt(5), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour})
			return err
		},
		"History": func() error { _, _, err := s.History(ctx, ref, "", 10); return err },
		"Ping":    func() error { return s.Ping(ctx) },
	}
	for round := range 2 {
		for name, call := range calls {
			start := time.Now()
			err := call()
			took := time.Since(start)
			if !errors.Is(err, ledger.ErrUnavailable) {
				t.Errorf("round %d: %s on a stopped server: %v, want ErrUnavailable", round, name, err)
			}
			if took > bound+500*time.Millisecond {
				t.Errorf("round %d: %s took %s, bound %s", round, name, took, bound)
			}
		}
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The store serves again (polled with a deadline: the server needs a
	// moment to notice the closed connections).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.Inspect(ctx, ref); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("store after SIGCONT: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Error(f)
	}
	// Replay every key (and the one made while stopped): each must be
	// charged exactly once on both buckets.
	keys = append(keys, "during")
	for _, k := range keys {
		if err := charge(k); err != nil {
			t.Fatalf("replay %s: %v", k, err)
		}
	}
	want := decimal.NewFromInt(int64(len(keys)))
	for _, r := range []ledger.BucketRef{ref, ref2} {
		if lv := level(t, s, r); !lv.Equal(want) {
			t.Errorf("%s: level %s after replaying %d keys: a cut write was half applied or doubled", r.Key, lv, len(keys))
		}
	}
}

func level(t *testing.T, s *mysql.Store, ref ledger.BucketRef) decimal.Decimal {
	t.Helper()
	snap, err := s.Inspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return snap.State.Level.Decimal()
}

// stopped says whether every thread of process pid is stopped (state T).
func stopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
