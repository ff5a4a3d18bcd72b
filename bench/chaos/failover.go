package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PostgreSQL failover (SPEC "Failover (replicated stores)"; issue 45): a
// primary and streaming standbys on loopback, budgetd given every host in
// pgx's multi-host form with target_session_attrs=read-write, and the fault
// run's load (Fillups with Idempotency-Keys, every call resolved by its
// retries, every bucket's level and history checked against the accepted
// calls) while the primary is killed with SIGKILL and a standby promoted,
// again and again: the standby that received the most WAL is promoted (as
// Patroni does), the others follow it (primary_conninfo changed, reloaded),
// and the killed server is rebuilt as a standby of the new primary
// (pg_basebackup), so the next failover goes another way.
//
// With synchronous replication the primary has two standbys and
// synchronous_standby_names = 'ANY 1 (*)' (written with ALTER SYSTEM so
// that the standbys' copies carry it too): an acknowledged charge is on at
// least one standby, the one promoted, and must survive every failover; the
// other standby lets the promoted server commit again before the killed one
// is rebuilt (with one standby it waits for that rebuild: SPEC's 5 s from
// the promotion to the first accepted call cannot hold on a busy machine;
// docs/operations.md). With asynchronous replication one standby, and the
// charges lost are counted and reported, not failed.

// pgPair is a primary and its standbys; srv[primary] is the primary.
type pgPair struct {
	srv     []*pgServer
	primary int
	sync    bool // synchronous replication
	killed  int  // the server killed by the last promotion, -1 for none
}

// newPGPair initialises a primary in tmp/pg and the places of standbys
// servers in tmp/pg2, tmp/pg3…; start makes them standbys.
func newPGPair(tmp string, standbys int) (*pgPair, error) {
	p, err := newPG(tmp)
	if err != nil {
		return nil, err
	}
	pp := &pgPair{srv: []*pgServer{p}, killed: -1}
	for i := range standbys {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pp.srv = append(pp.srv, &pgServer{bin: p.bin, dir: filepath.Join(tmp, fmt.Sprintf("pg%d", i+2)), port: port, cred: p.cred})
	}
	return pp, nil
}

// URL names every server; pgx connects to the one that accepts writes.
func (pp *pgPair) URL() string {
	hosts := make([]string, len(pp.srv))
	for i, s := range pp.srv {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", s.port)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write"
}

// start runs the primary with synchronous replication or not, then builds
// and runs the standbys.
func (pp *pgPair) start(ctx context.Context, sync bool) error {
	pp.sync = sync
	p := pp.srv[pp.primary]
	if err := p.Start(ctx); err != nil {
		return err
	}
	names := ""
	if sync {
		names = "ANY 1 (*)"
	}
	// The promoted server's end-of-recovery checkpoint would remove the old
	// timeline's last segment before a standby that follows it had read it:
	// keep WAL, and let a standby retry soon (both as a failover manager's
	// setup would).
	if err := p.psql(ctx, fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '%s'", names),
		"ALTER SYSTEM SET wal_keep_size = '1GB'", "ALTER SYSTEM SET wal_retrieve_retry_interval = '200ms'",
		"SELECT pg_reload_conf()"); err != nil {
		return err
	}
	for i := range pp.srv {
		if i != pp.primary {
			if err := pp.buildStandby(ctx, i); err != nil {
				return err
			}
		}
	}
	return pp.streaming(ctx)
}

// rebuildStandby makes the server the last promotion killed a fresh
// standby of the new primary and waits until every standby streams.
func (pp *pgPair) rebuildStandby(ctx context.Context) error {
	if pp.killed >= 0 {
		if err := pp.buildStandby(ctx, pp.killed); err != nil {
			return err
		}
		pp.killed = -1
	}
	return pp.streaming(ctx)
}

// buildStandby makes server i a fresh standby of the primary: a base backup
// with the connection to the primary written (-R), then started.
func (pp *pgPair) buildStandby(ctx context.Context, i int) error {
	p, s := pp.srv[pp.primary], pp.srv[i]
	if err := os.RemoveAll(s.dir); err != nil {
		return err
	}
	out, err := s.command("pg_basebackup", "-D", s.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "postgres",
		"-X", "stream", "-R", "-c", "fast", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_basebackup: %v: %s", err, out)
	}
	return s.Start(ctx)
}

// streaming waits until every standby streams from the primary, and with
// synchronous replication counts in its quorum: commits wait for one of
// them from here on.
func (pp *pgPair) streaming(ctx context.Context) error {
	want := strings.TrimSuffix(strings.Repeat("streaming async,", len(pp.srv)-1), ",")
	if pp.sync {
		want = strings.TrimSuffix(strings.Repeat("streaming quorum,", len(pp.srv)-1), ",")
	}
	p := pp.srv[pp.primary]
	var got string
	err := waitUntil(ctx, 60*time.Second, "the standbys to stream ("+want+")", func() bool {
		out, err := p.query(ctx, "SELECT string_agg(state || ' ' || sync_state, ',') FROM pg_stat_replication")
		got = out
		return err == nil && out == want
	})
	if err != nil {
		// What each standby's log says of it.
		var logs strings.Builder
		for i, s := range pp.srv {
			if i != pp.primary {
				b, _ := os.ReadFile(s.dir + ".log")
				fmt.Fprintf(&logs, "\n--- %s.log (last 2000 bytes):\n%s", s.dir, b[max(0, len(b)-2000):])
			}
		}
		return fmt.Errorf("%w; the primary sees %q%s", err, got, logs.String())
	}
	return nil
}

// promote kills the primary with SIGKILL and promotes the standby that
// received the most WAL; the other standbys follow it. It returns when the
// promotion finished. The killed server is then to be rebuilt as a standby
// (rebuildStandby).
func (pp *pgPair) promote(ctx context.Context, down func(context.Context) error) (time.Time, error) {
	old := pp.primary
	if err := pp.srv[old].Kill(); err != nil {
		return time.Time{}, err
	}
	pp.killed = old
	if err := down(ctx); err != nil {
		return time.Time{}, err
	}
	next, most := -1, int64(-1)
	for i, s := range pp.srv {
		if i == old {
			continue
		}
		out, err := s.query(ctx, "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::bigint")
		if err != nil {
			return time.Time{}, fmt.Errorf("standby %d: %w", i, err)
		}
		n, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("standby %d: received %q: %w", i, out, err)
		}
		if n > most {
			next, most = i, n
		}
	}
	if out, err := pp.srv[next].command("pg_ctl", "promote", "-D", pp.srv[next].dir, "-w", "-t", "60").CombinedOutput(); err != nil {
		return time.Time{}, fmt.Errorf("pg_ctl promote: %v: %s", err, out)
	}
	promoted := time.Now()
	pp.primary = next
	for i, s := range pp.srv {
		if i != old && i != next {
			if err := s.follow(pp.srv[next].port); err != nil {
				return time.Time{}, err
			}
		}
	}
	return promoted, ctx.Err()
}

// follow points a running standby at the primary on port: its
// primary_conninfo (written by pg_basebackup -R) changed and reloaded. It
// follows the primary's new timeline by itself (recovery_target_timeline is
// 'latest'), having received no more WAL than the server promoted.
func (s *pgServer) follow(port int) error {
	path := filepath.Join(s.dir, "postgresql.auto.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	conf := portRE.ReplaceAllString(string(b), "${1}port="+strconv.Itoa(port))
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	return s.cmd.Process.Signal(syscall.SIGHUP)
}

// portRE finds the port in primary_conninfo.
var portRE = regexp.MustCompile(`(?m)^(primary_conninfo = .*?)port=[0-9]+`)

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
	standbys := 1
	if sync {
		standbys = 2
	}
	pp, err := newPGPair(tmp, standbys)
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
