package ledger

import (
	"context"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// RankedLister is implemented by a store that ranks a limit's buckets by
// use inside itself (PostgreSQL: one statement), so that a page ordered by
// used or share reads its candidates through budgetd, not every bucket of
// the limit. The store need not know a bucket's exact rank, which takes
// every term of the bucket (overrides and their ends, grants, rollover):
// RankBuckets orders the buckets by an upper bound of it, and QueryBuckets
// reads them in that order, ranks each exactly from its snapshot as it
// ranks the buckets of every store, and stops at the first bound below the
// last of the page (docs/api.md, "Who is near the cap").
type RankedLister interface {
	// RankBuckets returns up to q.N of the limit's buckets with a Bound
	// each, by Bound highest first and then by key, after q.After, at the
	// instants q.At and q.Now (the store's now where zero, returned).
	// Bound is at least the bucket's rank at At, computed from the
	// snapshot ReadBuckets gives at Now: used = level + held at At under
	// the snapshot's rule; share = used ÷ the snapshot's capacity. No
	// bucket is left out but those the store may skip: one whose rank at
	// At it knows to be at or before q.Skip, and with q.Marked one whose
	// marks have not signature q.Sig and bit q.Bit. ErrLimitNotFound as
	// ListBuckets.
	RankBuckets(ctx context.Context, limit string, q RankQuery) (Ranking, error)
	// ReadBuckets returns the snapshots of the limit's buckets of keys as
	// ListBuckets makes them, read at now (in any order; a key without a
	// written bucket has none). ErrLimitNotFound as ListBuckets.
	ReadBuckets(ctx context.Context, limit string, keys []string, now time.Time) ([]BucketSnapshot, error)
}

// RankQuery asks a RankedLister for a batch of candidates of a page
// ranked in Order (OrderUsed or OrderShare).
type RankQuery struct {
	Order BucketOrder
	// At is the ranking's instant and Now the one the buckets are read
	// at (their terms resolved at); zero for the store's now.
	At, Now time.Time
	// After, when set, is the last candidate of the batch before.
	After *RankBound
	// Skip, when set, is where the page before ended.
	Skip *RankPos
	// Marked keeps only the buckets whose marks have signature Sig and
	// bit Bit (the store may return others too).
	Marked bool
	Sig    uint32
	Bit    uint8
	N      int
}

// RankBound is a candidate of a ranking: a key, and a bound of its rank:
// an amount for OrderUsed, a share for OrderShare.
type RankBound struct {
	Bound decimal.Decimal
	Key   string
}

// RankPos is where a bucket ranks: its used and its capacity (both at
// the ranking's instant), then its key.
type RankPos struct {
	Used, Capacity bucket.Amount
	Key            string
}

// Ranking is a batch of candidates, best bound first, and the instants of
// the ranking and of the read.
type Ranking struct {
	At, Now time.Time
	Buckets []RankBound
}

// The batches of rankInStore: the first asks the store for 8 pages' worth
// of candidates, each next one 8 times as many, up to maxRankBatch; their
// snapshots are read two pages' worth at a time, then twice as many each
// time.
const maxRankBatch = 100_000

// rankInStore gathers t from the candidates of a RankedLister: batch after
// batch, best bound first, each chunk of candidates read and ranked
// exactly (rankTop.offer), until the page is full and its last bucket
// ranks above every bound left. The store's ranking skips only buckets of
// earlier pages or without the mark, so the page is the one a scan of
// every bucket would gather.
func (s *Service) rankInStore(ctx context.Context, rl RankedLister, limit string, t *rankTop) error {
	q := RankQuery{Order: t.order, At: t.at, N: 8 * (t.n + 1)}
	if t.from != nil {
		q.Skip = &RankPos{Used: t.from.used, Capacity: t.from.capacity, Key: t.from.key}
	}
	if t.f != nil {
		q.Marked, q.Sig, q.Bit = true, t.f.sig, t.f.bit
	}
	chunk := 2 * (t.n + 1)
	for {
		r, err := rl.RankBuckets(ctx, limit, q)
		if err != nil {
			return err
		}
		q.At, q.Now, t.at = r.At, r.Now, r.At
		for cands := r.Buckets; len(cands) > 0; {
			if t.full(cands[0]) {
				return nil
			}
			k := min(chunk, len(cands))
			keys := make([]string, k)
			for i, c := range cands[:k] {
				keys[i] = c.Key
			}
			snaps, err := rl.ReadBuckets(ctx, limit, keys, q.Now)
			if err != nil {
				return err
			}
			for _, b := range snaps {
				t.offer(b)
			}
			cands, chunk = cands[k:], min(2*chunk, maxRankBatch)
		}
		if len(r.Buckets) < q.N {
			return nil
		}
		last := r.Buckets[len(r.Buckets)-1]
		if t.full(last) {
			return nil
		}
		q.After, q.N = &last, min(8*q.N, maxRankBatch)
	}
}

// full reports whether the page has its n+1 buckets and the last of them
// ranks above every bucket the ranking lists from c on: those bound to at
// most c.Bound, and to c.Bound only with a key from c.Key on.
func (t *rankTop) full(c RankBound) bool {
	if len(t.top) <= t.n {
		return false
	}
	p := &t.top[t.n].pos
	var cmp int
	if t.order == OrderShare {
		cmp = p.usedD.Cmp(c.Bound.Mul(p.capD)) // used/capacity vs the bound, exactly
	} else {
		cmp = p.used.Decimal().Cmp(c.Bound)
	}
	return cmp > 0 || cmp == 0 && p.key <= c.Key
}
