package redis

import (
	"context"
	"errors"
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

// testLibrary is a Functions library of test functions whose names carry
// nonce, and the batcher reload that loads it on every master.
func testLibrary(s *Store, nonce string, body string) func(context.Context) error {
	src := "#!lua name=budgetd_test_" + nonce + "\nlocal N = '_" + nonce + "'\n" + body
	return func(ctx context.Context) error {
		return s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
			return c.FunctionLoadReplace(ctx, src).Err()
		})
	}
}

// TestBatcherConcurrentCalls sends many concurrent function calls through
// one in-flight pipeline at a time, so they queue and go in batches:
// functions Redis does not have yet ("Function not found", then the library
// is loaded and just those calls are sent again), calls whose function
// fails, read-only calls, and keys on every slot of a cluster. Every call
// must get its own answer or its own error, and the calls must really have
// been pipelined.
func TestBatcherConcurrentCalls(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env))
			log := &pipelineLog{}
			s.client.AddHook(log)
			nonce := strings.ReplaceAll(testPrefix(), "-", "_")
			// Not loaded yet: the first calls find no function.
			reload := testLibrary(s, nonce, `
redis.register_function('echo' .. N, function(keys, args) return {keys[1], args[1], redis.call('INCR', keys[1])} end)
redis.register_function('fail' .. N, function(keys, args)
  if args[1] == 'x' then error('BUDGETD_TEST_FAIL') end
  return {args[1]}
end)
redis.register_function{function_name = 'read' .. N, flags = {'no-writes'},
  callback = function(keys, args) return {keys[1], redis.call('GET', keys[1]) or ''} end}
`)
			t.Cleanup(func() {
				_ = s.eachNode(context.Background(), func(ctx context.Context, c goredis.Cmdable) error {
					return c.FunctionDelete(ctx, "budgetd_test_"+nonce).Err()
				})
			})
			var reloads atomic.Int64
			b := newBatcher(s.client, time.Minute, func(ctx context.Context) error {
				reloads.Add(1)
				return reload(ctx)
			}, 1, 16)
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
						res, err = b.do(ctx, &fcall{fn: "echo_" + nonce, keys: []string{key}, args: []any{i}}).Slice()
						if err == nil && (res[0] != key || res[1] != fmt.Sprint(i)) {
							err = fmt.Errorf("call %d got %v", i, res)
						}
					case 2:
						arg := fmt.Sprint(i)
						if i%8 == 2 {
							arg = "x"
						}
						var res []string
						res, err = b.do(ctx, &fcall{fn: "fail_" + nonce, keys: []string{key}, args: []any{arg}}).StringSlice()
						switch {
						case arg == "x" && (err == nil || !strings.Contains(err.Error(), "BUDGETD_TEST_FAIL")):
							err = fmt.Errorf("call %d: error %v, want its function's error", i, err)
						case arg == "x":
							err = nil
						case err == nil && res[0] != arg:
							err = fmt.Errorf("call %d got %v", i, res)
						}
					case 3:
						var res []string
						res, err = b.do(ctx, &fcall{fn: "read_" + nonce, ro: true, keys: []string{key}}).StringSlice()
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
				v, err := s.client.Get(ctx, fmt.Sprintf("%s:t:{k%d}", s.k.prefix, k)).Int()
				if err != nil {
					t.Fatal(err)
				}
				total += v
			}
			if total != n/2 {
				t.Errorf("echo functions ran %d times, want %d", total, n/2)
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
			sent := log.names["fcall"] + log.names["fcall_ro"]
			if reloads.Load() == 0 || sent <= n {
				t.Errorf("commands sent %v, %d library loads: want a load and calls sent again after Function not found", log.names, reloads.Load())
			}
			if sent > n+n/4 {
				t.Errorf("commands sent %v: too many FCALLs (only calls that found no function are resent)", log.names)
			}
		})
	}
}

// TestBatcherCancelWhileQueued: a call whose context ends while it waits
// behind an in-flight pipeline leaves the queue and is never sent; so does a
// call whose own deadline (the batcher's timeout) passes there.
func TestBatcherCancelWhileQueued(t *testing.T) {
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
	nonce := strings.ReplaceAll(testPrefix(), "-", "_")
	reload := testLibrary(s, nonce, `
redis.register_function('slow' .. N, function(keys, args)
  local t = redis.call('TIME') local stop = t[1] * 1000000 + t[2] + 300000
  repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
  return 1
end)
redis.register_function('incr' .. N, function(keys, args) return redis.call('INCR', keys[1]) end)
`)
	ctx := context.Background()
	if err := reload(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.client.FunctionDelete(ctx, "budgetd_test_"+nonce).Err() })
	key := s.k.prefix + ":t:slow"
	for _, how := range []string{"context", "deadline"} {
		t.Run(how, func(t *testing.T) {
			b := newBatcher(s.client, time.Minute, reload, 1, maxBatch)
			started := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				close(started)
				done <- b.do(ctx, &fcall{fn: "slow_" + nonce, keys: []string{key + "x"}}).Err()
			}()
			<-started
			// The slow function has the one pipeline slot.
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				if n, _ := b.gc.Load(); n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the slow call never went")
				}
			}
			cctx, second := ctx, *b // the second call shares the batcher
			if how == "context" {
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			} else {
				second.timeout = 50 * time.Millisecond
			}
			err := second.do(cctx, &fcall{fn: "incr_" + nonce, keys: []string{key}}).Err()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("queued call returned %v, want its deadline", err)
			}
			if err := <-done; err != nil && how == "context" {
				t.Fatal(err)
			}
			inflight, queued := b.gc.Load()
			if queued != 0 || inflight != 0 {
				t.Fatalf("queue %d, in flight %d after both calls returned", queued, inflight)
			}
			if n, err := s.client.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("the call that timed out in the queue ran (exists %d, %v)", n, err)
			}
		})
	}
}
