package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/budgetd/budgetd/internal/groupcommit"
	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
)

// Function calls that arrive while others are at Redis go together in one
// pipeline: one write and one read for many FCALLs, like a group commit. The
// scheduling is internal/groupcommit's: a call that finds fewer than
// maxInflight pipelines at Redis is sent at once by its own goroutine, so an
// idle store adds no latency; otherwise it waits in a queue, and the
// goroutine whose pipeline comes back sends the queue (up to maxBatch calls)
// as the next pipeline (a caller's goroutine hands that to a new goroutine,
// so that its caller has its answer at once). Redis needs
// no rule of its own on which calls may go together: each call is still
// exactly one FCALL, run atomically on its own by Redis; batching only shares
// the round trip, so every answer is the one the call would have got alone,
// and a call's error (a lost connection, a deadline) is its own. A call's
// deadline covers its wait in the queue as well as its pipeline at Redis.
// docs/redis.md has figures.
const (
	maxBatch    = 64
	maxInflight = 2
)

// fcall is one function call on its way through the batcher.
type fcall struct {
	ctx  context.Context // the caller's, for its values; the pipeline's deadline is its own
	fn   string
	ro   bool // FCALL_RO
	keys []string
	args []any
	cmd  *goredis.Cmd // the reply, once sent
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
	gc      *groupcommit.Batcher[*fcall]
	client  rediser
	timeout time.Duration
	// reload loads the library again after a server said a function does
	// not exist (nothing ran for those calls, so they are sent again).
	reload func(ctx context.Context) error
	// waitReplicas > 0: a pipeline with a write ends with WAIT for that
	// many replicas for at most waitTimeout (WithWaitReplicas).
	waitReplicas int
	waitTimeout  time.Duration
}

// newBatcher returns a batcher with at most inflight pipelines at Redis, of
// at most max calls each (the store uses maxInflight and maxBatch).
func newBatcher(c rediser, timeout time.Duration, reload func(context.Context) error, inflight, max int) *batcher {
	b := &batcher{client: c, timeout: timeout, reload: reload}
	b.gc = groupcommit.New(inflight, max, b.send, nil)
	return b
}

// do runs c and returns its reply. The call gets one deadline, timeout from
// now or ctx's if that is sooner, for its wait in the queue and at Redis: a
// call that is still queued then leaves the queue unsent, and a sent one
// fails when its pipeline's reply has not come by the earliest deadline in
// it. When ctx ends or the deadline passes first, do returns that error at
// once (a call already sent may still run: its outcome is unknown).
func (b *batcher) do(ctx context.Context, c *fcall) *goredis.Cmd {
	c.ctx = ctx
	c.deadline = time.Now().Add(b.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	if err := b.gc.Do(ctx, c.deadline, c); err != nil {
		cmd := goredis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return c.cmd
}

// send runs the calls of batch as FCALLs in one pipeline, bounded by the
// earliest deadline among them, then, when a server did not know a function
// (nothing ran for that call), loads the library and sends those calls
// again. It is the batcher's run: one goroutine per pipeline at Redis.
func (b *batcher) send(batch []*fcall) {
	deadline := batch[0].deadline
	for _, c := range batch[1:] {
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(batch[0].ctx), deadline)
	defer cancel()
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

// exec sends the calls of batch, as one pipeline when there are several or
// when their writes are to wait for replicas: WAIT then follows them on
// the same connection, and counts the replicas that have every write sent
// on it so far. A write it did not see reach enough replicas fails with
// ledger.ErrUnavailable, its outcome unknown to the caller (it is on the
// primary, and would be lost if the primary failed now).
func (b *batcher) exec(ctx context.Context, batch []*fcall) {
	writes := b.waitReplicas > 0 && slices.ContainsFunc(batch, func(c *fcall) bool { return !c.ro })
	if len(batch) == 1 && !writes {
		_ = b.client.Process(ctx, noRetry{batch[0].cmd})
		return
	}
	p := b.client.Pipeline()
	for _, c := range batch {
		_ = p.Process(ctx, noRetry{c.cmd})
	}
	var wait *goredis.IntCmd
	if writes {
		wait = goredis.NewIntCmd(ctx, "wait", b.waitReplicas, b.waitTimeout.Milliseconds())
		_ = p.Process(ctx, wait)
	}
	_, _ = p.Exec(ctx) // each command holds its own reply or error
	if !writes {
		return
	}
	n, err := wait.Result()
	if err == nil && n >= int64(b.waitReplicas) {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: the write reached %d of %d replicas within %s", ledger.ErrUnavailable, n, b.waitReplicas, b.waitTimeout)
	}
	for _, c := range batch {
		if !c.ro && c.cmd.Err() == nil {
			c.cmd.SetErr(err)
		}
	}
}
