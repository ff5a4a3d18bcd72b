// Package ovset keeps a limit's overrides for resolution without pointers
// for the garbage collector to mark: the memory store's overrides, and each
// Redis instance's copy of a limit's overrides.
package ovset

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// Set is one limit's overrides, resolved as ledger.Overrides
// resolves them (the exact key, else the longest prefix, skipping expired
// ones; one lookup per distinct prefix length) and answering the same
// ledger.Override values, but laid out without pointers: a limit with
// 100,000 overrides must cost a decision within 10% of one without (SPEC
// "Terms per customer"), and the garbage collector would otherwise scan
// every override's strings, decimals and times at each cycle
// (docs/terms.md#the-memory-stores-layout). Each override is a fixed-size
// record of integers (amounts as coefficient and exponent, times as Unix
// counts, the zone as an index into a small table of interned names); a
// pattern lies in its record when short, else in one byte arena; the
// indexes map a seeded hash of a pattern to its record, records with the
// same hash chained. Changes (Put, Delete) need the set to themselves;
// reads (Get, Resolve, Effective, Candidates, List, MayExpire) may run
// concurrently with one another: the store guards it with a read-write
// lock (the memory store's limitsMu, a Redis instance's per limit).
type Set struct {
	recs    []overrideRec
	free    []uint32 // indexes of deleted records, reused by Put
	arena   []byte   // the patterns longer than inlinePattern, "*" included
	garbage int      // bytes of arena that no record uses
	exact   map[uint64]uint32
	prefix  map[uint64]uint32 // by the hash of the prefix, without "*"
	lengths []int             // distinct prefix lengths, longest first
	counts  map[int]int       // prefixes of each length
	zones   []string          // interned time zone names
	zoneOf  map[string]uint32 // zone name → index+1 in zones
	// odd keeps, by record index, the few overrides whose amounts do not
	// fit a record (a coefficient beyond int64, as in "1.000…0" written
	// with many zeros), as they were put.
	odd  map[uint32]ledger.Override
	seed maphash.Seed
	n    int
	// rules counts the overrides that change a rule (a leak rate, a zone
	// or start day, a window length), expired ones included.
	rules int
	// expiring counts the overrides with an expiry, expired ones included,
	// and lastExpiry is the latest expiry ever put (Unix microseconds,
	// never lowered): a bucket written at or after it, or in a set without
	// both an expiring override and one that changes a rule, has no end of
	// a temporary rule change to settle (MayExpire).
	expiring   int
	lastExpiry int64
	// gen counts the changes of s (every Put and Delete), and memo keeps,
	// per record index modulo memoSlots, a record as Effective last built
	// it, valid while gen is the same: a hot key pays no decoding and no
	// allocation for its override (docs/terms.md#measurements-100000-overrides).
	// seen is the record that last missed in each slot: a record is kept
	// from its second resolution in a row on its slot, so that a load
	// spread over many keys allocates no memo. Readers run concurrently,
	// so the slots are atomic; a change has the set to itself.
	gen  uint64
	memo [memoSlots]atomic.Pointer[ovMemo]
	seen [memoSlots]atomic.Uint32
}

// memoSlots is how many decoded overrides an Set keeps (memo).
const memoSlots = 256

// ovMemo is record rec (index+1) as decoded at the set's change gen.
type ovMemo struct {
	rec uint32
	gen uint64
	o   ledger.Override
}

// overrideRec is one override, without pointers. Indexes into recs are
// stored plus one, so that 0 means none. What a lookup reads comes first,
// in the first 56 bytes: the chain, the flags, a pattern of up to
// inlinePattern bytes itself (a longer one lies in the arena) and the
// expiry.
type overrideRec struct {
	off, plen          uint32 // the pattern: inl[:plen], or arena[off : off+plen] when longer
	next               uint32 // the next record with the same hash
	flags              uint8
	inl                [inlinePattern]byte
	expires            int64 // Unix microseconds, when flagExpires
	capExp, leakExp    int32
	capCoef, leakCoef  int64
	leakPer, window    int64 // nanoseconds
	zone               uint32
	startDay           int32
	created, updated   int64 // Unix seconds
	createdNs, updNano int32
}

// inlinePattern is the longest pattern kept in its record.
const inlinePattern = 32

const (
	flagLive uint8 = 1 << iota
	flagPrefix
	flagCapacity
	flagExpires
	flagOdd
	flagRule
)

// compactAt is the garbage in the arena (bytes, and at least half of it)
// from which Delete copies the live patterns to a new arena.
const compactAt = 1 << 16

// Len returns how many overrides there are, expired ones included.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// pattern returns the pattern of record i as it lies in the arena, without
// copying: only for comparisons that do not keep it.
func (s *Set) pattern(i uint32) []byte {
	r := &s.recs[i]
	if r.plen <= inlinePattern {
		return r.inl[:r.plen]
	}
	return s.arena[r.off : r.off+r.plen]
}

// find returns the index+1 of the record of p (a key, or a prefix without
// "*") in index m, and 0 when there is none.
func (s *Set) find(m map[uint64]uint32, p string, prefix bool) uint32 {
	cut := uint32(0)
	if prefix {
		cut = 1
	}
	for i := m[maphash.String(s.seed, p)]; i != 0; i = s.recs[i-1].next {
		b := s.pattern(i - 1)
		if string(b[:len(b)-int(cut)]) == p {
			return i
		}
	}
	return 0
}

// index returns the index of a pattern's kind, with its key or prefix.
func (s *Set) index(pattern string) (map[uint64]uint32, string, bool) {
	p, prefix := ledger.Override{Pattern: pattern}.Prefix()
	if prefix {
		return s.prefix, p, true
	}
	return s.exact, p, false
}

// Put adds o or replaces the override of its pattern.
func (s *Set) Put(o ledger.Override) {
	s.gen++
	if s.exact == nil {
		s.exact, s.prefix, s.counts, s.zoneOf = map[uint64]uint32{}, map[uint64]uint32{}, map[int]int{}, map[string]uint32{}
		s.seed = maphash.MakeSeed()
	}
	m, p, prefix := s.index(o.Pattern)
	i := s.find(m, p, prefix)
	if i == 0 {
		i = s.add(m, o.Pattern, p, prefix)
	}
	r := &s.recs[i-1]
	if r.flags&flagRule != 0 {
		s.rules--
	}
	if r.flags&flagExpires != 0 {
		s.expiring--
	}
	r.flags &= flagLive | flagPrefix
	if ChangesRule(o) {
		r.flags |= flagRule
		s.rules++
	}
	delete(s.odd, i-1)
	if !o.ExpiresAt.IsZero() {
		s.expiring++
		s.lastExpiry = max(s.lastExpiry, o.ExpiresAt.UnixMicro())
	}
	if !s.encode(r, o) {
		r.flags |= flagOdd
		if s.odd == nil {
			s.odd = map[uint32]ledger.Override{}
		}
		s.odd[i-1] = o
	}
}

// add stores a new record of pattern (p its key or prefix) in index m and
// returns its index+1.
func (s *Set) add(m map[uint64]uint32, pattern, p string, prefix bool) uint32 {
	var i uint32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1]+1, s.free[:n-1]
	} else {
		s.recs = append(s.recs, overrideRec{})
		i = uint32(len(s.recs))
	}
	h := maphash.String(s.seed, p)
	r := &s.recs[i-1]
	*r = overrideRec{plen: uint32(len(pattern)), next: m[h], flags: flagLive}
	if len(pattern) <= inlinePattern {
		copy(r.inl[:], pattern)
	} else {
		r.off = uint32(len(s.arena))
		s.arena = append(s.arena, pattern...)
	}
	m[h] = i
	s.n++
	if prefix {
		s.recs[i-1].flags |= flagPrefix
		s.counts[len(p)]++
		if s.counts[len(p)] == 1 {
			s.lengths = append(s.lengths, len(p))
			sort.Sort(sort.Reverse(sort.IntSlice(s.lengths)))
		}
	}
	return i
}

// ChangesRule reports whether o sets a term of a bucket's rule: a leak
// rate, a zone or start day, a window length (not a capacity).
func ChangesRule(o ledger.Override) bool {
	return o.LeakPer != 0 || o.TZ != "" || o.StartDay != 0 || o.WindowLength != 0
}

// ChangesRules reports whether any override of s changes a rule.
func (s *Set) ChangesRules() bool { return s != nil && s.rules > 0 }

// encode writes o's terms into r and reports whether they fit. The expiry
// is written first: resolve reads it from r even when o is kept whole.
func (s *Set) encode(r *overrideRec, o ledger.Override) bool {
	r.expires = 0
	if !o.ExpiresAt.IsZero() {
		r.flags |= flagExpires
		r.expires = o.ExpiresAt.UnixMicro()
	}
	var ok bool
	if o.Capacity.Valid {
		r.flags |= flagCapacity
		if r.capCoef, r.capExp, ok = fixed(o.Capacity.Decimal); !ok {
			return false
		}
	} else {
		r.capCoef, r.capExp = 0, 0
	}
	if r.leakCoef, r.leakExp, ok = fixed(o.LeakAmount); !ok {
		return false
	}
	r.leakPer, r.window, r.startDay = int64(o.LeakPer), int64(o.WindowLength), int32(o.StartDay)
	if int(r.startDay) != o.StartDay {
		return false
	}
	r.zone = 0
	if o.TZ != "" {
		z, ok := s.zoneOf[o.TZ]
		if !ok {
			s.zones = append(s.zones, o.TZ)
			z = uint32(len(s.zones))
			s.zoneOf[o.TZ] = z
		}
		r.zone = z
	}
	if r.flags&flagExpires != 0 && !time.UnixMicro(r.expires).Equal(o.ExpiresAt) {
		return false // finer than a microsecond: kept whole, resolved at the microsecond
	}
	r.created, r.createdNs = o.CreatedAt.Unix(), int32(o.CreatedAt.Nanosecond())
	r.updated, r.updNano = o.UpdatedAt.Unix(), int32(o.UpdatedAt.Nanosecond())
	return true
}

// fixed returns d as a coefficient and exponent, and false when the
// coefficient does not fit an int64. The zero Decimal is 0, 0.
func fixed(d decimal.Decimal) (int64, int32, bool) {
	c := d.Coefficient()
	if !c.IsInt64() {
		return 0, 0, false
	}
	return c.Int64(), d.Exponent(), true
}

// decimalOf is the Decimal that fixed returned coef and exp for; 0, 0 is
// the zero Decimal, as it was put.
func decimalOf(coef int64, exp int32) decimal.Decimal {
	if coef == 0 && exp == 0 {
		return decimal.Decimal{}
	}
	return decimal.New(coef, exp)
}

// override returns record i as the ledger.Override it was put as.
func (s *Set) override(i uint32) ledger.Override {
	r := &s.recs[i]
	if r.flags&flagOdd != 0 {
		return s.odd[i]
	}
	o := ledger.Override{
		Pattern:      string(s.pattern(i)),
		LeakAmount:   decimalOf(r.leakCoef, r.leakExp),
		LeakPer:      time.Duration(r.leakPer),
		StartDay:     int(r.startDay),
		WindowLength: time.Duration(r.window),
		CreatedAt:    time.Unix(r.created, int64(r.createdNs)).UTC(),
		UpdatedAt:    time.Unix(r.updated, int64(r.updNano)).UTC(),
	}
	if r.flags&flagCapacity != 0 {
		o.Capacity = decimal.NewNullDecimal(decimalOf(r.capCoef, r.capExp))
	}
	if r.zone != 0 {
		o.TZ = s.zones[r.zone-1]
	}
	if r.flags&flagExpires != 0 {
		o.ExpiresAt = time.UnixMicro(r.expires).UTC()
	}
	return o
}

// activeAt reports whether record i applies at now (in Unix microseconds,
// rounded down: an expiry is a whole microsecond).
func (s *Set) activeAt(i uint32, now int64) bool {
	r := &s.recs[i]
	return r.flags&flagExpires == 0 || now < r.expires
}

// Get returns the override of pattern, expired or not.
func (s *Set) Get(pattern string) (ledger.Override, bool) {
	if s == nil || s.exact == nil {
		return ledger.Override{}, false
	}
	m, p, prefix := s.index(pattern)
	if i := s.find(m, p, prefix); i != 0 {
		return s.override(i - 1), true
	}
	return ledger.Override{}, false
}

// Delete removes the override of pattern and reports whether there was one.
func (s *Set) Delete(pattern string) bool {
	if s == nil || s.exact == nil {
		return false
	}
	m, p, prefix := s.index(pattern)
	i := s.find(m, p, prefix)
	if i == 0 {
		return false
	}
	s.gen++
	h := maphash.String(s.seed, p)
	if m[h] == i {
		if next := s.recs[i-1].next; next != 0 {
			m[h] = next
		} else {
			delete(m, h)
		}
	} else {
		j := m[h]
		for s.recs[j-1].next != i {
			j = s.recs[j-1].next
		}
		s.recs[j-1].next = s.recs[i-1].next
	}
	if s.recs[i-1].flags&flagRule != 0 {
		s.rules--
	}
	if s.recs[i-1].flags&flagExpires != 0 {
		s.expiring--
	}
	if n := s.recs[i-1].plen; n > inlinePattern {
		s.garbage += int(n)
	}
	s.recs[i-1] = overrideRec{}
	delete(s.odd, i-1)
	s.free = append(s.free, i-1)
	s.n--
	if prefix {
		s.counts[len(p)]--
		if s.counts[len(p)] == 0 {
			delete(s.counts, len(p))
			k := sort.Search(len(s.lengths), func(k int) bool { return s.lengths[k] <= len(p) })
			s.lengths = slices.Delete(s.lengths, k, k+1)
		}
	}
	if s.garbage >= compactAt && s.garbage*2 >= len(s.arena) {
		s.compact()
	}
	return true
}

// compact copies the live patterns to a new arena.
func (s *Set) compact() {
	arena := make([]byte, 0, len(s.arena)-s.garbage)
	for i := range s.recs {
		r := &s.recs[i]
		if r.flags&flagLive == 0 || r.plen <= inlinePattern {
			continue
		}
		off := uint32(len(arena))
		arena = append(arena, s.arena[r.off:r.off+r.plen]...)
		r.off = off
	}
	s.arena, s.garbage = arena, 0
}

// resolve returns the index+1 of the record that applies to key at now:
// the exact one, else the one of the longest prefix of key, skipping
// expired ones; 0 for none.
func (s *Set) resolve(key string, now time.Time) uint32 {
	if s == nil || s.exact == nil {
		return 0
	}
	us := now.UnixMicro()
	if i := s.find(s.exact, key, false); i != 0 && s.activeAt(i-1, us) {
		return i
	}
	for _, n := range s.lengths {
		if n > len(key) {
			continue
		}
		if i := s.find(s.prefix, key[:n], true); i != 0 && s.activeAt(i-1, us) {
			return i
		}
	}
	return 0
}

// Resolve returns the override that applies to key at now, as
// ledger.Overrides.Resolve does: s is a ledger.Resolver, for
// ledger.SettleExpiries.
func (s *Set) Resolve(key string, now time.Time) (ledger.Override, bool) {
	if i := s.resolve(key, now); i != 0 {
		return s.memoized(i), true
	}
	return ledger.Override{}, false
}

// MayExpire reports whether ledger.SettleExpiries has anything to settle
// for key's bucket last written at updated (Unix microseconds, not 0): the
// override that applied to it then has an expiry, by now, and some
// override of s changes a rule. It is the same first test SettleExpiries
// makes, without building an Override: nothing is allocated, and a set
// without an expiring override, or a bucket written since the latest
// expiry, costs two comparisons, inlined. s is not nil.
func (s *Set) MayExpire(key string, updated int64, now time.Time) bool {
	return s.rules != 0 && s.expiring != 0 && updated < s.lastExpiry && s.expiredAt(key, updated, now)
}

// expiredAt is the rest of MayExpire: the override that applied to key at
// updated has an expiry, by now.
func (s *Set) expiredAt(key string, updated int64, now time.Time) bool {
	i := s.resolve(key, time.UnixMicro(updated))
	if i == 0 {
		return false
	}
	r := &s.recs[i-1]
	return r.flags&flagExpires != 0 && r.expires <= now.UnixMicro()
}

// Effective returns l as it applies to key at now: with the override that
// resolves (ledger.Override.Apply), or l itself.
func (s *Set) Effective(l ledger.Limit, key string, now time.Time) ledger.Limit {
	if i := s.resolve(key, now); i != 0 {
		return s.memoized(i).Apply(l)
	}
	return l
}

// Candidates calls fn with each override whose pattern covers key, expired
// ones included, most specific first (the exact one, then the prefixes
// longest first), until fn returns false, as ledger.Overrides.Candidates
// does.
func (s *Set) Candidates(key string, fn func(ledger.Override) bool) {
	if s == nil || s.exact == nil {
		return
	}
	if i := s.find(s.exact, key, false); i != 0 && !fn(s.memoized(i)) {
		return
	}
	for _, n := range s.lengths {
		if n > len(key) {
			continue
		}
		if i := s.find(s.prefix, key[:n], true); i != 0 && !fn(s.memoized(i)) {
			return
		}
	}
}

// memoized is s.override(i-1), from memo while no change of s came since
// it was decoded (gen): a key that decisions keep coming back to (a hot
// key) decodes its override once, and its decisions allocate nothing for
// it. A record deleted and its index reused by a Put is a change too.
// Concurrent readers may each decode and store the same record, any of
// which is right.
func (s *Set) memoized(i uint32) ledger.Override {
	slot := &s.memo[i%memoSlots]
	if m := slot.Load(); m != nil && m.rec == i && m.gen == s.gen {
		return m.o
	}
	if s.seen[i%memoSlots].Swap(i) != i {
		return s.override(i - 1) // its first resolution in a row on its slot: kept at its next
	}
	m := &ovMemo{rec: i, gen: s.gen, o: s.override(i - 1)}
	slot.Store(m)
	return m.o
}

// List returns up to n overrides active at now with patterns > after, in
// byte order of pattern.
func (s *Set) List(after string, n int, now time.Time) []ledger.Override {
	if s == nil {
		return nil
	}
	us := now.UnixMicro()
	var idx []uint32
	for i := range s.recs {
		if s.recs[i].flags&flagLive != 0 && string(s.pattern(uint32(i))) > after && s.activeAt(uint32(i), us) {
			idx = append(idx, uint32(i))
		}
	}
	if len(idx) == 0 {
		return nil
	}
	slices.SortFunc(idx, func(a, b uint32) int { return bytes.Compare(s.pattern(a), s.pattern(b)) })
	out := make([]ledger.Override, 0, len(idx))
	for _, i := range idx[:max(0, min(n, len(idx)))] {
		out = append(out, s.override(i))
	}
	return out
}
