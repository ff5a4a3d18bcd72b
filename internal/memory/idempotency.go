package memory

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

type idemKey struct{ scope, key string }

// idemRecord is one Idempotency-Key: in flight until done is closed, then
// holding the outcome of the first request (or nothing, when it failed).
type idemRecord struct {
	hash    string
	done    chan struct{}
	outcome any
	ok      bool
	stored  time.Time
	elem    *list.Element
	limits  []string // the limits the outcome touched (DeleteLimit forgets it)
}

// idemTable keeps records for ledger.IdempotencyTTL, oldest first in order so
// that expiry costs O(1) per record.
type idemTable struct {
	mu      sync.Mutex
	records map[idemKey]*idemRecord
	order   list.List // of idemKey, oldest first
}

// replay runs op at most once per Idempotency-Key: a repeat with the same
// hash gets the stored outcome (marked by mark), one with another hash gets
// ledger.ErrIdempotencyKeyReused, and one that arrives while the first runs
// waits for it. Failed operations are not stored.
func replay[T any](s *Store, ctx context.Context, idem ledger.Idempotency, mark func(*T), op func() (T, error)) (T, error) {
	if idem.Key == "" {
		return op()
	}
	t := &s.idem
	k := idemKey{idem.Scope, idem.Key}
	deadline := time.NewTimer(inFlightWait)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		t.expire(s.clock())
		rec := t.records[k]
		if rec == nil {
			rec = &idemRecord{hash: idem.Hash, done: make(chan struct{})}
			t.records[k] = rec
			t.mu.Unlock()
			out, err := op()
			t.mu.Lock()
			if err != nil {
				delete(t.records, k)
			} else {
				rec.outcome, rec.ok, rec.stored = out, true, s.clock()
				rec.limits = limitsOf(out)
				rec.elem = t.order.PushBack(k)
			}
			close(rec.done)
			t.mu.Unlock()
			return out, err
		}
		t.mu.Unlock()
		if rec.hash != idem.Hash {
			var zero T
			return zero, fmt.Errorf("key %q: %w", idem.Key, ledger.ErrIdempotencyKeyReused)
		}
		select {
		case <-rec.done:
			if rec.ok {
				out := rec.outcome.(T)
				mark(&out)
				return out, nil
			}
			// The first attempt failed and was forgotten: try again.
		case <-deadline.C:
			var zero T
			return zero, ledger.ErrIdempotencyInFlight
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// expire drops records older than the TTL; the caller holds t.mu.
func (t *idemTable) expire(now time.Time) {
	for e := t.order.Front(); e != nil; e = t.order.Front() {
		k := e.Value.(idemKey)
		rec := t.records[k]
		if rec != nil && now.Sub(rec.stored) < ledger.IdempotencyTTL {
			return
		}
		t.order.Remove(e)
		if rec != nil && rec.elem == e {
			delete(t.records, k)
		}
	}
}

// limitsOf names the limits an outcome touched.
func limitsOf(out any) []string {
	switch o := out.(type) {
	case ledger.FillupOutcome:
		names := make([]string, len(o.Items))
		for i, it := range o.Items {
			names[i] = it.Snapshot.Limit.Name
		}
		return names
	case ledger.DrainOutcome:
		return []string{o.Snapshot.Limit.Name}
	case ledger.ReserveOutcome:
		return []string{o.Snapshot.Limit.Name}
	case ledger.ResolveOutcome:
		return []string{o.Snapshot.Limit.Name}
	}
	return nil
}

// forget drops the finished records whose outcome touched the limit name, so
// that a limit deleted and created again starts without them, as it does on
// the database stores.
func (t *idemTable) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, rec := range t.records {
		if rec.ok && slices.Contains(rec.limits, name) {
			delete(t.records, k) // its element in t.order goes at expiry
		}
	}
}
