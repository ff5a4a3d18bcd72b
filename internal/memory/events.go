package memory

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// DefaultEventRetention is how long the store keeps an event.
const DefaultEventRetention = ledger.EventRetention

// WithEventRetention sets how long events are kept (DefaultEventRetention).
func WithEventRetention(d time.Duration) Option { return func(s *Store) { s.events.retention = d } }

// eventLog is the store's outbox: every event in the order it was
// emitted, each with the next sequence number as its id. An event is
// appended under the lock of its bucket's shard, so the events of one
// bucket are in the order of its writes.
type eventLog struct {
	mu        sync.Mutex
	seq       int64
	items     []ledger.OutboxEvent
	first     int64 // sequence number of items[0]
	retention time.Duration
}

// add appends es, dropping what is older than the retention.
func (e *eventLog) add(es []ledger.OutboxEvent, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.items) == 0 {
		e.first = e.seq + 1
	}
	for i := range es {
		e.seq++
		es[i].ID = strconv.FormatInt(e.seq, 10)
		e.items = append(e.items, es[i])
	}
	drop := 0
	for drop < len(e.items) && now.Sub(e.items[drop].Time) > e.retention {
		drop++
	}
	if drop > 0 {
		e.items = append(e.items[:0:0], e.items[drop:]...)
		e.first += int64(drop)
	}
}

// Events lists events after cursor (a sequence number).
func (s *Store) Events(_ context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	var after int64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseInt(cursor, 10, 64); err != nil || after < 0 {
			return nil, "", &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "after", Reason: "is not a cursor this store gave"}
		}
	}
	e := &s.events
	e.mu.Lock()
	defer e.mu.Unlock()
	i := max(after-e.first+1, 0)
	if i >= int64(len(e.items)) {
		return nil, cursor, nil
	}
	out := append([]ledger.OutboxEvent(nil), e.items[i:min(i+int64(n), int64(len(e.items)))]...)
	return out, out[len(out)-1].ID, nil
}

// notice runs the threshold rule for a write that took the bucket b of ref
// from state before to its state now, keeping the bucket's marks and
// emitting the events. The caller holds the bucket's shard lock.
func (s *Store) notice(l ledger.Limit, ref ledger.BucketRef, b *bucketRec, before bucket.State, now time.Time) {
	marks := b.marks()
	if len(l.Thresholds) == 0 && marks == (ledger.Marks{}) {
		return
	}
	rule := l.Rule()
	pre := bucket.CanAccept(rule, before, now, bucket.Amount{})
	post := bucket.CanAccept(rule, b.state(), now, bucket.Amount{})
	used := post.Level.Add(post.Held)
	marks, cs := l.WatchAt(l.Capacity).Cross(marks, pre.Level.Add(pre.Held), used, post.PeriodStart)
	b.setMarks(marks)
	if len(cs) > 0 {
		s.events.add(ledger.NewEvents(l, ref, cs, now, used.Decimal(), l.Capacity, post.PeriodStart), now)
	}
}

// BucketEvents lists the bucket's events kept, newest first, by a scan of
// the outbox from its end (the memory store keeps no index by bucket; the
// outbox holds only the crossings of the retention).
func (s *Store) BucketEvents(_ context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error) {
	e := &s.events
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ledger.OutboxEvent
	for i := len(e.items) - 1; i >= 0 && len(out) < n; i-- {
		if e.items[i].Bucket == ref {
			out = append(out, e.items[i])
		}
	}
	return out, nil
}
