package mysql

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

var (
	_ ledger.GrantStore    = (*Store)(nil)
	_ ledger.RolloverStore = (*Store)(nil)
)

// ServesRollover marks the store as a ledger.RolloverStore: a bucket's
// rollover carry lives in its row (extra), kept at its first write of a
// period, and every decision adds the rollover it receives (termsAt).
func (s *Store) ServesRollover() {}

// A bucket's grants live in its row (extra), so every decision on the
// bucket reads them with its state and decides with its terms at now; a
// grant or a revocation is a write of the bucket like any other.

// newGrantID returns a fresh grant id: "g" and 24 random hex digits.
func newGrantID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "g" + hex.EncodeToString(b[:])
}

// AddGrant adds a grant to a bucket's capacity.
func (s *Store) AddGrant(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, expiresAt time.Time, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	id := newGrantID() // one id for every attempt: it is written once
	var out ledger.GrantOutcome
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		out = ledger.GrantOutcome{}
		live := activeGrants(v.buckets[0].grants, v.now)
		// The grant's bound counts the capacity and the grants, not the
		// rollover the bucket receives (docs/terms.md "Rollover").
		terms := v.limits[0].limit
		terms.Capacity = terms.Capacity.Sub(terms.Received)
		exp, err := ledger.GrantExpiry(terms, amount, expiresAt, v.now)
		if err != nil {
			return err
		}
		g := ledger.Grant{ID: id, Amount: amount, CreatedAt: v.now, ExpiresAt: exp}
		v.grantWritten(append(live, g), g, ledger.EventGranted, meta, &out)
		return v.recordIdem(idem, &out)
	}, withIdem(idem))
	if err := replayed(err, &out); err != nil {
		return ledger.GrantOutcome{}, err
	}
	return out, nil
}

// RevokeGrant removes an active grant.
func (s *Store) RevokeGrant(ctx context.Context, ref ledger.BucketRef, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out ledger.GrantOutcome
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		out = ledger.GrantOutcome{}
		live := activeGrants(v.buckets[0].grants, v.now)
		for i, g := range live {
			if g.ID == id {
				v.grantWritten(append(live[:i:i], live[i+1:]...), g, ledger.EventRevoked, meta, &out)
				return v.recordIdem(idem, &out)
			}
		}
		return fmt.Errorf("grant %q of %s/%s: %w", id, ref.Limit, ref.Key, ledger.ErrGrantNotFound)
	}, withIdem(idem))
	if err := replayed(err, &out); err != nil {
		return ledger.GrantOutcome{}, err
	}
	return out, nil
}

// grantWritten stores gs as bucket 0's grants after ev of g, records the
// entry and sets out with the bucket under its new terms
// (memory.Store.grantWritten).
func (v *view) grantWritten(gs []ledger.Grant, g ledger.Grant, ev ledger.Event, meta ledger.Meta, out *ledger.GrantOutcome) {
	v.buckets[0].grants = gs
	v.dirty[0] = true
	v.terms(0)
	out.Grant = g
	if v.limits[0].limit.History {
		if ns, expired := bucket.Expire(v.buckets[0].state, v.now); len(expired) > 0 {
			v.expire(0, expired)
			v.set(0, ns)
		}
		out.EntryID = v.recordAt(0, v.now, ev, g.Amount, "", meta, false)
		v.entries[0][len(v.entries[0])-1].grant = g.ID
	}
	out.Snapshot = v.snapshot(0)
}

// activeGrants returns the grants of gs active at now, oldest first.
func activeGrants(gs []ledger.Grant, now time.Time) []ledger.Grant {
	var out []ledger.Grant
	for _, g := range gs {
		if g.ActiveAt(now) {
			out = append(out, g)
		}
	}
	return out
}

// ListGrants lists a bucket's active grants, oldest first. It writes
// nothing.
func (s *Store) ListGrants(ctx context.Context, ref ledger.BucketRef) ([]ledger.Grant, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out []ledger.Grant
	err := s.decide(ctx, []ledger.BucketRef{ref}, func(v *view) error {
		out = activeGrants(v.buckets[0].grants, v.now)
		return nil
	})
	return out, err
}
