package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// denialEnv is a store with a fixed clock and helpers for the tests of
// record_denials.
type denialEnv struct {
	t     *testing.T
	ctx   context.Context
	s     *Store
	svc   *ledger.Service
	clock *ledgertest.Clock
}

func newDenialEnv(t *testing.T, env string) *denialEnv {
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	s := openTest(t, serverURL(t, env), WithClock(clock.Now))
	return &denialEnv{t: t, ctx: context.Background(), s: s, svc: ledger.NewService(s), clock: clock}
}

func (e *denialEnv) put(name string, spec ledger.LimitSpec) {
	e.t.Helper()
	if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
		e.t.Fatal(err)
	}
}

func (e *denialEnv) fill(items ...ledger.Item) ledger.FillupResult {
	e.t.Helper()
	res, err := e.svc.Fillup(e.ctx, items, ledger.Idempotency{})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func (e *denialEnv) reserve(r ledger.BucketRef, amount string, idem ledger.Idempotency) ledger.ReserveResult {
	e.t.Helper()
	res, err := e.svc.Reserve(e.ctx, r, decimal.RequireFromString(amount), time.Hour, idem, ledger.Meta{"job": "j"})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func (e *denialEnv) drain(r ledger.BucketRef, amount string, idem ledger.Idempotency) ledger.DrainResult {
	e.t.Helper()
	res, err := e.svc.Drain(e.ctx, r, decimal.RequireFromString(amount), idem, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// history maps the ids History lists for r to "event amount".
func (e *denialEnv) history(r ledger.BucketRef) map[string]string {
	e.t.Helper()
	es, _, err := e.svc.History(e.ctx, r, "", 100)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, en := range es {
		out[en.ID] = fmt.Sprintf("%s %s", en.Event, en.Amount)
	}
	return out
}

// pttls are the PTTLs of r's bucket key and history key.
func (e *denialEnv) pttls(r ledger.BucketRef) (bucketTTL, historyTTL time.Duration) {
	e.t.Helper()
	cl, err := e.s.limitFor(e.ctx, r.Limit)
	if err != nil {
		e.t.Fatal(err)
	}
	c := e.s.client.(goredis.Cmdable)
	b, err1 := c.PTTL(e.ctx, e.s.k.bucket(cl.gen, r.Key)).Result()
	h, err2 := c.PTTL(e.ctx, e.s.k.history(cl.gen, r.Key)).Result()
	if err1 != nil || err2 != nil {
		e.t.Fatal(err1, err2)
	}
	return b, h
}

func item(r ledger.BucketRef, cost string) ledger.Item {
	return ledger.Item{Bucket: r, Cost: decimal.RequireFromString(cost), Meta: ledger.Meta{"ip": "10.0.0.1"}}
}

// TestRecordedDenialLeavesBucketEmpty: a recorded denial (Fillup, Reserve)
// on a bucket never written writes only its history entry: Inspect still
// shows an empty bucket (level 0, no updated time, no holds), while the
// bucket key (which numbers the history) and the history live as long as a
// history entry is kept, also after a PUT dropped the bucket's TTL. On a
// written bucket a denial changes neither its state nor shortens its TTL,
// and old entries are trimmed by a denial as by any write.
func TestRecordedDenialLeavesBucketEmpty(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			e := newDenialEnv(t, env)
			e.put("logins", ledger.LimitSpec{Capacity: decimal.NewFromInt(5), LeakAmount: decimal.NewFromInt(5), LeakPer: time.Hour,
				History: true, RecordDenials: true})
			fresh := ledger.BucketRef{Limit: "logins", Key: "{d}fresh"}
			held := ledger.BucketRef{Limit: "logins", Key: "{d}held"}
			den := e.fill(item(fresh, "6"))
			res := e.reserve(held, "6", ledger.Idempotency{})
			if den.Accepted || den.EntryIDs[0] == "" || res.Decision.Accepted || res.EntryID == "" {
				t.Fatalf("denials: %+v %+v", den, res)
			}
			for r, id := range map[ledger.BucketRef]string{fresh: den.EntryIDs[0], held: res.EntryID} {
				sn, err := e.s.Inspect(e.ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if st := sn.State; !st.Level.IsZero() || !st.Updated.IsZero() || len(st.Holds) != 0 || len(st.Slots) != 0 {
					t.Errorf("%s: a recorded denial left state %+v", r.Key, st)
				}
				if h := e.history(r); len(h) != 1 || h[id] != "denied 6" {
					t.Errorf("%s: history %v, want entry %s denied 6", r.Key, h, id)
				}
				b, h := e.pttls(r)
				if b < ledger.HistoryRetention-time.Minute || b > ledger.HistoryRetention || h < ledger.HistoryRetention-time.Minute || h > ledger.HistoryRetention {
					t.Errorf("%s: PTTLs %v (bucket) and %v (history), want the history retention %v", r.Key, b, h, ledger.HistoryRetention)
				}
			}

			// A PUT that slows the leak drops the TTLs of the limit's
			// buckets; a bucket that holds only its history counter gets
			// the retention again at its next denial.
			e.put("logins", ledger.LimitSpec{Capacity: decimal.NewFromInt(5), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour,
				History: true, RecordDenials: true})
			if b, _ := e.pttls(fresh); b != -1 {
				t.Fatalf("after slowing the leak the bucket's PTTL is %v, want none", b)
			}
			e.fill(item(fresh, "6"))
			if b, h := e.pttls(fresh); b < ledger.HistoryRetention-time.Minute || b > ledger.HistoryRetention || h < ledger.HistoryRetention-time.Minute || h > ledger.HistoryRetention {
				t.Errorf("PTTLs %v (bucket) and %v (history) after a denial on a persisted bare bucket, want %v", b, h, ledger.HistoryRetention)
			}

			// A bucket whose level lasts longer than the retention keeps its
			// longer TTL, and its state.
			e.put("slow", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: 1000 * time.Hour,
				History: true, RecordDenials: true})
			slow := ledger.BucketRef{Limit: "slow", Key: "{d}slow"}
			e.fill(item(slow, "10"))
			before, err := e.s.Inspect(e.ctx, slow)
			if err != nil {
				t.Fatal(err)
			}
			b0, h0 := e.pttls(slow)
			e.clock.Advance(time.Second)
			if d := e.fill(item(slow, "1")); d.Accepted || d.EntryIDs[0] == "" {
				t.Fatalf("slow denial: %+v", d)
			}
			after, err := e.s.Inspect(e.ctx, slow)
			if err != nil {
				t.Fatal(err)
			}
			if !after.State.Level.Equal(before.State.Level) || !after.State.Updated.Equal(before.State.Updated) {
				t.Errorf("a denial changed the bucket: %+v, was %+v", after.State, before.State)
			}
			if b1, h1 := e.pttls(slow); b1 < 9000*time.Hour || b1 > b0 || h1 < 9000*time.Hour || h1 > h0 {
				t.Errorf("PTTLs %v and %v after a denial, were %v and %v", b1, h1, b0, h0)
			}

			// A denial trims the entries past the retention.
			e.clock.Advance(ledger.HistoryRetention + time.Hour)
			late := e.fill(item(fresh, "7"))
			if h := e.history(fresh); len(h) != 1 || h[late.EntryIDs[0]] != "denied 7" {
				t.Errorf("history after the retention: %v, want only entry %s", h, late.EntryIDs[0])
			}
		})
	}
}

// TestEntryIDsAreHistoryIDs: the entry id each call returns (accepted and
// denied Fillup, each multi-bucket item, Drain, accepted and denied Reserve)
// is the id History lists for that entry; an Idempotency-Key replay returns
// the same id and writes nothing; a call that writes no entry returns "".
func TestEntryIDsAreHistoryIDs(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			e := newDenialEnv(t, env)
			spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour, History: true, RecordDenials: true}
			e.put("a", spec)
			a, b := ledger.BucketRef{Limit: "a", Key: "{t}a"}, ledger.BucketRef{Limit: "a", Key: "{t}b"}
			want := map[ledger.BucketRef]map[string]string{a: {}, b: {}}
			named := func(r ledger.BucketRef, id, entry string) {
				t.Helper()
				if id == "" || want[r][id] != "" {
					t.Fatalf("%s: entry id %q for %s (ids so far %v)", r.Key, id, entry, want[r])
				}
				want[r][id] = entry
			}
			named(a, e.fill(item(a, "4")).EntryIDs[0], "fillup 4")
			multi := e.fill(item(a, "1"), item(b, "2"))
			named(a, multi.EntryIDs[0], "fillup 1")
			named(b, multi.EntryIDs[1], "fillup 2")
			idem := ledger.Idempotency{Scope: "drain:a/{t}a", Key: "d1", Hash: "h"}
			dr := e.drain(a, "2", idem)
			named(a, dr.EntryID, "drain 2")
			if again := e.drain(a, "2", idem); !again.Replayed || again.EntryID != dr.EntryID {
				t.Errorf("replayed drain: %+v, want entry %s", again, dr.EntryID)
			}
			idem = ledger.Idempotency{Scope: "reserve:a/{t}a", Key: "r1", Hash: "h"}
			res := e.reserve(a, "3", idem)
			if !res.Decision.Accepted {
				t.Fatalf("reserve: %+v", res)
			}
			named(a, res.EntryID, "reserved 3")
			if again := e.reserve(a, "3", idem); !again.Replayed || again.EntryID != res.EntryID {
				t.Errorf("replayed reserve: %+v, want entry %s", again, res.EntryID)
			}
			denIdem := ledger.Idempotency{Scope: "fillup:a/{t}a", Key: "f1", Hash: "h"}
			den8, err := e.svc.Fillup(e.ctx, []ledger.Item{item(a, "8")}, denIdem)
			if err != nil || den8.Accepted {
				t.Fatalf("denied fillup: %+v %v", den8, err)
			}
			named(a, den8.EntryIDs[0], "denied 8")
			named(a, e.reserve(a, "9", ledger.Idempotency{}).EntryID, "denied 9")
			// b fits 1, a does not fit 5: only a records its denial.
			den := e.fill(item(b, "1"), item(a, "5"))
			if den.Accepted || den.EntryIDs[0] != "" {
				t.Fatalf("denied multi-bucket call: %+v", den)
			}
			named(a, den.EntryIDs[1], "denied 5")
			for r, w := range want {
				if got := e.history(r); fmt.Sprint(got) != fmt.Sprint(w) {
					t.Errorf("%s: history %v, want %v", r.Key, got, w)
				}
			}

			// Nothing written, nothing named: a drain of an empty bucket,
			// a denial without record_denials, anything without history.
			if dr := e.drain(ledger.BucketRef{Limit: "a", Key: "{t}empty"}, "1", ledger.Idempotency{}); dr.EntryID != "" {
				t.Errorf("drain of an empty bucket: %+v", dr)
			}
			// A replay of the denial after the limit stopped recording
			// denials shows the limit it was decided under and its entry,
			// and writes nothing.
			spec.RecordDenials = false
			e.put("a", spec)
			again, err := e.svc.Fillup(e.ctx, []ledger.Item{item(a, "8")}, denIdem)
			if err != nil || !again.Replayed || again.EntryIDs[0] != den8.EntryIDs[0] || !again.Limits[0].RecordDenials {
				t.Errorf("replayed denial: %+v %v, want entry %s under a limit that records denials", again, err, den8.EntryIDs[0])
			}
			if got := e.history(a); fmt.Sprint(got) != fmt.Sprint(want[a]) {
				t.Errorf("history after replays: %v, want %v", got, want[a])
			}
			e.put("quiet", spec)
			q := ledger.BucketRef{Limit: "quiet", Key: "{t}q"}
			if d := e.fill(item(q, "11")); d.Accepted || d.EntryIDs[0] != "" {
				t.Errorf("denial without record_denials: %+v", d)
			}
			if r := e.reserve(q, "11", ledger.Idempotency{}); r.Decision.Accepted || r.EntryID != "" {
				t.Errorf("denied reserve without record_denials: %+v", r)
			}
			spec.History, spec.RecordDenials = false, true
			e.put("none", spec)
			n := ledger.BucketRef{Limit: "none", Key: "{t}n"}
			if f, dr, r := e.fill(item(n, "4")), e.drain(n, "1", ledger.Idempotency{}), e.reserve(n, "1", ledger.Idempotency{}); f.EntryIDs[0] != "" || dr.EntryID != "" || r.EntryID != "" {
				t.Errorf("without history: %+v %+v %+v", f, dr, r)
			}
			if d := e.fill(item(n, "11")); d.Accepted || d.EntryIDs[0] != "" {
				t.Errorf("denial without history: %+v", d)
			}
		})
	}
}
