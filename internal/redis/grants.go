package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// Grants live in their bucket's hash (G<id> fields, docs/redis.md), so a
// bucket function adds them to the bounds it admits against in the same
// call: a decision stays one function call on one hash slot, in Redis
// Cluster too. The functions answer the sum of a bucket's active grants
// beside its level (snapJSON.snapshot), and Go adds it to the capacity of
// the snapshot's limit (ledger.Limit.WithGrants), from which every number
// of a decision is derived, as for the memory store.

var _ ledger.GrantStore = (*Store)(nil)

// errGrantInvalid: the grant function refused a grant by the store's clock
// or the bucket's grants (grantRefusal).
var errGrantInvalid = errors.New("grant refused by the store's clock or grants")

// grantRefusal is errGrantInvalid with what the function saw: its clock
// and the sum of the bucket's active grants.
type grantRefusal struct {
	now    time.Time
	grants decimal.Decimal
}

func (e *grantRefusal) Error() string {
	return fmt.Sprintf("redis: %v (now %s, grants %s)", errGrantInvalid, e.now.Format(time.RFC3339Nano), e.grants)
}

func (e *grantRefusal) Unwrap() error { return errGrantInvalid }

// parseGrantRefusal reads the clock and grants of an E_GRANT_INVALID answer.
func parseGrantRefusal(now, grants string) error {
	t, err := parseMicros(now)
	if err != nil {
		return err
	}
	g, err := fromUnits(grants)
	if err != nil {
		return err
	}
	return &grantRefusal{now: t, grants: g}
}

// AddGrant adds a grant to a bucket's capacity in one function call.
// ledger.GrantExpiry validates it: here, at the instant before expiresAt
// (or budgetd's clock, for the default expiry), which runs every check that
// needs no clock against the limit (the amount, a missing or sub-µs
// expiry); the function then checks what needs the store's clock and the
// bucket's grants (the expiry in the future, the capacity with the grants
// within ledger.MaxAmount), atomically with the write, and when it refuses,
// GrantExpiry with that clock and those grants names the field.
func (s *Store) AddGrant(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, expiresAt time.Time, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.GrantOutcome, error) {
		t, err := s.target(ctx, ref)
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		l := t.lim.l
		probe, exp := s.goNow(), ""
		if !expiresAt.IsZero() {
			probe, exp = expiresAt.Add(-time.Microsecond), strconv.FormatInt(expiresAt.UnixMicro(), 10)
		}
		if _, err := ledger.GrantExpiry(l, amount, expiresAt, probe); err != nil {
			return ledger.GrantOutcome{}, err
		}
		var rnd [8]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return ledger.GrantOutcome{}, err
		}
		id := "g" + hex.EncodeToString(rnd[:])
		ik := s.k.idemBucket(t.lim.gen, ref.Key, idem.Scope, idem.Key)
		r, err := s.call(ctx, "grant_add", false, nil, t, ik, idem,
			units(amount), exp, units(ledger.MaxAmount.Sub(l.Capacity)), id, meta.JSON())
		if gr := (*grantRefusal)(nil); errors.As(err, &gr) {
			if _, err := ledger.GrantExpiry(l.WithGrants(gr.grants), amount, expiresAt, gr.now); err != nil {
				return ledger.GrantOutcome{}, err
			}
			return ledger.GrantOutcome{}, fmt.Errorf("redis: a grant ledger.GrantExpiry accepts was refused: %w", err)
		}
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		return grantOutcome(r, t.lim)
	})
}

// RevokeGrant removes an active grant in one function call.
func (s *Store) RevokeGrant(ctx context.Context, ref ledger.BucketRef, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.GrantOutcome, error) {
		t, err := s.target(ctx, ref)
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		ik := s.k.idemBucket(t.lim.gen, ref.Key, idem.Scope, idem.Key)
		r, err := s.call(ctx, "grant_revoke", false, nil, t, ik, idem, id, meta.JSON())
		if errors.Is(err, ledger.ErrGrantNotFound) {
			return ledger.GrantOutcome{}, fmt.Errorf("grant %q of %s/%s: %w", id, ref.Limit, ref.Key, ledger.ErrGrantNotFound)
		}
		if err != nil {
			return ledger.GrantOutcome{}, err
		}
		return grantOutcome(r, t.lim)
	})
}

// grantOutcome reads the answer of grant_add or grant_revoke: the grant and
// the history entry in x, the bucket under its new grants.
func grantOutcome(r reply, known cachedLimit) (ledger.GrantOutcome, error) {
	x, ids := r.decision()
	g, _, err := parseGrant(x)
	if err != nil {
		return ledger.GrantOutcome{}, err
	}
	sn, err := r.snapshot(known)
	if err != nil {
		return ledger.GrantOutcome{}, err
	}
	return ledger.GrantOutcome{Grant: g, EntryID: entryID(ids, 0), Snapshot: sn, Replayed: r.replayed}, nil
}

// ListGrants lists a bucket's grants active at the store's clock, oldest
// first (one read-only function call).
func (s *Store) ListGrants(ctx context.Context, ref ledger.BucketRef) ([]ledger.Grant, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) ([]ledger.Grant, error) {
		t, err := s.target(ctx, ref)
		if err != nil {
			return nil, err
		}
		r, err := s.call(ctx, "grant_list", true, nil, t, "", ledger.Idempotency{})
		if err != nil || r.x == "" {
			return nil, err
		}
		type seqGrant struct {
			g   ledger.Grant
			seq int64
		}
		var gs []seqGrant
		for _, line := range strings.Split(r.x, "\n") {
			g, seq, err := parseGrant(line)
			if err != nil {
				return nil, err
			}
			gs = append(gs, seqGrant{g, seq})
		}
		slices.SortFunc(gs, func(a, b seqGrant) int {
			return cmp.Or(a.g.CreatedAt.Compare(b.g.CreatedAt), cmp.Compare(a.seq, b.seq))
		})
		out := make([]ledger.Grant, len(gs))
		for i, g := range gs {
			out[i] = g.g
		}
		return out, nil
	})
}

// parseGrant reads a grant as the functions answer it (grant_str in
// budgetd.lua): "id|amount|expires|created|seq", and its order among the
// grants made in the same microsecond.
func parseGrant(s string) (ledger.Grant, int64, error) {
	f := strings.Split(s, "|")
	if len(f) != 5 {
		return ledger.Grant{}, 0, fmt.Errorf("redis: bad grant %q", s)
	}
	amount, err := fromUnits(f[1])
	if err != nil {
		return ledger.Grant{}, 0, err
	}
	exp, err1 := parseMicros(f[2])
	created, err2 := parseMicros(f[3])
	seq, err3 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return ledger.Grant{}, 0, fmt.Errorf("redis: bad grant %q: %w", s, err)
	}
	return ledger.Grant{ID: f[0], Amount: amount, CreatedAt: created, ExpiresAt: exp}, seq, nil
}
