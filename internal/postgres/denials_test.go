package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// rawBucket is a bucket's row and its holds' rows exactly as stored, as
// JSON text; the row is "" when the bucket has none.
func rawBucket(t *testing.T, s *postgres.Store, ref ledger.BucketRef) (row, holds string) {
	t.Helper()
	ctx := context.Background()
	err := s.Pool().QueryRow(ctx, `SELECT to_jsonb(b)::text FROM buckets b JOIN limits l ON l.id = b.limit_id
		WHERE l.name = $1 AND b.key = $2`, ref.Limit, ref.Key).Scan(&row)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("reading the row of %v: %v", ref, err)
	}
	err = s.Pool().QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(h) ORDER BY h.id), '[]')::text
		FROM holds h JOIN limits l ON l.id = h.limit_id WHERE l.name = $1 AND h.key = $2`, ref.Limit, ref.Key).Scan(&holds)
	if err != nil {
		t.Fatalf("reading the holds of %v: %v", ref, err)
	}
	return row, holds
}

// entryEvents maps the ids of a bucket's history entries to "event amount
// meta".
func entryEvents(t *testing.T, s *postgres.Store, ref ledger.BucketRef) map[string]string {
	t.Helper()
	out := map[string]string{}
	for cursor := ""; ; {
		page, next, err := s.History(context.Background(), ref, cursor, ledger.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if _, dup := out[e.ID]; dup {
				t.Fatalf("history of %v lists entry %s twice", ref, e.ID)
			}
			out[e.ID] = fmt.Sprintf("%s %s %s", e.Event, e.Amount, e.Meta.JSON())
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

// TestRecordedDenialLeavesRow: a denial recorded by each path of the
// functions (a single Fillup through budgetd_fillup_batch, the all-or-none
// path, a multi-bucket item, a Reserve) writes its denied entry and leaves
// the bucket's row and holds exactly as stored, byte for byte; a bucket
// never written keeps no row at all. Leaky, periodic and window limits, at
// both isolation levels.
func TestRecordedDenialLeavesRow(t *testing.T) {
	kinds := []struct {
		name  string
		limit ledger.Limit
	}{
		{"leak", ledger.Limit{Name: "d", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true, RecordDenials: true}},
		{"period", ledger.Limit{Name: "d", Capacity: dec("10"), Period: &ledger.Period{Every: "month", TZ: "Europe/Paris"},
			History: true, RecordDenials: true}},
		{"window", ledger.Limit{Name: "d", Capacity: dec("10"), Window: &ledger.Window{Length: time.Hour, Precision: time.Minute},
			History: true, RecordDenials: true}},
	}
	for _, kind := range kinds {
		for _, iso := range []string{"read-committed", "serializable"} {
			t.Run(kind.name+"/"+iso, func(t *testing.T) { testRecordedDenialLeavesRow(t, iso, kind.limit) })
		}
	}
}

func testRecordedDenialLeavesRow(t *testing.T, iso string, limit ledger.Limit) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now))
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, limit); err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLimit(ctx, limit.Name); err != nil || !l.RecordDenials {
		t.Fatalf("GetLimit: %+v %v", l, err)
	}
	full := ledger.BucketRef{Limit: "d", Key: "full"}
	if out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: full, Cost: dec("6")}}, ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("fillup: %+v %v", out, err)
	}
	if out, err := s.Reserve(ctx, full, dec("4"), time.Hour, ledger.Idempotency{}, nil); err != nil || !out.Accepted {
		t.Fatalf("reserve: %+v %v", out, err)
	}
	fits := ledger.BucketRef{Limit: "d", Key: "fits"}
	meta := ledger.Meta{"why": "test"}
	denials := []struct {
		name string
		fn   func(ref ledger.BucketRef) (string, error)
	}{
		{"single fillup", func(ref ledger.BucketRef) (string, error) {
			out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("11"), Meta: meta}}, ledger.Idempotency{})
			if err != nil || out.Accepted {
				return "", fmt.Errorf("%+v %v", out, err)
			}
			return out.Items[0].EntryID, nil
		}},
		{"all-or-none fillup", func(ref ledger.BucketRef) (string, error) {
			out, err := s.FillupAllOrNone(ctx, ledger.Charge{Bucket: ref, Cost: dec("11"), Meta: meta}, ledger.Idempotency{})
			if err != nil || out.Accepted {
				return "", fmt.Errorf("%+v %v", out, err)
			}
			return out.Items[0].EntryID, nil
		}},
		{"multi-bucket item", func(ref ledger.BucketRef) (string, error) {
			out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: fits, Cost: dec("1"), Meta: meta}, {Bucket: ref, Cost: dec("11"), Meta: meta}}, ledger.Idempotency{})
			if err != nil || out.Accepted || out.Items[0].EntryID != "" {
				return "", fmt.Errorf("%+v %v", out, err)
			}
			return out.Items[1].EntryID, nil
		}},
		{"reserve", func(ref ledger.BucketRef) (string, error) {
			out, err := s.Reserve(ctx, ref, dec("11"), time.Hour, ledger.Idempotency{}, meta)
			if err != nil || out.Accepted {
				return "", fmt.Errorf("%+v %v", out, err)
			}
			return out.EntryID, nil
		}},
	}
	for _, ref := range []ledger.BucketRef{full, {Limit: "d", Key: "never"}} {
		for _, d := range denials {
			clock.Advance(time.Second)
			row, holds := rawBucket(t, s, ref)
			id, err := d.fn(ref)
			if err != nil {
				t.Fatalf("%s on %s: want a denial: %v", d.name, ref.Key, err)
			}
			if id == "" {
				t.Fatalf("%s on %s: no entry id", d.name, ref.Key)
			}
			if r, h := rawBucket(t, s, ref); r != row || h != holds {
				t.Fatalf("%s on %s changed the bucket:\n row %s\n was %s\n holds %s\n were %s", d.name, ref.Key, r, row, h, holds)
			}
			if got, want := entryEvents(t, s, ref)[id], `denied 11 {"why":"test"}`; got != want {
				t.Fatalf("%s on %s: entry %s is %q, want %q", d.name, ref.Key, id, got, want)
			}
		}
		if ref.Key == "never" {
			snap, err := s.Inspect(ctx, ref)
			if row, _ := rawBucket(t, s, ref); err != nil || row != "" || !snap.State.Updated.IsZero() {
				t.Fatalf("the bucket never written: row %q, inspected %+v %v", row, snap.State, err)
			}
		}
	}
	if row, _ := rawBucket(t, s, fits); row != "" || len(entryEvents(t, s, fits)) != 0 {
		t.Fatalf("the multi-bucket item that fit wrote row %q or an entry", row)
	}
}

// TestCoalescedEntryIDs: many concurrent single Fillups of one bucket, some
// with an Idempotency-Key sent twice, decided in coalesced batches at one
// pinned instant: each call is answered the id of its own entry (fillup or
// denied, with its own meta), the ids are exactly the entries History lists,
// none twice, and both calls of a key name the same entry. A batch that
// replays an earlier call of the same batch names that call's entry, and so
// does a later replay.
func TestCoalescedEntryIDs(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(8),
				postgres.WithTimeout(30*time.Second), postgres.WithMaxAttempts(100))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "hot", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Second,
				History: true, RecordDenials: true}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "hot", Key: "k"}
			const plain, keyed = 200, 50 // keyed calls are sent twice
			type answer struct {
				call string
				out  ledger.FillupOutcome
			}
			var mu sync.Mutex
			var answers []answer
			var failed error
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range plain + 2*keyed {
				call, idem := fmt.Sprint("p", i), ledger.Idempotency{}
				if i >= plain {
					call = fmt.Sprint("k", (i-plain)%keyed)
					idem = ledger.Idempotency{Scope: "t", Key: call, Hash: "h"}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1"), Meta: ledger.Meta{"call": call}}}, idem)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = err
						return
					}
					answers = append(answers, answer{call, out})
				}()
			}
			close(start)
			wg.Wait()
			if failed != nil {
				t.Fatal(failed)
			}
			entries := entryEvents(t, s, ref)
			byCall := map[string]string{} // call: its entry id
			accepted := 0
			for _, a := range answers {
				id := a.out.Items[0].EntryID
				if prev, ok := byCall[a.call]; ok {
					if prev != id || a.call[0] != 'k' {
						t.Fatalf("call %s answered entries %s and %s", a.call, prev, id)
					}
					continue
				}
				byCall[a.call] = id
				event := "denied"
				if a.out.Accepted {
					event = "fillup"
					accepted++
				}
				if got, want := entries[id], fmt.Sprintf(`%s 1 {"call":%q}`, event, a.call); got != want {
					t.Fatalf("call %s (accepted %v): entry %q is %q, want %q", a.call, a.out.Accepted, id, got, want)
				}
			}
			if len(byCall) != plain+keyed || len(entries) != plain+keyed || accepted != 100 {
				t.Fatalf("%d calls named %d entries (%d accepted), history lists %d; want %d, 100 accepted",
					len(answers), len(byCall), accepted, len(entries), plain+keyed)
			}
			named := map[string]bool{}
			for _, id := range byCall {
				if named[id] {
					t.Fatalf("entry %s named by two calls", id)
				}
				named[id] = true
			}
			st := s.Stats()
			if st.Batches >= st.Batched {
				t.Fatalf("%d calls in %d batches: want them coalesced", st.Batched, st.Batches)
			}
			t.Logf("%d calls in %d batches", st.Batched, st.Batches)

			// One batch whose later calls replay its earlier ones: an
			// accepted call and a recorded denial (the bucket is full).
			clock.Advance(10 * time.Second)
			idems := []ledger.Idempotency{{Scope: "b", Key: "fits", Hash: "h"}, {Scope: "b", Key: "denied", Hash: "h"}}
			idems = append(idems, idems...)
			outs, errs := s.FillupBatchIdem(ctx, ref, []decimal.Decimal{dec("1"), dec("50"), dec("1"), dec("50")}, idems)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("batch call %d: %v", i, err)
				}
			}
			if !outs[0].Accepted || outs[1].Accepted || outs[0].Items[0].EntryID == "" || outs[1].Items[0].EntryID == "" ||
				!outs[2].Replayed || !outs[3].Replayed ||
				outs[2].Items[0].EntryID != outs[0].Items[0].EntryID || outs[3].Items[0].EntryID != outs[1].Items[0].EntryID {
				t.Fatalf("a batch replaying its own calls: %+v", outs)
			}
			entries = entryEvents(t, s, ref)
			if entries[outs[0].Items[0].EntryID] != "fillup 1 " || entries[outs[1].Items[0].EntryID] != "denied 50 " {
				t.Fatalf("the batch's entries: %q %q", entries[outs[0].Items[0].EntryID], entries[outs[1].Items[0].EntryID])
			}
			for i, idem := range idems[:2] {
				out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: []decimal.Decimal{dec("1"), dec("50")}[i]}}, idem)
				if err != nil || !out.Replayed || out.Items[0].EntryID != outs[i].Items[0].EntryID {
					t.Fatalf("replay of %s: %+v %v, want entry %s", idem.Key, out, err, outs[i].Items[0].EntryID)
				}
			}
			if n := len(entryEvents(t, s, ref)); n != plain+keyed+2 {
				t.Fatalf("%d entries after the replays, want %d", n, plain+keyed+2)
			}
		})
	}
}
