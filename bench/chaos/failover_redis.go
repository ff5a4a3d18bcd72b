package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Redis failover (SPEC "Failover (replicated stores)"; issue 45): a primary
// and one replica (AOF, appendfsync always, as for the other Redis runs)
// watched by three Sentinels (quorum 2), budgetd given the Sentinels in
// go-redis's failover URL, and the fault run's load while the primary is
// killed with SIGKILL and the Sentinels promote a replica, again and again:
// the killed server comes back as a replica of the new primary. Without
// --redis-wait-replicas the charges lost are counted and reported
// (replication is asynchronous); with --redis-wait-replicas 1, run with
// two replicas so that the promoted primary has one to wait for while the
// killed server rejoins, none may be.

// redisSet is the servers and the Sentinels; srv[primary] is the primary,
// the others its replicas; killed is the server the last failover killed.
type redisSet struct {
	dir       string
	srv       []*redisServer
	primary   int
	killed    int
	sentinels []int // ports
	procs     []*exec.Cmd
}

const sentinelMaster = "chaos"

// newRedisSet makes a primary and replicas replicas of it.
func newRedisSet(tmp string, replicas int) (*redisSet, error) {
	rs := &redisSet{dir: tmp}
	for i := range 1 + replicas {
		s, err := newRedis(filepath.Join(tmp, strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			s.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(rs.srv[0].port)}
		}
		rs.srv = append(rs.srv, s)
	}
	for range 3 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		rs.sentinels = append(rs.sentinels, p)
	}
	return rs, nil
}

// URL names the Sentinels.
func (rs *redisSet) URL() string {
	u := fmt.Sprintf("redis://127.0.0.1:%d/0?master_name=%s", rs.sentinels[0], sentinelMaster)
	for _, p := range rs.sentinels[1:] {
		u += fmt.Sprintf("&addr=127.0.0.1:%d", p)
	}
	return u
}

func (rs *redisSet) start(ctx context.Context, tmp string) error {
	for _, s := range rs.srv {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	for i, port := range rs.sentinels {
		conf := filepath.Join(tmp, fmt.Sprintf("sentinel%d.conf", i))
		if err := os.WriteFile(conf, fmt.Appendf(nil, "bind 127.0.0.1\nport %d\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 10000\n",
			port, tmp, sentinelMaster, rs.srv[0].port, sentinelMaster, sentinelMaster), 0o644); err != nil {
			return err
		}
		c := exec.Command("redis-server", conf, "--sentinel")
		log, err := os.Create(conf + ".log")
		if err != nil {
			return err
		}
		c.Stdout, c.Stderr = log, log
		if err := c.Start(); err != nil {
			return err
		}
		rs.procs = append(rs.procs, c)
	}
	return rs.settled(ctx)
}

// settled waits until every Sentinel names the same server as the primary,
// one of srv that says it is one, knows its replicas as up, and the primary
// streams to them all; that server is then rs.primary. It need not be the
// one promote saw promoted: on a busy machine a freshly promoted primary
// can miss down-after-milliseconds and the Sentinels fail it over again, as
// they would in production, and the run follows them (the audit at the end
// covers every failover).
func (rs *redisSet) settled(ctx context.Context) error {
	var last string // what was not settled yet, for the error
	found := -1
	err := waitUntil(ctx, 90*time.Second, "the Sentinels to agree on a primary and the replicas to settle", func() bool {
		found = -1
		agreed := ""
		for _, port := range rs.sentinels {
			c := goredis.NewSentinelClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
			addr, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
			reps, rerr := c.Replicas(ctx, sentinelMaster).Result()
			c.Close()
			if err != nil || rerr != nil || len(addr) != 2 || agreed != "" && addr[1] != agreed || len(reps) != len(rs.srv)-1 {
				last = fmt.Sprintf("Sentinel %d: primary %v %v (others: %q), %d replicas %v", port, addr, err, agreed, len(reps), rerr)
				return false
			}
			agreed = addr[1]
			for _, r := range reps {
				if r["master-link-status"] != "ok" || strings.Contains(r["flags"], "down") {
					last = fmt.Sprintf("Sentinel %d: replica %s:%s flags %s link %s", port, r["ip"], r["port"], r["flags"], r["master-link-status"])
					return false
				}
			}
		}
		for i, s := range rs.srv {
			if strconv.Itoa(s.port) == agreed {
				found = i
			}
		}
		if found < 0 {
			last = "the Sentinels name " + agreed + ", none of the servers"
			return false
		}
		p := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + agreed})
		defer p.Close()
		n, err := p.Wait(ctx, len(rs.srv)-1, 200*time.Millisecond).Result()
		last = fmt.Sprintf("WAIT on the primary %s: %d %v", agreed, n, err)
		return err == nil && n == int64(len(rs.srv)-1)
	})
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(rs.dir, "sentinel0.conf.log"))
		return fmt.Errorf("%w: %s; the first Sentinel's log ends:\n%s", err, last, tail(string(b), 3000))
	}
	rs.primary = found
	return nil
}

// promote kills the primary with SIGKILL and returns once the Sentinels
// name another server that has become a primary.
func (rs *redisSet) promote(ctx context.Context, down func(context.Context) error) (time.Time, error) {
	rs.killed = rs.primary
	if err := rs.srv[rs.killed].Kill(); err != nil {
		return time.Time{}, err
	}
	// The Sentinels wait down-after-milliseconds (1 s) before they act.
	if err := down(ctx); err != nil {
		return time.Time{}, err
	}
	c := goredis.NewSentinelClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rs.sentinels[0])})
	defer c.Close()
	err := waitUntil(ctx, 60*time.Second, "the Sentinels to promote a replica", func() bool {
		addr, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
		if err != nil || len(addr) != 2 {
			return false
		}
		for i, s := range rs.srv {
			if i == rs.killed || addr[1] != strconv.Itoa(s.port) {
				continue
			}
			n := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
			role, err := n.Do(ctx, "ROLE").Slice()
			n.Close()
			if err == nil && len(role) > 0 && role[0] == "master" {
				rs.primary = i
				return true
			}
		}
		return false
	})
	if err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// rejoin starts the killed server again as a replica of the new primary.
func (rs *redisSet) rejoin(ctx context.Context) error {
	s := rs.srv[rs.killed]
	s.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(rs.srv[rs.primary].port)}
	if err := s.Start(ctx); err != nil {
		return err
	}
	return rs.settled(ctx)
}

func (rs *redisSet) Stop() {
	for _, c := range rs.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	for _, s := range rs.srv {
		s.Stop()
	}
}

// runRedisFailover runs the Redis failover scenarios: without waiting for
// the replica, then with --redis-wait-replicas 1.
func runRedisFailover(ctx context.Context, bin, tmp string, p params, out io.Writer) ([]result, error) {
	var all []result
	for _, wait := range []bool{false, true} {
		dir := filepath.Join(tmp, map[bool]string{false: "async", true: "wait"}[wait])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return all, err
		}
		r, err := redisFailoverRun(ctx, bin, dir, p, wait)
		r.store = "redis"
		all = append(all, r)
		printResult(out, r)
		if err != nil {
			return all, err
		}
	}
	r, err := runClusterFailover(ctx, bin, filepath.Join(tmp, "cluster"), p, out)
	return append(all, r), err
}

func redisFailoverRun(ctx context.Context, bin, tmp string, p params, wait bool) (result, error) {
	name := "failover, Sentinel"
	if wait {
		name = "failover, Sentinel + WAIT 1 (2 replicas)"
	}
	// With WAIT for one replica, a second one keeps the promoted primary
	// acknowledging while the killed server rejoins.
	rs, err := newRedisSet(tmp, map[bool]int{false: 1, true: 2}[wait])
	if err != nil {
		return result{name: name}, err
	}
	defer rs.Stop()
	if err := rs.start(ctx, tmp); err != nil {
		return result{name: name}, err
	}
	port, err := freePort()
	if err != nil {
		return result{name: name}, err
	}
	b := &budgetd{bin: bin, storeURL: rs.URL(), port: port}
	if wait {
		b.extraArgs = []string{"--redis-wait-replicas", "1", "--redis-wait-timeout", "500ms"}
	}
	if err := b.Start(ctx); err != nil {
		return result{name: name}, err
	}
	defer b.Kill()
	a := newAPI(b.base(), 64)
	return promotedRun(ctx, a, name, p, rs.promote, rs.rejoin, !wait)
}
