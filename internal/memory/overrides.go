package memory

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
)

// terms returns l as it applies to the bucket b of key at now (b nil for
// a bucket not looked up, or not stored): ledger.TermsAt of what the store
// keeps for it. When the ends of temporary rule changes since b's last
// write settled it (ledger.Terms.Settled), the settled state is applied
// to b first, and the holds those ends expired are recorded as expired:
// the store writes nothing at an expiry, so whichever call next looks at
// the bucket under its terms (a decision, a read, the sweeper, a change
// of terms) settles it, and every later reading of it is the same. The
// caller holds limitsMu for reading, and b's shard lock when b is not nil.
func (s *Store) terms(l ledger.Limit, key string, b *bucketRec, now time.Time) ledger.Limit {
	in := ledger.TermsInput{Limit: l, Key: key, Now: now}
	if set := s.overrides[l.Name]; set.Len() > 0 {
		in.Overrides = set
	}
	if b != nil && b.updated != 0 {
		in.State, in.Carry = b.state(), b.carry()
	}
	if len(s.grants) > 0 {
		in.Grants = s.grants[ledger.BucketRef{Limit: l.Name, Key: key}]
	}
	t := ledger.TermsAt(&in)
	if t.Settled {
		s.apply(l, &s.shards[s.shardOf(ledger.BucketRef{Limit: l.Name, Key: key})], b, t.State, t.Expired)
	}
	return t.Limit
}

// ServesRollover marks the memory store as a ledger.RolloverStore.
func (s *Store) ServesRollover() {}

// PutOverride creates or replaces an override, settling the buckets whose
// rule changes with it.
func (s *Store) PutOverride(_ context.Context, limit string, o ledger.Override) (ledger.Override, error) {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l, err := s.limit(limit)
	if err != nil {
		return ledger.Override{}, err
	}
	now := s.clock()
	if err := ledger.ValidateOverride(l, o, now); err != nil {
		return ledger.Override{}, err
	}
	set := s.overrides[limit]
	if set == nil {
		set = &ovset.Set{}
		s.overrides[limit] = set
	}
	o.CreatedAt, o.UpdatedAt = now, now
	if old, ok := set.Get(o.Pattern); ok && old.ActiveAt(now) {
		o.CreatedAt = old.CreatedAt
	}
	s.changeTerms(l, set, o.Pattern, now, set.ChangesRules() || ovset.ChangesRule(o), func() { set.Put(o) })
	return o, nil
}

// GetOverride returns an unexpired override.
func (s *Store) GetOverride(_ context.Context, limit, pattern string) (ledger.Override, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	if _, err := s.limit(limit); err != nil {
		return ledger.Override{}, err
	}
	o, ok := s.overrides[limit].Get(pattern)
	if !ok || !o.ActiveAt(s.clock()) {
		return ledger.Override{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	return o, nil
}

// ListOverrides lists a limit's unexpired overrides by pattern.
func (s *Store) ListOverrides(_ context.Context, limit, after string, n int) ([]ledger.Override, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	if _, err := s.limit(limit); err != nil {
		return nil, err
	}
	return s.overrides[limit].List(after, n, s.clock()), nil
}

// DeleteOverride removes an unexpired override, settling the buckets whose
// rule changes.
func (s *Store) DeleteOverride(_ context.Context, limit, pattern string) error {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l, err := s.limit(limit)
	if err != nil {
		return err
	}
	now := s.clock()
	set := s.overrides[limit]
	o, ok := set.Get(pattern)
	if !ok || !o.ActiveAt(now) {
		return fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	s.changeTerms(l, set, pattern, now, set.ChangesRules(), func() { set.Delete(pattern) })
	return nil
}

// changeTerms runs change (a write to set) and settles at now, under the
// rule in force before it, every bucket of l that pattern covers whose rule
// changes with it and whose stored level is positive, as PutLimit does
// (switchLimit). A change of capacity alone writes no bucket, and when no
// rule can change (rule false: neither the set before nor the new
// override changes one, so every bucket keeps the limit's rule) no bucket
// is even looked at, so that putting many overrides does not scan every
// bucket of the store for each. The caller holds limitsMu for writing.
func (s *Store) changeTerms(l ledger.Limit, set *ovset.Set, pattern string, now time.Time, rule bool, change func()) {
	if !rule {
		change()
		return
	}
	prefix, isPrefix := ledger.Override{Pattern: pattern}.Prefix()
	type pending struct {
		sh  *shard
		ref ledger.BucketRef
		b   *bucketRec
		old ledger.Limit
	}
	var todo []pending
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ref, b := range sh.buckets {
			if ref.Limit != l.Name || b.level.Sign() <= 0 {
				continue
			}
			if isPrefix && !strings.HasPrefix(ref.Key, prefix) || !isPrefix && ref.Key != prefix {
				continue
			}
			todo = append(todo, pending{sh, ref, b, s.terms(l, ref.Key, b, now)})
		}
		sh.mu.Unlock()
	}
	change()
	for _, p := range todo {
		if p.old.SameRule(set.Effective(l, p.ref.Key, now)) {
			continue
		}
		p.sh.mu.Lock()
		ns, expired := bucket.Switch(p.old.Rule(), p.b.state(), now)
		s.apply(p.old, p.sh, p.b, ns, expired)
		p.sh.mu.Unlock()
	}
}
