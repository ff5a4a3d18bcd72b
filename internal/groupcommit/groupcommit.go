// Package groupcommit sends concurrent calls to a store in batches, like a
// database's group commit: one round trip for many callers, and none of the
// waiting when the store is idle.
//
// A call that finds a batch slot free (fewer than the batcher's slots batches
// at the store) and that the store's Rule admits is sent at once, as a batch
// of one, by its own goroutine. Otherwise it queues. Whoever's batch returns
// sends the next one: it chooses from the queue, in arrival order, up to the
// most calls a batch may hold that the Rule admits, and sends them, one batch
// after another while any may go; when nothing may go, the slot is given up.
// (A caller's goroutine whose batch of one returned has its answer: it hands
// the sending to a new goroutine rather than make its caller wait.) So the
// next batch starts right after the previous one's callers are woken, with
// no hand-over to a goroutine that has yet to be scheduled.
//
// A call's deadline (and its context) covers its wait in the queue: a call
// whose context ends or whose deadline passes while it is queued leaves the
// queue, is answered with that error and is never sent.
//
// The package knows nothing of what a call is: the store's run function sends
// a batch and answers each call in it (in the call's own fields), and its
// Rule, if any, keeps calls apart that must not be at the store together.
package groupcommit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrDeadline is what Do returns when the deadline it was given passes before
// the call is answered. It wraps context.DeadlineExceeded.
var ErrDeadline = fmt.Errorf("groupcommit: the call's deadline passed before its answer: %w", context.DeadlineExceeded)

// Rule is a store's own condition on which calls may be sent together and
// when. The batcher calls its methods with its lock held: never two at once,
// so they need no locking of their own; they must be quick, must not block
// and must not call the batcher.
//
// Refusing a call is for calls that have to wait for a batch at the store
// (a call of the same key, say): queued calls are looked at again only when
// a batch returns, so a call refused while no batch is at the store waits
// for the next one to return, or until its deadline.
type Rule[T any] interface {
	// Pass begins one choice of calls to send. Admit is then asked about
	// candidates, in arrival order: the one arriving call when it might go
	// at once, or the queued calls when a batch returns, until the batch is
	// full.
	Pass()
	// Admit reports whether c may be sent now, in the batch being chosen.
	// A call it admits is sent in that batch (so the rule may count it as
	// at the store from here on); one it refuses stays where it is and is
	// offered again in a later pass.
	Admit(c T) bool
	// Returned is called for each call of a batch once run has returned
	// for that batch, before the pass that chooses the next batch for its
	// slot.
	Returned(c T)
}

// Batcher sends calls of type T in batches; see the package comment. A
// Batcher is safe for concurrent use; New makes one.
type Batcher[T any] struct {
	slots int
	max   int
	run   func(batch []T)
	rule  Rule[T]

	mu       sync.Mutex
	inFlight int // batches at the store, at most slots
	queue    []*entry[T]
}

// entry is a queued call.
type entry[T any] struct {
	call     T
	ctx      context.Context
	deadline time.Time
	state    state
	done     chan struct{} // closed once run has returned for the call's batch
}

type state uint8

const (
	queued  state = iota
	taken         // in a batch: sent, or about to be
	dropped       // left the queue unsent: its context or deadline ended
)

// New returns a Batcher that has at most slots batches at the store at once,
// each of at most maxBatch calls (both at least 1). run sends a batch and
// answers every call in it; it is called with no lock held, from the
// arriving caller's goroutine for a batch of one sent at once and from a
// goroutine of the batcher's for a batch chosen from the queue, and up to
// slots runs go on at once, each with its own batch. Within a batch the calls
// are in arrival order. rule may be nil: then any call may go whenever a
// slot is free.
func New[T any](slots, maxBatch int, run func(batch []T), rule Rule[T]) *Batcher[T] {
	if slots < 1 || maxBatch < 1 {
		panic("groupcommit: slots and maxBatch must be at least 1")
	}
	return &Batcher[T]{slots: slots, max: maxBatch, run: run, rule: rule}
}

// Do sends c, alone at once or in a batch with other calls, and returns nil
// once run has returned for the batch that held it (so c's answer, which run
// wrote, may be read).
//
// It returns early with ctx.Err() when ctx ends, or ErrDeadline when
// deadline passes (a zero deadline is none), whichever comes first. A call
// still queued then is never sent. A call already sent goes on without its
// caller, and its outcome is unknown: run may still be writing its answer,
// so the caller must not read it. A call is not sent either when its context
// or deadline has ended by the time a returning batch chooses it. The
// deadline does not bound run: run bounds its own work (for a batch of one
// sent at once, nothing but run does).
func (b *Batcher[T]) Do(ctx context.Context, deadline time.Time, c T) error {
	b.mu.Lock()
	if b.inFlight < b.slots && b.admitAlone(c) {
		b.inFlight++
		b.mu.Unlock()
		batch := []T{c}
		b.run(batch)
		b.sendNext(batch, true)
		return nil
	}
	e := &entry[T]{call: c, ctx: ctx, deadline: deadline, done: make(chan struct{})}
	b.queue = append(b.queue, e)
	b.mu.Unlock()

	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = ErrDeadline
	}
	b.mu.Lock()
	st := e.state
	if st == queued {
		i := slices.Index(b.queue, e)
		b.queue = slices.Delete(b.queue, i, i+1)
		e.state = dropped
	}
	b.mu.Unlock()
	if st == taken {
		select {
		case <-e.done: // answered after all
			return nil
		default:
		}
	}
	return err
}

// admitAlone reports whether an arriving call may go at once. b.mu is held.
func (b *Batcher[T]) admitAlone(c T) bool {
	if b.rule == nil {
		return true
	}
	b.rule.Pass()
	return b.rule.Admit(c)
}

// sendNext is called by the holder of a slot with the calls of the batch
// that just returned: it sends the next batches until nothing that may go is
// queued, then gives the slot up. With handOff (the goroutine is a caller's,
// whose answer is in), a new goroutine does the sending.
func (b *Batcher[T]) sendNext(returned []T, handOff bool) {
	for {
		b.mu.Lock()
		if b.rule != nil {
			for _, c := range returned {
				b.rule.Returned(c)
			}
		}
		next := b.take()
		if next == nil {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if handOff {
			go func() { b.sendNext(b.send(next), false) }()
			return
		}
		returned = b.send(next)
	}
}

// send runs batch, then wakes its callers, and returns its calls.
func (b *Batcher[T]) send(batch []*entry[T]) []T {
	calls := make([]T, len(batch))
	for i, e := range batch {
		calls[i] = e.call
	}
	b.run(calls)
	for _, e := range batch {
		close(e.done)
	}
	return calls
}

// take removes from the queue and returns, in arrival order, up to b.max
// calls the rule admits, and drops the calls whose context or deadline has
// ended. b.mu is held.
func (b *Batcher[T]) take() []*entry[T] {
	if len(b.queue) == 0 {
		return nil
	}
	if b.rule != nil {
		b.rule.Pass()
	}
	now := time.Now()
	var batch []*entry[T]
	rest := b.queue[:0]
	for i, e := range b.queue {
		if len(batch) == b.max {
			rest = append(rest, b.queue[i:]...)
			break
		}
		if e.ctx.Err() != nil || !e.deadline.IsZero() && !now.Before(e.deadline) {
			e.state = dropped // its caller returns with its error
			continue
		}
		if b.rule != nil && !b.rule.Admit(e.call) {
			rest = append(rest, e)
			continue
		}
		e.state = taken
		batch = append(batch, e)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	if len(b.queue) == 0 {
		b.queue = nil // let the backing array go
	}
	return batch
}

// Load returns the number of batches at the store and of calls queued, for
// tests and metrics.
func (b *Batcher[T]) Load() (inFlight, queued int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight, len(b.queue)
}
