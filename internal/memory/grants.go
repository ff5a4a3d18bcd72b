package memory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// activeGrants returns the grants of ref active at now, dropping the
// expired ones from the store. The caller holds limitsMu for writing.
func (s *Store) activeGrants(ref ledger.BucketRef, now time.Time) []ledger.Grant {
	gs := s.grants[ref]
	live := gs[:0]
	for _, g := range gs {
		if g.ActiveAt(now) {
			live = append(live, g)
		}
	}
	if len(live) == 0 {
		delete(s.grants, ref)
		return nil
	}
	s.grants[ref] = live
	return live
}

// grantPruneEvery is how many grants are made between two passes of
// pruneGrants: a pass costs one look at every bucket with grants, so each
// grant pays for about len(grants)/grantPruneEvery of them, and the grants
// of buckets never granted or revoked again do not stay forever.
const grantPruneEvery = 256

// pruneGrants drops every expired grant. The caller holds limitsMu for
// writing.
func (s *Store) pruneGrants(now time.Time) {
	for ref := range s.grants {
		s.activeGrants(ref, now)
	}
}

// AddGrant adds a grant to a bucket's capacity.
func (s *Store) AddGrant(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, expiresAt time.Time, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	return replay(s, ctx, idem, func(o *ledger.GrantOutcome) { o.Replayed = true }, func() (ledger.GrantOutcome, error) {
		s.limitsMu.Lock()
		defer s.limitsMu.Unlock()
		l, err := s.limit(ref.Limit)
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		now := s.clock()
		ref := ledger.BucketRef{Limit: l.Name, Key: strings.Clone(ref.Key)}
		live := s.activeGrants(ref, now)
		exp, err := ledger.GrantExpiry(s.terms(l, ref.Key, nil, now), amount, expiresAt, now)
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		g := ledger.Grant{ID: "g" + strconv.FormatInt(s.nextID.Add(1), 10), Amount: amount, CreatedAt: now, ExpiresAt: exp}
		s.grants[ref] = append(live, g)
		if s.grantWrites++; s.grantWrites%grantPruneEvery == 0 {
			s.pruneGrants(now)
		}
		return s.grantWritten(l, ref, g, ledger.EventGranted, now, meta), nil
	})
}

// grantWritten records ev of g in ref's history and returns the outcome
// with the bucket under its new terms. The caller holds limitsMu for
// writing.
func (s *Store) grantWritten(l ledger.Limit, ref ledger.BucketRef, g ledger.Grant, ev ledger.Event, now time.Time, meta ledger.Meta) ledger.GrantOutcome {
	sh := &s.shards[s.shardOf(ref)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := ledger.GrantOutcome{Grant: g}
	l = s.terms(l, ref.Key, sh.buckets[ref], now)
	if l.History {
		b := sh.bucketFor(l, ref)
		s.expireHolds(l, sh, b, now)
		if out.EntryID = s.record(l, b, now, ev, g.Amount, "", meta); out.EntryID != "" {
			h := b.history()
			h[len(h)-1].GrantID = g.ID
		}
		s.wrote(sh, now)
	}
	out.Snapshot = snapshot(l, sh.buckets[ref], now)
	return out
}

// ListGrants lists a bucket's active grants, oldest first.
func (s *Store) ListGrants(_ context.Context, ref ledger.BucketRef) ([]ledger.Grant, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	if _, err := s.limit(ref.Limit); err != nil {
		return nil, err
	}
	now := s.clock()
	var out []ledger.Grant
	for _, g := range s.grants[ref] {
		if g.ActiveAt(now) {
			out = append(out, g)
		}
	}
	return out, nil
}

// RevokeGrant removes an active grant.
func (s *Store) RevokeGrant(ctx context.Context, ref ledger.BucketRef, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	return replay(s, ctx, idem, func(o *ledger.GrantOutcome) { o.Replayed = true }, func() (ledger.GrantOutcome, error) {
		s.limitsMu.Lock()
		defer s.limitsMu.Unlock()
		l, err := s.limit(ref.Limit)
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		now := s.clock()
		live := s.activeGrants(ref, now)
		for i, g := range live {
			if g.ID != id {
				continue
			}
			if rest := append(live[:i:i], live[i+1:]...); len(rest) > 0 {
				s.grants[ref] = rest
			} else {
				delete(s.grants, ref)
			}
			return s.grantWritten(l, ref, g, ledger.EventRevoked, now, meta), nil
		}
		return ledger.GrantOutcome{}, fmt.Errorf("grant %q of %s/%s: %w", id, ref.Limit, ref.Key, ledger.ErrGrantNotFound)
	})
}
