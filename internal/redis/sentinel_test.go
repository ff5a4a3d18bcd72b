package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// sentinelSet is a primary, its replica and one Sentinel watching them as
// "m", each a redis-server of this test on a loopback port.
type sentinelSet struct {
	primary, replica, sentinel int
	replicaProc                *os.Process
}

// startSentinelSet starts the three servers in t's temporary directory and
// returns once the Sentinel knows the replica (it can then promote it).
func startSentinelSet(t *testing.T) sentinelSet {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server: %v (run scripts/install-deps)", err)
	}
	dir := t.TempDir()
	set := sentinelSet{primary: freePort(t), replica: freePort(t), sentinel: freePort(t)}
	run := func(name string, args ...string) *os.Process {
		cmd := exec.Command(bin, args...)
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log.Close()
		})
		return cmd.Process
	}
	server := func(port int) []string {
		d := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", d, "--save", "", "--appendonly", "no",
			"--maxmemory-policy", "noeviction"}
	}
	run("primary", server(set.primary)...)
	set.replicaProc = run("replica", append(server(set.replica), "--replicaof", "127.0.0.1", strconv.Itoa(set.primary))...)
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "bind 127.0.0.1\nport %d\ndir %s\nsentinel monitor m 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 10000\n", set.sentinel, dir, set.primary), 0o644); err != nil {
		t.Fatal(err)
	}
	run("sentinel", conf, "--sentinel")
	ctx := context.Background()
	s := goredis.NewSentinelClient(&goredis.Options{Addr: set.addr(set.sentinel)})
	t.Cleanup(func() { s.Close() })
	waitFor(t, 30*time.Second, "the Sentinel to know the replica", func() bool {
		rs, err := s.Replicas(ctx, "m").Result()
		return err == nil && len(rs) == 1 && rs[0]["master-link-status"] == "ok" && !strings.Contains(rs[0]["flags"], "down")
	})
	return set
}

func (sentinelSet) addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// url is budgetd's store URL through the Sentinel.
func (set sentinelSet) url() string {
	return fmt.Sprintf("redis://%s/0?master_name=m", set.addr(set.sentinel))
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSentinelFollowsPromotion: through a Sentinel URL the store writes to
// the primary, and after the Sentinel promotes the replica it writes to the
// new primary without being opened again; what was charged before is there.
func TestSentinelFollowsPromotion(t *testing.T) {
	set := startSentinelSet(t)
	s := openTest(t, set.url())
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1),
		LeakPer: 1000 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	charge := func(cost int64) ledger.FillupOutcome {
		t.Helper()
		out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(cost)}}, ledger.Idempotency{})
		if err != nil || !out.Accepted {
			t.Fatalf("Fillup(%d): %+v %v", cost, out, err)
		}
		return out
	}
	charge(5)
	// The replica has the charge before the promotion: WAIT for it.
	primary := goredis.NewClient(&goredis.Options{Addr: set.addr(set.primary)})
	defer primary.Close()
	if n, err := primary.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}

	sentinel := goredis.NewSentinelClient(&goredis.Options{Addr: set.addr(set.sentinel)})
	defer sentinel.Close()
	if err := sentinel.Failover(ctx, "m").Err(); err != nil {
		t.Fatal(err)
	}
	replica := goredis.NewClient(&goredis.Options{Addr: set.addr(set.replica)})
	defer replica.Close()
	waitFor(t, 60*time.Second, "the replica's promotion", func() bool {
		addr, err := sentinel.GetMasterAddrByName(ctx, "m").Result()
		role, rerr := replica.Do(ctx, "ROLE").Slice()
		return err == nil && rerr == nil && len(addr) == 2 && addr[1] == strconv.Itoa(set.replica) && len(role) > 0 && role[0] == "master"
	})
	// The old primary is now a replica, which refuses writes: a call that
	// still went there is unavailable (503), never silently accepted.
	var out ledger.FillupOutcome
	waitFor(t, 30*time.Second, "a charge on the new primary", func() bool {
		o, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(3)}}, ledger.Idempotency{})
		if err != nil && !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Fillup after the promotion: %v, want an answer or unavailable", err)
		}
		out = o
		return err == nil
	})
	if got := out.Items[0].Snapshot.State.Level.Decimal(); !out.Accepted || got.Round(3).String() != "8" {
		t.Fatalf("after the promotion: accepted %v, level %s, want 8 (5 before, 3 after)", out.Accepted, got)
	}
	// The write is on the new primary.
	keys, err := replica.Keys(ctx, s.k.prefix+":*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("new primary's keys of the store: %v %v", keys, err)
	}
}

// TestSentinelURLRefusesReplicaReads: options that would serve calls from
// replicas are refused when the store is opened.
func TestSentinelURLRefusesReplicaReads(t *testing.T) {
	for _, q := range []string{"replica_only=true", "route_randomly=true", "route_by_latency=true"} {
		_, err := Open(context.Background(), "redis://127.0.0.1:1/0?master_name=m&"+q)
		if err == nil || !strings.Contains(err.Error(), "primary only") {
			t.Errorf("%s: %v, want a refusal", q, err)
		}
	}
	if _, err := Open(context.Background(), "redis://127.0.0.1:1/0?master_name="); err == nil || !strings.Contains(err.Error(), "master_name") {
		t.Errorf("empty master_name: %v, want a refusal", err)
	}
}

// TestWaitReplicas: with WithWaitReplicas a write is answered once the
// replica has it; while the replica does not answer (SIGSTOP) a charge
// fails as unavailable after the wait, and its retry with the same
// Idempotency-Key, once the replica is back, replays it: charged once.
func TestWaitReplicas(t *testing.T) {
	set := startSentinelSet(t)
	url := fmt.Sprintf("redis://%s/0", set.addr(set.primary))
	s := openTest(t, url, WithWaitReplicas(1, 300*time.Millisecond))
	ctx := context.Background()
	// The first write waits for the replica's first acknowledgement, which
	// on a busy machine can take longer than the 300ms: a PUT of the same
	// limit again is the same write, so it is retried until it is answered.
	waitFor(t, 30*time.Second, "the replica to acknowledge the limit's PUT", func() bool {
		_, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1),
			LeakPer: 1000 * time.Hour})
		if err != nil && !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("put limit: %v, want an answer or unavailable", err)
		}
		return err == nil
	})
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	fill := func(cost int64, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
		return s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(cost)}}, idem)
	}
	if out, err := fill(5, ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("with the replica streaming: %+v %v", out, err)
	}
	// Reads wait for nothing.
	if err := set.replicaProc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inspect(ctx, ref); err != nil {
		t.Fatalf("Inspect with the replica stopped: %v", err)
	}
	idem := ledger.Idempotency{Scope: "fillup:l/k", Key: "retry-me", Hash: "h"}
	started := time.Now()
	_, err := fill(3, idem)
	if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("with the replica stopped: %v, want unavailable, 0 of 1 replicas", err)
	}
	if took := time.Since(started); took < 300*time.Millisecond {
		t.Fatalf("answered after %s, before the wait of 300ms", took)
	}
	if err := set.replicaProc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var out ledger.FillupOutcome
	waitFor(t, 30*time.Second, "the retry to be acknowledged", func() bool {
		out, err = fill(3, idem)
		return err == nil
	})
	if !out.Replayed || !out.Accepted {
		t.Fatalf("retry: %+v, want the first attempt's answer replayed", out)
	}
	snap, err := s.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.State.Level.Decimal().Round(3).String(); got != "8" {
		t.Fatalf("level %s, want 8: 5, then 3 once", got)
	}
}

// TestWaitReplicasRefusedOnCluster: a keyless WAIT cannot follow a write
// to its node in a cluster, so the option is refused there.
func TestWaitReplicasRefusedOnCluster(t *testing.T) {
	_, err := Open(context.Background(), serverURL(t, "BUDGETD_TEST_REDIS_CLUSTER"), WithWaitReplicas(1, time.Second))
	if err == nil || !strings.Contains(err.Error(), "not Cluster") {
		t.Fatalf("Open: %v, want a refusal", err)
	}
}
