package ledgertest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// testConcurrentDifferential sends 320 single-bucket Fillups of mixed costs
// at once over four buckets, with the clock pinned, through the paths
// production uses (PostgreSQL's coalesced batches, Redis's pipelines, the
// memory store's shard locks), and checks every answer against the pure
// rule: whatever order the store chose, each accepted call's level is the
// level before it plus its cost, each denial is the rule's denial (level,
// remaining, retry_after) of a state the store was in, and the final level
// is the sum of the accepted costs.
func testConcurrentDifferential(t *testing.T, e *env) {
	e.limit("conc", "100", "1", time.Hour, true)
	l := bucket.Limit{Capacity: bucket.MustAmount("100"), LeakAmount: bucket.MustAmount("1"), LeakPer: time.Hour}
	now := e.clock.Now()
	rng := rand.New(rand.NewPCG(7, 11))
	costs := []string{"0.5", "1", "2.25", "3.000001", "7", "12.5", "0"}
	type call struct {
		b    int
		cost decimal.Decimal
		d    bucket.Decision
		err  error
	}
	calls := make([]*call, 320)
	for i := range calls {
		calls[i] = &call{b: rng.IntN(4), cost: dec(costs[rng.IntN(len(costs))])}
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref("conc", fmt.Sprintf("k%d", c.b)), Cost: c.cost}}, ledger.Idempotency{})
			c.err = err
			if err == nil {
				c.d = res.Items[0]
			}
		})
	}
	wg.Wait()
	for b := range 4 {
		var mine []*call
		for _, c := range calls {
			if c.err != nil {
				t.Fatalf("fillup: %v", c.err)
			}
			if c.b == b {
				mine = append(mine, c)
			}
		}
		// The levels the bucket passed through, in the order of its accepted
		// positive charges: each is the one before plus the charge.
		var acc []*call
		for _, c := range mine {
			if c.d.Accepted && c.cost.Sign() > 0 {
				acc = append(acc, c)
			}
		}
		slices.SortFunc(acc, func(x, y *call) int { return x.d.Level.Cmp(y.d.Level) })
		states := map[string]bucket.State{"0": {}}
		var level bucket.Amount
		for _, c := range acc {
			st := bucket.State{Level: level}
			if level.Sign() > 0 {
				st.Updated = now
			}
			want, next := bucket.Fillup(l, st, now, ledger.Amount(c.cost))
			if !want.Accepted || !c.d.Level.Equal(want.Level) || !c.d.Remaining.Equal(want.Remaining) {
				t.Fatalf("bucket %d: %s accepted at level %s (remaining %s); after %s the rule gives %+v", b, c.cost, c.d.Level, c.d.Remaining, level, want)
			}
			level = next.Level
			states[level.String()] = next
		}
		for _, c := range mine {
			if c.d.Accepted && c.cost.Sign() > 0 {
				continue
			}
			st, ok := states[c.d.Level.String()]
			if !ok {
				t.Fatalf("bucket %d: a call of %s answered level %s, a level the bucket never had", b, c.cost, c.d.Level)
			}
			want := bucket.CanAccept(l, st, now, ledger.Amount(c.cost))
			if c.d.Accepted != want.Accepted || !c.d.Remaining.Equal(want.Remaining) || !c.d.RetryAfter.Equal(want.RetryAfter) {
				t.Fatalf("bucket %d: %s at level %s answered %+v, the rule %+v", b, c.cost, c.d.Level, c.d, want)
			}
		}
		eq(t, fmt.Sprintf("bucket %d level", b), e.state(ref("conc", fmt.Sprintf("k%d", b))).Level, level.String())
	}
}
