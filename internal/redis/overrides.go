package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// Overrides live in their limit's slot (a hash pattern → value and a zset
// of the patterns, override_put in budgetd.lua), and each instance keeps a
// limit's overrides in memory (ovset.Set, the pointer-free index the
// memory store resolves with, which the garbage collector does not mark)
// loaded at the definition's override counter ov: a
// decision resolves its key's override in Go and passes the effective
// terms as the limit's arguments, so it stays one function call on the
// bucket's slot. Every change of an override bumps the limit's version
// too, so on a standalone server the bucket function answers stale and Go
// reloads (exact); in Redis Cluster another instance's change is seen
// within the limit cache TTL, as a PUT of the limit is. The span of store
// time in which the resolved terms hold (an expires_at, or one of a more
// specific override that expired) travels with the version (guard in
// budgetd.lua): the function checks it against its own clock, so a raise
// ends at expires_at by the store's clock, with no background job.

var _ ledger.OverrideStore = (*Store)(nil)

// ovSet is a limit generation's overrides, as of counter ov or later:
// loaded whole once, then kept up to date with the changes the limit's
// log names (loadOverrides). Decisions read it under mu.
type ovSet struct {
	mu  sync.RWMutex
	ov  int64
	set *ovset.Set
	// changes counts the changes applied to set since it was read whole
	// (syncOverrides), for the memos of forKey: one made at another count
	// is not used.
	changes atomic.Uint64
}

func (o *ovSet) len() int {
	if o == nil {
		return 0
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.set.Len()
}

// candidates is ovset.Set.Candidates under the read lock.
func (o *ovSet) candidates(key string, fn func(ledger.Override) bool) {
	if o == nil {
		return
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	o.set.Candidates(key, fn)
}

// changesRules is ovset.Set.ChangesRules under the read lock: whether any
// override of the set, expired ones included, changes a bucket's rule.
func (o *ovSet) changesRules() bool {
	if o == nil {
		return false
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.set.ChangesRules()
}

func (o *ovSet) get(pattern string) (ledger.Override, bool) {
	if o == nil {
		return ledger.Override{}, false
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.set.Get(pattern)
}

// ovArgs are the script arguments of a limit's overrides' terms, by
// pattern, formatted on first use; an entry made for another version of
// the override (its update time) is made again.
type ovArgs struct {
	mu sync.RWMutex
	m  map[string]ovArgsEntry
	// keys is forKey's memo, for a limit with overrides (nil without).
	keys *keyMemos
}

// keyMemos holds, per hash of a key modulo keyMemoSlots, what forKey
// returned for it last (keyMemo), and seen the hash of the key that last
// missed there: a key is kept from its second decision in a row on its
// slot, so that a hot key pays one comparison while nothing changed and a
// load spread over many keys keeps nothing.
type keyMemos struct {
	keys [keyMemoSlots]atomic.Pointer[keyMemo]
	seen [keyMemoSlots]atomic.Uint64
}

// keyMemoSlots is how many keys a keyMemos remembers.
const keyMemoSlots = 64

// keyMemo is what forKey returned for key with the overrides ovs after
// changes of them: terms that hold at any instant (no expiry was involved
// and no rollover), so that they stay right while ovs does not change.
type keyMemo struct {
	key     string
	ovs     *ovSet
	changes uint64
	l       ledger.Limit
	args    limitArgs
}

// keyMemoSeed hashes keys to their slot of ovArgs.keys.
var keyMemoSeed = maphash.MakeSeed()

type ovArgsEntry struct {
	updated time.Time
	args    limitArgs
}

func (a *ovArgs) get(pattern string, updated time.Time, make func() limitArgs) limitArgs {
	a.mu.RLock()
	e, ok := a.m[pattern]
	a.mu.RUnlock()
	if ok && e.updated.Equal(updated) {
		return e.args
	}
	e = ovArgsEntry{updated: updated, args: make()}
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]ovArgsEntry{}
	}
	a.m[pattern] = e
	a.mu.Unlock()
	return e.args
}

// overrideTerms is an override's terms as its stored value keeps them
// (JSON, read only by Go).
type overrideTerms struct {
	C  string `json:"c,omitempty"`  // capacity
	LA string `json:"la,omitempty"` // leak amount
	LP int64  `json:"lp,omitempty"` // leak per, µs
	TZ string `json:"tz,omitempty"`
	SD int    `json:"sd,omitempty"`
	WL int64  `json:"wl,omitempty"` // window length, µs
}

// encodeOverride returns what override_put takes: expires (µs, "" for
// none) and the terms.
func encodeOverride(o ledger.Override) (string, string) {
	t := overrideTerms{TZ: o.TZ, SD: o.StartDay, WL: o.WindowLength.Microseconds()}
	if o.Capacity.Valid {
		t.C = o.Capacity.Decimal.String()
	}
	if o.LeakPer != 0 {
		t.LA, t.LP = o.LeakAmount.String(), o.LeakPer.Microseconds()
	}
	b, _ := json.Marshal(t)
	exp := ""
	if !o.ExpiresAt.IsZero() {
		exp = strconv.FormatInt(o.ExpiresAt.UnixMicro(), 10)
	}
	return exp, string(b)
}

// decodeOverride reads a stored value: "expires|created|updated|terms".
func decodeOverride(pattern, v string) (ledger.Override, error) {
	f := strings.SplitN(v, "|", 4)
	if len(f) != 4 {
		return ledger.Override{}, fmt.Errorf("redis: override %q is malformed", pattern)
	}
	var t overrideTerms
	if err := json.Unmarshal([]byte(f[3]), &t); err != nil {
		return ledger.Override{}, fmt.Errorf("redis: override %q is malformed: %w", pattern, err)
	}
	o := ledger.Override{Pattern: pattern, TZ: t.TZ, StartDay: t.SD, WindowLength: time.Duration(t.WL) * time.Microsecond,
		LeakPer: time.Duration(t.LP) * time.Microsecond}
	var err error
	if t.C != "" {
		var c decimal.Decimal
		if c, err = decimal.NewFromString(t.C); err != nil {
			return ledger.Override{}, fmt.Errorf("redis: override %q is malformed: %w", pattern, err)
		}
		o.Capacity = decimal.NewNullDecimal(c)
	}
	if t.LA != "" {
		if o.LeakAmount, err = decimal.NewFromString(t.LA); err != nil {
			return ledger.Override{}, fmt.Errorf("redis: override %q is malformed: %w", pattern, err)
		}
	}
	times := make([]int64, 3)
	for i := range times {
		if f[i] == "" {
			continue
		}
		if times[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return ledger.Override{}, fmt.Errorf("redis: override %q is malformed: %w", pattern, err)
		}
	}
	o.ExpiresAt, o.CreatedAt, o.UpdatedAt = fromMicros(times[0]), fromMicros(times[1]), fromMicros(times[2])
	return o, nil
}

// storeNow is budgetd's view of the store's clock: its own (or a test's
// pinned one) plus the skew last seen (periodSkew).
func (s *Store) storeNow() time.Time {
	return s.goNow().Add(time.Duration(s.periodSkew.Load()))
}

// loadOverrides sets cl's overrides: none before the first override, else
// its generation's set, brought up to cl's counter: by the changes its log
// names since the set's counter (XRANGE, then the values of those patterns,
// HMGET: two round trips, whatever the number of overrides), or, when the
// log no longer reaches back that far or there is no set yet, all of them
// read again (HGETALL of the limit's hash).
func (s *Store) loadOverrides(ctx context.Context, cl *cachedLimit) error {
	if cl.ov == "" {
		return nil
	}
	want, err := strconv.ParseInt(cl.ov, 10, 64)
	if err != nil {
		return fmt.Errorf("redis: limit %q has a bad override counter %q", cl.l.Name, cl.ov)
	}
	s.mu.Lock()
	e := s.ovSets[cl.gen]
	s.mu.Unlock()
	if e != nil {
		e.mu.RLock()
		have := e.ov
		e.mu.RUnlock()
		if have >= want {
			cl.ovs = e
			return nil
		}
		if want-have <= overrideLogLen {
			ok, err := s.syncOverrides(ctx, cl.l.Name, e, have, want)
			if err != nil {
				return err
			}
			if ok {
				cl.ovs = e
				return nil
			}
		}
	}
	s.ovLoad.Lock()
	defer s.ovLoad.Unlock()
	s.mu.Lock()
	e = s.ovSets[cl.gen]
	s.mu.Unlock()
	if e != nil {
		e.mu.RLock()
		done := e.ov >= want
		e.mu.RUnlock()
		if done { // read meanwhile by another call
			cl.ovs = e
			return nil
		}
	}
	m, err := s.client.HGetAll(ctx, s.k.overrides(cl.l.Name)).Result()
	if err != nil {
		return s.fail(ctx, "read overrides", err)
	}
	set := &ovset.Set{}
	for p, v := range m {
		o, err := decodeOverride(p, v)
		if err != nil {
			return err
		}
		set.Put(o)
	}
	e = &ovSet{ov: want, set: set}
	s.mu.Lock()
	if old := s.ovSets[cl.gen]; old != nil {
		old.mu.RLock()
		newer := old.ov >= want
		old.mu.RUnlock()
		if newer {
			e = old
		}
	}
	s.ovSets[cl.gen] = e
	s.mu.Unlock()
	cl.ovs = e
	return nil
}

// syncOverrides applies to e the changes numbered have+1 … want, as the
// limit's log names them; false when the log no longer holds them all.
func (s *Store) syncOverrides(ctx context.Context, limit string, e *ovSet, have, want int64) (bool, error) {
	entries, err := s.client.XRange(ctx, s.k.overrideLog(limit), strconv.FormatInt(have+1, 10)+"-1", strconv.FormatInt(want, 10)+"-1").Result()
	if err != nil {
		return false, s.fail(ctx, "read overrides", err)
	}
	if int64(len(entries)) != want-have {
		return false, nil
	}
	seen := map[string]bool{}
	var ps []string
	for _, x := range entries {
		p, _ := x.Values["p"].(string)
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	vs, err := s.client.HMGet(ctx, s.k.overrides(limit), ps...).Result()
	if err != nil {
		return false, s.fail(ctx, "read overrides", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ov >= want {
		return true, nil // another call brought it further meanwhile
	}
	e.changes.Add(1)
	for i, p := range ps {
		v, ok := vs[i].(string)
		if !ok {
			e.set.Delete(p)
			continue
		}
		o, err := decodeOverride(p, v)
		if err != nil {
			return false, err
		}
		e.set.Put(o)
	}
	e.ov = want
	return true, nil
}

// Resolve is ovset.Set.Resolve under the read lock: an ovSet is the
// ledger.Resolver that ledger.TermsAt resolves a key's override with.
func (o *ovSet) Resolve(key string, now time.Time) (ledger.Override, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.set.Resolve(key, now)
}

// MayExpire is ovset.Set.MayExpire under the read lock (ledger.TermsAt
// asks it before it settles a bucket's state through expiries).
func (o *ovSet) MayExpire(key string, updated int64, now time.Time) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.set.MayExpire(key, updated, now)
}

// forKey returns cl as a decision on key uses it: with the override that
// applies to key and its script arguments, the span in which it holds
// appended to the version, and, for a limit with rollover, the capacity
// in force at the end of the period before (the override's at that
// period's last microsecond).
//
// What it returned for a key is remembered (ovArgs.keys) while it holds at
// any instant: the key's override has no expiry, no more specific one has
// expired, and the limit has no rollover. A decision on that key then
// pays one hash and three comparisons while the set of overrides is the
// one it was made from: any change of an override, by this instance or
// another, either gives a new cachedLimit (a new ovArgs, empty) or counts
// in ovs.changes.
func (s *Store) forKey(cl cachedLimit, key string) cachedLimit {
	if cl.ovs == nil {
		return cl
	}
	var memo *keyMemos
	if cl.ovArgs != nil {
		memo = cl.ovArgs.keys
	}
	if memo == nil {
		return s.resolveForKey(cl, key)
	}
	changes := cl.ovs.changes.Load() // before the lookup: a memo is never newer than its count
	h := maphash.String(keyMemoSeed, key)
	slot := int(h % keyMemoSlots)
	if m := memo.keys[slot].Load(); m != nil && m.key == key && m.ovs == cl.ovs && m.changes == changes {
		out := cl
		out.l, out.args = m.l, m.args
		return out
	}
	out := s.resolveForKey(cl, key)
	if memo.seen[slot].Swap(h) != h {
		return out // the key's first decision in a row on its slot: kept at its next
	}
	if out.args.version == cl.args.version && !(out.l.Rollover != nil && out.l.Period != nil) {
		memo.keys[slot].Store(&keyMemo{key: key, ovs: cl.ovs, changes: changes, l: out.l, args: out.args})
	}
	return out
}

// resolveForKey is forKey without its memo: the terms of key's bucket
// (termsAt) as the functions take them.
func (s *Store) resolveForKey(cl cachedLimit, key string) cachedLimit {
	now := s.storeNow()
	t := termsAt(cl, key, now)
	eff, out := t.Limit, cl
	if t.Overridden() {
		out.l = eff
		out.args = cl.ovArgs.get(eff.Override, t.OverrideVersion, func() limitArgs { return newLimitArgs(s.k, eff, cl.gen, cl.version, cl.at) })
	}
	if eff.Rollover != nil && eff.Period != nil {
		if starts := eff.Period.StartsAround(now, 2); len(starts) == 2 {
			end := fromMicros(starts[1]).Add(-time.Microsecond)
			if c := termsAt(cl, key, end).Limit.Capacity; !c.Equal(eff.Capacity) {
				out.args.ceilArg = units(eff.Ceiling()) + grantScale(eff) + "~" + units(eff.Rollover.Max) + ":" + units(c)
			}
		}
	}
	out.args.version += spanArg(cl, key, now)
	return out
}

// overrideCall runs override_put or override_delete on the limit's slot.
func (s *Store) overrideCall(ctx context.Context, op, limit string, args ...any) ([]string, error) {
	keys := []string{s.k.limitDef(limit), s.k.overrides(limit), s.k.overridePatterns(limit), s.k.overrideLog(limit)}
	res, err := s.batch.do(ctx, &fcall{fn: fn(op), keys: keys, args: append([]any{s.nowArg()}, args...)}).StringSlice()
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("redis %s: empty reply", op)
	}
	switch res[0] {
	case codeNotFound:
		s.forget(limit)
		return nil, fmt.Errorf("limit %q: %w", limit, ledger.ErrLimitNotFound)
	case codeStale:
		return nil, errStale
	}
	return res, nil
}

// changeOverrides runs a change of overrides as withFreshLimits does, one
// at a time in this instance (Store.ovChange), so that only changes from
// other instances can make its version check fail.
func changeOverrides[T any](ctx context.Context, s *Store, op func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.callTimeout, errCallTimeout)
	defer cancel()
	select {
	case s.ovChange <- struct{}{}:
	case <-ctx.Done():
		var zero T
		return zero, s.fail(ctx, "change override", context.Cause(ctx))
	}
	defer func() { <-s.ovChange }()
	return retryStale(ctx, s, op)
}

// PutOverride creates or replaces an override, validated against the
// limit as stored, after settling the buckets whose rule changes with it.
func (s *Store) PutOverride(ctx context.Context, limit string, o ledger.Override) (ledger.Override, error) {
	return changeOverrides(ctx, s, func(ctx context.Context) (ledger.Override, error) {
		cl, err := s.fetchLimit(ctx, limit)
		if err != nil {
			return ledger.Override{}, err
		}
		now := s.storeNow()
		if err := ledger.ValidateOverride(cl.l, o, now); err != nil {
			return ledger.Override{}, err
		}
		settled, err := s.settleOverride(ctx, cl, o.Pattern, &o, now)
		if err != nil {
			return ledger.Override{}, err
		}
		exp, terms := encodeOverride(o)
		res, err := s.overrideCall(ctx, "override_put", limit, strconv.FormatInt(cl.gen, 10)+":"+cl.version, o.Pattern, exp, terms)
		if err != nil {
			return ledger.Override{}, err
		}
		if res[0] == codeOverrideExpired {
			return ledger.Override{}, errOverrideExpired
		}
		s.forget(limit)
		if err := s.persist(ctx, settled); err != nil {
			return ledger.Override{}, err
		}
		return decodeOverride(o.Pattern, res[0])
	})
}

// GetOverride returns an override that applies at the store's clock.
func (s *Store) GetOverride(ctx context.Context, limit, pattern string) (ledger.Override, error) {
	if _, err := s.fetchLimit(ctx, limit); err != nil {
		return ledger.Override{}, err
	}
	v, err := s.client.HGet(ctx, s.k.overrides(limit), pattern).Result()
	if errors.Is(err, goredis.Nil) {
		return ledger.Override{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	if err != nil {
		return ledger.Override{}, s.fail(ctx, "get override", err)
	}
	o, err := decodeOverride(pattern, v)
	if err != nil {
		return ledger.Override{}, err
	}
	if !o.ActiveAt(s.storeNow()) {
		return ledger.Override{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	return o, nil
}

// ListOverrides lists up to n overrides that apply at the store's clock,
// with patterns after after, in byte order: pages of the patterns zset
// (ZRANGEBYLEX), then their values (HMGET), skipping expired ones.
func (s *Store) ListOverrides(ctx context.Context, limit, after string, n int) ([]ledger.Override, error) {
	if _, err := s.fetchLimit(ctx, limit); err != nil {
		return nil, err
	}
	now := s.storeNow()
	out := []ledger.Override{}
	for len(out) < n {
		min := "-"
		if after != "" {
			min = "(" + after
		}
		ps, err := s.client.ZRangeByLex(ctx, s.k.overridePatterns(limit), &goredis.ZRangeBy{Min: min, Max: "+", Count: int64(n - len(out))}).Result()
		if err != nil {
			return nil, s.fail(ctx, "list overrides", err)
		}
		if len(ps) == 0 {
			break
		}
		vs, err := s.client.HMGet(ctx, s.k.overrides(limit), ps...).Result()
		if err != nil {
			return nil, s.fail(ctx, "list overrides", err)
		}
		for i, p := range ps {
			v, ok := vs[i].(string)
			if !ok {
				continue // deleted in between
			}
			o, err := decodeOverride(p, v)
			if err != nil {
				return nil, err
			}
			if o.ActiveAt(now) {
				out = append(out, o)
			}
		}
		after = ps[len(ps)-1]
	}
	return out, nil
}

// DeleteOverride removes an override that applies at the store's clock,
// after settling the buckets whose rule changes.
func (s *Store) DeleteOverride(ctx context.Context, limit, pattern string) error {
	_, err := changeOverrides(ctx, s, func(ctx context.Context) (struct{}, error) {
		cl, err := s.fetchLimit(ctx, limit)
		if err != nil {
			return struct{}{}, err
		}
		now := s.storeNow()
		if o, ok := cl.ovs.get(pattern); !ok || !o.ActiveAt(now) {
			return struct{}{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
		}
		settled, err := s.settleOverride(ctx, cl, pattern, nil, now)
		if err != nil {
			return struct{}{}, err
		}
		res, err := s.overrideCall(ctx, "override_delete", limit, pattern)
		if err != nil {
			return struct{}{}, err
		}
		if res[0] == codeOverrideNotFound {
			return struct{}{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
		}
		s.forget(limit)
		return struct{}{}, s.persist(ctx, settled)
	})
	return err
}

// settleOverride settles at now, under the terms in force, every bucket of
// cl that pattern covers whose rule (leak rate, period, window) changes
// when pattern's override becomes o (nil: removed), as PutLimit settles
// the buckets of a new rule, and returns their keys. A change of capacity
// alone changes no rule unless another override of the set does: nothing
// is scanned then. Every bucket scanned keeps the switches at the expiries
// since its last write (switchBucket), which the set after the
// change may no longer find.
func (s *Store) settleOverride(ctx context.Context, cl cachedLimit, pattern string, o *ledger.Override, now time.Time) ([]string, error) {
	old, had := cl.ovs.get(pattern)
	rule := func(o ledger.Override) bool {
		return o.LeakPer != 0 || o.TZ != "" || o.StartDay != 0 || o.WindowLength != 0
	}
	// A change of capacity alone changes no rule unless another override
	// of the set does: one of capacity alone put over a key that a prefix
	// override of another rate covers (or deleted from it) moves the key
	// from that rate to the limit's (or back), as the memory store settles.
	if !(had && rule(old)) && !(o != nil && rule(*o)) && !cl.ovs.changesRules() {
		return nil, nil
	}
	// The set after the change: a copy of the candidates is enough per key.
	after := func(key string) ledger.Limit {
		set := &ledger.Overrides{}
		cl.ovs.candidates(key, func(c ledger.Override) bool {
			if c.Pattern != pattern {
				set.Put(c)
			}
			return true
		})
		if o != nil {
			set.Put(*o)
		}
		return ledger.TermsAt(&ledger.TermsInput{Limit: cl.l, Key: key, Overrides: set, Now: now}).Limit
	}
	prefix, isPrefix := ledger.Override{Pattern: pattern}.Prefix()
	base := s.k.gen(cl.gen) + ":b:"
	var settled []string
	var callErr error
	err := s.scanKeys(ctx, base+"*", func(ctx context.Context, _ goredis.Cmdable, ks []string) error {
		for _, bk := range ks {
			key, ok := decodeKey(strings.TrimPrefix(bk, base))
			if !ok || isPrefix && !strings.HasPrefix(key, prefix) || !isPrefix && key != prefix {
				continue
			}
			// First the switches at the expiries since the bucket's last
			// write (switchBucket), which the set after the change may no
			// longer find: a replaced override that changed the rule is
			// gone, and a new override more specific than the one that
			// expired hides it. The memory store settles every bucket it
			// looks at the same way.
			if err := s.switchBucket(ctx, bk, nil); err != nil {
				callErr = err
				return err
			}
			if termsAt(cl, key, now).Limit.SameRule(after(key)) {
				continue
			}
			t := target{lim: s.forKey(cl, key), bk: bk, hk: s.k.history(cl.gen, key), slot: slotOf(bk)}
			if _, err := s.call(ctx, "settle", false, nil, t, "", ledger.Idempotency{}); err != nil {
				callErr = err
				return err
			}
			settled = append(settled, bk, t.hk)
		}
		return nil
	})
	if callErr != nil {
		return nil, callErr
	}
	if err != nil {
		return nil, s.fail(ctx, "put override", err)
	}
	return settled, nil
}

// persist drops the TTLs of keys (settled buckets and their histories):
// they were set under the old rule, and the next write sets new ones.
func (s *Store) persist(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := s.client.Persist(ctx, k).Err(); err != nil {
			return s.fail(ctx, "put override", err)
		}
	}
	return nil
}
