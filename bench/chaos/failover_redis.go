package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Redis failover (SPEC "Failover (replicated stores)"; issue 45): a primary
// and one replica (AOF, appendfsync always, as for the other Redis runs)
// watched by three Sentinels (quorum 2), budgetd given the Sentinels in
// go-redis's failover URL, and the fault run's load while the primary is
// killed with SIGKILL and the Sentinels promote the replica, again and
// again: the killed server comes back as a replica of the new primary, so
// the next failover goes the other way. Without --redis-wait-replicas the
// charges lost are counted and reported (replication is asynchronous);
// with --redis-wait-replicas 1 none may be.

// redisSet is the two servers and the Sentinels; srv[primary] is the
// primary.
type redisSet struct {
	srv       [2]*redisServer
	primary   int
	sentinels []int // ports
	procs     []*exec.Cmd
}

const sentinelMaster = "chaos"

func newRedisSet(tmp string) (*redisSet, error) {
	rs := &redisSet{}
	for i := range rs.srv {
		s, err := newRedis(filepath.Join(tmp, strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		rs.srv[i] = s
	}
	rs.srv[1].args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(rs.srv[0].port)}
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
		c.Stdout, c.Stderr = io.Discard, io.Discard
		if err := c.Start(); err != nil {
			return err
		}
		rs.procs = append(rs.procs, c)
	}
	return rs.settled(ctx)
}

// settled waits until every Sentinel names srv[primary] and knows its
// replica as up, and the primary streams to it.
func (rs *redisSet) settled(ctx context.Context) error {
	want := strconv.Itoa(rs.srv[rs.primary].port)
	return waitUntil(ctx, 90*time.Second, "the Sentinels and the replica to settle on port "+want, func() bool {
		for _, port := range rs.sentinels {
			c := goredis.NewSentinelClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
			addr, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
			reps, rerr := c.Replicas(ctx, sentinelMaster).Result()
			c.Close()
			if err != nil || rerr != nil || len(addr) != 2 || addr[1] != want || len(reps) != 1 || reps[0]["master-link-status"] != "ok" {
				return false
			}
		}
		p := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%s", want)})
		defer p.Close()
		n, err := p.Wait(ctx, 1, 200*time.Millisecond).Result()
		return err == nil && n == 1
	})
}

// promote kills the primary with SIGKILL and returns once the Sentinels
// name the replica and it has become a primary.
func (rs *redisSet) promote(ctx context.Context) (time.Time, error) {
	old, next := rs.srv[rs.primary], rs.srv[1-rs.primary]
	if err := old.Kill(); err != nil {
		return time.Time{}, err
	}
	want := strconv.Itoa(next.port)
	c := goredis.NewSentinelClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rs.sentinels[0])})
	defer c.Close()
	n := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", next.port)})
	defer n.Close()
	err := waitUntil(ctx, 60*time.Second, "the Sentinels to promote port "+want, func() bool {
		addr, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
		role, rerr := n.Do(ctx, "ROLE").Slice()
		return err == nil && rerr == nil && len(addr) == 2 && addr[1] == want && len(role) > 0 && role[0] == "master"
	})
	if err != nil {
		return time.Time{}, err
	}
	rs.primary = 1 - rs.primary
	return time.Now(), nil
}

// rejoin starts the killed server again as a replica of the new primary.
func (rs *redisSet) rejoin(ctx context.Context) error {
	s := rs.srv[1-rs.primary]
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
		name = "failover, Sentinel + WAIT 1"
	}
	rs, err := newRedisSet(tmp)
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
