package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
)

// The helpers below serve a store's own differential tests of its batches:
// the same calls go batched to one bucket of a pair of twins and one at a
// time to the other, and the twins must then have answered, and hold, the
// same.

// TwinStore is the part of a ledger.Store that the twin comparisons read.
type TwinStore interface {
	History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error)
	BucketEvents(ctx context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error)
}

// EntryIDs says whether twins' entry ids are compared: a store that numbers
// entries per bucket gives both twins the same ids (SameIDs); one that
// numbers them across buckets does not (OtherIDs).
type EntryIDs bool

// The two ways a store numbers its entries.
const (
	OtherIDs EntryIDs = false
	SameIDs  EntryIDs = true
)

// Answer is what a Fillup answered, less the buckets' keys and entry ids, as
// text: acceptance, replay, and per item the state and the instant it was
// decided at. Two calls were decided alike when their Answers are equal.
func Answer(o ledger.FillupOutcome) string {
	return answer(o, false)
}

// AnswerWithEntries is Answer with, per item, the entry id and the name,
// capacity, kind and mode of the limit it was decided under: for stores
// that number entries per bucket (SameIDs).
func AnswerWithEntries(o ledger.FillupOutcome) string {
	return answer(o, true)
}

func answer(o ledger.FillupOutcome, entries bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "accepted=%v replayed=%v", o.Accepted, o.Replayed)
	for _, it := range o.Items {
		st, l := it.Snapshot.State, it.Snapshot.Limit
		if entries {
			fmt.Fprintf(&b, " entry=%q", it.EntryID)
		}
		fmt.Fprintf(&b, " level=%s updated=%d now=%d holds=[", st.Level, st.Updated.UnixMicro(), it.Snapshot.Now.UnixMicro())
		for _, h := range st.Holds {
			fmt.Fprintf(&b, "%s@%d ", h.Amount, h.ExpiresAt.UnixMicro())
		}
		b.WriteString("] slots=[")
		for _, sl := range st.Slots {
			fmt.Fprintf(&b, "%s@%d ", sl.Sum, sl.Index)
		}
		b.WriteString("]")
		if entries {
			fmt.Fprintf(&b, " limit=%s cap=%s kind=%s mode=%s", l.Name, l.Capacity, l.Kind(), l.Mode)
		}
	}
	return b.String()
}

// Scoped returns a copy of idems with every Idempotency-Key in scope, so
// that the batched twin's keys and the other's do not meet.
func Scoped(idems []ledger.Idempotency, scope string) []ledger.Idempotency {
	out := make([]ledger.Idempotency, len(idems))
	for i, id := range idems {
		if id.Key != "" {
			id.Scope = scope
		}
		out[i] = id
	}
	return out
}

// SameRefusal reports whether a batched call and the same call made alone
// failed alike: neither, or both for a missing limit, or both for a reused
// Idempotency-Key.
func SameRefusal(batched, alone error) bool {
	if batched == nil || alone == nil {
		return batched == nil && alone == nil
	}
	for _, want := range []error{ledger.ErrLimitNotFound, ledger.ErrIdempotencyKeyReused} {
		if errors.Is(alone, want) && errors.Is(batched, want) {
			return true
		}
	}
	return false
}

// SameHistory fails t unless the first page (ledger.MaxPage entries) of the
// histories of seq (one by one) and bat (batched) is the same: per entry
// its event, amount, time, shadow denial, meta and whether it names a
// reservation, and its id with SameIDs. It returns how many entries there
// are.
func SameHistory(t testing.TB, s TwinStore, seq, bat ledger.BucketRef, ids EntryIDs) int {
	t.Helper()
	ctx := context.Background()
	hs, _, err := s.History(ctx, seq, "", ledger.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	hb, _, err := s.History(ctx, bat, "", ledger.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(hb) {
		t.Fatalf("%v history: %d entries one by one, %d batched", bat, len(hs), len(hb))
	}
	show := func(e ledger.Entry) string {
		line := fmt.Sprintf("%s %s %d %v %s %v", e.Event, e.Amount, e.Time.UnixMicro(), e.ShadowDenied, e.Meta, e.ReservationID != "")
		if ids {
			line = e.ID + " " + line
		}
		return line
	}
	for i := range hs {
		if a, c := show(hs[i]), show(hb[i]); a != c {
			t.Fatalf("%v history entry %d: one by one %s, batched %s", bat, i, a, c)
		}
	}
	return len(hs)
}

// SameEvents fails t unless the threshold events of the buckets seq (one
// by one) and bat (batched) are the same, and returns how many there are.
func SameEvents(t testing.TB, s TwinStore, seq, bat ledger.BucketRef) int {
	t.Helper()
	ctx := context.Background()
	es, err := s.BucketEvents(ctx, seq, ledger.MaxBucketEvents)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := s.BucketEvents(ctx, bat, ledger.MaxBucketEvents)
	if err != nil {
		t.Fatal(err)
	}
	show := func(es []ledger.OutboxEvent) string {
		var b strings.Builder
		for _, e := range es {
			fmt.Fprintf(&b, "\n  %s %s at %d used %s of %s period %d", e.Type, e.Threshold, e.Time.UnixMicro(), e.Used, e.Capacity, e.PeriodStart.UnixMicro())
		}
		return b.String()
	}
	if a, b := show(es), show(eb); a != b {
		t.Fatalf("%v events:\none by one:%s\nbatched:%s", bat, a, b)
	}
	return len(es)
}
