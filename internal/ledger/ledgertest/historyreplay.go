package ledgertest

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// testHistoryReplay fires many concurrent Fillups at one fast-leaking bucket
// with the store's own clock running (the clock set free), then reads its
// whole history as an auditor would: the entries in id order must carry
// non-decreasing times (so the listing, by time, is the order the store
// applied them in), and replaying them with the pure rule at their recorded
// times must accept every one of them, never taking the level above
// capacity. A store that reads its clock before taking the bucket's lock
// fails: a call that read the clock first but got the lock second records
// an earlier time after a later one.
func testHistoryReplay(t *testing.T, e *env) {
	e.limit("replay", "10", "1", 100*time.Microsecond, true)
	r := ref("replay", "k")
	e.clock.Free()
	const workers, calls = 200, 25
	var accepted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			<-start
			for range calls {
				res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("1")}}, ledger.Idempotency{})
				if err != nil {
					errs <- err
					return
				}
				if res.Accepted {
					accepted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("fillup: %v", err)
	}

	var listed []ledger.Entry // newest first, as History lists
	cursor := ""
	for {
		page, next, err := e.svc.History(e.ctx, r, cursor, ledger.MaxPage)
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		listed = append(listed, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if int64(len(listed)) != accepted.Load() {
		t.Fatalf("%d history entries for %d accepted Fillups", len(listed), accepted.Load())
	}
	slices.Reverse(listed) // oldest first
	byID := slices.Clone(listed)
	slices.SortStableFunc(byID, func(a, b ledger.Entry) int { return compareIDs(a.ID, b.ID) })
	backwards := 0
	for i := 1; i < len(byID); i++ {
		if byID[i].Time.Before(byID[i-1].Time) {
			if backwards == 0 {
				t.Errorf("entry %s at %s comes after entry %s at %s: time runs backwards in id order",
					byID[i].ID, byID[i].Time.Format(time.RFC3339Nano), byID[i-1].ID, byID[i-1].Time.Format(time.RFC3339Nano))
			}
			backwards++
		}
	}
	if backwards > 0 {
		t.Errorf("%d of %d entries carry an earlier time than the entry before them in id order", backwards, len(byID))
	}

	l, err := e.svc.GetLimit(e.ctx, "replay")
	if err != nil {
		t.Fatal(err)
	}
	rule := l.Rule()
	var st bucket.State
	for i, en := range listed {
		if en.Event != ledger.EventFillup {
			t.Fatalf("entry %d: event %s", i, en.Event)
		}
		d, next := bucket.Fillup(rule, st, en.Time, ledger.Amount(en.Amount))
		if !d.Accepted {
			t.Fatalf("replaying the history in its own times: entry %s (%s at %s) takes the level from %s to %s, above the capacity %s",
				en.ID, en.Amount, en.Time.Format(time.RFC3339Nano), bucket.LevelAt(rule, st, en.Time), bucket.LevelAt(rule, st, en.Time).Add(ledger.Amount(en.Amount)), rule.Capacity)
		}
		st = next
	}
}

// compareIDs orders history ids: numerically when both are numbers (every
// store's ids are), else by bytes.
func compareIDs(a, b string) int {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA != nil || errB != nil {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
