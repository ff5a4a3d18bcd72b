package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// limitOf is what an answer says of its limit, less the bucket.
func limitOf(o ledger.FillupOutcome) string {
	if len(o.Items) == 0 {
		return ""
	}
	l := o.Items[0].Snapshot.Limit
	period := ""
	if l.Period != nil {
		period = fmt.Sprintf("%s/%s/%d", l.Period.Every, l.Period.TZ, l.Period.StartDay)
	}
	return fmt.Sprintf("%s cap=%s kind=%s leak=%s/%v period=%s override=%q grants=%s history=%v denials=%v mode=%s grace=%s thresholds=%v created=%d updated=%d entry=%v",
		l.Name, l.Capacity, l.Kind(), l.LeakAmount, l.LeakPer, period, twinless(l.Override), l.Grants, l.History, l.RecordDenials, l.Mode, l.Grace,
		l.Thresholds, l.CreatedAt.UnixMicro(), l.UpdatedAt.UnixMicro(), o.Items[0].EntryID != "")
}

// twinless is an override's pattern without its twin's prefix.
func twinless(pattern string) string {
	if p, ok := strings.CutPrefix(pattern, "bat-"); ok {
		return p
	}
	return strings.TrimPrefix(pattern, "seq-")
}

// TestSetBatchEqualsSequence drives coalesced batches of mixed buckets,
// kinds and modes through the set-based batch (WithSetBatch) and demands
// the answers and history that the same calls get one at a time through
// budgetd_fillup: leaking and periodic levels, holds, zero costs, denials
// (recorded ones too), a shadow limit, a missing limit and Idempotency-Keys
// (new ones, reused within the batch for the same request — replayed — or
// another — refused —, and reused from earlier rounds, which budgetd_fillup
// replays), as is a batch whose read finds a hold expired. It fails if the
// set-based batch is not used.
func TestSetBatchEqualsSequence(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now), postgres.WithSetBatch(true))
	ctx := context.Background()
	pct := func(p string) ledger.Threshold { return ledger.Threshold{Percent: dec(p)} }
	limits := []ledger.Limit{
		{Name: "p", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 3 * time.Second, History: true, RecordDenials: true},
		{Name: "q", Capacity: dec("12.5"), Period: &ledger.Period{Every: "day", TZ: "Europe/Berlin"}, History: true,
			Thresholds: []ledger.Threshold{{Amount: dec("11")}, pct("95")}},
		{Name: "s", Capacity: dec("8"), LeakAmount: dec("0.5"), LeakPer: time.Second, Mode: ledger.ModeShadow, History: true, RecordDenials: true},
		{Name: "n", Capacity: dec("6"), LeakAmount: dec("2"), LeakPer: time.Second},
		// Thresholds at the effective capacity: the overrides' and the grants'.
		{Name: "o", Capacity: dec("9"), LeakAmount: dec("1"), LeakPer: 2 * time.Second, History: true, RecordDenials: true,
			Thresholds: []ledger.Threshold{pct("90")}},
		{Name: "r", Capacity: dec("11"), Period: &ledger.Period{Every: "day", TZ: "UTC"}, History: true},
		{Name: "w", Capacity: dec("10"), Window: &ledger.Window{Length: 8 * time.Second, Precision: time.Second}, History: true, RecordDenials: true},
	}
	for _, l := range limits {
		if _, err := s.PutLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	// Overrides on both twins of a key: a larger capacity, a prefix with
	// another leak, one that expires during the run (its end settles the
	// bucket first), and on the periodic limit another zone.
	override := func(limit, key string, o ledger.Override) {
		t.Helper()
		for _, twin := range []string{"bat-", "seq-"} {
			o := o
			o.Pattern = twin + key
			if _, err := s.PutOverride(ctx, limit, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	override("o", "a", ledger.Override{Capacity: decimal.NewNullDecimal(dec("20"))})
	override("o", "b*", ledger.Override{Capacity: decimal.NewNullDecimal(dec("4")), LeakAmount: dec("3"), LeakPer: time.Second})
	override("o", "c", ledger.Override{Capacity: decimal.NewNullDecimal(dec("15")), LeakAmount: dec("1"), LeakPer: 10 * time.Second,
		ExpiresAt: clock.Now().Add(9 * time.Second)})
	override("r", "a", ledger.Override{Capacity: decimal.NewNullDecimal(dec("30")), TZ: "Asia/Tokyo"})
	type pair struct{ bat, seq ledger.BucketRef }
	var buckets []pair
	for _, l := range []string{"q", "p", "s", "n", "o", "r", "w", "missing"} {
		for _, k := range []string{"b", "a", "c"} {
			buckets = append(buckets, pair{ledger.BucketRef{Limit: l, Key: "bat-" + k}, ledger.BucketRef{Limit: l, Key: "seq-" + k}})
		}
	}
	rng := rand.New(rand.NewPCG(7, 11))
	costs := []string{"0", "0.5", "1", "2.25", "3", "7", "13"}
	var denials, holds, grants, replays, refusals int
	var used []ledger.Idempotency
	for round := range 150 {
		clock.Advance(time.Duration(rng.IntN(4_000_000)) * time.Microsecond)
		if round%10 == 5 {
			clock.Advance(20 * time.Hour) // into the next day, now and then
		}
		if round%25 == 12 {
			// An override changed between batches: the index is stale
			// until the read under the locks sees the new version.
			override("o", "a", ledger.Override{Capacity: decimal.NewNullDecimal(dec(strconv.Itoa(14 + round%7)))})
		}
		if round%30 == 20 {
			// Another list of thresholds: a bucket's next write rebuilds
			// its marks from its use, with no event, which the set-based
			// batch must write too.
			o := limits[4]
			if round%60 == 20 {
				o.Thresholds = []ledger.Threshold{pct("60"), pct("90")}
			}
			if _, err := s.PutLimit(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(6) == 0 {
			// A grant on both twins, some expiring within a few rounds;
			// now and then the last one revoked.
			b := buckets[rng.IntN(len(buckets)-3)]
			ttl := time.Duration(2+rng.IntN(40)) * time.Second
			revoke, amount := rng.IntN(3) == 0, dec(costs[1+rng.IntN(4)])
			for _, ref := range []ledger.BucketRef{b.bat, b.seq} {
				g, err := s.AddGrant(ctx, ref, amount, clock.Now().Add(ttl), ledger.Idempotency{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if revoke {
					if _, err := s.RevokeGrant(ctx, ref, g.Grant.ID, ledger.Idempotency{}, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			grants++
		}
		if rng.IntN(4) == 0 {
			// A hold on both twins, most of them outliving the next rounds.
			b := buckets[rng.IntN(len(buckets)-3)]
			ttl := time.Duration(1+rng.IntN(30)) * time.Second
			for _, ref := range []ledger.BucketRef{b.bat, b.seq} {
				if _, err := s.Reserve(ctx, ref, dec("1.5"), ttl, ledger.Idempotency{}, nil); err != nil {
					t.Fatal(err)
				}
			}
			holds++
		}
		n := 2 + rng.IntN(20)
		refs := make([]ledger.BucketRef, n)
		seqs := make([]ledger.BucketRef, n)
		cs := make([]decimal.Decimal, n)
		idems := make([]ledger.Idempotency, n)
		pool := buckets[:len(buckets)-3]
		if round%7 == 3 {
			pool = buckets // with the missing limit
		}
		var fresh []int // items of this round with a new key
		for i := range cs {
			b := pool[rng.IntN(len(pool))]
			refs[i], seqs[i] = b.bat, b.seq
			cs[i] = dec(costs[rng.IntN(len(costs))])
			switch r := rng.IntN(10); {
			case r < 2:
				idems[i] = ledger.Idempotency{Key: fmt.Sprintf("r%di%d", round, i), Hash: refs[i].Limit + refs[i].Key + cs[i].String()}
				fresh = append(fresh, i)
			case r < 4 && len(fresh) > 0:
				// A key of this round: the same request (replayed) or
				// another one (refused).
				j := fresh[rng.IntN(len(fresh))]
				idems[i] = idems[j]
				if rng.IntN(3) > 0 {
					refs[i], seqs[i], cs[i] = refs[j], seqs[j], cs[j]
				} else {
					idems[i].Hash = "other"
				}
			case r < 4 && round%5 == 0 && len(used) > 0:
				idems[i] = used[rng.IntN(len(used))] // from an earlier round
			}
		}
		for _, i := range fresh {
			used = append(used, idems[i])
		}
		got, errs := s.FillupCalls(ctx, refs, cs, ledgertest.Scoped(idems, "batched"))
		for i, c := range cs {
			want, err := s.FillupAllOrNone(ctx, ledger.Charge{Bucket: seqs[i], Cost: c}, ledgertest.Scoped(idems, "one-by-one")[i])
			if !ledgertest.SameRefusal(errs[i], err) {
				t.Fatalf("round %d item %d: batched: %v, one by one: %v", round, i, errs[i], err)
			}
			switch {
			case errors.Is(err, ledger.ErrIdempotencyKeyReused):
				refusals++
			case err == nil && got[i].Replayed:
				replays++
			case err == nil && !got[i].Accepted:
				denials++
			}
			if a, b := ledgertest.Answer(got[i])+" "+limitOf(got[i]), ledgertest.Answer(want)+" "+limitOf(want); a != b {
				t.Fatalf("round %d item %d (%v cost %s):\n batch      %s\n one by one %s", round, i, refs[i], c, a, b)
			}
		}
		for _, l := range limits {
			if len(l.Thresholds) > 0 {
				sameMarks(t, s, round, l.Name)
			}
		}
	}
	st := s.Stats()
	t.Logf("%d denials, %d holds, %d grants, %d replays, %d refusals; %d set-based batches, %d sent on; %d batches", denials, holds, grants, replays, refusals, st.SetBatches, st.SetFallbacks, st.Batches)
	if denials == 0 || holds == 0 || grants == 0 || replays == 0 || refusals == 0 || st.SetBatches < 50 || st.SetFallbacks == 0 {
		t.Fatalf("%d denials, %d holds, %d set-based batches, %d sent on: the test did not exercise them", denials, holds, st.SetBatches, st.SetFallbacks)
	}
	events := 0
	for _, b := range buckets[:len(buckets)-3] {
		events += ledgertest.SameEvents(t, s, b.seq, b.bat)
		ledgertest.SameHistory(t, s, b.seq, b.bat, ledgertest.OtherIDs)
	}

	t.Logf("%d threshold events", events)
	if events < 20 {
		t.Fatalf("%d threshold events: the test did not exercise them", events)
	}
	// A batch on a limit with thresholds that crosses none is decided
	// set-wise, its marks written by the same statements.
	before := s.Stats().SetBatches
	fresh := []ledger.BucketRef{{Limit: "p", Key: "marks-a"}, {Limit: "p", Key: "marks-b"}}
	if _, errs := s.FillupCalls(ctx, fresh, []decimal.Decimal{dec("1"), dec("2")}, make([]ledger.Idempotency, 2)); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if got := s.Stats().SetBatches - before; got != 1 {
		t.Fatalf("a batch on a limit with thresholds: %d set-based batches, want 1", got)
	}
}

// sameMarks fails t unless the threshold marks of each pair of twin
// buckets of the limit are the same.
func sameMarks(t *testing.T, s *postgres.Store, round int, limit string) {
	t.Helper()
	bs, err := s.ListBuckets(context.Background(), limit, "", ledger.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	marks := map[string]ledger.Marks{}
	for _, b := range bs {
		marks[b.Key] = b.Marks
	}
	for key, m := range marks {
		if twin, ok := strings.CutPrefix(key, "bat-"); ok && marks["seq-"+twin] != m {
			t.Fatalf("round %d: %s/%s marks: one by one %+v, batched %+v", round, limit, key, marks["seq-"+twin], m)
		}
	}
}
