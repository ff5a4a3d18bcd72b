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

// Redis Cluster failover (issue 45): three masters with a replica each
// (AOF, appendfsync always), budgetd on the cluster URL, and the fault
// run's load while one master is killed with SIGKILL and the cluster
// promotes its replica, again and again: the killed node comes back as the
// replica of the one promoted, and the next failover kills the master of
// that shard again. Replication is asynchronous: the charges lost are
// counted and reported.

// quietRedis drops go-redis's own log lines: the harness's clients dial
// killed servers on purpose.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { goredis.SetLogger(quietRedis{}) }

// clusterSet is the six nodes; victim is the index of the master the next
// failover kills.
type clusterSet struct {
	srv    []*redisServer
	victim int
	killed int // the node the last failover killed
}

func newClusterSet(tmp string) (*clusterSet, error) {
	cs := &clusterSet{}
	for i := range 6 {
		s, err := newRedis(filepath.Join(tmp, strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"}
		cs.srv = append(cs.srv, s)
	}
	return cs, nil
}

func (cs *clusterSet) URL() string {
	var addrs []string
	for _, s := range cs.srv {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", s.port))
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

func (cs *clusterSet) start(ctx context.Context) error {
	args := []string{"--cluster", "create"}
	for _, s := range cs.srv {
		if err := s.Start(ctx); err != nil {
			return err
		}
		args = append(args, fmt.Sprintf("127.0.0.1:%d", s.port))
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	return cs.settled(ctx)
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	port     int
	master   bool
	failed   bool
	masterOf string // a replica's master's id
	id       string
}

// nodes reads CLUSTER NODES from the first node that answers, with each
// node's index in srv.
func (cs *clusterSet) nodes(ctx context.Context) (map[int]clusterNode, bool) {
	for _, s := range cs.srv {
		c := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), DialTimeout: 200 * time.Millisecond})
		info, ierr := c.ClusterInfo(ctx).Result()
		txt, err := c.ClusterNodes(ctx).Result()
		c.Close()
		if err != nil || ierr != nil {
			continue
		}
		out := map[int]clusterNode{}
		for _, line := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			hostport, _, _ := strings.Cut(f[1], "@")
			_, ps, _ := strings.Cut(hostport, ":")
			port, _ := strconv.Atoi(ps)
			for i, s := range cs.srv {
				if s.port == port {
					out[i] = clusterNode{port: port, id: f[0], master: strings.Contains(f[2], "master"),
						failed: strings.Contains(f[2], "fail") || f[7] != "connected", masterOf: f[3]}
				}
			}
		}
		return out, strings.Contains(info, "cluster_state:ok")
	}
	return nil, false
}

// settled waits until the cluster is ok, with three masters and three
// replicas all connected, and names the next victim: a master.
func (cs *clusterSet) settled(ctx context.Context) error {
	return waitUntil(ctx, 90*time.Second, "the cluster to settle (3 masters, 3 replicas, ok)", func() bool {
		ns, ok := cs.nodes(ctx)
		if !ok || len(ns) != 6 {
			return false
		}
		masters := 0
		for _, n := range ns {
			if n.failed {
				return false
			}
			if n.master {
				masters++
			}
		}
		if masters != 3 {
			return false
		}
		// Every replica streams from its master.
		for _, s := range cs.srv {
			c := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
			info, err := c.Info(ctx, "replication").Result()
			c.Close()
			if err != nil || strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
				return false
			}
		}
		if !ns[cs.victim].master {
			for i, n := range ns {
				if n.master {
					cs.victim = i
					break
				}
			}
		}
		return true
	})
}

// promote kills the victim master and returns once its replica is a
// master and the cluster is ok again; the promoted node is the next victim.
// The other masters keep serving (budgetd stays ready): down is not called.
func (cs *clusterSet) promote(ctx context.Context, _ func(context.Context) error) (time.Time, error) {
	ns, _ := cs.nodes(ctx)
	id := ns[cs.victim].id
	replica := -1
	for i, n := range ns {
		if n.masterOf == id {
			replica = i
		}
	}
	if replica < 0 {
		return time.Time{}, fmt.Errorf("the master on port %d has no replica", cs.srv[cs.victim].port)
	}
	cs.killed = cs.victim
	if err := cs.srv[cs.killed].Kill(); err != nil {
		return time.Time{}, err
	}
	err := waitUntil(ctx, 60*time.Second, "the cluster to promote port "+strconv.Itoa(cs.srv[replica].port), func() bool {
		ns, ok := cs.nodes(ctx)
		return ok && ns[replica].master && !ns[replica].failed
	})
	if err != nil {
		return time.Time{}, err
	}
	cs.victim = replica
	return time.Now(), nil
}

// rejoin starts the killed node again: its nodes.conf makes it a replica
// of the one promoted.
func (cs *clusterSet) rejoin(ctx context.Context) error {
	if err := cs.srv[cs.killed].Start(ctx); err != nil {
		return err
	}
	return cs.settled(ctx)
}

func (cs *clusterSet) Stop() {
	for _, s := range cs.srv {
		s.Stop()
	}
}

// runClusterFailover runs the Redis Cluster failover scenario.
func runClusterFailover(ctx context.Context, bin, tmp string, p params, out io.Writer) (result, error) {
	name := "failover, Cluster replica"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return result{name: name}, err
	}
	cs, err := newClusterSet(tmp)
	if err != nil {
		return result{name: name}, err
	}
	defer cs.Stop()
	if err := cs.start(ctx); err != nil {
		return result{name: name}, err
	}
	port, err := freePort()
	if err != nil {
		return result{name: name}, err
	}
	b := &budgetd{bin: bin, storeURL: cs.URL(), port: port}
	if err := b.Start(ctx); err != nil {
		return result{name: name}, err
	}
	defer b.Kill()
	r, err := promotedRun(ctx, newAPI(b.base(), 64), name, p, cs.promote, cs.rejoin, true)
	r.store = "redis"
	printResult(out, r)
	return r, err
}
