package redis

import (
	"context"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Function calls that arrive while others are at Redis go together in one
// pipeline: one write and one read for many FCALLs, like a group commit.
// A call that finds fewer than maxInflight pipelines at Redis is sent at once
// by its own goroutine, so an idle store adds no latency; otherwise it waits
// in a queue, and the goroutine whose pipeline comes back hands the queue
// (up to maxBatch calls) to the first queued call, which sends it as the
// next pipeline. Each call is still exactly one FCALL, run atomically on its
// own by Redis; batching only shares the round trip, so every answer is the
// one the call would have got alone, and a call's error (a lost connection,
// a deadline) is its own. A call's deadline covers its wait in the queue as
// well as its pipeline at Redis. docs/redis.md has figures.
const (
	maxBatch    = 64
	maxInflight = 2
)

// fcall is one function call on its way through the batcher.
type fcall struct {
	fn   string
	ro   bool // FCALL_RO
	keys []string
	args []any
	cmd  *goredis.Cmd // the reply, once sent
	// wake receives the batch this call is to send (it leads it), or nil
	// when another goroutine sent the call and cmd holds its reply.
	wake chan []*fcall
	// deadline bounds the call's wait in the queue and at Redis.
	deadline time.Time
}

// command builds the call's FCALL (FCALL_RO).
func (c *fcall) command(ctx context.Context) *goredis.Cmd {
	name := "fcall"
	if c.ro {
		name = "fcall_ro"
	}
	a := make([]any, 0, 3+len(c.keys)+len(c.args))
	a = append(a, name, c.fn, len(c.keys))
	for _, k := range c.keys {
		a = append(a, k)
	}
	a = append(a, c.args...)
	cmd := goredis.NewCmd(ctx, a...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// noRetry marks a function call as never to be sent again once written: the
// cluster client otherwise resends a command after a timeout or a lost
// connection, and a call whose reply was lost may have run.
type noRetry struct{ *goredis.Cmd }

func (noRetry) NoRetry() bool { return true }

// batcher pipelines concurrent function calls; see the comment above.
type batcher struct {
	client   rediser
	max      int // calls per pipeline
	inflight int // pipelines at Redis, at most maxInflight
	limit    int // maxInflight
	timeout  time.Duration
	// reload loads the library again after a server said a function does
	// not exist (nothing ran for those calls, so they are sent again).
	reload func(ctx context.Context) error
	mu     sync.Mutex
	queue  []*fcall
}

func newBatcher(c rediser, timeout time.Duration, reload func(context.Context) error) *batcher {
	return &batcher{client: c, max: maxBatch, limit: maxInflight, timeout: timeout, reload: reload}
}

// do runs c and returns its reply. The call gets one deadline, timeout from
// now or ctx's if that is sooner, for its wait in the queue and at Redis: a
// call that is still queued then leaves the queue unsent, and a sent one
// fails when its pipeline's reply has not come by the earliest deadline in
// it. A cancelled ctx stops the wait only while the call is still queued;
// once sent, the call's outcome is awaited (the deadline bounds it) and
// ctx's error reported by the caller.
func (b *batcher) do(ctx context.Context, c *fcall) *goredis.Cmd {
	c.deadline = time.Now().Add(b.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	b.mu.Lock()
	if b.inflight < b.limit {
		b.inflight++
		b.mu.Unlock()
		b.lead(ctx, []*fcall{c})
		return c.cmd
	}
	c.wake = make(chan []*fcall, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	timer := time.NewTimer(time.Until(c.deadline))
	defer timer.Stop()
	var batch []*fcall
	var gone error
	select {
	case batch = <-c.wake:
	case <-ctx.Done():
		gone = ctx.Err()
	case <-timer.C:
		gone = context.DeadlineExceeded
	}
	if gone != nil {
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			cmd := goredis.NewCmd(ctx)
			cmd.SetErr(gone)
			return cmd
		}
		b.mu.Unlock()
		batch = <-c.wake // taken already: it is being sent
	}
	if batch != nil {
		b.lead(ctx, batch)
	}
	return c.cmd
}

// lead sends batch (one in-flight turn), then passes the turn on to the
// queued calls, if any, and wakes the calls of batch.
func (b *batcher) lead(ctx context.Context, batch []*fcall) {
	deadline := batch[0].deadline
	for _, c := range batch[1:] {
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	b.send(sctx, batch)
	cancel()
	var next []*fcall
	b.mu.Lock()
	switch n := len(b.queue); {
	case n == 0:
		b.inflight--
	case n <= b.max:
		next, b.queue = b.queue, nil
	default:
		next, b.queue = b.queue[:b.max:b.max], b.queue[b.max:]
	}
	b.mu.Unlock()
	if next != nil {
		next[0].wake <- next
	}
	for _, c := range batch {
		if c.wake != nil && c != batch[0] {
			c.wake <- nil
		}
	}
}

// send runs the calls of batch as FCALLs in one pipeline, then, when a
// server did not know a function (nothing ran for that call), loads the
// library and sends those calls again.
func (b *batcher) send(ctx context.Context, batch []*fcall) {
	for _, c := range batch {
		c.cmd = c.command(ctx)
	}
	b.exec(ctx, batch)
	var again []*fcall
	for _, c := range batch {
		if goredis.HasErrorPrefix(c.cmd.Err(), "Function not found") {
			c.cmd = c.command(ctx)
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		if err := b.reload(ctx); err != nil {
			for _, c := range again {
				c.cmd.SetErr(err)
			}
			return
		}
		b.exec(ctx, again)
	}
}

func (b *batcher) exec(ctx context.Context, batch []*fcall) {
	if len(batch) == 1 {
		_ = b.client.Process(ctx, noRetry{batch[0].cmd})
		return
	}
	p := b.client.Pipeline()
	for _, c := range batch {
		_ = p.Process(ctx, noRetry{c.cmd})
	}
	_, _ = p.Exec(ctx) // each command holds its own reply or error
}
