package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// pipelineLog counts what reaches the client: single commands and
// pipelines, with the largest pipeline seen.
type pipelineLog struct {
	singles, pipelines, largest atomic.Int64
	mu                          sync.Mutex
	names                       map[string]int
}

func (l *pipelineLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (l *pipelineLog) count(cmds []goredis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]int{}
	}
	for _, c := range cmds {
		l.names[c.Name()]++
	}
}

func (l *pipelineLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		l.singles.Add(1)
		l.count([]goredis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (l *pipelineLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		l.pipelines.Add(1)
		for {
			m := l.largest.Load()
			if int64(len(cmds)) <= m || l.largest.CompareAndSwap(m, int64(len(cmds))) {
				break
			}
		}
		l.count(cmds)
		return next(ctx, cmds)
	}
}

// TestBatcherConcurrentCalls sends many concurrent script calls through one
// in-flight pipeline at a time, so they queue and go in batches: scripts
// Redis has not cached (NOSCRIPT, then EVAL of just those calls), calls whose
// script fails, read-only calls, and keys on every slot of a cluster. Every
// call must get its own answer or its own error, and the calls must really
// have been pipelined.
func TestBatcherConcurrentCalls(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env))
			log := &pipelineLog{}
			s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
			b := newBatcher(s.client)
			b.limit = 1
			b.max = 16
			// Fresh sources, so Redis has none of them cached.
			nonce := testPrefix()
			echo := newScript("-- " + nonce + "\nreturn {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}")
			fail := newScript("-- " + nonce + "\nif ARGV[1] == 'x' then error('BUDGETD_TEST_FAIL') end return {ARGV[1]}")
			read := newScript("-- " + nonce + " ro\nreturn {KEYS[1], redis.call('GET', KEYS[1]) or ''}")
			ctx := context.Background()
			const n = 400
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("%s:t:{k%d}", s.k.prefix, i%37)
					var err error
					switch i % 4 {
					case 0, 1:
						var res []any
						res, err = b.do(ctx, &scriptCall{sc: echo, keys: []string{key}, args: []any{i}}).Slice()
						if err == nil && (res[0] != key || res[1] != fmt.Sprint(i)) {
							err = fmt.Errorf("call %d got %v", i, res)
						}
					case 2:
						arg := fmt.Sprint(i)
						if i%8 == 2 {
							arg = "x"
						}
						var res []string
						res, err = b.do(ctx, &scriptCall{sc: fail, keys: []string{key}, args: []any{arg}}).StringSlice()
						switch {
						case arg == "x" && (err == nil || !strings.Contains(err.Error(), "BUDGETD_TEST_FAIL")):
							err = fmt.Errorf("call %d: error %v, want its script's error", i, err)
						case arg == "x":
							err = nil
						case err == nil && res[0] != arg:
							err = fmt.Errorf("call %d got %v", i, res)
						}
					case 3:
						var res []string
						res, err = b.do(ctx, &scriptCall{sc: read, ro: true, keys: []string{key}}).StringSlice()
						if err == nil && res[0] != key {
							err = fmt.Errorf("call %d got %v", i, res)
						}
					}
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// Every echo call ran exactly once: the counters sum to their number.
			total := 0
			for k := range 37 {
				v, err := s.client.(goredis.Cmdable).Get(ctx, fmt.Sprintf("%s:t:{k%d}", s.k.prefix, k)).Int()
				if err != nil {
					t.Fatal(err)
				}
				total += v
			}
			if total != n/2 {
				t.Errorf("echo scripts ran %d times, want %d", total, n/2)
			}
			if log.largest.Load() < 2 {
				t.Errorf("no pipeline of more than one call (%d single commands, %d pipelines)", log.singles.Load(), log.pipelines.Load())
			}
			if m := log.largest.Load(); m > 16 && env == "BUDGETD_TEST_REDIS" {
				t.Errorf("a pipeline of %d calls, more than the bound of 16", m)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			t.Logf("%d single commands, %d pipelines (largest %d); commands %v", log.singles.Load(), log.pipelines.Load(), log.largest.Load(), log.names)
			if log.names["eval"] == 0 || log.names["eval_ro"] == 0 {
				t.Errorf("commands sent %v: want EVAL and EVAL_RO after NOSCRIPT", log.names)
			}
			if log.names["eval"]+log.names["eval_ro"] > n/4 {
				t.Errorf("commands sent %v: too many EVALs (only calls that got NOSCRIPT are resent)", log.names)
			}
		})
	}
}

// TestBatcherCancelWhileQueued: a call whose context ends while it waits
// behind an in-flight pipeline leaves the queue and is never sent.
func TestBatcherCancelWhileQueued(t *testing.T) {
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
	b := newBatcher(s.client)
	b.limit = 1
	key := s.k.prefix + ":t:slow"
	slow := newScript("local t = redis.call('TIME') local stop = t[1] * 1000000 + t[2] + 300000 " +
		"repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop return 1")
	incr := newScript("return redis.call('INCR', KEYS[1])")
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		done <- b.do(context.Background(), &scriptCall{sc: slow, keys: []string{key + "x"}}).Err()
	}()
	<-started
	time.Sleep(50 * time.Millisecond) // the slow script is at Redis
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := b.do(ctx, &scriptCall{sc: incr, keys: []string{key}}).Err()
	if err == nil || ctx.Err() == nil {
		t.Fatalf("queued call returned %v before its context ended", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	queued, inflight := len(b.queue), b.inflight
	b.mu.Unlock()
	if queued != 0 || inflight != 0 {
		t.Fatalf("queue %d, in flight %d after both calls returned", queued, inflight)
	}
	if n, err := s.client.(goredis.Cmdable).Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Fatalf("the cancelled call ran (exists %d, %v)", n, err)
	}
}
