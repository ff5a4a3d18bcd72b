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
	size    int64    // what the record is counted as in idemTable.bytes
	caller  string   // who stored it (ledger.Idempotency.Caller)
}

// callerUse is what one caller's records take of the table.
type callerUse struct {
	records int
	bytes   int64
}

// Default bounds of the idempotency records (WithIdempotencyLimits). One
// caller may keep at most half of them (WithIdempotencyCallerLimits).
const (
	DefaultIdempotencyRecords = 1_000_000
	DefaultIdempotencyBytes   = 256 << 20
)

// The estimated heap cost of a record, measured with BenchmarkMemoryPerRecord
// (about 670 B for a one-item Fillup with 90 bytes of scope, key and hash;
// about 1,030 B with a 255-byte key):
// a fixed part, the bytes of its strings, and a part per further item and per
// hold of the stored outcome.
const (
	idemRecordCost = 700
	idemItemCost   = 320
	idemHoldCost   = 96
)

// idemTable keeps records for ledger.IdempotencyTTL, oldest first in order so
// that expiry costs O(1) per record. It holds at most maxRecords records of
// at most maxBytes estimated bytes, in flight ones included; a new key that
// does not fit is refused with ledger.ErrIdempotencyFull until old records
// expire. Records are never dropped early: that could charge a retry twice.
//
// One caller (ledger.Idempotency.Caller: an API key, or a client address
// with authentication off) keeps at most maxCallerRecords records of at most
// maxCallerBytes: a caller that sends fresh keys without end is refused
// alone, and the rest of the table stays for the others.
type idemTable struct {
	mu               sync.Mutex
	records          map[idemKey]*idemRecord
	order            list.List // of idemKey, oldest first
	bytes            int64     // sum of the records' sizes
	callers          map[string]*callerUse
	maxRecords       int
	maxBytes         int64
	maxCallerRecords int
	maxCallerBytes   int64
	refused          int64 // new keys refused because the table or the caller's share was full
}

// add counts rec, of size more bytes, to its caller.
func (t *idemTable) add(rec *idemRecord, records int, more int64) {
	u := t.callers[rec.caller]
	if u == nil {
		u = &callerUse{}
		t.callers[rec.caller] = u
	}
	u.records += records
	u.bytes += more
	t.bytes += more
}

// drop removes rec from the table's and its caller's counts (not from the
// map or the order).
func (t *idemTable) drop(rec *idemRecord) {
	t.bytes -= rec.size
	if u := t.callers[rec.caller]; u != nil {
		u.records--
		u.bytes -= rec.size
		if u.records <= 0 {
			delete(t.callers, rec.caller)
		}
	}
}

// full reports why a new record of size bytes for caller does not fit, or
// "" when it does. The caller holds t.mu.
func (t *idemTable) full(caller string, size int64) string {
	if len(t.records) >= t.maxRecords || t.bytes+size > t.maxBytes {
		return fmt.Sprintf("%d records of about %d bytes kept for %s", len(t.records), t.bytes, ledger.IdempotencyTTL)
	}
	if u := t.callers[caller]; u != nil && (u.records >= t.maxCallerRecords || u.bytes+size > t.maxCallerBytes) {
		return fmt.Sprintf("this caller keeps %d records of about %d bytes for %s, its share of the store", u.records, u.bytes, ledger.IdempotencyTTL)
	}
	return ""
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
			size := idemRecordCost + int64(len(idem.Scope)+len(idem.Key)+len(idem.Hash))
			if why := t.full(idem.Caller, size); why != "" {
				t.refused++
				t.mu.Unlock()
				var zero T
				return zero, fmt.Errorf("%s: %w", why, ledger.ErrIdempotencyFull)
			}
			rec = &idemRecord{hash: idem.Hash, done: make(chan struct{}), size: size, caller: idem.Caller}
			t.records[k] = rec
			t.add(rec, 1, size)
			t.mu.Unlock()
			out, err := op()
			t.mu.Lock()
			if err != nil {
				delete(t.records, k)
				t.drop(rec)
			} else {
				rec.outcome, rec.ok, rec.stored = out, true, s.clock()
				rec.limits = limitsOf(out)
				rec.elem = t.order.PushBack(k)
				more := outcomeCost(out)
				rec.size += more
				t.add(rec, 0, more)
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
			t.drop(rec)
		}
	}
}

// outcomeCost is the estimated cost of a stored outcome beyond a one-item,
// hold-free one (idemRecordCost).
func outcomeCost(out any) int64 {
	var items, holds int
	switch o := out.(type) {
	case ledger.FillupOutcome:
		items = len(o.Items)
		for _, it := range o.Items {
			holds += len(it.Snapshot.State.Holds)
		}
	case ledger.DrainOutcome:
		items, holds = 1, len(o.Snapshot.State.Holds)
	case ledger.ReserveOutcome:
		items, holds = 1, len(o.Snapshot.State.Holds)
	case ledger.ResolveOutcome:
		items, holds = 1, len(o.Snapshot.State.Holds)
	case ledger.GrantOutcome:
		items, holds = 1, len(o.Snapshot.State.Holds)
	}
	return int64(max(items-1, 0)*idemItemCost + holds*idemHoldCost)
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
	case ledger.GrantOutcome:
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
			delete(t.records, k)
			t.order.Remove(rec.elem)
			t.drop(rec)
		}
	}
}
