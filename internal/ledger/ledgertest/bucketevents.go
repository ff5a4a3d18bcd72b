package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// testBucketEvents: a bucket's most recent events are its own, newest
// first, as Events lists them (same ids), at most n; a bucket with none has
// none; an unknown limit is ErrLimitNotFound and a bad n is invalid. A
// store that keeps no events lists none; one that keeps them but cannot
// list a bucket's answers ErrNotServed.
func testBucketEvents(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 7, 30, 10, 0, 0, 0, time.UTC))
	if _, err := e.svc.BucketEvents(e.ctx, ref("nope", "a"), 5); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("BucketEvents of an unknown limit: %v, want ErrLimitNotFound", err)
	}
	es, ok := ledger.EventsOf(e.store)
	if !ok {
		e.limit("spend", "100", "1", time.Hour, false)
		if evs, err := e.svc.BucketEvents(e.ctx, ref("spend", "a"), 5); err != nil || len(evs) != 0 {
			t.Fatalf("BucketEvents on a store without events: %v %v, want none", evs, err)
		}
		return
	}
	if _, err := e.svc.PutLimit(e.ctx, "spend", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: 1000 * time.Hour, Thresholds: thresholds(t, "50%", "80%")}); err != nil {
		t.Fatal(err)
	}
	a, b := ref("spend", "a"), ref("spend", "b")
	if _, ok := es.(ledger.BucketEventStore); !ok {
		if _, err := e.svc.BucketEvents(e.ctx, a, 5); !errors.Is(err, ledger.ErrNotServed) {
			t.Fatalf("BucketEvents on a store that cannot list a bucket's events: %v, want ErrNotServed", err)
		}
		return
	}
	for _, n := range []int{0, -1, ledger.MaxBucketEvents + 1} {
		var inv *ledger.InvalidError
		if _, err := e.svc.BucketEvents(e.ctx, a, n); !errors.As(err, &inv) || inv.Field != "limit" {
			t.Fatalf("BucketEvents(n=%d): %v, want invalid naming limit", n, err)
		}
	}
	e.fillup(a, "60")                                                                      // a crosses 50%
	e.fillup(b, "85")                                                                      // b crosses 50% and 80%
	if _, err := e.svc.Drain(e.ctx, a, dec("20"), ledger.Idempotency{}, nil); err != nil { // a recovers from 50%
		t.Fatal(err)
	}
	e.fillup(a, "50") // a crosses 50% and 80%

	all, _ := e.eventsAfter("", 100)
	var wantA []ledger.OutboxEvent
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Bucket == a {
			wantA = append(wantA, all[i])
		}
	}
	got, err := e.svc.BucketEvents(e.ctx, a, 10)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, ev := range got {
		texts = append(texts, eventText(ev))
	}
	want := []string{"crossed a 80% used=90 cap=100", "crossed a 50% used=90 cap=100", "recovered a 50% used=40 cap=100", "crossed a 50% used=60 cap=100"}
	if len(texts) != len(want) {
		t.Fatalf("BucketEvents(a) = %q, want %q", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] || got[i].ID != wantA[i].ID || !got[i].Time.Equal(wantA[i].Time) {
			t.Fatalf("BucketEvents(a)[%d] = %q id %s, want %q id %s (as Events lists it)", i, texts[i], got[i].ID, want[i], wantA[i].ID)
		}
	}
	if got, err := e.svc.BucketEvents(e.ctx, a, 2); err != nil || len(got) != 2 || got[0].ID != wantA[0].ID || got[1].ID != wantA[1].ID {
		t.Fatalf("BucketEvents(a, 2) = %+v %v, want the newest two", got, err)
	}
	if got, err := e.svc.BucketEvents(e.ctx, b, 10); err != nil || len(got) != 2 || eventText(got[0]) != "crossed b 80% used=85 cap=100" {
		t.Fatalf("BucketEvents(b) = %+v %v", got, err)
	}
	if got, err := e.svc.BucketEvents(e.ctx, ref("spend", "c"), 10); err != nil || len(got) != 0 {
		t.Fatalf("BucketEvents of a bucket never written = %+v %v, want none", got, err)
	}
}
