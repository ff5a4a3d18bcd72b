package ledger

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// Who is near the cap (SPEC "Who is near the cap", docs/api.md "Who is near
// the cap"): a bucket listing may keep only the buckets past one of the
// limit's thresholds, and may be ordered by use instead of by key.

// BucketOrder is the order of a bucket listing, as api.BucketOrder: by key
// (also when empty), or highest first by used or by share. BucketQuery
// selects and orders a listing: Above, when not empty, keeps the buckets
// whose mark for that threshold (one of the limit's, as ParseThreshold
// reads it) is above.
type (
	BucketOrder string
	BucketQuery struct {
		Above string
		Order BucketOrder
	}
)

// The orders of a bucket listing.
const (
	OrderKey, OrderUsed, OrderShare BucketOrder = "key", "used", "share"
)

// MarkedLister is implemented by a store that finds the buckets holding a
// threshold mark without reading every bucket of the limit (an index).
// ListMarked is ListBuckets restricted to buckets whose stored marks have
// signature sig and every bit of bit set, in whatever period they were
// kept: it may return other buckets too (the caller checks each), never
// leave one of those out.
type MarkedLister interface {
	ListMarked(ctx context.Context, limit, after string, n int, sig uint32, bit uint8) ([]BucketSnapshot, error)
}

// BucketScanner is implemented by a store that visits every bucket of a
// limit in one pass more cheaply than page after page of ListBuckets. fn
// sees each bucket ListBuckets would list, in any order, at least once (a
// bucket seen twice is seen as it is each time); an error from fn ends the
// scan with it. Returns ErrLimitNotFound as ListBuckets.
type BucketScanner interface {
	ScanBuckets(ctx context.Context, limit string, fn func(BucketSnapshot) error) error
}

// markScanPage is the batch a key-ordered listing with Above reads from the
// store at a time, at least the page asked for.
const markScanPage = 200

// QueryBuckets lists up to n of the limit's buckets that q selects, in q's
// order, after cursor ("" for the first page), and the cursor of the next
// page ("" at the end). It writes nothing.
//
// With Above, a bucket is listed when its marks are those of the limit's
// current list of thresholds, of the period it is in now (for a periodic
// limit), and have that threshold's bit: exactly the buckets whose last
// event for the threshold in this period was threshold.crossed. Ordered by
// used or share, every page ranks the buckets at the instant of the first
// page (the cursor carries it), so that pages neither skip nor repeat a
// bucket while no write changes them; each item shows its bucket now.
func (s *Service) QueryBuckets(ctx context.Context, limit string, q BucketQuery, cursor string, n int) ([]ListedBucket, string, error) {
	if q.Above == "" && (q.Order == "" || q.Order == OrderKey) {
		return s.ListBuckets(ctx, limit, cursor, n)
	}
	if err := ValidateName(limit); err != nil {
		return nil, "", ErrLimitNotFound
	}
	if n < 1 || n > MaxPage {
		return nil, "", invalid(CodeInvalidRequest, "limit", "must be a whole number from 1 to %d", MaxPage)
	}
	switch q.Order {
	case "", OrderKey, OrderUsed, OrderShare:
	default:
		return nil, "", invalid(CodeInvalidRequest, "order", "%q is not an order: key, used or share", clip(string(q.Order)))
	}
	var m *markFilter
	if q.Above != "" {
		t, err := ParseThreshold("above", q.Above)
		if err != nil {
			return nil, "", err
		}
		l, err := s.store.GetLimit(ctx, limit)
		if err != nil {
			return nil, "", err
		}
		i := slices.IndexFunc(l.Thresholds, func(u Threshold) bool { return u.Percent.Equal(t.Percent) && u.Amount.Equal(t.Amount) })
		if i < 0 {
			return nil, "", invalid(CodeInvalidRequest, "above", "%s is not one of the thresholds of limit %s", t, limit)
		}
		m = &markFilter{sig: ThresholdSig(l.Thresholds), bit: 1 << i}
	}
	if q.Order == OrderUsed || q.Order == OrderShare {
		return s.rankBuckets(ctx, limit, q.Order, m, cursor, n)
	}
	if _, ok := As[BucketScanner](s.store); ok && !isMarkedLister(s.store) {
		// One pass beats a pass per page of ListBuckets.
		return s.rankBuckets(ctx, limit, OrderKey, m, cursor, n)
	}
	return s.markedBuckets(ctx, limit, m, cursor, n)
}

// markFilter keeps the buckets whose marks are of the list with signature
// sig, of the current period, with bit set.
type markFilter struct {
	sig uint32
	bit uint8
}

// keeps reports whether b's marks are above for f now.
func (f *markFilter) keeps(b BucketSnapshot) bool {
	if f == nil {
		return true
	}
	if b.Marks.Sig != f.sig || b.Marks.Above&f.bit == 0 || ThresholdSig(b.Limit.Thresholds) != f.sig {
		return false
	}
	var period int64
	if p := b.Limit.Rule().Period; p != nil {
		start, _ := p.Bounds(b.Now)
		period = start.UnixMicro()
	}
	return b.Marks.Period == period
}

// page reads up to n buckets after after in key order, through the store's
// index of marks when f is set and the store has one.
func (s *Service) page(ctx context.Context, limit, after string, n int, f *markFilter) ([]BucketSnapshot, error) {
	if ml, ok := As[MarkedLister](s.store); ok && f != nil {
		return ml.ListMarked(ctx, limit, after, n, f.sig, f.bit)
	}
	return s.store.ListBuckets(ctx, limit, after, n)
}

// markedBuckets is QueryBuckets in key order with a mark filter.
func (s *Service) markedBuckets(ctx context.Context, limit string, f *markFilter, cursor string, n int) ([]ListedBucket, string, error) {
	after, err := ParseBucketCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	var out []ListedBucket
	batch := max(n+1, markScanPage)
	for len(out) <= n {
		snaps, err := s.page(ctx, limit, after, batch, f)
		if err != nil {
			return nil, "", err
		}
		for _, b := range snaps {
			if f.keeps(b) && len(out) <= n {
				out = append(out, ListedBucket{Key: b.Key, BucketState: StateOf(b.Snapshot)})
			}
		}
		if len(snaps) < batch {
			break
		}
		after = snaps[len(snaps)-1].Key
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = BucketCursor(out[n-1].Key)
	}
	return out, next, nil
}

// ranked is a bucket of a ranked listing with where it ranks.
type ranked struct {
	b   BucketSnapshot
	pos rankCursor
}

// rankCursor is where a bucket ranks, at the listing's instant: its used
// and effective capacity (as decimals too, for a ranking by share), then
// its key. As a cursor it is where a ranked listing resumes, with the
// instant and the order of the listing.
type rankCursor struct {
	order          BucketOrder
	at             time.Time
	used, capacity bucket.Amount
	usedD, capD    decimal.Decimal // set for OrderShare
	key            string
}

// rankOf is where a bucket of used and capacity ranks in order.
func rankOf(order BucketOrder, used, capacity bucket.Amount, key string) rankCursor {
	r := rankCursor{order: order, used: used, capacity: capacity, key: key}
	if order == OrderShare {
		r.usedD, r.capD = used.Decimal(), capacity.Decimal()
	}
	return r
}

// cmpRank orders a before b when it ranks higher: more used (or share),
// then the smaller key.
func cmpRank(order BucketOrder, a, b rankCursor) int {
	var c int
	switch order {
	case OrderKey:
	case OrderShare:
		// used_a/cap_a vs used_b/cap_b, exactly: capacities are positive.
		c = a.usedD.Mul(b.capD).Cmp(b.usedD.Mul(a.capD))
	default:
		c = a.used.Cmp(b.used)
	}
	if c != 0 {
		return -c
	}
	return strings.Compare(a.key, b.key)
}

// rankBuckets is QueryBuckets in order: it keeps the n+1 buckets that rank
// highest after the cursor, in O(n) memory, among every bucket of the limit
// (see docs/api.md for each store's cost), or, on a RankedLister, among the
// candidates the store ranks first (rankInStore). In key order the cursor is
// the plain listing's.
func (s *Service) rankBuckets(ctx context.Context, limit string, order BucketOrder, f *markFilter, cursor string, n int) ([]ListedBucket, string, error) {
	t := &rankTop{order: order, f: f, n: n}
	switch {
	case order == OrderKey && cursor != "":
		key, err := ParseBucketCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		t.from = &rankCursor{order: order, key: key}
	case cursor != "":
		c, err := parseRankCursor(cursor, order)
		if err != nil {
			return nil, "", err
		}
		t.from, t.at = &c, c.at
	}
	var err error
	if rl, ok := As[RankedLister](s.store); ok && order != OrderKey {
		err = s.rankInStore(ctx, rl, limit, t)
	} else {
		err = s.scan(ctx, limit, f, func(b BucketSnapshot) error { t.offer(b); return nil })
	}
	if err != nil {
		return nil, "", err
	}
	items, next := t.page()
	return items, next, nil
}

// rankTop is a ranked page being gathered: the n+1 buckets that f keeps
// and that rank highest after from (nil on the first page), at the
// instant at (the first bucket's Now when it is unset), best first.
type rankTop struct {
	order BucketOrder
	f     *markFilter
	from  *rankCursor
	n     int
	at    time.Time
	top   []ranked
}

// offer ranks b at t.at and keeps it when it is among the n+1 highest after
// t.from. A bucket offered again replaces what was kept of it.
func (t *rankTop) offer(b BucketSnapshot) {
	if !t.f.keeps(b) {
		return
	}
	if t.at.IsZero() {
		t.at = b.Now
	}
	d := bucket.CanAccept(b.Limit.Rule(), b.State, t.at, bucket.Amount{})
	r := ranked{b: b, pos: rankOf(t.order, d.Level.Add(d.Held), d.Capacity, b.Key)}
	p := r.pos
	if t.from != nil && cmpRank(t.order, p, *t.from) <= 0 {
		return // on an earlier page
	}
	if len(t.top) == t.n+1 && cmpRank(t.order, p, t.top[t.n].pos) >= 0 {
		return
	}
	if j := slices.IndexFunc(t.top, func(e ranked) bool { return e.b.Key == b.Key }); j >= 0 {
		t.top = slices.Delete(t.top, j, j+1) // seen again: as it is now
	}
	i, _ := slices.BinarySearchFunc(t.top, p, func(e ranked, p rankCursor) int { return cmpRank(t.order, e.pos, p) })
	t.top = slices.Insert(t.top, i, r)
	if len(t.top) > t.n+1 {
		t.top = t.top[:t.n+1]
	}
}

// page is the page gathered, each bucket as it was read, and the cursor of
// the next ("" at the end).
func (t *rankTop) page() ([]ListedBucket, string) {
	top, next := t.top, ""
	if len(top) > t.n {
		top = top[:t.n]
		last := top[t.n-1].pos
		last.at = t.at
		next = last.String()
		if t.order == OrderKey {
			next = BucketCursor(last.key)
		}
	}
	out := make([]ListedBucket, len(top))
	for i, r := range top {
		out[i] = ListedBucket{Key: r.b.Key, BucketState: StateOf(r.b.Snapshot)}
	}
	return out, next
}

// scan calls fn for every bucket of the limit (those f may keep, through
// the store's index of marks, when f is set): in one pass on a
// BucketScanner, page after page of MaxPage otherwise.
func (s *Service) scan(ctx context.Context, limit string, f *markFilter, fn func(BucketSnapshot) error) error {
	if sc, ok := As[BucketScanner](s.store); ok && (f == nil || !isMarkedLister(s.store)) {
		return sc.ScanBuckets(ctx, limit, fn)
	}
	after := ""
	for {
		snaps, err := s.page(ctx, limit, after, MaxPage, f)
		if err != nil {
			return err
		}
		for _, b := range snaps {
			if err := fn(b); err != nil {
				return err
			}
		}
		if len(snaps) < MaxPage {
			return nil
		}
		after = snaps[len(snaps)-1].Key
	}
}

func isMarkedLister(st Store) bool {
	_, ok := As[MarkedLister](st)
	return ok
}

// String writes c as an opaque cursor: base64url of
// "<order>|<at µs>|<used>|<capacity>|<key in base64url>".
func (c rankCursor) String() string {
	raw := strings.Join([]string{string(c.order), strconv.FormatInt(c.at.UnixMicro(), 10), c.used.String(),
		c.capacity.String(), base64.RawURLEncoding.EncodeToString([]byte(c.key))}, "|")
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// parseRankCursor reads a cursor String wrote for a listing in order, or
// returns invalid_request on field cursor.
func parseRankCursor(s string, order BucketOrder) (rankCursor, error) {
	bad := invalid(CodeInvalidRequest, "cursor", "malformed cursor, or one of a listing in another order")
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(s) > 4*MaxKeyBytes {
		return rankCursor{}, bad
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 5 || BucketOrder(parts[0]) != order {
		return rankCursor{}, bad
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	used, ok1 := amountOf(parts[2])
	capacity, ok2 := amountOf(parts[3])
	key, kerr := base64.RawURLEncoding.Strict().DecodeString(parts[4])
	if err != nil || us <= 0 || !ok1 || !ok2 || capacity.Sign() <= 0 || kerr != nil || ValidateKey(string(key)) != nil {
		return rankCursor{}, bad
	}
	c := rankOf(order, used, capacity, string(key))
	c.at = time.UnixMicro(us).UTC()
	return c, nil
}

// amountOf reads a non-negative amount as bucket.Amount writes it.
func amountOf(s string) (bucket.Amount, bool) {
	d, err := decimal.NewFromString(s)
	if err != nil || d.Sign() < 0 {
		return bucket.Amount{}, false
	}
	return bucket.FromDecimal(d)
}
