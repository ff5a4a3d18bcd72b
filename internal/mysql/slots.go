package mysql

import (
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// The decision cache's entries are slots of one array, found through a map
// from a hash of their key to their index, and kept in least-recently-used
// order by links between indexes. A slot holds no pointer: a million
// entries are two large blocks the collector neither scans nor marks,
// where an entry of a map, a list element and a row of its own were four
// objects to mark, 448 bytes, and most of the collector's work under
// spread load (docs/mysql.md "A compact cache"). What does not fit a slot
// (a key longer than slotKey, a limit's row, a bucket's holds, slots,
// marks, grants or carry) is in a map of its own, by index: few entries
// have it.

// slotKey is the longest key a slot holds inline.
const slotKey = 48

// slot is one entry: a limit's (id 0, key its name, its row in
// slotTable.lims) or a bucket's (id its limit's id, key its key).
type slot struct {
	id, version, hseq uint64
	last, updated     int64 // last_us, updated_us
	level             bucket.Amount
	cool              int64 // a bucket not cached until then (sinceBase), no row; 0: none
	prev, next        int32 // toward the front (most recent) and the back; -1: none
	size              int32
	klen              uint8 // the key's length when inline
	flags             uint8
	kb                [slotKey]byte
}

const (
	slotLong    = 1 << iota // the key is in slotTable.long
	slotFull                // the bucket's row is in slotTable.full
	slotLimit               // a limit's entry (slotTable.lims)
	slotSuspect             // a cached write on it failed (cacheEntry.suspect)
)

// slotTable is the entries of a decisionCache and their order. It is not
// safe for concurrent use: the cache's mu guards it.
type slotTable struct {
	seed       maphash.Seed
	base       time.Time // the origin of slot.cool
	index      map[uint64]int32
	slots      []slot
	free       []int32
	head, tail int32 // the most and the least recently used; -1: none
	n          int
	max        int // the most entries it holds: the slots it makes room for
	bytes      int
	long       map[int32]string
	full       map[int32]*bucketRow
	lims       map[int32]*limitRow
}

func newSlotTable(max int) slotTable {
	return slotTable{max: max, seed: maphash.MakeSeed(), base: time.Now(), index: map[uint64]int32{}, head: -1, tail: -1,
		long: map[int32]string{}, full: map[int32]*bucketRow{}, lims: map[int32]*limitRow{}}
}

// cacheEntry is what put keeps: a cacheKey and its row.
type cacheEntry struct {
	k       cacheKey
	lim     *limitRow // a limit's entry: the limit as stored (base), not its terms
	b       bucketRow // a bucket's entry: the row as written
	size    int
	suspect bool
	cool    time.Time // a bucket not to cache until then (no row)
}

func (t *slotTable) hash(k cacheKey) uint64 {
	return maphash.String(t.seed, k.name) ^ k.id*0x9e3779b97f4a7c15
}

// key returns slot i's key.
func (t *slotTable) key(i int32) string {
	s := &t.slots[i]
	if s.flags&slotLong != 0 {
		return t.long[i]
	}
	return string(s.kb[:s.klen])
}

// is says whether slot i is k's.
func (t *slotTable) is(i int32, k cacheKey) bool {
	s := &t.slots[i]
	if s.id != k.id {
		return false
	}
	if s.flags&slotLong != 0 {
		return t.long[i] == k.name
	}
	return string(s.kb[:s.klen]) == k.name
}

// find returns k's slot.
func (t *slotTable) find(k cacheKey) (int32, bool) {
	i, ok := t.index[t.hash(k)]
	if !ok || !t.is(i, k) {
		return -1, false
	}
	return i, true
}

// row returns bucket slot i's row, with key and slices of its own (of a
// suspect slot: its version and last_us alone).
func (t *slotTable) row(i int32, key string) bucketRow {
	s := &t.slots[i]
	if s.flags&slotFull != 0 {
		b := *t.full[i]
		b.key = key
		b.state.Holds, b.state.Slots, b.grants = slices.Clone(b.state.Holds), slices.Clone(b.state.Slots), slices.Clone(b.grants)
		return b
	}
	b := bucketRow{key: key, exists: true, version: s.version, hseq: s.hseq, last: s.last, state: bucket.State{Level: s.level}}
	if s.updated != 0 {
		b.state.Updated = time.UnixMicro(s.updated).UTC()
	}
	return b
}

// stamp returns bucket slot i's version and last_us, as row would, without
// copying the row.
func (t *slotTable) stamp(i int32) (version uint64, last int64) {
	if t.slots[i].flags&slotFull != 0 {
		b := t.full[i]
		return b.version, b.last
	}
	return t.slots[i].version, t.slots[i].last
}

// limit returns limit slot i's row, or nil when i is a bucket's.
func (t *slotTable) limit(i int32) *limitRow { return t.lims[i] }

func (t *slotTable) suspect(i int32) bool { return t.slots[i].flags&slotSuspect != 0 }

// cooling says whether slot i is a bucket not to cache, and until when.
func (t *slotTable) cooling(i int32) (time.Time, bool) {
	c := t.slots[i].cool
	return t.base.Add(time.Duration(c)), c != 0
}

// set fills slot i with e, keeping its links and key.
func (t *slotTable) set(i int32, e *cacheEntry) {
	s := &t.slots[i]
	t.bytes += e.size - int(s.size)
	delete(t.full, i)
	delete(t.lims, i)
	s.flags &= slotLong
	s.size = int32(e.size)
	s.version, s.hseq, s.last, s.updated, s.level, s.cool = 0, 0, 0, 0, bucket.Amount{}, 0
	switch {
	case e.lim != nil:
		s.flags |= slotLimit
		t.lims[i] = e.lim
	case !e.cool.IsZero():
		s.cool = max(1, int64(e.cool.Sub(t.base)))
	case e.suspect:
		s.flags |= slotSuspect
		s.version, s.last = e.b.version, e.b.last
	default:
		b := &e.b
		s.version, s.hseq, s.last = b.version, b.hseq, b.last
		if plain(b) {
			s.level = b.state.Level
			if !b.state.Updated.IsZero() {
				s.updated = b.state.Updated.UnixMicro()
			}
		} else {
			s.flags |= slotFull
			row := *b
			row.key = ""
			t.full[i] = &row
		}
	}
}

// plain says whether b is a level and a time alone, as nearly every
// bucket's row is.
func plain(b *bucketRow) bool {
	return len(b.state.Holds) == 0 && len(b.state.Slots) == 0 && b.marks == (ledger.Marks{}) &&
		len(b.grants) == 0 && b.carry == (ledger.Carry{}) && b.state.Updated.Nanosecond()%1000 == 0
}

// add puts e in a new slot, at the front or at the back, and returns it.
func (t *slotTable) add(e *cacheEntry, front bool) int32 {
	var i int32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if len(t.slots) == cap(t.slots) && t.max > 0 {
			// Grown by a quarter, as append grows a large slice, but
			// never past the bound: each slot of room costs its size.
			grown := make([]slot, len(t.slots), len(t.slots)+min(max(1024, len(t.slots)/4), max(1, t.max-len(t.slots))))
			copy(grown, t.slots)
			t.slots = grown
		}
		t.slots = append(t.slots, slot{})
		i = int32(len(t.slots) - 1)
	}
	s := &t.slots[i]
	*s = slot{id: e.k.id, prev: -1, next: -1}
	if len(e.k.name) <= slotKey {
		s.klen = uint8(copy(s.kb[:], e.k.name))
	} else {
		s.flags = slotLong
		t.long[i] = strings.Clone(e.k.name) // its own: a request's key shares the request's line
	}
	t.set(i, e)
	t.index[t.hash(e.k)] = i
	t.n++
	if front {
		t.pushFront(i)
	} else {
		t.pushBack(i)
	}
	return i
}

// removeAt forgets slot i.
func (t *slotTable) removeAt(i int32) {
	k := cacheKey{id: t.slots[i].id, name: t.key(i)}
	if j, ok := t.index[t.hash(k)]; ok && j == i {
		delete(t.index, t.hash(k))
	}
	t.unlink(i)
	t.bytes -= int(t.slots[i].size)
	delete(t.long, i)
	delete(t.full, i)
	delete(t.lims, i)
	t.slots[i] = slot{}
	t.free = append(t.free, i)
	t.n--
}

func (t *slotTable) unlink(i int32) {
	s := &t.slots[i]
	if s.prev >= 0 {
		t.slots[s.prev].next = s.next
	} else {
		t.head = s.next
	}
	if s.next >= 0 {
		t.slots[s.next].prev = s.prev
	} else {
		t.tail = s.prev
	}
	s.prev, s.next = -1, -1
}

func (t *slotTable) pushFront(i int32) {
	s := &t.slots[i]
	s.prev, s.next = -1, t.head
	if t.head >= 0 {
		t.slots[t.head].prev = i
	} else {
		t.tail = i
	}
	t.head = i
}

func (t *slotTable) pushBack(i int32) {
	s := &t.slots[i]
	s.prev, s.next = t.tail, -1
	if t.tail >= 0 {
		t.slots[t.tail].next = i
	} else {
		t.head = i
	}
	t.tail = i
}

// touch makes slot i the most recently used.
func (t *slotTable) touch(i int32) {
	if t.head != i {
		t.unlink(i)
		t.pushFront(i)
	}
}
