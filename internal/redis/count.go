package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
)

var _ ledger.Counter = (*Store)(nil)

// CountBuckets counts the limit's buckets and their active holds at the
// Redis clock (ledger.Counter). Redis keeps no index of a limit's buckets
// (list.go says why), so this is the SCAN a listing page makes: every
// master's whole keyspace for the limit generation's bucket hashes
// (P:<g>:b:*, about one round trip per 1,000 keys in that Redis), each
// batch's hashes then read with one pipelined HGETALL each on the master
// that holds them, to count their hold fields "h<id>" = "<amount>:<expiry
// µs>" that expire after now (a field lives while its hold is active). The
// buckets are those ListBuckets lists: every bucket hash of the limit that
// still exists when it is read. SCAN may return a key twice, so the keys
// seen are kept to count each once: O(the limit's buckets) memory in this
// process, besides the keyspace-sized time. now is read once, before the
// scan (Redis TIME of one node, or the test clock).
func (s *Store) CountBuckets(ctx context.Context, limit string) (ledger.LimitCounts, error) {
	cl, err := s.fetchLimit(ctx, limit)
	if err != nil {
		return ledger.LimitCounts{}, err
	}
	at, err := s.clockNow(ctx)
	if err != nil {
		return ledger.LimitCounts{}, s.fail(ctx, "count buckets", err)
	}
	base := s.k.gen(cl.gen) + ":b:"
	var (
		mu   sync.Mutex
		seen = map[string]int{} // bucket hash → its active holds
	)
	err = s.scanKeys(ctx, base+"*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
		pipe := c.Pipeline()
		cmds := make([]*goredis.MapStringStringCmd, len(ks))
		for i, rk := range ks {
			cmds[i] = pipe.HGetAll(ctx, rk)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for i, rk := range ks {
			fields := cmds[i].Val()
			if _, ok := decodeKey(strings.TrimPrefix(rk, base)); !ok || len(fields) == 0 {
				continue // not a bucket hash, or gone since the SCAN
			}
			seen[rk] = activeHolds(fields, at.UnixMicro())
		}
		return nil
	})
	if err != nil {
		return ledger.LimitCounts{}, s.fail(ctx, "count buckets", err)
	}
	out := ledger.LimitCounts{Buckets: int64(len(seen)), At: at}
	for _, n := range seen {
		out.ActiveHolds += int64(n)
	}
	return out, nil
}

// activeHolds counts the hold fields of a bucket hash that expire after
// nowUS.
func activeHolds(fields map[string]string, nowUS int64) int {
	n := 0
	for f, v := range fields {
		if !strings.HasPrefix(f, "h") {
			continue
		}
		_, exp, _ := strings.Cut(v, ":")
		if e, err := strconv.ParseInt(exp, 10, 64); err == nil && e > nowUS {
			n++
		}
	}
	return n
}

// clockNow is the store's now: the test clock when it is set, otherwise
// Redis TIME, in whole microseconds.
func (s *Store) clockNow(ctx context.Context) (time.Time, error) {
	if s.now != nil {
		if t := s.now(); !t.IsZero() {
			return t.UTC().Truncate(time.Microsecond), nil
		}
	}
	t, err := s.client.Time(ctx).Result()
	return t.UTC().Truncate(time.Microsecond), err
}
