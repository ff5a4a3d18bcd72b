// Package memory is budgetd's embedded store: every limit, bucket, hold and
// history entry lives in this process and is lost when it exits.
//
// Buckets are spread over shards, each with its own mutex, so calls on
// different keys rarely wait for each other; a multi-bucket call locks the
// shards it needs in index order. Idle empty buckets are pruned as the shard
// is written, so memory follows the number of live buckets.
package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/shopspring/decimal"
)

var _ ledger.Store = (*Store)(nil)

const (
	shardCount = 64
	// sweepEvery is how many writes to a shard trigger a sweep of it.
	sweepEvery = 1024
	// inFlightWait bounds how long a duplicate request waits for the first.
	inFlightWait = 10 * time.Second
)

// Store is the memory store. The zero value is not usable; call New.
type Store struct {
	clk storeClock

	limitsMu sync.RWMutex
	limits   map[string]ledger.Limit
	// overrides holds each limit's overrides, guarded by limitsMu.
	overrides map[string]*ovset.Set
	// grants holds each bucket's grants, oldest first, guarded by limitsMu.
	grants map[ledger.BucketRef][]ledger.Grant
	// grantWrites counts grants made, to drop expired grants now and then
	// (pruneGrants), guarded by limitsMu.
	grantWrites int

	seed   maphash.Seed
	shards [shardCount]shard
	nextID atomic.Int64

	idem   idemTable
	events eventLog
	leases leaseTable
}

// Option configures a Store.
type Option func(*Store)

// WithIdempotencyLimits bounds the Idempotency-Key records the store keeps
// (ledger.IdempotencyTTL each): at most records of them, estimated at most
// bytes of heap together (DefaultIdempotencyRecords, DefaultIdempotencyBytes).
// When they are full a call with a new key fails with
// ledger.ErrIdempotencyFull and changes nothing; calls without a key, and
// replays of stored keys, still work. Values ≤ 0 keep the default.
func WithIdempotencyLimits(records int, bytes int64) Option {
	return func(s *Store) {
		if records > 0 {
			s.idem.maxRecords = records
		}
		if bytes > 0 {
			s.idem.maxBytes = bytes
		}
	}
}

// WithIdempotencyCallerLimits bounds the Idempotency-Key records one caller
// keeps (ledger.Idempotency.Caller: the API key, or the client's address
// with authentication off): at most records of them, of at most bytes. A
// caller past its share gets ledger.ErrIdempotencyFull for its new keys
// while other callers go on. Values ≤ 0 keep the default, half of the
// table's bounds (WithIdempotencyLimits): no one caller can fill the table.
func WithIdempotencyCallerLimits(records int, bytes int64) Option {
	return func(s *Store) {
		if records > 0 {
			s.idem.maxCallerRecords = records
		}
		if bytes > 0 {
			s.idem.maxCallerBytes = bytes
		}
	}
}

// WithClock replaces the clock (time.Now): its readings are the store's
// time, and elapsed time is measured on them alone. Tests pin time with it.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.clk.read = pinnedClock(now, now()) }
}

// WithClocks gives the store a wall clock and a monotonic one separately:
// wall says where the store's timeline starts and is watched for steps;
// elapsed (the time since any fixed origin, never going back) advances the
// timeline. By default both come from time.Now. Tests step one without the
// other with it.
func WithClocks(wall func() time.Time, elapsed func() time.Duration) Option {
	return func(s *Store) {
		s.clk.read = func() (time.Time, time.Duration) { return wall(), elapsed() }
	}
}

// WithLogger sets where the store logs what operators should know, such as a
// step of the wall clock (slog.Default by default).
func WithLogger(log *slog.Logger) Option { return func(s *Store) { s.clk.log = log } }

// New returns an empty memory store.
func New(opts ...Option) *Store {
	s := &Store{limits: map[string]ledger.Limit{}, overrides: map[string]*ovset.Set{}, grants: map[ledger.BucketRef][]ledger.Grant{}, seed: maphash.MakeSeed()}
	s.clk.read, s.clk.log = systemClock(time.Now()), slog.Default()
	for i := range s.shards {
		s.shards[i].buckets = map[ledger.BucketRef]*bucketRec{}
		s.shards[i].holds = map[string]*holdRec{}
	}
	s.idem.records = map[idemKey]*idemRecord{}
	s.idem.callers = map[string]*callerUse{}
	s.idem.maxRecords, s.idem.maxBytes = DefaultIdempotencyRecords, DefaultIdempotencyBytes
	s.events.retention = DefaultEventRetention
	for _, o := range opts {
		o(s)
	}
	if s.idem.maxCallerRecords == 0 {
		s.idem.maxCallerRecords = max(s.idem.maxRecords/2, 1)
	}
	if s.idem.maxCallerBytes == 0 {
		s.idem.maxCallerBytes = max(s.idem.maxBytes/2, 1)
	}
	s.clk.start()
	return s
}

type shard struct {
	mu      sync.Mutex
	buckets map[ledger.BucketRef]*bucketRec
	holds   map[string]*holdRec // every hold of the shard's buckets, by id
	writes  int
}

// bucketRec is one bucket: its state as package bucket returned it last
// (the holds not yet resolved or recorded as expired, each with its id) and
// its history. It is kept small, 32 bytes, since a store holds millions of
// idle buckets: the level, the time in microseconds (0: never written) and,
// only for a bucket that has holds or history, the rest.
type bucketRec struct {
	level   bucket.Amount
	updated int64
	more    *bucketMore
}

// bucketMore is what few buckets have. The slots of a window bucket are
// here too: at most length/precision + 1 of them (package bucket).
type bucketMore struct {
	holds   []bucket.Hold
	history []ledger.Entry
	slots   []bucket.Slot
	marks   ledger.Marks
	carry   ledger.Carry // the rollover of a limit with rollover (ledger.CarryAt)
}

// carry returns b's stored rollover carry.
func (b *bucketRec) carry() ledger.Carry {
	if b.more == nil {
		return ledger.Carry{}
	}
	return b.more.carry
}

// setCarry stores b's rollover carry; a carry of nothing is not kept.
func (b *bucketRec) setCarry(c ledger.Carry) {
	if c.Unused.IsZero() {
		c = ledger.Carry{}
	}
	if b.more == nil {
		if c == (ledger.Carry{}) {
			return
		}
		b.more = &bucketMore{}
	}
	b.more.carry = c
	b.trim()
}

// marks returns b's threshold marks.
func (b *bucketRec) marks() ledger.Marks {
	if b.more == nil {
		return ledger.Marks{}
	}
	return b.more.marks
}

// setMarks stores b's threshold marks.
func (b *bucketRec) setMarks(m ledger.Marks) {
	if b.more == nil {
		if m == (ledger.Marks{}) {
			return
		}
		b.more = &bucketMore{}
	}
	b.more.marks = m
	b.trim()
}

// holds returns b's holds, nil for none.
func (b *bucketRec) holds() []bucket.Hold {
	if b.more == nil {
		return nil
	}
	return b.more.holds
}

// history returns b's history, nil for none.
func (b *bucketRec) history() []ledger.Entry {
	if b.more == nil {
		return nil
	}
	return b.more.history
}

// setHistory replaces b's history.
func (b *bucketRec) setHistory(h []ledger.Entry) {
	if b.more == nil {
		if len(h) == 0 {
			return
		}
		b.more = &bucketMore{}
	}
	b.more.history = h
	b.trim()
}

// set stores st as b's state.
func (b *bucketRec) set(st bucket.State) {
	b.level, b.updated = st.Level, 0
	if !st.Updated.IsZero() {
		b.updated = st.Updated.UnixMicro()
	}
	if (len(st.Holds) > 0 || len(st.Slots) > 0) && b.more == nil {
		b.more = &bucketMore{}
	}
	if b.more != nil {
		b.more.holds = st.Holds
		b.more.slots = st.Slots
		b.trim()
	}
}

// trim drops b.more once it holds nothing.
func (b *bucketRec) trim() {
	if len(b.more.holds) == 0 && len(b.more.history) == 0 && len(b.more.slots) == 0 && b.more.marks == (ledger.Marks{}) && b.more.carry == (ledger.Carry{}) {
		b.more = nil
	}
}

// slots returns b's window slots, nil for none.
func (b *bucketRec) slots() []bucket.Slot {
	if b.more == nil {
		return nil
	}
	return b.more.slots
}

type holdRec struct {
	res ledger.Reservation
}

// clock reads the clock once for an operation, in whole microseconds. A
// write reads it under the lock of every bucket it changes (after taking
// the shard locks), so that the calls on one bucket are applied in the order
// of their times and its history entries, in id order, never run back in
// time: read before the lock, a call that read the clock first could take
// the lock second and record an earlier time after a later one, and a
// replay of the history in its own times would exceed the capacity.
func (s *Store) clock() time.Time { return s.clk.now() }

func (s *Store) shardOf(ref ledger.BucketRef) int {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(ref.Limit)
	h.WriteByte(0)
	h.WriteString(ref.Key)
	return int(h.Sum64() % shardCount)
}

// Ping always succeeds: the store is this process.
func (s *Store) Ping(context.Context) error { return nil }

// Close does nothing.
func (s *Store) Close() error { return nil }

// PutLimit creates or updates a limit, keeping its buckets.
func (s *Store) PutLimit(_ context.Context, l ledger.Limit) (ledger.Limit, error) {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	now := s.clock()
	l.CreatedAt, l.UpdatedAt = now, now
	if old, ok := s.limits[l.Name]; ok {
		l.CreatedAt = old.CreatedAt
		if !old.SameRule(l) {
			s.switchLimit(old, now)
		}
	}
	l.Prepare()
	s.limits[l.Name] = l
	return l, nil
}

// switchLimit settles every bucket of l whose stored level is positive to
// now under l's rule (its leak rate, period or window) with bucket.Switch,
// so that a new rule applies from now on only and every level is kept: a
// level settled at now is the level of the current period of a new periodic
// rule (it was written in it), leaks from now under a new leak rate, and is
// one charge made now under a new window. A bucket whose stored level is zero (holding only
// reservations, drained, never charged) has nothing to leak and is not
// written: its updated_at stays (docs/architecture.md, "Changing a leak
// rate"). Each bucket is settled under the terms in force for it (an
// override's, when one applies). The caller holds limitsMu for writing.
func (s *Store) switchLimit(l ledger.Limit, now time.Time) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ref, b := range sh.buckets {
			if ref.Limit == l.Name && b.level.Sign() > 0 {
				old := s.terms(l, ref.Key, b, now)
				ns, expired := bucket.Switch(old.Rule(), b.state(), now)
				s.apply(old, sh, b, ns, expired)
			}
		}
		sh.mu.Unlock()
	}
}

// GetLimit returns a limit or ledger.ErrLimitNotFound.
func (s *Store) GetLimit(_ context.Context, name string) (ledger.Limit, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	l, ok := s.limits[name]
	if !ok {
		return ledger.Limit{}, fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	return l, nil
}

// ListLimits returns up to n limits with names after after, by name.
func (s *Store) ListLimits(_ context.Context, after string, n int) ([]ledger.Limit, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	var out []ledger.Limit
	for name, l := range s.limits {
		if name > after {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// DeleteLimit removes a limit with its buckets, holds and history.
func (s *Store) DeleteLimit(_ context.Context, name string) error {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	if _, ok := s.limits[name]; !ok {
		return fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	delete(s.limits, name)
	delete(s.overrides, name)
	for ref := range s.grants {
		if ref.Limit == name {
			delete(s.grants, ref)
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ref := range sh.buckets {
			if ref.Limit == name {
				delete(sh.buckets, ref)
			}
		}
		for id, h := range sh.holds {
			if h.res.Bucket.Limit == name {
				delete(sh.holds, id)
			}
		}
		sh.mu.Unlock()
	}
	s.idem.forget(name)
	return nil
}

// limit returns the named limit; the caller holds limitsMu for reading.
func (s *Store) limit(name string) (ledger.Limit, error) {
	l, ok := s.limits[name]
	if !ok {
		return ledger.Limit{}, fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	return l, nil
}

// state is the bucket rule's view of b; a nil b is an empty bucket.
func (b *bucketRec) state() bucket.State {
	if b == nil {
		return bucket.State{}
	}
	st := bucket.State{Level: b.level, Holds: b.holds(), Slots: b.slots()}
	if b.updated != 0 {
		st.Updated = time.UnixMicro(b.updated).UTC()
	}
	return st
}

func snapshot(l ledger.Limit, b *bucketRec, now time.Time) ledger.Snapshot {
	return ledger.Snapshot{Limit: l, State: b.state(), Now: now}
}

// Inspect returns a bucket's state without writing anything but the
// settling at the end of a temporary rule change that any call on the
// bucket makes first (terms), which changes no answer.
func (s *Store) Inspect(_ context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	l, err := s.limit(ref.Limit)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	sh := &s.shards[s.shardOf(ref)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock()
	b := sh.buckets[ref]
	return snapshot(s.terms(l, ref.Key, b, now), b, now), nil
}

// bucketFor returns the bucket record of ref, a bucket of limit l, creating
// it. A new entry's key names the limit with l.Name, one string shared by
// all its buckets, and copies the key, which may be part of a larger string
// (a request's path) that the map would otherwise keep alive.
func (sh *shard) bucketFor(l ledger.Limit, ref ledger.BucketRef) *bucketRec {
	b := sh.buckets[ref]
	if b == nil {
		b = &bucketRec{}
		if l.Name == ref.Limit {
			ref.Limit = l.Name
		}
		ref.Key = strings.Clone(ref.Key)
		sh.buckets[ref] = b
	}
	return b
}

// apply stores ns, the state a transition of package bucket returned for b,
// with the rollover carry of l (b's terms at the transition), and records
// the holds that the transition expired. Every change of a
// bucket's level, time or holds goes through here, so the store keeps no
// arithmetic of its own. The caller holds sh.mu.
func (s *Store) apply(l ledger.Limit, sh *shard, b *bucketRec, ns bucket.State, expired []bucket.Hold) {
	b.set(ns)
	if l.Carry.Period != 0 {
		// The rollover the bucket receives in the period it is now written
		// in: its level in the period before is gone from here on.
		b.setCarry(l.Carry)
	}
	for _, x := range expired {
		h := sh.holds[x.ID]
		if h == nil || h.res.State != ledger.Active {
			continue
		}
		h.res.State = ledger.Expired
		h.res.ResolvedAt = h.res.ExpiresAt
		s.record(l, b, h.res.ExpiresAt, ledger.EventExpired, h.res.Amount, h.res.ID, nil)
	}
}

// expireHolds records the holds of b that have expired by now, leaving its
// level and time as they are.
func (s *Store) expireHolds(l ledger.Limit, sh *shard, b *bucketRec, now time.Time) {
	if ns, expired := bucket.Expire(b.state(), now); len(expired) > 0 {
		s.apply(l, sh, b, ns, expired)
	}
}

// record adds a history entry to b when l keeps history and returns its
// id, "" when none was written.
func (s *Store) record(l ledger.Limit, b *bucketRec, at time.Time, ev ledger.Event, amount decimal.Decimal, holdID string, meta ledger.Meta) string {
	if !l.History {
		return ""
	}
	id := strconv.FormatInt(s.nextID.Add(1), 10)
	if len(meta) == 0 {
		meta = nil
	} else {
		meta = maps.Clone(meta) // the caller's map is the caller's
	}
	h := append(b.history(), ledger.Entry{ID: id, Time: at, Event: ev, Amount: amount, ReservationID: holdID, Meta: meta})
	// Trim in steps of historySlack rather than by one entry per write, which
	// would copy the whole slice on every write to a full bucket. Readers see
	// only the newest ledger.HistoryPerBucket (newestHistory).
	if len(h) > ledger.HistoryPerBucket+historySlack {
		h = slices.Delete(h, 0, len(h)-ledger.HistoryPerBucket)
	}
	b.setHistory(h)
	return id
}

// markShadow flags the entry id just recorded in b as shadow-denied when d,
// the decision that wrote it, is one and l records denials (docs/modes.md).
// The caller holds the bucket's shard lock.
func markShadow(l ledger.Limit, b *bucketRec, id string, d bucket.Decision) {
	if !d.ShadowDenied || !l.RecordDenials || id == "" {
		return
	}
	if h := b.history(); len(h) > 0 && h[len(h)-1].ID == id {
		h[len(h)-1].ShadowDenied = true
	}
}

// recordDenial writes the denied entry of a denial of amount in ref when l
// records denials (creating the bucket record, whose state stays empty), and
// returns its id, "" when none was written. The caller holds sh.mu.
func (s *Store) recordDenial(l ledger.Limit, sh *shard, ref ledger.BucketRef, now time.Time, amount decimal.Decimal, meta ledger.Meta) string {
	if !l.History || !l.RecordDenials {
		return ""
	}
	id := s.record(l, sh.bucketFor(l, ref), now, ledger.EventDenied, amount, "", meta)
	s.wrote(sh, now)
	return id
}

// historySlack is how many entries past ledger.HistoryPerBucket a bucket stores
// before the oldest are dropped: a copy of ledger.HistoryPerBucket entries every
// historySlack writes, about 8 entries copied per write.
const historySlack = ledger.HistoryPerBucket / 8

// newestHistory is the part of b's history that is listed: the newest
// ledger.HistoryPerBucket entries.
func (b *bucketRec) newestHistory() []ledger.Entry {
	h := b.history()
	return h[max(0, len(h)-ledger.HistoryPerBucket):]
}

// wrote counts a write to sh and, now and then, sweeps it.
func (s *Store) wrote(sh *shard, now time.Time) {
	sh.writes++
	if sh.writes%sweepEvery == 0 {
		s.sweep(sh, now)
	}
}

// sweep drops from sh the buckets that are empty with nothing to keep, old
// history entries and long-resolved holds. The caller holds sh.mu and
// limitsMu for reading.
func (s *Store) sweep(sh *shard, now time.Time) {
	for ref, b := range sh.buckets {
		l, ok := s.limits[ref.Limit]
		if !ok {
			delete(sh.buckets, ref)
			continue
		}
		// What decides here is the bucket's rule (its leak, period or
		// window), its marks and holds, never its capacity: without holds
		// to expire and without an override that changes a rule, the
		// limit's own terms decide alike, and resolving every bucket's
		// override at every sweep would cost a limit with many overrides
		// a lookup per bucket.
		if len(b.holds()) > 0 || s.overrides[l.Name].ChangesRules() {
			l = s.terms(l, ref.Key, b, now)
		}
		s.expireHolds(l, sh, b, now)
		s.dropStaleCarry(l, b, now)
		h, cut := b.history(), 0
		for cut < len(h) && now.Sub(h[cut].Time) > ledger.HistoryRetention {
			cut++
		}
		if cut > 0 {
			b.setHistory(slices.Delete(h, 0, cut))
		}
		if (b.more == nil || len(b.more.holds) == 0 && len(b.more.history) == 0) && bucket.LevelAt(l.Rule(), b.state(), now).IsZero() && !reached(l, b, now) &&
			!l.PassesOn(b.state().Updated) {
			delete(sh.buckets, ref)
		}
	}
	for id, h := range sh.holds {
		if h.res.State != ledger.Active || !now.Before(h.res.ExpiresAt) {
			if now.Sub(h.res.ExpiresAt) > ledger.ClosedHoldRetention && now.Sub(h.res.ResolvedAt) > ledger.ClosedHoldRetention {
				delete(sh.holds, id)
			}
		}
	}
}

// dropStaleCarry forgets b's rollover carry once it was stored for a period
// before the current one of b's terms l: ledger.CarryAt reads a stored
// carry only in the period it was stored for, and the store's time never
// goes back (storeClock), so it would never be read again. A bucket that
// passes rollover on is never pruned (ledger.Limit.PassesOn); without this
// every such bucket, idle for good, would keep its bucketMore. The caller
// holds sh.mu.
func (s *Store) dropStaleCarry(l ledger.Limit, b *bucketRec, now time.Time) {
	c := b.carry()
	if c == (ledger.Carry{}) || l.Period == nil {
		return
	}
	if start, _ := l.Rule().Period.Bounds(now); c.Period < start.UnixMicro() {
		b.setCarry(ledger.Carry{})
	}
}

// reached says whether b keeps a threshold mark that its next write must
// see (to emit the recovery): a mark of the current period of a periodic
// limit, or any mark of another kind. Such a bucket is not pruned.
func reached(l ledger.Limit, b *bucketRec, now time.Time) bool {
	m := b.marks()
	if m.Above == 0 {
		return false
	}
	if l.Period == nil {
		return true
	}
	start, _ := l.Rule().Period.Bounds(now)
	return m.Period == start.UnixMicro()
}

// lockShards locks the shards of refs in index order and returns an unlock.
func (s *Store) lockShards(refs []ledger.BucketRef) func() {
	idx := make([]int, 0, len(refs))
	for _, r := range refs {
		idx = append(idx, s.shardOf(r))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.shards[i].mu.Lock()
	}
	return func() {
		for _, i := range idx {
			s.shards[i].mu.Unlock()
		}
	}
}

// Fillup charges every item or none.
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	if len(items) == 1 && idem.Key == "" {
		return s.fillupOne(items[0])
	}
	return replay(s, ctx, idem, func(o *ledger.FillupOutcome) { o.Replayed = true }, func() (ledger.FillupOutcome, error) {
		s.limitsMu.RLock()
		defer s.limitsMu.RUnlock()
		limits := make([]ledger.Limit, len(items))
		refs := make([]ledger.BucketRef, len(items))
		for i, it := range items {
			l, err := s.limit(it.Bucket.Limit)
			if err != nil {
				return ledger.FillupOutcome{}, err
			}
			limits[i], refs[i] = l, it.Bucket
		}
		defer s.lockShards(refs)()
		now := s.clock()
		for i, it := range items {
			limits[i] = s.terms(limits[i], it.Bucket.Key, s.shards[s.shardOf(it.Bucket)].buckets[it.Bucket], now)
		}
		out := ledger.FillupOutcome{Accepted: true, Items: make([]ledger.ItemOutcome, len(items))}
		next := make([]bucket.State, len(items))
		fits := make([]bool, len(items))
		ds := make([]bucket.Decision, len(items))
		for i, it := range items {
			b := s.shards[s.shardOf(it.Bucket)].buckets[it.Bucket]
			var d bucket.Decision
			d, next[i] = bucket.Fillup(limits[i].Rule(), b.state(), now, ledger.Amount(it.Cost))
			fits[i], ds[i] = d.Accepted, d
			out.Accepted = out.Accepted && d.Accepted
		}
		for i, it := range items {
			sh := &s.shards[s.shardOf(it.Bucket)]
			b := sh.buckets[it.Bucket]
			switch {
			case out.Accepted && it.Cost.Sign() > 0:
				b, out.Items[i].EntryID = s.charge(limits[i], sh, it, next[i], now)
				markShadow(limits[i], b, out.Items[i].EntryID, ds[i])
			case !fits[i]:
				out.Items[i].EntryID = s.recordDenial(limits[i], sh, it.Bucket, now, it.Cost, it.Meta)
			}
			out.Items[i].Snapshot = snapshot(limits[i], b, now)
		}
		return out, nil
	})
}

// fillupOne is Fillup of one bucket without an Idempotency-Key, the common
// call: the same steps as a multi-bucket Fillup with nothing to sort, one
// shard lock held while the rule runs and nothing allocated but the answer.
func (s *Store) fillupOne(it ledger.Charge) (ledger.FillupOutcome, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	l, err := s.limit(it.Bucket.Limit)
	if err != nil {
		return ledger.FillupOutcome{}, err
	}
	cost := ledger.Amount(it.Cost)
	sh := &s.shards[s.shardOf(it.Bucket)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock()
	b := sh.buckets[it.Bucket]
	l = s.terms(l, it.Bucket.Key, b, now)
	rule := l.Rule()
	d, ns := bucket.Fillup(rule, b.state(), now, cost)
	var entry string
	switch {
	case d.Accepted && cost.Sign() > 0:
		b, entry = s.charge(l, sh, it, ns, now)
		markShadow(l, b, entry, d)
	case !d.Accepted:
		entry = s.recordDenial(l, sh, it.Bucket, now, it.Cost, it.Meta)
	}
	return ledger.FillupOutcome{Accepted: d.Accepted, Items: []ledger.ItemOutcome{{Snapshot: snapshot(l, b, now), EntryID: entry}}}, nil
}

// charge stores ns, the state an accepted Fillup of it returned, in its
// bucket (creating it), with the history entry, and returns the bucket and
// the entry's id. The caller holds sh.mu.
func (s *Store) charge(l ledger.Limit, sh *shard, it ledger.Charge, ns bucket.State, now time.Time) (*bucketRec, string) {
	b := sh.bucketFor(l, it.Bucket)
	before := b.state()
	s.apply(l, sh, b, ns, bucket.Expired(before, now))
	s.notice(l, it.Bucket, b, before, now)
	id := s.record(l, b, now, ledger.EventFillup, it.Cost, "", it.Meta)
	s.wrote(sh, now)
	return b, id
}

// Drain lowers a bucket's level, clamped at zero.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	return replay(s, ctx, idem, func(o *ledger.DrainOutcome) { o.Replayed = true }, func() (ledger.DrainOutcome, error) {
		s.limitsMu.RLock()
		defer s.limitsMu.RUnlock()
		l, err := s.limit(ref.Limit)
		if err != nil {
			return ledger.DrainOutcome{}, err
		}
		sh := &s.shards[s.shardOf(ref)]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		now := s.clock()
		b := sh.buckets[ref]
		l = s.terms(l, ref.Key, b, now)
		out := ledger.DrainOutcome{}
		// A drain that can remove nothing is a no-op, like a drain of 0.
		if removed, ns := bucket.Drain(l.Rule(), b.state(), now, ledger.Amount(amount)); removed.Sign() > 0 {
			out.Removed = removed.Decimal()
			before := b.state()
			s.apply(l, sh, b, ns, bucket.Expired(before, now))
			s.notice(l, ref, b, before, now)
			out.EntryID = s.record(l, b, now, ledger.EventDrain, out.Removed, "", meta)
			s.wrote(sh, now)
		}
		out.Snapshot = snapshot(l, sh.buckets[ref], now)
		return out, nil
	})
}

// Reserve adds a hold when it fits.
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	return replay(s, ctx, idem, func(o *ledger.ReserveOutcome) { o.Replayed = true }, func() (ledger.ReserveOutcome, error) {
		s.limitsMu.RLock()
		defer s.limitsMu.RUnlock()
		l, err := s.limit(ref.Limit)
		if err != nil {
			return ledger.ReserveOutcome{}, err
		}
		si := s.shardOf(ref)
		sh := &s.shards[si]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		now := s.clock()
		b := sh.buckets[ref]
		l = s.terms(l, ref.Key, b, now)
		st := b.state()
		if len(bucket.ActiveHolds(st, now)) >= ledger.MaxHolds {
			return ledger.ReserveOutcome{}, ledger.ErrTooManyHolds
		}
		d, ns := bucket.Reserve(l.Rule(), st, now, ledger.Amount(amount), now.Add(ttl))
		if !d.Accepted {
			entry := s.recordDenial(l, sh, ref, now, amount, meta)
			return ledger.ReserveOutcome{Snapshot: snapshot(l, sh.buckets[ref], now), EntryID: entry}, nil
		}
		b = sh.bucketFor(l, ref)
		h := &holdRec{res: ledger.Reservation{
			ID:        newHoldID(si),
			Bucket:    ref,
			Amount:    amount,
			State:     ledger.Active,
			CreatedAt: now,
			ExpiresAt: now.Add(ttl),
		}}
		ns.Holds[len(ns.Holds)-1].ID = h.res.ID
		s.apply(l, sh, b, ns, bucket.Expired(st, now))
		s.notice(l, ref, b, st, now)
		sh.holds[h.res.ID] = h
		entry := s.record(l, b, now, ledger.EventReserved, amount, h.res.ID, meta)
		markShadow(l, b, entry, d)
		s.wrote(sh, now)
		return ledger.ReserveOutcome{Accepted: true, Reservation: h.res, Snapshot: snapshot(l, b, now), EntryID: entry}, nil
	})
}

// newHoldID returns a fresh hold id that names its shard: "h" + two hex
// digits of shard + 24 random hex digits.
func newHoldID(shard int) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return fmt.Sprintf("h%02x%s", shard, hex.EncodeToString(b[:]))
}

// holdShard returns the shard an id names, or -1.
func holdShard(id string) int {
	if len(id) != 27 || id[0] != 'h' {
		return -1
	}
	n, err := strconv.ParseUint(id[1:3], 16, 8)
	if err != nil || n >= shardCount {
		return -1
	}
	return int(n)
}

// Commit ends a hold and charges amount (the held amount when null).
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	return s.resolve(ctx, id, idem, func(l ledger.Limit, sh *shard, b *bucketRec, h *holdRec, now time.Time) (string, error) {
		charge := h.res.Amount
		if amount.Valid {
			charge = amount.Decimal
		}
		switch h.res.State {
		case ledger.Committed:
			if h.res.CommittedAmount.Decimal.Equal(charge) {
				return "", nil
			}
			return ledger.RefusalClosed, nil
		case ledger.Released:
			return ledger.RefusalClosed, nil
		}
		if charge.GreaterThan(h.res.Amount) && !overrun {
			return ledger.RefusalExceedsHold, nil
		}
		// Refuse an overflow before anything moves: an error changes nothing.
		if bucket.LevelAt(l.Rule(), b.state(), now).Add(ledger.Amount(charge)).GreaterThan(ledger.Amount(ledger.MaxLevel)) {
			return "", ledger.ErrLevelOverflow
		}
		s.resolveHold(l, sh, b, h, now, charge)
		h.res.State = ledger.Committed
		h.res.CommittedAmount = decimal.NewNullDecimal(charge)
		h.res.ResolvedAt = now
		s.record(l, b, now, ledger.EventCommitted, charge, h.res.ID, meta)
		return "", nil
	})
}

// Release ends a hold without charging.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	return s.resolve(ctx, id, idem, func(l ledger.Limit, sh *shard, b *bucketRec, h *holdRec, now time.Time) (string, error) {
		switch h.res.State {
		case ledger.Released:
			return "", nil
		case ledger.Committed:
			return ledger.RefusalClosed, nil
		}
		s.resolveHold(l, sh, b, h, now, decimal.Zero)
		h.res.State = ledger.Released
		h.res.ResolvedAt = now
		s.record(l, b, now, ledger.EventReleased, h.res.Amount, h.res.ID, meta)
		return "", nil
	})
}

// resolveHold ends the active, unexpired hold h of b with bucket.Resolve,
// adding charge to the level.
func (s *Store) resolveHold(l ledger.Limit, sh *shard, b *bucketRec, h *holdRec, now time.Time, charge decimal.Decimal) {
	st := b.state()
	i := slices.IndexFunc(st.Holds, func(x bucket.Hold) bool { return x.ID == h.res.ID })
	s.apply(l, sh, b, bucket.Resolve(l.Rule(), st, now, i, ledger.Amount(charge)), bucket.Expired(st, now))
	s.notice(l, h.res.Bucket, b, st, now)
}

// resolve runs the common part of Commit and Release: find the hold, lock
// its bucket, refuse an expired hold, then let apply decide.
func (s *Store) resolve(ctx context.Context, id string, idem ledger.Idempotency,
	apply func(l ledger.Limit, sh *shard, b *bucketRec, h *holdRec, now time.Time) (string, error)) (ledger.ResolveOutcome, error) {
	return replay(s, ctx, idem, func(o *ledger.ResolveOutcome) { o.Replayed = true }, func() (ledger.ResolveOutcome, error) {
		si := holdShard(id)
		if si < 0 {
			return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
		}
		s.limitsMu.RLock()
		defer s.limitsMu.RUnlock()
		sh := &s.shards[si]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		now := s.clock()
		h := sh.holds[id]
		if h == nil {
			return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
		}
		l, err := s.limit(h.res.Bucket.Limit)
		if err != nil {
			return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
		}
		l = s.terms(l, h.res.Bucket.Key, sh.buckets[h.res.Bucket], now)
		b := sh.bucketFor(l, h.res.Bucket)
		var refusal string
		if h.res.State == ledger.Expired || (h.res.State == ledger.Active && !now.Before(h.res.ExpiresAt)) {
			s.expireHolds(l, sh, b, now)
			refusal = ledger.RefusalExpired
		} else if refusal, err = apply(l, sh, b, h, now); err != nil {
			return ledger.ResolveOutcome{}, err
		}
		s.wrote(sh, now)
		return ledger.ResolveOutcome{Reservation: h.res, Snapshot: snapshot(l, b, now), Refusal: refusal}, nil
	})
}

// Reservation returns a hold as stored and the store's clock.
func (s *Store) Reservation(_ context.Context, id string) (ledger.Reservation, time.Time, error) {
	si := holdShard(id)
	if si < 0 {
		return ledger.Reservation{}, time.Time{}, ledger.ErrReservationNotFound
	}
	sh := &s.shards[si]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock()
	h := sh.holds[id]
	if h == nil {
		return ledger.Reservation{}, time.Time{}, ledger.ErrReservationNotFound
	}
	return h.res, now, nil
}

// History lists a bucket's entries newest first, recording due expiries.
func (s *Store) History(_ context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	var after *ledger.Entry
	if cursor != "" {
		e, err := parseCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		after = &e
	}
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	l, err := s.limit(ref.Limit)
	if err != nil {
		return nil, "", err
	}
	if !l.History {
		return nil, "", nil
	}
	sh := &s.shards[s.shardOf(ref)]
	sh.mu.Lock()
	now := s.clock()
	b := sh.buckets[ref]
	var all []ledger.Entry
	if b != nil {
		s.expireHolds(l, sh, b, now)
		all = slices.Clone(b.newestHistory())
	}
	sh.mu.Unlock()
	slices.SortFunc(all, func(a, b ledger.Entry) int { return -compareEntries(a, b) })
	var out []ledger.Entry
	for _, e := range all {
		if after != nil && compareEntries(e, *after) >= 0 {
			continue
		}
		if len(out) == n {
			last := out[len(out)-1]
			return out, fmt.Sprintf("%d.%s", last.Time.UnixMicro(), last.ID), nil
		}
		out = append(out, e)
	}
	return out, "", nil
}

// compareEntries orders entries by time, then by numeric id.
func compareEntries(a, b ledger.Entry) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	ai, _ := strconv.ParseInt(a.ID, 10, 64)
	bi, _ := strconv.ParseInt(b.ID, 10, 64)
	switch {
	case ai < bi:
		return -1
	case ai > bi:
		return 1
	}
	return 0
}

func parseCursor(c string) (ledger.Entry, error) {
	bad := &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "cursor", Reason: "malformed cursor"}
	t, id, ok := strings.Cut(c, ".")
	if !ok {
		return ledger.Entry{}, bad
	}
	us, err1 := strconv.ParseInt(t, 10, 64)
	_, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil {
		return ledger.Entry{}, bad
	}
	return ledger.Entry{Time: time.UnixMicro(us).UTC(), ID: id}, nil
}
