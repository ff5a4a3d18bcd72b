package mysql

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/budgetd/budgetd/internal/ledger"
)

// TestKnown: the filter of buckets seen never says "not seen" of a bucket
// added, and of a million added it says "seen" of few buckets never added
// (each costs its batch a read, as without presumption), nor confuses one
// limit's bucket with the same key of another.
func TestKnown(t *testing.T) {
	k := newKnown(knownBits)
	const n = DefaultCacheEntries
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
// entry held a limit's row inline. Other goroutines of the test binary can
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
// cache has replaces their entries in place (put, keepLimit): no new list
// element, and the limit's row is not copied again while its rev and
// overrides are the same. It allocated four objects more a write when each
// write pushed a new element of both and copied the limit's row. The key
// kept is a copy of the one decided on, which may be a slice of a request.
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
	limEl, bucketEl := c.entries[cacheKey{name: "l"}], c.entries[cacheKey{id: 1, name: "k"}]
	limRow := limEl.Value.(*cacheEntry).lim
	allocs := testing.AllocsPerRun(100, func() {
		v.buckets[0].version++
		c.wrote(v)
	})
	if got := c.entries[cacheKey{id: 1, name: "k"}]; got != bucketEl {
		t.Error("the bucket's write pushed a new element")
	} else if e := got.Value.(*cacheEntry); e.b.version != v.buckets[0].version+1 {
		t.Errorf("the bucket's entry is at version %d, want %d", e.b.version, v.buckets[0].version+1)
	}
	if got := c.entries[cacheKey{name: "l"}]; got != limEl || got.Value.(*cacheEntry).lim != limRow {
		t.Error("the write replaced the limit's entry of the same rev")
	}
	// The entry has a key of its own: one from a request's path would keep
	// the request's line.
	if e := bucketEl.Value.(*cacheEntry); unsafe.StringData(e.k.name) == unsafe.StringData(b.key) || e.b.key != e.k.name {
		t.Error("the bucket's entry shares its key with the request's line")
	}
	if c.lru.Len() != 2 {
		t.Errorf("%d entries, want 2", c.lru.Len())
	}
	t.Logf("%.0f allocations a write", allocs)

	// A new rev replaces the limit's entry.
	v.limits[0].rev++
	c.wrote(v)
	if e := c.entries[cacheKey{name: "l"}].Value.(*cacheEntry); e.lim.rev != 5 {
		t.Errorf("the limit's entry is at rev %d after a write of rev 5", e.lim.rev)
	}
}
