package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/groupcommit"
)

// call is a test call: its id, its key (for keyRule) and, once its batch ran,
// how many times it was sent.
type call struct {
	id   int
	key  int
	sent atomic.Int32
	// hold, if not nil, is what a gate's batch led by this call waits for
	// instead of the gate's release.
	hold chan struct{}
}

// gate is a run function whose batches wait until the test lets them return:
// each batch is reported on started, then waits for a value on release.
type gate struct {
	started chan []*call
	release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan []*call, 100), release: make(chan struct{})}
}

func (g *gate) run(batch []*call) {
	for _, c := range batch {
		c.sent.Add(1)
	}
	g.started <- slices.Clone(batch)
	if h := batch[0].hold; h != nil {
		<-h
		return
	}
	<-g.release
}

// waitFor waits until cond holds: it polls (the condition is the signal; no
// timing is assumed) and fails after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// queued waits until b has n calls queued.
func queued(t *testing.T, b *groupcommit.Batcher[*call], n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d calls are queued", n), func() bool { _, q := b.Load(); return q == n })
}

// idle waits until b has no batch in flight and no call queued: a caller is
// answered before the goroutine that ran its batch gives the slot up.
func idle(t *testing.T, b *groupcommit.Batcher[*call]) {
	t.Helper()
	waitFor(t, "the batcher is idle", func() bool { n, q := b.Load(); return n == 0 && q == 0 })
}

func ids(batch []*call) []int {
	var out []int
	for _, c := range batch {
		out = append(out, c.id)
	}
	return out
}

// do runs Do in a goroutine and returns its error on a channel.
func do(b *groupcommit.Batcher[*call], ctx context.Context, deadline time.Time, c *call) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Do(ctx, deadline, c) }()
	return ch
}

// TestIdleGoesAtOnce: a call that finds a slot free is sent at once, alone,
// while the other slots' batches are still at the store; only when every
// slot is busy does a call queue.
func TestIdleGoesAtOnce(t *testing.T) {
	g := newGate()
	b := groupcommit.New(2, 10, g.run, nil)
	ctx := context.Background()
	a, c := &call{id: 1}, &call{id: 2}
	da := do(b, ctx, time.Time{}, a)
	if got := <-g.started; !slices.Equal(ids(got), []int{1}) {
		t.Fatalf("first batch %v, want [1]", ids(got))
	}
	dc := do(b, ctx, time.Time{}, c)
	if got := <-g.started; !slices.Equal(ids(got), []int{2}) {
		t.Fatalf("second batch %v, want [2] sent at once beside the first", ids(got))
	}
	if n, q := b.Load(); n != 2 || q != 0 {
		t.Fatalf("%d in flight, %d queued; want 2, 0", n, q)
	}
	third := &call{id: 3}
	d3 := do(b, ctx, time.Time{}, third)
	queued(t, b, 1)
	g.release <- struct{}{}
	// Whichever batch returned sends the queued call.
	if got := <-g.started; !slices.Equal(ids(got), []int{3}) {
		t.Fatalf("third batch %v, want [3]", ids(got))
	}
	close(g.release)
	for _, ch := range []<-chan error{da, dc, d3} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	idle(t, b)
}

// TestQueueGoesInBatches: calls that queue behind a batch go together when it
// returns, in arrival order, at most maxBatch a batch, one batch after
// another through the one slot.
func TestQueueGoesInBatches(t *testing.T) {
	g := newGate()
	b := groupcommit.New(1, 3, g.run, nil)
	ctx := context.Background()
	var dones []<-chan error
	dones = append(dones, do(b, ctx, time.Time{}, &call{id: 0}))
	<-g.started
	for i := 1; i <= 7; i++ {
		dones = append(dones, do(b, ctx, time.Time{}, &call{id: i}))
		queued(t, b, i) // so that the arrival order is i's
	}
	for _, want := range [][]int{{1, 2, 3}, {4, 5, 6}, {7}} {
		g.release <- struct{}{}
		if got := <-g.started; !slices.Equal(ids(got), want) {
			t.Fatalf("batch %v, want %v", ids(got), want)
		}
	}
	close(g.release)
	for _, ch := range dones {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	idle(t, b)
}

// TestCancelledWhileQueued: a queued call whose context ends, or whose
// deadline passes, returns that error, leaves the queue and is never sent;
// the calls around it are.
func TestCancelledWhileQueued(t *testing.T) {
	g := newGate()
	b := groupcommit.New(1, 10, g.run, nil)
	ctx := context.Background()
	first := do(b, ctx, time.Time{}, &call{id: 0})
	<-g.started
	before := &call{id: 1}
	dBefore := do(b, ctx, time.Time{}, before)
	queued(t, b, 1)

	cctx, cancel := context.WithCancel(ctx)
	cancelled := &call{id: 2}
	dCancelled := do(b, cctx, time.Time{}, cancelled)
	queued(t, b, 2)
	cancel()
	if err := <-dCancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}
	expired := &call{id: 3}
	if err := b.Do(ctx, time.Now().Add(-time.Second), expired); !errors.Is(err, groupcommit.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past its deadline: %v, want ErrDeadline", err)
	}
	after := &call{id: 4}
	dAfter := do(b, ctx, time.Time{}, after)
	queued(t, b, 2)

	g.release <- struct{}{}
	if got := <-g.started; !slices.Equal(ids(got), []int{1, 4}) {
		t.Fatalf("batch %v, want [1 4]: the calls that gave up are not sent", ids(got))
	}
	close(g.release)
	for _, ch := range []<-chan error{first, dBefore, dAfter} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if cancelled.sent.Load() != 0 || expired.sent.Load() != 0 {
		t.Fatal("a call that gave up in the queue was sent")
	}
}

// TestEndedBeforeChosen: a call whose context has ended when a returning
// batch chooses the next one is not sent, even if its caller has not noticed
// yet.
func TestEndedBeforeChosen(t *testing.T) {
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	releaseFirst := make(chan struct{})
	var batches [][]int
	var mu sync.Mutex
	run := func(batch []*call) {
		for _, c := range batch {
			c.sent.Add(1)
		}
		mu.Lock()
		batches = append(batches, ids(batch))
		mu.Unlock()
		if batch[0].id == 0 {
			<-releaseFirst
			cancel() // after run, before the next batch is chosen
		}
	}
	b := groupcommit.New(1, 10, run, nil)
	first := do(b, ctx, time.Time{}, &call{id: 0})
	waitFor(t, "the first batch runs", func() bool { n, _ := b.Load(); return n == 1 })
	gone := &call{id: 1}
	dGone := do(b, cctx, time.Time{}, gone)
	queued(t, b, 1)
	kept := &call{id: 2}
	dKept := do(b, ctx, time.Time{}, kept)
	queued(t, b, 2)
	close(releaseFirst)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-dKept; err != nil {
		t.Fatal(err)
	}
	if err := <-dGone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if gone.sent.Load() != 0 {
		t.Fatalf("batches %v: the cancelled call was sent", batches)
	}
}

// keyRule keeps calls of one key apart: a call whose key is at the store
// waits. It checks that the batcher never calls it concurrently (the race
// detector sees its unlocked map) and that Returned matches what Admit let go.
type keyRule struct {
	busy   map[int]int
	passes int
}

func (r *keyRule) Pass()              { r.passes++ }
func (r *keyRule) Admit(c *call) bool { ok := r.busy[c.key] == 0; return ok }
func (r *keyRule) Returned(c *call) {
	if r.busy[c.key]--; r.busy[c.key] < 0 {
		panic(fmt.Sprintf("key %d returned more often than it was admitted", c.key))
	}
}

// admitting wraps keyRule so that an admitted call counts as busy.
type admitting struct{ *keyRule }

func (r admitting) Admit(c *call) bool {
	if !r.keyRule.Admit(c) {
		return false
	}
	r.busy[c.key]++
	return true
}

// TestKeyBusy: with a rule that keeps a key's calls apart, a call whose key
// is at the store queues though a slot is free, a call of another key goes at
// once past it, and the queued call is sent when its key's batch returns.
func TestKeyBusy(t *testing.T) {
	g := newGate()
	b := groupcommit.New(3, 10, g.run, admitting{&keyRule{busy: map[int]int{}}})
	ctx := context.Background()
	x1 := &call{id: 1, key: 'x', hold: make(chan struct{})}
	dx1 := do(b, ctx, time.Time{}, x1)
	<-g.started
	x2 := &call{id: 2, key: 'x', hold: make(chan struct{})}
	dx2 := do(b, ctx, time.Time{}, x2)
	queued(t, b, 1)
	y := &call{id: 3, key: 'y', hold: make(chan struct{})}
	dy := do(b, ctx, time.Time{}, y)
	if got := <-g.started; !slices.Equal(ids(got), []int{3}) {
		t.Fatalf("batch %v, want [3]: another key goes at once", ids(got))
	}
	if n, q := b.Load(); n != 2 || q != 1 {
		t.Fatalf("%d in flight, %d queued; want 2, 1", n, q)
	}
	// y's batch returns first: x's call still waits for x's batch.
	close(y.hold)
	if err := <-dy; err != nil {
		t.Fatal(err)
	}
	if n, q := b.Load(); n != 1 || q != 1 || x2.sent.Load() != 0 {
		t.Fatalf("after y returned: %d in flight, %d queued, x2 sent %d times; want 1, 1, 0", n, q, x2.sent.Load())
	}
	close(x1.hold)
	if got := <-g.started; !slices.Equal(ids(got), []int{2}) {
		t.Fatalf("batch %v, want [2] once x's batch returned", ids(got))
	}
	close(x2.hold)
	for _, ch := range []<-chan error{dx1, dx2} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	idle(t, b)
}

// TestGivesUpOnceChosen: a call whose caller stops waiting just as its batch
// is chosen (here its context ends then) is sent all the same, with the other
// calls of its batch, which are answered; its caller gets its context's error
// or, when the answer came first, nil.
func TestGivesUpOnceChosen(t *testing.T) {
	for i := range 200 {
		g := newGate()
		ctx := context.Background()
		cctx, cancel := context.WithCancel(ctx)
		b := groupcommit.New(1, 10, g.run, &cancelRule{cancelOn: 1, cancel: cancel})
		first := do(b, ctx, time.Time{}, &call{id: 0})
		<-g.started
		leader := do(b, cctx, time.Time{}, &call{id: 1})
		queued(t, b, 1)
		other := &call{id: 2}
		dOther := do(b, ctx, time.Time{}, other)
		queued(t, b, 2)
		g.release <- struct{}{}
		if got := <-g.started; !slices.Equal(ids(got), []int{1, 2}) {
			t.Fatalf("round %d: batch %v, want [1 2]", i, ids(got))
		}
		close(g.release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-dOther; err != nil {
			t.Fatal(err)
		}
		if err := <-leader; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: leader: %v", i, err)
		}
		idle(t, b)
	}
}

// cancelRule admits every call and, while admitting the call cancelOn,
// calls cancel.
type cancelRule struct {
	cancelOn int
	cancel   func()
}

func (r *cancelRule) Pass() {}
func (r *cancelRule) Admit(c *call) bool {
	if c.id == r.cancelOn {
		r.cancel()
	}
	return true
}
func (r *cancelRule) Returned(*call) {}

// TestConcurrentCounting: many goroutines send calls of a few keys through a
// batcher with few slots and a small batch, some of them giving up early.
// Counted: every call that returned nil was sent exactly once, none was sent
// twice, no batch exceeded the maximum, never more batches were at the store
// than slots, never one key in two batches at once, and the batcher ends
// idle.
func TestConcurrentCounting(t *testing.T) {
	const (
		slots, maxBatch = 3, 8
		workers, each   = 32, 100
		keys            = 5
	)
	var (
		inFlight, most atomic.Int32
		mu             sync.Mutex
		atStore        = map[int]int{}
		biggest        int
		batches        int
		failed         atomic.Value
	)
	fail := func(format string, a ...any) { failed.CompareAndSwap(nil, fmt.Sprintf(format, a...)) }
	run := func(batch []*call) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n > slots {
			fail("%d batches at once, more than %d slots", n, slots)
		}
		mu.Lock()
		batches++
		biggest = max(biggest, len(batch))
		mine := map[int]bool{}
		for _, c := range batch {
			c.sent.Add(1)
			if !mine[c.key] && atStore[c.key] > 0 {
				fail("key %d in two batches at once", c.key)
			}
			mine[c.key] = true
		}
		for k := range mine {
			atStore[k]++
		}
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		for k := range mine {
			atStore[k]--
		}
		mu.Unlock()
		inFlight.Add(-1)
	}
	b := groupcommit.New(slots, maxBatch, run, admitting{&keyRule{busy: map[int]int{}}})
	type result struct {
		c   *call
		err error
	}
	results := make(chan result, workers*each)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			<-start
			for i := range each {
				c := &call{id: w*each + i, key: rng.IntN(keys)}
				ctx, cancel := context.WithCancel(context.Background())
				var deadline time.Time
				switch rng.IntN(10) {
				case 0:
					cancel() // gives up at once
				case 1:
					deadline = time.Now() // already past when it waits
				}
				err := b.Do(ctx, deadline, c)
				cancel()
				results <- result{c, err}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	var ok, gaveUp int
	for r := range results {
		switch n := r.c.sent.Load(); {
		case n > 1:
			t.Fatalf("call %d sent %d times", r.c.id, n)
		case r.err == nil && n != 1:
			t.Fatalf("call %d answered but sent %d times", r.c.id, n)
		case r.err == nil:
			ok++
		case errors.Is(r.err, context.Canceled) || errors.Is(r.err, groupcommit.ErrDeadline):
			gaveUp++
		default:
			t.Fatalf("call %d: %v", r.c.id, r.err)
		}
	}
	if msg := failed.Load(); msg != nil {
		t.Fatal(msg)
	}
	if biggest > maxBatch {
		t.Fatalf("a batch of %d calls, more than %d", biggest, maxBatch)
	}
	idle(t, b)
	if ok+gaveUp != workers*each || ok < workers*each*3/4 {
		t.Fatalf("%d answered, %d gave up of %d", ok, gaveUp, workers*each)
	}
	t.Logf("%d calls (%d gave up) in %d batches, largest %d, at most %d at once", workers*each, gaveUp, batches, biggest, most.Load())
}
