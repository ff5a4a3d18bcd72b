package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/budgetd/budgetd/internal/ledger"
)

// serverError is an error reply as go-redis reports one (goredis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// TestFailClassifies: only a Redis that did not answer (refused, lost or
// closed connections, the call's own deadline, a server loading, busy, down
// or failing over) is ledger.ErrUnavailable, a 503 that says the outcome of
// a write is unknown. A programming error — a script that fails, a reply of
// the wrong type — is returned as it is, which the HTTP layer answers with
// a generic 500 and logs. The errors are real ones of go-redis against the
// test server where one can be had.
func TestFailClassifies(t *testing.T) {
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
	c := s.client.(goredis.Cmdable)
	ctx := context.Background()
	real := func(what string, err error) error {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		return err
	}
	k := s.k.prefix + ":errors-test"
	if err := c.HSet(ctx, k, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	wrongType := real("INCR of a hash", c.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{k}).Err())
	luaError := real("a Lua runtime error", c.Eval(ctx, "local t = nil; return t.x", nil).Err())
	_, replyShape := c.Eval(ctx, "return 1", nil).StringSlice()
	replyShape = real("a reply of the wrong type", replyShape)
	_, replyShape2 := c.Eval(ctx, "return {1, {2}}", nil).StringSlice()
	replyShape2 = real("a nested reply as strings", replyShape2)
	refused := real("a closed port", func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		defer rc.Close()
		return rc.Ping(ctx).Err()
	}())
	closed := real("a closed client", func() error {
		opts, err := goredis.ParseURL(serverURL(t, "BUDGETD_TEST_REDIS"))
		if err != nil {
			t.Fatal(err)
		}
		rc := goredis.NewClient(opts)
		rc.Close()
		return rc.Ping(ctx).Err()
	}())

	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"WRONGTYPE", wrongType, false},
		{"a Lua runtime error", luaError, false},
		{"a reply of the wrong type", replyShape, false},
		{"a nested reply as strings", replyShape2, false},
		{"NOPERM", serverError("NOPERM this user has no permissions to run the 'fcall' command"), false},
		{"a bare error", errors.New("boom"), false},

		{"connection refused", refused, true},
		{"a closed client", closed, true},
		{"io.EOF", io.EOF, true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"pool timeout", goredis.ErrPoolTimeout, true},
		{"LOADING", serverError("LOADING Redis is loading the dataset in memory"), true},
		{"BUSY", serverError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."), true},
		{"CLUSTERDOWN", serverError("CLUSTERDOWN The cluster is down"), true},
		{"TRYAGAIN", serverError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"MASTERDOWN", serverError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{"READONLY", serverError("READONLY You can't write against a read only replica."), true},
		{"OOM", serverError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{"MISCONF", serverError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), true},
		{"max clients", serverError("ERR max number of clients reached"), true},
		{"MOVED", serverError("MOVED 3999 127.0.0.1:6381"), true},
		{"already unavailable", fmt.Errorf("redis: %w: limit definitions kept changing", ledger.ErrUnavailable), true},
	} {
		got := s.fail(ctx, "test", tc.err)
		if errors.Is(got, ledger.ErrUnavailable) != tc.unavailable {
			t.Errorf("%s: fail(%v) = %v, unavailable %v, want %v", tc.name, tc.err, got, !tc.unavailable, tc.unavailable)
		}
		if !tc.unavailable && !errors.Is(got, tc.err) {
			t.Errorf("%s: fail(%v) = %v, which does not wrap the cause", tc.name, tc.err, got)
		}
	}

	// The call's own deadline is unavailability whatever the client said;
	// the caller giving up is the caller's context error.
	cctx, cancel := context.WithTimeoutCause(ctx, time.Nanosecond, errCallTimeout)
	defer cancel()
	<-cctx.Done()
	if got := s.fail(cctx, "test", wrongType); !errors.Is(got, ledger.ErrUnavailable) {
		t.Errorf("after the call's deadline: %v", got)
	}
	gone, cancel2 := context.WithCancel(ctx)
	cancel2()
	if got := s.fail(gone, "test", wrongType); !errors.Is(got, context.Canceled) || errors.Is(got, ledger.ErrUnavailable) {
		t.Errorf("with the caller's context canceled: %v", got)
	}
}
