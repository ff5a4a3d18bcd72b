package mysql

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// TestKnown: the filter of buckets seen never says "not seen" of a bucket
// added, and of a million added it says "seen" of few buckets never added
// (each costs its batch a read, as without presumption), nor confuses one
// limit's bucket with the same key of another.
func TestKnown(t *testing.T) {
	k := newKnown(knownBits)
	const n = 1_000_000
	for i := range n {
		k.add(7, fmt.Sprint("k", i))
	}
	for i := range n {
		if !k.has(7, fmt.Sprint("k", i)) {
			t.Fatalf("k%d added, not seen", i)
		}
	}
	wrong := 0
	for i := range n / 10 {
		if k.has(7, fmt.Sprint("new", i)) {
			wrong++
		}
		if k.has(8, fmt.Sprint("k", i)) {
			wrong++
		}
	}
	// Three bits of 8 Mbit for each of a million buckets: (1-e^(-3/8))^3,
	// about 3.1% of the buckets never added are taken as seen.
	if rate := float64(wrong) / float64(2*n/10); rate > 0.05 {
		t.Errorf("%.1f%% of buckets never added taken as seen, want at most 5%%", 100*rate)
	}
}

// TestCacheEntrySize: the heap a cached bucket takes is at most what the
// cache counts it at (bucketEntrySize and its key), at the default count
// of entries, where the map's share is largest; so DefaultCacheBytes bounds
// the cache's memory as docs/mysql.md says. It was 692 bytes while each
// entry held a limit's row inline, and 448 while entries were a map's,
// each with a list element and a row of its own. Other goroutines of the test binary can
// only add to a measurement, so the test keeps the smaller of two.
func TestCacheEntrySize(t *testing.T) {
	per := min(cachedBucketHeap(t), cachedBucketHeap(t))
	t.Logf("%d bytes of heap a cached bucket besides its key", per)
	if per > bucketEntrySize {
		t.Errorf("a cached bucket takes %d bytes of heap besides its key, the cache counts %d (bucketEntrySize)", per, bucketEntrySize)
	}
}

// cachedBucketHeap fills a cache with DefaultCacheEntries buckets as wrote
// keeps them and returns the live heap they added, a bucket, besides its
// key.
func cachedBucketHeap(t *testing.T) int {
	const n = DefaultCacheEntries
	c := newDecisionCache(n, 1<<40) // its stripes and filter first: fixed
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	keys := 0
	for i := range n {
		b := bucketRow{key: fmt.Sprint("k", i), exists: true, version: 3, last: 1}
		if err := b.decode("12345.5", 1_700_000_000_000_000, nullString("")); err != nil {
			t.Fatal(err)
		}
		keys += len(b.key)
		c.mu.Lock()
		c.put(cacheEntry{k: cacheKey{id: 1, name: b.key}, b: b, size: bucketEntrySize + len(b.key)})
		c.mu.Unlock()
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(c)
	return (int(m1.HeapAlloc) - int(m0.HeapAlloc) - keys) / n
}

// TestCacheWroteReuses: a decision's write on a bucket and a limit the
// cache has replaces their entries in place (put, keepLimit): the same
// slot, and the limit's row is not copied again while its rev and
// overrides are the same. The key kept is a copy of the one decided on,
// which may be a slice of a request.
func TestCacheWroteReuses(t *testing.T) {
	c := newDecisionCache(DefaultCacheEntries, DefaultCacheBytes)
	lim := limitRow{id: 1, rev: 4, limit: ledger.Limit{Name: "l"}}
	line := "POST /v1/limits/l/buckets/k/fillup HTTP/1.1"
	b := bucketRow{key: line[strings.Index(line, "/k/")+1:][:1], exists: true, version: 3, last: 1}
	if err := b.decode("12345.5", 1_700_000_000_000_000, nullString("")); err != nil {
		t.Fatal(err)
	}
	v := &view{now: time.UnixMicro(1_700_000_000_000_000), limits: []limitRow{lim}, base: []ledger.Limit{lim.limit},
		buckets: []bucketRow{b}, dirty: []bool{true}, entries: make([][]entryRow, 1)}
	c.wrote(v)
	li, _ := c.t.find(cacheKey{name: "l"})
	bi, _ := c.t.find(cacheKey{id: 1, name: "k"})
	limRow := c.t.limit(li)
	allocs := testing.AllocsPerRun(100, func() {
		v.buckets[0].version++
		c.wrote(v)
	})
	if got, ok := c.t.find(cacheKey{id: 1, name: "k"}); !ok || got != bi {
		t.Errorf("the bucket's write moved it from slot %d to %d (%v)", bi, got, ok)
	} else if r := c.t.row(got, "k"); r.version != v.buckets[0].version+1 || r.state.Level != b.state.Level || !r.state.Updated.Equal(b.state.Updated) {
		t.Errorf("the bucket's entry is %+v, want version %d of %+v", r, v.buckets[0].version+1, b.state)
	}
	if got, _ := c.t.find(cacheKey{name: "l"}); got != li || c.t.limit(got) != limRow {
		t.Error("the write replaced the limit's entry of the same rev")
	}
	if c.t.n != 2 || len(c.t.slots) != 2 {
		t.Errorf("%d entries in %d slots, want 2", c.t.n, len(c.t.slots))
	}
	t.Logf("%.0f allocations a write", allocs)

	// A new rev replaces the limit's entry.
	v.limits[0].rev++
	c.wrote(v)
	if i, _ := c.t.find(cacheKey{name: "l"}); c.t.limit(i).rev != 5 {
		t.Errorf("the limit's entry is at rev %d after a write of rev 5", c.t.limit(i).rev)
	}
}

// TestCacheSlots: the slot table keeps keys of any length and rows with
// more than a level as they were put, evicts the least recently used
// entry (a view uses both of its entries), reuses the slots it frees, and
// of two keys with one hash keeps the newer.
func TestCacheSlots(t *testing.T) {
	c := newDecisionCache(4, 1<<30)
	c.sawClock(1)
	lim := &limitRow{id: 9, rev: 1, limit: ledger.Limit{Name: "l"}}
	long := strings.Repeat("x", slotKey+1)
	full := bucketRow{key: long, exists: true, version: 2, hseq: 7, last: 11}
	if err := full.decode("1.5", 1_700_000_000_000_001, nullString(`{"holds":[{"id":"h","a":"2","x":5}],"marks":{"Sig":3},"grants":[{"id":"g"}]}`)); err != nil {
		t.Fatal(err)
	}
	put := func(b bucketRow) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.keepLimit(lim, lim.limit)
		c.put(cacheEntry{k: cacheKey{id: lim.id, name: b.key}, b: b, size: bucketEntrySize})
	}
	put(full)
	put(bucketRow{key: "a", exists: true, version: 1, last: 13})
	put(bucketRow{key: "b", exists: true, version: 1})
	v, _, ok := c.view([]ledger.BucketRef{{Limit: "l", Key: long}})
	if !ok {
		t.Fatal("no view of the bucket with a long key")
	}
	got := v.buckets[0]
	if got.key != long || got.version != 2 || got.hseq != 7 || got.last != 11 || got.state.Level != full.state.Level ||
		len(got.state.Holds) != 1 || got.state.Holds[0].ID != "h" || got.marks.Sig != 3 || len(got.grants) != 1 {
		t.Errorf("the long key's row is %+v, want %+v", got, full)
	}
	if v, l := c.t.stamp(c.must(t, lim.id, long)); v != 2 || l != 11 {
		t.Errorf("the long key's stamp is version %d, last %d; want 2, 11", v, l)
	}
	if v, l := c.t.stamp(c.must(t, lim.id, "a")); v != 1 || l != 13 {
		t.Errorf("a's stamp is version %d, last %d; want 1, 13", v, l)
	}
	got.state.Holds[0].ID = "changed"
	if c.t.row(c.must(t, lim.id, long), long).state.Holds[0].ID != "h" {
		t.Error("a view's holds are the cache's")
	}
	put(bucketRow{key: "c", exists: true, version: 1}) // evicts "a": the least recently used
	if c.has(cacheKey{id: 9, name: "a"}) || !c.has(cacheKey{id: 9, name: "b"}) || !c.has(cacheKey{id: 9, name: long}) {
		t.Errorf("after an eviction: a %v, b %v, long %v; want false, true, true",
			c.has(cacheKey{id: 9, name: "a"}), c.has(cacheKey{id: 9, name: "b"}), c.has(cacheKey{id: 9, name: long}))
	}
	if len(c.t.slots) != 4 || c.t.n != 4 {
		t.Errorf("%d entries in %d slots, want 4 in 4", c.t.n, len(c.t.slots))
	}
	// Another key of b's hash: the newer replaces b.
	c.mu.Lock()
	bi := c.must(t, 9, "b")
	other := cacheKey{id: 10, name: "b"}
	c.t.index[c.t.hash(other)] = bi
	c.mu.Unlock()
	if c.has(other) {
		t.Error("b's slot is taken for another key")
	}
	c.mu.Lock()
	c.put(cacheEntry{k: other, b: bucketRow{key: "b", exists: true, version: 4}, size: bucketEntrySize})
	c.mu.Unlock()
	if i, ok := c.t.find(other); !ok || c.t.row(i, "b").version != 4 || c.t.n != 4 {
		t.Errorf("the newer key of one hash: %v, %d entries", ok, c.t.n)
	}
}

// must returns the slot of bucket (id, key), or fails t.
func (c *decisionCache) must(t *testing.T, id uint64, key string) int32 {
	t.Helper()
	i, ok := c.t.find(cacheKey{id: id, name: key})
	if !ok {
		t.Fatalf("no entry of %d/%s", id, key)
	}
	return i
}
