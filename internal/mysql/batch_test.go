package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
)

// TestBatchEqualsSequence drives batches of single-bucket Fillups on many
// buckets at once through the group commit's batch (FillupBatch: one
// transaction, its rows locked and written back with set-based
// statements) and demands, call by call, the answers that the same calls
// get one at a time on twin buckets (the decision alone) at the same
// instant, and afterwards the same state, history and threshold events:
// leaking, periodic and windowed levels, a shadow limit, thresholds, holds,
// zero costs, denials (recorded ones too), several calls of one bucket in
// a batch, a missing limit, Idempotency-Keys (new, reused in the batch for
// the same request or another, reused from earlier rounds), and rows that
// another instance writes between rounds (the batch's cached rows then
// fail their check, or a bucket it presumes new is not). It fails if too
// few batches are kept as one.
func TestBatchEqualsSequence(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) { testBatchEqualsSequence(t, iso) })
	}
}

func testBatchEqualsSequence(t *testing.T, iso string) {
	clock := ledgertest.NewClock()
	url := newDatabase(t)
	s := open(t, url, mysql.WithIsolation(iso), mysql.WithClock(clock.Now), mysql.WithPruneInterval(0), mysql.WithTimeout(time.Minute))
	other := open(t, url, mysql.WithIsolation(iso), mysql.WithClock(clock.Now), mysql.WithPruneInterval(0), mysql.WithCache(0, 0))
	ctx := context.Background()
	dec := decimal.RequireFromString
	limits := []ledger.Limit{
		{Name: "p", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 3 * time.Second, History: true, RecordDenials: true,
			Thresholds: []ledger.Threshold{{Percent: dec("50")}, {Percent: dec("90")}}},
		{Name: "q", Capacity: dec("12.5"), Period: &ledger.Period{Every: "day", TZ: "Europe/Berlin"}, History: true},
		{Name: "w", Capacity: dec("9"), Window: &ledger.Window{Length: time.Hour, Precision: time.Minute}, History: true},
		{Name: "s", Capacity: dec("8"), LeakAmount: dec("0.5"), LeakPer: time.Second, Mode: ledger.ModeShadow, History: true, RecordDenials: true},
		{Name: "n", Capacity: dec("6"), LeakAmount: dec("2"), LeakPer: time.Second},
	}
	for _, l := range limits {
		if _, err := s.PutLimit(ctx, l); err != nil {
			t.Fatalf("PutLimit %s: %v", l.Name, err)
		}
	}
	type pair struct{ bat, seq ledger.BucketRef }
	var buckets []pair
	for _, l := range []string{"q", "p", "w", "s", "n", "missing"} {
		for _, k := range []string{"b", "a", "c", "d"} {
			buckets = append(buckets, pair{ledger.BucketRef{Limit: l, Key: "bat-" + k}, ledger.BucketRef{Limit: l, Key: "seq-" + k}})
		}
	}
	known := buckets[:len(buckets)-4]
	rng := rand.New(rand.NewPCG(5, 17))
	costs := []string{"0", "0.5", "1", "2.25", "3", "7", "13"}
	var denials, holds, replays, refusals, missing, elsewhere, kept, rounds int
	var used []ledger.Idempotency
	for round := range 120 {
		rounds++
		clock.Advance(time.Duration(rng.IntN(4_000_000)) * time.Microsecond)
		if round%10 == 5 {
			clock.Advance(20 * time.Hour) // into the next day, now and then
		}
		if rng.IntN(4) == 0 {
			// A hold on both twins, most of them outliving the next rounds.
			b := known[rng.IntN(len(known))]
			ttl := time.Duration(1+rng.IntN(30)) * time.Second
			for _, ref := range []ledger.BucketRef{b.bat, b.seq} {
				if _, err := s.Reserve(ctx, ref, dec("1.5"), ttl, ledger.Idempotency{}, nil); err != nil {
					t.Fatal(err)
				}
			}
			holds++
		}
		if rng.IntN(5) == 0 {
			// Another instance charges both twins: the batch's cached row
			// (or a bucket it presumes new) is not the row any more.
			b := known[rng.IntN(len(known))]
			for _, ref := range []ledger.BucketRef{b.bat, b.seq} {
				if _, err := other.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("0.5")}}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
			}
			elsewhere++
		}
		n := 2 + rng.IntN(20)
		bats := make([]ledger.Charge, n)
		seqs := make([]ledger.Charge, n)
		idems := make([]ledger.Idempotency, n)
		pool := known
		if round%9 == 4 {
			pool = buckets // with the missing limit
		}
		var fresh []int // calls of this round with a new key
		for i := range n {
			b := pool[rng.IntN(len(pool))]
			c := dec(costs[rng.IntN(len(costs))])
			meta := ledger.Meta{"i": fmt.Sprint(i)}
			bats[i], seqs[i] = ledger.Charge{Bucket: b.bat, Cost: c, Meta: meta}, ledger.Charge{Bucket: b.seq, Cost: c, Meta: meta}
			switch r := rng.IntN(10); {
			case r < 2:
				idems[i] = ledger.Idempotency{Key: fmt.Sprintf("r%di%d", round, i), Hash: b.bat.Limit + b.bat.Key + c.String()}
				fresh = append(fresh, i)
			case r < 3 && len(fresh) > 0:
				// A key of this round: the same request (replayed) or
				// another one (refused).
				j := fresh[rng.IntN(len(fresh))]
				idems[i] = idems[j]
				if rng.IntN(2) == 0 {
					bats[i], seqs[i] = bats[j], seqs[j]
				} else {
					idems[i].Hash = "other"
				}
			case r < 3 && len(used) > 0:
				idems[i] = used[rng.IntN(len(used))] // from an earlier round
			}
		}
		for _, i := range fresh {
			used = append(used, idems[i])
		}
		got, errs, ok := mysql.FillupBatch(ctx, s, bats, ledgertest.Scoped(idems, "batched"))
		if ok > 1 {
			kept++
		}
		for i := range n {
			want, err := s.Fillup(ctx, seqs[i:i+1], ledgertest.Scoped(idems, "one-by-one")[i])
			if !ledgertest.SameRefusal(errs[i], err) {
				t.Fatalf("round %d call %d (%v cost %s): batched: %v, one by one: %v", round, i, bats[i].Bucket, bats[i].Cost, errs[i], err)
			}
			switch {
			case errors.Is(err, ledger.ErrLimitNotFound):
				missing++
			case errors.Is(err, ledger.ErrIdempotencyKeyReused):
				refusals++
			case err == nil && got[i].Replayed:
				replays++
			case err == nil && !got[i].Accepted:
				denials++
			}
			if a, b := ledgertest.AnswerWithEntries(got[i]), ledgertest.AnswerWithEntries(want); a != b {
				t.Fatalf("round %d call %d (%v cost %s, %d kept in the batch):\n batch      %s\n one by one %s", round, i, bats[i].Bucket, bats[i].Cost, ok, a, b)
			}
		}
	}
	mixed, nb, read := s.GroupCommitBuckets()
	_, _, conflicts := s.CacheStats()
	t.Logf("%d rounds, %d kept as one batch (%d of several buckets, %d buckets, %d on a read; %d cached writes conflicted); %d denials, %d holds, %d replays, %d refusals, %d missing, %d charged elsewhere",
		rounds, kept, mixed, nb, read, conflicts, denials, holds, replays, refusals, missing, elsewhere)
	if kept < rounds/2 || read == 0 || denials == 0 || holds == 0 || replays == 0 || refusals == 0 || missing == 0 {
		t.Fatalf("the test did not exercise the batch: %d of %d rounds kept, %d on a read, %d denials, %d holds, %d replays, %d refusals, %d missing",
			kept, rounds, read, denials, holds, replays, refusals, missing)
	}
	// What each twin holds: state, history and events.
	for _, b := range known {
		sb, err := other.Inspect(ctx, b.bat)
		if err != nil {
			t.Fatal(err)
		}
		ss, err := other.Inspect(ctx, b.seq)
		if err != nil {
			t.Fatal(err)
		}
		if a, c := ledgertest.AnswerWithEntries(ledger.FillupOutcome{Items: []ledger.ItemOutcome{{Snapshot: sb}}}), ledgertest.AnswerWithEntries(ledger.FillupOutcome{Items: []ledger.ItemOutcome{{Snapshot: ss}}}); a != c {
			t.Errorf("%v: batched %s, one by one %s", b.bat, a, c)
		}
		ledgertest.SameHistory(t, other, b.seq, b.bat, ledgertest.SameIDs)
		ledgertest.SameEvents(t, other, b.seq, b.bat)
	}
}
