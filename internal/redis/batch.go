package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// Script calls that arrive while others are at Redis go together in one
// pipeline: one write and one read for many EVALSHAs, like a group commit.
// A call that finds fewer than maxInflight pipelines at Redis is sent at once
// by its own goroutine, so an idle store adds no latency; otherwise it waits
// in a queue, and the goroutine whose pipeline comes back hands the queue
// (up to maxBatch calls) to the first queued call, which sends it as the
// next pipeline. Each call is still exactly one script call, run atomically
// on its own by Redis; batching only shares the round trip, so every answer
// is the one the call would have got alone, and a call's error (a script
// error, a lost connection) is its own. docs/redis.md has figures.
const (
	maxBatch    = 64
	maxInflight = 2
)

// script is a Lua script known by its source and SHA-1 digest.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// scriptCall is one script call on its way through the batcher.
type scriptCall struct {
	sc   *script
	ro   bool // EVALSHA_RO / EVAL_RO
	keys []string
	args []any
	cmd  *goredis.Cmd // the reply, once sent
	// wake receives the batch this call is to send (it leads it), or nil
	// when another goroutine sent the call and cmd holds its reply.
	wake chan []*scriptCall
}

// command builds the call's EVALSHA (or EVAL with the source when full).
func (c *scriptCall) command(ctx context.Context, full bool) *goredis.Cmd {
	name, body := "evalsha", c.sc.sha
	if full {
		name, body = "eval", c.sc.src
	}
	if c.ro {
		name += "_ro"
	}
	a := make([]any, 0, 3+len(c.keys)+len(c.args))
	a = append(a, name, body, len(c.keys))
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

// noRetry marks a script call as never to be sent again once written: the
// cluster client otherwise resends a command after a timeout or a lost
// connection, and a script whose reply was lost may have run.
type noRetry struct{ *goredis.Cmd }

func (noRetry) NoRetry() bool { return true }

// batcher pipelines concurrent script calls; see the comment above.
type batcher struct {
	client   rediser
	max      int // calls per pipeline
	inflight int // pipelines at Redis, at most maxInflight
	limit    int // maxInflight
	mu       sync.Mutex
	queue    []*scriptCall
}

func newBatcher(c rediser) *batcher { return &batcher{client: c, max: maxBatch, limit: maxInflight} }

// do runs c and returns its reply. A cancelled ctx stops the wait only while
// the call is still queued; once sent, the call's outcome is awaited (the
// client's timeouts bound it) and ctx's error reported by the caller.
func (b *batcher) do(ctx context.Context, c *scriptCall) *goredis.Cmd {
	b.mu.Lock()
	if b.inflight < b.limit {
		b.inflight++
		b.mu.Unlock()
		b.lead(ctx, []*scriptCall{c})
		return c.cmd
	}
	c.wake = make(chan []*scriptCall, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	var batch []*scriptCall
	select {
	case batch = <-c.wake:
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			cmd := goredis.NewCmd(ctx)
			cmd.SetErr(ctx.Err())
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
func (b *batcher) lead(ctx context.Context, batch []*scriptCall) {
	b.send(context.WithoutCancel(ctx), batch)
	var next []*scriptCall
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

// send runs the calls of batch as EVALSHAs in one pipeline, then those that
// Redis did not have cached (NOSCRIPT: nothing ran) as EVALs, which also
// load them.
func (b *batcher) send(ctx context.Context, batch []*scriptCall) {
	for _, c := range batch {
		c.cmd = c.command(ctx, false)
	}
	b.exec(ctx, batch)
	var again []*scriptCall
	for _, c := range batch {
		if isNoScript(c.cmd.Err()) {
			c.cmd = c.command(ctx, true)
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		b.exec(ctx, again)
	}
}

func (b *batcher) exec(ctx context.Context, batch []*scriptCall) {
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

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}
