package mysql

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// The decision cache (docs/mysql.md "Round trips and the clock") keeps, for
// the buckets this Store wrote last, the row as it wrote it (version, state)
// and the limit row it decided with (id, rev, spec). A decision on buckets
// that are all in it skips the read: it decides on the cached rows at an
// estimate of the database's clock and sends the one multi-statement write,
// which compare-and-sets every row it decided on (the limits' revs, the
// buckets' versions and last_us) and checks that the estimate was not after
// the database's clock, nor more than cacheSkew behind it. A miss, or a write
// that finds anything changed, costs the read: the decision runs again as
// without the cache. The cache is a speed-up only; correctness is the
// compare-and-set's, as for every write.

// cacheSkew is how far behind the database's clock a cached decision's
// "now" may be: about what a read's clock is behind the commit of its write
// anyway (a round trip and the decision).
const cacheSkew = 100 * time.Millisecond

// cacheCool is how long a bucket whose cached write failed is not cached
// again: while another instance writes it too, each cached write would fail
// and cost two round trips more than a read.
const cacheCool = time.Second

// cacheStripes is the number of in-process locks that serialise the
// decisions of this Store on one bucket while the cache is on, so that they
// take turns on the cached row rather than fail each other's
// compare-and-set. A group commit's batch holds the stripes of all its
// buckets while it is at the database (a commit's latency): with 1,024,
// when the group commit had four slots, four batches of about ten buckets
// each made one batch in four wait for another's commit on a stripe of a
// bucket it does not share (BenchmarkSpread: 0.015 to 0.028 such waits
// per call, 0.001 with 16,384). Each is a one-slot channel, about 100
// bytes: 1.6 MB a Store.
const cacheStripes = 16384

// knownBits is the size of the filter of buckets known to exist (known):
// 8 Mbit, 1 MiB a Store. With three bits a bucket it tells about one bucket
// never seen in thirty from one of a million seen; past a few million it
// says "seen" of nearly every bucket, and a batch reads its new buckets
// rather than presume them new, as before presumption.
const knownBits = 1 << 23

// Default bounds of the cache (WithCache): 1,250,000 entries, about 210
// MiB of heap when full of buckets without terms of their own
// (bucketEntrySize). An instance's working set is every bucket it decides
// on within minutes, of all its limits: under spread load over more
// buckets than it holds, most batches have one evicted, and a batch with
// one is decided on a read, a round trip and a read of every row of the
// batch more (docs/mysql.md, "The cache's size"). It was 250,000 entries
// of 448 bytes each until the entries became slots (slots.go), and
// 100,000 of 692 bytes until 2026-12-03.
const (
	DefaultCacheEntries = 1_250_000
	DefaultCacheBytes   = 224 << 20
)

// bucketEntrySize is the heap a cached bucket takes besides its key and
// its terms (extra): its slot and its share of the index and of the
// slots' room to grow (TestCacheEntrySize measures it). A key counts as
// its length more, though one of up to slotKey bytes is in the slot.
const bucketEntrySize = 176

// coolEntrySize is what a bucket's entry without a row (suspect or
// cooling) is counted at besides its key.
const coolEntrySize = 160

// errMiss is a cached decision that could not be made or kept: the decision
// runs again on a read.
var errMiss = errors.New("mysql: decide on a read")

// WithCache sets the decision cache's bounds: at most entries entries
// (buckets and limits) and about bytes bytes of them. It is on by default,
// with DefaultCacheEntries and DefaultCacheBytes; entries <= 0 turns it off.
func WithCache(entries, bytes int) Option {
	return func(s *Store) {
		s.cache = nil
		if entries > 0 && bytes > 0 {
			s.cache = newDecisionCache(entries, bytes)
		}
	}
}

// cacheKey is a limit's entry (id 0, name its name) or a bucket's (id its
// limit's id, name its key).
type cacheKey struct {
	id   uint64
	name string
}

type decisionCache struct {
	maxEntries, maxBytes int
	skew                 time.Duration // cacheSkew
	cool                 time.Duration // cacheCool
	stripes              [cacheStripes]chan struct{}

	mu      sync.Mutex
	t       slotTable // the entries (slots.go)
	clockUS int64     // the database's clock a read returned,
	clockAt time.Time // and when the read returned (monotonic)
	// clockReset: a cached write failed; the next read's clock is taken.
	clockReset bool

	// known has the buckets this Store has seen a row of (read or
	// written), whether cached or not: a bucket it has no entry of is
	// presumed new only when known says it was never seen (viewOf). The
	// cache keeps its most recent buckets; an older one, evicted, exists
	// all the same, and presuming it new would cost its batch a failed
	// write and its rollback before the read.
	known known

	hits, misses, conflicts atomic.Int64
}

// known is a Bloom filter of buckets (a limit's id and a bucket's key):
// "not seen" is certain, "seen" may be wrong (then a batch reads a new
// bucket, as it would without presumption). Safe for concurrent use.
type known struct{ bits []atomic.Uint64 }

func newKnown(bits int) known { return known{bits: make([]atomic.Uint64, bits/64)} }

// at returns the three bits of bucket (id, key).
func (k *known) at(id uint64, key string) [3]uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], id)
	h.Write(b[:])
	h.Write([]byte(key))
	sum := h.Sum64()
	h1, h2 := sum&0xffffffff, sum>>32|1
	n := uint64(len(k.bits)) * 64
	return [3]uint64{h1 % n, (h1 + h2) % n, (h1 + 2*h2) % n}
}

func (k *known) add(id uint64, key string) {
	for _, i := range k.at(id, key) {
		k.bits[i/64].Or(1 << (i % 64))
	}
}

func (k *known) has(id uint64, key string) bool {
	for _, i := range k.at(id, key) {
		if k.bits[i/64].Load()&(1<<(i%64)) == 0 {
			return false
		}
	}
	return true
}

// knownSeedMax is the most bucket rows Open reads into the filter of known
// buckets (seedKnown): from about a million on the filter says "seen" of
// nearly every bucket anyway. knownSeedPage is the rows of one read.
const (
	knownSeedMax  = 1 << 20
	knownSeedPage = 10000
)

// seedKnown reads the buckets already in the database into the filter of
// known buckets, in primary-key order, up to knownSeedMax rows: a Store
// started on a database that others (or this process before a restart)
// wrote would otherwise presume those buckets new, and each presumption
// fails its batch's write and sends the batch to a read. On a database of
// 100,000 buckets that halved spread throughput until most of them had been
// seen, for minutes (docs/mysql.md "Group commit"). While the decision
// cache has room, it keeps the rows read too (warm): a batch with one
// bucket the cache lacks is decided on a read, so a cold cache cost a
// restarted Store about half its spread throughput until nearly every
// bucket had been written again, for a minute or more (docs/mysql.md "A
// warm start"). The filter and the rows are hints: a failed read ends the
// seeding, what it missed is learnt as before, and a cached row that
// changed since fails its write's compare-and-set as any other.
func (s *Store) seedKnown(ctx context.Context) {
	if s.cache == nil {
		return
	}
	w := &warmer{s: s, limits: map[uint64]*limitRow{}, on: !s.warmOff}
	if w.on {
		var clock int64
		if err := s.db.QueryRowContext(ctx, "SELECT "+clockSQL).Scan(&clock); err != nil {
			return
		}
		s.cache.sawClock(clock)
	}
	var lim uint64
	key := []byte{}
	for n := 0; n < knownSeedMax; {
		got, err := s.seedPage(ctx, &lim, &key, w)
		n += got
		if err != nil || got < s.seedRows {
			return
		}
	}
}

// warmer keeps the rows seedKnown reads in the cache while on: until the
// cache is full or a limit's row cannot be read.
type warmer struct {
	s      *Store
	on     bool
	limits map[uint64]*limitRow // read so far, by id
}

// seedPage reads the next page of buckets after (lim, key) into the filter
// (and their rows into the cache while w is on), moves (lim, key) to its
// last, and returns how many it read.
func (s *Store) seedPage(ctx context.Context, lim *uint64, key *[]byte, w *warmer) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	cols := "limit_id, bkey"
	if w.on {
		cols += ", version, level, updated_us, extra, hseq, last_us"
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+cols+` FROM budgetd_buckets
		WHERE limit_id > ? OR limit_id = ? AND bkey > ? ORDER BY limit_id, bkey LIMIT ?`, *lim, *lim, *key, s.seedRows)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var page []warmRow
	n := 0
	for rows.Next() {
		var r warmRow
		dest := []any{lim, key}
		if w.on {
			dest = append(dest, &r.b.version, &r.level, &r.updated, &r.extra, &r.b.hseq, &r.b.last)
		}
		if err := rows.Scan(dest...); err != nil {
			return n, err
		}
		s.cache.known.add(*lim, string(*key))
		if w.on {
			r.id, r.b.key, r.b.exists = *lim, string(*key), true
			page = append(page, r)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	rows.Close()
	w.keep(ctx, page)
	return n, nil
}

// warmRow is a bucket's row as seedPage reads it.
type warmRow struct {
	id      uint64
	b       bucketRow
	level   string
	updated int64
	extra   sql.NullString
}

// keep puts rows in the cache, each with its limit's row, behind every
// entry it has, until the cache is full; then, or when a row cannot be
// read, w is off.
func (w *warmer) keep(ctx context.Context, rows []warmRow) {
	for _, r := range rows {
		if !w.on {
			return
		}
		lim, err := w.limit(ctx, r.id)
		if err == nil {
			err = r.b.decode(r.level, r.updated, r.extra)
		}
		w.on = err == nil && w.s.cache.warm(lim, r.b, len(r.extra.String))
	}
}

// limit returns the row of the limit with id, read once, with its
// overrides (readLimitSet, by the name the id has).
func (w *warmer) limit(ctx context.Context, id uint64) (*limitRow, error) {
	if l, ok := w.limits[id]; ok {
		return l, nil
	}
	var name string
	if err := w.s.db.QueryRowContext(ctx, "SELECT name FROM budgetd_limits WHERE id = ?", id).Scan(&name); err != nil {
		return nil, err
	}
	l, err := w.s.readLimitSet(ctx, w.s.db, name)
	if err == nil && l.id != id {
		err = errConflict // put again since: its buckets are gone
	}
	if err != nil {
		return nil, err
	}
	w.limits[id] = &l
	return &l, nil
}

func newDecisionCache(entries, bytes int) *decisionCache {
	c := &decisionCache{maxEntries: entries, maxBytes: bytes, skew: cacheSkew, cool: cacheCool, t: newSlotTable(entries), known: newKnown(knownBits)}
	for i := range c.stripes {
		c.stripes[i] = make(chan struct{}, 1)
	}
	return c
}

// cacheable says whether a decision with opts may be made on the cache: not
// a Commit's or a Release's, which read their hold.
func cacheable(opts []readOpt) bool {
	return !slices.ContainsFunc(opts, func(o readOpt) bool { return o.hold != "" })
}

// lock takes the stripes of refs, in order, and returns their release.
func (c *decisionCache) lock(ctx context.Context, refs []ledger.BucketRef) (func(), error) {
	idx := make([]uint32, 0, len(refs))
	for _, r := range refs {
		h := fnv.New32a()
		h.Write([]byte(r.Limit))
		h.Write([]byte{0})
		h.Write([]byte(r.Key))
		idx = append(idx, h.Sum32()%cacheStripes)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	unlock := func(n int) {
		for _, i := range idx[:n] {
			<-c.stripes[i]
		}
	}
	for n, i := range idx {
		select {
		case c.stripes[i] <- struct{}{}:
		case <-ctx.Done():
			unlock(n)
			return nil, ctx.Err()
		}
	}
	return func() { unlock(len(idx)) }, nil
}

// sawClock keeps the database's clock that a read returned just now, plus
// the time since, as the estimate of the database's clock when it is the
// greater of the two lower bounds (a read whose goroutine stalled before it
// got here returns an older one), or when a cached write failed since the
// last (perhaps on the clock guard: the database's clock stepped back).
func (c *decisionCache) sawClock(us int64) {
	if c == nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	if c.clockAt.IsZero() || c.clockReset || us > c.clockUS+now.Sub(c.clockAt).Microseconds() {
		c.clockUS, c.clockAt, c.clockReset = us, now, false
	}
	c.mu.Unlock()
}

// saw notes the buckets of v that a read found rows of (known).
func (c *decisionCache) saw(v *view) {
	if c == nil {
		return
	}
	for i, b := range v.buckets {
		if b.exists {
			c.known.add(v.limits[i].id, b.key)
		}
	}
}

// view returns a view of refs from the cache, without its clock, or false
// when one of them is missing.
func (c *decisionCache) view(refs []ledger.BucketRef) (*view, int64, bool) {
	v, clock, _, ok := c.viewOf(refs, false)
	return v, clock, ok
}

// viewOf is view; with presume, a bucket the cache has no entry of (while
// it has its limit's) and that this Store never saw a row of (known) is
// taken as new, an empty bucket without a row, and presumed reports whether
// one was: its write inserts the row, which fails on a duplicate key when
// the bucket was not new after all (another instance wrote it).
func (c *decisionCache) viewOf(refs []ledger.BucketRef, presume bool) (v *view, clock int64, presumed, ok bool) {
	v = &view{limits: make([]limitRow, len(refs)), base: make([]ledger.Limit, len(refs)), buckets: make([]bucketRow, len(refs)), dirty: make([]bool, len(refs)), entries: make([][]entryRow, len(refs)), cached: true}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clockAt.IsZero() {
		c.misses.Add(1)
		return nil, 0, false, false
	}
	t := &c.t
	for i, r := range refs {
		li, ok := t.find(cacheKey{name: r.Limit})
		if !ok || t.limit(li) == nil {
			c.misses.Add(1)
			return nil, 0, false, false
		}
		lim := *t.limit(li)
		bi, ok := t.find(cacheKey{id: lim.id, name: r.Key})
		if !ok && presume && !c.known.has(lim.id, r.Key) {
			t.touch(li)
			v.limits[i], v.buckets[i], presumed = lim, bucketRow{key: r.Key}, true
			continue
		}
		if !ok || t.suspect(bi) {
			c.misses.Add(1)
			return nil, 0, false, false
		}
		if _, cooling := t.cooling(bi); cooling {
			c.misses.Add(1)
			return nil, 0, false, false
		}
		t.touch(li)
		t.touch(bi)
		v.limits[i], v.buckets[i] = lim, t.row(bi, r.Key)
	}
	c.hits.Add(1)
	return v, c.clockUS + time.Since(c.clockAt).Microseconds(), presumed, true
}

// wrote keeps the rows that v's write, just committed, wrote: each as a read
// of it would return it, with the limit row it was decided with.
func (c *decisionCache) wrote(v *view) {
	if c == nil {
		return
	}
	for i, d := range v.dirty {
		if !d {
			continue
		}
		old := v.buckets[i]
		level, updated, extra, err := encodeState(old.state, old.marks, old.grants, old.carry)
		b := bucketRow{key: old.key, exists: true, version: old.version + 1, hseq: old.hseq, last: max(old.last, v.now.UnixMicro())}
		if !old.exists {
			b.version = 1
		}
		if err == nil {
			err = b.decode(level, updated, extra)
		}
		lim := &v.limits[i]
		k := cacheKey{id: lim.id, name: b.key}
		c.known.add(lim.id, b.key)
		c.mu.Lock()
		var version uint64
		var last int64
		var suspect bool
		var cool time.Time
		if i, ok := c.t.find(k); ok {
			version, last = c.t.stamp(i)
			suspect = c.t.suspect(i)
			cool, _ = c.t.cooling(i)
		}
		switch {
		case suspect && c.cool > 0 && (version != old.version || last != old.last || !old.exists):
			// Another instance wrote it since this one did: cool.
			c.put(cacheEntry{k: k, size: coolEntrySize + len(k.name), cool: time.Now().Add(c.cool)})
		case time.Now().Before(cool):
			// Cooling.
		case err != nil:
			c.remove(k)
		default:
			c.keepLimit(lim, v.base[i])
			c.put(cacheEntry{k: k, b: b, size: bucketEntrySize + len(b.key) + len(extra.String)})
		}
		c.mu.Unlock()
	}
}

// keepLimit keeps lim, with base as its limit, as its limit's entry, the
// most recently used. The entry it has of the same row (id, rev, overrides)
// stays: a limit's row changes only with its rev, and most writes would
// otherwise copy a limit's row that the cache has already. Under mu.
func (c *decisionCache) keepLimit(lim *limitRow, base ledger.Limit) {
	k := cacheKey{name: base.Name}
	if i, ok := c.t.find(k); ok {
		if e := c.t.limit(i); e != nil && e.id == lim.id && e.rev == lim.rev && e.oseq == lim.oseq && e.set == lim.set {
			c.t.touch(i)
			return
		}
	}
	row := *lim
	row.limit = base
	c.put(cacheEntry{k: k, lim: &row, size: 512})
}

// warm keeps b, a bucket's row as read when the Store opened, with lim, its
// limit's row, unless the cache has an entry of it: behind every entry (it
// is used least recently), so that it never evicts one. It returns false,
// keeping nothing, when the cache has no room for it.
func (c *decisionCache) warm(lim *limitRow, b bucketRow, extra int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	size := bucketEntrySize + len(b.key) + extra
	if c.t.n+2 > c.maxEntries || c.t.bytes+size+512 > c.maxBytes || size > c.maxBytes/16 {
		return false
	}
	if lk := (cacheKey{name: lim.limit.Name}); !c.has(lk) {
		c.put(cacheEntry{k: lk, lim: lim, size: 512})
	}
	if k := (cacheKey{id: lim.id, name: b.key}); !c.has(k) {
		c.t.add(&cacheEntry{k: k, b: b, size: size}, false)
	}
	return true
}

// drop forgets v's buckets: the write of a decision on them failed. After
// a conflict they are suspect: when the read that follows finds one changed
// since this Store wrote it (wrote), it is not cached again for c.cool.
func (c *decisionCache) drop(v *view, conflict bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, b := range v.buckets {
		k := cacheKey{id: v.limits[i].id, name: b.key}
		c.remove(k)
		if conflict && b.exists { // not a bucket presumed new (viewOf)
			c.put(cacheEntry{k: k, b: bucketRow{version: b.version, last: b.last}, size: coolEntrySize + len(k.name), suspect: true})
		}
	}
	c.clockReset = true
}

// put adds or replaces e, the most recently used entry now, and evicts the
// least recently used entries beyond the bounds. An entry too large for the
// cache is not kept. A replaced entry keeps its slot and key. Under mu.
func (c *decisionCache) put(e cacheEntry) {
	if e.size > c.maxBytes/16 {
		c.remove(e.k)
		return
	}
	t := &c.t
	if i, ok := t.index[t.hash(e.k)]; ok && t.is(i, e.k) {
		t.set(i, &e)
		t.touch(i)
	} else {
		if ok { // another key of the same hash: the newer is kept
			t.removeAt(i)
		}
		for t.n > 0 && (t.n >= c.maxEntries || t.bytes+e.size > c.maxBytes) {
			t.removeAt(t.tail) // first, so that its slot is the new entry's
		}
		t.add(&e, true)
	}
	for t.n > c.maxEntries || t.bytes > c.maxBytes {
		t.removeAt(t.tail)
	}
}

// has says whether the cache has an entry of k. Under mu.
func (c *decisionCache) has(k cacheKey) bool {
	_, ok := c.t.find(k)
	return ok
}

// remove forgets k's entry. Under mu.
func (c *decisionCache) remove(k cacheKey) {
	if i, ok := c.t.find(k); ok {
		c.t.removeAt(i)
	}
}

// decideCached makes the decision fn on the cached rows of refs with one
// round trip, or returns errMiss when it cannot (a row is not cached, the
// decision fails or writes nothing, or the write finds a row changed or the
// clock estimate off): the caller decides again on a read. (A group
// commit's batch is decided so too, decideBatch.)
func (s *Store) decideCached(ctx context.Context, refs []ledger.BucketRef, fn func(v *view) error) error {
	v, clock, ok := s.cache.view(refs)
	if !ok {
		return errMiss
	}
	v.guard = !s.at(v, clock)
	if err := fn(v); err != nil {
		// Perhaps an answer to stale terms: decide on a read.
		return errMiss
	}
	return s.send(ctx, nil, v)
}

// errEmpty is a cached decision that writes nothing: it checks nothing
// either, and a denial must be of the rows as they are, so it is made again
// on a read.
var errEmpty = fmt.Errorf("%w: nothing to write", errMiss)

// send sends the one write of what v's decisions changed: on conn after
// v's read, or on a connection of its own for a cached view. It returns
// errMiss when the decisions must be made again on a read: the write is
// not sent (it cannot be encoded, or a cached view writes nothing: a
// decision that writes nothing checks nothing either, and a denial must be
// of the rows as they are) or finds a row, a limit, an Idempotency-Key's
// record or the clock other than v's decisions assumed. A view read writes
// nothing for denials alone: they are of the rows as read.
func (s *Store) send(ctx context.Context, conn *sql.Conn, v *view) error {
	for i, b := range v.buckets {
		if v.cached && !b.exists && !v.dirty[i] {
			// A bucket presumed new (viewOf) that the decisions do not
			// write is not checked by an insert: decide on a read.
			return errEmpty
		}
	}
	query, args, err := s.writeSQL(v, true, true)
	switch {
	case err != nil:
		return errMiss
	case query == "" && v.cached:
		return errEmpty
	case query == "":
		return nil
	}
	if conn != nil {
		if _, err = conn.ExecContext(ctx, query, args...); err != nil {
			rollback(ctx, conn)
			err = classify(err)
		}
	} else {
		err = s.exec(ctx, query, args)
	}
	if err != nil {
		s.cache.drop(v, v.cached && errors.Is(err, errConflict))
		if errors.Is(err, errConflict) {
			if v.cached {
				s.cache.conflicts.Add(1)
			}
			return errMiss
		}
		return err // the outcome is unknown: the rows are no longer cached
	}
	s.cache.wrote(v)
	return nil
}

// exec runs a multi-statement write on a connection of its own and rolls
// back what a failed write left open.
func (s *Store) exec(ctx context.Context, query string, args []any) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return classify(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, query, args...); err != nil {
		rollback(ctx, conn)
		return classify(err)
	}
	return nil
}

// CacheStats returns the decision cache's hits, misses and the cached
// decisions whose write found a row changed (zeros when it is off).
func (s *Store) CacheStats() (hits, misses, conflicts int64) {
	if s.cache == nil {
		return 0, 0, 0
	}
	return s.cache.hits.Load(), s.cache.misses.Load(), s.cache.conflicts.Load()
}
