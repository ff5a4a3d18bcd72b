package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// PostgreSQL failover (SPEC "Failover (replicated stores)"; issue 45): a
// primary and one streaming standby on loopback, budgetd given both hosts in
// pgx's multi-host form with target_session_attrs=read-write, and the fault
// run's load (Fillups with Idempotency-Keys, every call resolved by its
// retries, every bucket's level and history checked against the accepted
// calls) while the primary is killed with SIGKILL and the standby promoted,
// again and again: after each promotion the killed server is rebuilt as a
// standby of the new primary (pg_basebackup), so the next failover goes the
// other way. With synchronous replication (synchronous_standby_names = '*',
// written with ALTER SYSTEM so that the standby's copy carries it too) an
// acknowledged charge must survive every failover; with asynchronous
// replication the charges lost are counted and reported, not failed.

// pgPair is a primary and its standby; srv[primary] is the primary.
type pgPair struct {
	srv     [2]*pgServer
	primary int
	sync    bool // synchronous replication
}

// newPGPair initialises a primary in tmp/pg and a second server's place in
// tmp/pg2; start makes the second a standby.
func newPGPair(tmp string) (*pgPair, error) {
	p, err := newPG(tmp)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return &pgPair{srv: [2]*pgServer{p, {bin: p.bin, dir: filepath.Join(tmp, "pg2"), port: port, cred: p.cred}}}, nil
}

// URL names both servers; pgx connects to the one that accepts writes.
func (pp *pgPair) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		pp.srv[0].port, pp.srv[1].port)
}

// start runs the primary with synchronous replication or not, then builds
// and runs the standby.
func (pp *pgPair) start(ctx context.Context, sync bool) error {
	pp.sync = sync
	p := pp.srv[pp.primary]
	if err := p.Start(ctx); err != nil {
		return err
	}
	names := ""
	if sync {
		names = "*"
	}
	if err := p.psql(ctx, fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '%s'", names), "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	return pp.rebuildStandby(ctx)
}

// rebuildStandby makes the server that is not the primary a fresh standby
// of it: a base backup with the connection to the primary written (-R),
// then started.
func (pp *pgPair) rebuildStandby(ctx context.Context) error {
	p, s := pp.srv[pp.primary], pp.srv[1-pp.primary]
	if err := os.RemoveAll(s.dir); err != nil {
		return err
	}
	out, err := s.command("pg_basebackup", "-D", s.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "postgres",
		"-X", "stream", "-R", "-c", "fast", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_basebackup: %v: %s", err, out)
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	// Streaming, and with synchronous replication the primary's
	// synchronous standby: its commits wait for it from here on.
	want := "streaming async"
	if pp.sync {
		want = "streaming sync"
	}
	return waitUntil(ctx, 60*time.Second, "the standby to stream ("+want+")", func() bool {
		out, err := p.query(ctx, "SELECT state || ' ' || sync_state FROM pg_stat_replication")
		return err == nil && out == want
	})
}

// promote kills the primary with SIGKILL and promotes the standby; it
// returns when the promotion finished. The killed server is then to be
// rebuilt as the new standby (rebuildStandby).
func (pp *pgPair) promote(ctx context.Context, down func(context.Context) error) (time.Time, error) {
	old, next := pp.srv[pp.primary], pp.srv[1-pp.primary]
	if err := old.Kill(); err != nil {
		return time.Time{}, err
	}
	if err := down(ctx); err != nil {
		return time.Time{}, err
	}
	if out, err := next.command("pg_ctl", "promote", "-D", next.dir, "-w", "-t", "60").CombinedOutput(); err != nil {
		return time.Time{}, fmt.Errorf("pg_ctl promote: %v: %s", err, out)
	}
	pp.primary = 1 - pp.primary
	return time.Now(), ctx.Err()
}

func (pp *pgPair) Stop() {
	for _, s := range pp.srv {
		if s.cmd != nil {
			s.Stop()
		}
	}
}

// psql runs statements on the server, each in its own transaction.
func (s *pgServer) psql(ctx context.Context, stmts ...string) error {
	for _, q := range stmts {
		if _, err := s.query(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// query runs one statement and returns its output, unaligned.
func (s *pgServer) query(ctx context.Context, q string) (string, error) {
	c := s.command("psql", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "-d", "postgres", "-XAtqc", q)
	out, err := c.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %v: %s", q, err, out)
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return string(trimNL(out)), nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// firstAccepted charges the probe bucket until a call is accepted and
// returns when that answer arrived.
func firstAccepted(ctx context.Context, a *api) (time.Time, error) {
	idem := map[string]string{"Idempotency-Key": newKey()}
	for {
		ans, err := a.do(ctx, http.MethodPost, "/v1/limits/chaos-crash/buckets/failover-probe/fillup", `{"cost":"0.01"}`, idem)
		if err == nil && ans.status == http.StatusOK && accepted(ans.body) {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runFailover runs the PostgreSQL failover scenarios, synchronous then
// asynchronous replication, each with its own pair of servers and budgetd.
func runFailover(ctx context.Context, bin, tmp string, p params, out io.Writer) ([]result, error) {
	var rs []result
	for _, sync := range []bool{true, false} {
		dir := filepath.Join(tmp, map[bool]string{true: "sync", false: "async"}[sync])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return rs, err
		}
		r, err := failoverRun(ctx, bin, dir, p, sync)
		r.store = "postgres"
		rs = append(rs, r)
		printResult(out, r)
		if err != nil {
			return rs, err
		}
	}
	return rs, nil
}

// failoverRun is one scenario: the fault run's load over p.faults
// failovers, each timed from the promotion to the first accepted call.
func failoverRun(ctx context.Context, bin, tmp string, p params, sync bool) (result, error) {
	name := "failover, async standby"
	if sync {
		name = "failover, sync standby"
	}
	pp, err := newPGPair(tmp)
	if err != nil {
		return result{name: name}, err
	}
	defer pp.Stop()
	if err := pp.start(ctx, sync); err != nil {
		return result{name: name}, err
	}
	port, err := freePort()
	if err != nil {
		return result{name: name}, err
	}
	b := &budgetd{bin: bin, storeURL: pp.URL(), port: port}
	if err := b.Start(ctx); err != nil {
		return result{name: name}, err
	}
	defer b.Kill()
	a := newAPI(b.base(), 64)
	return promotedRun(ctx, a, name, p, pp.promote, pp.rebuildStandby, !sync)
}

// promoteFunc kills the primary, calls down while no server is primary
// (when the setup has such a time), and returns when another was promoted.
type promoteFunc func(ctx context.Context, down func(context.Context) error) (time.Time, error)

// notReady waits (10 s at most) for budgetd's /readyz to answer 503: the
// store has no primary, and budgetd must say so (SPEC "Failover").
func notReady(ctx context.Context, a *api) error {
	var last int
	err := waitUntil(ctx, 10*time.Second, "/readyz to answer 503 while no primary answers", func() bool {
		ans, err := a.do(ctx, http.MethodGet, "/readyz", "", nil)
		if err == nil {
			last = ans.status
		}
		return err == nil && ans.status == http.StatusServiceUnavailable
	})
	if err != nil {
		return fmt.Errorf("%w (last answer %d)", err, last)
	}
	return nil
}

// promotedRun is the fault run's load over p.faults failovers: promote
// kills the primary and returns when another was promoted (budgetd's
// /readyz must answer 503 in between), rejoin brings
// the killed server back as a replica of it. Each failover is timed from
// the promotion to the first accepted call, which has p.failoverBound.
// With lossAllowed (asynchronous replication), acknowledged charges lost
// are the figure reported, not a failure.
func promotedRun(ctx context.Context, a *api, name string, p params, promote promoteFunc,
	rejoin func(context.Context) error, lossAllowed bool) (result, error) {
	var slowest time.Duration
	fault := func(ctx context.Context) error {
		promoted, err := promote(ctx, func(ctx context.Context) error { return notReady(ctx, a) })
		if err != nil {
			return err
		}
		// Timed from the promotion, while the killed server rejoins (a
		// primary that waits for a replica commits nothing before that).
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		first := make(chan time.Time, 1)
		go func() {
			at, _ := firstAccepted(pctx, a)
			first <- at
		}()
		if err := rejoin(ctx); err != nil {
			return err
		}
		at := <-first
		if at.IsZero() {
			return fmt.Errorf("no call accepted within 2m of a promotion")
		}
		slowest = max(slowest, at.Sub(promoted))
		return nil
	}
	r, err := faultRun(ctx, a, name, 64, p.faultDur, p.faults, fault)
	if err != nil {
		return r, err
	}
	r.note += fmt.Sprintf("; first accepted call at most %s after a promotion", slowest.Round(10*time.Millisecond))
	if slowest > p.failoverBound {
		r.fail("a call was first accepted %s after a promotion (bound %s)", slowest.Round(10*time.Millisecond), p.failoverBound)
	}
	if lossAllowed && r.phantom == 0 && r.unsolved == 0 && r.lost > 0 {
		// Asynchronous replication: the loss is the figure, not a failure.
		r.note += fmt.Sprintf("; %d acknowledged charges lost (asynchronous replication)", r.lost)
		r.failures = nil
	}
	return r, nil
}
