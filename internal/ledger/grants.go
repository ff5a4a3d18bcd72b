package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// Grant is a top-up of one bucket's capacity (SPEC "Terms per customer"):
// Amount is added to the bucket's capacity from CreatedAt until ExpiresAt,
// an instant of the store's clock from which it counts no more.
type Grant struct {
	ID        string
	Amount    decimal.Decimal
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ActiveAt reports whether g counts at now.
func (g Grant) ActiveAt(now time.Time) bool { return now.Before(g.ExpiresAt) }

// ErrGrantNotFound: the bucket has no active grant of that id (404
// grant_not_found).
var ErrGrantNotFound = errors.New("grant not found")

// The history events of grants.
const (
	// EventGranted is a grant added to the bucket: its amount and id.
	EventGranted Event = "granted"
	// EventRevoked is a grant revoked before it expired: its amount and id.
	EventRevoked Event = "revoked"
)

// ActiveGrants returns the sum of the grants of gs active at now.
func ActiveGrants(gs []Grant, now time.Time) decimal.Decimal {
	var sum decimal.Decimal
	for _, g := range gs {
		if g.ActiveAt(now) {
			sum = sum.Add(g.Amount)
		}
	}
	return sum
}

// WithGrants returns l, a bucket's effective limit (the limit or its
// override applied), with sum, its active grants, added to its capacity and
// recorded in Grants. With no grants l is returned as it is.
func (l Limit) WithGrants(sum decimal.Decimal) Limit {
	if sum.Sign() == 0 {
		return l
	}
	l.Grants = sum
	l.Capacity = l.Capacity.Add(sum)
	return l
}

// GrantExpiry validates a grant of amount with expiry expiresAt (zero for
// the default) on a bucket whose effective limit at now is l (its active
// grants included), and returns the expiry: expiresAt, or the end of the
// current period of a periodic limit. Errors name the field.
func GrantExpiry(l Limit, amount decimal.Decimal, expiresAt, now time.Time) (time.Time, error) {
	if err := checkAmount("amount", amount, true); err != nil {
		return time.Time{}, err
	}
	if aboveMax(l.Capacity.Add(amount)) {
		return time.Time{}, invalid(CodeInvalidAmount, "amount", "the bucket's capacity with this grant would pass %s", MaxAmount)
	}
	if expiresAt.IsZero() {
		if l.Period == nil {
			return time.Time{}, invalid(CodeInvalidRequest, "expires_at", "is required: the limit is not periodic")
		}
		_, end := l.Period.stored().Bounds(now)
		return end.UTC(), nil
	}
	if !expiresAt.After(now) {
		return time.Time{}, invalid(CodeInvalidRequest, "expires_at", "%s is not in the future", expiresAt.UTC().Format(time.RFC3339Nano))
	}
	if expiresAt.Nanosecond()%int(time.Microsecond) != 0 {
		return time.Time{}, invalid(CodeInvalidRequest, "expires_at", "must be a whole number of microseconds")
	}
	return expiresAt.UTC(), nil
}

// GrantOutcome is what a store answers to AddGrant and RevokeGrant: the
// grant, the history entry written ("" for none) and whether it is a
// replay of an earlier call with the same Idempotency-Key.
type GrantOutcome struct {
	Grant    Grant
	EntryID  string
	Snapshot Snapshot
	Replayed bool
}

// GrantStore is a Store that keeps grants and decides every call on a
// bucket with its active grants added to the capacity of its effective
// limit (Limit.WithGrants), at the store's clock of the call. A store that
// is not one refuses grants (ErrNotServed).
type GrantStore interface {
	Store
	// AddGrant adds a grant of amount to ref's bucket until expiresAt (zero:
	// the end of the current period, GrantExpiry validates inside the
	// step), records it as a granted entry and returns it with a new ID.
	AddGrant(ctx context.Context, ref BucketRef, amount decimal.Decimal, expiresAt time.Time, idem Idempotency, meta Meta) (GrantOutcome, error)
	// ListGrants returns the bucket's active grants, oldest first.
	ListGrants(ctx context.Context, ref BucketRef) ([]Grant, error)
	// RevokeGrant removes an active grant (ErrGrantNotFound when there is
	// none of that id) and records a revoked entry.
	RevokeGrant(ctx context.Context, ref BucketRef, id string, idem Idempotency, meta Meta) (GrantOutcome, error)
}

// GrantsOf returns the GrantStore that st is or wraps (through Unwrap
// methods), and false when there is none.
func GrantsOf(st Store) (GrantStore, bool) {
	return As[GrantStore](st)
}

// GrantResult is the answer to a grant or a revocation.
type GrantResult struct {
	Grant    Grant
	Bucket   BucketState
	EntryID  string
	Replayed bool
}

func (s *Service) grants() (GrantStore, error) {
	gs, ok := GrantsOf(s.store)
	if !ok {
		return nil, fmt.Errorf("grants: %w", ErrNotServed)
	}
	return gs, nil
}

// AddGrant adds amount to a bucket's capacity until expiresAt (zero for the
// end of the current period of a periodic limit).
func (s *Service) AddGrant(ctx context.Context, ref BucketRef, amount decimal.Decimal, expiresAt time.Time, idem Idempotency, meta Meta) (GrantResult, error) {
	if err := validateRef(ref); err != nil {
		return GrantResult{}, err
	}
	if err := checkAmount("amount", amount, true); err != nil {
		return GrantResult{}, err
	}
	if err := ValidateMeta("meta", meta); err != nil {
		return GrantResult{}, err
	}
	gs, err := s.grants()
	if err != nil {
		return GrantResult{}, err
	}
	out, err := gs.AddGrant(ctx, ref, amount, expiresAt, idem, meta)
	if err != nil {
		return GrantResult{}, err
	}
	return GrantResult{Grant: out.Grant, Bucket: StateOf(out.Snapshot), EntryID: out.EntryID, Replayed: out.Replayed}, nil
}

// ListGrants returns a bucket's active grants.
func (s *Service) ListGrants(ctx context.Context, ref BucketRef) ([]Grant, error) {
	if err := validateRef(ref); err != nil {
		return nil, err
	}
	gs, err := s.grants()
	if err != nil {
		return nil, err
	}
	return gs.ListGrants(ctx, ref)
}

// RevokeGrant removes a bucket's active grant id.
func (s *Service) RevokeGrant(ctx context.Context, ref BucketRef, id string, idem Idempotency, meta Meta) (GrantResult, error) {
	if err := validateRef(ref); err != nil {
		return GrantResult{}, err
	}
	if id == "" || len(id) > MaxKeyBytes {
		return GrantResult{}, fmt.Errorf("grant %q: %w", clip(id), ErrGrantNotFound)
	}
	if err := ValidateMeta("meta", meta); err != nil {
		return GrantResult{}, err
	}
	gs, err := s.grants()
	if err != nil {
		return GrantResult{}, err
	}
	out, err := gs.RevokeGrant(ctx, ref, id, idem, meta)
	if err != nil {
		return GrantResult{}, err
	}
	return GrantResult{Grant: out.Grant, Bucket: StateOf(out.Snapshot), EntryID: out.EntryID, Replayed: out.Replayed}, nil
}
